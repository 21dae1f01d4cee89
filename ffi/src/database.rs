//! `mindlite_database`: one open engine, shared by any number of threads.
//!
//! The `mindlite_database *` C holds is not an address but a number that is never reused, the
//! key of a process-wide table of open databases; every call looks it up there and never
//! dereferences it. So a closed (or never opened) handle is detected and answered with
//! `MINDLITE_MISUSE` instead of touching freed memory or, after its address was reused, another
//! database; and closing a handle while another thread is inside a call on it is safe: the
//! engine goes away when the last call returns.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use mindlite::{Config, Engine, QueryRequest, QueryResult, ResultContext};

use crate::boundary::{self, catch, give_string, lock, out, Failure, Status, NOT_AN_ERROR};
use crate::{MINDLITE_MISUSE, MINDLITE_OK};

/// An open database. Opaque to C.
pub struct Database {
    engine: Engine,
    /// The project `USE` switched to; one-part names resolve there (the default project at first).
    current_db: Mutex<Option<String>>,
    /// The last failure of each thread on this handle, so threads do not see each other's errors.
    errors: Mutex<HashMap<ThreadId, CString>>,
    /// The knowledge-base insert progress handler and its user data (as an address).
    progress: Mutex<Option<(crate::knowledge_bases::ProgressHandler, usize)>>,
}

/// The live handles, by key.
static OPEN: Mutex<BTreeMap<usize, Arc<Database>>> = Mutex::new(BTreeMap::new());

/// The next handle key. Keys step by 16 so they look like aligned pointers to C tools, and
/// start high so no small integer or NULL-plus-offset is ever a live handle.
static NEXT_KEY: AtomicUsize = AtomicUsize::new(0x1000);

impl Database {
    /// The engine behind this handle.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs `sql` in the current project and remembers the project the result names (`USE`).
    pub(crate) fn query(&self, sql: &str) -> QueryResult {
        self.run(QueryRequest::new(sql))
    }

    /// Runs `request` in the current project and remembers the project the result names.
    pub(crate) fn run(&self, request: QueryRequest) -> QueryResult {
        let request = match lock(&self.current_db).clone() {
            Some(db) => request.with_db(db),
            None => request,
        };
        let result = self.engine.query_blocking(request);
        self.remember(&result.context);
        result
    }

    /// The progress handler set on this handle, with its user data.
    pub(crate) fn progress_handler(
        &self,
    ) -> Option<(crate::knowledge_bases::ProgressHandler, usize)> {
        *lock(&self.progress)
    }

    /// Sets (or, with `None`, removes) the progress handler.
    pub(crate) fn set_progress_handler(
        &self,
        handler: Option<(crate::knowledge_bases::ProgressHandler, usize)>,
    ) {
        *lock(&self.progress) = handler;
    }

    fn remember(&self, context: &ResultContext) {
        *lock(&self.current_db) = Some(context.db.clone());
    }

    fn record(&self, outcome: Result<(), Failure>) -> Status {
        let thread = std::thread::current().id();
        let mut errors = lock(&self.errors);
        match outcome {
            Ok(()) => {
                errors.remove(&thread);
                MINDLITE_OK
            }
            Err(failure) => {
                errors.insert(thread, boundary::c_string(failure.message));
                failure.status
            }
        }
    }
}

fn live(db: *const Database) -> Option<Arc<Database>> {
    if db.is_null() {
        return None;
    }
    lock(&OPEN).get(&(db as usize)).cloned()
}

/// Runs `body` on a live handle with panics caught, keeping its failure message for
/// `mindlite_errmsg`. A NULL or closed handle is `MINDLITE_MISUSE`.
pub(crate) fn with_database(
    db: *const Database,
    body: impl FnOnce(&Database) -> Result<(), Failure>,
) -> Status {
    match live(db) {
        Some(handle) => {
            let outcome = catch(|| body(&handle));
            handle.record(outcome)
        }
        None => MINDLITE_MISUSE,
    }
}

/// Opens (creating when missing) the database file at `path`.
///
/// - `path`: the file; its directory is created when missing. Any bytes the OS accepts.
/// - `config`: configuration as TOML or JSON text (JSON when it starts with `{`), or NULL for
///   the defaults. Unknown keys are errors. Environment variables are not read.
/// - `out_db`: receives the handle, or NULL on failure.
/// - `out_error`: may be NULL; on failure receives a message naming the file and the problem
///   (the caller frees it with `mindlite_free`), on success NULL.
///
/// Returns `MINDLITE_UNAVAILABLE` when the file is already open (in this or another process),
/// cannot be read, or has another on-disk format version; `MINDLITE_INVALID` for a bad config
/// or a file that is not a mindlite database.
///
/// Ownership: the caller owns the handle and closes it with `mindlite_close`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_open(
    path: *const c_char,
    config: *const c_char,
    out_db: *mut *mut Database,
    out_error: *mut *mut c_char,
) -> Status {
    // SAFETY: the pointers follow the header's contract.
    unsafe {
        open_with(config, out_db, out_error, |config| {
            if path.is_null() {
                return Err(Failure::misuse("path is NULL"));
            }
            let bytes = CStr::from_ptr(path).to_bytes();
            // Unix paths are bytes; elsewhere they must be UTF-8.
            #[cfg(unix)]
            let path = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes);
            #[cfg(not(unix))]
            let path = std::str::from_utf8(bytes)
                .map_err(|_| Failure::new(crate::MINDLITE_INVALID, "path is not valid UTF-8"))?;
            Ok(Engine::open(path, config)?)
        })
    }
}

/// Opens a fresh database in memory; it is gone when closed.
///
/// Arguments, status and ownership as for `mindlite_open`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_open_in_memory(
    config: *const c_char,
    out_db: *mut *mut Database,
    out_error: *mut *mut c_char,
) -> Status {
    // SAFETY: the pointers follow the header's contract.
    unsafe {
        open_with(config, out_db, out_error, |config| {
            Ok(Engine::open_in_memory(config)?)
        })
    }
}

unsafe fn open_with(
    config: *const c_char,
    out_db: *mut *mut Database,
    out_error: *mut *mut c_char,
    open: impl FnOnce(Config) -> Result<Engine, Failure>,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    if let Some(slot) = unsafe { out_error.as_mut() } {
        *slot = std::ptr::null_mut();
    }
    let outcome = catch(|| {
        let out_db = out(out_db, "out_db")?;
        *out_db = std::ptr::null_mut();
        // SAFETY: NULL or a NUL-terminated string, per the header.
        let config = match unsafe { boundary::optional_text(config, "config") }? {
            Some(text) => Config::parse(text)?,
            None => Config::default(),
        };
        *out_db = register(open(config)?);
        Ok(())
    });
    if let Err(failure) = &outcome {
        // SAFETY: as above.
        if let Some(slot) = unsafe { out_error.as_mut() } {
            give_string(slot, failure.message.clone());
        }
    }
    boundary::status_of(outcome)
}

/// Puts `engine` behind a new handle, which the caller closes with `mindlite_close`.
pub(crate) fn register(engine: Engine) -> *mut Database {
    let handle = Arc::new(Database {
        engine,
        current_db: Mutex::new(None),
        errors: Mutex::new(HashMap::new()),
        progress: Mutex::new(None),
    });
    let key = NEXT_KEY.fetch_add(16, Ordering::Relaxed);
    lock(&OPEN).insert(key, handle);
    key as *mut Database
}

/// Closes a database handle. `mindlite_close(NULL)` does nothing and returns `MINDLITE_OK`;
/// closing a handle twice returns `MINDLITE_MISUSE`.
///
/// Results and cursors made from the handle stay usable and keep the file open until they are
/// freed. A call running on another thread finishes first; the handle must not be used after.
///
/// Ownership: takes the handle.
#[no_mangle]
pub extern "C" fn mindlite_close(db: *mut Database) -> Status {
    if db.is_null() {
        return MINDLITE_OK;
    }
    let closed = catch(|| Ok(lock(&OPEN).remove(&(db as usize))));
    match closed {
        // Dropped here, outside the table's lock: shutting an engine down takes a moment.
        Ok(Some(handle)) => {
            drop(handle);
            MINDLITE_OK
        }
        Ok(None) => MINDLITE_MISUSE,
        Err(failure) => failure.status,
    }
}

/// Stops every statement running on `db` at its next chance, whichever thread started it, as
/// `sqlite3_interrupt` does: each call running one returns `MINDLITE_UNAVAILABLE` with "The
/// statement was interrupted" (a cursor's next `mindlite_cursor_next` too), and a write that
/// had not committed writes nothing. Statements started after this returns run normally.
/// Call it from another thread than the one waiting (not from a signal handler).
#[no_mangle]
pub extern "C" fn mindlite_interrupt(db: *const Database) -> Status {
    with_database(db, |db| {
        db.engine.interrupt();
        Ok(())
    })
}

/// The message of the last failed call this thread made on `db`, as UTF-8 text; "not an error"
/// when the last call succeeded. Never NULL.
///
/// Ownership: owned by the handle; valid until this thread's next call on `db` or until `db` is
/// closed. For a NULL or closed handle, a static message saying so.
#[no_mangle]
pub extern "C" fn mindlite_errmsg(db: *const Database) -> *const c_char {
    if db.is_null() {
        return c"the database handle is NULL".as_ptr();
    }
    let Some(handle) = live(db) else {
        return c"the database handle is closed or was never opened".as_ptr();
    };
    let errors = lock(&handle.errors);
    match errors.get(&std::thread::current().id()) {
        // The CString's bytes stay put until this thread replaces its entry.
        Some(message) => message.as_ptr(),
        None => NOT_AN_ERROR.as_ptr(),
    }
}

/// Checks a username and password against the configured ones (`[auth]` in the config) and
/// issues a bearer token.
///
/// - `username`, `password`: NUL-terminated UTF-8; NULL counts as missing (`MINDLITE_INVALID`).
/// - `out_token`: receives the token; the caller frees it with `mindlite_free`.
/// - `out_expires_at`: may be NULL; receives the expiry as Unix seconds.
///
/// Returns `MINDLITE_UNAUTHORIZED` for wrong credentials.
#[no_mangle]
pub unsafe extern "C" fn mindlite_login(
    db: *const Database,
    username: *const c_char,
    password: *const c_char,
    out_token: *mut *mut c_char,
    out_expires_at: *mut u64,
) -> Status {
    // SAFETY: NULL or writable, per the header.
    unsafe { boundary::clear(out_token) };
    with_database(db, |db| {
        let out_token = out(out_token, "out_token")?;
        // SAFETY: NULL or NUL-terminated strings, per the header.
        let (username, password) = unsafe {
            (
                boundary::optional_text(username, "username")?,
                boundary::optional_text(password, "password")?,
            )
        };
        let token = db.engine.block_on(db.engine.login(username, password))?;
        // SAFETY: NULL or writable, per the header.
        if let Some(expires) = unsafe { out_expires_at.as_mut() } {
            *expires = token.expires_at;
        }
        give_string(out_token, token.token);
        Ok(())
    })
}

/// Checks a bearer token: `MINDLITE_OK` when it is live, `MINDLITE_UNAUTHORIZED` when it is
/// unknown, revoked or expired.
#[no_mangle]
pub unsafe extern "C" fn mindlite_verify(db: *const Database, token: *const c_char) -> Status {
    with_database(db, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let token = unsafe { boundary::text(token, "token") }?;
        db.engine.verify_token(token)?;
        Ok(())
    })
}

/// Revokes a bearer token. `out_was_live` (may be NULL) receives whether it was live; revoking
/// an unknown token is not an error.
#[no_mangle]
pub unsafe extern "C" fn mindlite_logout(
    db: *const Database,
    token: *const c_char,
    out_was_live: *mut bool,
) -> Status {
    with_database(db, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let token = unsafe { boundary::text(token, "token") }?;
        let was_live = db.engine.block_on(db.engine.logout(token))?;
        // SAFETY: NULL or writable, per the header.
        if let Some(slot) = unsafe { out_was_live.as_mut() } {
            *slot = was_live;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MINDLITE_UNAUTHORIZED;

    #[test]
    fn closed_handles_are_detected_without_touching_them() {
        let mut db = std::ptr::null_mut();
        let status =
            unsafe { mindlite_open_in_memory(std::ptr::null(), &mut db, std::ptr::null_mut()) };
        assert_eq!(status, MINDLITE_OK);
        assert_eq!(mindlite_close(db), MINDLITE_OK);
        assert_eq!(mindlite_close(db), MINDLITE_MISUSE);
        let message = unsafe { CStr::from_ptr(mindlite_errmsg(db)) };
        assert!(message.to_str().unwrap().contains("closed"));
        assert_eq!(
            unsafe { mindlite_verify(db, c"x".as_ptr()) },
            MINDLITE_MISUSE
        );
    }

    #[test]
    fn wrong_credentials_are_unauthorized() {
        let config = c"[auth]\nusername = \"admin\"\npassword = \"secret\"";
        let mut db = std::ptr::null_mut();
        let status =
            unsafe { mindlite_open_in_memory(config.as_ptr(), &mut db, std::ptr::null_mut()) };
        assert_eq!(status, MINDLITE_OK);
        let mut token = std::ptr::null_mut();
        let status = unsafe {
            mindlite_login(
                db,
                c"admin".as_ptr(),
                c"nope".as_ptr(),
                &mut token,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(status, MINDLITE_UNAUTHORIZED);
        assert!(token.is_null());
        mindlite_close(db);
    }
}
