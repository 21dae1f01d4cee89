//! The one error type of mindlite. Every front maps [`ErrorKind`] to its own convention
//! (an HTTP status, a C status code, a Python exception class); the message is for people.

use std::fmt;

/// What kind of failure an [`Error`] is, so a front can choose its status code without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller sent something wrong: bad SQL, an unknown name, a bad parameter, a bad config.
    InvalidInput,
    /// A value does not fit where it goes: a failed cast, an overflow, a division by zero.
    InvalidData,
    /// A change would break a table's constraint (a NULL in a NOT NULL column).
    ConstraintViolation,
    /// Authentication is required or failed.
    Unauthorized,
    /// Authenticated, but not allowed to do this.
    Forbidden,
    /// The named object does not exist.
    NotFound,
    /// The object already exists, or the change conflicts with the current state.
    Conflict,
    /// A plan-tier quota would be exceeded.
    QuotaExceeded,
    /// A resource is unavailable: the database file is locked, a datasource is down.
    Unavailable,
    /// An outside service the request depends on (an LLM provider) failed, refused or timed
    /// out; the message carries what it said.
    Upstream,
    /// A bug or an I/O failure inside the engine.
    Internal,
}

/// An error with a kind and a message that names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// Seconds until a windowed quota resets ([`ErrorKind::QuotaExceeded`] only).
    retry_after: Option<u64>,
    /// What kind of object a NotFound or Conflict error is about, when the engine knows.
    subject: Option<Subject>,
    /// A refusal for the tenant's stored bytes: what its DROPs left counts until swept, so
    /// the refusal may not stand once that is gone (see [`Error::for_storage`]).
    storage: bool,
}

/// The kind of object a [`ErrorKind::NotFound`] or [`ErrorKind::Conflict`] error is about, so
/// a front can title it ("Project not found", "Agent already exists") without asking again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A project (a database of the engine's own).
    Project,
    /// An agent.
    Agent,
    /// A model or one of its versions.
    Model,
    /// A knowledge base.
    KnowledgeBase,
    /// A database: a project, a datasource or a system database.
    Database,
    /// A table of a database.
    Table,
    /// A view.
    View,
    /// A model engine (handler) a model or ML engine names.
    MlHandler,
    /// A job.
    Job,
}

impl Subject {
    /// The name a title uses: "Project", "Agent", "Model", "Knowledge Base", "Database",
    /// "Table", "View", "ML handler", "Job".
    pub fn name(self) -> &'static str {
        match self {
            Subject::Project => "Project",
            Subject::Agent => "Agent",
            Subject::Model => "Model",
            Subject::KnowledgeBase => "Knowledge Base",
            Subject::Database => "Database",
            Subject::Table => "Table",
            Subject::View => "View",
            Subject::MlHandler => "ML handler",
            Subject::Job => "Job",
        }
    }
}

/// The text a panic was raised with.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// `Result` with mindlite's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            retry_after: None,
            subject: None,
            storage: false,
        }
    }

    /// A [`ErrorKind::QuotaExceeded`] error for a quota that frees up in `seconds` (HTTP's
    /// `Retry-After`).
    pub fn quota_exceeded(message: impl Into<String>, retry_after: Option<u64>) -> Self {
        Error {
            retry_after,
            ..Self::new(ErrorKind::QuotaExceeded, message)
        }
    }

    /// For a windowed quota, the seconds until it resets.
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Shorthand for [`ErrorKind::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// This error, about a `subject`.
    pub fn about(self, subject: Subject) -> Self {
        Error {
            subject: Some(subject),
            ..self
        }
    }

    /// What kind of object the error is about, when the engine knows.
    pub fn subject(&self) -> Option<Subject> {
        self.subject
    }

    /// This error, a refusal for the tenant's stored bytes (a statement refused so may run
    /// again once what its user dropped is swept).
    pub(crate) fn for_storage(self) -> Self {
        Error {
            storage: true,
            ..self
        }
    }

    /// Whether this is a refusal [`Error::for_storage`].
    pub(crate) fn refused_for_storage(&self) -> bool {
        self.storage
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(err: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as E;
        // Unwrap DataFusion's context layers so the message names the real problem.
        match err.find_root() {
            E::External(inner) => match inner.downcast_ref::<Error>() {
                Some(ours) => ours.clone(),
                None => Error::internal(inner.to_string()),
            },
            E::ArrowError(inner, _) => arrow_error(inner),
            E::IoError(inner) => {
                ours_in(inner).unwrap_or_else(|| Error::internal(inner.to_string()))
            }
            E::ResourcesExhausted(msg) => Error::new(
                ErrorKind::Unavailable,
                format!("Resources exhausted: {msg}"),
            ),
            E::Internal(msg) => Error::internal(msg.clone()),
            E::Execution(msg) => Error::invalid(msg.clone()),
            E::Plan(msg) | E::Configuration(msg) | E::NotImplemented(msg) => {
                Error::invalid(msg.clone())
            }
            E::SchemaError(inner, _) => Error::invalid(inner.to_string()),
            E::SQL(inner, _) => Error::invalid(inner.to_string()),
            other => Error::invalid(other.to_string()),
        }
    }
}

impl From<Error> for datafusion::error::DataFusionError {
    fn from(err: Error) -> Self {
        datafusion::error::DataFusionError::External(Box::new(err))
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(err: datafusion::arrow::error::ArrowError) -> Self {
        arrow_error(&err)
    }
}

/// Arrow's error as ours: the one it carries from a writer of ours, else by its kind.
fn arrow_error(err: &datafusion::arrow::error::ArrowError) -> Error {
    let carried = match err {
        datafusion::arrow::error::ArrowError::IoError(_, io) => ours_in(io),
        _ => None,
    };
    carried.unwrap_or_else(|| Error::new(arrow_kind(err), err.to_string()))
}

/// Our error carried inside an I/O error (a temporary file's writer refusing bytes over a
/// limit, see `spill`), if it is one.
pub(crate) fn ours_in(io: &std::io::Error) -> Option<Error> {
    io.get_ref()?.downcast_ref::<Error>().cloned()
}

/// Arrow's errors about values (not about plans or schemas) are [`ErrorKind::InvalidData`].
fn arrow_kind(err: &datafusion::arrow::error::ArrowError) -> ErrorKind {
    use datafusion::arrow::error::ArrowError as A;
    match err {
        A::CastError(_) | A::ParseError(_) | A::DivideByZero | A::ArithmeticOverflow(_) => {
            ErrorKind::InvalidData
        }
        // How Arrow refuses a batch with a NULL in a non-nullable column (an INSERT of NULL
        // into a NOT NULL column fails there, before the table writer sees it).
        A::InvalidArgumentError(m) if m.contains("non-nullable but contains null") => {
            ErrorKind::ConstraintViolation
        }
        _ => ErrorKind::InvalidInput,
    }
}

/// Storage failures are internal: they mean the disk or the file, not the caller, is at fault.
macro_rules! storage_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(err: $t) -> Self {
                Error::internal(format!("storage: {err}"))
            }
        }
    )*};
}
storage_error!(
    redb::Error,
    redb::StorageError,
    redb::TransactionError,
    redb::TableError,
    redb::CommitError,
    redb::SavepointError
);

/// A kernel refusing its input is the caller's fault; damaged index pages are the file's.
impl From<mindlite_vectors::Error> for Error {
    fn from(err: mindlite_vectors::Error) -> Self {
        match err {
            mindlite_vectors::Error::Invalid(message) => Error::invalid(message),
            mindlite_vectors::Error::Corrupt(message) => Error::internal(message),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::internal(format!("corrupt catalog record: {err}"))
    }
}
