//! The three wire formats of MindsDB's `/api/sql/query` (`docs/mindsdb-wire.md` §2): one JSON document;
//! jsonlines (a header line without context, then one line per batch, each an array of rows);
//! SSE (the same items framed as `data: <json>\n\n`). Streaming formats pull one batch at a time.
//! Cells: numbers as numbers (NaN and infinities as null), DATE `YYYY-MM-DD`, TIMESTAMP
//! `YYYY-MM-DD HH:MM:SS.ffffff`, booleans, binary as base64, lists and structs as JSON.

use std::io::Write;

use base64::Engine as _;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;

use super::request::{Outcome, QueryRequest, QueryResult, ResultContext, TableResult};
use crate::error::{Error, Result};
use std::collections::HashMap;

use super::request::QueryContext;
use crate::wire::Fields;

/// Which framing a result is encoded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// One JSON document (`response_format` absent or null).
    Json,
    /// `application/jsonlines`.
    JsonLines,
    /// `text/event-stream`.
    Sse,
}

impl WireFormat {
    /// Parses MindsDB's `response_format` value (`None` is the JSON document).
    pub fn parse(name: Option<&str>) -> Result<WireFormat> {
        match name {
            None => Ok(WireFormat::Json),
            Some("jsonlines") => Ok(WireFormat::JsonLines),
            Some("sse") => Ok(WireFormat::Sse),
            Some(other) => Err(Error::invalid(format!(
                "Invalid stream format '{other}' in 'response_format': use null, \"jsonlines\" or \"sse\""
            ))),
        }
    }

    /// The Content-Type MindsDB sends for this format.
    pub fn content_type(self) -> &'static str {
        match self {
            WireFormat::Json => "application/json",
            WireFormat::JsonLines => "application/jsonlines",
            WireFormat::Sse => "text/event-stream; charset=utf-8",
        }
    }
}

/// Encodes a whole result as the JSON document. An error met while reading the rows turns the
/// document into an error document: a table is never sent half-read. So does a document that
/// grows past the result's `document_limit` (its rows stop being read then).
pub async fn encode_document(result: QueryResult) -> Vec<u8> {
    let QueryResult {
        context,
        outcome,
        document_limit,
    } = result;
    match outcome {
        Outcome::Table(TableResult {
            column_names,
            mut stream,
        }) => {
            let mut out = b"{\"type\":\"table\",\"data\":[".to_vec();
            let mut first = true;
            let limit = document_limit.unwrap_or(u64::MAX);
            while let Some(batch) = stream.next().await {
                match batch {
                    Ok(batch) => write_rows(&batch, &mut out, &mut first),
                    Err(e) => return error_item(&Error::from(e), &context),
                }
                if out.len() as u64 > limit {
                    let error = Error::invalid(format!(
                        "The result is larger than {} MiB, the most one JSON document may hold (query.max_document_mb); ask for response_format \"jsonlines\" or \"sse\", which stream it, or add a LIMIT",
                        limit / (1024 * 1024)
                    ));
                    return error_item(&error, &context);
                }
            }
            out.extend_from_slice(b"],\"column_names\":");
            write_json(&mut out, &column_names);
            out.extend_from_slice(b",\"context\":");
            write_context(&mut out, &context);
            out.push(b'}');
            out
        }
        Outcome::Ok { affected_rows } => ok_item(affected_rows, &context),
        Outcome::Error(e) => error_item(&e, &context),
    }
}

/// Rows per jsonlines/SSE item: small batches are merged up to this, so a short result is one
/// line as MindsDB sends it, while memory stays bounded by about this many rows.
const LINE_ROWS: usize = 8192;

/// A result being encoded as jsonlines or SSE, one piece per call.
pub struct WireStream {
    format: WireFormat,
    state: StreamState,
}

enum StreamState {
    Pending(QueryResult),
    /// Rows still to send, and a batch already pulled from the stream.
    Rows(TableResult, ResultContext, Option<RecordBatch>),
    /// An error met after some rows: sent as its own item after them.
    Failed(Vec<u8>),
    Done,
}

impl WireStream {
    /// Starts encoding `result` in `format`; [`WireFormat::Json`] yields the whole document as one piece.
    pub fn new(result: QueryResult, format: WireFormat) -> WireStream {
        WireStream {
            format,
            state: StreamState::Pending(result),
        }
    }

    /// The next framed piece, or `None` at the end. Only one batch is held at a time.
    pub async fn next_chunk(&mut self) -> Option<Vec<u8>> {
        match std::mem::replace(&mut self.state, StreamState::Done) {
            StreamState::Done => None,
            StreamState::Pending(result) if self.format == WireFormat::Json => {
                Some(encode_document(result).await)
            }
            StreamState::Pending(QueryResult {
                context, outcome, ..
            }) => match outcome {
                Outcome::Table(mut table) => {
                    // The first batch is pulled before the header goes out, so a query that fails
                    // before producing rows answers with one error item, as MindsDB does.
                    let first = loop {
                        match table.stream.next().await {
                            Some(Ok(batch)) if batch.num_rows() == 0 => continue,
                            Some(Ok(batch)) => break Some(batch),
                            Some(Err(e)) => {
                                return Some(self.frame(error_item(&Error::from(e), &context)))
                            }
                            None => break None,
                        }
                    };
                    let mut header = b"{\"type\":\"table\",\"column_names\":".to_vec();
                    write_json(&mut header, &table.column_names);
                    header.push(b'}');
                    self.state = StreamState::Rows(table, context, first);
                    Some(self.frame(header))
                }
                Outcome::Ok { affected_rows } => Some(self.frame(ok_item(affected_rows, &context))),
                Outcome::Error(e) => Some(self.frame(error_item(&e, &context))),
            },
            StreamState::Failed(piece) => Some(piece),
            StreamState::Rows(mut table, context, mut pulled) => {
                let mut line = Vec::new();
                let mut rows = 0;
                let mut first = true;
                loop {
                    let next = match pulled.take() {
                        Some(batch) => Some(Ok(batch)),
                        None => table.stream.next().await,
                    };
                    match next {
                        None => break,
                        Some(Err(e)) => {
                            let piece = self.frame(error_item(&Error::from(e), &context));
                            if rows == 0 {
                                return Some(piece);
                            }
                            self.state = StreamState::Failed(piece);
                            break;
                        }
                        Some(Ok(batch)) => {
                            if batch.num_rows() == 0 {
                                continue;
                            }
                            if rows == 0 {
                                // bounded: a guess of 16 bytes per row of a batch in memory
                                line.reserve(batch.num_rows() * 16);
                                line.push(b'[');
                            }
                            write_rows(&batch, &mut line, &mut first);
                            rows += batch.num_rows();
                            if rows >= LINE_ROWS {
                                self.state = StreamState::Rows(table, context, None);
                                break;
                            }
                        }
                    }
                }
                if rows == 0 {
                    return None;
                }
                line.push(b']');
                Some(self.frame(line))
            }
        }
    }

    /// Turns the encoder into a stream of pieces.
    pub fn into_stream(self) -> impl futures::Stream<Item = Vec<u8>> + Send {
        futures::stream::unfold(self, |mut this| async move {
            this.next_chunk().await.map(|piece| (piece, this))
        })
    }

    fn frame(&self, item: Vec<u8>) -> Vec<u8> {
        match self.format {
            WireFormat::Json => item,
            WireFormat::JsonLines => {
                let mut item = item;
                item.push(b'\n');
                item
            }
            WireFormat::Sse => {
                // bounded: an encoded item in memory
                let mut out = Vec::with_capacity(item.len() + 8);
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&item);
                out.extend_from_slice(b"\n\n");
                out
            }
        }
    }
}

fn ok_item(affected_rows: Option<u64>, context: &ResultContext) -> Vec<u8> {
    let mut out = b"{\"type\":\"ok\",\"affected_rows\":".to_vec();
    match affected_rows {
        Some(n) => out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"context\":");
    write_context(&mut out, context);
    out.push(b'}');
    out
}

fn error_item(error: &Error, context: &ResultContext) -> Vec<u8> {
    let mut out = b"{\"type\":\"error\",\"error_code\":0,\"error_message\":".to_vec();
    write_json(&mut out, error.message());
    out.extend_from_slice(b",\"context\":");
    write_context(&mut out, context);
    out.push(b'}');
    out
}

fn write_context(out: &mut Vec<u8>, context: &ResultContext) {
    out.extend_from_slice(b"{\"show_secrets\":");
    out.extend_from_slice(if context.show_secrets {
        b"true"
    } else {
        b"false"
    });
    out.extend_from_slice(b",\"db\":");
    write_json(out, &context.db);
    out.push(b'}');
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(&mut *out, value).expect("strings and string lists always serialize");
}

/// Appends the batch's rows as `[..],[..]`, with a leading comma unless `first`.
fn write_rows(batch: &RecordBatch, out: &mut Vec<u8>, first: &mut bool) {
    let writers = row_writers(batch);
    for row in 0..batch.num_rows() {
        if !*first {
            out.push(b',');
        }
        *first = false;
        write_row(&writers, row, out);
    }
}

/// The cell writers of a batch's columns, in order.
fn row_writers(batch: &RecordBatch) -> Vec<CellWriter<'_>> {
    batch
        .columns()
        .iter()
        .map(|c| cell_writer(c.as_ref()))
        .collect()
}

/// Writes one row as a JSON array.
fn write_row(writers: &[CellWriter<'_>], row: usize, out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, write) in writers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(row, out);
    }
    out.push(b']');
}

/// A result's rows as JSON, cut short at a size: what [`encode_rows_capped`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct CappedRows {
    /// The column names, as the result shows them.
    pub column_names: Vec<String>,
    /// The rows as one JSON array of arrays, cells written as the JSON document writes them.
    pub rows: Vec<u8>,
    /// How many rows `rows` holds.
    pub count: u64,
    /// Whether the result had more rows than fit.
    pub truncated: bool,
}

/// Reads a table's rows as JSON until the next row would take them past `max_bytes`; the rest
/// is not read (dropping the stream stops the statement) and the rows so far come back marked
/// truncated. For readers that can take only so much of a result, such as an assistant's tool
/// answer, where a `LIMIT` forgotten must not mean a result sent whole. An error met while
/// reading is `Err`: a result is never returned half-read without saying so.
pub async fn encode_rows_capped(table: TableResult, max_bytes: usize) -> Result<CappedRows> {
    let TableResult {
        column_names,
        mut stream,
    } = table;
    let mut rows = vec![b'['];
    let mut count = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(Error::from)?;
        let writers = row_writers(&batch);
        for row in 0..batch.num_rows() {
            let mark = rows.len();
            if count > 0 {
                rows.push(b',');
            }
            write_row(&writers, row, &mut rows);
            // One byte for the closing bracket. The row was written before it was measured:
            // it is one row of a batch the statement's budget already holds.
            if rows.len() + 1 > max_bytes {
                rows.truncate(mark);
                rows.push(b']');
                return Ok(CappedRows {
                    column_names,
                    rows,
                    count,
                    truncated: true,
                });
            }
            count += 1;
        }
    }
    rows.push(b']');
    Ok(CappedRows {
        column_names,
        rows,
        count,
        truncated: false,
    })
}

/// Writes one column's cell at a row as a JSON value. Chosen once per column and batch, so the
/// work per cell is one call instead of a type dispatch, a downcast and a null check on every
/// one of a result's cells.
type CellWriter<'a> = Box<dyn Fn(usize, &mut Vec<u8>) + 'a>;

/// The writer for `array`'s cells: numbers as numbers (NaN and infinities as null), DATE
/// `YYYY-MM-DD`, TIMESTAMP `YYYY-MM-DD HH:MM:SS.ffffff`, binary as base64, lists and structs as
/// JSON, decimals as floats (MindsDB sends 12.50 as 12.5), other types as Arrow's text.
fn cell_writer(array: &dyn Array) -> CellWriter<'_> {
    macro_rules! int {
        ($type:ty) => {{
            let values = array.as_primitive::<$type>();
            Box::new(move |row, out: &mut Vec<u8>| write_int(out, values.value(row)))
        }};
    }
    macro_rules! text {
        ($array:expr, $write:expr) => {{
            let values = $array;
            Box::new(move |row, out: &mut Vec<u8>| $write(out, values.value(row)))
        }};
    }
    macro_rules! timestamp {
        ($type:ty) => {{
            let values = array.as_primitive::<$type>();
            Box::new(move |row, out: &mut Vec<u8>| {
                let when = values.value_as_datetime(row);
                write_text(out, when.map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f")))
            })
        }};
    }
    let write: CellWriter<'_> = match array.data_type() {
        DataType::Null => return Box::new(|_, out| out.extend_from_slice(b"null")),
        DataType::Boolean => {
            let values = array.as_boolean();
            Box::new(move |row, out| {
                out.extend_from_slice(if values.value(row) { b"true" } else { b"false" })
            })
        }
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float16 => {
            let values = array.as_primitive::<Float16Type>();
            Box::new(move |row, out| write_float(out, values.value(row).to_f64(), true))
        }
        DataType::Float32 => {
            let values = array.as_primitive::<Float32Type>();
            Box::new(move |row, out| write_float(out, values.value(row) as f64, true))
        }
        DataType::Float64 => {
            let values = array.as_primitive::<Float64Type>();
            Box::new(move |row, out| write_float(out, values.value(row), false))
        }
        DataType::Utf8 => text!(array.as_string::<i32>(), write_json::<str>),
        DataType::LargeUtf8 => text!(array.as_string::<i64>(), write_json::<str>),
        DataType::Utf8View => text!(array.as_string_view(), write_json::<str>),
        DataType::Binary => text!(array.as_binary::<i32>(), write_base64),
        DataType::LargeBinary => text!(array.as_binary::<i64>(), write_base64),
        DataType::BinaryView => text!(array.as_binary_view(), write_base64),
        DataType::FixedSizeBinary(_) => text!(array.as_fixed_size_binary(), write_base64),
        DataType::Date32 => {
            let values = array.as_primitive::<Date32Type>();
            Box::new(move |row, out| {
                write_text(out, values.value_as_date(row).map(|d| d.format("%Y-%m-%d")))
            })
        }
        DataType::Date64 => {
            let values = array.as_primitive::<Date64Type>();
            Box::new(move |row, out| {
                write_text(out, values.value_as_date(row).map(|d| d.format("%Y-%m-%d")))
            })
        }
        DataType::Timestamp(TimeUnit::Second, _) => timestamp!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => timestamp!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => timestamp!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => timestamp!(TimestampNanosecondType),
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            list_writer(list.values().as_ref(), move |row| {
                let offsets = list.value_offsets();
                offsets[row] as usize..offsets[row + 1] as usize
            })
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            list_writer(list.values().as_ref(), move |row| {
                let offsets = list.value_offsets();
                offsets[row] as usize..offsets[row + 1] as usize
            })
        }
        DataType::FixedSizeList(_, _) => {
            let list = array.as_fixed_size_list();
            let size = list.value_length() as usize;
            list_writer(list.values().as_ref(), move |row| {
                row * size..(row + 1) * size
            })
        }
        DataType::Struct(fields) => {
            let strukt = array.as_struct();
            let children: Vec<(Vec<u8>, CellWriter<'_>)> = fields
                .iter()
                .zip(strukt.columns())
                .map(|(field, column)| {
                    let mut key = Vec::new();
                    write_json(&mut key, field.name());
                    key.push(b':');
                    (key, cell_writer(column.as_ref()))
                })
                .collect();
            Box::new(move |row, out| {
                out.push(b'{');
                for (i, (key, write)) in children.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(key);
                    write(row, out);
                }
                out.push(b'}');
            })
        }
        _ => Box::new(move |row, out| write_other(array, row, out)),
    };
    if array.null_count() == 0 {
        write
    } else {
        Box::new(move |row, out| {
            if array.is_null(row) {
                out.extend_from_slice(b"null");
            } else {
                write(row, out);
            }
        })
    }
}

/// A writer for a list column whose row `row` holds `values[range(row)]`.
fn list_writer<'a>(
    values: &'a dyn Array,
    range: impl Fn(usize) -> std::ops::Range<usize> + 'a,
) -> CellWriter<'a> {
    let item = cell_writer(values);
    Box::new(move |row, out| {
        out.push(b'[');
        for (n, i) in range(row).enumerate() {
            if n > 0 {
                out.push(b',');
            }
            item(i, out);
        }
        out.push(b']');
    })
}

/// Writes a cell of a type without a writer of its own (rare enough to dispatch per cell).
fn write_other(array: &dyn Array, row: usize, out: &mut Vec<u8>) {
    match array.data_type() {
        DataType::Decimal32(_, _)
        | DataType::Decimal64(_, _)
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => match formatted(array, row).parse::<f64>() {
            Ok(value) => write_float(out, value, false),
            Err(_) => out.extend_from_slice(b"null"),
        },
        DataType::Dictionary(_, _) => match datafusion::arrow::compute::take(
            array,
            &datafusion::arrow::array::UInt32Array::from(vec![row as u32]),
            None,
        )
        .and_then(|one| match one.data_type() {
            DataType::Dictionary(_, value_type) => {
                datafusion::arrow::compute::cast(&one, value_type)
            }
            _ => Ok(one),
        }) {
            Ok(value) => cell_writer(value.as_ref())(0, out),
            Err(_) => write_json(out, &formatted(array, row)),
        },
        _ => write_json(out, &formatted(array, row)),
    }
}

fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_float(out: &mut Vec<u8>, value: f64, as_f32: bool) {
    // A whole number below 2^53 (2^24 for FLOAT) is exact, so the shortest text that reads back
    // as it is its digits, and ryu writes exactly `<digits>.0`, at several times the cost.
    let exact = if as_f32 {
        16_777_216.0
    } else {
        9_007_199_254_740_992.0
    };
    if value.fract() == 0.0 && value.abs() < exact && value != 0.0 {
        write_int(out, value as i64);
        out.extend_from_slice(b".0");
    } else if !value.is_finite() {
        out.extend_from_slice(b"null");
    } else if as_f32 {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value as f32).as_bytes());
    } else {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    }
}

fn write_text(out: &mut Vec<u8>, text: Option<impl std::fmt::Display>) {
    match text {
        Some(text) => {
            out.push(b'"');
            write!(out, "{text}").expect("writing to a Vec cannot fail");
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .as_bytes(),
    );
    out.push(b'"');
}

/// Arrow's own text for a cell, for types JSON has no better form for (intervals, durations, maps).
fn formatted(array: &dyn Array, row: usize) -> String {
    match ArrayFormatter::try_new(array, &FormatOptions::default()) {
        Ok(formatter) => formatter.value(row).to_string(),
        Err(_) => String::new(),
    }
}

/// Writes `array`'s cell at a row as a JSON value, as the JSON formats write it: for fronts
/// that show lists, structs and maps as JSON text (the MySQL door's `JSON` columns). Chosen
/// once per column and batch; the cell must not be NULL.
pub fn json_cells(array: &dyn Array) -> impl Fn(usize, &mut Vec<u8>) + '_ {
    cell_writer(array)
}

/// As [`rows_as_json`], for rows a request sized: an error names `limit` (the largest
/// document, in bytes, and the setting that sets it) once the rows' JSON text passes it,
/// written a few rows at a time so the text never does by much, and the values parsed from it
/// are checked against the statement's memory first.
pub(crate) fn rows_as_json_within(
    batch: &RecordBatch,
    limit: u64,
    what: &str,
) -> Result<Vec<Vec<serde_json::Value>>> {
    let mut out = vec![b'['];
    let mut first = true;
    let rows = batch.num_rows();
    for offset in (0..rows).step_by(256) {
        write_rows(
            &batch.slice(offset, 256.min(rows - offset)),
            &mut out,
            &mut first,
        );
        if out.len() as u64 > limit {
            return Err(Error::invalid(format!(
                "{what} would be more than {} MiB of JSON (query.max_document_mb); ask about fewer rows",
                limit / (1 << 20)
            )));
        }
    }
    out.push(b']');
    // A parsed value takes several times its text (a map and a string per cell).
    crate::capacity::check((out.len() as u64).saturating_mul(8), what)?;
    Ok(serde_json::from_slice(&out).unwrap_or_default())
}

/// A batch's rows as JSON values, cell by cell as the wire formats write them (for the agent
/// loop, which shows a few rows to a model).
pub(crate) fn rows_as_json(batch: &RecordBatch) -> Vec<Vec<serde_json::Value>> {
    let mut out = vec![b'['];
    let mut first = true;
    write_rows(batch, &mut out, &mut first);
    out.push(b']');
    // The encoder writes valid JSON (non-finite floats as null), so this cannot fail.
    serde_json::from_slice(&out).unwrap_or_default()
}

impl QueryRequest {
    /// Reads a `POST /api/sql/query` body: `{query, context: {db}, params, response_format,
    /// timeout}` (`timeout` in seconds, mindlite's own: at most the configured limit).
    /// Returns the request and the wire format asked for; anything malformed is an
    /// [`Error`] of kind `InvalidInput` whose message names the field that is wrong.
    /// Other `context` keys MindsDB knows (`profiling`, …) are accepted and ignored.
    ///
    /// ```
    /// use mindlite::{QueryRequest, WireFormat};
    /// let (request, format) = QueryRequest::from_wire_json(
    ///     br#"{"query": "SELECT :x", "params": {"x": 1}, "response_format": "jsonlines"}"#,
    /// ).unwrap();
    /// assert_eq!(request.query, "SELECT :x");
    /// assert_eq!(format, WireFormat::JsonLines);
    /// ```
    pub fn from_wire_json(body: &[u8]) -> Result<(QueryRequest, WireFormat)> {
        let mut fields = Fields::request_body(body)?;
        if fields.get("query").is_none() {
            return Err(Error::invalid("The request body has no 'query'"));
        }
        let query = fields.required_text("query", "'query' must be a string")?;
        let (db, show_secrets) = match fields.object("context")? {
            None => (None, false),
            Some(context) => (
                context.text("db")?,
                context.flag("show_secrets")?.unwrap_or(false),
            ),
        };
        let params: HashMap<_, _> = fields
            .map_field("params")?
            .unwrap_or_default()
            .into_iter()
            .collect();
        let format = match fields.remove("response_format") {
            None | Some(serde_json::Value::Null) => WireFormat::Json,
            Some(serde_json::Value::String(name)) => WireFormat::parse(Some(&name))?,
            Some(_) => {
                return Err(Error::invalid(
                    "'response_format' must be null, \"jsonlines\" or \"sse\"",
                ))
            }
        };
        let timeout = match fields.remove("timeout") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(secs)) => match secs.as_f64() {
                Some(secs) if secs > 0.0 && secs.is_finite() && secs <= 1e9 => {
                    Some(std::time::Duration::from_secs_f64(secs))
                }
                _ => {
                    return Err(Error::invalid(
                        "'timeout' must be a positive number of seconds",
                    ))
                }
            },
            Some(_) => {
                return Err(Error::invalid(
                    "'timeout' must be a positive number of seconds",
                ))
            }
        };
        let request = QueryRequest {
            query,
            context: QueryContext { db, show_secrets },
            params,
            typed_params: HashMap::new(),
            timeout,
            one_statement: true,
            autocommit: true,
        };
        Ok((request, format))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::error::DataFusionError;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    use super::{encode_rows_capped, rows_as_json_within, write_float, RecordBatch, TableResult};

    #[test]
    fn rows_asked_for_as_json_stop_at_the_document_limit() {
        let n: Vec<i64> = (0..10_000).collect();
        let batch = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(n)) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        let all = rows_as_json_within(&batch, 1 << 20, "The answer").unwrap();
        assert_eq!((all.len(), all[9_999][0].as_i64()), (10_000, Some(9_999)));
        let message = rows_as_json_within(&batch, 4_096, "The answer")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("The answer would be more than 0 MiB of JSON (query.max_document_mb)"),
            "{message}"
        );
    }

    /// A table of `batches` batches of 100 rows (`n`, `s`), then an error if `fail_after`.
    fn table(batches: i64, fail_after: bool) -> TableResult {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let mut items: Vec<Result<RecordBatch, DataFusionError>> = (0..batches)
            .map(|b| {
                let n: Vec<i64> = (b * 100..(b + 1) * 100).collect();
                let s: Vec<Option<String>> =
                    n.iter().map(|i| Some(format!("row \"{i}\""))).collect();
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![
                        Arc::new(Int64Array::from(n)),
                        Arc::new(StringArray::from(s)),
                    ],
                )
                .map_err(DataFusionError::from)
            })
            .collect();
        if fail_after {
            items.push(Err(DataFusionError::Execution("read past the cut".into())));
        }
        TableResult {
            column_names: vec!["n".into(), "s".into()],
            stream: Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::iter(items),
            )),
        }
    }

    fn rows(bytes: &[u8]) -> Vec<serde_json::Value> {
        serde_json::from_slice(bytes).expect("the rows are JSON")
    }

    #[tokio::test]
    async fn rows_are_cut_at_the_last_whole_row_that_fits_and_the_rest_is_not_read() {
        let whole = encode_rows_capped(table(3, false), usize::MAX)
            .await
            .unwrap();
        assert_eq!((whole.count, whole.truncated), (300, false));
        assert_eq!(rows(&whole.rows).len(), 300);
        assert_eq!(rows(&whole.rows)[7], serde_json::json!([7, "row \"7\""]));
        // Cut inside the second batch; the error after the third is never reached.
        let cap = whole.rows.len() / 2;
        let cut = encode_rows_capped(table(3, true), cap).await.unwrap();
        assert!(cut.truncated);
        assert!(cut.rows.len() <= cap, "{} > {cap}", cut.rows.len());
        let kept = rows(&cut.rows);
        assert_eq!(kept.len() as u64, cut.count);
        assert!(cut.count > 100 && cut.count < 200, "{}", cut.count);
        assert_eq!(kept.last().unwrap()[0], serde_json::json!(cut.count - 1));
        // Not even one row fits: none, still JSON.
        let none = encode_rows_capped(table(1, false), 4).await.unwrap();
        assert_eq!(
            (none.count, none.truncated, none.rows.as_slice()),
            (0, true, &b"[]"[..])
        );
        // An error met before the cap is the answer.
        let failed = encode_rows_capped(table(1, true), usize::MAX).await;
        assert!(failed.unwrap_err().message().contains("read past the cut"));
    }

    fn written(value: f64, as_f32: bool) -> String {
        let mut out = Vec::new();
        write_float(&mut out, value, as_f32);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn whole_numbers_are_written_as_ryu_writes_them() {
        let mut values = vec![
            1.0,
            -1.0,
            10.0,
            1000.0,
            123_456_789.0,
            -4_503_599_627_370_497.0,
        ];
        values.extend([
            0.0,
            -0.0,
            0.5,
            -2.25,
            1e15,
            1e16,
            1e22,
            9_007_199_254_740_992.0,
        ]);
        values.extend([
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            16_777_215.0,
        ]);
        values.extend([
            16_777_216.0,
            16_777_217.0,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
        ]);
        let mut x = 1.0f64;
        while x < 1e17 {
            values.extend([x, -x, x.floor(), (x * 7.3).floor()]);
            x *= 1.37;
        }
        for value in values {
            assert_eq!(
                written(value, false),
                ryu::Buffer::new().format_finite(value),
                "{value}"
            );
            let single = value as f32;
            if single.is_finite() {
                assert_eq!(
                    written(value, true),
                    ryu::Buffer::new().format_finite(single),
                    "{value} as FLOAT"
                );
            }
        }
        assert_eq!(written(f64::NAN, false), "null");
        assert_eq!(written(f64::INFINITY, true), "null");
    }
}
