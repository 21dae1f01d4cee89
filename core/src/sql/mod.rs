//! The relational engine: a request's statements, parsed (MindsDB's database statements on
//! tokens, the rest by sqlparser), planned by DataFusion against the tenant's catalog at one
//! read snapshot, and run. Results stream as Arrow record batches;
//! [`encode`](crate::sql::encode) turns them into MindsDB's wire formats.
//!
//! Here: [`SqlRunner`](crate::sql::SqlRunner), which runs a request's statements. What is
//! asked and answered is `request`; writes to datasources and loads of batches are `load`;
//! the catalog DataFusion plans against is `snapshot`, stored-table writes `dml`, uploads
//! `uploads`. MindsDB's AI objects (models, knowledge bases, agents: `crate::ai`) plug in
//! through `extension`, which is all this module knows of them.

pub(crate) mod bounded;
pub(crate) mod coerce;
pub(crate) mod constraints;
pub(crate) mod dml;
pub mod encode;
pub(crate) mod extension;
pub(crate) mod index_scan;
pub(crate) mod join_stop;
pub(crate) mod load;
pub(crate) mod names;
pub(crate) mod order;
pub(crate) mod parse;
pub(crate) mod plan_cache;
pub(crate) mod request;
pub(crate) mod session;
pub(crate) mod snapshot;
pub(crate) mod sort_keys;
pub(crate) mod spill_shares;
pub(crate) mod transaction;
pub(crate) mod unnest;
pub(crate) mod uploads;
pub(crate) mod upsert;
pub(crate) mod view_groups;

pub(crate) use self::load::{BatchSource, LoadTarget};
pub use self::request::{
    LoadMode, Outcome, QueryContext, QueryRequest, QueryResult, ResultContext, TableResult,
    TypedParam,
};
use crate::catalog::namespace::{FILES_DB, INFO_TABLES};

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::sqlparser::ast::{ObjectName, ObjectType, Statement};

use self::extension::Extensions;
use self::parse::Command;
use self::plan_cache::{PlanCache, PlanKey};
use self::session::{Session, Sessions};
use self::snapshot::{Namespace, Snapshot};
use crate::catalog::datasources;
use crate::catalog::projects;
use crate::catalog::tables;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tenant::TenantId;

/// How often a statement refused for storage while its user's leftovers were being swept
/// looks whether they are gone.
const SWEEP_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long such a statement waits for the sweep at most before its refusal stands: a large
/// DROP's sweep yields to every writer, and a write that waits longer is better told.
const SWEEP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Statements that waited for a sweep after a storage refusal, by store (tests).
#[cfg(test)]
pub(crate) mod sweep_waits {
    use std::collections::HashMap;
    use std::sync::LazyLock;

    use parking_lot::Mutex;

    use crate::store::Store;

    static WAITS: LazyLock<Mutex<HashMap<usize, usize>>> = LazyLock::new(Default::default);

    pub(crate) fn waited(store: &Store) {
        *WAITS
            .lock()
            .entry(std::ptr::from_ref(store) as usize)
            .or_default() += 1;
    }

    /// How many statements of `store`'s engine waited for a sweep so far.
    pub(crate) fn of(store: &Store) -> usize {
        WAITS
            .lock()
            .get(&(std::ptr::from_ref(store) as usize))
            .copied()
            .unwrap_or(0)
    }
}

/// How a write statement runs (see `dml`): first computing its change from a snapshot with
/// no lock held; when other writes changed its target meanwhile, again as its table's sole
/// writer; should even that be overtaken, holding the writer lock from before its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Optimistic,
    SoleWriter,
    WriterLock,
}

/// Runs SQL for the engine.
pub(crate) struct SqlRunner {
    pub(crate) store: Arc<Store>,
    /// The engine's configuration (agents read the default model and their limits here).
    pub(crate) config: crate::Config,
    /// Connections to LLM providers, shared by every agent.
    pub(crate) client: crate::egress::HttpClient,
    /// Embedding models run in process, loaded once for all statements.
    pub(crate) sentence_models: Arc<crate::services::sentence_models::SentenceModels>,
    /// How outbound connections reach out (the egress policy) and what datasources may send.
    pub(crate) net: crate::services::connectors::Net,
    /// Per-user caps on work running at once, and the limit on unauthenticated requests.
    pub(crate) admission: Arc<crate::admission::Admission>,
    sessions: Arc<Sessions>,
    /// The features plugged into the engine (see `extension`), in the order they are asked.
    pub(crate) extensions: Extensions,
    /// Where statements are parsed and planned: never on an async worker.
    pub(crate) compute: crate::compute::Compute,
    plans: PlanCache,
    default_project: String,
    pub(crate) target_partitions: usize,
}

impl SqlRunner {
    pub(crate) fn new(
        store: Arc<Store>,
        config: &crate::Config,
        extensions: Extensions,
    ) -> Result<Self> {
        let target_partitions = match config.query.target_partitions {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            n => n,
        };
        let memory = usize::try_from(config.memory_limit_bytes()).unwrap_or(usize::MAX);
        // Operators that outgrow the pool spill to files in the OS temp directory, within
        // `query.max_spill_mb` for all statements together (writes stage there too).
        let disk =
            DiskManagerBuilder::default().with_max_temp_directory_size(config.max_spill_bytes());
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(memory)))
            .with_disk_manager_builder(disk)
            .build_arc()?;
        let net = crate::services::connectors::Net::new(config)?;
        let client = net
            .egress
            .http_client(concat!("mindlite/", env!("CARGO_PKG_VERSION")))?;
        let sentence_models = Arc::new(crate::services::sentence_models::SentenceModels::new(
            config,
        ));
        let connector =
            crate::services::llm::Connector::new(client.clone(), config, &store, &sentence_models);
        Ok(SqlRunner {
            store,
            config: config.clone(),
            client,
            sentence_models,
            net: net.clone(),
            admission: Arc::new(crate::admission::Admission::new(
                &config.hosted,
                config.unauthenticated_per_minute(),
            )),
            sessions: Arc::new(Sessions::new(
                runtime,
                config.query.batch_size.max(1),
                connector,
                net.clone(),
                &config.hosted,
                config.max_value_bytes(),
                &extensions,
            )),
            extensions,
            compute: crate::compute::Compute::new(config.planning_threads())?,
            plans: PlanCache::new(config.query.plan_cache_entries),
            default_project: config.query.default_project.to_ascii_lowercase(),
            target_partitions,
        })
    }

    /// What LLM models call through: the shared client and the configured default model.
    pub(crate) fn connector(&self) -> crate::services::llm::Connector {
        crate::services::llm::Connector::new(
            self.client.clone(),
            &self.config,
            &self.store,
            &self.sentence_models,
        )
    }

    /// A place for `work` by `tenant` under its plan's cap; `None` for the local tenant, which
    /// has no plan.
    pub(crate) fn admit(
        &self,
        tenant: TenantId,
        work: crate::admission::Work,
    ) -> Result<Option<crate::admission::Ticket>> {
        if tenant == TenantId::LOCAL {
            return Ok(None);
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        self.admission
            .admit(tenant, plan.as_deref(), work)
            .map(Some)
    }

    /// A place for a statement by `tenant` under its plan's cap, and the memory account its
    /// statements share (both `None` for the local tenant, which has no plan).
    pub(crate) fn admit_statement(
        &self,
        tenant: TenantId,
    ) -> Result<(
        Option<crate::admission::Ticket>,
        Option<Arc<crate::memory::Account>>,
    )> {
        if tenant == TenantId::LOCAL {
            return Ok((None, None));
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        let ticket =
            self.admission
                .admit(tenant, plan.as_deref(), crate::admission::Work::Statement)?;
        let memory = self.admission.tenant_memory(tenant, plan.as_deref());
        Ok((Some(ticket), memory))
    }

    /// The memory account `tenant`'s work shares (its plan's `max_memory_mb`); `None` for the
    /// local user or a plan without one.
    pub(crate) fn tenant_memory(
        &self,
        tenant: TenantId,
    ) -> Result<Option<Arc<crate::memory::Account>>> {
        if tenant == TenantId::LOCAL {
            return Ok(None);
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        Ok(self.admission.tenant_memory(tenant, plan.as_deref()))
    }

    /// The default project's name.
    pub(crate) fn default_project(&self) -> &str {
        &self.default_project
    }

    /// The context a request starts in: its database, or the default project.
    pub(crate) fn request_context(&self, request: &QueryRequest) -> ResultContext {
        ResultContext {
            show_secrets: request.context.show_secrets,
            db: request
                .context
                .db
                .clone()
                .unwrap_or_else(|| self.default_project.clone()),
        }
    }

    /// Runs every statement of `request` in order and returns the last result; the first
    /// failure stops the request and is its result.
    pub(crate) async fn run(&self, tenant: TenantId, request: &QueryRequest) -> QueryResult {
        let mut context = self.request_context(request);
        // Read before anything else: a plan kept now is current only while no commit follows.
        let generation = self.store.commits();
        let key = PlanKey::new(tenant, &context.db, request);
        // An aborted transaction refuses statements below; a cached plan must not slip past.
        let aborted = self.store.check_not_aborted().is_err();
        if let Some(cached) = key
            .as_ref()
            .filter(|_| !aborted)
            .and_then(|key| self.plans.get(key, generation))
        {
            // A plan that cannot run again is planned afresh below.
            if let Ok(outcome) = self.run_cached(tenant, &cached) {
                return QueryResult {
                    context,
                    outcome,
                    document_limit: None,
                };
            }
        }
        let outcome = match self.parse(tenant, request).await {
            Err(e) => Outcome::Error(e),
            Ok(commands) if request.one_statement && commands.len() > 1 => {
                Outcome::Error(Error::invalid(format!(
                    "The query holds {} statements; send one statement per request",
                    commands.len()
                )))
            }
            Ok(commands) => {
                // Only a request of one statement is keyed by its whole text.
                let mut cache = key
                    .filter(|_| commands.len() == 1)
                    .map(|key| (key, generation));
                let mut last = Outcome::Ok {
                    affected_rows: None,
                };
                for command in commands {
                    if let Command::Sql(statement) = &command {
                        if let Some(steps) = transaction::steps_of(statement) {
                            let step = match steps {
                                Ok(steps) => self.transaction(request, statement, steps).await,
                                Err(e) => Err(e),
                            };
                            match step {
                                Ok(outcome) => last = outcome,
                                Err(e) => {
                                    last = Outcome::Error(e);
                                    break;
                                }
                            }
                            continue;
                        }
                    }
                    if let Err(e) = self.store.check_not_aborted() {
                        last = Outcome::Error(e);
                        break;
                    }
                    // Boxed: planning's future is large, and this one is copied into each
                    // layer around it; a cached plan (above) then costs no copy of it at all.
                    let executing =
                        Box::pin(self.execute(tenant, &mut context, command, cache.take()));
                    match executing.await {
                        Ok(outcome) => last = outcome,
                        Err(e) => {
                            // Inside a transaction, as in DuckDB: it is aborted.
                            self.store.abort_transaction(e.message());
                            last = Outcome::Error(e);
                            break;
                        }
                    }
                }
                last
            }
        };
        if self.store.commits() != generation {
            self.plans.clear();
        }
        QueryResult {
            context,
            outcome,
            document_limit: None,
        }
    }

    /// The statements of `request`. A short request (most are) is parsed in place: its cost is
    /// bounded by its size; a longer one, or one with list parameters to expand, on the pool.
    async fn parse(&self, tenant: TenantId, request: &QueryRequest) -> Result<Vec<Command>> {
        const IN_PLACE: usize = 4096;
        let lists = request.params.values().any(serde_json::Value::is_array);
        if request.query.len() <= IN_PLACE && !lists && request.typed_params.is_empty() {
            return parse::parse_limited(
                &request.query,
                &request.params,
                &request.typed_params,
                parse::ShapeLimits::of(&self.config.query),
                &self.extensions,
            );
        }
        let (query, params, typed) = (
            request.query.clone(),
            request.params.clone(),
            request.typed_params.clone(),
        );
        let limits = parse::ShapeLimits::of(&self.config.query);
        let extensions = Arc::clone(&self.extensions);
        self.compute
            .run(tenant, move || {
                parse::parse_limited(&query, &params, &typed, limits, &extensions)
            })
            .await?
    }

    /// Runs planning work (`work`: planning a statement, optimizing, making its physical plan)
    /// for `tenant` on the pool, not on an async worker; it awaits what it must (table
    /// resolution) on the engine's runtime.
    async fn plan_on_pool<F>(&self, tenant: TenantId, work: F) -> Result<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.compute
            .run_async(tenant, tokio::runtime::Handle::current(), work)
            .await
    }

    fn run_cached(&self, tenant: TenantId, cached: &plan_cache::CachedPlan) -> Result<Outcome> {
        let task_ctx = self.sessions.task_ctx_of(tenant, || {
            crate::catalog::users::plan_in(&self.store.read()?, tenant)
        })?;
        let stream = order::execute(cached.plan()?, task_ctx)?;
        Ok(Outcome::Table(TableResult {
            column_names: cached.column_names.clone(),
            stream,
        }))
    }

    pub(crate) fn session(
        &self,
        snapshot: Arc<Snapshot>,
        db: &str,
        partitions: usize,
    ) -> Result<Session> {
        self.sessions.take(snapshot, db, partitions)
    }

    async fn execute(
        &self,
        tenant: TenantId,
        context: &mut ResultContext,
        command: Command,
        cache: Option<(PlanKey, u64)>,
    ) -> Result<Outcome> {
        let ok = |affected_rows| Ok(Outcome::Ok { affected_rows });
        match command {
            Command::CreateProject {
                name,
                if_not_exists,
            } => {
                self.store
                    .write(move |txn| projects::create(txn, tenant, &name, if_not_exists))
                    .await?;
                ok(None)
            }
            Command::CreateDatasource {
                name,
                engine,
                parameters,
                if_not_exists,
            } => {
                // Connecting takes a while: done before the writer lock is taken.
                let edition = self.config.edition;
                let (engine, parameters) =
                    crate::services::connectors::check(&engine, parameters, edition, &self.net)
                        .await?;
                let hosted = self.config.hosted.clone();
                self.store
                    .write(move |txn| {
                        let new = datasources::NewDatasource {
                            name: &name,
                            engine: &engine,
                            parameters,
                            description: None,
                        };
                        datasources::create(txn, tenant, new, if_not_exists, &hosted)
                    })
                    .await?;
                ok(None)
            }
            Command::AlterDatasource { name, parameters } => {
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                let source = match snapshot.namespace(&name)? {
                    Some(Namespace::Datasource(source)) => source,
                    Some(_) => {
                        return Err(Error::invalid(format!(
                        "Database '{name}' is not a datasource: only datasources have PARAMETERS"
                    )))
                    }
                    None => return Err(Error::not_found(format!("Database '{name}' not found"))),
                };
                drop(snapshot);
                let parameters = datasources::changed_parameters(&source, &parameters);
                let (_, parameters) = crate::services::connectors::check(
                    &source.engine,
                    parameters,
                    self.config.edition,
                    &self.net,
                )
                .await?;
                self.store
                    .write(move |txn| {
                        datasources::set_parameters(txn, tenant, &source.name, parameters)
                    })
                    .await?;
                ok(None)
            }
            Command::DropProject { name, if_exists } => {
                let default = self.default_project.clone();
                // The trainings and knowledge-base inserts of its objects stop at once.
                let object = crate::running::Object::project(tenant, &name);
                self.store
                    .write_dropping(object, move |txn| {
                        crate::catalog::rules::drop_database(
                            txn, tenant, &name, if_exists, &default,
                        )
                    })
                    .await?;
                ok(None)
            }
            Command::Use(name) => {
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                if snapshot.namespace(&name)?.is_none() {
                    return Err(Error::not_found(format!("Database '{name}' not found")));
                }
                context.db = name.to_ascii_lowercase();
                ok(None)
            }
            Command::ShowDatabases { full } => {
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                let dbs = snapshot.databases(false)?;
                let mut columns = vec![(
                    "Database",
                    dbs.iter().map(|d| Some(d.name.clone())).collect::<Vec<_>>(),
                )];
                if full {
                    columns.push((
                        "TYPE",
                        dbs.iter().map(|d| Some(d.kind.to_string())).collect(),
                    ));
                    columns.push(("ENGINE", dbs.iter().map(|d| d.engine.clone()).collect()));
                }
                text_table(columns)
            }
            Command::ShowProjects => {
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                let names = snapshot
                    .projects()?
                    .into_iter()
                    .map(|p| Some(p.name))
                    .collect();
                text_table(vec![("project", names)])
            }
            Command::ShowTables { db, full } => {
                let db = db
                    .unwrap_or_else(|| context.db.clone())
                    .to_ascii_lowercase();
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                let named =
                    |names: Vec<String>, kind: &'static str| -> Vec<(String, &'static str)> {
                        names.into_iter().map(|name| (name, kind)).collect()
                    };
                let tables = match snapshot.namespace(&db)? {
                    None => return Err(Error::not_found(format!("Database '{db}' not found"))),
                    Some(Namespace::System) => {
                        named(INFO_TABLES.map(String::from).to_vec(), "SYSTEM VIEW")
                    }
                    Some(Namespace::Files) => named(
                        snapshot
                            .tables(FILES_DB)?
                            .into_iter()
                            .map(|t| t.name)
                            .collect(),
                        "BASE TABLE",
                    ),
                    Some(Namespace::Project(p)) => {
                        let mut tables = named(
                            snapshot
                                .tables(&p.name)?
                                .into_iter()
                                .map(|t| t.name)
                                .collect(),
                            "BASE TABLE",
                        );
                        tables.extend(named(
                            snapshot
                                .views(&p.name)?
                                .into_iter()
                                .map(|v| v.name)
                                .collect(),
                            "VIEW",
                        ));
                        tables.sort_by_key(|(name, _)| name.to_ascii_lowercase());
                        tables
                    }
                    Some(Namespace::Datasource(source)) => {
                        drop(snapshot);
                        named(
                            crate::services::connectors::Connection::of(&source, &self.net)?
                                .table_names()
                                .await?,
                            "BASE TABLE",
                        )
                    }
                };
                let header = format!("Tables_in_{db}");
                let mut columns = vec![(
                    header.as_str(),
                    tables
                        .iter()
                        .map(|(n, _)| Some(n.clone()))
                        .collect::<Vec<_>>(),
                )];
                if full {
                    columns.push((
                        "Table_type",
                        tables
                            .iter()
                            .map(|(_, kind)| Some(kind.to_string()))
                            .collect(),
                    ));
                }
                text_table(columns)
            }
            Command::Feature(statement) => statement.run(self, tenant, context).await,
            Command::Sql(mut statement) => {
                let mut rewritten = false;
                for extension in self.extensions.iter() {
                    rewritten |= extension
                        .rewrite(self, tenant, &context.db, &mut statement)
                        .await?;
                }
                if rewritten {
                    // A feature answered part of the statement: never reuse its plan.
                    let once = Turn::Optimistic;
                    return Box::pin(
                        self.execute_sql(tenant, context, *statement, None, once, false),
                    )
                    .await;
                }
                // Its future is large (planning, the write's job): boxed, so the futures that
                // await it stay small.
                Box::pin(self.execute_sql(
                    tenant,
                    context,
                    *statement,
                    cache,
                    Turn::Optimistic,
                    false,
                ))
                .await
            }
        }
    }

    /// `DESCRIBE a[.b[.c]]` of a table, as standard SQL has it (a feature that reads
    /// `DESCRIBE` itself hands over the names that are not its own).
    pub(crate) async fn describe_table(
        &self,
        tenant: TenantId,
        context: &mut ResultContext,
        parts: &[String],
    ) -> Result<Outcome> {
        let quoted: Vec<String> = parts
            .iter()
            .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
            .collect();
        let sql = format!("DESCRIBE {}", quoted.join("."));
        let statement = datafusion::sql::sqlparser::parser::Parser::new(
            &datafusion::sql::sqlparser::dialect::GenericDialect {},
        )
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_statement())
        .map_err(|e| Error::invalid(e.to_string()))?;
        Box::pin(self.execute_sql(tenant, context, statement, None, Turn::Optimistic, false)).await
    }

    /// A write's job over `snapshot`, planned in `state`; `held` is the writer lock when it
    /// was taken before the snapshot.
    pub(crate) fn job(
        &self,
        tenant: TenantId,
        db: &str,
        snapshot: Arc<Snapshot>,
        state: Session,
        held: Option<crate::store::WriteLock>,
        claim: Option<dml::Claim>,
    ) -> dml::WriteJob {
        dml::WriteJob {
            store: Arc::clone(&self.store),
            state,
            snapshot,
            tenant,
            db: db.to_string(),
            cancelled: tokio_util::sync::CancellationToken::new(),
            owns_target: held.is_some() || matches!(claim, Some(dml::Claim::Sole { .. })),
            may_land: held.is_none() && !self.store.in_transaction(),
            in_transaction: self.store.in_transaction(),
            held: parking_lot::Mutex::new(held),
            _claim: claim,
            staging_memory: usize::try_from(
                self.config
                    .query
                    .staging_memory_mb
                    .saturating_mul(1024 * 1024),
            )
            .unwrap_or(usize::MAX),
        }
    }

    /// Plans and runs one SQL statement. A write into the store computes its rows before it
    /// takes the writer lock (see `dml`); `turn` says how it runs when another write changed
    /// its target in between; `swept`, whether it runs again after waiting for a sweep (which
    /// it does once at most).
    async fn execute_sql(
        &self,
        tenant: TenantId,
        context: &mut ResultContext,
        mut statement: Statement,
        cache: Option<(PlanKey, u64)>,
        turn: Turn,
        swept: bool,
    ) -> Result<Outcome> {
        match &statement {
            Statement::CreateIndex(create) => {
                let (table, index) = constraints::index_of(create)?;
                let (project, table) = self.project_and_name(tenant, context, &table)?;
                let if_not_exists = create.if_not_exists;
                // Its entries are encoded before the writer lock is taken, like a write's rows.
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                let state = self.session(Arc::clone(&snapshot), &context.db, 1)?;
                self.job(tenant, &context.db, snapshot, state, None, None)
                    .run(move |job, handle| {
                        dml::create_index(job, handle, &project, &table, index, if_not_exists)
                    })
                    .await?;
                return Ok(Outcome::Ok {
                    affected_rows: None,
                });
            }
            Statement::CreateView(create) => {
                return self.create_view(tenant, context, create).await
            }
            Statement::Drop {
                object_type: ObjectType::View,
                if_exists,
                names,
                ..
            } => {
                let drop = crate::catalog::views::drop_view;
                return self
                    .drop_each(tenant, context, names, *if_exists, drop)
                    .await;
            }
            Statement::Drop {
                object_type: ObjectType::Index,
                if_exists,
                names,
                ..
            } => {
                let drop = tables::drop_index;
                return self
                    .drop_each(tenant, context, names, *if_exists, drop)
                    .await;
            }
            _ => {}
        }
        if let Statement::Insert(insert) = &statement {
            for extension in self.extensions.iter() {
                if let Some(rows) = extension.insert(self, tenant, context, insert).await? {
                    return Ok(Outcome::Ok {
                        affected_rows: Some(rows),
                    });
                }
            }
        }
        let mut hints = names::hints(&statement);
        names::distinct_output_names(&mut statement, &mut hints);
        parse::without_unary_plus(&mut statement);
        let writes = matches!(
            statement,
            Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
                | Statement::CreateTable(_)
                | Statement::Drop { .. }
                | Statement::Truncate(_)
        );
        let cache = if writes { None } else { cache };
        // A write into a datasource's table goes to the datasource: it takes no writer lock,
        // which would stop every other write while the network is waited on.
        let remote = match writes {
            true => self.remote_write(tenant, &statement, &context.db)?,
            false => None,
        };
        if remote.is_some() {
            self.outside_transaction("A write into a datasource")?;
        }
        let local_write = writes && remote.is_none();
        // The table the write claims from before its snapshot (see `dml::Claim`), when it
        // names one: shared, or alone when it runs again.
        let target = match turn {
            Turn::Optimistic | Turn::SoleWriter if local_write && !self.store.in_transaction() => {
                self.write_target(tenant, context, &statement)
            }
            _ => None,
        };
        let turn = match turn {
            Turn::SoleWriter if target.is_none() => Turn::WriterLock,
            turn => turn,
        };
        let again = (local_write && turn != Turn::WriterLock).then(|| statement.clone());
        let declared = constraints::take_declared(&mut statement);
        let conflict = constraints::take_conflict(&mut statement)?;
        // Awaited here, not on the write's blocking thread: writers queued behind a sole one
        // never fill the blocking pool that the sole one needs to run.
        let claim = match target {
            Some((project, name)) => {
                let lock = self
                    .store
                    .object_lock(&dml::table_key(tenant, &project, &name));
                Some(match turn {
                    Turn::SoleWriter => dml::Claim::Sole {
                        _guard: lock.write_owned().await,
                    },
                    _ => dml::Claim::Shared {
                        _guard: lock.read_owned().await,
                    },
                })
            }
            None => None,
        };
        let held = if local_write && turn == Turn::WriterLock {
            Some(self.store.lock_writes().await)
        } else {
            None
        };
        let snapshot =
            Snapshot::showing_secrets(Arc::clone(&self.store), tenant, context.show_secrets)?;
        // Rewrites keep row order, so they run on one partition.
        let partitions = match statement {
            Statement::Update(_) | Statement::Delete(_) => 1,
            _ => self.target_partitions,
        };
        let state = self.session(Arc::clone(&snapshot), &context.db, partitions)?;
        let df_statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        let planning = df_statement.clone();
        let (state, planned) = self
            .plan_on_pool(tenant, async move {
                let planned = state.statement_to_plan(planning).await;
                (state, planned)
            })
            .await?;
        let plan = match planned {
            Ok(plan) => plan,
            Err(e) => {
                return Err(self.explain_plan_error(
                    &state,
                    &snapshot,
                    &df_statement,
                    &context.db,
                    e,
                ))
            }
        };
        if let Some(target) = remote {
            drop(snapshot);
            return self.write_remote(state, plan, target).await;
        }
        let db = context.db.clone();
        let job = |state| self.job(tenant, &db, snapshot, state, held, claim);
        let staged = match plan {
            LogicalPlan::Dml(statement)
                if local_write && self.extensions.iter().any(|e| e.claims_write(&statement)) =>
            {
                let extension = self
                    .extensions
                    .iter()
                    .find(|e| e.claims_write(&statement))
                    .expect("one claims it: matched above");
                let write = extension.write(statement)?;
                job(state)
                    .run(move |job, handle| write(job, handle))
                    .await
                    .map(|staged| staged.map(Some))
            }
            LogicalPlan::Dml(statement) if local_write => job(state)
                .run(move |job, handle| dml::run_dml(job, handle, statement, conflict))
                .await
                .map(|staged| staged.map(Some)),
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) if local_write => {
                job(state)
                    .run(move |job, handle| dml::create_table(job, handle, create, hints, declared))
                    .await
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(drop)) if local_write => job(state)
                .run(move |job, handle| dml::drop_table(job, handle, drop))
                .await
                .map(|()| dml::Staged::Done(None)),
            other => return self.execute_plan(tenant, other, state, hints, cache).await,
        };
        let staged = match (staged, &again) {
            // Refused for storage while what this user dropped was still counted: again,
            // once, after the sweeper has removed it (the job, with its claim and snapshot,
            // is gone, so nothing of this statement holds the sweep up).
            (Err(refused), Some(_)) if refused.refused_for_storage() && !swept => {
                self.wait_for_sweep(tenant, refused).await?;
                let statement = again.expect("matched as Some");
                let rerun = self.execute_sql(tenant, context, statement, None, turn, true);
                return Box::pin(rerun).await;
            }
            (staged, _) => staged?,
        };
        match (staged, again) {
            (dml::Staged::Done(affected_rows), _) => Ok(Outcome::Ok { affected_rows }),
            // Its target changed while its rows were computed: again, as the table's sole
            // writer, and should even that be overtaken (by a write that takes no claim, such
            // as dropping the project), holding the writer lock.
            (dml::Staged::TargetChanged, Some(statement)) => {
                let next = match turn {
                    Turn::Optimistic => Turn::SoleWriter,
                    _ => Turn::WriterLock,
                };
                Box::pin(self.execute_sql(tenant, context, statement, None, next, swept)).await
            }
            (dml::Staged::TargetChanged, None) => Err(Error::internal(
                "a write's target changed while the writer lock was held",
            )),
        }
    }

    /// Waits until the sweeper has removed what `tenant` dropped (see `landing::sweeping`),
    /// for at most [`SWEEP_WAIT`]. Fails with `refused`, the storage refusal that made the
    /// statement wait, when nothing was left to sweep to begin with (then the refusal stands),
    /// when the sweep takes longer, inside an explicit transaction (the sweeper waits for it
    /// to end), or should the statement have to stop first.
    pub(crate) async fn wait_for_sweep(&self, tenant: TenantId, refused: Error) -> Result<()> {
        let sweeping = |store: &Store| crate::catalog::landing::sweeping(&store.read()?, tenant);
        if self.store.in_transaction() || !sweeping(&self.store)? {
            return Err(refused);
        }
        #[cfg(test)]
        sweep_waits::waited(&self.store);
        let until = std::time::Instant::now() + SWEEP_WAIT;
        loop {
            if crate::cancel::check().is_err() || std::time::Instant::now() >= until {
                return Err(refused);
            }
            // A read of the small landings table: the sweeper removes a step's worth at a
            // time, each its own commit, and nothing signals the last one to a statement.
            tokio::time::sleep(SWEEP_POLL).await;
            if !sweeping(&self.store)? {
                return Ok(());
            }
        }
    }

    /// `DROP VIEW|INDEX [IF EXISTS] a, b`: `drop` removes each named object of its project, in
    /// one transaction per name (as DROP TABLE does).
    async fn drop_each(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        names: &[ObjectName],
        if_exists: bool,
        drop: fn(&redb::WriteTransaction, TenantId, &str, &str, bool) -> Result<()>,
    ) -> Result<Outcome> {
        for name in names {
            let (project, object) = self.project_and_name(tenant, context, name)?;
            self.store
                .write(move |txn| drop(txn, tenant, &project, &object, if_exists))
                .await?;
        }
        Ok(Outcome::Ok {
            affected_rows: None,
        })
    }

    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] [project.]name [(columns)] AS query`: the
    /// query is planned now (so one that does not plan is refused here) and stored as text.
    async fn create_view(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        create: &datafusion::sql::sqlparser::ast::CreateView,
    ) -> Result<Outcome> {
        if create.materialized || create.temporary {
            return Err(Error::invalid(
                "CREATE MATERIALIZED or TEMPORARY VIEW is not supported: views are stored queries",
            ));
        }
        let (project, name) = self.project_and_name(tenant, context, &create.name)?;
        let columns: Vec<String> = create
            .columns
            .iter()
            .map(|c| c.name.value.clone())
            .collect();
        // Stored as planned: with the rewrites every statement gets (unary plus on text).
        let mut as_statement = Statement::Query(create.query.clone());
        parse::without_unary_plus(&mut as_statement);
        let query = as_statement.to_string();
        // Planned where the view lives, as it will be whenever it is read.
        let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
        let state = self
            .sessions
            .for_view(snapshot, (project.clone(), name.to_ascii_lowercase()));
        let mut checked = Statement::Query(create.query.clone());
        names::name_columns_as_written(&mut checked);
        let checked = datafusion::sql::parser::Statement::Statement(Box::new(checked));
        let (state, planned) = self
            .plan_on_pool(tenant, async move {
                let planned = state.statement_to_plan(checked).await;
                (state, planned)
            })
            .await?;
        let plan = planned.map_err(|e| {
            let e = Error::from(e);
            match e.message().starts_with("View '") {
                true => e,
                false => Error::invalid(format!("View '{name}': {}", e.message())),
            }
        })?;
        snapshot::rename_columns(plan, &columns, &name)?;
        drop(state);
        let view = crate::catalog::views::View {
            name,
            project,
            query,
            columns,
            created_at: crate::time::now_text(),
        };
        let (or_replace, if_not_exists) = (create.or_replace, create.if_not_exists);
        self.store
            .write(move |txn| {
                crate::catalog::rules::create_view(txn, tenant, view, or_replace, if_not_exists)
            })
            .await?;
        Ok(Outcome::Ok {
            affected_rows: None,
        })
    }

    /// The project and object a name like `[project.]name` refers to (the current database
    /// when it names none), checking that the database is a project.
    /// The stored table a write statement changes, as `(project, name)`, when it names one
    /// table of a project (`None` otherwise, and for names that do not resolve: the statement
    /// then reports them itself).
    fn write_target(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        statement: &Statement,
    ) -> Option<(String, String)> {
        use datafusion::sql::sqlparser::ast::{FromTable, TableFactor, TableObject};
        let relation = |factor: &TableFactor| match factor {
            TableFactor::Table { name, .. } => Some(name.clone()),
            _ => None,
        };
        let name = match statement {
            Statement::Insert(insert) => match &insert.table {
                TableObject::TableName(name) => Some(name.clone()),
                _ => None,
            },
            Statement::Update(update) => relation(&update.table.relation),
            Statement::Delete(delete) => match &delete.from {
                FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => {
                    match tables.as_slice() {
                        [table] => relation(&table.relation),
                        _ => None,
                    }
                }
            },
            Statement::CreateTable(create) => Some(create.name.clone()),
            // It renews a large table (see `tables::renew`), which sends writers landing rows
            // into it round again: its claim keeps it from overtaking their last turn.
            Statement::Truncate(truncate) => match truncate.table_names.as_slice() {
                [target] => Some(target.name.clone()),
                _ => None,
            },
            _ => None,
        }?;
        self.project_and_name(tenant, context, &name).ok()
    }

    fn project_and_name(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        name: &ObjectName,
    ) -> Result<(String, String)> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|part| {
                part.as_ident()
                    .map(|ident| match ident.quote_style {
                        Some(_) => ident.value.clone(),
                        None => ident.value.to_ascii_lowercase(),
                    })
                    .ok_or_else(|| Error::invalid(format!("'{name}' is not a name")))
            })
            .collect::<Result<_>>()?;
        let (db, object) = match parts.as_slice() {
            [object] => (context.db.clone(), object.clone()),
            [db, object] => (db.to_ascii_lowercase(), object.clone()),
            _ => return Err(Error::invalid(format!("'{name}' is not [database.]name"))),
        };
        let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
        match snapshot.namespace(&db)? {
            Some(Namespace::Project(project)) => Ok((project.name, object)),
            Some(_) => Err(Error::invalid(format!(
                "Database '{db}' is not a project: indexes are kept only on a project's tables"
            ))),
            None => Err(Error::not_found(format!("Database '{db}' not found"))),
        }
    }

    /// Runs a plan that is not a write into the store: a query (its rows as a stream), or a
    /// statement that is refused.
    async fn execute_plan(
        &self,
        tenant: TenantId,
        plan: LogicalPlan,
        state: Session,
        hints: Option<Vec<names::NameHint>>,
        cache: Option<(PlanKey, u64)>,
    ) -> Result<Outcome> {
        match plan {
            LogicalPlan::Ddl(ddl) => Err(Error::invalid(format!(
                "{} is not supported yet",
                ddl.name()
            ))),
            LogicalPlan::Statement(s) => {
                Err(Error::invalid(format!("{} is not supported", s.name())))
            }
            LogicalPlan::Copy(_) => Err(Error::invalid("COPY is not supported")),
            plan => {
                let repeatable = cache.is_some() && plan_cache::is_repeatable(&plan);
                let (state, physical) = self
                    .plan_on_pool(tenant, async move {
                        let physical = state.create_physical_plan(&plan).await;
                        (state, physical)
                    })
                    .await?;
                let physical = physical?;
                let column_names =
                    names::column_names(&physical.schema(), hints.as_deref(), names::Purpose::Show);
                // Kept only if no commit came after the snapshot: an entry made from an older
                // snapshot would be unusable anyway and would hold that snapshot open.
                if let (true, Some((key, generation))) = (repeatable, cache) {
                    if plan_cache::is_reentrant(&physical) && self.store.commits() == generation {
                        self.plans.insert(
                            key,
                            generation,
                            Arc::clone(&physical),
                            column_names.clone(),
                        );
                    }
                }
                let stream = order::execute(physical, state.task_ctx())?;
                Ok(Outcome::Table(TableResult {
                    column_names,
                    stream,
                }))
            }
        }
    }

    /// Names the missing table or database when planning failed for one; otherwise passes
    /// DataFusion's message on.
    fn explain_plan_error(
        &self,
        state: &SessionState,
        snapshot: &Snapshot,
        statement: &datafusion::sql::parser::Statement,
        db: &str,
        error: datafusion::error::DataFusionError,
    ) -> Error {
        let error = Error::from(error);
        let creates_table = matches!(
            statement,
            datafusion::sql::parser::Statement::Statement(s)
                if matches!(s.as_ref(), Statement::CreateTable(c) if c.query.is_none())
        );
        // A new table's own name is not a missing table (its columns may be).
        if !error.message().contains("not found") || creates_table {
            return error;
        }
        let Ok(references) = state.resolve_table_references(statement) else {
            return error;
        };
        for reference in references {
            let Some((schema, table)) = snapshot::db_and_table(&reference, db) else {
                let catalog = reference.catalog().unwrap_or_default();
                return Error::not_found(format!("Database '{catalog}' not found"));
            };
            match snapshot.namespace(&schema) {
                Ok(None) => return Error::not_found(format!("Database '{schema}' not found")),
                Ok(Some(Namespace::Project(p)))
                    if matches!(snapshot.table(&p.name, &table), Ok(None))
                        && matches!(snapshot.view(&p.name, &table), Ok(None)) =>
                {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        p.name
                    ));
                }
                Ok(Some(Namespace::System))
                    if !INFO_TABLES.contains(&table.to_ascii_lowercase().as_str()) =>
                {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        crate::catalog::namespace::SYSTEM_DB
                    ));
                }
                Ok(Some(Namespace::Files)) => {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        FILES_DB
                    ));
                }
                _ => {}
            }
        }
        error
    }
}

/// A one-batch table of text columns (SHOW results).
pub(crate) fn text_table(columns: Vec<(&str, Vec<Option<String>>)>) -> Result<Outcome> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, _)| Field::new(*name, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, values)| Arc::new(StringArray::from(values.clone())) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    let column_names = columns.iter().map(|(name, _)| name.to_string()).collect();
    let stream = MemoryStream::try_new(vec![batch], schema, None)?;
    Ok(Outcome::Table(TableResult {
        column_names,
        stream: Box::pin(stream),
    }))
}
