//! Predictions by join: `SELECT t.*, m.y FROM db.t AS t JOIN p.m AS m` (MindsDB's batch
//! prediction). DataFusion plans the join as a cross join with the model's table; an analyzer
//! rule replaces that join with a [`PredictNode`] over the other side, whose operator
//! ([`PredictExec`]) takes each batch of rows, fills the model's columns from the columns of
//! the same name (cast to the types the model was trained on) and appends the prediction. It
//! streams, batch in and batch out, so predicting over a large table holds one batch at a time.
//! A model joined any other way (ON, OUTER) is refused: MindsDB joins models only like this.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, JoinType, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};

use super::exec::{Layout, PredictExec};
use super::model::PredictModel;
use super::predict::ModelTable;

/// Rewrites `other JOIN model` (and `model JOIN other`) into a [`PredictNode`].
#[derive(Debug)]
pub(crate) struct PredictJoinRule;

impl AnalyzerRule for PredictJoinRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let LogicalPlan::Join(join) = &plan else {
                return Ok(Transformed::no(plan));
            };
            let (left, right) = (model_of(&join.left)?, model_of(&join.right)?);
            let (model, model_first) = match (left, right) {
                (_, Some(model)) => (model, false),
                (Some(model), None) => (model, true),
                (None, None) => return Ok(Transformed::no(plan)),
            };
            let plain = join.on.is_empty()
                && join.filter.is_none()
                && matches!(join.join_type, JoinType::Inner);
            if !plain {
                return Err(DataFusionError::Plan(format!(
                    "Model '{}' is joined with a condition (ON, USING, NATURAL) or as an outer join; predict by joining it plainly: FROM t JOIN {}.{} AS m",
                    model.model.name, model.model.project, model.model.name
                )));
            }
            let input = if model_first {
                join.right.as_ref().clone()
            } else {
                join.left.as_ref().clone()
            };
            // A time-series model adds future rows whose columns of the rows are NULL but
            // for the group and order: every column may be NULL there.
            let schema = if super::series::forecaster(&model).is_some() {
                let fields = join
                    .schema
                    .iter()
                    .map(|(qualifier, field)| {
                        (
                            qualifier.cloned(),
                            Arc::new(field.as_ref().clone().with_nullable(true)),
                        )
                    })
                    .collect();
                Arc::new(DFSchema::new_with_metadata(
                    fields,
                    join.schema.metadata().clone(),
                )?)
            } else {
                Arc::clone(&join.schema)
            };
            let node = PredictNode {
                input,
                model,
                model_first,
                schema,
            };
            Ok(Transformed::yes(LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            })))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "predict_join"
    }
}

/// The model a plan scans, looking through an alias.
fn model_of(plan: &LogicalPlan) -> DfResult<Option<Arc<PredictModel>>> {
    match plan {
        LogicalPlan::SubqueryAlias(alias) => model_of(&alias.input),
        // A source that is no provider (none exist today) is no model either.
        LogicalPlan::TableScan(scan) => {
            Ok(source_as_provider(&scan.source).ok().and_then(|provider| {
                provider
                    .downcast_ref::<ModelTable>()
                    .map(|t| Arc::clone(&t.0))
            }))
        }
        _ => Ok(None),
    }
}

/// Rows of `input` with the model's columns appended (or put first, as the query joined
/// them); the schema is the join's.
#[derive(Debug)]
pub(crate) struct PredictNode {
    input: LogicalPlan,
    model: Arc<PredictModel>,
    model_first: bool,
    schema: DFSchemaRef,
}

impl PredictNode {
    fn key(&self) -> (&LogicalPlan, u64, bool, &DFSchemaRef) {
        (
            &self.input,
            self.model.model.id,
            self.model_first,
            &self.schema,
        )
    }
}

impl PartialEq for PredictNode {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for PredictNode {}

impl Hash for PredictNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialOrd for PredictNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.input.partial_cmp(&other.input)? {
            Ordering::Equal => Some(
                (self.model.model.id, self.model_first)
                    .cmp(&(other.model.model.id, other.model_first)),
            ),
            unequal => Some(unequal),
        }
    }
}

impl UserDefinedLogicalNodeCore for PredictNode {
    fn name(&self) -> &str {
        "Predict"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    // A condition on the joined rows' columns alone goes below, so rows it drops are never
    // predicted (with an LLM model, never paid for). DataFusion compares unqualified names, so
    // a row column named like a model column stays above, which is merely slower.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        self.model
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let m = &self.model.model;
        write!(f, "Predict: {}.{} version {}", m.project, m.name, m.version)
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        let [input] = <[LogicalPlan; 1]>::try_from(inputs)
            .map_err(|_| DataFusionError::Internal("Predict takes one input".to_string()))?;
        Ok(PredictNode {
            input,
            model: Arc::clone(&self.model),
            model_first: self.model_first,
            schema: Arc::clone(&self.schema),
        })
    }

    // One row out per row in: a LIMIT above may go below, so no more rows are predicted than
    // are returned. Not for a time-series model: its rows are the history every forecast
    // reads, and it adds rows of its own.
    fn supports_limit_pushdown(&self) -> bool {
        super::series::forecaster(&self.model).is_none()
    }
}

/// Plans a [`PredictNode`] into a [`PredictExec`].
#[derive(Debug)]
pub(crate) struct PredictPlanner;

#[async_trait]
impl ExtensionPlanner for PredictPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<PredictNode>() else {
            return Ok(None);
        };
        let [input] = physical_inputs else {
            return Err(DataFusionError::Internal(
                "Predict takes one input".to_string(),
            ));
        };
        Ok(Some(Arc::new(PredictExec::new(
            Arc::clone(input),
            Arc::clone(&node.model),
            Layout::of_join(node.model_first),
            Arc::new(node.schema.as_arrow().clone()),
        )?)))
    }
}
