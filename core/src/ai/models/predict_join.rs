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
use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast_with_options;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::DFSchemaRef;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, Extension, JoinType, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;

use super::predict::{ModelTable, PredictModel, STRICT};
use crate::sql::session::connector;

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
            let node = PredictNode {
                input,
                model,
                model_first,
                schema: Arc::clone(&join.schema),
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
    // are returned.
    fn supports_limit_pushdown(&self) -> bool {
        true
    }
}

/// Plans queries with [`PredictNode`]s.
#[derive(Debug)]
pub(crate) struct Planner;

#[async_trait]
impl QueryPlanner for Planner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(PredictPlanner)])
            .create_physical_plan(logical_plan, session)
            .await
    }
}

struct PredictPlanner;

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

/// Where the model's columns go in [`PredictExec`]'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// After the input's columns (`t JOIN m`).
    After,
    /// Before them (`m JOIN t`).
    Before,
    /// Alone: the input is a row of the model's own columns (`SELECT y FROM m WHERE x = 1`).
    Only,
}

impl Layout {
    fn of_join(model_first: bool) -> Layout {
        if model_first {
            Layout::Before
        } else {
            Layout::After
        }
    }
}

/// A plan that predicts for `row` (a batch of the model's columns, the target's NULL) when it
/// runs, not when it is planned: `EXPLAIN` calls no provider.
pub(crate) fn single_prediction(
    model: Arc<PredictModel>,
    row: RecordBatch,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let schema = Arc::clone(&model.schema);
    let input = MemorySourceConfig::try_new_exec(&[vec![row]], Arc::clone(&schema), None)?;
    Ok(Arc::new(PredictExec::new(
        input,
        model,
        Layout::Only,
        schema,
    )?))
}

/// The operator: each input batch out again with the model's columns, predicted.
#[derive(Debug)]
struct PredictExec {
    input: Arc<dyn ExecutionPlan>,
    model: Arc<PredictModel>,
    layout: Layout,
    /// For each model column, the input column of the same name, if any.
    sources: Vec<Option<usize>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl PredictExec {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        model: Arc<PredictModel>,
        layout: Layout,
        schema: SchemaRef,
    ) -> DfResult<Self> {
        let input_schema = input.schema();
        let target = &model.model.predict;
        let mut sources = Vec::new();
        for field in model.schema.fields() {
            if field.name().eq_ignore_ascii_case(target) {
                sources.push(None);
                continue;
            }
            let mut matching = input_schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| f.name().eq_ignore_ascii_case(field.name()));
            let found = matching.next().map(|(i, _)| i);
            if matching.next().is_some() {
                return Err(DataFusionError::Plan(format!(
                    "The rows joined with model '{}' have two columns named '{}'; select one of them in a subquery",
                    model.model.name,
                    field.name()
                )));
            }
            sources.push(found);
        }
        if sources.iter().all(Option::is_none) {
            let inputs: Vec<&str> = model
                .schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .filter(|n| !n.eq_ignore_ascii_case(target))
                .collect();
            return Err(DataFusionError::Plan(format!(
                "The rows joined with model '{}' have none of its input columns ({}); name them so",
                model.model.name,
                inputs.join(", ")
            )));
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(
                input.properties().output_partitioning().partition_count(),
            ),
            EmissionType::Incremental,
            input.properties().boundedness,
        );
        Ok(PredictExec {
            input,
            model,
            layout,
            sources,
            schema,
            properties: Arc::new(properties),
        })
    }
}

impl DisplayAs for PredictExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let m = &self.model.model;
        write!(
            f,
            "PredictExec: {}.{} version {}",
            m.project, m.name, m.version
        )
    }
}

impl ExecutionPlan for PredictExec {
    fn name(&self) -> &str {
        "PredictExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("PredictExec takes one input".to_string()))?;
        Ok(Arc::new(PredictExec::new(
            input,
            Arc::clone(&self.model),
            self.layout,
            Arc::clone(&self.schema),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let llm = connector(context.session_config())?;
        let input = self.input.execute(partition, context)?;
        let (model, sources, schema, layout) = (
            Arc::clone(&self.model),
            self.sources.clone(),
            Arc::clone(&self.schema),
            self.layout,
        );
        let out_schema = Arc::clone(&schema);
        let batches = input.then(move |batch| {
            let (model, sources, schema, llm) = (
                Arc::clone(&model),
                sources.clone(),
                Arc::clone(&out_schema),
                Arc::clone(&llm),
            );
            async move {
                let batch = batch?;
                let inputs = model_inputs(&model, &sources, &batch)?;
                let predicted = model
                    .with_prediction(inputs, &llm)
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                let columns: Vec<ArrayRef> = match layout {
                    Layout::Only => predicted.columns().to_vec(),
                    Layout::Before => [predicted.columns(), batch.columns()].concat(),
                    Layout::After => [batch.columns(), predicted.columns()].concat(),
                };
                Ok(RecordBatch::try_new(schema, columns)?)
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }
}

/// The model's columns for `batch`: each input from the column of the same name, cast to
/// the type it was trained with (a value that does not fit is an error naming the column),
/// NULL where the batch has no such column; the target NULL, to be predicted.
fn model_inputs(
    model: &PredictModel,
    sources: &[Option<usize>],
    batch: &RecordBatch,
) -> DfResult<RecordBatch> {
    let columns = model
        .schema
        .fields()
        .iter()
        .zip(sources)
        .map(|(field, source)| match source {
            None => Ok(new_null_array(field.data_type(), batch.num_rows())),
            Some(i) => {
                cast_with_options(batch.column(*i), field.data_type(), &STRICT).map_err(|e| {
                    DataFusionError::Execution(format!(
                        "column '{}' does not fit the type model '{}' was trained with ({}): {e}",
                        field.name(),
                        model.model.name,
                        field.data_type()
                    ))
                })
            }
        })
        .collect::<DfResult<Vec<_>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(&model.schema), columns)?)
}
