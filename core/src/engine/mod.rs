//! [`Engine`]: one open database. Cheap to clone (an `Arc`), `Send + Sync`, owning its tokio
//! runtime, its redb store and its DataFusion setup. Async methods for async callers; blocking
//! ones (`*_blocking`, [`Engine::block_on`]) for the C and Python fronts.

pub(crate) mod hosted;
mod knowledge_bases;
pub(crate) mod reader;
pub(crate) mod status;
mod sweeper;

use std::cell::Cell;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{FutureExt, Stream, StreamExt};
use tokio::runtime::{Handle, Runtime};

use crate::admission::Ticket;
use crate::ai::agents::answer::{self, AgentEvent, AgentStream, Answer, Asker};
use crate::cancel::{Control, Interrupts};
use crate::catalog::agents::{self, Agent};
use crate::catalog::auth::{self, LoginToken};
use crate::catalog::models::{self, Model};
use crate::catalog::projects::{self, Project};
use crate::catalog::tables;
use crate::config::Config;
use crate::engine::status::Status;
use crate::error::{panic_message, Error, Result};
use crate::running::Object;
use crate::services::files::{FileFormat, FileInfo};
use crate::sql::{LoadMode, Outcome, QueryRequest, QueryResult, SqlRunner, TableResult};
use crate::store::schema::{AGENTS, MODELS, PROJECTS};
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
    pub(crate) config: Config,
    pub(crate) sql: SqlRunner,
    /// `Option` so `Drop` can shut it down without blocking, even from inside async code.
    runtime: Option<Runtime>,
    pub(crate) handle: Handle,
    /// Removes what DROPs leave, in steps; stopped first when the engine closes.
    sweeper: sweeper::Sweeper,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sweeper.stop();
        self.sql.compute.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A fully read result, for callers that want rows rather than a stream.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Column names as shown (empty for statements without rows).
    pub column_names: Vec<String>,
    /// All record batches.
    pub batches: Vec<RecordBatch>,
    /// Rows changed, for INSERT / UPDATE / DELETE / CREATE TABLE AS.
    pub affected_rows: Option<u64>,
}

impl Collected {
    /// Total number of rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

impl QueryResult {
    /// Reads the whole result; an SQL error becomes `Err`.
    pub async fn collect(self) -> Result<Collected> {
        match self.outcome {
            Outcome::Error(e) => Err(e),
            Outcome::Ok { affected_rows } => Ok(Collected {
                column_names: Vec::new(),
                batches: Vec::new(),
                affected_rows,
            }),
            Outcome::Table(TableResult {
                column_names,
                mut stream,
            }) => {
                let mut batches = Vec::new();
                while let Some(batch) = stream.next().await {
                    batches.push(batch?);
                }
                Ok(Collected {
                    column_names,
                    batches,
                    affected_rows: None,
                })
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
        let sql = SqlRunner::new(Arc::clone(&store), &config, crate::ai::extensions())?;
        let default = sql.default_project().to_string();
        // No block_on here: the engine may be opened from inside async code, and nobody else
        // can hold the writer lock of a store that is still being opened.
        let guard = store.begin_write(store.try_lock_writes()?)?;
        let uncounted = crate::catalog::storage::init(&guard.txn)?;
        tables::init(&guard.txn)?;
        // What statements of a stopped process had written ahead of their commit.
        crate::catalog::rules::discard_all_landed(&guard.txn)?;
        crate::catalog::views::init(&guard.txn)?;
        crate::catalog::knowledge_bases::init(&guard.txn)?;
        agents::init(&guard.txn)?;
        crate::catalog::datasources::init(&guard.txn)?;
        models::init(&guard.txn)?;
        models::fail_interrupted(&guard.txn)?;
        auth::init(&guard.txn)?;
        crate::catalog::users::init(&guard.txn)?;
        crate::catalog::quotas::init(&guard.txn)?;
        crate::catalog::minds::init(&guard.txn)?;
        crate::catalog::callbacks::init(&guard.txn)?;
        projects::ensure_default(&guard.txn, TenantId::LOCAL, &default)?;
        if uncounted {
            crate::catalog::rules::count_storage(&guard.txn)?;
        }
        crate::catalog::storage::set_limits(&guard.txn, &config.hosted)?;
        guard.commit()?;
        let worker = crate::services::delivery::Worker::new(
            Arc::clone(&store),
            &config.callbacks,
            &config.hosted,
            &sql.net.egress,
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
        Ok(Engine {
            inner: Arc::new(Inner {
                id,
                config,
                sql,
                runtime: Some(runtime),
                handle,
                sweeper,
            }),
            tenant: TenantId::LOCAL,
            interrupts: Interrupts::new(),
        })
    }

    /// The configuration the engine was opened with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The memory account of one request of this handle's user (see [`RequestMemory`]): a
    /// front runs the reading of a request's body, its handling and its answer in it. Under
    /// the user's plan and `query.statement_memory_mb`; the local user, without a plan, has
    /// one only when `query.statement_memory_mb` is set. A catalog that cannot be read counts
    /// the request toward no plan (the statements it starts fail on the same read).
    ///
    /// [`RequestMemory`]: crate::RequestMemory
    pub fn request_memory(&self) -> crate::memory::RequestMemory {
        let parent = self.inner.sql.tenant_memory(self.tenant).unwrap_or(None);
        crate::memory::RequestMemory::open(self.inner.config.statement_memory_bytes(), parent)
    }

    /// Runs a request. Work happens on the engine's runtime, so this can be awaited from any
    /// executor; a table result's stream also runs its tasks there.
    pub async fn query(&self, request: QueryRequest) -> QueryResult {
        self.query_as(self.tenant, request).await
    }

    /// Runs a request as `tenant` (the hosted edition's entry point). A caller already on
    /// the engine's runtime (the HTTP server serves from it) runs the request in place; others
    /// hand it to the runtime, which costs a task and a cross-thread wake-up per request.
    /// Either way, dropping the returned future stops the statement.
    pub(crate) async fn query_as(&self, tenant: TenantId, request: QueryRequest) -> QueryResult {
        let context = self.inner.sql.request_context(&request);
        let control = Control::new(
            self.inner.config.statement_limit(request.timeout),
            &self.interrupts,
        );
        let run = Self::run(Arc::clone(&self.inner), tenant, request, control);
        let joined = if RUNTIME_OF.with(Cell::get) == self.inner.id {
            // The same guard a spawned task has: a panic becomes an error result.
            std::panic::AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .map_err(|panic| panic_message(&*panic))
        } else {
            let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, run));
            (&mut task.0).await.map_err(|e| e.to_string())
        };
        joined.unwrap_or_else(|e| {
            QueryResult::failed(context, Error::internal(format!("query task failed: {e}")))
        })
    }

    /// Runs a request on the engine's runtime under `control`, in one of the tenant's places
    /// for running statements (held until a table result is read or dropped); a table result's
    /// stream keeps running there whoever polls it.
    async fn run(
        inner: Arc<Inner>,
        tenant: TenantId,
        request: QueryRequest,
        control: Control,
    ) -> QueryResult {
        let context = inner.sql.request_context(&request);
        let (ticket, tenant_memory) = match inner.sql.admit_statement(tenant) {
            Ok(admitted) => admitted,
            Err(e) => return QueryResult::failed(context, e),
        };
        let control = control.with_memory(inner.config.statement_memory_bytes(), tenant_memory);
        let ran = control
            .run(async { Ok(inner.sql.run(tenant, &request).await) })
            .await;
        let mut result = ran.unwrap_or_else(|stopped| QueryResult::failed(context, stopped));
        result.document_limit = Some(inner.config.max_document_bytes());
        if let Outcome::Table(table) = result.outcome {
            let in_runtime = Box::pin(RecordBatchStreamAdapter::new(
                table.stream.schema(),
                InRuntime {
                    inner: table.stream,
                    handle: inner.handle.clone(),
                    failed: false,
                },
            ));
            result.outcome = Outcome::Table(TableResult {
                column_names: table.column_names,
                stream: control.guard(in_runtime, ticket),
            });
        }
        result
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
        let (ticket, tenant_memory) = self.inner.sql.admit_statement(self.tenant)?;
        let control = Control::new(self.inner.config.statement_limit(None), &self.interrupts)
            .with_memory(self.inner.config.statement_memory_bytes(), tenant_memory);
        Ok((control, ticket))
    }

    /// Whether a transaction (`BEGIN`) is open: until `COMMIT` or `ROLLBACK`, writes are seen
    /// only here and are lost if the process ends; closing the engine rolls it back.
    pub fn in_transaction(&self) -> bool {
        self.inner.sql.store.in_transaction()
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
        self.inner.sql.admission.throttle_unauthenticated(client)
    }

    /// [`Engine::query`] for callers outside async code. Must not be called from inside an async task.
    pub fn query_blocking(&self, request: QueryRequest) -> QueryResult {
        self.block_on(self.query(request))
    }

    /// Runs `sql` in the default project and reads the whole result.
    pub async fn sql(&self, sql: &str) -> Result<Collected> {
        self.query(QueryRequest::new(sql)).await.collect().await
    }

    /// Appends record batches to the stored table `db.table`, in one transaction: all rows or
    /// none. Columns are matched by position and cast to the table's types; returns the rows written.
    pub async fn insert_batches(
        &self,
        db: &str,
        table: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let schema = match batches.first() {
            Some(batch) => batch.schema(),
            None => Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        };
        self.load(Some(db), table, schema, batches, LoadMode::Append)
            .await
    }

    /// Loads record batches into the stored table `table` of project `db` (the default project
    /// when `None`), in one transaction: all rows or none. [`LoadMode`] says whether the table
    /// is appended to, created with `schema`'s columns, or replaced. Returns the rows written.
    pub async fn load(
        &self,
        db: Option<&str>,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        mode: LoadMode,
    ) -> Result<u64> {
        let (control, _ticket) = self.statement_control()?;
        if RUNTIME_OF.with(Cell::get) == self.inner.id {
            // In place, so a caller that drops this future cancels the load.
            let load = self
                .inner
                .sql
                .load(self.tenant, db, table, schema, batches, mode);
            return control.run(load).await;
        }
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let (db, table) = (db.map(str::to_string), table.to_string());
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            let load = inner
                .sql
                .load(tenant, db.as_deref(), &table, schema, batches, mode);
            control.run(load).await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("load task failed: {e}")))?
    }

    /// [`Engine::sql`] for callers outside async code.
    pub fn sql_blocking(&self, sql: &str) -> Result<Collected> {
        self.block_on(self.sql(sql))
    }

    /// The engine's status in MindsDB's shape (`GET /api/status`); `authenticated` says whether
    /// the caller showed a valid token, which MindsDB reports as `auth.confirmed`.
    pub fn status(&self, authenticated: bool) -> Status {
        status::status(&self.inner.config, authenticated)
    }

    /// Whether callers must log in (and send the token) before anything else.
    pub fn auth_required(&self) -> bool {
        auth::required(&self.inner.config)
    }

    /// Checks a username and password and issues a bearer token valid for
    /// `auth.token_lifetime_secs`. The local edition checks the configured ones; the hosted
    /// edition takes a user's name with one of its API keys as the password, and the token
    /// acts as that user. Missing or empty fields are [`ErrorKind::InvalidInput`](crate::ErrorKind),
    /// wrong ones [`ErrorKind::Unauthorized`](crate::ErrorKind).
    pub async fn login(
        &self,
        username: Option<&str>,
        password: Option<&str>,
    ) -> Result<LoginToken> {
        let config = &self.inner.config;
        let tenant = match config.edition {
            crate::config::Edition::Local => {
                auth::check_credentials(&config.auth, username, password)?;
                self.tenant
            }
            crate::config::Edition::Hosted => self.user_login(username, password)?,
        };
        let lifetime = config.auth.token_lifetime_secs;
        self.inner
            .sql
            .store
            .write(move |txn| auth::issue(txn, tenant, lifetime))
            .await
    }

    /// The tenant a bearer token belongs to, or [`ErrorKind::Unauthorized`](crate::ErrorKind)
    /// for a token that is unknown, revoked or expired.
    pub fn verify_token(&self, token: &str) -> Result<TenantId> {
        auth::verify(&self.inner.sql.store.read()?, token)
    }

    /// Revokes a bearer token; returns whether it was live. Revoking an unknown, expired or
    /// revoked token is no error and writes nothing (it is checked on a read snapshot first).
    pub async fn logout(&self, token: &str) -> Result<bool> {
        if auth::verify(&self.inner.sql.store.read()?, token).is_err() {
            return Ok(false);
        }
        let token = token.to_string();
        self.inner
            .sql
            .store
            .write(move |txn| auth::revoke(txn, &token))
            .await
    }

    /// The projects, by name.
    pub fn list_projects(&self) -> Result<Vec<Project>> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        projects::list(&txn.open_table(PROJECTS)?, tenant)
    }

    /// One project by name (case-insensitive), or [`ErrorKind::NotFound`](crate::ErrorKind).
    pub fn get_project(&self, name: &str) -> Result<Project> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        projects::get(&txn.open_table(PROJECTS)?, tenant, name)?.ok_or_else(|| {
            Error::not_found(format!("Project '{name}' does not exist"))
                .about(crate::error::Subject::Project)
        })
    }

    /// Creates an agent in `project` from MindsDB's request body (`{"name", "model", "data",
    /// "prompt_template", "params"}`, or the legacy top-level `model_name` and `provider`).
    /// Without a model the configured default is recorded. Errors: an unknown project is
    /// [`ErrorKind::NotFound`](crate::ErrorKind), a taken name `Conflict`; a missing name, a
    /// parameter outside MindsDB's set or a table that does not exist `InvalidInput`.
    pub async fn create_agent(&self, project: &str, spec: serde_json::Value) -> Result<Agent> {
        let tenant = self.tenant;
        let spec = body_object(spec)?;
        let (project, llm) = (project.to_string(), self.inner.config.llm.clone());
        let egress = self.inner.sql.net.egress.clone();
        let created = self
            .inner
            .sql
            .store
            .write(move |txn| agents::create(txn, tenant, &project, &spec, &llm, false, &egress))
            .await?;
        created.ok_or_else(|| Error::internal("an agent was not created and no error said why"))
    }

    /// The agents of `project`, by name.
    pub fn list_agents(&self, project: &str) -> Result<Vec<Agent>> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        require_project(&txn, tenant, project)?;
        agents::list(&txn.open_table(AGENTS)?, tenant, Some(project))
    }

    /// One agent by name (case-insensitive).
    pub fn get_agent(&self, project: &str, name: &str) -> Result<Agent> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        require_project(&txn, tenant, project)?;
        agents::get_in(&txn.open_table(AGENTS)?, tenant, project, name)?
            .ok_or_else(|| agents::agent_missing(name))
    }

    /// Updates an agent as MindsDB's PUT does: shallow merge of the body into its params, a
    /// null dropping a key, a different `name` renaming it (`Conflict` when taken). A missing
    /// agent is `NotFound`: update never creates.
    pub async fn update_agent(
        &self,
        project: &str,
        name: &str,
        changes: serde_json::Value,
    ) -> Result<Agent> {
        let tenant = self.tenant;
        let changes = body_object(changes)?;
        let (project, name) = (project.to_string(), name.to_string());
        let egress = self.inner.sql.net.egress.clone();
        self.inner
            .sql
            .store
            .write(move |txn| agents::update(txn, tenant, &project, &name, &changes, &egress))
            .await
    }

    /// Deletes an agent.
    pub async fn delete_agent(&self, project: &str, name: &str) -> Result<()> {
        let tenant = self.tenant;
        let (project, name) = (project.to_string(), name.to_string());
        self.inner
            .sql
            .store
            .write(move |txn| agents::delete(txn, tenant, &project, &name, false))
            .await
            .map(|_| ())
    }

    /// Asks an agent. `messages` is a completion request's list: `[{"role", "content"}]` or
    /// the legacy `[{"question", "answer"}]`. A provider failure or timeout is
    /// [`ErrorKind::Upstream`](crate::ErrorKind) with the provider's message. For a user of
    /// the hosted edition the question counts against the plan's quota (unless it fails
    /// before the provider was called).
    pub async fn ask_agent(
        &self,
        project: &str,
        name: &str,
        messages: &serde_json::Value,
    ) -> Result<Answer> {
        let agent = self.get_agent(project, name)?;
        let messages = answer::read_messages(messages)?;
        self.answer(agent, messages).await
    }

    /// Answers `messages` with `agent`, the question counted against the tenant's quota first
    /// and given back if answering fails before the provider was called.
    pub(crate) async fn answer(
        &self,
        agent: Agent,
        messages: Vec<serde_json::Value>,
    ) -> Result<Answer> {
        let question = self.take_question().await?;
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let task = async move {
            Asker::new(&inner.sql, &inner.config, tenant)
                .answer_counted(question, &agent, messages, None)
                .await
        };
        // Aborted when the caller stops waiting (a dropped request, Ctrl-C in Python), so a
        // question nobody waits for stops calling the provider.
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, task));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("agent task failed: {e}")))?
    }

    /// Asks an agent and follows the answer as it forms: queries it runs, their results, and
    /// the answer's text piece by piece, always ending with [`AgentEvent::End`]. Errors found
    /// before anything runs (unknown agent, bad messages, a question over quota) are returned
    /// here; later ones come as [`AgentEvent::Error`] followed by the end.
    pub async fn ask_agent_stream(
        &self,
        project: &str,
        name: &str,
        messages: &serde_json::Value,
    ) -> Result<AgentStream> {
        let agent = self.get_agent(project, name)?;
        let messages = answer::read_messages(messages)?;
        self.answer_stream(agent, messages).await
    }

    /// [`Engine::answer`], followed as it forms. The events wait in a small buffer: a reader
    /// that stops reading pauses the agent (and its provider stream) instead of filling memory.
    pub(crate) async fn answer_stream(
        &self,
        agent: Agent,
        messages: Vec<serde_json::Value>,
    ) -> Result<AgentStream> {
        let question = self.take_question().await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(answer::EVENT_BUFFER);
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let task = crate::memory::spawn_on(&self.inner.handle, async move {
            let answer = Asker::new(&inner.sql, &inner.config, tenant)
                .answer_counted(question, &agent, messages, Some(&sender))
                .await;
            if let Err(e) = answer {
                let _ = sender
                    .send(AgentEvent::Error(e.message().to_string()))
                    .await;
            }
            let _ = sender.send(AgentEvent::End).await;
        });
        Ok(AgentStream::new(receiver, task))
    }

    /// Every version of every model of `project`, by name and version.
    pub fn list_models(&self, project: &str) -> Result<Vec<Model>> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        require_project(&txn, tenant, project)?;
        let versions = models::list(&txn.open_table(MODELS)?, tenant, Some(project))?;
        Ok(versions.into_iter().map(Model).collect())
    }

    /// One model's version, or its active version when `version` is `None`.
    pub fn get_model(&self, project: &str, name: &str, version: Option<u32>) -> Result<Model> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        require_project(&txn, tenant, project)?;
        let found = models::find(&txn.open_table(MODELS)?, tenant, project, name, version)?;
        found.map(Model).ok_or_else(|| match version {
            None => models::model_missing(project, name),
            Some(v) => models::version_missing(project, name, v),
        })
    }

    /// Runs one `CREATE MODEL` statement with `project` as the current database; returns the
    /// new version (status `generating`; training goes on in the background).
    pub async fn create_model(&self, project: &str, statement: &str) -> Result<Model> {
        let tenant = self.tenant;
        self.get_project(project)?;
        let inner = Arc::clone(&self.inner);
        let (project, statement) = (project.to_string(), statement.to_string());
        crate::memory::spawn_on(&self.inner.handle, async move {
            inner
                .sql
                .create_model_from_sql(tenant, &project, &statement)
                .await
        })
        .await
        .map_err(|e| Error::internal(format!("model task failed: {e}")))?
        .map(Model)
    }

    /// Adds a version of a model, trained from `query` (a SELECT run in `data_db`, the project
    /// itself when `None`) or from the latest version's query when `query` is `None`; returns
    /// it (status `generating`, made active when training completes). An LLM model's new
    /// version keeps its settings.
    pub async fn retrain_model(
        &self,
        project: &str,
        name: &str,
        query: Option<&str>,
        data_db: Option<&str>,
    ) -> Result<Model> {
        let tenant = self.tenant;
        self.get_model(project, name, None)?;
        let from = match (query, data_db) {
            (Some(query), db) => Some((
                db.unwrap_or(project).to_ascii_lowercase(),
                query.to_string(),
            )),
            (None, None) => None,
            (None, Some(db)) => {
                return Err(Error::invalid(format!(
                    "a database to train from ('{db}') needs a query to run in it"
                )))
            }
        };
        let inner = Arc::clone(&self.inner);
        let (project, name) = (project.to_ascii_lowercase(), name.to_string());
        crate::memory::spawn_on(&self.inner.handle, async move {
            inner
                .sql
                .retrain_model(tenant, project, name, from, Default::default())
                .await
        })
        .await
        .map_err(|e| Error::internal(format!("model task failed: {e}")))?
        .map(Model)
    }

    /// Makes a complete version of a model the active one (the one predictions use).
    pub async fn set_active_model(&self, project: &str, name: &str, version: u32) -> Result<Model> {
        let tenant = self.tenant;
        let (owned_project, owned_name) = (project.to_ascii_lowercase(), name.to_string());
        self.inner
            .sql
            .set_active_model(tenant, owned_project, owned_name, version)
            .await?;
        self.get_model(project, name, Some(version))
    }

    /// Drops a model (every version), or one version of it.
    pub async fn drop_model(&self, project: &str, name: &str, version: Option<u32>) -> Result<()> {
        let tenant = self.tenant;
        self.get_model(project, name, version)?;
        let (project, name) = (project.to_string(), name.to_string());
        let object = match version {
            Some(v) => Object::model_version(tenant, &project, &name, v),
            None => Object::model(tenant, &project, &name),
        };
        // Its trainings stop at once (and give their users' places back).
        self.inner
            .sql
            .store
            .write_dropping(object, move |txn| {
                models::drop_model(txn, tenant, &project, &name, version, false)
            })
            .await
            .map(|_| ())
    }

    /// Uploads a file as the table `files.<name>`: CSV with a header line, or JSON (an array
    /// of objects, or one object per line), column types inferred. `format` as given, else
    /// from `file_name`'s extension, else from the first bytes. All rows or none; Conflict
    /// when a file of that name exists. Returns the rows stored.
    pub async fn upload_file(
        &self,
        name: &str,
        bytes: Vec<u8>,
        format: Option<FileFormat>,
        file_name: Option<&str>,
    ) -> Result<u64> {
        let tenant = self.tenant;
        let inner = Arc::clone(&self.inner);
        let (name, file_name) = (name.to_string(), file_name.map(str::to_string));
        let (control, _ticket) = self.statement_control()?;
        // Aborted when the caller stops waiting or the statement's time is up, so an abandoned
        // upload stops being read and writes nothing (once its transaction is committing, it
        // completes).
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            let upload = inner
                .sql
                .upload_file(tenant, &name, bytes, format, file_name);
            control.run(upload).await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("upload task failed: {e}")))?
    }

    /// Every uploaded file, by name.
    pub fn list_files(&self) -> Result<Vec<FileInfo>> {
        let tenant = self.tenant;
        self.inner.sql.list_files(tenant)
    }

    /// Removes the uploaded file `name` (NotFound when there is none).
    pub async fn delete_file(&self, name: &str) -> Result<()> {
        let tenant = self.tenant;
        self.inner.sql.delete_file(tenant, name).await
    }

    /// Predicts with a model's version (or its active one) for `rows`: a list of `{column:
    /// value}` objects, or that list as JSON text. Returns the rows with the prediction filled
    /// in; "model creation not completed" unless the version is complete. An LLM model calls
    /// its provider once per row.
    pub async fn predict(
        &self,
        project: &str,
        name: &str,
        version: Option<u32>,
        rows: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let tenant = self.tenant;
        let model = self.get_model(project, name, version)?;
        let (inner, rows) = (Arc::clone(&self.inner), rows.clone());
        let (control, _ticket) = self.statement_control()?;
        // On the engine's runtime: provider calls need its reactor whatever runtime awaits this.
        // Aborted when the caller stops waiting or the statement's time is up, so nobody's
        // prediction keeps calling a provider.
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            control
                .run(inner.sql.predict_rows(tenant, &model.0, &rows))
                .await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("prediction task failed: {e}")))?
    }

    /// Closes this handle. When it is the last one, the runtime is shut down first, waiting up
    /// to 10 s for tasks of cancelled queries to stop, so that the database file is closed (and
    /// can be opened again) when this returns; otherwise the other handles keep it open. Called
    /// from async code it cannot wait, and the file closes shortly after.
    pub fn close(self) {
        let Ok(mut inner) = Arc::try_unwrap(self.inner) else {
            return;
        };
        if Handle::try_current().is_err() {
            if let Some(runtime) = inner.runtime.take() {
                runtime.shutdown_timeout(std::time::Duration::from_secs(10));
            }
        }
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
        &self.inner.sql.store
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
    let table = txn.open_table(PROJECTS)?;
    match projects::get(&table, tenant, project)? {
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
