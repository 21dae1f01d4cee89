//! Results as MySQL sends them: an Arrow column's type as a MySQL column definition, and its
//! cells as the text protocol's strings (`COM_QUERY`) or the binary protocol's values
//! (`COM_STMT_EXECUTE`). Whole numbers keep their width and sign (`TINYINT` … `BIGINT
//! UNSIGNED`), floats are `FLOAT`/`DOUBLE`, decimals `DECIMAL`, booleans `TINYINT` 0/1 (as
//! MySQL's `BOOL`), text `VARCHAR`, bytes `BLOB`, dates `DATE`, timestamps `DATETIME` (a zoned
//! one in UTC), times `TIME`, lists, structs and maps `JSON`, anything else its text.

use std::borrow::Cow;
use std::io;
use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use futures::StreamExt;
use mindlite::arrow::array::{Array, ArrayRef, AsArray};
use mindlite::arrow::datatypes::{
    DataType, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use mindlite::arrow::util::display::{ArrayFormatter, FormatOptions};
use mindlite::{Error, ErrorKind, Outcome, QueryResult, Subject};
use opensrv_mysql::{
    Column, ColumnFlags, ColumnType, ErrorKind as Code, OkResponse, QueryResultWriter, RowWriter,
};
use tokio::io::AsyncWrite;

/// How a column's cells are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Signed,
    Unsigned,
    Float,
    Bool,
    Text,
    Bytes,
    Date,
    Timestamp,
    Time,
    Json,
    Null,
    /// Decimals, intervals and the like: Arrow's text of them.
    Shown,
}

/// One cell, ready to be written.
enum Value<'a> {
    Null,
    Signed(i64),
    Unsigned(u64),
    Float(f64),
    Bytes(Cow<'a, [u8]>),
    Date(NaiveDate),
    Timestamp(NaiveDateTime),
    Time(NaiveTime),
}

/// The MySQL column for an Arrow field shown as `name`.
fn column(field: &Field, name: &str) -> (Column, Kind) {
    let data_type = match field.data_type() {
        DataType::Dictionary(_, values) => values.as_ref(),
        other => other,
    };
    use ColumnType::*;
    let (coltype, kind, mut flags) = match data_type {
        DataType::Int8 => (MYSQL_TYPE_TINY, Kind::Signed, ColumnFlags::empty()),
        DataType::Int16 => (MYSQL_TYPE_SHORT, Kind::Signed, ColumnFlags::empty()),
        DataType::Int32 => (MYSQL_TYPE_LONG, Kind::Signed, ColumnFlags::empty()),
        DataType::Int64 => (MYSQL_TYPE_LONGLONG, Kind::Signed, ColumnFlags::empty()),
        DataType::UInt8 => (MYSQL_TYPE_TINY, Kind::Unsigned, ColumnFlags::UNSIGNED_FLAG),
        DataType::UInt16 => (MYSQL_TYPE_SHORT, Kind::Unsigned, ColumnFlags::UNSIGNED_FLAG),
        DataType::UInt32 => (MYSQL_TYPE_LONG, Kind::Unsigned, ColumnFlags::UNSIGNED_FLAG),
        DataType::UInt64 => (
            MYSQL_TYPE_LONGLONG,
            Kind::Unsigned,
            ColumnFlags::UNSIGNED_FLAG,
        ),
        DataType::Float16 | DataType::Float32 => {
            (MYSQL_TYPE_FLOAT, Kind::Float, ColumnFlags::empty())
        }
        DataType::Float64 => (MYSQL_TYPE_DOUBLE, Kind::Float, ColumnFlags::empty()),
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => (MYSQL_TYPE_NEWDECIMAL, Kind::Shown, ColumnFlags::empty()),
        DataType::Boolean => (MYSQL_TYPE_TINY, Kind::Bool, ColumnFlags::empty()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            (MYSQL_TYPE_VAR_STRING, Kind::Text, ColumnFlags::empty())
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => (
            MYSQL_TYPE_BLOB,
            Kind::Bytes,
            ColumnFlags::BINARY_FLAG | ColumnFlags::BLOB_FLAG,
        ),
        DataType::Date32 | DataType::Date64 => (MYSQL_TYPE_DATE, Kind::Date, ColumnFlags::empty()),
        DataType::Timestamp(..) => (MYSQL_TYPE_DATETIME, Kind::Timestamp, ColumnFlags::empty()),
        DataType::Time32(_) | DataType::Time64(_) => {
            (MYSQL_TYPE_TIME, Kind::Time, ColumnFlags::empty())
        }
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::FixedSizeList(..)
        | DataType::Struct(_)
        | DataType::Map(..) => (MYSQL_TYPE_JSON, Kind::Json, ColumnFlags::empty()),
        DataType::Null => (MYSQL_TYPE_NULL, Kind::Null, ColumnFlags::empty()),
        _ => (MYSQL_TYPE_VAR_STRING, Kind::Shown, ColumnFlags::empty()),
    };
    if !field.is_nullable() {
        flags |= ColumnFlags::NOT_NULL_FLAG;
    }
    let column = Column {
        table: String::new(),
        column: name.to_string(),
        coltype,
        colflags: flags,
    };
    (column, kind)
}

/// The formatting of cells shown as Arrow's text.
fn shown_options() -> FormatOptions<'static> {
    FormatOptions::default()
}

/// A result column as its cells are read: a dictionary's values in place of its keys.
fn plain(array: &ArrayRef) -> Result<ArrayRef, Error> {
    match array.data_type() {
        DataType::Dictionary(_, values) => mindlite::arrow::compute::cast(array, values)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("a result column: {e}"))),
        _ => Ok(Arc::clone(array)),
    }
}

/// Writes a cell as JSON text (see `mindlite::json_cells`).
type JsonCells<'a> = Box<dyn Fn(usize, &mut Vec<u8>) + 'a>;

/// Reads one column of a batch cell by cell.
struct Cells<'a> {
    array: &'a ArrayRef,
    kind: Kind,
    formatter: Option<ArrayFormatter<'a>>,
    json: Option<JsonCells<'a>>,
}

impl<'a> Cells<'a> {
    fn new(array: &'a ArrayRef, kind: Kind) -> Result<Cells<'a>, Error> {
        let formatter =
            match kind {
                Kind::Shown => Some(ArrayFormatter::try_new(array.as_ref(), &OPTIONS).map_err(
                    |e| Error::new(ErrorKind::Internal, format!("a result column: {e}")),
                )?),
                _ => None,
            };
        let json = match kind {
            Kind::Json => Some(Box::new(mindlite::json_cells(array.as_ref())) as JsonCells<'a>),
            _ => None,
        };
        Ok(Cells {
            array,
            kind,
            formatter,
            json,
        })
    }

    fn value(&self, row: usize) -> Value<'a> {
        let array: &'a ArrayRef = self.array;
        if array.is_null(row) {
            return Value::Null;
        }
        match self.kind {
            Kind::Null => Value::Null,
            Kind::Signed => Value::Signed(match array.data_type() {
                DataType::Int8 => array.as_primitive::<Int8Type>().value(row) as i64,
                DataType::Int16 => array.as_primitive::<Int16Type>().value(row) as i64,
                DataType::Int32 => array.as_primitive::<Int32Type>().value(row) as i64,
                _ => array.as_primitive::<Int64Type>().value(row),
            }),
            Kind::Unsigned => Value::Unsigned(match array.data_type() {
                DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row) as u64,
                DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row) as u64,
                DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row) as u64,
                _ => array.as_primitive::<UInt64Type>().value(row),
            }),
            Kind::Float => Value::Float(match array.data_type() {
                DataType::Float64 => array.as_primitive::<Float64Type>().value(row),
                DataType::Float32 => array.as_primitive::<Float32Type>().value(row) as f64,
                _ => array
                    .as_primitive::<mindlite::arrow::datatypes::Float16Type>()
                    .value(row)
                    .to_f64(),
            }),
            Kind::Bool => Value::Signed(array.as_boolean().value(row) as i64),
            Kind::Text => Value::Bytes(Cow::Borrowed(match array.data_type() {
                DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes(),
                DataType::Utf8View => array.as_string_view().value(row).as_bytes(),
                _ => array.as_string::<i32>().value(row).as_bytes(),
            })),
            Kind::Bytes => Value::Bytes(Cow::Borrowed(match array.data_type() {
                DataType::LargeBinary => array.as_binary::<i64>().value(row),
                DataType::BinaryView => array.as_binary_view().value(row),
                DataType::FixedSizeBinary(_) => array.as_fixed_size_binary().value(row),
                _ => array.as_binary::<i32>().value(row),
            })),
            Kind::Date | Kind::Timestamp | Kind::Time => {
                let shown = temporal(array, row);
                match (self.kind, shown) {
                    (Kind::Date, Some(when)) => Value::Date(when.date()),
                    (Kind::Timestamp, Some(when)) => Value::Timestamp(when),
                    (Kind::Time, Some(when)) => Value::Time(when.time()),
                    _ => Value::Null,
                }
            }
            Kind::Json => {
                let mut text = Vec::new();
                if let Some(write) = &self.json {
                    write(row, &mut text);
                }
                Value::Bytes(Cow::Owned(text))
            }
            Kind::Shown => Value::Bytes(Cow::Owned(
                self.formatter
                    .as_ref()
                    .map(|f| f.value(row).to_string())
                    .unwrap_or_default()
                    .into_bytes(),
            )),
        }
    }
}

static OPTIONS: std::sync::LazyLock<FormatOptions<'static>> =
    std::sync::LazyLock::new(shown_options);

/// A date, timestamp or time cell as a date and time (a time on 1970-01-01).
fn temporal(array: &ArrayRef, row: usize) -> Option<NaiveDateTime> {
    use mindlite::arrow::datatypes::*;
    macro_rules! at {
        ($type:ty) => {
            array.as_primitive::<$type>().value_as_datetime(row)
        };
    }
    match array.data_type() {
        DataType::Date32 => at!(Date32Type),
        DataType::Date64 => at!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => at!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => at!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => at!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => at!(TimestampNanosecondType),
        DataType::Time32(TimeUnit::Second) => at!(Time32SecondType),
        DataType::Time32(_) => at!(Time32MillisecondType),
        DataType::Time64(TimeUnit::Microsecond) => at!(Time64MicrosecondType),
        DataType::Time64(_) => at!(Time64NanosecondType),
        _ => None,
    }
}

/// Writes `value` into the row: as text, or (`binary`) as the binary protocol encodes the
/// column's type.
fn write(
    row: &mut RowWriter<'_, impl AsyncWrite + Unpin>,
    value: Value<'_>,
    column: &Column,
    binary: bool,
) -> io::Result<()> {
    if !binary {
        let text: Option<Cow<'_, [u8]>> = match value {
            Value::Null => None,
            Value::Signed(v) => Some(Cow::Owned(v.to_string().into_bytes())),
            Value::Unsigned(v) => Some(Cow::Owned(v.to_string().into_bytes())),
            Value::Float(v) => Some(Cow::Owned(float_text(v).into_bytes())),
            Value::Bytes(bytes) => Some(bytes),
            Value::Date(d) => Some(Cow::Owned(d.format("%Y-%m-%d").to_string().into_bytes())),
            Value::Timestamp(t) => Some(Cow::Owned(timestamp_text(t).into_bytes())),
            Value::Time(t) => Some(Cow::Owned(time_text(t).into_bytes())),
        };
        return row.write_col(text.as_deref());
    }
    use ColumnType::*;
    match value {
        Value::Null => row.write_col(None::<i64>),
        Value::Signed(v) => match column.coltype {
            MYSQL_TYPE_TINY => row.write_col(v as i8),
            MYSQL_TYPE_SHORT => row.write_col(v as i16),
            MYSQL_TYPE_LONG => row.write_col(v as i32),
            _ => row.write_col(v),
        },
        Value::Unsigned(v) => match column.coltype {
            MYSQL_TYPE_TINY => row.write_col(v as u8),
            MYSQL_TYPE_SHORT => row.write_col(v as u16),
            MYSQL_TYPE_LONG => row.write_col(v as u32),
            _ => row.write_col(v),
        },
        Value::Float(v) => match column.coltype {
            MYSQL_TYPE_FLOAT => row.write_col(v as f32),
            _ => row.write_col(v),
        },
        Value::Bytes(bytes) => row.write_col(&bytes[..]),
        Value::Date(d) => row.write_col(d),
        Value::Timestamp(t) => row.write_col(t),
        Value::Time(t) => {
            let since_midnight = t.signed_duration_since(NaiveTime::MIN);
            row.write_col(since_midnight.to_std().unwrap_or_default())
        }
    }
}

/// A float as MySQL's text protocol shows one: the shortest text that reads back the same.
fn float_text(value: f64) -> String {
    if value.is_finite() {
        let mut buffer = ryu::Buffer::new();
        let text = buffer.format(value);
        text.strip_suffix(".0").unwrap_or(text).to_string()
    } else {
        // MySQL has no non-finite floats; its clients read these back as such.
        value.to_string()
    }
}

/// `YYYY-MM-DD HH:MM:SS`, with `.ffffff` when there is a fraction.
fn timestamp_text(t: NaiveDateTime) -> String {
    if t.and_utc().timestamp_subsec_micros() == 0 {
        t.format("%Y-%m-%d %H:%M:%S").to_string()
    } else {
        t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
    }
}

fn time_text(t: NaiveTime) -> String {
    if t.format("%f").to_string().trim_end_matches('0').is_empty() {
        t.format("%H:%M:%S").to_string()
    } else {
        t.format("%H:%M:%S%.6f").to_string()
    }
}

/// The MySQL error code (and with it the SQLSTATE) for an engine error.
pub(super) fn code(error: &Error) -> Code {
    match (error.kind(), error.subject()) {
        (ErrorKind::NotFound, Some(Subject::Database | Subject::Project)) => Code::ER_BAD_DB_ERROR,
        (ErrorKind::NotFound, _) => Code::ER_NO_SUCH_TABLE,
        (ErrorKind::Conflict, Some(Subject::Database | Subject::Project)) => {
            Code::ER_DB_CREATE_EXISTS
        }
        (ErrorKind::Conflict, _) => Code::ER_TABLE_EXISTS_ERROR,
        (ErrorKind::InvalidInput, _) => Code::ER_SYNTAX_ERROR,
        (ErrorKind::InvalidData, _) => Code::ER_DATA_OUT_OF_RANGE,
        (ErrorKind::ConstraintViolation, _) => Code::ER_DUP_ENTRY,
        (ErrorKind::Unauthorized, _) => Code::ER_ACCESS_DENIED_ERROR,
        (ErrorKind::Forbidden, _) => Code::ER_SPECIFIC_ACCESS_DENIED_ERROR,
        (ErrorKind::QuotaExceeded, _) => Code::ER_USER_LIMIT_REACHED,
        (ErrorKind::Unavailable, _) => Code::ER_QUERY_INTERRUPTED,
        (ErrorKind::Upstream | ErrorKind::Internal, _) => Code::ER_UNKNOWN_ERROR,
    }
}

/// The cells of a batch's `arrays`, row by row.
fn read_cells<'a>(
    arrays: &'a [ArrayRef],
    kinds: &[Kind],
    rows: std::ops::Range<usize>,
) -> Result<Vec<Value<'a>>, Error> {
    let cells: Vec<Cells<'a>> = arrays
        .iter()
        .zip(kinds)
        .map(|(array, kind)| Cells::new(array, *kind))
        .collect::<Result<_, Error>>()?;
    Ok(rows
        .flat_map(|row| cells.iter().map(move |cells| cells.value(row)))
        .collect())
}

/// The most cells read ahead of sending them.
const CELLS_AT_ONCE: usize = 16 * 1024;

/// Ends a result whose rows were being sent with `error`.
async fn failed<W: AsyncWrite + Unpin>(rows: RowWriter<'_, W>, error: Error) -> io::Result<()> {
    let message = error.message().as_bytes().to_vec();
    rows.finish_error(code(&error), &message).await
}

/// Sends a statement's result: its rows batch by batch as they come (one batch held at a
/// time), an OK with the rows it changed, or its error. A failure after rows were sent ends
/// the result with the error.
pub(super) async fn answer<W: AsyncWrite + Unpin>(
    result: QueryResult,
    results: QueryResultWriter<'_, W>,
    binary: bool,
) -> io::Result<()> {
    let table = match result.outcome {
        Outcome::Error(e) => return results.error(code(&e), e.message().as_bytes()).await,
        Outcome::Ok { affected_rows } => {
            let ok = OkResponse {
                affected_rows: affected_rows.unwrap_or(0),
                ..Default::default()
            };
            return results.completed(ok).await;
        }
        Outcome::Table(table) => table,
    };
    let mut stream = table.stream;
    let schema = stream.schema();
    let (columns, kinds): (Vec<Column>, Vec<Kind>) = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let name = table
                .column_names
                .get(i)
                .map_or(field.name().as_str(), String::as_str);
            column(field, name)
        })
        .unzip();
    let mut rows = results.start(&columns).await?;
    while let Some(batch) = stream.next().await {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => return failed(rows, Error::from(e)).await,
        };
        let arrays: Result<Vec<ArrayRef>, Error> = batch.columns().iter().map(plain).collect();
        let arrays = match arrays {
            Ok(arrays) => arrays,
            Err(e) => return failed(rows, e).await,
        };
        // Cells are read a slice of rows at a time before the slice is sent: the readers of
        // some types (a formatter, a JSON writer) cannot wait across a send, the cells can.
        // A slice holds at most CELLS_AT_ONCE cells, however wide the result.
        let step = (CELLS_AT_ONCE / columns.len().max(1)).max(1);
        let mut start = 0;
        while start < batch.num_rows() {
            let end = (start + step).min(batch.num_rows());
            let values = match read_cells(&arrays, &kinds, start..end) {
                Ok(values) => values,
                Err(e) => return failed(rows, e).await,
            };
            let mut values = values.into_iter();
            for _ in start..end {
                for column in &columns {
                    let value = values.next().unwrap_or(Value::Null);
                    write(&mut rows, value, column, binary)?;
                }
                rows.end_row().await?;
            }
            start = end;
        }
    }
    rows.finish().await
}
