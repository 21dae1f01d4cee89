//! Explicit transactions: `BEGIN` … `COMMIT` | `ROLLBACK`, and `SAVEPOINT` / `RELEASE` /
//! `ROLLBACK TO` inside them, for the one connection a local engine is.
//!
//! A transaction holds the writer lock from BEGIN to its end, so nothing else commits in
//! between (training jobs and other detached writers wait). Its statements still commit one by
//! one, each all or nothing, but non-durably: they are visible to the connection's own reads
//! at once and gone after a crash, until COMMIT makes them all durable with one durable commit.
//! ROLLBACK restores the redb savepoint taken at BEGIN. A statement that fails inside a
//! transaction undoes itself and aborts the transaction, as DuckDB's (and PostgreSQL's) do:
//! every later statement and COMMIT fail until ROLLBACK (or ROLLBACK TO a savepoint taken
//! before the failure); SQLite would let the transaction go on. Closing the store with a transaction open
//! rolls it back: redb would otherwise make pending non-durable commits durable when it closes.
//!
//! Rolling back makes sequence values and chunk ids be handed out again, so the chunk cache,
//! which trusts a chunk id to name the same bytes forever, is emptied.

use std::sync::Arc;

use redb::Savepoint;

use super::explicit::{Step, Transaction};
use super::Store;
use crate::error::{Error, Result};

fn aborted_error(message: &str) -> Error {
    Error::invalid(format!(
        "Current transaction is aborted by an earlier error ({message}); ROLLBACK to end it"
    ))
}

fn no_transaction(what: &str) -> Error {
    Error::invalid(format!("cannot {what} - no transaction is active"))
}

impl Store {
    /// Runs one transaction step. BEGIN waits for writes in progress to finish.
    pub(crate) async fn transaction_step(self: &Arc<Self>, step: Step) -> Result<()> {
        if step == Step::Begin {
            if self.in_transaction() {
                return Err(Error::invalid(
                    "cannot start a transaction within a transaction",
                ));
            }
            let user = crate::memory::current().parent_key();
            let lock = Arc::clone(&self.write_lock).lock(user).await;
            let store = Arc::clone(self);
            return blocking(move || {
                // Taken in a write transaction that changes nothing: a savepoint must come
                // before any change of the transaction that takes it.
                let mut txn = store.db.begin_write()?;
                let begin = txn.ephemeral_savepoint()?;
                txn.set_durability(redb::Durability::None)
                    .map_err(|e| Error::internal(e.to_string()))?;
                txn.commit()?;
                *store.transaction.lock() = Some(Transaction {
                    _lock: lock,
                    begin,
                    named: Vec::new(),
                    statements: Arc::new(tokio::sync::Mutex::new(())),
                    aborted: None,
                });
                Ok(())
            })
            .await;
        }
        let what = match &step {
            Step::Commit => "commit",
            Step::Rollback | Step::RollbackTo(_) => "rollback",
            Step::Savepoint(_) => "create a savepoint",
            Step::Release(_) => "release a savepoint",
            Step::Begin => unreachable!("handled above"),
        };
        let statements = self.statements_turn().ok_or_else(|| no_transaction(what))?;
        // Statements in flight on other threads finish first.
        let turn = Arc::clone(&statements).lock_owned().await;
        let store = Arc::clone(self);
        blocking(move || {
            let _turn = turn;
            let mut slot = store.transaction.lock();
            let open = slot
                .as_mut()
                .filter(|open| Arc::ptr_eq(&open.statements, &statements))
                .ok_or_else(|| no_transaction(what))?;
            match step {
                Step::Begin => unreachable!("handled above"),
                Step::Commit if open.aborted.is_some() => {
                    return Err(aborted_error(open.aborted.as_deref().unwrap_or_default()));
                }
                Step::Commit => {
                    // One durable commit makes every non-durable one before it durable.
                    store.db.begin_write()?.commit()?;
                    *slot = None;
                }
                Step::Rollback => {
                    store.restore(&open.begin)?;
                    *slot = None;
                }
                Step::Savepoint(_) if open.aborted.is_some() => {
                    return Err(aborted_error(open.aborted.as_deref().unwrap_or_default()));
                }
                Step::Savepoint(name) => {
                    let txn = store.db.begin_write()?;
                    let savepoint = txn.ephemeral_savepoint()?;
                    txn.abort()?;
                    open.named.push((name, savepoint));
                }
                Step::Release(ref name) | Step::RollbackTo(ref name) => {
                    let at = open
                        .named
                        .iter()
                        .rposition(|(n, _)| n.eq_ignore_ascii_case(name))
                        .ok_or_else(|| Error::not_found(format!("no such savepoint: {name}")))?;
                    if let Step::RollbackTo(_) = step {
                        store.restore(&open.named[at].1)?;
                        open.named.truncate(at + 1);
                        // Back before the failure: the transaction may go on (PostgreSQL's rule).
                        open.aborted = None;
                    } else {
                        open.named.truncate(at);
                    }
                }
            }
            Ok(())
        })
        .await
    }

    /// Marks the open transaction aborted by a statement that failed with `message`; nothing
    /// without one.
    pub(crate) fn abort_transaction(&self, message: &str) {
        if let Some(open) = self.transaction.lock().as_mut() {
            open.aborted.get_or_insert_with(|| message.to_string());
        }
    }

    /// Fails when the open transaction was aborted by a failed statement: only ROLLBACK (or
    /// ROLLBACK TO a savepoint) may run then.
    pub(crate) fn check_not_aborted(&self) -> Result<()> {
        match self
            .transaction
            .lock()
            .as_ref()
            .and_then(|open| open.aborted.as_deref())
        {
            Some(message) => Err(aborted_error(message)),
            None => Ok(()),
        }
    }

    /// Puts the database back as it was at `savepoint`, durably.
    fn restore(&self, savepoint: &Savepoint) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.restore_savepoint(savepoint)?;
        txn.commit()?;
        self.chunk_cache.clear();
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Rolls an open transaction back (when the store closes). A failure (an I/O error) is
    /// dropped: nobody is left to tell.
    fn roll_back_on_close(&self) {
        let Some(open) = self.transaction.lock().take() else {
            return;
        };
        let _ = self.restore(&open.begin);
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.roll_back_on_close();
    }
}

/// Runs `f` on a blocking thread (commits wait for the disk).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    crate::memory::spawn_blocking_unshared(f)
        .await
        .map_err(|e| Error::internal(format!("transaction task failed: {e}")))?
}
