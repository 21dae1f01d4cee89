//! The redb file: opening it (format version, clear errors for foreign or locked files), the
//! `meta` and `sequences` tables, the in-process writer lock and object locks, the decoded-chunk
//! cache and the cache of derived data.
//! Every table of the file is defined in [`schema`](crate::store::schema); the rows of record tables belong to the
//! modules named there (`projects`, `tables`, …), and this module owns none of them.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, TableHandle, WriteTransaction,
};

use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorKind, Result};
use crate::tenant::TenantId;
use schema::{META, SEQUENCES};

mod explicit;
mod reading;
pub(crate) mod schema;
mod transaction;
mod turns;

pub(crate) use explicit::Step;
pub(crate) use reading::Reads;

/// The on-disk format this build reads and writes. Bump it when a record layout changes.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// The opened redb database plus what every writer must share.
pub(crate) struct Store {
    db: Database,
    /// Serialises writers inside this process without blocking tokio workers (redb's own
    /// `begin_write` would park a worker thread while another write transaction runs), handing
    /// the lock to users in turn (`turns`).
    write_lock: Arc<turns::TurnLock>,
    /// Where the file is, for error messages; `None` in memory.
    path: Option<PathBuf>,
    /// Decoded chunks, shared by all queries.
    pub(crate) chunk_cache: ChunkCache,
    /// What is derived from the file and costly to build (knowledge bases' indexes in memory).
    pub(crate) derived: DerivedCache,
    /// Locks writers of one object hold across a whole statement, by the object's key.
    object_locks: Mutex<HashMap<String, Weak<tokio::sync::RwLock<()>>>>,
    /// Long writes' progress while they run.
    pub(crate) progress: Arc<crate::progress::ProgressBoard>,
    /// Work running for objects (trainings, knowledge-base inserts), which dropping them stops.
    pub(crate) running: Arc<crate::running::Running>,
    /// Commits made through this store, so caches of what was read can tell they are stale.
    commits: Arc<AtomicU64>,
    /// Woken after every commit (a permit is kept when nobody waits), so the callback worker
    /// looks at its outbox as soon as a status change has landed.
    committed: Arc<tokio::sync::Notify>,
    /// Notified after each commit too, for the sweeper of what DROPs left (see
    /// `catalog::landing`): its own signal, so it never takes a wake-up meant for another.
    swept: Arc<tokio::sync::Notify>,
    /// The explicit transaction open on this store, if any.
    transaction: Mutex<Option<explicit::Transaction>>,
}

/// The right to be the one writer of this process, held from before a write's read snapshot
/// is taken until its transaction ends, so no other commit can slip in between. Inside an
/// explicit transaction it is the transaction's turn for statements, and writes commit
/// non-durably.
pub(crate) struct WriteLock {
    guard: Held,
    durable: bool,
    /// Every writer waits for the holder, so the holder's work is not held back behind its
    /// own user's other work (the user's share of the threads, see `memory`).
    urgent: crate::memory::Urgent,
}

/// What a [`WriteLock`] holds: the writer lock, or inside an explicit transaction (which holds
/// that) the transaction's turn for statements.
#[derive(Debug)]
enum Held {
    Writer {
        _guard: turns::TurnGuard,
    },
    Statements {
        _guard: tokio::sync::OwnedMutexGuard<()>,
    },
}

impl WriteLock {
    /// Waits for the writer lock in `user`'s turn (see `turns`; by default the current
    /// account's user's), urgent from the start: the lock is handed to the next in turn when
    /// it is let go, and every writer then waits for that one to be polled.
    async fn take(lock: Arc<turns::TurnLock>, user: Option<u64>) -> WriteLock {
        // A blocking job waiting here gives its place among its user's blocking threads up
        // for good: the lock's holder, perhaps of the same user, may need it, and once it
        // holds the lock every writer waits for it.
        crate::memory::give_up_place();
        let current = crate::memory::current();
        let urgent = crate::memory::urgent(current);
        WriteLock {
            guard: Held::Writer {
                _guard: lock.lock(user.unwrap_or(current.parent_key())).await,
            },
            durable: true,
            urgent,
        }
    }

    /// The open transaction's turn for statements, as [`WriteLock::take`] waits for it.
    async fn take_turn(turn: Arc<tokio::sync::Mutex<()>>) -> WriteLock {
        crate::memory::give_up_place();
        let urgent = crate::memory::urgent(crate::memory::current());
        WriteLock {
            guard: Held::Statements {
                _guard: turn.lock_owned().await,
            },
            durable: false,
            urgent,
        }
    }

    fn new(guard: Held, durable: bool) -> WriteLock {
        WriteLock {
            guard,
            durable,
            urgent: crate::memory::urgent(crate::memory::current()),
        }
    }
}

thread_local! {
    /// The writer lock's turn this thread holds for a write transaction, if it does.
    static HOLDING: RefCell<Option<turns::Watch>> = const { RefCell::new(None) };
}

/// Whether a user other than the one whose write transaction this thread runs (and other than
/// the sweeper) waits for the writer lock (see `turns`; `turns::Watch` says which turns never
/// end early): a step of many index entries then ends early (see `indexes::Part`), so that
/// another user's one-row INSERT waits for a few hundred entries of each user ahead of it
/// rather than for thousands. False outside a write transaction, and inside an explicit one
/// (its statements' turns are not the writer lock's).
pub(crate) fn others_wait() -> bool {
    HOLDING.with(|holding| {
        holding
            .borrow()
            .as_ref()
            .is_some_and(turns::Watch::others_wait)
    })
}

/// Marks this thread as holding a turn of the writer lock until dropped.
struct Holding {
    previous: Option<turns::Watch>,
}

impl Holding {
    fn enter(watch: Option<turns::Watch>) -> Holding {
        Holding {
            previous: HOLDING.with(|holding| holding.replace(watch)),
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let previous = self.previous.take();
        HOLDING.with(|holding| *holding.borrow_mut() = previous);
    }
}

/// A write transaction that also holds the in-process writer lock until it commits or drops.
pub(crate) struct WriteGuard {
    pub(crate) txn: WriteTransaction,
    commits: Arc<AtomicU64>,
    committed: Arc<tokio::sync::Notify>,
    /// Notified after each commit too, for the sweeper of what DROPs left (see
    /// `catalog::landing`): its own signal, so it never takes a wake-up meant for another.
    swept: Arc<tokio::sync::Notify>,
    /// Cancelled when whoever waited for this write gave up (a cancelled query): the write must
    /// not commit behind their back.
    pub(crate) cancelled: CancellationToken,
    _lock: Held,
    /// The lock's urgent mark, held as long as the lock.
    _urgent: crate::memory::Urgent,
    /// This thread's mark that it holds the lock.
    _holding: Holding,
}

impl WriteGuard {
    /// Commits the transaction durably, unless the write was cancelled or its statement was
    /// stopped (then it aborts and nothing is written). Once the commit begins, the statement
    /// can no longer be stopped, so a statement reported stopped never committed.
    pub(crate) fn commit(self) -> Result<()> {
        if self.cancelled.is_cancelled() {
            return Err(cancelled());
        }
        let _committing = crate::cancel::begin_commit()?;
        self.txn.commit()?;
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.committed.notify_one();
        self.swept.notify_one();
        Ok(())
    }

    /// Lets this transaction commit without waiting for the disk: for a step of work that a
    /// later durable commit completes, and whose loss in a crash leaves nothing to repair (a
    /// landing's steps, which a crash discards anyway, and the sweeper's, which start again at
    /// the next open). A durable commit makes every earlier one durable too, so the steps
    /// reach the disk with the next statement's commit, and others writing between the steps
    /// wait for B-tree work only, not for the disk.
    pub(crate) fn need_not_persist(&mut self) -> Result<()> {
        self.txn
            .set_durability(redb::Durability::None)
            .map_err(|e| Error::internal(format!("cannot commit a step without the disk: {e}")))
    }
}

pub(crate) use crate::cancel::cancelled;

impl Store {
    /// Opens (or creates) the redb file at `path`.
    pub(crate) fn open(
        path: &Path,
        page_cache_bytes: usize,
        chunk_cache_bytes: usize,
        derived_cache_bytes: usize,
    ) -> Result<Store> {
        let shown = path.display();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                Error::invalid(format!(
                    "cannot create directory '{}' for '{shown}': {e}",
                    parent.display()
                ))
            })?;
        }
        if path.is_dir() {
            return Err(Error::invalid(format!(
                "'{shown}' is a directory, not a mindlite database file"
            )));
        }
        let mut builder = Database::builder();
        builder.set_cache_size(page_cache_bytes);
        // `create` opens an existing database, and initialises a missing or empty file.
        let db = builder.create(path).map_err(|e| open_error(path, e))?;
        let store = Store {
            db,
            write_lock: Arc::new(turns::TurnLock::default()),
            path: Some(path.to_path_buf()),
            chunk_cache: ChunkCache::new(chunk_cache_bytes),
            derived: DerivedCache::new(derived_cache_bytes),
            object_locks: Mutex::new(HashMap::new()),
            progress: Arc::default(),
            running: Arc::default(),
            commits: Arc::new(AtomicU64::new(0)),
            committed: Arc::new(tokio::sync::Notify::new()),
            swept: Arc::new(tokio::sync::Notify::new()),
            transaction: Mutex::new(None),
        };
        store.check_format()?;
        Ok(store)
    }

    /// Creates a database in memory (redb's in-memory backend); it vanishes when dropped.
    pub(crate) fn open_in_memory(
        chunk_cache_bytes: usize,
        derived_cache_bytes: usize,
    ) -> Result<Store> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| Error::internal(format!("cannot create in-memory database: {e}")))?;
        let store = Store {
            db,
            write_lock: Arc::new(turns::TurnLock::default()),
            path: None,
            chunk_cache: ChunkCache::new(chunk_cache_bytes),
            derived: DerivedCache::new(derived_cache_bytes),
            object_locks: Mutex::new(HashMap::new()),
            progress: Arc::default(),
            running: Arc::default(),
            commits: Arc::new(AtomicU64::new(0)),
            committed: Arc::new(tokio::sync::Notify::new()),
            swept: Arc::new(tokio::sync::Notify::new()),
            transaction: Mutex::new(None),
        };
        store.check_format()?;
        Ok(store)
    }

    /// How to name this store in messages.
    pub(crate) fn describe(&self) -> String {
        match &self.path {
            Some(path) => format!("'{}'", path.display()),
            None => "the in-memory database".to_string(),
        }
    }

    /// Writes the format version into a new file, or checks it in an existing one.
    fn check_format(&self) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            // A redb file with tables but no `meta` belongs to another application: never adopt it.
            let foreign = txn.list_tables()?.any(|t| t.name() != META.name());
            let mut meta = txn.open_table(META)?;
            let found = meta.get("format_version")?.map(|v| v.value().to_string());
            match found {
                None => {
                    let is_empty = {
                        use redb::ReadableTableMetadata;
                        meta.len()? == 0
                    };
                    if foreign || !is_empty {
                        return Err(Error::invalid(format!(
                            "{} is a redb file but not a mindlite database (no format version)",
                            self.describe()
                        )));
                    }
                    meta.insert("format_version", FORMAT_VERSION.to_string().as_str())?;
                    meta.insert("created_by", concat!("mindlite ", env!("CARGO_PKG_VERSION")))?;
                }
                Some(version) if version == FORMAT_VERSION.to_string() => {}
                Some(version) => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "{} has on-disk format version {version}, but this build of mindlite reads version {FORMAT_VERSION}",
                            self.describe()
                        ),
                    ))
                }
            }
            txn.open_table(SEQUENCES)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// A consistent read snapshot.
    pub(crate) fn read(&self) -> Result<ReadTransaction> {
        Ok(self.db.begin_read()?)
    }

    /// Waits, without blocking a thread, until this caller is the only writer: a statement's
    /// write, which joins the open transaction if there is one (taking its turn there).
    pub(crate) async fn lock_writes(&self) -> WriteLock {
        loop {
            let Some(statements) = self.statements_turn() else {
                return self.lock_writes_detached().await;
            };
            let lock = WriteLock::take_turn(Arc::clone(&statements)).await;
            // The transaction may have ended while this waited: then wait for the writer lock.
            if self
                .statements_turn()
                .is_some_and(|now| Arc::ptr_eq(&now, &statements))
            {
                return lock;
            }
        }
    }

    /// [`Store::lock_writes`] for work that is no statement of the connection (training,
    /// deliveries): it never joins an open transaction, it waits for it to end.
    pub(crate) async fn lock_writes_detached(&self) -> WriteLock {
        WriteLock::take(Arc::clone(&self.write_lock), None).await
    }

    /// [`Store::lock_writes_detached`] in the turn of `user` (a parent account's key, see
    /// `memory::Tag::parent_key`), for what a statement leaves to do after it, outside its
    /// account: the discard of a failed landing, the sweep of what a rewrite retired. Work
    /// that its user caused takes its user's turns, not those of background work.
    pub(crate) async fn lock_writes_as(&self, user: u64) -> WriteLock {
        WriteLock::take(Arc::clone(&self.write_lock), Some(user)).await
    }

    /// [`Store::lock_writes_detached`] in the sweeper's turn, which yields to every other
    /// writer (see `turns::SWEEPER`), as a future that does not hold the store while it waits,
    /// for a background task that must not keep the file open.
    pub(crate) fn lock_writes_for_sweeper(
        &self,
    ) -> impl std::future::Future<Output = WriteLock> + Send + 'static {
        let lock = Arc::clone(&self.write_lock);
        WriteLock::take(lock, Some(turns::SWEEPER))
    }

    /// Takes the writer lock if it is free, without waiting.
    pub(crate) fn try_lock_writes(&self) -> Result<WriteLock> {
        self.write_lock
            .try_lock()
            .map(|guard| WriteLock::new(Held::Writer { _guard: guard }, true))
            .ok_or_else(|| Error::new(ErrorKind::Unavailable, "another write is in progress"))
    }

    /// Begins the write transaction that `lock` entitles the caller to. Never waits: the lock
    /// already excludes every other writer of this process, and redb's file lock all others.
    pub(crate) fn begin_write(&self, lock: WriteLock) -> Result<WriteGuard> {
        let holding = Holding::enter(match &lock.guard {
            Held::Writer { _guard } => Some(_guard.watch()),
            Held::Statements { .. } => None,
        });
        let mut txn = self.db.begin_write()?;
        if !lock.durable {
            txn.set_durability(redb::Durability::None).map_err(|e| {
                Error::internal(format!("cannot write inside the transaction: {e}"))
            })?;
        }
        Ok(WriteGuard {
            txn,
            commits: Arc::clone(&self.commits),
            committed: Arc::clone(&self.committed),
            swept: Arc::clone(&self.swept),
            cancelled: CancellationToken::new(),
            _lock: lock.guard,
            _urgent: lock.urgent,
            _holding: holding,
        })
    }

    /// The open transaction's turn lock, if a transaction is open.
    fn statements_turn(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.transaction
            .lock()
            .as_ref()
            .map(|open| Arc::clone(&open.statements))
    }

    /// The lock of the object `key` (a knowledge base, a table), which its writers hold from
    /// before they compute a change until it commits: exclusively when two of them must never
    /// build on one version (a knowledge base's writers, a statement that lost its table to
    /// other writes too often), shared otherwise. Taken before the writer lock, never while
    /// holding it (see [`Store::in_transaction`]), and at most one per statement, so that
    /// holders never wait for each other round a circle.
    pub(crate) fn object_lock(&self, key: &str) -> Arc<tokio::sync::RwLock<()>> {
        let mut locks = self.object_locks.lock();
        if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::RwLock::new(()));
        locks.insert(key.to_string(), Arc::downgrade(&lock));
        lock
    }

    /// Whether an explicit transaction is open.
    pub(crate) fn in_transaction(&self) -> bool {
        self.transaction.lock().is_some()
    }

    /// How many transactions this store has committed since it was opened. Read it before
    /// taking a snapshot: a snapshot is known current while the count has not moved since.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    /// Notified after each commit.
    pub(crate) fn committed(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.committed)
    }

    /// Notified after each commit, for the sweeper alone.
    pub(crate) fn swept(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.swept)
    }
}

impl Store {
    /// Runs `f` in one write transaction on a blocking thread and commits it: the whole change
    /// or, when `f` fails, none of it. Waits for other writers without blocking a worker thread.
    /// A statement's write: inside an open transaction it is part of it.
    pub(crate) async fn write<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let lock = self.lock_writes().await;
        self.write_locked(lock, f).await
    }

    /// [`Store::write`] for work that is no statement of the connection (training, deliveries):
    /// it waits for an open transaction to end and commits on its own.
    pub(crate) async fn write_detached<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let lock = self.lock_writes_detached().await;
        self.write_locked(lock, f).await
    }

    /// [`Store::write`] for a change that drops `object` (a model, a knowledge base, a
    /// project): once it has committed, the work running for the object that was registered
    /// before its transaction is cancelled (see [`crate::running`]). Inside an explicit
    /// transaction nothing is cancelled: a ROLLBACK would bring the object back.
    pub(crate) async fn write_dropping<T: Send + 'static>(
        self: &Arc<Self>,
        object: crate::running::Object,
        f: impl FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let running = Arc::clone(&self.running);
        let (out, mark) = self
            .write(move |txn| {
                let mark = running.mark();
                Ok((f(txn)?, mark))
            })
            .await?;
        if !self.in_transaction() {
            self.running.cancel(&object, mark);
        }
        Ok(out)
    }

    async fn write_locked<T: Send + 'static>(
        self: &Arc<Self>,
        lock: WriteLock,
        f: impl FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = Arc::clone(self);
        crate::memory::spawn_blocking_unshared(move || {
            crate::cancel::check()?;
            let guard = store.begin_write(lock)?;
            let out = f(&guard.txn)?;
            guard.commit()?;
            Ok(out)
        })
        .await
        .map_err(|e| Error::internal(format!("write task failed: {e}")))?
    }
}

/// Turns redb's open failures into messages that name the file and the problem.
fn open_error(path: &Path, err: redb::DatabaseError) -> Error {
    let shown = path.display();
    match err {
        redb::DatabaseError::DatabaseAlreadyOpen => Error::new(
            ErrorKind::Unavailable,
            format!("'{shown}' is already open in another process (or another engine in this one)"),
        ),
        redb::DatabaseError::UpgradeRequired(version) => Error::new(
            ErrorKind::Unavailable,
            format!("'{shown}' uses redb file format {version}, which this build cannot open"),
        ),
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::InvalidData =>
        {
            Error::invalid(format!(
                "'{shown}' is not a mindlite database (not a valid redb file: {io})"
            ))
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => Error::new(
            ErrorKind::Unavailable,
            format!("cannot open '{shown}': {io}"),
        ),
        redb::DatabaseError::Storage(other) => Error::invalid(format!(
            "'{shown}' is not a mindlite database (not a valid redb file: {other})"
        )),
        other => Error::new(
            ErrorKind::Unavailable,
            format!("cannot open '{shown}': {other}"),
        ),
    }
}

/// Returns the next value of the named sequence (1, 2, 3, …) inside `txn`. Values are never
/// reused once committed, which is what lets [`ChunkCache`] key on ids without invalidation.
pub(crate) fn next_id(txn: &WriteTransaction, sequence: &str) -> Result<u64> {
    let mut table = txn.open_table(SEQUENCES)?;
    let next = table.get(sequence)?.map(|v| v.value()).unwrap_or(0) + 1;
    table.insert(sequence, next)?;
    Ok(next)
}

/// [`next_id`] for ids that callers see (projects, agents, models, minds, datasources): one
/// sequence per tenant, so nobody can count another tenant's objects from gaps in their own
/// ids. The local tenant keeps the plain sequence its files always used.
pub(crate) fn next_tenant_id(txn: &WriteTransaction, tenant: TenantId, kind: &str) -> Result<u64> {
    if tenant == TenantId::LOCAL {
        return next_id(txn, kind);
    }
    next_id(txn, &format!("{kind}@{}", tenant.0))
}

/// Decoded chunks keyed by (table id, chunk number). Chunk keys are written once and never
/// rewritten (rewrites take fresh numbers), so entries never go stale; they only get evicted.
///
/// A chunk is admitted the second time it is read (the "2Q" policy; PostgreSQL's ring buffer
/// for large scans has the same aim): one pass over a big table, an export say, neither
/// grows the process by the table's decoded size nor pushes out what queries keep reading.
/// Keys read once are remembered, without their data, in a bounded list.
pub(crate) struct ChunkCache {
    budget: usize,
    inner: Mutex<CacheInner>,
}

/// Keys of chunks read once and not yet admitted; 16 bytes plus the list's overhead each.
const READ_ONCE: usize = 16_384;

struct CacheInner {
    entries: lru::LruCache<(u64, u64), RecordBatch>,
    bytes: usize,
    read_once: lru::LruCache<(u64, u64), ()>,
}

impl ChunkCache {
    fn new(budget: usize) -> Self {
        ChunkCache {
            budget,
            inner: Mutex::new(CacheInner {
                entries: lru::LruCache::unbounded(),
                bytes: 0,
                read_once: lru::LruCache::new(
                    std::num::NonZeroUsize::new(READ_ONCE).expect("READ_ONCE is not zero"),
                ),
            }),
        }
    }

    /// Whether a chunk that is about to be decoded should be cached: true when it was read
    /// recently before. Always false with caching off.
    pub(crate) fn admit(&self, key: (u64, u64)) -> bool {
        if self.budget == 0 {
            return false;
        }
        let mut inner = self.inner.lock();
        if inner.read_once.pop(&key).is_some() {
            return true;
        }
        inner.read_once.put(key, ());
        false
    }

    /// Forgets every chunk (after a rollback, which makes chunk ids be handed out again).
    pub(crate) fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.entries.clear();
        inner.read_once.clear();
        inner.bytes = 0;
    }

    pub(crate) fn get(&self, key: (u64, u64)) -> Option<RecordBatch> {
        self.inner.lock().entries.get(&key).cloned()
    }

    pub(crate) fn insert(&self, key: (u64, u64), batch: RecordBatch) {
        let size = batch.get_array_memory_size();
        if size > self.budget {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(old) = inner.entries.put(key, batch) {
            inner.bytes -= old.get_array_memory_size();
        }
        inner.bytes += size;
        while inner.bytes > self.budget {
            match inner.entries.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.get_array_memory_size(),
                None => break,
            }
        }
    }
}

/// Data derived from the file and costly to build, such as a knowledge base's index in memory,
/// shared by every reader of one version: keyed by (object id, version stamp), so an entry
/// never goes stale, and kept up to a byte budget, least recently used out first. The entry
/// last put in stays even when it alone is over the budget: searching it again must not mean
/// loading it again.
pub(crate) struct DerivedCache {
    budget: usize,
    inner: Mutex<DerivedEntries>,
}

struct DerivedEntries {
    entries: lru::LruCache<(u64, u64), (Arc<dyn Any + Send + Sync>, usize)>,
    bytes: usize,
}

impl DerivedCache {
    fn new(budget: usize) -> Self {
        DerivedCache {
            budget,
            inner: Mutex::new(DerivedEntries {
                entries: lru::LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    /// The entry for `key`, if it is there and a `T`.
    pub(crate) fn get<T: Any + Send + Sync>(&self, key: (u64, u64)) -> Option<Arc<T>> {
        let entry = self
            .inner
            .lock()
            .entries
            .get(&key)
            .map(|(v, _)| Arc::clone(v))?;
        entry.downcast::<T>().ok()
    }

    /// Keeps `value` (`bytes` in size) for `key`, evicting others beyond the budget.
    pub(crate) fn insert<T: Any + Send + Sync>(
        &self,
        key: (u64, u64),
        value: Arc<T>,
        bytes: usize,
    ) {
        let mut inner = self.inner.lock();
        if let Some((_, old)) = inner.entries.put(key, (value, bytes)) {
            inner.bytes -= old;
        }
        inner.bytes += bytes;
        while inner.bytes > self.budget && inner.entries.len() > 1 {
            match inner.entries.pop_lru() {
                Some((_, (_, evicted))) => inner.bytes -= evicted,
                None => break,
            }
        }
    }
}

/// One record of a table of JSON records keyed by (tenant, lower-cased name), as projects and
/// datasources are kept; `name` is matched case-insensitively.
pub(crate) fn get_named<T: serde::de::DeserializeOwned>(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Option<T>> {
    let key = name.to_ascii_lowercase();
    match table.get((tenant.0, key.as_str()))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// Every record of `tenant` in a table like [`get_named`]'s, by name.
pub(crate) fn list_named<T: serde::de::DeserializeOwned>(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for entry in table.range((tenant.0, "")..(tenant.0 + 1, ""))? {
        let (_, value) = entry?;
        out.push(serde_json::from_str(value.value())?);
    }
    Ok(out)
}

/// One record of a table of JSON records keyed by (tenant, project, lower-cased name), as
/// tables and views are kept; both names are matched case-insensitively.
pub(crate) fn get_in_project<T: serde::de::DeserializeOwned>(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<T>> {
    let (project, name) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    match table.get((tenant.0, project.as_str(), name.as_str()))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// Every record of one project in a table like [`get_in_project`]'s, by name.
pub(crate) fn list_in_project<T: serde::de::DeserializeOwned>(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<T>> {
    let project = project.to_ascii_lowercase();
    let mut out = Vec::new();
    for entry in table.range((tenant.0, project.as_str(), "")..)? {
        let (key, value) = entry?;
        let (t, p, _) = key.value();
        if t != tenant.0 || p != project {
            break;
        }
        out.push(serde_json::from_str(value.value())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn batch(rows: i64) -> RecordBatch {
        RecordBatch::try_from_iter([("a", Arc::new(Int64Array::from_iter_values(0..rows)) as _)])
            .unwrap()
    }

    #[test]
    fn chunks_are_cached_from_their_second_read_within_the_budget() {
        let cache = ChunkCache::new(1 << 20);
        assert!(!cache.admit((1, 1)), "a first read is not cached");
        assert!(!cache.admit((1, 2)));
        assert!(cache.admit((1, 1)), "a second read is");
        cache.insert((1, 1), batch(10));
        assert_eq!(cache.get((1, 1)).unwrap().num_rows(), 10);
        assert!(cache.get((1, 2)).is_none());
        // Over budget, the least recently used chunk goes.
        let big = batch(70_000);
        assert!(big.get_array_memory_size() > (1 << 20) / 2);
        cache.insert((2, 1), big.clone());
        cache.insert((2, 2), big);
        assert!(cache.get((2, 1)).is_none());
        assert!(cache.get((2, 2)).is_some());
        // The list of chunks read once is bounded: the oldest are forgotten.
        for n in 0..READ_ONCE as u64 {
            assert!(!cache.admit((3, n)));
        }
        assert!(!cache.admit((1, 2)), "forgotten, so a first read again");
        // Caching off admits nothing.
        let off = ChunkCache::new(0);
        assert!(!off.admit((1, 1)) && !off.admit((1, 1)));
    }
}
