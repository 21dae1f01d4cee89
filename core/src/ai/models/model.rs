//! A model version loaded to predict: its columns and its scorer, and how a batch of rows
//! gets its prediction. A model as a table (`predict`) and predictions by join
//! (`predict_join`) both run it through the prediction operator (`exec`).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::{cast, CastOptions};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::util::display::FormatOptions;

use crate::catalog::models::{self, ModelVersion};
use crate::error::Error;
use crate::services::llm::Connector;
use crate::services::ml::Scorer;
use crate::sql::catalog::snapshot::Snapshot;

/// One complete model version, ready to predict.
#[derive(Debug)]
pub(crate) struct PredictModel {
    pub(crate) model: ModelVersion,
    /// Whose model it is: an LLM model's calls count against this tenant's plan.
    pub(crate) tenant: crate::tenant::TenantId,
    /// The model's columns with every column nullable: its training columns (inputs and
    /// target), then what a fitted model adds to a prediction (`<target>_confidence`, `_min`,
    /// `_max`, `_explain`).
    pub(crate) schema: SchemaRef,
    /// The training columns alone: the rows a prediction is made for.
    pub(crate) inputs: SchemaRef,
    pub(crate) scorer: Scorer,
}

impl PredictModel {
    /// The complete version `model` in `snapshot`, ready to predict: its columns (all
    /// nullable) and its scorer; "model creation not completed" for any other.
    pub(crate) fn of(snapshot: &Snapshot, model: ModelVersion) -> crate::error::Result<Self> {
        // A version still training (or failed) has no columns to plan against yet.
        let Some(schema) = models::training_schema(&snapshot.txn, snapshot.tenant, &model)? else {
            return Err(models::not_completed(&model));
        };
        let nullable: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let scorer = crate::services::ml::scorer(&snapshot.txn, snapshot.tenant, &model)?;
        let mut all = nullable.clone();
        all.extend(scorer.detail_fields().into_iter().filter(|f| {
            !nullable
                .iter()
                .any(|n| n.name().eq_ignore_ascii_case(f.name()))
        }));
        Ok(PredictModel {
            scorer,
            tenant: snapshot.tenant,
            schema: Arc::new(Schema::new(all)),
            inputs: Arc::new(Schema::new(nullable)),
            model,
        })
    }

    /// `inputs` (rows of the training columns) with the target's column predicted and the
    /// columns a fitted model adds after them (the explanation only when `explain`): a batch
    /// of [`PredictModel::schema`].
    pub(crate) async fn with_prediction(
        &self,
        inputs: RecordBatch,
        llm: &Connector,
        explain: bool,
    ) -> crate::error::Result<RecordBatch> {
        let schema = inputs.schema();
        let target = &self.model.predict;
        let index = schema
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(target))
            .ok_or_else(|| {
                Error::internal(format!("the model's columns do not include '{target}'"))
            })?;
        if matches!(self.scorer, Scorer::Prompted(_)) {
            // One provider call per row, counted before any is made.
            llm.meter
                .take(self.tenant, inputs.num_rows() as u64)
                .await?;
        }
        let (predicted, details) = self.scorer.predict_detailed(&inputs, llm, explain).await?;
        let mut columns = inputs.columns().to_vec();
        columns[index] = cast(&predicted, schema.field(index).data_type())?;
        // A training column named like a detail column keeps its own; the detail is dropped.
        let fields = self.schema.fields();
        for (field, detail) in self.scorer.detail_fields().iter().zip(details) {
            if let Some(at) = fields.iter().position(|f| f.name() == field.name()) {
                if at >= columns.len() {
                    columns.push(cast(&detail, fields[at].data_type())?);
                }
            }
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// Casts that fail instead of turning a value that does not fit into NULL.
pub(crate) const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};
