//! What an explicit transaction is while it is open, and the steps SQL names (`BEGIN`,
//! `COMMIT`, `SAVEPOINT` …); `transaction` runs them.

use std::sync::Arc;

use redb::Savepoint;

/// The open transaction's state, kept by the store.
pub(super) struct Transaction {
    /// The writer lock, from BEGIN until the transaction ends.
    pub(super) _lock: super::turns::TurnGuard,
    /// The database as it was at BEGIN.
    pub(super) begin: Savepoint,
    /// `SAVEPOINT name`s, oldest first: the database as it was when each was taken.
    pub(super) named: Vec<(String, Savepoint)>,
    /// Statements inside the transaction take turns on this (threads may share a connection).
    pub(super) statements: Arc<tokio::sync::Mutex<()>>,
    /// The message of the statement that failed and so aborted the transaction, if one did.
    pub(super) aborted: Option<String>,
}

/// A step of an explicit transaction, as SQL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` (the whole transaction).
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`: forgets it and the savepoints taken after it.
    Release(String),
    /// `ROLLBACK TO [SAVEPOINT] name`: undoes what came after it, keeping it.
    RollbackTo(String),
}
