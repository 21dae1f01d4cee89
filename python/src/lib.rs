//! `mindlite._native`: the private extension module under the `mindlite` Python package. It
//! only converts types and maps errors; the engine decides. The pure-Python package builds the
//! DB-API 2.0 connection, cursors and results on top of `Database` and `Query`.

mod convert;
mod database;
mod query;

/// The module's own allocations are counted toward the statements they are made for, so
/// statements keep to their memory budgets; Python's allocations are not affected.
#[global_allocator]
static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;

use std::future::Future;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use mindlite::{Engine, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    mindlite,
    Warning,
    PyException,
    "PEP 249: important warnings."
);
create_exception!(
    mindlite,
    Error,
    PyException,
    "PEP 249: the base of mindlite's errors."
);
create_exception!(
    mindlite,
    InterfaceError,
    Error,
    "Misuse of the interface: a closed connection, a parameter of an unsupported type."
);
create_exception!(
    mindlite,
    DatabaseError,
    Error,
    "An error the engine reported."
);
create_exception!(
    mindlite,
    DataError,
    DatabaseError,
    "A value does not fit: a failed cast, an overflow, a division by zero."
);
create_exception!(
    mindlite,
    OperationalError,
    DatabaseError,
    "The database is unavailable: the file is locked, a provider failed; its subclasses: a key, a permission or a quota refuses."
);
create_exception!(
    mindlite,
    UnauthorizedError,
    OperationalError,
    "Hosted edition: the API key is unknown or revoked."
);
create_exception!(
    mindlite,
    ForbiddenError,
    OperationalError,
    "Hosted edition: not allowed: the user is disabled, or a user's connection administers users."
);
create_exception!(
    mindlite,
    QuotaExceededError,
    OperationalError,
    "Hosted edition: the user's plan allows no more (minds, datasources, questions)."
);
create_exception!(
    mindlite,
    IntegrityError,
    DatabaseError,
    "A change would break a constraint (a NULL in a NOT NULL column)."
);
create_exception!(
    mindlite,
    InternalError,
    DatabaseError,
    "A bug or an I/O failure inside the engine."
);
create_exception!(
    mindlite,
    ProgrammingError,
    DatabaseError,
    "Bad SQL, an unknown table or parameter, an object that already exists."
);
create_exception!(
    mindlite,
    NotSupportedError,
    DatabaseError,
    "The operation is not supported (rollback: every statement commits on its own)."
);

/// The Python exception for an engine error: the class from its kind, the engine's message.
pub(crate) fn to_py(err: mindlite::Error) -> PyErr {
    let message = err.message().to_string();
    match err.kind() {
        ErrorKind::InvalidInput | ErrorKind::NotFound | ErrorKind::Conflict => {
            ProgrammingError::new_err(message)
        }
        ErrorKind::InvalidData => DataError::new_err(message),
        ErrorKind::ConstraintViolation => IntegrityError::new_err(message),
        ErrorKind::Unauthorized => UnauthorizedError::new_err(message),
        ErrorKind::Forbidden => ForbiddenError::new_err(message),
        ErrorKind::QuotaExceeded => QuotaExceededError::new_err(message),
        ErrorKind::Unavailable | ErrorKind::Upstream => OperationalError::new_err(message),
        ErrorKind::Internal => InternalError::new_err(message),
    }
}

/// An error on its way to Python: the engine's, raised as the class its kind maps to
/// ([`to_py`]), or one Python raised already. Methods return [`Fallible`], so `?` takes both.
pub(crate) struct Failure(PyErr);

impl From<mindlite::Error> for Failure {
    fn from(err: mindlite::Error) -> Failure {
        Failure(to_py(err))
    }
}

impl From<PyErr> for Failure {
    fn from(err: PyErr) -> Failure {
        Failure(err)
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> PyErr {
        failure.0
    }
}

/// What a method returns to Python.
pub(crate) type Fallible<T> = Result<T, Failure>;

/// How often a waiting call looks for a pending KeyboardInterrupt.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs `future` as a task on the engine's runtime and waits for it with the GIL released, so
/// other Python threads run meanwhile. Every [`SIGNAL_CHECK`] it takes the GIL back to run
/// pending signal handlers: a KeyboardInterrupt raises here and aborts the task, which drops
/// (and so cancels) the query at its next yield.
///
/// The wait is a plain channel receive with a timeout, not a tokio timer: the runtime's timers
/// only fire when a worker thread parks, and a busy query keeps every worker busy.
pub(crate) fn wait<F>(py: Python<'_>, engine: &Engine, future: F) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (done, outcome) = std::sync::mpsc::sync_channel(1);
    let task = engine.spawn(async move {
        // The receiver is gone only when the caller gave up (an interrupt).
        let _ = done.send(future.await);
    });
    let mut outcome = Some(outcome);
    loop {
        // Moved into the GIL-free closure and back: a receiver is `Send` but not `Sync`.
        let receiver = outcome
            .take()
            .expect("the receiver is put back after every wait");
        let (received, receiver) = py.detach(move || {
            let received = receiver.recv_timeout(SIGNAL_CHECK);
            (received, receiver)
        });
        outcome = Some(receiver);
        match received {
            Ok(output) => return Ok(output),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    task.abort();
                    return Err(interrupt);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The task ended without sending: it panicked. Its join error says how.
                let failed = py.detach(|| engine.block_on(task)).err();
                let why = failed.map_or_else(|| "task ended".to_string(), |e| e.to_string());
                return Err(InternalError::new_err(format!(
                    "internal error in mindlite: {why}"
                )));
            }
        }
    }
}

/// The native module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<database::Database>()?;
    module.add_class::<query::Query>()?;
    module.add("Warning", py.get_type::<Warning>())?;
    module.add("Error", py.get_type::<Error>())?;
    module.add("InterfaceError", py.get_type::<InterfaceError>())?;
    module.add("DatabaseError", py.get_type::<DatabaseError>())?;
    module.add("DataError", py.get_type::<DataError>())?;
    module.add("OperationalError", py.get_type::<OperationalError>())?;
    module.add("UnauthorizedError", py.get_type::<UnauthorizedError>())?;
    module.add("ForbiddenError", py.get_type::<ForbiddenError>())?;
    module.add("QuotaExceededError", py.get_type::<QuotaExceededError>())?;
    module.add("IntegrityError", py.get_type::<IntegrityError>())?;
    module.add("InternalError", py.get_type::<InternalError>())?;
    module.add("ProgrammingError", py.get_type::<ProgrammingError>())?;
    module.add("NotSupportedError", py.get_type::<NotSupportedError>())?;
    Ok(())
}
