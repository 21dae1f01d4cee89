//! What every exported function does at the border: check pointers and text from C, catch
//! panics, map engine errors to status codes, keep the last error message for `*_errmsg`, and
//! hand strings to C.

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};

use mindlite::ErrorKind;

use crate::{
    MINDLITE_CONFLICT, MINDLITE_ERROR, MINDLITE_FORBIDDEN, MINDLITE_INVALID, MINDLITE_MISUSE,
    MINDLITE_NOT_FOUND, MINDLITE_OK, MINDLITE_QUOTA_EXCEEDED, MINDLITE_UNAUTHORIZED,
    MINDLITE_UNAVAILABLE, MINDLITE_UPSTREAM,
};

/// A status code: `MINDLITE_OK` (0) or why a call failed (the `MINDLITE_*` constants).
pub type Status = i32;

/// A failed call: the status to return and the message `*_errmsg` gives.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: Status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn misuse(message: impl Into<String>) -> Failure {
        Failure::new(MINDLITE_MISUSE, message)
    }
}

impl From<mindlite::Error> for Failure {
    fn from(err: mindlite::Error) -> Failure {
        let status = match err.kind() {
            ErrorKind::InvalidInput | ErrorKind::InvalidData | ErrorKind::ConstraintViolation => {
                MINDLITE_INVALID
            }
            ErrorKind::Unauthorized => MINDLITE_UNAUTHORIZED,
            ErrorKind::Forbidden => MINDLITE_FORBIDDEN,
            ErrorKind::NotFound => MINDLITE_NOT_FOUND,
            ErrorKind::Conflict => MINDLITE_CONFLICT,
            ErrorKind::QuotaExceeded => MINDLITE_QUOTA_EXCEEDED,
            ErrorKind::Unavailable => MINDLITE_UNAVAILABLE,
            ErrorKind::Upstream => MINDLITE_UPSTREAM,
            ErrorKind::Internal => MINDLITE_ERROR,
        };
        Failure::new(status, err.message())
    }
}

/// Runs `body`, turning a panic into `MINDLITE_ERROR`: unwinding into C is undefined behaviour.
pub(crate) fn catch<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(Failure::new(
            MINDLITE_ERROR,
            format!("internal error in mindlite: {what}"),
        ))
    })
}

/// The status of an outcome, for functions without a handle to keep the message on.
pub(crate) fn status_of(outcome: Result<(), Failure>) -> Status {
    match outcome {
        Ok(()) => MINDLITE_OK,
        Err(failure) => failure.status,
    }
}

/// Reads a required NUL-terminated UTF-8 argument named `name` in messages.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::misuse(format!("{name} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated per the function's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| {
        Failure::new(
            MINDLITE_INVALID,
            format!(
                "{name} is not valid UTF-8 (bad byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// Like [`text`], but NULL means "not given".
///
/// # Safety
/// As for [`text`].
pub(crate) unsafe fn optional_text<'a>(
    ptr: *const c_char,
    name: &str,
) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded contract.
        unsafe { text(ptr, name) }.map(Some)
    }
}

/// Checks that an out-parameter is not NULL.
pub(crate) fn out<'a, T>(ptr: *mut T, name: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: a non-null out-parameter points to writable storage for a `T` per the header.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::misuse(format!("{name} is NULL")))
}

/// Sets an out-parameter to NULL before anything can fail, so "NULL on failure" holds even
/// for a NULL or closed handle.
///
/// # Safety
/// `ptr` is NULL or writable.
pub(crate) unsafe fn clear<T>(ptr: *mut *mut T) {
    // SAFETY: per the function's contract.
    if let Some(slot) = unsafe { ptr.as_mut() } {
        *slot = std::ptr::null_mut();
    }
}

/// Text for C. Engine text never holds NUL bytes (SQL and names arrive as C strings, JSON
/// escapes them), but a stray one is dropped rather than failing the call.
pub(crate) fn c_string(text: impl Into<Vec<u8>>) -> CString {
    CString::new(text).unwrap_or_else(|e| {
        let mut bytes = e.into_vec();
        bytes.retain(|&b| b != 0);
        CString::new(bytes).expect("NUL bytes were removed")
    })
}

/// Hands `text` to C through `out`; the caller frees it with `mindlite_free`.
pub(crate) fn give_string(out: &mut *mut c_char, text: impl Into<Vec<u8>>) {
    *out = c_string(text).into_raw();
}

/// Locks a mutex whose data stays consistent even if a holder panicked (we only replace values).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The message of the last failed call on a result or a cursor (one thread at a time uses
/// those, so one slot is enough).
#[derive(Default)]
pub(crate) struct LastError(Mutex<Option<CString>>);

impl LastError {
    /// Runs `body` with panics caught and keeps its failure message; returns the status.
    pub(crate) fn run(&self, body: impl FnOnce() -> Result<Status, Failure>) -> Status {
        match catch(body) {
            Ok(status) => {
                *lock(&self.0) = None;
                status
            }
            Err(failure) => {
                *lock(&self.0) = Some(c_string(failure.message));
                failure.status
            }
        }
    }

    /// The last message, or "not an error"; owned by the slot until the next call.
    pub(crate) fn message(&self) -> *const c_char {
        match &*lock(&self.0) {
            Some(message) => message.as_ptr(),
            None => NOT_AN_ERROR.as_ptr(),
        }
    }
}

/// What `*_errmsg` gives when the last call succeeded (SQLite's wording).
pub(crate) const NOT_AN_ERROR: &CStr = c"not an error";
