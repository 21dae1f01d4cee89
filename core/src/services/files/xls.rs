//! Excel 97–2003 workbooks (`.xls`) uploaded as tables, read as `.xlsx` workbooks are
//! (`sheets`): the same column naming and typing, a workbook of several sheets a listing.
//!
//! calamine reads an `.xls` file whole when it opens it: every sheet's cells into a grid sized
//! from the sheet's own DIMENSIONS record (four billion rows claimed by a few bytes), before
//! any cell reaches us. No check of ours can run in between, so the whole reading happens in a
//! child process under memory and CPU limits (see `sandbox`): it types each sheet's columns,
//! makes its rows, counts them against the upload's caps, and hands every sheet back as Arrow
//! IPC; the parent then serves the sheets from those bytes.

use std::io::Cursor;

use bytes::{Buf, Bytes};
use calamine::{Data, DataRef, Reader, Xls};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;

use super::rows::{stored_size, Caps, FileRows, Sheet};
use super::sheets::{book, Columns, Maker};
use crate::catalog::namespace::MAX_SHEETS;
use crate::error::{Error, Result};

/// What reading one workbook may use at most, in a process of its own: memory by its size
/// (calamine keeps a sheet as a grid of 32-byte cells, its records take 10 bytes and more
/// each) up to this, and this much CPU. A sheet holds at most 65,536 × 256 cells, about 512
/// MiB as a grid: a file that spreads a few cells that wide is refused unless it is large.
const XLS_MEMORY: u64 = 1 << 30;
const XLS_SECONDS: u64 = 60;

/// How a compound file (the container of an `.xls` workbook) starts.
pub(super) const OLE2: [u8; 8] = *b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1";

/// Opens an `.xls` file: read whole in a child process, its sheets come back typed.
pub(super) fn open_xls(bytes: Bytes, caps: Caps) -> Result<FileRows> {
    // Not worth a process: a file that is not a compound document at all.
    if !bytes.starts_with(&OLE2) {
        return Err(Error::invalid(
            "The file is not a readable .xls workbook: it does not start as one (an OLE2 compound file)",
        ));
    }
    let memory = crate::sandbox::memory_for(bytes.len() as u64, 128 << 20, 64, XLS_MEMORY);
    let limits = crate::sandbox::Limits {
        memory,
        seconds: XLS_SECONDS,
        // What the child sends is rows it counted against the caps, in Arrow's own layout,
        // and no more than it could hold.
        max_output: caps.max_bytes.saturating_add(16 << 20).min(memory),
    };
    let read = crate::sandbox::run("the .xls workbook", limits, || read_sheets(&bytes, caps))?;
    let mut sheets = unframe(Bytes::from(read))?;
    match sheets.len() {
        0 => Err(Error::invalid("The .xls file has no sheets")),
        1 => {
            let (name, rows) = sheets.remove(0);
            sheet_rows(rows)?.ok_or_else(|| Error::invalid(format!("The sheet '{name}' is empty")))
        }
        _ => {
            let names = sheets.iter().map(|(name, _)| name.clone()).collect();
            let mut rows = sheets.into_iter().map(|(_, rows)| rows);
            book(names, |_| {
                let rows = rows.next().unwrap_or_default();
                Sheet {
                    open: Box::new(move || sheet_rows(rows)),
                }
            })
        }
    }
}

/// A sheet's rows as the child sent them (Arrow IPC; nothing for an empty sheet).
fn sheet_rows(ipc: Bytes) -> Result<Option<FileRows>> {
    if ipc.is_empty() {
        return Ok(None);
    }
    let garbled = |e: datafusion::arrow::error::ArrowError| {
        Error::internal(format!("an .xls sheet's rows came back garbled: {e}"))
    };
    let reader = StreamReader::try_new(Cursor::new(ipc), None).map_err(garbled)?;
    Ok(Some(FileRows {
        schema: reader.schema(),
        rows: Box::new(move |sink| {
            for batch in reader {
                sink(batch.map_err(garbled)?)?;
            }
            Ok(())
        }),
        sheets: Vec::new(),
    }))
}

/// The child's work: every sheet of the workbook typed and made into rows, counted against
/// `caps` across sheets, and framed for the parent (see [`unframe`]).
fn read_sheets(bytes: &[u8], caps: Caps) -> Result<Vec<u8>> {
    let mut workbook = Xls::new(Cursor::new(bytes))
        .map_err(|e| Error::invalid(format!("The file is not a readable .xls workbook: {e}")))?;
    let names = workbook.sheet_names();
    if names.len() > MAX_SHEETS {
        return Err(Error::invalid(format!(
            "The workbook has {} sheets, more than the {MAX_SHEETS} one upload may hold",
            names.len()
        )));
    }
    let (mut rows, mut stored) = (0u64, 0u64);
    let mut framed = Vec::new();
    for name in &names {
        let range = workbook.worksheet_range(name).map_err(|e| {
            Error::invalid(format!(
                "The sheet '{name}' of the .xls file cannot be read: {e}"
            ))
        })?;
        let (top, left) = range.start().unwrap_or_default();
        let cells = || {
            range
                .used_cells()
                .map(move |(row, column, value)| (top + row as u32, left as usize + column, value))
        };
        let mut columns = Columns::default();
        for (row, column, value) in cells() {
            columns.add(name, row, column, &data_ref(value))?;
        }
        let mut ipc = Vec::new();
        if let Some(layout) = columns.layout()? {
            let schema = std::sync::Arc::clone(&layout.schema);
            let failed = |e: datafusion::arrow::error::ArrowError| {
                Error::internal(format!("an .xls sheet's rows: {e}"))
            };
            let mut writer = StreamWriter::try_new(&mut ipc, &schema).map_err(failed)?;
            let mut sink = |batch: datafusion::arrow::record_batch::RecordBatch| {
                rows += batch.num_rows() as u64;
                stored = stored.saturating_add(stored_size(&batch));
                if rows > caps.max_rows {
                    return Err(caps.rows_over());
                }
                if stored > caps.max_bytes {
                    return Err(caps.bytes_over());
                }
                writer.write(&batch).map_err(failed)
            };
            let mut maker = Maker::new(name, layout);
            for (row, column, value) in cells() {
                maker.add(row, column, &data_ref(value), &mut sink)?;
            }
            maker.finish(&mut sink)?;
            writer.finish().map_err(failed)?;
        }
        framed.extend_from_slice(&(name.len() as u64).to_le_bytes());
        framed.extend_from_slice(name.as_bytes());
        framed.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
        framed.extend_from_slice(&ipc);
    }
    Ok(framed)
}

/// The sheets the child framed: for each, its name's length (8 bytes, little-endian), the
/// name, its rows' length and the rows.
fn unframe(mut framed: Bytes) -> Result<Vec<(String, Bytes)>> {
    let garbled = || Error::internal("an .xls workbook's sheets came back garbled");
    let take = |framed: &mut Bytes| -> Result<Bytes> {
        if framed.remaining() < 8 {
            return Err(garbled());
        }
        let length = framed.get_u64_le();
        if length > framed.remaining() as u64 {
            return Err(garbled());
        }
        Ok(framed.split_to(length as usize))
    };
    let mut sheets = Vec::new();
    while framed.has_remaining() {
        let name = String::from_utf8(take(&mut framed)?.to_vec()).map_err(|_| garbled())?;
        let rows = take(&mut framed)?;
        sheets.push((name, rows)); // bounded: one per sheet, at most MAX_SHEETS
    }
    Ok(sheets)
}

/// calamine's owned cell value as the borrowed one the sheet readers type.
fn data_ref(value: &Data) -> DataRef<'_> {
    match value {
        Data::Int(i) => DataRef::Int(*i),
        Data::Float(f) => DataRef::Float(*f),
        Data::String(text) => DataRef::SharedString(text),
        Data::Bool(b) => DataRef::Bool(*b),
        Data::DateTime(d) => DataRef::DateTime(*d),
        Data::DateTimeIso(text) => DataRef::DateTimeIso(text.clone()),
        Data::DurationIso(text) => DataRef::DurationIso(text.clone()),
        Data::Error(e) => DataRef::Error(e.clone()),
        Data::Empty => DataRef::Empty,
    }
}
