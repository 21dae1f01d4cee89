//! Engine records as JSON text: one `mindlite_<noun>_<verb>` function per engine operation,
//! JSON in and JSON out, so the header does not grow a struct per record. Later issues add
//! agents, models, callbacks, users and quotas here in the same shape.

use std::ffi::c_char;

use serde::Serialize;

use crate::boundary::{self, give_string, out, Failure, Status};
use crate::database::{with_database, Database};

fn give_json(out_json: *mut *mut c_char, value: &impl Serialize) -> Result<(), Failure> {
    let slot = out(out_json, "out_json")?;
    let text = serde_json::to_string(value)
        .map_err(|e| mindlite::Error::internal(format!("cannot encode a record as JSON: {e}")))?;
    give_string(slot, text);
    Ok(())
}

/// The projects, by name: `[{"id": 1, "name": "mindsdb", "created_at": "…"}, …]`.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_project_list(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_json) };
    with_database(db, |db| give_json(out_json, &db.engine().list_projects()?))
}

/// One project by name (case-insensitive): `{"id": …, "name": …, "created_at": …}`;
/// `MINDLITE_NOT_FOUND` when there is none.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_project_get(
    db: *const Database,
    name: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_json) };
    with_database(db, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let name = unsafe { boundary::text(name, "name") }?;
        give_json(out_json, &db.engine().get_project(name)?)
    })
}

/// The engine's status as `GET /api/status` reports it:
/// `{"mindsdb_version": …, "environment": "local", "auth": {…}}`. `authenticated` says whether
/// the caller has shown a valid token (reported as `auth.confirmed`).
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_status_get(
    db: *const Database,
    authenticated: bool,
    out_json: *mut *mut c_char,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_json) };
    with_database(db, |db| {
        give_json(out_json, &db.engine().status(authenticated))
    })
}
