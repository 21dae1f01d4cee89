//! A nested-loop join evaluates its filter for one left row against a right batch, row after
//! row, until it has a batch of output to give. With a selective filter (`ON a + b = 7` over two
//! 100,000-row inputs) one poll of it computes for seconds, and a statement stopped meanwhile
//! (its deadline, an interrupt, its caller gone) went on computing until that poll ended,
//! holding a thread other users' work was waiting for. This rule wraps the filter of every
//! nested-loop join in [`Stoppable`], which checks the statement's stop before each evaluation:
//! a thread-local and an atomic load per left row's batch of pairs, and the join ends with the
//! stop's error at its next row.
//!
//! Worth taking upstream: the join's probe loop could check a cancellation token (or give way
//! to the runtime) every so many rows; a wrapped filter is the extension point it offers today.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::datatypes::{FieldRef, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::sort_properties::ExprProperties;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{NestedLoopJoinExec, NestedLoopJoinExecBuilder};
use datafusion::physical_plan::ExecutionPlan;

/// Wraps the filter of every nested-loop join in [`Stoppable`].
#[derive(Debug)]
pub(crate) struct JoinStopCheck;

impl PhysicalOptimizerRule for JoinStopCheck {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some(filter) = join.filter() else {
                return Ok(Transformed::no(node));
            };
            if filter.expression().downcast_ref::<Stoppable>().is_some() {
                return Ok(Transformed::no(node));
            }
            let stoppable = JoinFilter::new(
                Arc::new(Stoppable {
                    inner: Arc::clone(filter.expression()),
                }),
                filter.column_indices().to_vec(),
                Arc::clone(filter.schema()),
            );
            // Everything else as it was (the builder carries every field the join is made of).
            let rebuilt = NestedLoopJoinExecBuilder::from(join)
                .with_filter(Some(stoppable))
                .build()?;
            Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "mindlite_join_stop_check"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// An expression that fails with its statement's stop before it is evaluated, and is
/// otherwise `inner` (shown as it, so plans read the same).
#[derive(Debug, Eq)]
pub(crate) struct Stoppable {
    inner: Arc<dyn PhysicalExpr>,
}

impl PartialEq for Stoppable {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl Hash for Stoppable {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl fmt::Display for Stoppable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl PhysicalExpr for Stoppable {
    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        crate::cancel::check()?;
        self.inner.evaluate(batch)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match <[_; 1]>::try_from(children) {
            Ok([inner]) => Ok(Arc::new(Stoppable { inner })),
            Err(children) => Err(datafusion::error::DataFusionError::Internal(format!(
                "a stoppable expression has one child, not {}",
                children.len()
            ))),
        }
    }

    fn evaluate_bounds(&self, children: &[&Interval]) -> Result<Interval> {
        match children {
            [inner] => Ok((*inner).clone()),
            _ => self.inner.evaluate_bounds(children),
        }
    }

    fn get_properties(&self, children: &[ExprProperties]) -> Result<ExprProperties> {
        match children {
            [inner] => Ok(inner.clone()),
            _ => Ok(ExprProperties::new_unknown()),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{self, Account, Stop};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// The join's filter, if the plan has a nested-loop join.
    fn join_filter(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn PhysicalExpr>> {
        if let Some(join) = plan.downcast_ref::<NestedLoopJoinExec>() {
            return join.filter().map(|f| Arc::clone(f.expression()));
        }
        plan.children().into_iter().find_map(join_filter)
    }

    async fn plan(context: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let frame = context.sql(sql).await.unwrap();
        frame.create_physical_plan().await.unwrap()
    }

    #[tokio::test]
    async fn a_nested_loop_join_ends_with_its_statements_stop_at_the_next_row() {
        let context = |rule: bool| {
            let mut builder = SessionStateBuilder::new()
                .with_default_features()
                .with_config(SessionConfig::new().with_target_partitions(1));
            if rule {
                builder = builder.with_physical_optimizer_rule(Arc::new(JoinStopCheck));
            }
            SessionContext::new_with_state(builder.build())
        };
        let sql = "SELECT count(*) FROM generate_series(1, 300) AS a \
                   CROSS JOIN generate_series(1, 300) AS b WHERE a.value + b.value = 7";
        let plain = plan(&context(false), sql).await;
        let checked_context = context(true);
        let checked = plan(&checked_context, sql).await;
        let filter = join_filter(&checked).expect("the plan joins in a nested loop");
        assert!(filter.downcast_ref::<Stoppable>().is_some(), "{filter:?}");
        // The plan reads as it did.
        assert_eq!(
            displayable(plain.as_ref()).indent(true).to_string(),
            displayable(checked.as_ref()).indent(true).to_string()
        );

        // Nothing stops it: the same answer (the pairs of 1..=300 that add up to 7).
        let task = checked_context.task_ctx();
        let batches = collect(checked, Arc::clone(&task)).await.unwrap();
        let counted = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(counted.contains("| 6 "), "{counted}");

        // Its statement is stopped (its deadline passed): the join ends with that, not with
        // its rows. The join runs in this task, for the account current here.
        let fresh = plan(&checked_context, sql).await;
        let statement = Account::open(None, None).unwrap();
        assert!(statement.stop(Stop::Deadline));
        let stopped = {
            let _entered = memory::enter(statement.tag());
            collect(fresh, task).await
        };
        let message = stopped.unwrap_err().to_string();
        assert!(
            message.contains("query.statement_timeout_secs"),
            "{message}"
        );
    }
}
