//! The three wire formats of MindsDB's `/api/sql/query` (wire reference §2): one JSON document;
//! jsonlines (a header line without context, then one line per batch, each an array of rows);
//! SSE (the same items framed as `data: <json>\n\n`). Streaming formats pull one batch at a time.
//! Cells: numbers as numbers (NaN and infinities as null), DATE `YYYY-MM-DD`, TIMESTAMP
//! `YYYY-MM-DD HH:MM:SS.ffffff`, booleans, binary as base64, lists and structs as JSON.

use std::io::Write;

use base64::Engine as _;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimeUnit, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;

use super::{Outcome, QueryResult, ResultContext, TableResult};
use crate::error::{Error, Result};

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
/// document into an error document: a table is never sent half-read.
pub async fn encode_document(result: QueryResult) -> Vec<u8> {
    let QueryResult { context, outcome } = result;
    match outcome {
        Outcome::Table(TableResult {
            column_names,
            mut stream,
        }) => {
            let mut out = b"{\"type\":\"table\",\"data\":[".to_vec();
            let mut first = true;
            while let Some(batch) = stream.next().await {
                match batch {
                    Ok(batch) => write_rows(&batch, &mut out, &mut first),
                    Err(e) => return error_item(&Error::from(e), &context),
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
            StreamState::Pending(QueryResult { context, outcome }) => match outcome {
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
    let columns: Vec<&dyn Array> = batch.columns().iter().map(|c| c.as_ref()).collect();
    for row in 0..batch.num_rows() {
        if !*first {
            out.push(b',');
        }
        *first = false;
        out.push(b'[');
        for (i, column) in columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_cell(*column, row, out);
        }
        out.push(b']');
    }
}

fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_float(out: &mut Vec<u8>, value: f64, as_f32: bool) {
    if !value.is_finite() {
        out.extend_from_slice(b"null");
    } else if as_f32 {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value as f32).as_bytes());
    } else {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    }
}

/// Writes one cell as a JSON value.
fn write_cell(array: &dyn Array, row: usize, out: &mut Vec<u8>) {
    if array.is_null(row) {
        out.extend_from_slice(b"null");
        return;
    }
    match array.data_type() {
        DataType::Null => out.extend_from_slice(b"null"),
        DataType::Boolean => out.extend_from_slice(if array.as_boolean().value(row) {
            b"true"
        } else {
            b"false"
        }),
        DataType::Int8 => write_int(out, array.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => write_int(out, array.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => write_int(out, array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => write_int(out, array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => write_int(out, array.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => write_int(out, array.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => write_int(out, array.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => write_int(out, array.as_primitive::<UInt64Type>().value(row)),
        DataType::Float16 => write_float(
            out,
            array.as_primitive::<Float16Type>().value(row).to_f64(),
            true,
        ),
        DataType::Float32 => write_float(
            out,
            array.as_primitive::<Float32Type>().value(row) as f64,
            true,
        ),
        DataType::Float64 => {
            write_float(out, array.as_primitive::<Float64Type>().value(row), false)
        }
        DataType::Utf8 => write_json(out, array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => write_json(out, array.as_string::<i64>().value(row)),
        DataType::Utf8View => write_json(out, array.as_string_view().value(row)),
        DataType::Binary => write_base64(out, array.as_binary::<i32>().value(row)),
        DataType::LargeBinary => write_base64(out, array.as_binary::<i64>().value(row)),
        DataType::BinaryView => write_base64(out, array.as_binary_view().value(row)),
        DataType::FixedSizeBinary(_) => write_base64(out, array.as_fixed_size_binary().value(row)),
        DataType::Date32 => write_text(
            out,
            array
                .as_primitive::<Date32Type>()
                .value_as_date(row)
                .map(|d| d.format("%Y-%m-%d")),
        ),
        DataType::Date64 => write_text(
            out,
            array
                .as_primitive::<Date64Type>()
                .value_as_date(row)
                .map(|d| d.format("%Y-%m-%d")),
        ),
        DataType::Timestamp(unit, _) => {
            let when = match unit {
                TimeUnit::Second => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampSecondType>()
                    .value_as_datetime(row),
                TimeUnit::Millisecond => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampMillisecondType>()
                    .value_as_datetime(row),
                TimeUnit::Microsecond => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>()
                    .value_as_datetime(row),
                TimeUnit::Nanosecond => array
                    .as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>()
                    .value_as_datetime(row),
            };
            write_text(out, when.map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f")));
        }
        DataType::Decimal32(_, _)
        | DataType::Decimal64(_, _)
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => {
            // MindsDB sends decimals as floats (12.50 → 12.5).
            match formatted(array, row).parse::<f64>() {
                Ok(value) => write_float(out, value, false),
                Err(_) => out.extend_from_slice(b"null"),
            }
        }
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::FixedSizeList(_, _)
        | DataType::ListView(_)
        | DataType::LargeListView(_) => {
            let values = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(row),
                DataType::LargeList(_) => array.as_list::<i64>().value(row),
                DataType::FixedSizeList(_, _) => array.as_fixed_size_list().value(row),
                _ => return write_json(out, &formatted(array, row)),
            };
            out.push(b'[');
            for i in 0..values.len() {
                if i > 0 {
                    out.push(b',');
                }
                write_cell(values.as_ref(), i, out);
            }
            out.push(b']');
        }
        DataType::Struct(fields) => {
            let strukt = array.as_struct();
            out.push(b'{');
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, field.name());
                out.push(b':');
                write_cell(strukt.column(i).as_ref(), row, out);
            }
            out.push(b'}');
        }
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
            Ok(value) => write_cell(value.as_ref(), 0, out),
            Err(_) => write_json(out, &formatted(array, row)),
        },
        _ => write_json(out, &formatted(array, row)),
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
