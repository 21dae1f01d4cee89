//! A model as a table (`SELECT y FROM p.m WHERE x = 1 AND …`): its columns are the columns it
//! was trained on; the `column = value` filters DataFusion pushes into the scan make the one
//! input row, every other input is missing (imputed as in training), and the row comes back
//! with the prediction in the target's column. DataFusion still applies every filter itself.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Error;
use crate::models::train::Predictor;
use crate::models::ModelVersion;

/// One complete model version, queryable for single predictions.
#[derive(Debug)]
pub(crate) struct ModelTable {
    pub(crate) model: ModelVersion,
    /// The training rows' schema with every column nullable.
    pub(crate) schema: SchemaRef,
    pub(crate) predictor: Predictor,
}

#[async_trait]
impl TableProvider for ModelTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = &self.schema;
        let row = input_row(schema, filters)?;
        let predicted = self.predictor.predict(&row).map_err(|e| {
            DataFusionError::External(Box::new(Error::invalid(format!(
                "prediction with {}.{} failed: {e}",
                self.model.project, self.model.name
            ))))
        })?;
        let target = schema.index_of(&self.model.predict).or_else(|_| {
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&self.model.predict))
                .ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "the training schema has no column '{}'",
                        self.model.predict
                    ))
                })
        })?;
        let mut columns = row.columns().to_vec();
        columns[target] = cast(&predicted, schema.field(target).data_type())?;
        let batch = RecordBatch::try_new(Arc::clone(schema), columns)?;
        MemTable::try_new(Arc::clone(schema), vec![vec![batch]])?
            .scan(state, projection, &[], limit)
            .await
    }
}

/// One row of `schema`: the value of each `column = literal` filter, NULL elsewhere.
fn input_row(schema: &SchemaRef, filters: &[Expr]) -> DfResult<RecordBatch> {
    let mut columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), 1))
        .collect();
    for filter in filters {
        let Some((column, value)) = equality(filter) else {
            continue;
        };
        let Some(i) = schema
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(column))
        else {
            continue;
        };
        let given = value.to_array_of_size(1)?;
        columns[i] = cast(&given, schema.field(i).data_type()).map_err(|e| {
            DataFusionError::Plan(format!(
                "'{column}' = {value} does not fit the column's type {}: {e}",
                schema.field(i).data_type()
            ))
        })?;
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// `column = literal` (either way round).
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
        (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => {
            Some((c.name.as_str(), v))
        }
        _ => None,
    }
}
