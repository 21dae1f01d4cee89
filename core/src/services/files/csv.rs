//! CSV: a header line, then rows; each column's type inferred from the rows, and a column
//! whose values do not all fit the inferred type read as text.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::csv::reader::Format as CsvFormat;
use datafusion::arrow::csv::ReaderBuilder as CsvReaderBuilder;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::FormatOptions;

use bytes::Bytes;

use crate::error::{Error, Result};

use super::rows::{check_columns, with_text_for_null, FileRows, Sink, BATCH_ROWS};

/// CSV: types inferred from the whole file, then checked by reading it once; where a value
/// only looked typed (`2021-02-30`), that column is text. Read again batch by batch.
fn csv_unreadable(e: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!("The file is not readable as CSV: {e}"))
}

pub(super) fn open_csv(bytes: Bytes) -> Result<FileRows> {
    let unreadable = csv_unreadable;
    let (inferred, _) = CsvFormat::default()
        .with_header(true)
        .infer_schema(Cursor::new(&bytes[..]), None)
        .map_err(|e| unreadable(&e))?;
    let inferred = Arc::new(with_text_for_null(&inferred));
    check_columns(&inferred)?;
    let reader = |bytes: Bytes, schema: &SchemaRef| {
        CsvReaderBuilder::new(Arc::clone(schema))
            .with_header(true)
            .with_batch_size(BATCH_ROWS)
            .build(Cursor::new(bytes))
            .map_err(|e| csv_unreadable(&e))
    };
    let fits = reader(bytes.clone(), &inferred)?.all(|batch| batch.is_ok());
    if fits {
        let schema = Arc::clone(&inferred);
        return Ok(FileRows {
            schema: inferred,
            rows: Box::new(move |sink: Sink<'_>| {
                for batch in reader(bytes, &schema)? {
                    sink(batch.map_err(|e| unreadable(&e))?)?;
                }
                Ok(())
            }),
            sheets: Vec::new(),
        });
    }
    // Inference goes by the look of values: `2021-02-30` looks like a date and is none. Read
    // everything as text, and keep a column's inferred type only where every value casts.
    let text = Arc::new(Schema::new(
        inferred
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(DataType::Utf8))
            .collect::<Vec<_>>(),
    ));
    // bounded: one per column, at most MAX_COLUMNS
    let mut column_fits = vec![true; inferred.fields().len()];
    for batch in reader(bytes.clone(), &text)? {
        let batch = batch.map_err(|e| unreadable(&e))?;
        for (i, field) in inferred.fields().iter().enumerate() {
            if column_fits[i] && !matches!(field.data_type(), DataType::Utf8) {
                column_fits[i] = typed(batch.column(i), field.data_type()).is_ok();
            }
        }
    }
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .zip(&column_fits)
        .map(|(field, fits)| {
            let data_type = if *fits {
                field.data_type().clone()
            } else {
                DataType::Utf8
            };
            field.as_ref().clone().with_data_type(data_type)
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let target = Arc::clone(&schema);
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink: Sink<'_>| {
            for batch in reader(bytes, &text)? {
                let batch = batch.map_err(|e| unreadable(&e))?;
                let columns = batch
                    .columns()
                    .iter()
                    .zip(target.fields())
                    .map(|(column, field)| match field.data_type() {
                        DataType::Utf8 => Ok(Arc::clone(column)),
                        other => typed(column, other),
                    })
                    .collect::<Result<Vec<_>>>()?;
                sink(RecordBatch::try_new(Arc::clone(&target), columns)?)?;
            }
            Ok(())
        }),
        sheets: Vec::new(),
    })
}

/// A text column as `data_type`, an empty value as NULL (as the typed reader reads it);
/// an error when any other value does not fit.
fn typed(column: &ArrayRef, data_type: &DataType) -> Result<ArrayRef> {
    let text = column
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::internal("a CSV column read as text is not text"))?;
    let blank_as_null: StringArray = text.iter().map(|v| v.filter(|v| !v.is_empty())).collect();
    Ok(cast_with_options(&blank_as_null, data_type, &STRICT)?)
}

/// Casts that fail instead of turning a value that does not fit into NULL.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};
