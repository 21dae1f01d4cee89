//! Spreadsheets (`.xlsx`) uploaded as tables, as MindsDB reads them (pandas' `read_excel`): a
//! sheet's first row names the columns, each column typed by what its cells hold (whole
//! numbers `BIGINT`, numbers `DOUBLE`, booleans, dates and times `TIMESTAMP`, anything mixed
//! text), an empty cell NULL, rows with no value skipped. A header cell left empty names its
//! column `Unnamed: <n>`, as pandas does.
//!
//! A workbook of several sheets is a table listing them (`Tables`), each sheet a table of
//! its own, as MindsDB's `files.book.sheet`.
//!
//! calamine reads the workbook over an archive checked first (`archive`): its shared strings
//! are held whole (counted against the statement's memory before they are read), the sheet is
//! streamed cell by cell, twice: once to type the columns ([`Columns`]), once to make the rows
//! ([`Maker`]). `.xls` workbooks (`xls`) are typed and made by the same two.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use calamine::{DataRef, Reader, Xlsx};
use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringArray, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;

use super::archive::Archive;
use super::rows::{check_columns, contained, FileRows, BATCH_ROWS, MAX_COLUMNS};
use super::rows::{Caps, Sheet, Sink};
use crate::catalog::namespace::MAX_SHEETS;
use crate::error::{Error, Result};

/// The longest column name a header cell may give.
const MAX_NAME_BYTES: usize = 1024;
/// Bytes of values one row may hold.
const MAX_ROW_BYTES: usize = 64 << 20;
/// A batch is handed on once its values take this many bytes, whatever its rows.
const BATCH_BYTES: usize = 8 << 20;

/// A workbook, checked and opened.
#[derive(Clone)]
pub(super) struct Workbook {
    bytes: Bytes,
    /// Its sheets, in order.
    pub(super) sheets: Vec<String>,
    /// Bytes its shared strings may take once read.
    held: u64,
    /// calamine's reader, its shared strings read, while no sheet is being read: the sheets of
    /// a workbook are read one after another, and each takes it instead of reading the shared
    /// strings again (a workbook of many sheets would otherwise read them once per sheet).
    parsed: Arc<Mutex<Option<Xlsx<Cursor<Bytes>>>>>,
}

/// Opens an `.xlsx` file: the archive is checked, and what calamine holds whole (everything
/// but the sheets' cells) must fit the statement's memory.
pub(super) fn open_workbook(bytes: Bytes, caps: Caps) -> Result<Workbook> {
    let mut archive = Archive::check(bytes.clone(), caps, "The .xlsx file")?;
    one_part_per_sheet(&mut archive)?;
    let held: u64 = archive
        .sizes()
        .filter(|(name, _)| !name.starts_with("xl/worksheets/"))
        .map(|(_, size)| size)
        .sum();
    // An empty shared string (`<si/>`, 5 bytes) takes a 24-byte `String`.
    let held = held.saturating_mul(8);
    drop(archive);
    let workbook = reader(&bytes, held)?;
    let sheets = workbook.sheet_names();
    if sheets.is_empty() {
        return Err(Error::invalid("The .xlsx file has no sheets"));
    }
    Ok(Workbook {
        bytes,
        sheets,
        held,
        parsed: Arc::new(Mutex::new(Some(workbook))),
    })
}

/// Refuses a workbook whose sheets share a worksheet part: each sheet is read on its own, so
/// one part named by a thousand sheets would be read a thousand times (a small upload, much
/// work and many rows).
fn one_part_per_sheet(archive: &mut Archive) -> Result<()> {
    use quick_xml::events::Event;

    let Some(xml) = archive.read("xl/_rels/workbook.xml.rels")? else {
        return Ok(());
    };
    let mut reader = quick_xml::Reader::from_reader(&xml[..]);
    let mut buffer = Vec::new();
    let mut targets = std::collections::HashSet::new();
    loop {
        let event = reader.read_event_into(&mut buffer).map_err(|e| {
            Error::invalid(format!("The .xlsx file's relationships are damaged: {e}"))
        })?;
        match event {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == "Relationship" => {
                let (mut kind, mut target) = (String::new(), String::new());
                for attribute in e.attributes().flatten() {
                    match attribute.key.as_ref() {
                        "Type" => kind = attribute.value.into_owned(),
                        "Target" => target = attribute.value.into_owned(),
                        _ => {}
                    }
                }
                if kind.ends_with("/worksheet") {
                    let part = target.trim_start_matches('/').to_ascii_lowercase();
                    let part = part.strip_prefix("xl/").unwrap_or(&part).to_string();
                    if !targets.insert(part) {
                        return Err(Error::invalid(format!(
                            "The .xlsx file's sheets share one worksheet part ('{target}'); each sheet must have its own"
                        )));
                    }
                }
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
        buffer.clear();
    }
}

/// calamine's reader of the workbook: its shared strings are read whole, in one call, so the
/// `held` bytes they may take are held for the statement first (two uploads cannot both pass
/// a check and then together go past the limit).
fn reader(bytes: &Bytes, held: u64) -> Result<Xlsx<Cursor<Bytes>>> {
    let _held = crate::capacity::hold(held, "the .xlsx file's shared strings")?;
    contained("an .xlsx file", || {
        Xlsx::new(Cursor::new(bytes.clone()))
            .map_err(|e| Error::invalid(format!("The file is not a readable .xlsx workbook: {e}")))
    })
}

fn damaged(sheet: &str, e: calamine::XlsxError) -> Error {
    Error::invalid(format!(
        "The sheet '{sheet}' of the .xlsx file cannot be read: {e}"
    ))
}

/// What a column's cells have held so far.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    ints: bool,
    floats: bool,
    bools: bool,
    times: bool,
    texts: bool,
}

impl Seen {
    fn add(&mut self, value: &DataRef<'_>) {
        match value {
            DataRef::Empty => {}
            DataRef::Int(_) => self.ints = true,
            DataRef::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => self.ints = true,
            DataRef::Float(_) => self.floats = true,
            DataRef::Bool(_) => self.bools = true,
            DataRef::DateTime(d) if d.is_datetime() && micros(d).is_some() => self.times = true,
            // A date outside Excel's range is the number it holds.
            DataRef::DateTime(d) if d.is_datetime() && !in_range(d) => self.floats = true,
            _ => self.texts = true,
        }
    }

    fn data_type(self) -> DataType {
        let kinds = [self.ints || self.floats, self.bools, self.times, self.texts];
        match kinds.iter().filter(|k| **k).count() {
            1 if self.floats => DataType::Float64,
            1 if self.ints => DataType::Int64,
            1 if self.bools => DataType::Boolean,
            1 if self.times => DataType::Timestamp(TimeUnit::Microsecond, None),
            _ => DataType::Utf8,
        }
    }
}

impl Workbook {
    /// A workbook of several sheets (see [`book`]), each opened when asked (`None` for an
    /// empty one, which pandas reads as a frame of nothing).
    pub(super) fn book(self) -> Result<FileRows> {
        let names = self.sheets.clone();
        book(names, |name| {
            let (workbook, name) = (self.clone(), name.to_string());
            Sheet {
                open: Box::new(move || workbook.sheet_if_any(&name)),
            }
        })
    }

    /// The sheet `name` as a table: its columns typed now (one pass over its cells), its rows
    /// made as they are read (a second pass).
    pub(super) fn sheet(self, name: &str) -> Result<FileRows> {
        self.sheet_if_any(name)?
            .ok_or_else(|| Error::invalid(format!("The sheet '{name}' is empty")))
    }

    /// [`Workbook::sheet`], `None` when the sheet holds no value.
    fn sheet_if_any(self, name: &str) -> Result<Option<FileRows>> {
        // calamine panics on some damaged sheets (a row number past u32): such a panic is the
        // file's error.
        contained("an .xlsx file", || self.sheet_in(name))
    }

    fn sheet_in(self, name: &str) -> Result<Option<FileRows>> {
        let parsed = Arc::clone(&self.parsed);
        let kept = parsed.lock().ok().and_then(|mut slot| slot.take());
        let mut workbook = match kept {
            Some(workbook) => workbook,
            None => reader(&self.bytes, self.held)?,
        };
        let mut columns = Columns::default();
        {
            let mut cells = workbook
                .worksheet_cells_reader(name)
                .map_err(|e| damaged(name, e))?;
            while let Some(cell) = cells.next_cell().map_err(|e| damaged(name, e))? {
                let (row, column) = cell.get_position();
                columns.add(name, row, column as usize, cell.get_value())?;
            }
        }
        let Some(layout) = columns.layout()? else {
            if let Ok(mut slot) = parsed.lock() {
                *slot = Some(workbook);
            }
            return Ok(None);
        };
        let schema = Arc::clone(&layout.schema);
        let sheet = name.to_string();
        Ok(Some(FileRows {
            schema,
            rows: Box::new(move |sink| {
                contained("an .xlsx file", move || {
                    let mut cells = workbook
                        .worksheet_cells_reader(&sheet)
                        .map_err(|e| damaged(&sheet, e))?;
                    let mut maker = Maker::new(&sheet, layout);
                    while let Some(cell) = cells.next_cell().map_err(|e| damaged(&sheet, e))? {
                        let (row, column) = cell.get_position();
                        maker.add(row, column as usize, cell.get_value(), sink)?;
                    }
                    maker.finish(sink)?;
                    drop(cells);
                    // The next sheet reads with it.
                    if let Ok(mut slot) = parsed.lock() {
                        *slot = Some(workbook);
                    }
                    Ok(())
                })
            }),
            sheets: Vec::new(),
        }))
    }
}

/// A workbook of several sheets as MindsDB reads one: a table listing the sheets `names` (one
/// column, `Tables`), and each sheet opened when asked by what `open` makes of its name.
pub(super) fn book(names: Vec<String>, mut open: impl FnMut(&str) -> Sheet) -> Result<FileRows> {
    if names.len() > MAX_SHEETS {
        return Err(Error::invalid(format!(
            "The workbook has {} sheets, more than the {MAX_SHEETS} one upload may hold",
            names.len()
        )));
    }
    // A name SQL cannot write (`files.book.``` is no name) would be a sheet no one can read.
    if names
        .iter()
        .any(|name| name.trim_matches(['\0', ' ']).is_empty())
    {
        return Err(Error::invalid(
            "The workbook has a sheet without a name; name every sheet",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = names.iter().find(|name| !seen.insert(name.to_lowercase())) {
        return Err(Error::invalid(format!(
            "The workbook has two sheets named '{twice}' (sheet names are told apart whatever their case)"
        )));
    }
    let schema = Arc::new(Schema::new(vec![Field::new(
        "Tables",
        DataType::Utf8,
        false,
    )]));
    let sheets = names.iter().map(|name| open(name)).collect();
    let listed = Arc::clone(&schema);
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink| {
            let names: ArrayRef = Arc::new(StringArray::from(names));
            sink(RecordBatch::try_new(listed, vec![names])?)
        }),
        sheets,
    })
}

/// A sheet's columns, found from its cells in a first pass: the first row with a value names
/// them, the rows after it type them.
#[derive(Default)]
pub(super) struct Columns {
    header: Vec<Option<String>>,
    seen: Vec<Seen>,
    first_row: Option<u32>,
    cells: u64,
}

/// A sheet's columns once found: their names and types, where the header is, how wide a row is.
pub(super) struct Layout {
    pub(super) schema: Arc<Schema>,
    header_row: u32,
    width: usize,
}

impl Columns {
    /// Takes the cell at `row`, `column` of the sheet `name` into account (cells come row by
    /// row, left to right).
    pub(super) fn add(
        &mut self,
        name: &str,
        row: u32,
        column: usize,
        value: &DataRef<'_>,
    ) -> Result<()> {
        self.cells += 1;
        if self.cells.is_multiple_of(4096) {
            crate::cancel::check()?;
        }
        if column >= MAX_COLUMNS {
            // Found cell by cell: the sheet is at least this wide.
            return Err(Error::invalid(format!(
                "The sheet '{name}' has more than {MAX_COLUMNS} columns; at most {MAX_COLUMNS} are accepted"
            )));
        }
        if value == &DataRef::Empty {
            return Ok(());
        }
        let first = *self.first_row.get_or_insert(row);
        if row == first {
            if self.header.len() <= column {
                self.header.resize(column + 1, None); // bounded: column < MAX_COLUMNS
            }
            let text = text_of(value);
            if text.len() > MAX_NAME_BYTES {
                return Err(Error::invalid(format!(
                    "The sheet '{name}' has a column name longer than {MAX_NAME_BYTES} bytes"
                )));
            }
            self.header[column] = Some(text);
        } else {
            if self.seen.len() <= column {
                self.seen.resize(column + 1, Seen::default()); // bounded: column < MAX_COLUMNS
            }
            self.seen[column].add(value);
        }
        Ok(())
    }

    /// The columns found; `None` when no cell held a value.
    pub(super) fn layout(self) -> Result<Option<Layout>> {
        let Some(header_row) = self.first_row else {
            return Ok(None);
        };
        let mut seen = self.seen;
        let width = self.header.len().max(seen.len());
        seen.resize(width, Seen::default()); // bounded: width <= MAX_COLUMNS
        let fields: Vec<Field> = (0..width)
            .map(|i| {
                let name = self
                    .header
                    .get(i)
                    .cloned()
                    .flatten()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| format!("Unnamed: {i}"));
                Field::new(name, seen[i].data_type(), true)
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        check_columns(&schema)?;
        Ok(Some(Layout {
            schema,
            header_row,
            width,
        }))
    }
}

/// A sheet's rows made from its cells in a second pass, in batches of the layout's columns.
pub(super) struct Maker<'a> {
    sheet: &'a str,
    layout: Layout,
    batch: Rows,
    row_values: Vec<Option<Value>>,
    current: Option<u32>,
    cells: u64,
    /// Bytes of the row being read and of the batch being made: a shared string is copied
    /// into every cell that names it, so a small workbook can name a long one millions of
    /// times; batches end by size as well as by rows.
    row_bytes: usize,
    batch_bytes: usize,
}

impl<'a> Maker<'a> {
    pub(super) fn new(sheet: &'a str, layout: Layout) -> Maker<'a> {
        Maker {
            sheet,
            batch: Rows::new(&layout.schema),
            row_values: vec![None; layout.width], // bounded: width <= MAX_COLUMNS
            layout,
            current: None,
            cells: 0,
            row_bytes: 0,
            batch_bytes: 0,
        }
    }

    /// Takes the next cell (row by row, left to right), handing on a batch when one is full.
    pub(super) fn add(
        &mut self,
        row: u32,
        column: usize,
        value: &DataRef<'_>,
        sink: Sink<'_>,
    ) -> Result<()> {
        self.cells += 1;
        if self.cells.is_multiple_of(4096) {
            crate::cancel::check()?;
        }
        if Some(row) != self.current {
            self.end_row(sink)?;
            self.current = Some(row);
        }
        if column < self.layout.width && row != self.layout.header_row {
            let value = Value::of(value);
            self.row_bytes += value.as_ref().map_or(0, Value::size);
            if self.row_bytes > MAX_ROW_BYTES {
                return Err(Error::invalid(format!(
                    "The sheet '{}' has a row of more than {} MiB",
                    self.sheet,
                    MAX_ROW_BYTES >> 20
                )));
            }
            self.row_values[column] = value;
        }
        Ok(())
    }

    /// The row being read ends: kept unless it is the header or holds no value.
    fn end_row(&mut self, sink: Sink<'_>) -> Result<()> {
        if self.current.is_some_and(|r| r != self.layout.header_row)
            && self.row_values.iter().any(Option::is_some)
        {
            self.batch.push(&mut self.row_values);
            self.batch_bytes += self.row_bytes;
            if self.batch.len() == BATCH_ROWS || self.batch_bytes > BATCH_BYTES {
                crate::cancel::check()?;
                sink(self.batch.finish(&self.layout.schema)?)?;
                self.batch_bytes = 0;
            }
        }
        self.row_values.iter_mut().for_each(|v| *v = None);
        self.row_bytes = 0;
        Ok(())
    }

    /// The cells are all read: the last row and batch are handed on.
    pub(super) fn finish(mut self, sink: Sink<'_>) -> Result<()> {
        self.end_row(sink)?;
        if self.batch.len() > 0 {
            sink(self.batch.finish(&self.layout.schema)?)?;
        }
        Ok(())
    }
}

/// A cell's value as the rows are made.
#[derive(Debug, Clone)]
enum Value {
    Number(f64),
    Int(i64),
    Bool(bool),
    /// Microseconds since 1970, or the text when the date is out of range.
    Time(std::result::Result<i64, String>),
    Text(String),
}

impl Value {
    /// Bytes it takes in a batch.
    fn size(&self) -> usize {
        match self {
            Value::Time(Err(text)) | Value::Text(text) => text.len() + 8,
            _ => 8,
        }
    }

    fn of(value: &DataRef<'_>) -> Option<Value> {
        Some(match value {
            DataRef::Empty => return None,
            DataRef::Int(i) => Value::Int(*i),
            DataRef::Float(f) => Value::Number(*f),
            DataRef::Bool(b) => Value::Bool(*b),
            DataRef::DateTime(d) if d.is_datetime() && !in_range(d) => Value::Number(d.as_f64()),
            DataRef::DateTime(d) if d.is_datetime() => {
                Value::Time(micros(d).ok_or_else(|| text_of(value)))
            }
            other => Value::Text(text_of(other)),
        })
    }

    fn text(&self) -> String {
        match self {
            Value::Number(f) => number_text(*f),
            Value::Int(i) => i.to_string(),
            Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            Value::Time(Ok(t)) => chrono::DateTime::from_timestamp_micros(*t)
                .map(|t| t.naive_utc().to_string())
                .unwrap_or_default(),
            Value::Time(Err(text)) | Value::Text(text) => text.clone(),
        }
    }
}

/// A number as a spreadsheet shows it: whole numbers without a fraction.
fn number_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// A cell's text, for a header or a text column.
fn text_of(value: &DataRef<'_>) -> String {
    match value {
        DataRef::Float(f) => number_text(*f),
        DataRef::DateTime(d) if d.is_duration() => duration_text(d.as_f64()),
        DataRef::DateTime(d) if !in_range(d) => number_text(d.as_f64()),
        DataRef::DateTime(d) => match micros(d) {
            Some(t) => Value::Time(Ok(t)).text(),
            // A date Excel shows but the calendar lacks (1900-02-29, of its leap year bug).
            None => {
                let (year, month, day, hour, minute, second, _) = d.to_ymd_hms_milli();
                format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
            }
        },
        DataRef::Bool(b) => Value::Bool(*b).text(),
        DataRef::Int(i) => i.to_string(),
        DataRef::String(text) | DataRef::DateTimeIso(text) | DataRef::DurationIso(text) => {
            text.clone()
        }
        DataRef::SharedString(text) => text.to_string(),
        DataRef::Error(e) => e.to_string(),
        DataRef::Empty => String::new(),
    }
}

/// Whether an Excel date is within what Excel shows (0 to 9999-12-31); calamine gives the
/// nearest end for one outside.
fn in_range(date: &calamine::ExcelDateTime) -> bool {
    (0.0..2_958_466.0).contains(&date.as_f64())
}

/// A duration of `days` as a spreadsheet's `[h]:mm:ss` shows it.
fn duration_text(days: f64) -> String {
    if !days.is_finite() {
        return number_text(days);
    }
    let millis = (days * 86_400_000.0).round();
    let sign = if millis < 0.0 { "-" } else { "" };
    let millis = millis.abs() as u64;
    let (seconds, millis) = (millis / 1000, millis % 1000);
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match millis {
        0 => format!("{sign}{hours}:{minutes:02}:{seconds:02}"),
        _ => format!("{sign}{hours}:{minutes:02}:{seconds:02}.{millis:03}"),
    }
}

/// An Excel date's microseconds since 1970.
fn micros(date: &calamine::ExcelDateTime) -> Option<i64> {
    if !in_range(date) {
        return None;
    }
    let (year, month, day, hour, minute, second, milli) = date.to_ymd_hms_milli();
    let day = chrono::NaiveDate::from_ymd_opt(year.into(), month.into(), day.into())?;
    let time = chrono::NaiveTime::from_hms_milli_opt(
        hour.into(),
        minute.into(),
        second.into(),
        milli.into(),
    )?;
    Some(day.and_time(time).and_utc().timestamp_micros())
}

/// A batch of rows being made, one builder per column of the type it was given.
struct Rows {
    columns: Vec<Column>,
    len: usize,
}

enum Column {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Time(TimestampMicrosecondBuilder),
    Text(StringBuilder),
}

impl Rows {
    fn new(schema: &Schema) -> Rows {
        let columns = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int64 => Column::Int(Int64Builder::new()),
                DataType::Float64 => Column::Float(Float64Builder::new()),
                DataType::Boolean => Column::Bool(BooleanBuilder::new()),
                DataType::Timestamp(_, _) => Column::Time(TimestampMicrosecondBuilder::new()),
                _ => Column::Text(StringBuilder::new()),
            })
            .collect();
        Rows { columns, len: 0 }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Appends one row (each column's value or None), taking the values.
    fn push(&mut self, values: &mut [Option<Value>]) {
        for (column, value) in self.columns.iter_mut().zip(values.iter_mut()) {
            let value = value.take();
            match column {
                Column::Int(b) => b.append_option(match value {
                    Some(Value::Int(i)) => Some(i),
                    Some(Value::Number(f)) => Some(f as i64),
                    _ => None,
                }),
                Column::Float(b) => b.append_option(match value {
                    Some(Value::Int(i)) => Some(i as f64),
                    Some(Value::Number(f)) => Some(f),
                    _ => None,
                }),
                Column::Bool(b) => b.append_option(match value {
                    Some(Value::Bool(v)) => Some(v),
                    _ => None,
                }),
                Column::Time(b) => b.append_option(match value {
                    Some(Value::Time(Ok(t))) => Some(t),
                    _ => None,
                }),
                Column::Text(b) => b.append_option(value.map(|v| v.text())),
            }
        }
        self.len += 1;
    }

    fn finish(&mut self, schema: &Arc<Schema>) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|column| -> ArrayRef {
                match column {
                    Column::Int(b) => Arc::new(b.finish()),
                    Column::Float(b) => Arc::new(b.finish()),
                    Column::Bool(b) => Arc::new(b.finish()),
                    Column::Time(b) => Arc::new(b.finish()),
                    Column::Text(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        self.len = 0;
        RecordBatch::try_new(Arc::clone(schema), columns)
            .map_err(|e| Error::internal(format!("a sheet's rows: {e}")))
    }
}
