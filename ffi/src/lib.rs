//! The C ABI of mindlite. This crate is a thin translator over `mindlite` (core decides,
//! fronts translate); the full API lands with the C ABI issue, `include/mindlite.h` with it.

use std::ffi::c_char;

/// The library version as a static NUL-terminated string. The caller must not free it.
#[no_mangle]
pub extern "C" fn mindlite_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_nul_terminated() {
        let version = unsafe { std::ffi::CStr::from_ptr(super::mindlite_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
