//! Output order without ORDER BY. DataFusion merges parallel partitions in arrival order; where
//! the partitions are independent pipelines (scans of consecutive chunk ranges, UNION branches)
//! we emit them in partition order instead, so `SELECT * FROM t` returns rows in insertion order
//! as SQLite and DuckDB users expect. Later partitions prefetch a few batches each, so memory
//! stays bounded. Below a repartition, in-order reading could make the repartition buffer
//! without bound, so those plans keep DataFusion's merge.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan, ExecutionPlanProperties};
use futures::StreamExt;

/// Batches each later partition may compute ahead of the one being emitted.
const PREFETCH: usize = 2;

/// Executes `plan`, preserving partition order when that is safe.
pub(crate) fn execute(
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let partitions = plan.output_partitioning().partition_count();
    if partitions <= 1 || has_repartition(plan.as_ref()) {
        return execute_stream(plan, context);
    }
    let schema = plan.schema();
    // bounded: the plan's partitions (query.target_partitions)
    let mut parts = Vec::with_capacity(partitions);
    for partition in 0..partitions {
        let mut stream = plan.execute(partition, Arc::clone(&context))?;
        let (sender, mut receiver) = tokio::sync::mpsc::channel(PREFETCH);
        let task = crate::memory::spawn(async move {
            while let Some(batch) = stream.next().await {
                let failed = batch.is_err();
                if sender.send(batch).await.is_err() || failed {
                    break;
                }
            }
        });
        // When the channel closes, the task's fate decides: a panic or cancellation becomes an
        // error item instead of a silently shorter result.
        let batches = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
        let outcome = futures::stream::once(async move {
            task.await.err().map(|e| {
                Err(DataFusionError::Execution(format!(
                    "a query task failed: {e}"
                )))
            })
        })
        .filter_map(futures::future::ready);
        parts.push(batches.chain(outcome).boxed());
    }
    let ordered = futures::stream::iter(parts).flatten();
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, ordered)))
}

fn has_repartition(plan: &dyn ExecutionPlan) -> bool {
    plan.name() == "RepartitionExec"
        || plan
            .children()
            .into_iter()
            .any(|child| has_repartition(child.as_ref()))
}
