//! What every decoder hands on: a file's columns and its rows batch by batch
//! ([`FileRows`]), counted against the caps on one upload ([`Caps`]) as they are read, and the
//! checks on columns every format shares.

use datafusion::arrow::array::{AnyDictionaryArray, Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// Rows per batch while reading a file.
pub(super) const BATCH_ROWS: usize = 8192;

/// The most columns a file may have: wider ones are refused before their rows are read.
pub(super) const MAX_COLUMNS: usize = 4096;

/// Caps on what one uploaded file may decode to (`files.max_rows`, `files.max_decoded_mb`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) max_rows: u64,
    pub(crate) max_bytes: u64,
}

impl Caps {
    /// The caps `config` sets.
    pub(crate) fn of(config: &crate::Config) -> Caps {
        Caps {
            max_rows: config.upload_max_rows(),
            max_bytes: config.upload_max_decoded_bytes(),
        }
    }

    pub(super) fn rows_over(&self) -> Error {
        Error::invalid(format!(
            "The file holds more than {} rows, the most one upload may (files.max_rows); nothing was stored",
            self.max_rows
        ))
    }

    pub(super) fn bytes_over(&self) -> Error {
        Error::invalid(format!(
            "The file decodes to more than {} MiB, the most one upload may (files.max_decoded_mb); nothing was stored",
            self.max_bytes / (1024 * 1024)
        ))
    }
}

/// Rows handed on one batch at a time; the sink's error stops the reading.
pub(super) type Sink<'a> = &'a mut dyn FnMut(RecordBatch) -> Result<()>;

/// A file opened for reading: its columns now, its rows batch by batch when run.
pub(crate) struct FileRows {
    pub(crate) schema: SchemaRef,
    pub(super) rows: Box<dyn FnOnce(Sink<'_>) -> Result<()> + Send>,
    /// A workbook of several sheets: each sheet, opened when asked (the rows above then list
    /// them).
    pub(crate) sheets: Vec<Sheet>,
}

/// One sheet of a workbook of several (in the workbook's order), read as a table of its own.
pub(crate) struct Sheet {
    pub(super) open: Box<dyn FnOnce() -> Result<Option<FileRows>> + Send>,
}

impl Sheet {
    /// The sheet's columns (typed now, one pass over its cells) and rows; `None` when it
    /// holds no value.
    pub(crate) fn open(self) -> Result<Option<FileRows>> {
        (self.open)()
    }
}

impl FileRows {
    /// [`FileRows::read_after`] for a file read alone.
    #[cfg(test)]
    pub(crate) fn read_counted(self, caps: Caps, sink: Sink<'_>) -> Result<(u64, u64)> {
        self.read_after(caps, (0, 0), sink)
    }

    /// Reads every row into `sink`, counting against `caps` as it goes, together with what
    /// the files of the same upload read before (`before`: rows, bytes): rows, and bytes as
    /// the rows will be stored (a dictionary column counts each row's value, not its shared
    /// dictionary once). A batch that would be large once expanded goes on in slices, so no
    /// more than about [`SLICE_BYTES`] of it is ever expanded at once. Returns the totals.
    pub(crate) fn read_after(
        self,
        caps: Caps,
        before: (u64, u64),
        sink: Sink<'_>,
    ) -> Result<(u64, u64)> {
        let (mut rows, mut bytes) = before;
        (self.rows)(&mut |batch: RecordBatch| {
            let size = stored_size(&batch);
            rows += batch.num_rows() as u64;
            bytes = bytes.saturating_add(size);
            if rows > caps.max_rows {
                return Err(caps.rows_over());
            }
            if bytes > caps.max_bytes {
                return Err(caps.bytes_over());
            }
            let slices = size
                .div_ceil(SLICE_BYTES)
                .clamp(1, batch.num_rows().max(1) as u64);
            let per_slice = batch.num_rows().div_ceil(slices as usize).max(1);
            let mut at = 0;
            while at < batch.num_rows() {
                let length = per_slice.min(batch.num_rows() - at);
                sink(batch.slice(at, length))?;
                at += length;
            }
            Ok(())
        })?;
        Ok((rows, bytes))
    }
}

/// The most bytes of a batch handed on at once, once its dictionaries are expanded.
const SLICE_BYTES: u64 = 8 * 1024 * 1024;

/// The bytes `batch` takes as it will be stored: its values' bytes (not what the buffers that
/// hold them have room for, which a reader that builds them grows by doubling), dictionary
/// columns expanded.
pub(super) fn stored_size(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Dictionary(_, _) => expanded_size(column.as_any_dictionary()),
            _ => column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size()) as u64,
        })
        .sum()
}

/// What a dictionary array takes once each row holds its own value: the sum of its rows'
/// value sizes, counted from the dictionary without expanding it.
fn expanded_size(dictionary: &dyn AnyDictionaryArray) -> u64 {
    let values = dictionary.values();
    let count = values.len();
    let each: Vec<u64> = if let Some(text) = values.as_string_opt::<i32>() {
        (0..count)
            .map(|i| text.value_length(i) as u64 + 4)
            .collect()
    } else if let Some(text) = values.as_string_opt::<i64>() {
        (0..count)
            .map(|i| text.value_length(i) as u64 + 8)
            .collect()
    } else if let Some(bytes) = values.as_binary_opt::<i32>() {
        (0..count)
            .map(|i| bytes.value_length(i) as u64 + 4)
            .collect()
    } else if let Some(bytes) = values.as_binary_opt::<i64>() {
        (0..count)
            .map(|i| bytes.value_length(i) as u64 + 8)
            .collect()
    } else {
        let average = values.get_array_memory_size() as u64 / count.max(1) as u64;
        // bounded: one per row of a batch in memory
        vec![average.max(1); count]
    };
    let keys = dictionary.keys();
    dictionary
        .normalized_keys()
        .iter()
        .enumerate()
        .filter(|(row, _)| keys.is_valid(*row))
        .map(|(_, key)| each.get(*key).copied().unwrap_or(0))
        .sum()
}

/// A column with no values at all is inferred as `Null`; it is stored as text instead.
pub(super) fn with_text_for_null(schema: &Schema) -> Schema {
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Null => f.as_ref().clone().with_data_type(DataType::Utf8),
                _ => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    )
}

/// A table needs columns with distinct names (ignoring case, as SQL does).
pub(super) fn check_columns(schema: &Schema) -> Result<()> {
    if schema.fields().is_empty() {
        return Err(Error::invalid("The file has no columns"));
    }
    if schema.fields().len() > MAX_COLUMNS {
        return Err(too_wide(schema.fields().len()));
    }
    let mut seen = std::collections::HashSet::new();
    for field in schema.fields() {
        if field.name().trim().is_empty() {
            return Err(Error::invalid("The file has a column without a name"));
        }
        if !seen.insert(field.name().to_ascii_lowercase()) {
            return Err(Error::invalid(format!(
                "The file has two columns named '{}'",
                field.name()
            )));
        }
    }
    Ok(())
}

pub(super) fn too_wide(columns: usize) -> Error {
    Error::invalid(format!(
        "The file has {columns} columns; at most {MAX_COLUMNS} are accepted"
    ))
}

/// Runs a call into a reader of outside bytes, a panic in it becoming the error for a damaged
/// file (`what` names the format). Parquet's reader (parquet 59) panics on some damaged files
/// where it should fail, such as a page of dictionary indexes in a column without a dictionary
/// page; the document readers are held to the same rule. A reader that has panicked is not
/// used again.
pub(super) fn contained<T>(what: &str, call: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::invalid(format!(
            "The file is not readable as {what}: it is damaged (the reader failed: {detail})"
        )))
    })
}
