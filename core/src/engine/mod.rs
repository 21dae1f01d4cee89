//! [`Engine`]: one open database. Cheap to clone (an `Arc`), `Send + Sync`, owning its tokio
//! runtime, its redb store and its DataFusion setup. Async methods for async callers; blocking
//! ones (`*_blocking`, [`Engine::block_on`]) for the C and Python fronts.
//!
//! Here: opening and closing, the runtime and statement control. Its methods by concern, each
//! an `impl Engine` of its own: running SQL (`query_api`), who may use it (`access`),
//! projects, agents, models, knowledge bases and files (`project_api`, `agent_api`,
//! `model_api`, `knowledge_bases`, `file_api`), and the hosted edition's (`hosted`).

mod access;
mod agent_api;
pub(crate) mod database_api;
mod file_api;
pub(crate) mod hosted;
pub(crate) mod jobs;
mod knowledge_bases;
mod model_api;
mod project_api;
pub(crate) mod query_api;
pub(crate) mod reader;
mod settings;
pub(crate) mod status;
mod sweeper;

use std::cell::Cell;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt};
use tokio::runtime::{Handle, Runtime};

use crate::admission::Ticket;
use crate::cancel::{Control, Interrupts};
use crate::catalog::agents::{self};
use crate::catalog::projects::{self};
use crate::config::Config;
use crate::error::{panic_message, Error, Result};
use crate::services::Services;
use crate::sql::SqlRunner;
use crate::store::Store;
use crate::tenant::TenantId;

/// An open mindlite database.
///
/// ```
/// use mindlite::{Config, Engine};
/// let engine = Engine::open_in_memory(Config::default()).unwrap();
/// let rows = engine.sql_blocking("SELECT 1 + 1 AS two").unwrap();
/// assert_eq!(rows.column_names, ["two"]);
/// ```
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    /// Whose catalog this handle reads and changes: the local tenant for a handle from
    /// [`Engine::open`], a user for one from [`Engine::as_user`] (hosted edition).
    pub(crate) tenant: TenantId,
    /// What [`Engine::interrupt`] stops: statements started through this handle or its clones.
    pub(crate) interrupts: Interrupts,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("id", &self.inner.id)
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// Engine ids start at 1: 0 marks threads outside every engine's runtime.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The id of the engine whose runtime owns this thread, or 0.
    static RUNTIME_OF: Cell<u64> = const { Cell::new(0) };
}

pub(crate) struct Inner {
    /// Tells this engine's runtime threads apart from all others.
    id: u64,
    /// What the engine and its SQL engine share (the store, the configuration, the clients).
    pub(crate) services: Arc<Services>,
    pub(crate) sql: Arc<SqlRunner>,
    /// `Option` so `Drop` can shut it down without blocking, even from inside async code.
    runtime: Option<Runtime>,
    pub(crate) handle: Handle,
    /// Removes what DROPs leave, in steps; stopped first when the engine closes.
    sweeper: sweeper::Sweeper,
    /// Runs jobs when they are due; stopped with the sweeper.
    scheduler: crate::ai::jobs::run::Scheduler,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sweeper.stop();
        self.scheduler.stop();
        self.services.compute.close();
        if let Some(runtime) = self.runtime.take() {
            // Off the runtime, wait (as `close` does) for its tasks to be dropped: a task
            // still holding the store would keep the file open after the last handle went,
            // and opening it again at once would fail. On the runtime (a handle dropped by
            // async code) a runtime cannot wait for itself.
            if Handle::try_current().is_err() {
                runtime.shutdown_timeout(std::time::Duration::from_secs(10));
            } else {
                runtime.shutdown_background();
            }
        }
    }
}

impl Engine {
    /// Opens the database file at `path`, creating it (and its directory) when missing.
    pub fn open(path: impl AsRef<Path>, config: Config) -> Result<Engine> {
        let store = Store::open(
            path.as_ref(),
            to_usize(config.page_cache_bytes()),
            to_usize(config.batch_cache_bytes()),
            to_usize(config.index_cache_bytes()),
        )?;
        Engine::start(store, config)
    }

    /// Opens a fresh database in memory; it is gone when the last clone is dropped.
    pub fn open_in_memory(config: Config) -> Result<Engine> {
        let store = Store::open_in_memory(
            to_usize(config.batch_cache_bytes()),
            to_usize(config.index_cache_bytes()),
        )?;
        Engine::start(store, config)
    }

    fn start(store: Store, config: Config) -> Result<Engine> {
        config.validate()?;
        let store = Arc::new(store);
        let services = Arc::new(Services::new(Arc::clone(&store), &config)?);
        let sql = SqlRunner::new(Arc::clone(&services), crate::ai::extensions())?;
        let default = sql.default_project().to_string();
        // No block_on here: the engine may be opened from inside async code, and nobody else
        // can hold the writer lock of a store that is still being opened.
        let guard = store.begin_write(store.try_lock_writes()?)?;
        crate::catalog::setup::open(&guard.txn, &config.hosted, &default)?;
        guard.commit()?;
        services.settings.load(&store)?;
        let worker = crate::services::delivery::Worker::new(
            Arc::clone(&store),
            &config.callbacks,
            &config.hosted,
            &services.net.egress,
        )?;
        crate::memory::set_ceiling(Some(config.process_memory_bytes()));
        if config.edition == crate::config::Edition::Hosted {
            // Each user's work polls on at most half the workers at once, so the other half
            // is always there for other users and for every connection's reads and writes.
            let half = u32::try_from(config.worker_threads().div_ceil(2)).unwrap_or(u32::MAX);
            crate::memory::set_share(half.max(1));
        }
        crate::memory::propagate_into_datafusion();
        // Built last: a runtime dropped on an error path inside async code would panic.
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads())
            // Statements nest up to 1,000 deep, and their expressions are evaluated and their
            // trees dropped recursively on these threads (8 MiB, as a main thread has).
            .thread_stack_size(8 << 20)
            // Blocking work (writes, searches) waits on the writer lock or the disk; more
            // threads than this would only queue there, and each reserves its stack.
            .max_blocking_threads(64)
            .thread_name("mindlite")
            .on_thread_start(move || RUNTIME_OF.with(|of| of.set(id)))
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("cannot start the engine's runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let sweeper = sweeper::Sweeper::start(&store, &handle);
        // Callbacks are the hosted edition's: a local engine has no deliveries to make, and
        // its commits wake nothing.
        if config.edition == crate::config::Edition::Hosted {
            worker.start(&handle);
        }
        let scheduler = crate::ai::jobs::run::Scheduler::start(&sql, &handle);
        Ok(Engine {
            inner: Arc::new(Inner {
                id,
                services,
                sql,
                runtime: Some(runtime),
                handle,
                sweeper,
                scheduler,
            }),
            tenant: TenantId::LOCAL,
            interrupts: Interrupts::new(),
        })
    }

    /// The configuration the engine was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.services.config
    }

    /// The memory account of one request of this handle's user (see [`RequestMemory`]): a
    /// front runs the reading of a request's body, its handling and its answer in it. Under
    /// the user's plan and `query.statement_memory_mb`; the local user, without a plan, has
    /// one only when `query.statement_memory_mb` is set. A catalog that cannot be read counts
    /// the request toward no plan (the statements it starts fail on the same read).
    ///
    /// [`RequestMemory`]: crate::RequestMemory
    pub fn request_memory(&self) -> crate::memory::RequestMemory {
        let parent = self
            .inner
            .services
            .tenant_memory(self.tenant)
            .unwrap_or(None);
        crate::memory::RequestMemory::open(
            self.inner.services.config.statement_memory_bytes(),
            parent,
        )
    }

    /// The statement's stops for work that arrives outside SQL (a knowledge-base insert, an
    /// upload, a prediction, a load of batches): its deadline (`query.statement_timeout_secs`)
    /// and this handle's interrupts, as [`Engine::query`] gives SQL. [`Control::run`] drops
    /// the work when it must stop, which stops it: a write's blocking loop sees its
    /// cancellation and commits nothing, provider calls are abandoned.
    ///
    /// The work is admitted as a statement of this handle's user (its place among the plan's
    /// `max_running_statements`, held while the returned ticket lives) and runs under a memory
    /// account of its own (`query.statement_memory_mb`, within the plan's `max_memory_mb`).
    pub(crate) fn statement_control(&self) -> Result<(Control, Option<Ticket>)> {
        let (ticket, tenant_memory) = self.inner.services.admit_statement(self.tenant)?;
        let control = Control::new(
            self.inner.services.config.statement_limit(None),
            &self.interrupts,
        )
        .with_memory(
            self.inner.services.config.statement_memory_bytes(),
            tenant_memory,
        );
        Ok((control, ticket))
    }

    /// Whether a transaction (`BEGIN`) is open: until `COMMIT` or `ROLLBACK`, writes are seen
    /// only here and are lost if the process ends; closing the engine rolls it back.
    pub fn in_transaction(&self) -> bool {
        self.inner.services.store.in_transaction()
    }

    /// Stops every statement running through this handle (or a clone of it): each ends with
    /// "The statement was interrupted", and a write that had not committed writes nothing.
    /// Statements started afterwards run normally. Callable from any thread.
    pub fn interrupt(&self) {
        self.interrupts.interrupt();
    }

    /// Counts a request that came without valid credentials from `client` (an address, say)
    /// against `http.unauthenticated_per_minute`; over it,
    /// [`ErrorKind::QuotaExceeded`](crate::ErrorKind) with the seconds to wait.
    pub fn throttle_unauthenticated(&self, client: &str) -> Result<()> {
        self.inner
            .services
            .admission
            .throttle_unauthenticated(client)
    }

    /// Closes this handle. When it is the last one, the runtime is shut down first, waiting up
    /// to 10 s for tasks of cancelled queries to stop, so that the database file is closed (and
    /// can be opened again) when this returns; otherwise the other handles keep it open. Called
    /// from async code it cannot wait, and the file closes shortly after.
    pub fn close(self) {
        // Dropping the last handle does it (see `Drop for Inner`); this names the moment.
        drop(self);
    }

    /// Runs `future` as a task on the engine's runtime, for blocking fronts that wait with a
    /// timeout (to look for Ctrl-C) and cancel with [`JoinHandle::abort`](tokio::task::JoinHandle::abort).
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        crate::memory::spawn_on(&self.inner.handle, future)
    }

    /// Drives `future` to completion on the engine's runtime, blocking this thread. For the
    /// blocking fronts: pulling a stream's next batch, or an encoder's next piece.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.inner.handle.block_on(future)
    }
}

#[cfg(test)]
impl Engine {
    /// The store, for tests that look at what is on disk.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.inner.services.store
    }

    /// Keeps the sweeper from starting its next step until the guard is dropped.
    pub(crate) fn hold_sweeper(&self) -> parking_lot::MutexGuard<'_, bool> {
        self.inner.sweeper.hold()
    }
}

/// Fails with MindsDB's "Project with name … does not exist" unless `project` exists.
pub(crate) fn require_project(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    project: &str,
) -> Result<()> {
    match projects::named(txn, tenant, project)? {
        Some(_) => Ok(()),
        None => Err(agents::project_missing(project)),
    }
}

/// A task that is aborted when its handle is dropped before it finished.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An agent spec, which must be a JSON object.
fn body_object(value: serde_json::Value) -> Result<serde_json::Map<String, serde_json::Value>> {
    Ok(crate::wire::Fields::of(value, "The agent")?.into_map())
}

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Polls a stream inside the engine's runtime context, so tasks DataFusion spawns while
/// producing batches land on the engine's runtime whatever executor the caller uses. A panic
/// inside the query engine ends the stream with an error instead of unwinding into the caller.
struct InRuntime<S> {
    inner: S,
    handle: Handle,
    failed: bool,
}

impl<S> Stream for InRuntime<S>
where
    S: Stream<Item = datafusion::error::Result<RecordBatch>> + Unpin,
{
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let handle = self.handle.clone();
        let _entered = handle.enter();
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.inner.poll_next_unpin(cx)
        }));
        match polled {
            Ok(poll) => poll,
            Err(panic) => {
                self.failed = true;
                let what = panic_message(&*panic);
                Poll::Ready(Some(Err(datafusion::error::DataFusionError::External(
                    Box::new(Error::internal(format!(
                        "internal error while producing rows: {what}"
                    ))),
                ))))
            }
        }
    }
}
