//! `mindlite._native`: the private extension module under the `mindlite` Python package. It only
//! converts types; the engine decides. The DB-API connection and results land with the Python
//! issue; until then the module reports the engine version it wraps.

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
