//! A result as an Arrow C stream (`struct ArrowArrayStream`), for zero-copy hand-off to Arrow
//! consumers (nanoarrow, DuckDB, pyarrow, polars). Batches are pulled from the engine as the
//! consumer asks for them.

use std::ffi::c_char;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ffi_stream::FFI_ArrowArrayStream;
use mindlite::{BlockingReader, Outcome};

use crate::boundary::{self, Failure, Status};
use crate::database::{with_database, Database};

/// Runs `sql` in the handle's current project and exports its result as an Arrow C stream.
/// A statement without rows gives a stream with no columns and no batches. An error met while
/// reading comes out of `get_next` as an errno-style code with `get_last_error` naming it.
///
/// - `out_stream`: caller-allocated; on success the stream is moved into it, on failure it is
///   set to a released stream (`release` is NULL).
///
/// Ownership: the caller releases the stream with `out_stream->release(out_stream)`; it stays
/// valid after `db` is closed. Its callbacks may be called from any thread, one at a time.
#[no_mangle]
pub unsafe extern "C" fn mindlite_query_arrow(
    db: *const Database,
    sql: *const c_char,
    out_stream: *mut FFI_ArrowArrayStream,
) -> Status {
    // A released (empty) stream first, so a caller that checks `release` after a failure
    // never reads garbage.
    if !out_stream.is_null() {
        // SAFETY: caller-allocated, per the header; whatever it held is not ours to drop.
        unsafe { out_stream.write(FFI_ArrowArrayStream::empty()) };
    }
    with_database(db, |db| {
        if out_stream.is_null() {
            return Err(Failure::misuse("out_stream is NULL"));
        }
        // SAFETY: a NUL-terminated string, per the header.
        let sql = unsafe { boundary::text(sql, "sql") }?;
        let result = db.query(sql);
        let (schema, stream) = match result.outcome {
            Outcome::Error(e) => return Err(e.into()),
            Outcome::Ok { .. } => (SchemaRef::new(Schema::empty()), None),
            Outcome::Table(table) => (table.stream.schema(), Some(table.stream)),
        };
        let reader = BlockingReader::new(db.engine().clone(), schema, Vec::new(), stream);
        // SAFETY: non-null and caller-allocated; it holds the empty stream written above.
        unsafe { out_stream.write(FFI_ArrowArrayStream::new(Box::new(reader))) };
        Ok(())
    })
}
