//! The prediction operator ([`PredictExec`]): each input batch out again with the model's
//! columns filled from the columns of the same name (cast to the types the model was trained
//! on) and the prediction appended, batch in and batch out. Predictions by join and a model
//! read as a table (one row, [`single_prediction`]) both run it.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast_with_options;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::EmissionType;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::Distribution;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};

use super::model::{PredictModel, STRICT};
use crate::sql::planning::session::connector;

/// Where the model's columns go in [`PredictExec`]'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// After the input's columns (`t JOIN m`).
    After,
    /// Before them (`m JOIN t`).
    Before,
    /// Alone: the input is a row of the model's own columns (`SELECT y FROM m WHERE x = 1`).
    Only,
}

impl Layout {
    pub(crate) fn of_join(model_first: bool) -> Layout {
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
    let input = MemorySourceConfig::try_new_exec(&[vec![row]], Arc::clone(&model.inputs), None)?;
    Ok(Arc::new(PredictExec::new(
        input,
        model,
        Layout::Only,
        schema,
    )?))
}

/// The operator: each input batch out again with the model's columns, predicted.
#[derive(Debug)]
pub(crate) struct PredictExec {
    input: Arc<dyn ExecutionPlan>,
    model: Arc<PredictModel>,
    layout: Layout,
    /// For each training column of the model, the input column of the same name, if any.
    sources: Vec<Option<usize>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    /// Whether `<target>_explain` is made: it costs a prediction per input column, so a
    /// projection above that does not use it turns it off (see `try_swapping_with_projection`).
    explain: bool,
}

impl PredictExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        model: Arc<PredictModel>,
        layout: Layout,
        schema: SchemaRef,
    ) -> DfResult<Self> {
        let input_schema = input.schema();
        let target = &model.model.predict;
        // A time-series model reads the target's past values (its history); any other model
        // predicts the target from the other columns alone.
        let reads_target = super::series::forecaster(&model).is_some();
        let mut sources = Vec::new();
        for field in model.inputs.fields() {
            if field.name().eq_ignore_ascii_case(target) && !reads_target {
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
                .inputs
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
        // A time-series model answers its rows as a whole: one partition, emitted at the end.
        let series = super::series::forecaster(&model);
        if let Some(forecaster) = series {
            // The history needs every column the series are read from: without a GROUP BY
            // column all groups would merge into one series, without the target there is
            // nothing to forecast from.
            let options = forecaster.options();
            let needed = std::iter::once((&options.order, "its ORDER BY"))
                .chain(options.groups.iter().map(|g| (g, "its GROUP BY")))
                .chain(std::iter::once((target, "the values forecast from")));
            for (column, role) in needed {
                let found = model
                    .inputs
                    .fields()
                    .iter()
                    .zip(&sources)
                    .any(|(f, source)| f.name().eq_ignore_ascii_case(column) && source.is_some());
                if !found {
                    return Err(DataFusionError::Plan(format!(
                        "The rows joined with time-series model '{}' have no '{column}' column ({role}); name it so",
                        model.model.name
                    )));
                }
            }
        }
        let (partitions, emission) = match series {
            Some(_) => (1, EmissionType::Final),
            None => (
                input.properties().output_partitioning().partition_count(),
                EmissionType::Incremental,
            ),
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            emission,
            input.properties().boundedness,
        );
        Ok(PredictExec {
            input,
            model,
            layout,
            sources,
            schema,
            properties: Arc::new(properties),
            explain: true,
        })
    }

    /// Where `<target>_explain` is in the output, if the model makes one.
    fn explain_column(&self) -> Option<usize> {
        // Named after the training column (`PREDICT Y` of a column `y` gives `y_explain`).
        let target = &self.model.model.predict;
        let target = self
            .model
            .inputs
            .fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(target))
            .map_or(target, |f| f.name());
        let name = format!("{target}_explain");
        let within = self.model.schema.index_of(&name).ok()?;
        if within < self.model.inputs.fields().len() {
            return None;
        }
        Some(match self.layout {
            Layout::Only | Layout::Before => within,
            Layout::After => self.input.schema().fields().len() + within,
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
        )?;
        if !self.explain && self.explain_column().is_some() {
            write!(f, ", without explanations")?;
        }
        Ok(())
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

    fn required_input_distribution(&self) -> Vec<Distribution> {
        if super::series::forecaster(&self.model).is_some() {
            vec![Distribution::SinglePartition]
        } else {
            vec![Distribution::UnspecifiedDistribution]
        }
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
        let mut exec = PredictExec::new(
            input,
            Arc::clone(&self.model),
            self.layout,
            Arc::clone(&self.schema),
        )?;
        exec.explain = self.explain;
        Ok(Arc::new(exec))
    }

    // A projection above that does not read `<target>_explain`: the same projection over this
    // operator without the explanation (NULL in its place), which saves a prediction per
    // input column of every row.
    fn try_swapping_with_projection(
        &self,
        projection: &ProjectionExec,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(explain) = self.explain_column().filter(|_| self.explain) else {
            return Ok(None);
        };
        let read = projection
            .expr()
            .iter()
            .flat_map(|e| collect_columns(&e.expr))
            .any(|column| column.index() == explain);
        if read {
            return Ok(None);
        }
        let mut without = PredictExec::new(
            Arc::clone(&self.input),
            Arc::clone(&self.model),
            self.layout,
            Arc::clone(&self.schema),
        )?;
        without.explain = false;
        Ok(Some(Arc::new(ProjectionExec::try_new(
            projection.expr().to_vec(),
            Arc::new(without),
        )?)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let llm = connector(context.session_config())?;
        let batch_size = context.session_config().batch_size().max(1);
        let input = self.input.execute(partition, context)?;
        if super::series::forecaster(&self.model).is_some() {
            return Ok(self.forecast(input, batch_size));
        }
        let (model, sources, schema, layout, explain) = (
            Arc::clone(&self.model),
            self.sources.clone(),
            Arc::clone(&self.schema),
            self.layout,
            self.explain,
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
                    .with_prediction(inputs, &llm, explain)
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

impl PredictExec {
    /// A time-series model's answer to all of `input` (its history), in batches of
    /// `batch_size` rows.
    fn forecast(
        &self,
        input: SendableRecordBatchStream,
        batch_size: usize,
    ) -> SendableRecordBatchStream {
        let (model, sources, schema, layout, explain) = (
            Arc::clone(&self.model),
            self.sources.clone(),
            Arc::clone(&self.schema),
            self.layout,
            self.explain,
        );
        let out_schema = Arc::clone(&schema);
        let answered = async move {
            let input_schema = input.schema();
            let batches: Vec<RecordBatch> = input.try_collect().await?;
            let batch = concat_batches(&input_schema, &batches)?;
            drop(batches);
            let external = |e: crate::error::Error| DataFusionError::External(Box::new(e));
            let forecaster = super::series::forecaster(&model)
                .ok_or_else(|| DataFusionError::Internal("not a time-series model".into()))?;
            let inputs = model_inputs(&model, &sources, &batch)?;
            let forecast =
                super::series::forecast(&model, forecaster, &inputs, explain).map_err(external)?;
            let predicted = super::series::model_columns(&model, forecaster, &inputs, &forecast)
                .map_err(external)?;
            let roles = super::series::Roles::of(forecaster, &batch.schema());
            let rows =
                || super::series::answer_columns(&batch, &forecast, &roles).map_err(external);
            let columns: Vec<ArrayRef> = match layout {
                Layout::Only => predicted,
                Layout::Before => [predicted, rows()?].concat(),
                Layout::After => [rows()?, predicted].concat(),
            };
            Ok::<_, DataFusionError>(RecordBatch::try_new(out_schema, columns)?)
        };
        let batches = futures::stream::once(answered).flat_map(move |answer| {
            let slices: Vec<DfResult<RecordBatch>> = match answer {
                Ok(batch) => (0..batch.num_rows())
                    .step_by(batch_size)
                    .map(
                        |offset| Ok(batch.slice(offset, batch_size.min(batch.num_rows() - offset))),
                    )
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(slices)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }
}

/// The model's columns for `batch`: each input from the column of the same name, cast to
/// the type it was trained with (a value that does not fit is an error naming the column),
/// NULL where the batch has no such column; the target NULL, to be predicted (a time-series
/// model's target from the rows: the history it forecasts from).
fn model_inputs(
    model: &PredictModel,
    sources: &[Option<usize>],
    batch: &RecordBatch,
) -> DfResult<RecordBatch> {
    let columns = model
        .inputs
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
    Ok(RecordBatch::try_new(Arc::clone(&model.inputs), columns)?)
}
