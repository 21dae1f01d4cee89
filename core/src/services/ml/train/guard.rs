//! Fits and predictions of the crates the trainer uses, guarded: user data must never panic
//! the engine.

use std::panic::{self, AssertUnwindSafe};

/// smartcore and forust assert on some inputs instead of returning `Err`; user data must never
/// panic the engine.
/// (Our own linear fits do not panic, but the line search of smartcore's L-BFGS they use does
/// when it cannot converge.)
pub(super) fn guarded<T, E: std::fmt::Display>(
    what: &str,
    run: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    match panic::catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} failed on this data")),
    }
}
