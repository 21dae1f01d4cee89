//! Rows made to fit a table's columns (`conform`), and the SQL names of Arrow types.

use std::sync::Arc;

use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// Gives `batch` the table's `schema` (casting strictly: a value that does not fit is an
/// error), refusing NULLs in NOT NULL columns; `table` names the table in messages.
pub(super) fn conform(schema: &SchemaRef, table: &str, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(Error::invalid(format!(
            "Table '{}' has {} columns but {} values were given",
            table,
            schema.fields().len(),
            batch.num_columns()
        )));
    }
    // bounded: the columns of a batch in memory
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let column = if column.data_type() == field.data_type() {
            Arc::clone(column)
        } else {
            // Unsafe casts fail on values that do not fit instead of turning them into NULLs.
            let options = CastOptions {
                safe: false,
                ..Default::default()
            };
            cast_with_options(column, field.data_type(), &options).map_err(|e| {
                Error::new(
                    crate::ErrorKind::InvalidData,
                    format!(
                        "Column '{}' of table '{}' takes {}: {e}",
                        field.name(),
                        table,
                        sql_type_name(field.data_type())
                    ),
                )
            })?
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(Error::new(
                crate::ErrorKind::ConstraintViolation,
                format!(
                    "NULL value in column '{}' of table '{}' violates its NOT NULL constraint",
                    field.name(),
                    table
                ),
            ));
        }
        columns.push(column);
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// The SQL name of an Arrow type, as `information_schema.columns.DATA_TYPE` shows it.
pub fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INTEGER UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        other => other.to_string(),
    }
}
