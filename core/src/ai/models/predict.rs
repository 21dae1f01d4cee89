//! A model as a table (`SELECT y FROM p.m WHERE x = 1 AND …`): its columns are the columns it
//! was trained on; the `column = value` filters DataFusion pushes into the scan make the one
//! input row, every other input is missing (imputed as in training), and the row comes back
//! with the prediction in the target's column. Any other condition is refused by name.
//! `predict_json` does the same for rows given as JSON (the REST, C and Python fronts);
//! `predict_join` predicts for every row of a table joined with the model.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast_with_options;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::exec::single_prediction;
use super::model::{PredictModel, STRICT};
use crate::error::Error;
use crate::services::llm::Connector;

/// A model as a table, for single predictions (and, joined, for `predict_join`).
#[derive(Debug)]
pub(crate) struct ModelTable(pub(crate) Arc<PredictModel>);

#[async_trait]
impl TableProvider for ModelTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.0.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Every condition comes to the scan, which either uses it as an input value or
        // refuses it by name: re-applied to a row whose other inputs are missing, any other
        // condition would silently empty the result.
        // bounded: one per condition of the parsed statement
        Ok(vec![TableProviderFilterPushDown::Exact; filters.len()])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if super::series::forecaster(&self.0).is_some() {
            let m = &self.0.model;
            return Err(DataFusionError::Plan(format!(
                "Model '{}' forecasts from the rows before: join it with them (SELECT … FROM t JOIN {}.{} AS m [WHERE t.{} > LATEST])",
                m.name,
                m.project,
                m.name,
                super::series::forecaster(&self.0).map_or("", |f| f.options().order.as_str())
            )));
        }
        // Conditions are checked now; the prediction is made when the plan runs.
        let schema = &self.0.schema;
        let row = input_row(&self.0.inputs, &self.0.model.predict, filters)?;
        let predicted = single_prediction(Arc::clone(&self.0), row)?;
        let Some(projection) = projection else {
            return Ok(predicted);
        };
        let columns = projection.iter().map(|&i| {
            let name = schema.field(i).name();
            (
                Arc::new(Column::new(name, i)) as Arc<dyn PhysicalExpr>,
                name.clone(),
            )
        });
        Ok(Arc::new(ProjectionExec::try_new(columns, predicted)?))
    }
}

/// One row of `schema`: the value of each `column = literal` condition, NULL elsewhere. Any
/// other condition, or one on the predicted column, is refused by name.
fn input_row(schema: &SchemaRef, target: &str, filters: &[Expr]) -> DfResult<RecordBatch> {
    let mut columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), 1))
        .collect();
    for filter in filters {
        let refuse = |why: &str| {
            DataFusionError::Plan(format!(
                "A prediction takes `column = value` conditions on the model's inputs; {why}: {filter}"
            ))
        };
        let Some((column, value)) = equality(filter) else {
            return Err(refuse("this is not one"));
        };
        if column.eq_ignore_ascii_case(target) {
            return Err(refuse("the predicted column cannot be a condition"));
        }
        let Some(i) = schema
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(column))
        else {
            return Err(refuse("the model has no such input"));
        };
        let given = value.to_array_of_size(1)?;
        columns[i] =
            cast_with_options(&given, schema.field(i).data_type(), &STRICT).map_err(|e| {
                DataFusionError::Plan(format!(
                    "'{column}' = {value} does not fit the column's type {}: {e}",
                    schema.field(i).data_type()
                ))
            })?;
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The column an expression names, looking through a cast.
fn column_of(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(cast) => column_of(&cast.expr),
        Expr::TryCast(cast) => column_of(&cast.expr),
        _ => None,
    }
}

/// `column = literal` (either way round); a cast DataFusion put around the column (text
/// compared with a number) is looked through, the literal is cast to the column's type later.
fn equality(expr: &Expr) -> Option<(&str, &ScalarValue)> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = expr
    else {
        return None;
    };
    match (left.as_ref(), right.as_ref()) {
        (c, Expr::Literal(v, _)) | (Expr::Literal(v, _), c) => Some((column_of(c)?, v)),
        _ => None,
    }
}

/// Predicts for JSON rows (MindsDB's `POST …/models/{m}/predict` body `data`): a list of
/// `{column: value}` objects, or that list as JSON text. Each value is read as its text and
/// cast to the column's training type (a value that does not fit is an error naming it);
/// missing columns are missing inputs. Returns the rows with every training column, the
/// target's filled in, and the columns a fitted model adds; an answer past `document_limit`
/// bytes of JSON is an error.
pub(crate) async fn predict_json(
    model: &PredictModel,
    rows: &serde_json::Value,
    llm: &Connector,
    document_limit: u64,
) -> crate::error::Result<serde_json::Value> {
    use datafusion::arrow::array::StringArray;
    use serde_json::Value;

    let parsed;
    let rows = match rows {
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                Error::invalid(format!("'data' is text but not a JSON list of rows: {e}"))
            })?;
            &parsed
        }
        other => other,
    };
    let rows = rows
        .as_array()
        .filter(|rows| rows.iter().all(Value::is_object))
        .ok_or_else(|| Error::invalid("'data' must be a list of {\"column\": value} objects"))?;
    let schema = &model.inputs;
    let mut columns: Vec<ArrayRef> = Vec::new();
    for field in schema.fields() {
        let texts: StringArray = rows
            .iter()
            .map(|row| {
                let value = row.as_object().and_then(|o| {
                    o.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(field.name()))
                        .map(|(_, v)| v)
                });
                match value {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                }
            })
            .collect();
        let column = cast_with_options(&texts, field.data_type(), &STRICT).map_err(|e| {
            Error::invalid(format!(
                "a value of '{}' does not fit its type {}: {e}",
                field.name(),
                field.data_type()
            ))
        })?;
        columns.push(column);
    }
    let inputs = RecordBatch::try_new(Arc::clone(schema), columns)?;
    let batch = match super::series::forecaster(model) {
        // A time-series model's rows are its history: every row answered, the future added.
        Some(forecaster) => super::series::model_rows(model, forecaster, &inputs)?,
        None => model.with_prediction(inputs, llm, true).await?,
    };
    let names: Vec<&String> = model.schema.fields().iter().map(|f| f.name()).collect();
    let out = crate::sql::encode::rows_as_json_within(&batch, document_limit, "The prediction")?
        .into_iter()
        .map(|row| Value::Object(names.iter().map(|n| n.to_string()).zip(row).collect()))
        .collect();
    Ok(Value::Array(out))
}
