//! The write job: what one write statement stages its rows in, on its blocking thread, and
//! how it takes the writer lock when it is ready to commit.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard};
use tokio_util::sync::CancellationToken;

use super::constraints::Checks;
use crate::catalog::namespace::{FILES_DB, SYSTEM_DB};
use crate::catalog::tables::{self, StagedRows, TableRecord};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::sql::catalog::snapshot::{Namespace, Snapshot};
use crate::sql::planning::session::Session;
use crate::store::{Store, WriteGuard, WriteLock};
use crate::tenant::TenantId;

/// Everything a write needs on its blocking thread.
pub(crate) struct WriteJob {
    pub(crate) store: Arc<Store>,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) state: Session,
    pub(crate) tenant: TenantId,
    pub(crate) db: String,
    /// Cancelled when the caller stops waiting (a cancelled query): the write stops, even in
    /// the middle of computing a batch, and aborts.
    pub(crate) cancelled: CancellationToken,
    /// The writer lock, when it was taken before the snapshot (a write that must not
    /// conflict); otherwise [`WriteJob::lock`] takes it when the write is ready to commit.
    pub(crate) held: Mutex<Option<WriteLock>>,
    /// The statement's claim on the table it writes, taken before its snapshot and held for
    /// as long as the write runs: shared, or sole when it runs again (`None` for a write whose
    /// target its text does not name).
    pub(crate) _claim: Option<Claim>,
    /// Whether no other statement can change the target while this one computes its change:
    /// it held the writer lock or was its table's sole writer from before its snapshot.
    pub(crate) owns_target: bool,
    /// Whether a rewrite may land ahead of its commit (see `land_rewrite`): not when the
    /// statement holds the writer lock from its start, nor inside an explicit transaction.
    pub(crate) may_land: bool,
    /// Whether the statement runs inside an explicit transaction: its writes join it. One begun
    /// outside never joins a transaction begun meanwhile (whose ROLLBACK would undo a part of
    /// it): each of its writes waits for the transaction to end.
    pub(crate) in_transaction: bool,
    /// Bytes of staged rows kept in memory before a temporary file is used.
    pub(crate) staging_memory: usize,
}

/// A statement's claim on the table it writes (one of the store's object locks), held until
/// the statement ends. Writers of a table share it while they compute and commit their
/// changes; a statement that lost its table to other writes too often runs again as its sole
/// writer: it then computes from a snapshot that no other write of the table can change, so it
/// commits at once, and meanwhile every other table can be written (it does not hold the
/// writer lock while it computes, which would stop every tenant's writes for as long).
/// Correctness never rests on claims: a write still checks that its target is as it was read.
/// One claim a statement, taken before its snapshot and before the writer lock, so claimants
/// never wait for each other round a circle; a write whose target its text does not name takes
/// none (a sole writer can then be overtaken by it, and runs once more holding the writer lock).
pub(crate) enum Claim {
    /// With the table's other writers (the guard is held for its drop).
    Shared { _guard: OwnedRwLockReadGuard<()> },
    /// The table's only writer.
    Sole { _guard: OwnedRwLockWriteGuard<()> },
}

/// The key of the table `project.name`'s claims among the store's object locks.
pub(crate) fn table_key(tenant: TenantId, project: &str, name: &str) -> String {
    format!("table {} {project}.{name}", tenant.0)
}

/// What a staged write came to: done, or to be run again under the lock because another
/// write changed its target after it was read.
pub(crate) enum Staged<T> {
    Done(T),
    TargetChanged,
}

impl WriteJob {
    /// Runs `f` on a blocking thread; async pieces inside use `Handle::block_on`. `f` takes
    /// the writer lock with [`WriteJob::lock`] when it is ready to commit, and commits;
    /// dropping the guard aborts.
    pub(crate) async fn run<T: Send + 'static>(
        self,
        f: impl FnOnce(&WriteJob, &Handle) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        /// Cancels the write when the waiting future is dropped before it finished.
        struct CancelOnDrop(Option<CancellationToken>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                if let Some(token) = &self.0 {
                    token.cancel();
                }
            }
        }
        let handle = Handle::current();
        let mut cancel = CancelOnDrop(Some(self.cancelled.clone()));
        // A write computes in its user's share of the blocking threads, and waits outside it
        // (`memory::wait`, and the writer lock gives its place up); one that holds the writer
        // lock from its start cannot wait for a place.
        let holds_lock = self.held.lock().is_some();
        let work = move || f(&self, &handle);
        let result = match holds_lock {
            true => crate::memory::spawn_blocking_unshared(work).await,
            false => crate::memory::spawn_blocking(work).await,
        }
        .map_err(|e| Error::internal(format!("write task failed: {e}")));
        // Finished: nothing left to cancel.
        cancel.0 = None;
        result?
    }

    /// Takes the writer lock (the one held since the start, or waits for it, giving up if
    /// the statement is cancelled meanwhile) and begins the write transaction.
    pub(crate) fn lock(&self, handle: &Handle) -> Result<WriteGuard> {
        let lock = match self.held.lock().take() {
            Some(lock) => lock,
            None if self.in_transaction => handle
                .block_on(self.unless_cancelled(self.store.lock_writes()))
                .ok_or_else(crate::store::cancelled)?,
            None => handle
                .block_on(self.unless_cancelled(self.store.lock_writes_detached()))
                .ok_or_else(crate::store::cancelled)?,
        };
        self.check_cancelled()?;
        let mut guard = self.store.begin_write(lock)?;
        guard.cancelled = self.cancelled.clone();
        Ok(guard)
    }

    /// Fails once the statement was cancelled or must stop (its deadline, an interrupt, a
    /// memory budget), so a long write stops early.
    pub(crate) fn check_cancelled(&self) -> Result<()> {
        if self.cancelled.is_cancelled() {
            return Err(crate::store::cancelled());
        }
        crate::cancel::check()
    }

    /// `work`'s output, or `None` as soon as the statement is cancelled (dropping `work`, so a
    /// plan computing a batch stops in the middle of it).
    pub(crate) async fn unless_cancelled<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::select! {
            biased;
            () = self.cancelled.cancelled() => None,
            done = work => Some(done),
        }
    }

    /// A spool for what this write stages.
    pub(crate) fn spool(&self) -> Spool {
        Spool::new(self.state.disk_manager(), self.staging_memory)
    }

    /// `(project, table)` that a table reference names, checking that the database is a
    /// project or `files` (whose tables are files, written as MindsDB writes them: `CREATE
    /// TABLE files.t (SELECT …)`, `INSERT INTO files.t …`).
    pub(super) fn resolve(&self, reference: &TableReference) -> Result<(String, String)> {
        let (db, table) = self.split(reference)?;
        match self.snapshot.namespace(&db)? {
            Some(Namespace::Project(p)) => Ok((p.name, table)),
            Some(Namespace::Files) => Ok((FILES_DB.to_string(), table)),
            Some(Namespace::System) => Err(Error::invalid(format!(
                "Database '{SYSTEM_DB}' is read-only: tables can only be written in a project"
            ))),
            Some(Namespace::Log) => Err(Error::invalid(format!(
                "Database '{}' is read-only: tables can only be written in a project",
                crate::catalog::namespace::LOG_DB
            ))),
            Some(Namespace::Datasource(source)) => Err(Error::invalid(format!(
                "Datasource '{}' takes INSERT INTO and CREATE TABLE … (SELECT …); other changes to its tables are made in the datasource itself",
                source.name
            ))),
            None => Err(Error::not_found(format!("Database '{db}' not found"))),
        }
    }

    /// The database (the current one when not named) and table a reference names.
    pub(super) fn split(&self, reference: &TableReference) -> Result<(String, String)> {
        Ok(match reference {
            TableReference::Bare { table } => (self.db.clone(), table.to_string()),
            TableReference::Partial { schema, table } => (schema.to_string(), table.to_string()),
            TableReference::Full {
                catalog,
                schema,
                table,
            } if catalog.as_ref() == crate::sql::catalog::snapshot::CATALOG => {
                (schema.to_string(), table.to_string())
            }
            TableReference::Full { catalog, .. } => {
                return Err(Error::not_found(format!("Database '{catalog}' not found")))
            }
        })
    }

    /// The table `project.name` as it is in the write transaction, if it is still the one
    /// read (`read`); `None` when it was dropped or replaced meanwhile.
    pub(super) fn still(
        &self,
        guard: &WriteGuard,
        project: &str,
        name: &str,
        read: &TableRecord,
    ) -> Result<Option<TableRecord>> {
        let current = tables::record(&guard.txn, self.tenant, project, name)?;
        Ok(current.filter(|record| record.id == read.id))
    }

    /// Plans `expr` over the rows of `scan` for evaluation on stored chunks (with DataFusion's
    /// type coercion, so `id = 1.5` on an integer column works as in a query).
    pub(super) fn physical(&self, expr: Expr, scan: &LogicalPlan) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self.state.create_physical_expr(expr, scan.schema())?)
    }

    /// Pulls every batch of `plan` through `sink`, inside this blocking thread.
    pub(crate) fn drain(
        &self,
        handle: &Handle,
        plan: &LogicalPlan,
        mut sink: impl FnMut(RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let physical = crate::memory::wait(
            handle,
            self.unless_cancelled(self.state.create_physical_plan(plan)),
        )
        .ok_or_else(crate::store::cancelled)??;
        let mut stream = crate::memory::wait(handle, async {
            crate::sql::planning::order::execute(physical, self.state.task_ctx())
        })?;
        loop {
            let next = crate::memory::wait(handle, self.unless_cancelled(stream.next()))
                .ok_or_else(crate::store::cancelled)?;
            match next {
                Some(batch) => sink(batch?)?,
                None => return Ok(()),
            }
        }
    }

    /// Staging for rows of the table `table` of `schema`, which has no indexes.
    pub(crate) fn staged(&self, table: &str, schema: SchemaRef) -> StagedRows {
        StagedRows::new(table, schema, self.spool())
    }

    /// Staging for rows appended to `record`'s table as the snapshot has it (its schema
    /// `schema`), index entries included.
    pub(crate) fn appending(&self, record: &TableRecord, schema: SchemaRef) -> Result<StagedRows> {
        StagedRows::appending(record, schema, self.spool(), &self.snapshot.txn)
    }

    /// Staging for rows that replace every row of `record`'s table (of `schema`), index
    /// entries included.
    pub(super) fn replacing(&self, record: &TableRecord, schema: SchemaRef) -> Result<StagedRows> {
        StagedRows::replacing(
            &record.name,
            &record.constraints.indexes,
            schema,
            self.spool(),
        )
    }

    /// Stages every row of `plan` into `staged`, each passing `checks`.
    pub(super) fn stage(
        &self,
        handle: &Handle,
        plan: &LogicalPlan,
        mut staged: StagedRows,
        checks: &Checks,
    ) -> Result<StagedRows> {
        self.drain(handle, plan, |batch| {
            self.check_cancelled()?;
            checks.verify(&staged.push(batch)?)
        })?;
        Ok(staged)
    }
}

impl<T> Staged<T> {
    /// The outcome with `f` applied to a finished write's value.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Staged<U> {
        match self {
            Staged::Done(value) => Staged::Done(f(value)),
            Staged::TargetChanged => Staged::TargetChanged,
        }
    }
}
