//! Machine learning over model records: the built-in trainer (`train`), the background worker
//! that trains a version (`worker`), and predictions from complete versions — a fitted
//! predictor scores rows itself; an LLM-backed model asks its provider once per row, a few rows
//! at a time. The records these read and write (versions, predictors, an LLM model's settings)
//! are `models`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use crate::catalog::models::openai::{Piece, Prompted};
use crate::catalog::models::{self, ModelStatus, ModelVersion};
use crate::error::{Error, Result};
use crate::services::llm::{self, Connector};
use crate::tenant::TenantId;
use forecast::Forecaster;
use train::Predictor;

pub(crate) mod forecast;
mod linear;
pub(crate) mod train;
pub(crate) mod worker;

/// What turns a complete version's input rows into predictions.
#[derive(Debug)]
pub(crate) enum Scorer {
    /// A predictor fitted by the built-in engine.
    Fitted(Predictor),
    /// A time-series model of the built-in engine: it answers rows as a whole.
    Series(Forecaster),
    /// An LLM asked once per row.
    Prompted(Prompted),
}

impl Scorer {
    /// The columns a prediction adds beside the target (confidence, interval, explanation);
    /// none for an LLM model.
    pub(crate) fn detail_fields(&self) -> Vec<Field> {
        match self {
            Scorer::Fitted(predictor) => predictor.detail_fields(),
            Scorer::Series(forecaster) => forecaster.detail_fields(),
            Scorer::Prompted(_) => Vec::new(),
        }
    }

    /// One prediction per row of `inputs` (rows with the model's training columns), as an
    /// array of the target's type, with the columns of [`Scorer::detail_fields`]; the
    /// explanation is made only when `explain` (it costs a prediction per input column).
    /// `llm` serves LLM models.
    pub(crate) async fn predict_detailed(
        &self,
        inputs: &RecordBatch,
        llm: &Connector,
        explain: bool,
    ) -> Result<(ArrayRef, Vec<ArrayRef>)> {
        match self {
            Scorer::Fitted(predictor) => predictor
                .predict_detailed(inputs, explain)
                .map_err(|e| Error::invalid(format!("prediction failed: {e}"))),
            Scorer::Series(_) => Err(Error::internal(
                "a time-series model answers rows as a whole, not one by one",
            )),
            Scorer::Prompted(prompted) => Ok((prompted.predict(inputs, llm).await?, Vec::new())),
        }
    }
}

/// A forecaster as stored: `{"series": …}`, which [`scorer`] tells from a tabular predictor;
/// read back once, as [`stored_predictor`] is.
pub(crate) fn stored_forecaster(forecaster: &Forecaster) -> Result<Vec<u8>, String> {
    let bytes = serde_json::to_vec(&serde_json::json!({ SERIES_KEY: forecaster }))
        .map_err(|e| e.to_string())?;
    let mut wrapped: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(unstorable)?;
    let forecaster = wrapped.remove(SERIES_KEY).unwrap_or_default();
    serde_json::from_value::<Forecaster>(forecaster).map_err(unstorable)?;
    Ok(bytes)
}

/// A tabular predictor as stored, read back once: a value JSON cannot hold (a number past
/// f64's range stores as null) would make a model reported complete fail every prediction;
/// it fails the training instead, saying why.
pub(crate) fn stored_predictor(predictor: &Predictor) -> Result<Vec<u8>, String> {
    let bytes = serde_json::to_vec(predictor).map_err(|e| e.to_string())?;
    serde_json::from_slice::<Predictor>(&bytes).map_err(unstorable)?;
    Ok(bytes)
}

fn unstorable(e: serde_json::Error) -> String {
    format!("the trained model could not be stored and read back ({e}); its data may hold values past what a 64-bit float holds")
}

const SERIES_KEY: &str = "series";

/// The scorer of a complete version; "model creation not completed" otherwise.
pub(crate) fn scorer(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    model: &ModelVersion,
) -> Result<Scorer> {
    if model.status != ModelStatus::Complete {
        return Err(models::not_completed(model));
    }
    if model.is_prompted() {
        return Ok(Scorer::Prompted(models::openai::check(&model.using)?));
    }
    let stored = models::predictor(txn, tenant, model)?;
    if stored.starts_with(format!("{{\"{SERIES_KEY}\":").as_bytes()) {
        let mut wrapped: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&stored)?;
        let forecaster = wrapped.remove(SERIES_KEY).unwrap_or_default();
        return Ok(Scorer::Series(serde_json::from_value(forecaster)?));
    }
    Ok(Scorer::Fitted(serde_json::from_slice(&stored)?))
}

impl Prompted {
    /// The answer to each row of `inputs` (a batch with the model's input columns), as text,
    /// in row order. The first call that fails fails the prediction, naming the row.
    pub(crate) async fn predict(&self, inputs: &RecordBatch, llm: &Connector) -> Result<ArrayRef> {
        let endpoint = llm::endpoint(&self.settings, &llm.default_llm());
        let mut columns: BTreeMap<String, StringArray> = BTreeMap::new();
        for column in self.inputs() {
            let schema = inputs.schema();
            let found = schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&column));
            let values = match found {
                Some(i) => cast(inputs.column(i), &DataType::Utf8)?,
                None => Arc::new(StringArray::new_null(inputs.num_rows())),
            };
            let values = values
                .as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .ok_or_else(|| Error::internal("a cast to Utf8 gave no StringArray"))?;
            columns.insert(column.to_ascii_lowercase(), values);
        }
        let prompts: Vec<String> = (0..inputs.num_rows())
            .map(|row| self.render(&columns, row))
            .collect();
        let (endpoint, permits) = (&endpoint, &self.permits);
        let answers: Vec<String> = futures::stream::iter(prompts)
            .map(|prompt| async move {
                let _permit = permits
                    .acquire()
                    .await
                    .map_err(|_| Error::internal("the model's call permits were closed"))?;
                let messages = [json!({"role": "user", "content": prompt})];
                llm::chat(&llm.client, endpoint, &messages, &[], None, None)
                    .await
                    .map(|reply| reply.content)
                    .map_err(|e| {
                        let excerpt: String = prompt.chars().take(60).collect();
                        Error::new(
                            e.kind(),
                            format!("predicting for the prompt '{excerpt}…': {}", e.message()),
                        )
                    })
            })
            .buffered(self.concurrency)
            .try_collect()
            .await?;
        Ok(Arc::new(StringArray::from(answers)))
    }

    fn render(&self, columns: &BTreeMap<String, StringArray>, row: usize) -> String {
        let mut prompt = String::new();
        for piece in &self.template {
            match piece {
                Piece::Text(text) => prompt.push_str(text),
                Piece::Slot(column) => {
                    if let Some(values) = columns.get(&column.to_ascii_lowercase()) {
                        if values.is_valid(row) {
                            prompt.push_str(values.value(row));
                        }
                    }
                }
            }
        }
        prompt
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::StringArray;
    use serde_json::json;

    use crate::catalog::models::openai::check;

    #[test]
    fn a_row_fills_the_slots_and_null_is_empty() {
        let using = [("prompt_template".to_string(), json!("<{{a}}|{{b}}>"))]
            .into_iter()
            .collect();
        let model = check(&using).unwrap();
        let mut columns = BTreeMap::new();
        columns.insert("a".to_string(), StringArray::from(vec![Some("x"), None]));
        assert_eq!(model.render(&columns, 0), "<x|>");
        assert_eq!(model.render(&columns, 1), "<|>");
    }
}
