//! Predictions of a time-series model: the rows joined with it (or given to it as JSON) are
//! its history, answered as a whole by the forecaster (`ml::forecast`): every row with its
//! one-step forecast, then `HORIZON` future rows per group. A future row has its group's
//! values and its forecast order value in both the rows' columns and the model's; the rows'
//! other columns are NULL there. `latest` (the group's last order value) lets `WHERE t.d >
//! LATEST` keep the future rows alone.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::kernels::zip::zip;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::SchemaRef;

use super::model::PredictModel;
use crate::error::{Error, Result};
use crate::services::ml::forecast::{Forecast, Forecaster};
use crate::services::ml::Scorer;

/// The forecaster of a time-series model, if it is one.
pub(crate) fn forecaster(model: &PredictModel) -> Option<&Forecaster> {
    match &model.scorer {
        Scorer::Series(forecaster) => Some(forecaster),
        _ => None,
    }
}

/// Where a batch's order and group columns are.
pub(crate) struct Roles {
    pub(crate) order: Option<usize>,
    pub(crate) groups: Vec<usize>,
}

impl Roles {
    /// The roles of `schema`'s columns named as the forecaster's order and group columns.
    pub(crate) fn of(forecaster: &Forecaster, schema: &SchemaRef) -> Roles {
        let find = |name: &str| {
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
        };
        let options = forecaster.options();
        Roles {
            order: find(&options.order),
            groups: options.groups.iter().filter_map(|g| find(g)).collect(),
        }
    }
}

/// The forecast of `inputs` (rows of the model's training columns): its answers.
pub(crate) fn forecast(
    model: &PredictModel,
    forecaster: &Forecaster,
    inputs: &RecordBatch,
    explain: bool,
) -> Result<Forecast> {
    forecaster.forecast(inputs, explain).map_err(|e| {
        Error::invalid(format!(
            "forecasting with model '{}' failed: {e}",
            model.model.name
        ))
    })
}

/// `batch`'s columns for every answer of `forecast`: an input row's own values; for a future
/// row, its group's values (from the group's last row), its forecast order value, NULL
/// elsewhere.
pub(crate) fn answer_columns(
    batch: &RecordBatch,
    forecast: &Forecast,
    roles: &Roles,
) -> Result<Vec<ArrayRef>> {
    let own: UInt32Array = forecast
        .answers
        .iter()
        .map(|a| a.input.map(|row| row as u32))
        .collect();
    let grouped: UInt32Array = forecast
        .answers
        .iter()
        .map(|a| a.input.or(a.last).map(|row| row as u32))
        .collect();
    let future: BooleanArray = forecast
        .answers
        .iter()
        .map(|a| Some(a.input.is_none()))
        .collect();
    let mut columns = Vec::with_capacity(batch.num_columns()); // bounded: the batch's columns
    for (at, column) in batch.columns().iter().enumerate() {
        // A group's values go into each of its future rows: their text counts each time.
        let rows = if roles.groups.contains(&at) {
            &grouped
        } else {
            &own
        };
        crate::capacity::check_taken(
            column.as_ref(),
            rows.iter().map(|row| row.map(|row| row as usize)),
            "the forecast's rows",
        )?;
        let out = if roles.order == Some(at) {
            let own = take(column.as_ref(), &own, None)?;
            let computed = cast(&forecast.order, column.data_type())?;
            zip(&future, &computed, &own)?
        } else if roles.groups.contains(&at) {
            take(column.as_ref(), &grouped, None)?
        } else {
            take(column.as_ref(), &own, None)?
        };
        columns.push(out);
    }
    Ok(columns)
}

/// The model's columns for every answer: its training columns (as [`answer_columns`]) with
/// the target forecast, then the detail columns, each as `schema` (the model's) types them.
pub(crate) fn model_columns(
    model: &PredictModel,
    forecaster: &Forecaster,
    inputs: &RecordBatch,
    forecast: &Forecast,
) -> Result<Vec<ArrayRef>> {
    let roles = Roles::of(forecaster, &inputs.schema());
    let mut columns = answer_columns(inputs, forecast, &roles)?;
    let target = &model.model.predict;
    let fields = model.schema.fields();
    if let Some(at) = fields
        .iter()
        .take(columns.len())
        .position(|f| f.name().eq_ignore_ascii_case(target))
    {
        columns[at] = cast(&forecast.target, fields[at].data_type())?;
    }
    let rows = forecast.answers.len();
    for (field, detail) in forecaster.detail_fields().iter().zip(&forecast.details) {
        if let Some(at) = fields.iter().position(|f| f.name() == field.name()) {
            if at >= columns.len() {
                columns.push(cast(detail, fields[at].data_type())?);
            }
        }
    }
    // A detail a training column's name took is left out (see `PredictModel::of`).
    while columns.len() < fields.len() {
        columns.push(new_null_array(fields[columns.len()].data_type(), rows));
    }
    Ok(columns)
}

/// The rows of the model's table answering `inputs` (JSON rows, a model read alone).
pub(crate) fn model_rows(
    model: &PredictModel,
    forecaster: &Forecaster,
    inputs: &RecordBatch,
) -> Result<RecordBatch> {
    let forecast = forecast(model, forecaster, inputs, true)?;
    let columns = model_columns(model, forecaster, inputs, &forecast)?;
    Ok(RecordBatch::try_new(Arc::clone(&model.schema), columns)?)
}
