//! The hosted edition's user administration as JSON text, in the shape of [`records`]: users,
//! their API keys and plan limits, and `mindlite_open_as_user`, a handle acting as one user.
//! Administration needs a handle from `mindlite_open*`; on a user's handle it is
//! `MINDLITE_FORBIDDEN`.
//!
//! [`records`]: crate::records

use std::ffi::c_char;

use mindlite::wire::Fields;

use crate::boundary::{self, out, Failure, Status};
use crate::database::{self, with_database, Database};
use crate::records::{answer_json, answer_optional_json, json_arg};

/// Creates a user on `plan` (NULL: the configured default plan, `free` unless configured
/// otherwise), with its own default project and no API key yet. `*out_json` receives the user:
/// `{"id", "name", "plan", "disabled", "created_at", "api_keys": []}`. `MINDLITE_CONFLICT` when
/// the name is taken, `MINDLITE_INVALID` for a bad name or a plan the configuration does not
/// have (the message names it), `MINDLITE_FORBIDDEN` on a user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_user_create(
    db: *const Database,
    name: *const c_char,
    plan: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings (plan may be NULL), per the header.
        let (name, plan) = unsafe {
            (
                boundary::text(name, "name")?,
                boundary::optional_text(plan, "plan")?,
            )
        };
        let engine = db.engine();
        let user = engine.block_on(engine.create_user(name, plan))?;
        Ok(user)
    })
}

/// Every user, in creation order: `[{"id", "name", "plan", "disabled", "created_at",
/// "api_keys": [{"id", "prefix", "created_at"}, …]}, …]` (keys without their text).
/// `MINDLITE_FORBIDDEN` on a user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_user_list(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().list_users()?))
}

/// One user by name (case-insensitive), as `mindlite_user_list` shows each.
/// `MINDLITE_NOT_FOUND` when there is none, `MINDLITE_FORBIDDEN` on a user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_user_get(
    db: *const Database,
    name: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let name = unsafe { boundary::text(name, "name") }?;
        Ok(db.engine().get_user(name)?)
    })
}

/// Changes a user: `changes_json` is an object with either or both of `"plan"` (a string
/// naming a configured plan) and `"disabled"` (a boolean; a disabled user's keys are refused,
/// its objects kept). `*out_json` receives the user. `MINDLITE_INVALID` for another key, a
/// value of the wrong type (the message names the key) or an unknown plan (the message names
/// it), `MINDLITE_NOT_FOUND` for an unknown user, `MINDLITE_FORBIDDEN` on a user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_user_update(
    db: *const Database,
    name: *const c_char,
    changes_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (name, changes) = unsafe {
            (
                boundary::text(name, "name")?,
                boundary::text(changes_json, "changes_json")?,
            )
        };
        let changes = UserChanges::parse(changes)?;
        let engine = db.engine();
        let user =
            engine.block_on(engine.update_user(name, changes.plan.as_deref(), changes.disabled))?;
        Ok(user)
    })
}

/// What `mindlite_user_update` may change.
struct UserChanges {
    plan: Option<String>,
    disabled: Option<bool>,
}

impl UserChanges {
    fn parse(text: &str) -> Result<UserChanges, Failure> {
        let fields = Fields::of(
            json_arg(text, "changes_json")?,
            "'changes_json' (like {\"plan\": \"pro\", \"disabled\": true})",
        )?;
        if let Some(other) = fields.keys().find(|k| !matches!(*k, "plan" | "disabled")) {
            return Err(invalid(format!(
                "Unknown key '{other}' in changes_json; a user's changes are 'plan' and 'disabled'"
            )));
        }
        let changes = UserChanges {
            plan: fields.text("plan")?,
            disabled: fields.flag("disabled")?,
        };
        Ok(changes)
    }
}

fn invalid(message: impl Into<String>) -> Failure {
    mindlite::Error::invalid(message).into()
}

/// Issues an API key for the user `user`. `*out_json` receives `{"id", "user", "key",
/// "created_at"}`; `"key"` (`mlk_…`) is shown here and never again (only its hash is kept), so
/// `out_json` is required. `MINDLITE_NOT_FOUND` for an unknown user, `MINDLITE_FORBIDDEN` on a
/// user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_api_key_create(
    db: *const Database,
    user: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        out(out_json, "out_json")?;
        // SAFETY: a NUL-terminated string, per the header.
        let user = unsafe { boundary::text(user, "user") }?;
        let engine = db.engine();
        let issued = engine.block_on(engine.create_api_key(user))?;
        Ok(issued)
    })
}

/// Revokes the API key `key_id` (the `"id"` `mindlite_api_key_create` gave) of the user
/// `user`: `mindlite_open_as_user` with it is `MINDLITE_UNAUTHORIZED` from then on.
/// `*out_json` receives the user without that key.
/// `MINDLITE_NOT_FOUND` for an unknown user or a key the user does not have,
/// `MINDLITE_FORBIDDEN` on a user's handle.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_api_key_revoke(
    db: *const Database,
    user: *const c_char,
    key_id: u64,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let user = unsafe { boundary::text(user, "user") }?;
        let engine = db.engine();
        let user = engine.block_on(engine.revoke_api_key(user, key_id))?;
        Ok(user)
    })
}

/// Opens a handle on the same database acting as the user `api_key` belongs to: every
/// function on it sees and changes only that user's objects, one-part names resolve in the
/// user's own default project, and the user's plan quotas apply. `MINDLITE_UNAUTHORIZED` for an unknown or revoked key, `MINDLITE_FORBIDDEN`
/// for a disabled user's key; the message is on `db`.
///
/// - `out_db`: receives the new handle, or NULL on failure.
///
/// Ownership: the caller owns the new handle and closes it with `mindlite_close`, independently
/// of `db`: the database stays open until both are closed.
#[no_mangle]
pub unsafe extern "C" fn mindlite_open_as_user(
    db: *const Database,
    api_key: *const c_char,
    out_db: *mut *mut Database,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_db) };
    with_database(db, |db| {
        let out_db = out(out_db, "out_db")?;
        // SAFETY: a NUL-terminated string, per the header.
        let api_key = unsafe { boundary::text(api_key, "api_key") }?;
        *out_db = database::register(db.engine().as_user(api_key)?);
        Ok(())
    })
}

/// The plan, quotas and usage of the user `db` acts as (a handle from
/// `mindlite_open_as_user`): `{"plan", "minds": {"limit", "used", "remaining"}, "datasources":
/// {…}, "questions": {"limit", "used", "remaining", "window_secs", "resets_at"}, "callbacks"}`.
/// `MINDLITE_NOT_FOUND` on a handle that is not a user's.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_limits(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().limits()?))
}
