//! The hosted edition's model-status callbacks as JSON text, in the shape of [`records`]: a
//! user registers URLs that are POSTed when one of its models becomes `complete` or `error`.
//! Every function needs a handle from `mindlite_open_as_user` whose plan includes callbacks:
//! `MINDLITE_FORBIDDEN` otherwise (and on the operator's handle), `MINDLITE_NOT_FOUND` in the
//! local edition.
//!
//! [`records`]: crate::records

use std::ffi::c_char;

use crate::boundary::{self, out, Status};
use crate::database::{with_database, Database};
use crate::records::{answer_json, answer_optional_json, json_arg};

/// Registers a model-status callback from MindsDB's body: `{"url": "https://…", "filter":
/// {"model_name": "regex", "project_name": "regex"}, "attempt": {"count": 3, "interval": 10,
/// "http_timeout": 5}}`; only `url` (http or https) is required. A filter pattern must match a
/// model's or project's name from its start; a missing one matches all. A missing attempt
/// value takes the configured default. `*out_json` receives `{"id", "secret"}`; the secret
/// (`whsec_…`) signs the deliveries and is shown here and never again, so `out_json` is
/// required. `MINDLITE_INVALID` for a bad URL, a pattern that is not a regex or an attempt
/// value out of range (the message names the field). Like every `mindlite_callback_*`
/// function, it needs a handle from `mindlite_open_as_user`: `MINDLITE_FORBIDDEN` when that
/// user's plan has no callbacks or on the operator's handle, `MINDLITE_NOT_FOUND` in the local
/// edition.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_register(
    db: *const Database,
    body_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        out(out_json, "out_json")?;
        // SAFETY: a NUL-terminated string, per the header.
        let body = unsafe { boundary::text(body_json, "body_json") }?;
        let body = json_arg(body, "body_json")?;
        let engine = db.engine();
        let registered = engine.block_on(engine.register_callback(body))?;
        Ok(registered)
    })
}

/// The user's callbacks, by id, as MindsDB lists them: `[{"id", "created_at", "url"}, …]`
/// (`created_at` an HTTP-date).
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_list(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().list_callbacks()?))
}

/// One callback with its settings, not its secret: `{"id", "url", "created_at", "filter":
/// {"model_name", "project_name"}, "attempt": {"count", "interval", "http_timeout"}}`.
/// `MINDLITE_NOT_FOUND` for an unknown id, and for another user's.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_get(
    db: *const Database,
    id: u64,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().get_callback(id)?))
}

/// Changes a callback: `body_json` is an object with any of `"url"`, `"filter"` (which
/// replaces the whole filter; a pattern left out then matches all) and `"attempt"` (whose
/// values replace those given). The secret stays the same. `*out_json` receives the callback
/// as `mindlite_callback_get` shows it. `MINDLITE_INVALID` as for
/// `mindlite_callback_register`, `MINDLITE_NOT_FOUND` for an unknown id or another user's.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_update(
    db: *const Database,
    id: u64,
    body_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let body = unsafe { boundary::text(body_json, "body_json") }?;
        let body = json_arg(body, "body_json")?;
        let engine = db.engine();
        let callback = engine.block_on(engine.update_callback(id, body))?;
        Ok(callback)
    })
}

/// Deletes a callback with its delivery log; deliveries still pending are never sent.
/// `MINDLITE_NOT_FOUND` for an unknown id or another user's.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_delete(db: *const Database, id: u64) -> Status {
    with_database(db, |db| {
        let engine = db.engine();
        engine.block_on(engine.delete_callback(id))?;
        Ok(())
    })
}

/// A callback's delivery log, oldest first, one entry per attempt: `[{"event_id", "attempt",
/// "at", "enqueued_at", "duration_ms", "status", "error", "delivered"}, …]`; `"event_id"` is
/// the same on every attempt of one event, `"status"` the receiver's HTTP status (null when it
/// did not answer), `"error"` why the attempt failed (null when it did not).
/// `MINDLITE_NOT_FOUND` for an unknown id or another user's.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_callback_deliveries(
    db: *const Database,
    id: u64,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        Ok(db.engine().callback_deliveries(id)?)
    })
}
