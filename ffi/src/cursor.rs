//! `mindlite_cursor`: a result streamed in one of MindsDB's wire framings, a chunk per call,
//! without holding the result in memory.

use std::ffi::c_char;

use mindlite::{Engine, WireFormat, WireStream};

use crate::boundary::{self, out, Failure, LastError, Status};
use crate::database::{with_database, Database};
use crate::{MINDLITE_DONE, MINDLITE_INVALID, MINDLITE_MISUSE, MINDLITE_OK};

/// Which framing a cursor yields its chunks in.
pub type Format = i32;

/// MindsDB's JSON document, as one chunk (the default `response_format`).
pub const MINDLITE_FORMAT_JSON: Format = 0;
/// JSON Lines (`response_format: "jsonlines"`): a header line, then one line per row.
pub const MINDLITE_FORMAT_JSONLINES: Format = 1;
/// Server-Sent Events (`response_format: "sse"`): `data: …` events.
pub const MINDLITE_FORMAT_SSE: Format = 2;

/// A result being streamed. Opaque to C.
pub struct Cursor {
    engine: Engine,
    wire: WireStream,
    /// The chunk last returned, NUL-terminated; C reads it until the next call.
    chunk: Vec<u8>,
    done: bool,
    last_error: LastError,
}

/// Runs `sql` in the handle's current project and opens a cursor over its result in `format`.
/// The chunks are byte for byte the body `POST /api/sql/query` sends with that
/// `response_format`; concatenated they are the whole answer. At most about one record batch
/// is held at a time.
///
/// An SQL error is not a failure here: like MindsDB, the stream then carries an error item
/// (`{"type": "error", …}`), and so does an error met after some rows. Returns
/// `MINDLITE_INVALID` for an unknown `format`.
///
/// Ownership: the caller owns the cursor and frees it with `mindlite_cursor_free`; it stays
/// valid after `db` is closed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_cursor_open(
    db: *const Database,
    sql: *const c_char,
    format: Format,
    out_cursor: *mut *mut Cursor,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_cursor) };
    with_database(db, |db| {
        let out_cursor = out(out_cursor, "out_cursor")?;
        let format = match format {
            MINDLITE_FORMAT_JSON => WireFormat::Json,
            MINDLITE_FORMAT_JSONLINES => WireFormat::JsonLines,
            MINDLITE_FORMAT_SSE => WireFormat::Sse,
            other => {
                return Err(Failure::new(
                    MINDLITE_INVALID,
                    format!("unknown format {other}: use MINDLITE_FORMAT_JSON, _JSONLINES or _SSE"),
                ))
            }
        };
        // SAFETY: a NUL-terminated string, per the header.
        let sql = unsafe { boundary::text(sql, "sql") }?;
        let cursor = Cursor {
            engine: db.engine().clone(),
            wire: WireStream::new(db.query(sql), format),
            chunk: Vec::new(),
            done: false,
            last_error: LastError::default(),
        };
        *out_cursor = Box::into_raw(Box::new(cursor));
        Ok(())
    })
}

/// The next chunk: `MINDLITE_OK` with the chunk, or `MINDLITE_DONE` (and NULL, 0) at the end;
/// later calls keep returning `MINDLITE_DONE`.
///
/// - `out_chunk`: receives the chunk, NUL-terminated UTF-8.
/// - `out_len`: may be NULL; receives its length in bytes without the NUL.
///
/// Ownership: owned by the cursor; valid until the next call on it or until it is freed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_cursor_next(
    cursor: *mut Cursor,
    out_chunk: *mut *const c_char,
    out_len: *mut usize,
) -> Status {
    // SAFETY: NULL or a live cursor used by one thread at a time, per the header.
    let Some(cursor) = (unsafe { cursor.as_mut() }) else {
        return MINDLITE_MISUSE;
    };
    let Cursor {
        engine,
        wire,
        chunk,
        done,
        last_error,
    } = cursor;
    last_error.run(|| {
        let slot = out(out_chunk, "out_chunk")?;
        *slot = std::ptr::null();
        // SAFETY: NULL or writable, per the header.
        let len = unsafe { out_len.as_mut() };
        let next = if *done {
            None
        } else {
            engine.block_on(wire.next_chunk())
        };
        let Some(piece) = next else {
            *done = true;
            chunk.clear();
            if let Some(len) = len {
                *len = 0;
            }
            return Ok(MINDLITE_DONE);
        };
        *chunk = piece;
        if let Some(len) = len {
            *len = chunk.len();
        }
        chunk.push(0);
        *slot = chunk.as_ptr().cast();
        Ok(MINDLITE_OK)
    })
}

/// The message of the last failed call on `cursor`, or "not an error". Never NULL.
///
/// Ownership: owned by the cursor; valid until the next call on it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_cursor_errmsg(cursor: *const Cursor) -> *const c_char {
    // SAFETY: NULL or a live cursor, per the header.
    match unsafe { cursor.as_ref() } {
        Some(cursor) => cursor.last_error.message(),
        None => c"the cursor handle is NULL".as_ptr(),
    }
}

/// Frees a cursor, dropping the rest of its result unread. `mindlite_cursor_free(NULL)` does
/// nothing.
///
/// Ownership: takes `cursor`; the last chunk pointer becomes invalid.
#[no_mangle]
pub unsafe extern "C" fn mindlite_cursor_free(cursor: *mut Cursor) {
    if !cursor.is_null() {
        // SAFETY: made by `Box::into_raw` in `mindlite_cursor_open`, freed once per the header.
        drop(unsafe { Box::from_raw(cursor) });
    }
}
