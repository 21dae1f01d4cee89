//! The C ABI of mindlite: `include/mindlite.h`, generated from this crate by cbindgen.
//!
//! A thin translator over `mindlite` (core decides, fronts translate): every function checks its
//! pointers and text, calls the engine, and maps [`mindlite::ErrorKind`] to a [`Status`]. No panic
//! crosses the boundary: [`boundary`] catches it and reports `MINDLITE_ERROR`.
//!
//! One module per handle: [`database`] (open, close, errmsg, login), [`rows`] (a materialized
//! result with typed cell access), [`cursor`] (a result streamed in a wire framing),
//! [`arrow_stream`] (a result as an Arrow C stream), [`records`] (engine records as JSON),
//! [`users`] (the hosted edition's users, API keys and limits, as JSON), [`callbacks`] (a hosted
//! user's model-status callbacks, as JSON).

// Every exported function takes raw pointers from C and checks them itself; the header states
// what each one must point to.
#![allow(clippy::missing_safety_doc)]

pub mod arrow_stream;
mod boundary;
pub mod callbacks;
pub mod cursor;
pub mod database;
pub mod jobs;
pub mod knowledge_bases;
pub mod records;
pub mod rows;
pub mod users;

use std::ffi::{c_char, CString};

/// The library's own allocations are counted toward the statements they are made for, so
/// statements keep to their memory budgets; the host program's allocations are not affected.
#[global_allocator]
static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;

pub use boundary::Status;

/// Success.
pub const MINDLITE_OK: Status = 0;
/// An internal failure: an I/O error or a bug in the library (never a crash).
pub const MINDLITE_ERROR: Status = 1;
/// The caller sent something wrong: bad SQL, an unknown name, a bad config, text that is not UTF-8.
pub const MINDLITE_INVALID: Status = 2;
/// Authentication is required or failed (a wrong password, an unknown or expired token).
pub const MINDLITE_UNAUTHORIZED: Status = 3;
/// Authenticated, but not allowed to do this.
pub const MINDLITE_FORBIDDEN: Status = 4;
/// The named object does not exist.
pub const MINDLITE_NOT_FOUND: Status = 5;
/// The object already exists, or the change conflicts with the current state.
pub const MINDLITE_CONFLICT: Status = 6;
/// A plan-tier quota would be exceeded.
pub const MINDLITE_QUOTA_EXCEEDED: Status = 7;
/// A resource is unavailable: the database file is open in another process, a datasource is down.
pub const MINDLITE_UNAVAILABLE: Status = 8;
/// The API was used wrongly: a NULL pointer where one is required, a closed database handle.
pub const MINDLITE_MISUSE: Status = 9;
/// A row or column index is out of range.
pub const MINDLITE_RANGE: Status = 10;
/// A typed getter was called on a column of another type, or the value does not fit.
pub const MINDLITE_MISMATCH: Status = 11;
/// A typed getter was called on a NULL cell; the out-parameter is set to zero.
pub const MINDLITE_NULL_VALUE: Status = 12;
/// An outside service (an agent's LLM provider) failed, refused or timed out; the message says what it said.
pub const MINDLITE_UPSTREAM: Status = 13;
/// A cursor has no more chunks (not an error).
pub const MINDLITE_DONE: Status = 100;

/// The library version as a static NUL-terminated string, like `"0.1.0"`.
///
/// Ownership: static; the caller must not free it.
#[no_mangle]
pub extern "C" fn mindlite_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Frees a string the library returned through a `char **` out-parameter (JSON text, a token,
/// an error message). `mindlite_free(NULL)` does nothing.
///
/// Ownership: takes `text`; it must come from this library and not have been freed before.
#[no_mangle]
pub unsafe extern "C" fn mindlite_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: the caller hands back a pointer made by `CString::into_raw` in this library.
        drop(unsafe { CString::from_raw(text) });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_nul_terminated() {
        let version = unsafe { std::ffi::CStr::from_ptr(super::mindlite_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
