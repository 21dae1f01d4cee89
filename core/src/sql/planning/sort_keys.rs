//! A physical optimizer rule for sorts whose input has no columns (`row_number() OVER (ORDER BY
//! random())` over a generated series, say). DataFusion's sort reserves memory by the size of
//! the batches it buffers, not of the sort keys it computes from them, so such a sort counts
//! nothing against the memory limit, never spills, and holds every key and index in memory:
//! gigabytes for a query of a few words. The rule computes the keys as columns first, so they
//! are counted (and spilled), and drops them after the sort. (Worth taking upstream: the
//! sort's reservation could count its key arrays.)

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;

/// Computes the keys of a sort over zero columns as columns of its input.
#[derive(Debug)]
pub(crate) struct SortKeysAsColumns;

impl PhysicalOptimizerRule for SortKeysAsColumns {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            if !sort.input().schema().fields().is_empty() {
                return Ok(Transformed::no(node));
            }
            let keys: Vec<ProjectionExpr> = sort
                .expr()
                .iter()
                .enumerate()
                .map(|(i, key)| ProjectionExpr {
                    expr: Arc::clone(&key.expr),
                    alias: format!("sort_key_{i}"),
                })
                .collect();
            let count = keys.len();
            let with_keys = Arc::new(ProjectionExec::try_new(keys, Arc::clone(sort.input()))?);
            let ordering = sort.expr().iter().enumerate().map(|(i, key)| {
                PhysicalSortExpr::new(
                    Arc::new(Column::new(&format!("sort_key_{i}"), i)),
                    key.options,
                )
            });
            let Some(ordering) = LexOrdering::new(ordering) else {
                return Ok(Transformed::no(node));
            };
            debug_assert_eq!(ordering.len(), count);
            let sorted = SortExec::new(ordering, with_keys)
                .with_fetch(sort.fetch())
                .with_preserve_partitioning(sort.preserve_partitioning());
            // Back to no columns, as the sort's parent expects.
            let without = ProjectionExec::try_new(Vec::<ProjectionExpr>::new(), Arc::new(sorted))?;
            Ok(Transformed::yes(Arc::new(without) as Arc<dyn ExecutionPlan>))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "sort_keys_as_columns"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
