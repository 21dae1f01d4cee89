//! The Python front of mindlite (`mindlite._native`). The pyo3 module and the pure-Python
//! package land with the Python issue; until then this crate only pins the dependency on core.

/// The version of the engine this module wraps.
pub fn engine_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
