//! Parquet: the file's own schema and its rows, its footer checked against the caps before
//! anything is decoded.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use bytes::Bytes;

use crate::error::{Error, Result};

use super::rows::{too_wide, Caps, FileRows, Sink, MAX_COLUMNS};

/// Rows per batch when reading Parquet, at most: small, so a batch of a file whose values
/// expand a lot stays small before the caps are checked.
const PARQUET_BATCH_ROWS: usize = 1024;

/// Bytes of rows per Parquet batch aimed at, by the footer's sizes: a file of very wide rows
/// is read fewer rows at a time.
const PARQUET_BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Parquet: the file's own schema (without its metadata) and its rows. The footer's row count
/// and sizes are checked against the caps before anything is decoded, and set how many rows a
/// batch takes; text and binary columns are read as dictionaries, so a column of one long
/// value repeated is counted (and refused) before it is expanded. A file may lie in its
/// footer: the caps are checked again batch by batch.
pub(super) fn open_parquet(bytes: Bytes, caps: Caps) -> Result<FileRows> {
    use datafusion::parquet::arrow::arrow_reader::{
        ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::invalid(format!("The file is not readable as Parquet: {e}"))
    };
    let builder = super::rows::contained("Parquet", || {
        ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).map_err(|e| unreadable(&e))
    })?;
    let metadata = builder.metadata();
    if u64::try_from(metadata.file_metadata().num_rows()).unwrap_or(u64::MAX) > caps.max_rows {
        return Err(caps.rows_over());
    }
    // Every page's size before any page is decoded (a small file can hold a page that
    // decompresses to gigabytes).
    crate::services::parquet_pages::check(&bytes, metadata)?;
    let declared: u64 = metadata
        .row_groups()
        .iter()
        .map(|group| u64::try_from(group.total_byte_size()).unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add);
    if declared > caps.max_bytes {
        return Err(caps.bytes_over());
    }
    let widest_row = metadata
        .row_groups()
        .iter()
        .map(|group| {
            u64::try_from(group.total_byte_size()).unwrap_or(u64::MAX)
                / u64::try_from(group.num_rows()).unwrap_or(1).max(1)
        })
        .max()
        .unwrap_or(0);
    let batch_rows = usize::try_from(PARQUET_BATCH_BYTES / widest_row.max(1))
        .unwrap_or(PARQUET_BATCH_ROWS)
        .clamp(1, PARQUET_BATCH_ROWS);
    let fields = builder.schema().fields().clone();
    if fields.len() > MAX_COLUMNS {
        return Err(too_wide(fields.len()));
    }
    if fields.is_empty() {
        return Err(Error::invalid("The file has no columns"));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = fields
        .iter()
        .find(|f| !seen.insert(f.name().to_ascii_lowercase()))
    {
        return Err(Error::invalid(format!(
            "The file has two columns named '{}'",
            twice.name()
        )));
    }
    // Parquet's own field ids and writer metadata mean nothing once stored.
    let schema = Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| f.as_ref().clone().with_metadata(Default::default()))
            .collect::<Vec<_>>(),
    ));
    let as_read = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                    let dictionary = DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(f.data_type().clone()),
                    );
                    f.as_ref().clone().with_data_type(dictionary)
                }
                _ => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    ));
    drop(builder);
    let options = ArrowReaderOptions::new().with_schema(Arc::clone(&as_read));
    let mut reader = super::rows::contained("Parquet", || {
        ParquetRecordBatchReaderBuilder::try_new_with_options(bytes, options)
            .map_err(|e| unreadable(&e))?
            .with_batch_size(batch_rows)
            .build()
            .map_err(|e| unreadable(&e))
    })?;
    let target = as_read;
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink: Sink<'_>| {
            while let Some(batch) = super::rows::contained("Parquet", || Ok(reader.next()))? {
                let batch = batch.map_err(|e| unreadable(&e))?;
                sink(RecordBatch::try_new(
                    Arc::clone(&target),
                    batch.columns().to_vec(),
                )?)?;
            }
            Ok(())
        }),
        sheets: Vec::new(),
    })
}
