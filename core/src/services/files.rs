//! Uploaded files (MindsDB's `files` database): a CSV or JSON upload is read into Arrow here,
//! with its column types inferred, and stored as a table of the `files` database, which SQL
//! reads as `files.<name>`. Reading decides the format (given, or from the name's extension,
//! or from the first bytes) and says what is wrong with a file that cannot be read.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{AnyDictionaryArray, Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::csv::reader::Format as CsvFormat;
use datafusion::arrow::csv::ReaderBuilder as CsvReaderBuilder;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::json::reader::infer_json_schema_from_iterator;
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::FormatOptions;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use bytes::Bytes;

use crate::catalog::namespace::FILES_DB;
use crate::catalog::tables;
use crate::error::{Error, Result};
use crate::sql::{LoadMode, LoadTarget, SqlRunner};
use crate::store::schema::{TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

/// Rows per batch while reading a file.
const BATCH_ROWS: usize = 8192;

/// The most columns a file may have: wider ones are refused before their rows are read.
const MAX_COLUMNS: usize = 4096;

/// The formats a file can be uploaded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// A JSON array of objects, or one object per line.
    Json,
    /// Apache Parquet; its own column types are kept.
    Parquet,
}

impl FileFormat {
    /// The format a name (`csv`, `json`, `jsonl`, `ndjson`, or a media type such as
    /// `text/csv` or `application/json`) stands for.
    pub fn from_name(name: &str) -> Option<FileFormat> {
        let name = name.trim().to_ascii_lowercase();
        let name = name.split(';').next().unwrap_or_default().trim();
        match name.rsplit(['.', '/', '+']).next().unwrap_or_default() {
            "csv" => Some(FileFormat::Csv),
            "json" | "jsonl" | "ndjson" | "x-ndjson" | "jsonlines" => Some(FileFormat::Json),
            "parquet" | "x-parquet" | "vnd.apache.parquet" => Some(FileFormat::Parquet),
            _ => None,
        }
    }

    /// The format a caller names (as [`FileFormat::from_name`] reads names); an error naming
    /// the formats there are otherwise.
    pub fn parse(name: &str) -> Result<FileFormat> {
        FileFormat::from_name(name).ok_or_else(|| {
            Error::invalid(format!(
                "Unknown file format '{name}'; files are csv, json (an array of objects, or one object per line) or parquet"
            ))
        })
    }
}

/// An uploaded file as `GET /api/files` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    /// The table name: `files.<name>` in SQL.
    pub name: String,
    /// Rows stored.
    pub row_count: u64,
    /// Column names, in order.
    pub columns: Vec<String>,
}

impl FileInfo {
    /// MindsDB's listing record: `{"name", "row_count", "columns"}`.
    pub fn to_wire_json(&self) -> Value {
        serde_json::json!({"name": self.name, "row_count": self.row_count, "columns": self.columns})
    }
}

impl SqlRunner {
    /// Reads `bytes` as a file (see [`read`]) and stores it as `files.<name>`, in one
    /// transaction: all rows or none. A file of that name is a Conflict. Returns the rows.
    pub(crate) async fn upload_file(
        &self,
        tenant: TenantId,
        name: &str,
        bytes: Vec<u8>,
        format: Option<FileFormat>,
        file_name: Option<String>,
    ) -> Result<u64> {
        // A bad name is refused before the file is read.
        crate::catalog::namespace::validate_name("file", name)?;
        let caps = Caps::of(&self.config);
        let bytes = Bytes::from(bytes);
        let mut swept = false;
        loop {
            let (bytes, file_name) = (bytes.clone(), file_name.clone());
            // Inferring the columns reads the file once: CPU work, off the async workers.
            let file = crate::memory::spawn_blocking(move || {
                open(bytes, format, file_name.as_deref(), caps)
            })
            .await
            .map_err(|e| Error::internal(format!("reading the file stopped: {e}")))??;
            let schema = Arc::clone(&file.schema);
            // Decoded batch by batch into the staged table, within the caps: nothing is
            // stored unless every row fits.
            let rows: crate::sql::BatchSource = Box::new(move |sink| file.read_into(caps, sink));
            let loaded = self
                .load_into(
                    tenant,
                    LoadTarget::File,
                    name,
                    schema,
                    rows,
                    LoadMode::Create,
                )
                .await;
            return match loaded {
                Err(e) if e.kind() == crate::ErrorKind::Conflict => Err(Error::conflict(format!(
                    "File with name '{name}' already exists"
                ))),
                // What this user deleted just now counts until swept (replacing a file is
                // a delete, then an upload): read again, once, after it is gone.
                Err(refused) if refused.refused_for_storage() && !swept => {
                    self.wait_for_sweep(tenant, refused).await?;
                    swept = true;
                    continue;
                }
                other => other,
            };
        }
    }

    /// Every uploaded file, by name.
    pub(crate) fn list_files(&self, tenant: TenantId) -> Result<Vec<FileInfo>> {
        let txn = self.store.read()?;
        let records = tables::list(&txn.open_table(TABLES)?, tenant, FILES_DB)?;
        let schemas = txn.open_table(TABLE_SCHEMAS)?;
        records
            .into_iter()
            .map(|record| {
                let schema = tables::schema(&schemas, record.id)?;
                Ok(FileInfo {
                    columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
                    name: record.name,
                    row_count: record.row_count,
                })
            })
            .collect()
    }

    /// Removes the uploaded file `name`; NotFound when there is none.
    pub(crate) async fn delete_file(&self, tenant: TenantId, name: &str) -> Result<()> {
        let name = name.to_string();
        self.store
            .write(move |txn| {
                if tables::drop_table(txn, tenant, FILES_DB, &name)? {
                    Ok(())
                } else {
                    Err(Error::not_found(format!("File '{name}' does not exist")))
                }
            })
            .await
    }
}

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

    fn rows_over(&self) -> Error {
        Error::invalid(format!(
            "The file holds more than {} rows, the most one upload may (files.max_rows); nothing was stored",
            self.max_rows
        ))
    }

    fn bytes_over(&self) -> Error {
        Error::invalid(format!(
            "The file decodes to more than {} MiB, the most one upload may (files.max_decoded_mb); nothing was stored",
            self.max_bytes / (1024 * 1024)
        ))
    }
}

/// Rows handed on one batch at a time; the sink's error stops the reading.
type Sink<'a> = &'a mut dyn FnMut(RecordBatch) -> Result<()>;

/// A file opened for reading: its columns now, its rows batch by batch when run.
pub(crate) struct FileRows {
    pub(crate) schema: SchemaRef,
    rows: Box<dyn FnOnce(Sink<'_>) -> Result<()> + Send>,
}

impl FileRows {
    /// Reads every row into `sink`, counting against `caps` as it goes: rows, and bytes as the
    /// rows will be stored (a dictionary column counts each row's value, not its shared
    /// dictionary once). A batch that would be large once expanded goes on in slices, so no
    /// more than about [`SLICE_BYTES`] of it is ever expanded at once.
    pub(crate) fn read_into(self, caps: Caps, sink: Sink<'_>) -> Result<()> {
        let (mut rows, mut bytes) = (0u64, 0u64);
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
        })
    }
}

/// The most bytes of a batch handed on at once, once its dictionaries are expanded.
const SLICE_BYTES: u64 = 8 * 1024 * 1024;

/// The bytes `batch` takes as it will be stored: dictionary columns expanded.
fn stored_size(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Dictionary(_, _) => expanded_size(column.as_any_dictionary()),
            _ => column.get_array_memory_size() as u64,
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

/// Opens an uploaded file. `format` as given, else guessed from `file_name`'s extension, else
/// from the first bytes (`[` or `{` is JSON, `PAR1` is Parquet, anything else CSV). The
/// columns are known (and checked) when this returns; rows are decoded only as they are read.
pub(crate) fn open(
    bytes: Bytes,
    format: Option<FileFormat>,
    file_name: Option<&str>,
    caps: Caps,
) -> Result<FileRows> {
    // A byte-order mark (spreadsheets write one) would become part of the first column's name.
    let bytes = if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.slice(3..)
    } else {
        bytes
    };
    let named = file_name.and_then(|name| {
        let extension = name.rsplit_once('.')?.1.to_ascii_lowercase();
        matches!(extension.as_str(), "tsv" | "xlsx" | "xls" | "txt").then_some(extension)
    });
    if let (None, Some(extension)) = (format, named) {
        return Err(Error::invalid(format!(
            "'.{extension}' files cannot be uploaded; upload CSV (comma-separated, with a header line), JSON or Parquet"
        )));
    }
    let format = match format.or_else(|| file_name.and_then(FileFormat::from_name)) {
        Some(format) => format,
        None => sniff(&bytes)?,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid("The file is empty"));
    }
    match format {
        FileFormat::Csv => open_csv(bytes),
        FileFormat::Json => open_json(bytes),
        FileFormat::Parquet => open_parquet(bytes, caps),
    }
}

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
fn open_parquet(bytes: Bytes, caps: Caps) -> Result<FileRows> {
    use datafusion::parquet::arrow::arrow_reader::{
        ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::invalid(format!("The file is not readable as Parquet: {e}"))
    };
    let builder = contained(|| {
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
    let mut reader = contained(|| {
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
            while let Some(batch) = contained(|| Ok(reader.next()))? {
                let batch = batch.map_err(|e| unreadable(&e))?;
                sink(RecordBatch::try_new(
                    Arc::clone(&target),
                    batch.columns().to_vec(),
                )?)?;
            }
            Ok(())
        }),
    })
}

/// Runs a call into the Parquet reader, a panic in it becoming the error for a damaged file.
/// The reader (parquet 59) panics on some damaged files where it should fail, such as a page
/// of dictionary indexes in a column without a dictionary page; once it has panicked it is
/// not used again.
fn contained<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::invalid(format!(
            "The file is not readable as Parquet: it is damaged (the reader failed: {detail})"
        )))
    })
}

fn sniff(bytes: &[u8]) -> Result<FileFormat> {
    if bytes.starts_with(b"PAR1") {
        return Ok(FileFormat::Parquet);
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    Ok(match start.map(|i| bytes[i]) {
        Some(b'[' | b'{') => FileFormat::Json,
        _ => FileFormat::Csv,
    })
}

/// CSV: types inferred from the whole file, then checked by reading it once; where a value
/// only looked typed (`2021-02-30`), that column is text. Read again batch by batch.
fn csv_unreadable(e: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!("The file is not readable as CSV: {e}"))
}

fn open_csv(bytes: Bytes) -> Result<FileRows> {
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

/// A column with no values at all is inferred as `Null`; it is stored as text instead.
fn with_text_for_null(schema: &Schema) -> Schema {
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

fn json_unreadable(e: &dyn std::fmt::Display) -> Error {
    Error::invalid(format!(
        "The file is not readable as JSON (an array of objects, or one object per line): {e}"
    ))
}

/// JSON, an array of objects or one object per line: read twice, one row at a time, never
/// whole (the first pass checks the rows and infers the columns, the second decodes them).
fn open_json(bytes: Bytes) -> Result<FileRows> {
    let text = std::str::from_utf8(&bytes).map_err(|e| json_unreadable(&e))?;
    // serde_json's objects sort their keys; the columns keep the order of the file instead.
    // Counted first, so a body of a million distinct keys is refused before inference.
    let order = key_order(text).map_err(|e| {
        if e.is_data() {
            json_unreadable(&format!("a row is not an object ({e})"))
        } else {
            json_unreadable(&e)
        }
    })?;
    if order.len() > MAX_COLUMNS {
        return Err(too_wide(order.len()));
    }
    let inferred = infer_json_schema_from_iterator(json_rows(&bytes)).map_err(|e| match e {
        datafusion::arrow::error::ArrowError::ExternalError(inner) => {
            match inner.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(other) => json_unreadable(&other),
            }
        }
        _ => json_unreadable(
            &"a key holds an object in one row and another kind of value in another",
        ),
    })?;
    let mut fields: Vec<Field> = with_text_for_null(&inferred)
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.sort_by_key(|f| order.get_index_of(f.name()));
    let schema = Schema::new(fields);
    check_columns(&schema)?;
    let schema = Arc::new(schema);
    // Numbers and booleans in a column inferred as text (mixed kinds) are read as their text.
    let mut decoder = JsonReaderBuilder::new(Arc::clone(&schema))
        .with_batch_size(BATCH_ROWS)
        .with_coerce_primitive(true)
        .build_decoder()
        .map_err(|e| json_unreadable(&e))?;
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink: Sink<'_>| {
            let mut chunk = Vec::with_capacity(BATCH_ROWS);
            let mut rows = json_rows(&bytes);
            loop {
                chunk.clear();
                for row in rows.by_ref().take(BATCH_ROWS) {
                    chunk.push(row.map_err(|e| json_unreadable(&e))?);
                }
                if chunk.is_empty() {
                    return Ok(());
                }
                decoder.serialize(&chunk).map_err(|e| json_unreadable(&e))?;
                if let Some(batch) = decoder.flush().map_err(|e| json_unreadable(&e))? {
                    sink(batch)?;
                }
            }
        }),
    })
}

/// The rows of a JSON file one at a time, each checked to be an object: the elements of a
/// top-level array, or the values one after another.
fn json_rows(
    bytes: &[u8],
) -> impl Iterator<Item = std::result::Result<Value, datafusion::arrow::error::ArrowError>> + '_ {
    let external = |e: Error| datafusion::arrow::error::ArrowError::ExternalError(Box::new(e));
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    let values: Box<dyn Iterator<Item = Result<Value>> + '_> = if bytes.get(start) == Some(&b'[') {
        Box::new(ArrayElements::new(bytes, start + 1).map(|element| {
            element.and_then(|slice| {
                serde_json::from_slice::<Value>(slice).map_err(|e| json_unreadable(&e))
            })
        }))
    } else {
        Box::new(
            serde_json::Deserializer::from_slice(bytes)
                .into_iter::<Value>()
                .map(|value| value.map_err(|e| json_unreadable(&e))),
        )
    };
    values.map(move |value| {
        let value = value.map_err(external)?;
        if value.is_object() {
            Ok(value)
        } else {
            let shown = crate::egress::excerpt(&value.to_string(), 60);
            Err(external(json_unreadable(&format!(
                "a row is not an object: {shown}"
            ))))
        }
    })
}

/// The elements of a JSON array as byte slices, found by scanning for the commas and the
/// closing bracket at depth zero outside strings; each is parsed on its own.
struct ArrayElements<'a> {
    bytes: &'a [u8],
    at: usize,
    done: bool,
}

impl<'a> ArrayElements<'a> {
    /// The elements of the array whose `[` is just before `at`.
    fn new(bytes: &'a [u8], at: usize) -> Self {
        ArrayElements {
            bytes,
            at,
            done: false,
        }
    }
}

impl<'a> Iterator for ArrayElements<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let bytes = self.bytes;
        let skip_space = |mut at: usize| {
            while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
                at += 1;
            }
            at
        };
        let start = skip_space(self.at);
        let fail = |done: &mut bool, what: &str| {
            *done = true;
            Some(Err(json_unreadable(&what)))
        };
        if bytes.get(start) == Some(&b']') {
            self.done = true;
            return if bytes[start + 1..].iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                fail(&mut self.done, "text after the closing bracket")
            };
        }
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        let mut at = start;
        while at < bytes.len() {
            let b = bytes[at];
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth > 0 => depth -= 1,
                    b',' | b']' if depth == 0 => {
                        let element = &bytes[start..at];
                        if element.iter().all(u8::is_ascii_whitespace) {
                            return fail(&mut self.done, "an empty element in the array");
                        }
                        if b == b']' {
                            self.done = true;
                            if !bytes[at + 1..].iter().all(u8::is_ascii_whitespace) {
                                return fail(&mut self.done, "text after the closing bracket");
                            }
                        }
                        self.at = at + 1;
                        return Some(Ok(element));
                    }
                    _ => {}
                }
            }
            at += 1;
        }
        fail(&mut self.done, "the array is not closed")
    }
}

/// A table needs columns with distinct names (ignoring case, as SQL does).
fn check_columns(schema: &Schema) -> Result<()> {
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

fn too_wide(columns: usize) -> Error {
    Error::invalid(format!(
        "The file has {columns} columns; at most {MAX_COLUMNS} are accepted"
    ))
}

/// Every object key of a JSON document (an array of objects, or objects one after another),
/// each once, in the order it first appears.
fn key_order(text: &str) -> serde_json::Result<KeyOrder> {
    let mut keys = KeyOrder::default();
    for document in serde_json::Deserializer::from_str(text).into_iter::<Keys>() {
        for key in document?.0 {
            keys.insert(key);
        }
    }
    Ok(keys)
}

/// Distinct keys in the order they first appear.
#[derive(Default)]
struct KeyOrder {
    positions: std::collections::HashMap<String, usize>,
}

impl KeyOrder {
    fn insert(&mut self, key: String) {
        let next = self.positions.len();
        self.positions.entry(key).or_insert(next);
    }

    fn get_index_of(&self, key: &str) -> Option<usize> {
        self.positions.get(key).copied()
    }

    fn len(&self) -> usize {
        self.positions.len()
    }
}

/// The keys of an object, or of each object of an array, in order.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct KeysVisitor;
        impl<'de> Visitor<'de> for KeysVisitor {
            type Value = Keys;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object or an array of objects")
            }

            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(Keys(keys))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Keys, A::Error> {
                let mut order = KeyOrder::default();
                while let Some(Keys(more)) = seq.next_element::<Keys>()? {
                    for key in more {
                        order.insert(key);
                    }
                }
                let mut keys: Vec<(String, usize)> = order.positions.into_iter().collect();
                keys.sort_by_key(|(_, position)| *position);
                Ok(Keys(keys.into_iter().map(|(key, _)| key).collect()))
            }
        }
        deserializer.deserialize_any(KeysVisitor)
    }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::DataType;

    /// A file read whole, for looking at.
    struct FileData {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    }

    const NO_CAPS: Caps = Caps {
        max_rows: u64::MAX,
        max_bytes: u64::MAX,
    };

    fn read(bytes: &[u8], format: Option<FileFormat>, name: Option<&str>) -> Result<FileData> {
        let file = open(Bytes::copy_from_slice(bytes), format, name, NO_CAPS)?;
        let schema = Arc::clone(&file.schema);
        let mut batches = Vec::new();
        file.read_into(NO_CAPS, &mut |batch| {
            batches.push(batch);
            Ok(())
        })?;
        Ok(FileData { schema, batches })
    }

    #[test]
    fn caps_stop_a_file_while_it_is_read() {
        let csv: String = std::iter::once("n,s\n".to_string())
            .chain((0..20_000).map(|i| format!("{i},{}\n", "x".repeat(100))))
            .collect();
        let caps = Caps {
            max_rows: 10_000,
            max_bytes: u64::MAX,
        };
        let file = open(Bytes::from(csv.clone()), None, None, caps).unwrap();
        let mut seen = 0;
        let err = file
            .read_into(caps, &mut |batch| {
                seen += batch.num_rows();
                Ok(())
            })
            .unwrap_err();
        assert!(err.message().contains("files.max_rows"), "{err}");
        assert!(
            seen <= 10_000,
            "nothing past the cap was handed on ({seen})"
        );
        let caps = Caps {
            max_rows: u64::MAX,
            max_bytes: 1 << 20,
        };
        let file = open(Bytes::from(csv), None, None, caps).unwrap();
        let err = file.read_into(caps, &mut |_| Ok(())).unwrap_err();
        assert!(err.message().contains("files.max_decoded_mb"), "{err}");
    }

    /// A tiny Parquet file of one long text repeated (dictionary-encoded, compressed) is
    /// counted as it will be stored, and refused before it is expanded.
    #[test]
    fn a_parquet_file_that_expands_is_refused_by_its_stored_size() {
        use datafusion::arrow::array::{DictionaryArray, Int32Array};
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::basic::{Compression, ZstdLevel};
        use datafusion::parquet::file::properties::WriterProperties;
        let rows = 200_000;
        let long = "x".repeat(10_000);
        let keys = Int32Array::from(vec![0; rows]);
        let dictionary =
            DictionaryArray::new(keys, Arc::new(StringArray::from(vec![long.clone()])));
        // Arrow's own dictionary type, and plain text that Parquet dictionary-encodes itself.
        let plain = StringArray::from(vec![long.as_str(); 20_000]);
        for column in [
            Arc::new(dictionary) as ArrayRef,
            Arc::new(plain) as ArrayRef,
        ] {
            let batch = RecordBatch::try_from_iter([("s", column)]).unwrap();
            let mut file = Vec::new();
            let properties = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
                .build();
            let mut writer =
                ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            assert!(file.len() < 200_000, "a small file: {} bytes", file.len());
            let caps = Caps {
                max_rows: u64::MAX,
                max_bytes: 32 << 20,
            };
            let opened = open(Bytes::from(file), None, Some("bomb.parquet"), caps).unwrap();
            let mut expanded = 0u64;
            let err = opened
                .read_into(caps, &mut |batch| {
                    expanded += stored_size(&batch);
                    Ok(())
                })
                .unwrap_err();
            assert!(err.message().contains("files.max_decoded_mb"), "{err}");
            assert!(
                expanded <= caps.max_bytes,
                "refused before more than the cap was handed on"
            );
        }
    }

    #[test]
    fn json_arrays_are_split_into_rows_without_parsing_them_whole() {
        let data = read(
            br#" [ {"a": "x, ] y", "b": {"c": "}]["}} , {"a": "q\"]"} ] "#,
            None,
            None,
        )
        .unwrap();
        assert_eq!(data.batches[0].num_rows(), 2);
        for bad in [&br#"[{"a": 1},]"#[..], br#"[{"a": 1}] x"#, br#"[{"a": 1}"#] {
            let err = read(bad, None, None).err().expect("refused");
            assert!(
                err.message().contains("not readable as JSON"),
                "{}",
                err.message()
            );
        }
    }

    fn names(data: &FileData) -> Vec<String> {
        data.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    #[test]
    fn csv_columns_and_types_are_inferred() {
        let data = read(b"x,y,name\n1,2.5,a\n2,,b\n", None, Some("t.csv")).unwrap();
        assert_eq!(names(&data), ["x", "y", "name"]);
        let types: Vec<&DataType> = data.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(
            types,
            [&DataType::Int64, &DataType::Float64, &DataType::Utf8]
        );
        assert_eq!(data.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    }

    #[test]
    fn a_value_that_only_looks_typed_makes_its_column_text() {
        let data = read(b"d,n\n2021-01-01,1\n2021-02-30,\n", None, None).unwrap();
        let types: Vec<&DataType> = data.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types, [&DataType::Utf8, &DataType::Int64]);
        let empty = read(b"a,b\n1,\n", None, None).unwrap();
        assert_eq!(empty.schema.field(1).data_type(), &DataType::Utf8);
    }

    #[test]
    fn json_values_of_mixed_kinds_are_text() {
        let data = read(br#"[{"zip": 12345}, {"zip": "A1B"}]"#, None, None).unwrap();
        assert_eq!(data.schema.field(0).data_type(), &DataType::Utf8);
        let mixed = read(br#"[{"a": {"b": 1}}, {"a": 2}]"#, None, None)
            .err()
            .unwrap();
        assert!(
            mixed.message().contains("holds an object"),
            "{}",
            mixed.message()
        );
        let wide: String = (0..=MAX_COLUMNS)
            .map(|i| format!("{{\"k{i}\": 1}}\n"))
            .collect();
        let error = read(wide.as_bytes(), None, None).err().unwrap();
        assert!(
            error.message().contains("at most 4096"),
            "{}",
            error.message()
        );
        let tsv = read(b"a\tb\n1\t2\n", None, Some("x.tsv")).err().unwrap();
        assert!(tsv.message().contains("'.tsv'"), "{}", tsv.message());
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_name() {
        let data = read(b"\xEF\xBB\xBFid,v\n1,2\n", None, None).unwrap();
        assert_eq!(names(&data), ["id", "v"]);
    }

    #[test]
    fn json_keeps_the_files_column_order() {
        for text in [
            r#"[{"zeta": 1, "alpha": "a"}, {"zeta": 2, "mid": true}]"#,
            "{\"zeta\": 1, \"alpha\": \"a\"}\n{\"zeta\": 2, \"mid\": true}\n",
        ] {
            let data = read(text.as_bytes(), None, None).unwrap();
            assert_eq!(names(&data), ["zeta", "alpha", "mid"], "{text}");
            assert_eq!(data.batches[0].num_rows(), 2);
        }
    }

    #[test]
    fn unreadable_files_say_why() {
        let cases: [(&[u8], Option<FileFormat>, &str); 5] = [
            (b"  \n", None, "empty"),
            (b"PAR1....", None, "Parquet"),
            (b"[1, 2]", None, "not an object"),
            (
                b"[{\"a\": 1}",
                Some(FileFormat::Json),
                "not readable as JSON",
            ),
            (b"a,A\n1,2\n", None, "two columns named 'A'"),
        ];
        for (bytes, format, expected) in cases {
            let error = read(bytes, format, None).err().expect("refused");
            assert!(error.message().contains(expected), "{}", error.message());
        }
    }

    #[test]
    fn formats_are_named_by_extension_or_media_type() {
        assert_eq!(FileFormat::from_name("data.CSV"), Some(FileFormat::Csv));
        assert_eq!(
            FileFormat::from_name("text/csv; charset=utf-8"),
            Some(FileFormat::Csv)
        );
        assert_eq!(
            FileFormat::from_name("application/json"),
            Some(FileFormat::Json)
        );
        assert_eq!(FileFormat::from_name("rows.ndjson"), Some(FileFormat::Json));
        assert_eq!(FileFormat::from_name("application/octet-stream"), None);
    }
}
