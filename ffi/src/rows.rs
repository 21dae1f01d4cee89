//! `mindlite_result`: a query's result read in full, with typed cell access (like
//! `sqlite3_column_*` and `duckdb_value_*`) and the result as MindsDB's JSON document.

use std::ffi::{c_char, CString};
use std::io::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as types, DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use mindlite::{
    encode_document, Engine, Outcome, QueryRequest, QueryResult, ResultContext, TableResult,
};

use crate::boundary::{self, c_string, give_string, lock, out, Failure, LastError, Status};
use crate::database::{with_database, Database};
use crate::{
    MINDLITE_INVALID, MINDLITE_MISMATCH, MINDLITE_MISUSE, MINDLITE_NULL_VALUE, MINDLITE_OK,
    MINDLITE_RANGE,
};

/// A column's type as C sees it; `mindlite_result_column_type_name` gives the exact Arrow type.
pub type ColumnType = i32;

/// Only NULLs (a column of the literal NULL).
pub const MINDLITE_TYPE_NULL: ColumnType = 0;
/// Booleans: read with `mindlite_result_bool`.
pub const MINDLITE_TYPE_BOOL: ColumnType = 1;
/// Signed or unsigned integers of any width: read with `mindlite_result_int64` (or `_double`).
pub const MINDLITE_TYPE_INT64: ColumnType = 2;
/// Floating point and decimal numbers: read with `mindlite_result_double`.
pub const MINDLITE_TYPE_DOUBLE: ColumnType = 3;
/// Text: read with `mindlite_result_text`.
pub const MINDLITE_TYPE_TEXT: ColumnType = 4;
/// Bytes: `mindlite_result_text` gives them as hex.
pub const MINDLITE_TYPE_BINARY: ColumnType = 5;
/// Dates: `mindlite_result_text` gives `YYYY-MM-DD`.
pub const MINDLITE_TYPE_DATE: ColumnType = 6;
/// Times of day: `mindlite_result_text` gives `HH:MM:SS[.fff]`.
pub const MINDLITE_TYPE_TIME: ColumnType = 7;
/// Timestamps: `mindlite_result_text` gives ISO 8601.
pub const MINDLITE_TYPE_TIMESTAMP: ColumnType = 8;
/// Anything else (intervals, lists, structs, 256-bit decimals): `mindlite_result_text` gives its
/// text form.
pub const MINDLITE_TYPE_OTHER: ColumnType = 9;

/// A result read in full. Opaque to C.
pub struct Rows {
    engine: Engine,
    context: ResultContext,
    /// `context.db` for C.
    current_db: CString,
    /// Whether the statement produced a table (possibly empty) rather than an ok.
    table: bool,
    schema: SchemaRef,
    column_names: Vec<CString>,
    type_names: Vec<CString>,
    batches: Vec<RecordBatch>,
    /// The row number each batch starts at, to find a row's batch by binary search.
    starts: Vec<u64>,
    row_count: u64,
    affected_rows: Option<u64>,
    /// Where `mindlite_result_text` puts the cell it returns (NUL-terminated).
    text: std::sync::Mutex<Vec<u8>>,
    last_error: LastError,
}

impl Rows {
    fn read(engine: &Engine, result: QueryResult) -> Result<Rows, Failure> {
        let table = matches!(result.outcome, Outcome::Table(_));
        let (column_names, schema, batches, affected_rows) = match result.outcome {
            Outcome::Error(e) => return Err(e.into()),
            Outcome::Ok { affected_rows } => (
                Vec::new(),
                SchemaRef::new(types::Schema::empty()),
                Vec::new(),
                affected_rows,
            ),
            Outcome::Table(TableResult {
                column_names,
                mut stream,
            }) => {
                let schema = stream.schema();
                let mut batches = Vec::new();
                while let Some(batch) = engine.block_on(stream.next()) {
                    let batch = batch.map_err(mindlite::Error::from)?;
                    if batch.num_rows() > 0 {
                        batches.push(batch);
                    }
                }
                (column_names, schema, batches, None)
            }
        };
        // bounded: one per batch already in memory
        let mut starts = Vec::with_capacity(batches.len());
        let mut row_count = 0u64;
        for batch in &batches {
            starts.push(row_count);
            row_count += batch.num_rows() as u64;
        }
        Ok(Rows {
            engine: engine.clone(),
            current_db: c_string(result.context.db.clone()),
            context: result.context,
            table,
            type_names: schema
                .fields()
                .iter()
                .map(|f| c_string(f.data_type().to_string()))
                .collect(),
            column_names: column_names.into_iter().map(c_string).collect(),
            schema,
            batches,
            starts,
            row_count,
            affected_rows,
            text: Default::default(),
            last_error: LastError::default(),
        })
    }

    fn column(&self, col: u64) -> Result<usize, Failure> {
        let count = self.column_names.len();
        usize::try_from(col)
            .ok()
            .filter(|&c| c < count)
            .ok_or_else(|| {
                Failure::new(
                    MINDLITE_RANGE,
                    format!("column {col} is out of range: the result has {count} columns"),
                )
            })
    }

    /// The array and index holding cell (`row`, `col`), or why there is none.
    fn cell(&self, row: u64, col: u64) -> Result<(&ArrayRef, usize), Failure> {
        let col = self.column(col)?;
        if row >= self.row_count {
            return Err(Failure::new(
                MINDLITE_RANGE,
                format!(
                    "row {row} is out of range: the result has {} rows",
                    self.row_count
                ),
            ));
        }
        let batch = self.starts.partition_point(|&start| start <= row) - 1;
        Ok((
            self.batches[batch].column(col),
            (row - self.starts[batch]) as usize,
        ))
    }

    /// Like [`Rows::cell`], failing with `MINDLITE_NULL_VALUE` on a NULL.
    fn value(&self, row: u64, col: u64) -> Result<(&ArrayRef, usize), Failure> {
        let (array, index) = self.cell(row, col)?;
        if array.is_null(index) {
            return Err(Failure::new(
                MINDLITE_NULL_VALUE,
                format!(
                    "the value in row {row}, column '{}' is NULL",
                    self.name(col)
                ),
            ));
        }
        Ok((array, index))
    }

    fn name(&self, col: u64) -> String {
        self.column_names[col as usize]
            .to_string_lossy()
            .into_owned()
    }

    fn mismatch(&self, col: u64, wanted: &str, hint: &str) -> Failure {
        Failure::new(
            MINDLITE_MISMATCH,
            format!(
                "column '{}' is {}, not {wanted}; {hint}",
                self.name(col),
                self.schema.field(col as usize).data_type()
            ),
        )
    }
}

fn column_type(data_type: &DataType) -> ColumnType {
    match data_type {
        DataType::Null => MINDLITE_TYPE_NULL,
        DataType::Boolean => MINDLITE_TYPE_BOOL,
        t if t.is_integer() => MINDLITE_TYPE_INT64,
        t if t.is_floating() => MINDLITE_TYPE_DOUBLE,
        DataType::Decimal32(..) | DataType::Decimal64(..) | DataType::Decimal128(..) => {
            MINDLITE_TYPE_DOUBLE
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => MINDLITE_TYPE_TEXT,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => MINDLITE_TYPE_BINARY,
        DataType::Date32 | DataType::Date64 => MINDLITE_TYPE_DATE,
        DataType::Time32(_) | DataType::Time64(_) => MINDLITE_TYPE_TIME,
        DataType::Timestamp(..) => MINDLITE_TYPE_TIMESTAMP,
        // Text reads any type; the typed getters read plain arrays only.
        DataType::Dictionary(_, value) if column_type(value) == MINDLITE_TYPE_TEXT => {
            MINDLITE_TYPE_TEXT
        }
        _ => MINDLITE_TYPE_OTHER,
    }
}

/// Runs `body` on a result handle, keeping its failure message for `mindlite_result_errmsg`.
fn with_rows(result: *const Rows, body: impl FnOnce(&Rows) -> Result<(), Failure>) -> Status {
    // SAFETY: NULL or a live result, per the header (results are freed only by the caller).
    match unsafe { result.as_ref() } {
        Some(rows) => rows.last_error.run(|| body(rows).map(|()| MINDLITE_OK)),
        None => MINDLITE_MISUSE,
    }
}

/// Runs `sql` (one statement, or several separated by `;`, the result being the last one's) in
/// the handle's current project and reads the whole result. `USE p` changes the current project
/// for later calls on this handle, from every thread. For results too big to hold, use
/// `mindlite_cursor_open` or `mindlite_query_arrow`.
///
/// - `sql`: NUL-terminated UTF-8.
/// - `out_result`: receives the result, or NULL on failure.
///
/// Returns `MINDLITE_INVALID` for bad SQL or unknown names (the message says which),
/// `MINDLITE_NOT_FOUND`, `MINDLITE_CONFLICT` and so on as the statement fails.
///
/// Ownership: the caller owns the result and frees it with `mindlite_result_free`; it stays
/// valid after `db` is closed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_query(
    db: *const Database,
    sql: *const c_char,
    out_result: *mut *mut Rows,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_result) };
    with_database(db, |db| {
        let out_result = out(out_result, "out_result")?;
        // SAFETY: a NUL-terminated string, per the header.
        let sql = unsafe { boundary::text(sql, "sql") }?;
        let rows = Rows::read(db.engine(), db.query(sql))?;
        *out_result = Box::into_raw(Box::new(rows));
        Ok(())
    })
}

/// `mindlite_query` with `:name` placeholders bound to values, never spliced into the text.
///
/// - `params_json`: a JSON object, like `{"id": 7, "name": "O'Brien", "ids": [1, 2], "gone": null}`;
///   null binds NULL, an array a list for `IN :ids`. NULL means no parameters. A placeholder
///   without a value is `MINDLITE_INVALID`, naming it.
///
/// Statuses and ownership as for `mindlite_query`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_query_params(
    db: *const Database,
    sql: *const c_char,
    params_json: *const c_char,
    out_result: *mut *mut Rows,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_result) };
    with_database(db, |db| {
        let out_result = out(out_result, "out_result")?;
        // SAFETY: NUL-terminated strings (params may be NULL), per the header.
        let (sql, params) = unsafe {
            (
                boundary::text(sql, "sql")?,
                boundary::optional_text(params_json, "params_json")?,
            )
        };
        let mut request = QueryRequest::new(sql);
        if let Some(params) = params {
            let values: serde_json::Map<String, serde_json::Value> = serde_json::from_str(params)
                .map_err(|e| {
                Failure::new(
                    MINDLITE_INVALID,
                    format!("params_json must be a JSON object of parameter values: {e}"),
                )
            })?;
            for (name, value) in values {
                request = request.with_param(name, value);
            }
        }
        let rows = Rows::read(db.engine(), db.run(request))?;
        *out_result = Box::into_raw(Box::new(rows));
        Ok(())
    })
}

/// Searches the knowledge base `project.name` for `text`: the `limit` nearest chunks (10 when
/// `limit` is negative), nearest first, among those whose columns equal `filters_json` (NULL,
/// or a JSON object like `{"topic": "pets", "year": [2001, 2002], "author": null}`). The result
/// reads like `mindlite_query`'s: `id, chunk_id, chunk_content, metadata`, the metadata
/// columns, `distance, relevance, content`. `MINDLITE_INVALID` for a filter naming no column.
///
/// Statuses and ownership as for `mindlite_query`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_search(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    text: *const c_char,
    filters_json: *const c_char,
    limit: i64,
    out_result: *mut *mut Rows,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_result) };
    with_database(db, |db| {
        let out_result = out(out_result, "out_result")?;
        // SAFETY: NUL-terminated strings (filters may be NULL), per the header.
        let (project, name, text, filters) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::text(text, "text")?,
                boundary::optional_text(filters_json, "filters_json")?,
            )
        };
        let filters: serde_json::Map<String, serde_json::Value> = match filters {
            Some(filters) => serde_json::from_str(filters).map_err(|e| {
                Failure::new(
                    MINDLITE_INVALID,
                    format!("filters_json must be a JSON object of column values: {e}"),
                )
            })?,
            None => serde_json::Map::new(),
        };
        let limit = u64::try_from(limit).ok();
        let engine = db.engine();
        let result =
            engine.block_on(engine.search_knowledge_base(project, name, text, &filters, limit))?;
        let rows = Rows::read(engine, result)?;
        *out_result = Box::into_raw(Box::new(rows));
        Ok(())
    })
}

/// Frees a result. `mindlite_result_free(NULL)` does nothing.
///
/// Ownership: takes `result`; every pointer obtained from it becomes invalid.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_free(result: *mut Rows) {
    if !result.is_null() {
        // SAFETY: made by `Box::into_raw` in `mindlite_query`, freed once per the header.
        drop(unsafe { Box::from_raw(result) });
    }
}

/// The message of the last failed call on `result`, or "not an error". Never NULL.
///
/// Ownership: owned by the result; valid until the next call on it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_errmsg(result: *const Rows) -> *const c_char {
    // SAFETY: NULL or a live result, per the header.
    match unsafe { result.as_ref() } {
        Some(rows) => rows.last_error.message(),
        None => c"the result handle is NULL".as_ptr(),
    }
}

/// The number of rows (0 for statements without rows).
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_row_count(
    result: *const Rows,
    out_count: *mut u64,
) -> Status {
    with_rows(result, |rows| {
        *out(out_count, "out_count")? = rows.row_count;
        Ok(())
    })
}

/// The number of columns (0 for statements without rows).
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_column_count(
    result: *const Rows,
    out_count: *mut u64,
) -> Status {
    with_rows(result, |rows| {
        *out(out_count, "out_count")? = rows.column_names.len() as u64;
        Ok(())
    })
}

/// The rows an INSERT, UPDATE, DELETE or CREATE TABLE … AS changed, or -1 when the statement
/// does not report a count (queries, DDL).
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_affected_rows(
    result: *const Rows,
    out_count: *mut i64,
) -> Status {
    with_rows(result, |rows| {
        *out(out_count, "out_count")? = rows
            .affected_rows
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        Ok(())
    })
}

/// The project the result ran in, after any `USE` (MindsDB's `context.db`).
///
/// Ownership: owned by the result; valid until it is freed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_current_db(
    result: *const Rows,
    out_name: *mut *const c_char,
) -> Status {
    with_rows(result, |rows| {
        *out(out_name, "out_name")? = rows.current_db.as_ptr();
        Ok(())
    })
}

/// The name of column `col` (0-based), as shown (`SELECT a AS b` gives `b`).
///
/// Ownership: owned by the result; valid until it is freed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_column_name(
    result: *const Rows,
    col: u64,
    out_name: *mut *const c_char,
) -> Status {
    with_rows(result, |rows| {
        let name = out(out_name, "out_name")?;
        *name = rows.column_names[rows.column(col)?].as_ptr();
        Ok(())
    })
}

/// The type of column `col` (a `MINDLITE_TYPE_*` value), which says which getter reads it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_column_type(
    result: *const Rows,
    col: u64,
    out_type: *mut ColumnType,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_type, "out_type")?;
        *slot = column_type(rows.schema.field(rows.column(col)?).data_type());
        Ok(())
    })
}

/// The exact Arrow type of column `col`, like `Int32`, `Utf8` or `Timestamp(ns)`.
///
/// Ownership: owned by the result; valid until it is freed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_column_type_name(
    result: *const Rows,
    col: u64,
    out_name: *mut *const c_char,
) -> Status {
    with_rows(result, |rows| {
        let name = out(out_name, "out_name")?;
        *name = rows.type_names[rows.column(col)?].as_ptr();
        Ok(())
    })
}

/// Whether cell (`row`, `col`) is NULL.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_is_null(
    result: *const Rows,
    row: u64,
    col: u64,
    out_is_null: *mut bool,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_is_null, "out_is_null")?;
        let (array, index) = rows.cell(row, col)?;
        *slot = array.is_null(index);
        Ok(())
    })
}

/// Reads an integer cell. Works on `MINDLITE_TYPE_INT64` columns; `MINDLITE_MISMATCH` for other
/// types and for unsigned values above `INT64_MAX`, `MINDLITE_NULL_VALUE` (and 0) for NULL,
/// `MINDLITE_RANGE` for a row or column out of range.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_int64(
    result: *const Rows,
    row: u64,
    col: u64,
    out_value: *mut i64,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_value, "out_value")?;
        *slot = 0;
        let (array, i) = rows.value(row, col)?;
        *slot = match array.data_type() {
            DataType::Int8 => array.as_primitive::<types::Int8Type>().value(i).into(),
            DataType::Int16 => array.as_primitive::<types::Int16Type>().value(i).into(),
            DataType::Int32 => array.as_primitive::<types::Int32Type>().value(i).into(),
            DataType::Int64 => array.as_primitive::<types::Int64Type>().value(i),
            DataType::UInt8 => array.as_primitive::<types::UInt8Type>().value(i).into(),
            DataType::UInt16 => array.as_primitive::<types::UInt16Type>().value(i).into(),
            DataType::UInt32 => array.as_primitive::<types::UInt32Type>().value(i).into(),
            DataType::UInt64 => {
                let value = array.as_primitive::<types::UInt64Type>().value(i);
                i64::try_from(value).map_err(|_| {
                    Failure::new(
                        MINDLITE_MISMATCH,
                        format!(
                            "the value {value} in column '{}' does not fit int64",
                            rows.name(col)
                        ),
                    )
                })?
            }
            _ => {
                return Err(rows.mismatch(
                    col,
                    "an integer",
                    "read it with mindlite_result_double or mindlite_result_text",
                ))
            }
        };
        Ok(())
    })
}

/// Reads a number as a double. Works on `MINDLITE_TYPE_DOUBLE` and `MINDLITE_TYPE_INT64`
/// columns (integers beyond 2^53 round); statuses as for `mindlite_result_int64`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_double(
    result: *const Rows,
    row: u64,
    col: u64,
    out_value: *mut f64,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_value, "out_value")?;
        *slot = 0.0;
        let (array, i) = rows.value(row, col)?;
        *slot = match array.data_type() {
            DataType::Float16 => array.as_primitive::<types::Float16Type>().value(i).to_f64(),
            DataType::Float32 => array.as_primitive::<types::Float32Type>().value(i).into(),
            DataType::Float64 => array.as_primitive::<types::Float64Type>().value(i),
            DataType::Int8 => array.as_primitive::<types::Int8Type>().value(i).into(),
            DataType::Int16 => array.as_primitive::<types::Int16Type>().value(i).into(),
            DataType::Int32 => array.as_primitive::<types::Int32Type>().value(i).into(),
            DataType::Int64 => array.as_primitive::<types::Int64Type>().value(i) as f64,
            DataType::UInt8 => array.as_primitive::<types::UInt8Type>().value(i).into(),
            DataType::UInt16 => array.as_primitive::<types::UInt16Type>().value(i).into(),
            DataType::UInt32 => array.as_primitive::<types::UInt32Type>().value(i).into(),
            DataType::UInt64 => array.as_primitive::<types::UInt64Type>().value(i) as f64,
            DataType::Decimal128(_, scale) => {
                let value = array.as_primitive::<types::Decimal128Type>().value(i);
                value as f64 / 10f64.powi(i32::from(*scale))
            }
            DataType::Decimal64(_, scale) => {
                let value = array.as_primitive::<types::Decimal64Type>().value(i);
                value as f64 / 10f64.powi(i32::from(*scale))
            }
            DataType::Decimal32(_, scale) => {
                let value = array.as_primitive::<types::Decimal32Type>().value(i);
                f64::from(value) / 10f64.powi(i32::from(*scale))
            }
            _ => return Err(rows.mismatch(col, "a number", "read it with mindlite_result_text")),
        };
        Ok(())
    })
}

/// Reads a boolean cell. Works on `MINDLITE_TYPE_BOOL` columns; statuses as for
/// `mindlite_result_int64`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_bool(
    result: *const Rows,
    row: u64,
    col: u64,
    out_value: *mut bool,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_value, "out_value")?;
        *slot = false;
        let (array, i) = rows.value(row, col)?;
        match array.as_boolean_opt() {
            Some(booleans) => *slot = booleans.value(i),
            None => {
                return Err(rows.mismatch(col, "a boolean", "read it with mindlite_result_text"))
            }
        }
        Ok(())
    })
}

/// Reads any non-NULL cell as text: strings as they are, numbers, dates and times in their
/// usual text form, bytes as hex. `MINDLITE_NULL_VALUE` (and NULL) for a NULL cell.
///
/// - `out_text`: receives NUL-terminated UTF-8.
/// - `out_len`: may be NULL; receives the length in bytes without the NUL (text may itself
///   contain NUL bytes).
///
/// Ownership: owned by the result; valid until the next `mindlite_result_text` call on the same
/// result or until it is freed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_text(
    result: *const Rows,
    row: u64,
    col: u64,
    out_text: *mut *const c_char,
    out_len: *mut usize,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_text, "out_text")?;
        *slot = std::ptr::null();
        let (array, i) = rows.value(row, col)?;
        let mut text = lock(&rows.text);
        text.clear();
        match array.data_type() {
            DataType::Utf8 => text.extend_from_slice(array.as_string::<i32>().value(i).as_bytes()),
            DataType::LargeUtf8 => {
                text.extend_from_slice(array.as_string::<i64>().value(i).as_bytes())
            }
            DataType::Utf8View => {
                text.extend_from_slice(array.as_string_view().value(i).as_bytes())
            }
            _ => {
                let formatter = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())
                    .map_err(mindlite::Error::from)?;
                write!(text, "{}", formatter.value(i))
                    .map_err(|e| mindlite::Error::internal(format!("cannot format a cell: {e}")))?;
            }
        }
        // SAFETY: NULL or writable, per the header.
        if let Some(len) = unsafe { out_len.as_mut() } {
            *len = text.len();
        }
        text.push(0);
        // The buffer is not touched again until the next text call, as the header says.
        *slot = text.as_ptr().cast();
        Ok(())
    })
}

/// The whole result as MindsDB's JSON document (`{"type": "table", "data": …}`, or
/// `{"type": "ok", …}` for statements without rows), byte for byte what `POST /api/sql/query`
/// answers.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_result_json(
    result: *const Rows,
    out_json: *mut *mut c_char,
) -> Status {
    with_rows(result, |rows| {
        let slot = out(out_json, "out_json")?;
        *slot = std::ptr::null_mut();
        let outcome = if !rows.table {
            Outcome::Ok {
                affected_rows: rows.affected_rows,
            }
        } else {
            let batches = rows
                .batches
                .clone()
                .into_iter()
                .map(Ok::<_, datafusion::error::DataFusionError>);
            Outcome::Table(TableResult {
                column_names: rows
                    .column_names
                    .iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect(),
                stream: Box::pin(RecordBatchStreamAdapter::new(
                    Arc::clone(&rows.schema),
                    futures::stream::iter(batches),
                )),
            })
        };
        // The rows are already in the caller's memory: the document is theirs to size.
        let result = QueryResult {
            context: rows.context.clone(),
            outcome,
            document_limit: None,
        };
        give_string(slot, rows.engine.block_on(encode_document(result)));
        Ok(())
    })
}
