//! SQL: a request's statements, parsed (MindsDB's own statements on tokens, the rest by
//! sqlparser), planned by DataFusion against the tenant's catalog at one read snapshot, and run.
//! Results stream as Arrow record batches; [`encode`] turns them into MindsDB's wire formats.

mod agent_statements;
mod ask;
mod catalog;
mod coerce;
mod dml;
pub mod encode;
mod model_statements;
mod models;
mod names;
mod order;
mod parse;
mod plan_cache;
mod predict;
mod predict_join;
mod sandbox;
mod session;
mod sort_keys;

pub(crate) use self::ask::AskAgent;
pub(crate) use self::sandbox::{Allowed, ToolRows};
use crate::namespace::{FILES_DB, INFO_TABLES};

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SendableRecordBatchStream, SessionState};
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::sqlparser::ast::Statement;
use serde::{Deserialize, Serialize};

use self::catalog::{Namespace, Snapshot};
use self::parse::Command;
use self::plan_cache::{PlanCache, PlanKey};
use self::session::{Session, Sessions};
use crate::agents;
use crate::datasources;
use crate::error::{Error, Result};
use crate::projects;
use crate::store::schema::{PROJECTS, TABLES};
use crate::store::Store;
use crate::tables;
use crate::tenant::TenantId;

/// A query as MindsDB's `POST /api/sql/query` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryRequest {
    /// SQL text: one statement, or several separated by `;` (the result is the last one's).
    pub query: String,
    /// Where one-part names resolve.
    #[serde(default)]
    pub context: QueryContext,
    /// Values for `:name` placeholders.
    #[serde(default)]
    pub params: HashMap<String, serde_json::Value>,
    /// Values for `:name` placeholders that JSON has no literal for (dates, timestamps, exact
    /// decimals, bytes), from the in-process fronts; not part of the wire format.
    #[serde(skip)]
    pub typed_params: HashMap<String, TypedParam>,
    /// How long the statements may run: less than `query.statement_timeout_secs` if asked
    /// (never more). The wire body's `timeout`, in seconds.
    #[serde(skip)]
    pub timeout: Option<std::time::Duration>,
}

/// A parameter value of a type JSON cannot carry, bound as a typed SQL literal
/// (`CAST('2024-01-31' AS DATE)`, `X'00ff'`), so `SELECT :d` gives a date, not text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedParam {
    /// A calendar date, `YYYY-MM-DD`.
    Date(String),
    /// A timestamp without time zone, `YYYY-MM-DD HH:MM:SS[.fraction]`; callers convert zoned
    /// times to UTC first.
    Timestamp(String),
    /// An exact decimal number in plain notation, like `-12.50` (at most 38 digits).
    Decimal(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl QueryRequest {
    /// A request for `query` in the default project, without parameters.
    pub fn new(query: impl Into<String>) -> Self {
        QueryRequest {
            query: query.into(),
            ..Default::default()
        }
    }

    /// Reads a `POST /api/sql/query` body: `{query, context: {db}, params, response_format,
    /// timeout}` (`timeout` in seconds, mindlite's own: at most the configured limit).
    /// Returns the request and the wire format asked for; anything malformed is an
    /// [`Error`] of kind `InvalidInput` whose message names the field that is wrong.
    /// Other `context` keys MindsDB knows (`profiling`, …) are accepted and ignored.
    ///
    /// ```
    /// use mindlite::{QueryRequest, WireFormat};
    /// let (request, format) = QueryRequest::from_wire_json(
    ///     br#"{"query": "SELECT :x", "params": {"x": 1}, "response_format": "jsonlines"}"#,
    /// ).unwrap();
    /// assert_eq!(request.query, "SELECT :x");
    /// assert_eq!(format, WireFormat::JsonLines);
    /// ```
    pub fn from_wire_json(body: &[u8]) -> Result<(QueryRequest, encode::WireFormat)> {
        let value: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| Error::invalid(format!("The request body is not valid JSON: {e}")))?;
        let serde_json::Value::Object(mut fields) = value else {
            return Err(Error::invalid("The request body must be a JSON object"));
        };
        let query = match fields.remove("query") {
            Some(serde_json::Value::String(query)) => query,
            Some(_) => return Err(Error::invalid("'query' must be a string")),
            None => return Err(Error::invalid("The request body has no 'query'")),
        };
        let (db, show_secrets) = match fields.remove("context") {
            None | Some(serde_json::Value::Null) => (None, false),
            Some(serde_json::Value::Object(mut context)) => {
                let db = match context.remove("db") {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(db)) => Some(db),
                    Some(_) => return Err(Error::invalid("'context.db' must be a string")),
                };
                let show_secrets = match context.remove("show_secrets") {
                    None | Some(serde_json::Value::Null) => false,
                    Some(serde_json::Value::Bool(show)) => show,
                    Some(_) => {
                        return Err(Error::invalid(
                            "'context.show_secrets' must be true or false",
                        ))
                    }
                };
                (db, show_secrets)
            }
            Some(_) => return Err(Error::invalid("'context' must be an object")),
        };
        let params = match fields.remove("params") {
            None | Some(serde_json::Value::Null) => HashMap::new(),
            Some(serde_json::Value::Object(params)) => params.into_iter().collect(),
            Some(_) => return Err(Error::invalid("'params' must be an object")),
        };
        let format = match fields.remove("response_format") {
            None | Some(serde_json::Value::Null) => encode::WireFormat::Json,
            Some(serde_json::Value::String(name)) => encode::WireFormat::parse(Some(&name))?,
            Some(_) => {
                return Err(Error::invalid(
                    "'response_format' must be null, \"jsonlines\" or \"sse\"",
                ))
            }
        };
        let timeout = match fields.remove("timeout") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(secs)) => match secs.as_f64() {
                Some(secs) if secs > 0.0 && secs.is_finite() && secs <= 1e9 => {
                    Some(std::time::Duration::from_secs_f64(secs))
                }
                _ => {
                    return Err(Error::invalid(
                        "'timeout' must be a positive number of seconds",
                    ))
                }
            },
            Some(_) => {
                return Err(Error::invalid(
                    "'timeout' must be a positive number of seconds",
                ))
            }
        };
        let request = QueryRequest {
            query,
            context: QueryContext { db, show_secrets },
            params,
            typed_params: HashMap::new(),
            timeout,
        };
        Ok((request, format))
    }

    /// Limits how long the statements may run (to less than the configured limit, if any).
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the current database (`context.db`).
    pub fn with_db(mut self, db: impl Into<String>) -> Self {
        self.context.db = Some(db.into());
        self
    }

    /// Adds a `:name` parameter.
    pub fn with_param(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.params.insert(name.into(), value);
        self
    }

    /// Adds a `:name` parameter of a type JSON cannot carry.
    ///
    /// ```
    /// use mindlite::{Config, Engine, QueryRequest, TypedParam};
    /// let engine = Engine::open_in_memory(Config::default()).unwrap();
    /// let request = QueryRequest::new("SELECT :d + INTERVAL '1 day' AS next")
    ///     .with_typed_param("d", TypedParam::Date("2024-02-28".into()));
    /// let rows = engine.block_on(engine.query_blocking(request).collect()).unwrap();
    /// assert_eq!(rows.batches[0].schema().field(0).data_type().to_string(), "Date32");
    /// ```
    pub fn with_typed_param(mut self, name: impl Into<String>, value: TypedParam) -> Self {
        self.typed_params.insert(name.into(), value);
        self
    }
}

/// The request context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryContext {
    /// The current database; the configured default project when absent.
    #[serde(default)]
    pub db: Option<String>,
    /// Whether `information_schema.databases` shows datasource passwords unmasked.
    #[serde(default)]
    pub show_secrets: bool,
}

/// The context returned with every result (`USE` changes `db`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultContext {
    /// Whether secrets are shown in `CONNECTION_DATA`, as the request asked.
    pub show_secrets: bool,
    /// The current database after the request ran.
    pub db: String,
}

/// What a request produced.
pub struct QueryResult {
    /// The context after the request.
    pub context: ResultContext,
    /// The outcome of the last statement.
    pub outcome: Outcome,
    /// The most bytes [`encode_document`](encode::encode_document) makes of it; a larger
    /// result becomes an error document that points to the streaming formats. The engine sets
    /// `query.max_document_mb`; `None` is no limit.
    pub document_limit: Option<u64>,
}

impl QueryResult {
    /// A request that failed before any statement ran.
    pub(crate) fn failed(context: ResultContext, error: Error) -> QueryResult {
        QueryResult {
            context,
            outcome: Outcome::Error(error),
            document_limit: None,
        }
    }
}

/// A table, an ok with a row count, or an error: SQL failures are results, not transport errors.
pub enum Outcome {
    /// Rows, as a lazy stream of record batches.
    Table(TableResult),
    /// A statement without rows; `affected_rows` is `None` for DDL.
    Ok {
        /// Rows inserted, updated or deleted.
        affected_rows: Option<u64>,
    },
    /// The statement failed; nothing it would have changed was changed.
    Error(Error),
}

/// Rows with the column names to show (which may differ from the Arrow field names).
pub struct TableResult {
    /// Column names as MindsDB shows them.
    pub column_names: Vec<String>,
    /// The batches, produced as they are pulled.
    pub stream: SendableRecordBatchStream,
}

impl std::fmt::Debug for TableResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableResult")
            .field("column_names", &self.column_names)
            .finish()
    }
}

/// How [`Engine::load`](crate::Engine::load) treats the table it loads into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Append to an existing table: columns matched by position and cast to its types.
    Append,
    /// Create the table with the data's columns; an existing table is a conflict.
    Create,
    /// Create the table, replacing an existing one (its columns and rows) in the same transaction.
    Replace,
}

/// The type a loaded column is stored as: dictionary, large and view encodings become their
/// plain form, which every reader and wire encoder understands, and half floats become floats.
fn stored_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Dictionary(_, values) => stored_type(values),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Float16 => DataType::Float32,
        other => other.clone(),
    }
}

/// Runs SQL for the engine.
pub(crate) struct SqlRunner {
    pub(crate) store: Arc<Store>,
    /// The engine's configuration (agents read the default model and their limits here).
    pub(crate) config: crate::Config,
    /// Connections to LLM providers, shared by every agent.
    pub(crate) client: crate::egress::HttpClient,
    /// How outbound connections reach out (the egress policy) and what datasources may send.
    pub(crate) net: crate::connectors::Net,
    /// Per-user caps on work running at once, and the limit on unauthenticated requests.
    pub(crate) admission: Arc<crate::admission::Admission>,
    /// Answers agents asked in SELECTs.
    agents: Arc<dyn ask::AskAgent>,
    sessions: Arc<Sessions>,
    plans: PlanCache,
    default_project: String,
    target_partitions: usize,
}

impl SqlRunner {
    pub(crate) fn new(
        store: Arc<Store>,
        config: &crate::Config,
        agents: Arc<dyn ask::AskAgent>,
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
        let net = crate::connectors::Net::new(config)?;
        let client = net
            .egress
            .http_client(concat!("mindlite/", env!("CARGO_PKG_VERSION")))?;
        let connector = crate::llm::Connector {
            client: client.clone(),
            default: config.llm.clone(),
            meter: crate::quotas::ModelCalls::new(&store, &config.hosted),
        };
        Ok(SqlRunner {
            store,
            config: config.clone(),
            agents,
            client,
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
            )),
            plans: PlanCache::new(config.query.plan_cache_entries),
            default_project: config.query.default_project.to_ascii_lowercase(),
            target_partitions,
        })
    }

    /// What LLM models call through: the shared client and the configured default model.
    pub(crate) fn connector(&self) -> crate::llm::Connector {
        crate::llm::Connector {
            client: self.client.clone(),
            default: self.config.llm.clone(),
            meter: crate::quotas::ModelCalls::new(&self.store, &self.config.hosted),
        }
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
        let plan = crate::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        self.admission
            .admit(tenant, plan.as_deref(), work)
            .map(Some)
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
        if let Some(cached) = key.as_ref().and_then(|key| self.plans.get(key, generation)) {
            // A plan that cannot run again is planned afresh below.
            if let Ok(outcome) = self.run_cached(&cached) {
                return QueryResult {
                    context,
                    outcome,
                    document_limit: None,
                };
            }
        }
        let outcome = match parse::parse(&request.query, &request.params, &request.typed_params) {
            Err(e) => Outcome::Error(e),
            Ok(commands) => {
                // Only a request of one statement is keyed by its whole text.
                let mut cache = key
                    .filter(|_| commands.len() == 1)
                    .map(|key| (key, generation));
                let mut last = Outcome::Ok {
                    affected_rows: None,
                };
                for command in commands {
                    // Boxed: planning's future is large, and this one is copied into each
                    // layer around it; a cached plan (above) then costs no copy of it at all.
                    let executing =
                        Box::pin(self.execute(tenant, &mut context, command, cache.take()));
                    match executing.await {
                        Ok(outcome) => last = outcome,
                        Err(e) => {
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

    fn run_cached(&self, cached: &plan_cache::CachedPlan) -> Result<Outcome> {
        let stream = order::execute(cached.plan()?, self.sessions.task_ctx())?;
        Ok(Outcome::Table(TableResult {
            column_names: cached.column_names.clone(),
            stream,
        }))
    }

    fn session(&self, snapshot: Arc<Snapshot>, db: &str, partitions: usize) -> Session {
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
                    crate::connectors::check(&engine, parameters, edition, &self.net).await?;
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
                let (_, parameters) = crate::connectors::check(
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
                self.store
                    .write(move |txn| {
                        crate::rules::drop_database(txn, tenant, &name, if_exists, &default)
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
                let (names, kind): (Vec<String>, &str) = match snapshot.namespace(&db)? {
                    None => return Err(Error::not_found(format!("Database '{db}' not found"))),
                    Some(Namespace::System) => {
                        (INFO_TABLES.map(String::from).to_vec(), "SYSTEM VIEW")
                    }
                    Some(Namespace::Files) => (
                        snapshot
                            .tables(FILES_DB)?
                            .into_iter()
                            .map(|t| t.name)
                            .collect(),
                        "BASE TABLE",
                    ),
                    Some(Namespace::Project(p)) => (
                        snapshot
                            .tables(&p.name)?
                            .into_iter()
                            .map(|t| t.name)
                            .collect(),
                        "BASE TABLE",
                    ),
                    Some(Namespace::Datasource(source)) => {
                        drop(snapshot);
                        (
                            crate::connectors::Connection::of(&source, &self.net)?
                                .table_names()
                                .await?,
                            "BASE TABLE",
                        )
                    }
                };
                let header = format!("Tables_in_{db}");
                let mut columns = vec![(
                    header.as_str(),
                    names.iter().map(|n| Some(n.clone())).collect::<Vec<_>>(),
                )];
                if full {
                    columns.push((
                        "Table_type",
                        names.iter().map(|_| Some(kind.to_string())).collect(),
                    ));
                }
                text_table(columns)
            }
            Command::CreateAgent {
                project,
                name,
                if_not_exists,
                mut spec,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                spec.insert("name".into(), name.into());
                let (llm, egress) = (self.config.llm.clone(), self.net.egress.clone());
                self.store
                    .write(move |txn| {
                        agents::create(txn, tenant, &project, &spec, &llm, if_not_exists, &egress)
                    })
                    .await?;
                ok(None)
            }
            Command::AlterAgent {
                project,
                name,
                spec,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                let egress = self.net.egress.clone();
                self.store
                    .write(move |txn| agents::update(txn, tenant, &project, &name, &spec, &egress))
                    .await?;
                ok(None)
            }
            Command::DropAgent {
                project,
                name,
                if_exists,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                self.store
                    .write(move |txn| agents::delete(txn, tenant, &project, &name, if_exists))
                    .await?;
                ok(None)
            }
            Command::ShowAgents { project } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
                if snapshot.namespace(&project)?.is_none() {
                    return Err(Error::not_found(format!("Database '{project}' not found")));
                }
                let rows: Vec<[String; 4]> = snapshot
                    .agents(Some(&project))?
                    .iter()
                    .map(agents::Agent::system_row)
                    .collect();
                let column = |i: usize| rows.iter().map(|r| Some(r[i].clone())).collect();
                text_table(vec![
                    ("NAME", column(0)),
                    ("PROJECT", column(1)),
                    ("MODEL", column(2)),
                    ("PARAMS", column(3)),
                ])
            }
            Command::CreateModel(statement) => self.create_model(tenant, context, statement).await,
            Command::RetrainModel {
                project,
                name,
                from,
                using,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                self.retrain_statement(tenant, project, name, from, using)
                    .await
            }
            Command::SetActiveModel {
                project,
                name,
                version,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                self.set_active_model(tenant, project, name, version)
                    .await?;
                ok(None)
            }
            Command::DropModel {
                project,
                name,
                version,
                if_exists,
            } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                self.drop_model(tenant, project, name, version, if_exists)
                    .await?;
                ok(None)
            }
            Command::ShowModels { project } => {
                let project = project.unwrap_or_else(|| context.db.clone());
                self.show_models(tenant, &project)
            }
            Command::Describe { parts, explicit } => {
                if let Some(described) = self.describe_model(tenant, &context.db, &parts)? {
                    return Ok(described);
                }
                if explicit {
                    return Err(Error::not_found(format!(
                        "Model '{}' does not exist",
                        parts.join(".")
                    )));
                }
                // Not a model: DESCRIBE of a table, as standard SQL has it.
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
                self.execute_sql(tenant, context, statement, None, false)
                    .await
            }
            Command::Sql(mut statement) => {
                if self
                    .answer_agent_select(tenant, &context.db, &mut statement)
                    .await?
                {
                    // The answer is spliced into the statement: never reuse its plan.
                    return self
                        .execute_sql(tenant, context, *statement, None, false)
                        .await;
                }
                self.execute_sql(tenant, context, *statement, cache, false)
                    .await
            }
        }
    }

    /// A write's job over `snapshot`, planned in `state`; `held` is the writer lock when it
    /// was taken before the snapshot.
    fn job(
        &self,
        tenant: TenantId,
        db: &str,
        snapshot: Arc<Snapshot>,
        state: Session,
        held: Option<crate::store::WriteLock>,
    ) -> dml::WriteJob {
        dml::WriteJob {
            store: Arc::clone(&self.store),
            state,
            snapshot,
            tenant,
            db: db.to_string(),
            cancelled: tokio_util::sync::CancellationToken::new(),
            held: parking_lot::Mutex::new(held),
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
    /// takes the writer lock (see `dml`); `pessimistic` takes the lock first instead, which is
    /// how a write runs again when another write changed its target in between.
    async fn execute_sql(
        &self,
        tenant: TenantId,
        context: &mut ResultContext,
        statement: Statement,
        cache: Option<(PlanKey, u64)>,
        pessimistic: bool,
    ) -> Result<Outcome> {
        let hints = names::hints(&statement);
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
        let local_write = writes && remote.is_none();
        let again = (local_write && !pessimistic).then(|| statement.clone());
        let held = if local_write && pessimistic {
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
        let state = self.session(Arc::clone(&snapshot), &context.db, partitions);
        let df_statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        let plan = match state.statement_to_plan(df_statement.clone()).await {
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
        let job = |state| self.job(tenant, &db, snapshot, state, held);
        let staged = match plan {
            LogicalPlan::Dml(statement) if local_write => job(state)
                .run(move |job, handle| dml::run_dml(job, handle, statement))
                .await?
                .map(Some),
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) if local_write => {
                job(state)
                    .run(move |job, handle| dml::create_table(job, handle, create, hints))
                    .await?
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(drop)) if local_write => {
                job(state)
                    .run(move |job, handle| dml::drop_table(job, handle, drop))
                    .await?;
                dml::Staged::Done(None)
            }
            other => return self.execute_plan(other, state, hints, cache).await,
        };
        match (staged, again) {
            (dml::Staged::Done(affected_rows), _) => Ok(Outcome::Ok { affected_rows }),
            // Its target changed while its rows were computed: again, holding the lock.
            (dml::Staged::TargetChanged, Some(statement)) => {
                Box::pin(self.execute_sql(tenant, context, statement, None, true)).await
            }
            (dml::Staged::TargetChanged, None) => Err(Error::internal(
                "a write's target changed while the writer lock was held",
            )),
        }
    }

    /// Runs a plan that is not a write into the store: a query (its rows as a stream), or a
    /// statement that is refused.
    async fn execute_plan(
        &self,
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
            LogicalPlan::Statement(s) => Err(Error::invalid(format!(
                "{} is not supported: every statement commits on its own",
                s.name()
            ))),
            LogicalPlan::Copy(_) => Err(Error::invalid("COPY is not supported")),
            plan => {
                let repeatable = cache.is_some() && plan_cache::is_repeatable(&plan);
                let physical = state.create_physical_plan(&plan).await?;
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

    /// The datasource table an INSERT or CREATE TABLE writes, read from the statement before
    /// planning; `None` for writes into the store.
    fn remote_write(
        &self,
        tenant: TenantId,
        statement: &Statement,
        db: &str,
    ) -> Result<Option<RemoteWrite>> {
        use datafusion::sql::sqlparser::ast::TableObject;
        let (name, columns) = match statement {
            Statement::Insert(insert) => match &insert.table {
                TableObject::TableName(name) => {
                    let columns: Vec<String> = insert
                        .columns
                        .iter()
                        .filter_map(|c| c.0.last().and_then(|p| p.as_ident()))
                        .map(|ident| match ident.quote_style {
                            Some(_) => ident.value.clone(),
                            None => ident.value.to_ascii_lowercase(),
                        })
                        .collect();
                    (name.clone(), (!columns.is_empty()).then_some(columns))
                }
                _ => return Ok(None),
            },
            Statement::CreateTable(create) => (create.name.clone(), None),
            _ => return Ok(None),
        };
        let Ok(reference) = datafusion::sql::planner::object_name_to_table_reference(name, true)
        else {
            return Ok(None);
        };
        let Some((db, table)) = catalog::db_and_table(&reference, db) else {
            return Ok(None);
        };
        let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
        Ok(match snapshot.namespace(&db)? {
            Some(Namespace::Datasource(source)) => Some(RemoteWrite {
                source,
                table,
                columns,
            }),
            _ => None,
        })
    }

    /// `INSERT INTO pg.t …` or `CREATE TABLE pg.t (SELECT …)`: rows go to the datasource in one
    /// remote transaction; the store is not touched.
    async fn write_remote(
        &self,
        state: Session,
        plan: LogicalPlan,
        target: RemoteWrite,
    ) -> Result<Outcome> {
        let connection = crate::connectors::Connection::of(&target.source, &self.net)?;
        let settings = connection.writable(&target.table)?;
        let (input, existing) = match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
                let existing = match (create.or_replace, create.if_not_exists) {
                    (true, _) => crate::connectors::table::Existing::Replace,
                    (false, true) => crate::connectors::table::Existing::Keep,
                    (false, false) => crate::connectors::table::Existing::Fail,
                };
                (create.input.as_ref().clone(), Some(existing))
            }
            LogicalPlan::Dml(insert) if matches!(insert.op, WriteOp::Insert(_)) => {
                (insert.input.as_ref().clone(), None)
            }
            other => {
                return Err(Error::invalid(format!(
                    "{} is not supported on datasource '{}'",
                    other.display(),
                    target.source.name
                )))
            }
        };
        let physical = state.create_physical_plan(&input).await?;
        let stream = datafusion::physical_plan::execute_stream(physical, state.task_ctx())?;
        let written = match existing {
            Some(existing) => {
                crate::connectors::table::create_table(settings, &target.table, existing, stream)
                    .await?
            }
            None => Some(
                crate::connectors::table::insert(settings, &target.table, target.columns, stream)
                    .await?,
            ),
        };
        Ok(Outcome::Ok {
            affected_rows: written,
        })
    }

    /// Loads batches into a stored table in one transaction; returns the rows written.
    pub(crate) async fn load(
        &self,
        tenant: TenantId,
        db: Option<&str>,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        mode: LoadMode,
    ) -> Result<u64> {
        let db = db.unwrap_or(&self.default_project).to_string();
        self.load_into(
            tenant,
            LoadTarget::Project(&db),
            table,
            schema,
            Box::new(move |sink| batches.into_iter().try_for_each(sink)),
            mode,
        )
        .await
    }

    /// Loads the batches `rows` hands on into the table `table` of a project, or an uploaded
    /// file, as [`SqlRunner::load`] describes. The rows are read and staged (on a blocking
    /// thread, so `rows` may parse as it goes) before the writer lock is taken; a table
    /// replaced or dropped meanwhile is an error, and nothing is written.
    pub(crate) async fn load_into(
        &self,
        tenant: TenantId,
        target: LoadTarget<'_>,
        table: &str,
        schema: SchemaRef,
        rows: BatchSource,
        mode: LoadMode,
    ) -> Result<u64> {
        let (db, files) = match target {
            LoadTarget::Project(db) => (db, false),
            LoadTarget::File => (FILES_DB, true),
        };
        let db = db.to_ascii_lowercase();
        let snapshot = Snapshot::new(Arc::clone(&self.store), tenant)?;
        let state = self.session(Arc::clone(&snapshot), &db, 1);
        let job = self.job(tenant, &db, snapshot, state, None);
        let project = match job.snapshot.namespace(&db)? {
            Some(Namespace::Project(p)) if !files => p.name,
            Some(Namespace::Files) if files => FILES_DB.to_string(),
            Some(_) => {
                return Err(Error::invalid(format!(
                    "Database '{db}' is read-only: tables can only be written in a project"
                )))
            }
            None => return Err(Error::not_found(format!("Database '{db}' not found"))),
        };
        if mode != LoadMode::Append {
            crate::namespace::validate_name("table", table)?;
        }
        let read = job.snapshot.table(&project, table)?;
        let staged_schema = match (&read, mode) {
            (Some(record), LoadMode::Append) => job.snapshot.table_schema(record.id)?,
            (None, LoadMode::Append) => {
                return Err(Error::not_found(format!(
                    "Table '{table}' not found in database: {project}"
                )))
            }
            (Some(_), LoadMode::Create) => {
                return Err(Error::conflict(format!(
                    "Table '{table}' already exists in database: {project}"
                )))
            }
            (_, LoadMode::Create | LoadMode::Replace) => Arc::new(Schema::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| {
                        f.as_ref()
                            .clone()
                            .with_data_type(stored_type(f.data_type()))
                    })
                    .collect::<Vec<Field>>(),
            )),
        };
        let table = table.to_string();
        let loaded = job
            .run(move |job, handle| {
                let mut staged = job.staged(&table, Arc::clone(&staged_schema));
                rows(&mut |batch| {
                    job.check_cancelled()?;
                    staged.push(batch)
                })?;
                let rows = staged.rows();
                let guard = job.lock(handle)?;
                let current =
                    tables::get(&guard.txn.open_table(TABLES)?, job.tenant, &project, &table)?;
                let changed = || {
                    Error::conflict(format!(
                        "Table '{table}' in database {project} changed while the rows were read; nothing was written"
                    ))
                };
                let record = match (current, mode) {
                    (Some(record), LoadMode::Append) => {
                        if read.as_ref().is_none_or(|r| r.id != record.id) {
                            return Err(changed());
                        }
                        record
                    }
                    (None, LoadMode::Append) => return Err(changed()),
                    (Some(_), LoadMode::Create) => {
                        return Err(Error::conflict(format!(
                            "Table '{table}' already exists in database: {project}"
                        )))
                    }
                    (existing, _) => {
                        if existing.is_some() {
                            tables::drop_table(&guard.txn, job.tenant, &project, &table)?;
                        }
                        if !files && projects::get(&guard.txn.open_table(PROJECTS)?, job.tenant, &project)?.is_none() {
                            return Err(Error::not_found(format!("Database '{project}' not found")));
                        }
                        tables::create(&guard.txn, job.tenant, &project, &table, &staged_schema)?
                    }
                };
                let mut writer = tables::TableWriter::append(&guard.txn, job.tenant, record)?;
                writer.push_staged(staged)?;
                writer.finish()?;
                guard.commit()?;
                Ok(rows)
            })
            .await;
        self.plans.clear();
        loaded
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
        if !error.message().contains("not found") {
            return error;
        }
        let Ok(references) = state.resolve_table_references(statement) else {
            return error;
        };
        for reference in references {
            let Some((schema, table)) = catalog::db_and_table(&reference, db) else {
                let catalog = reference.catalog().unwrap_or_default();
                return Error::not_found(format!("Database '{catalog}' not found"));
            };
            match snapshot.namespace(&schema) {
                Ok(None) => return Error::not_found(format!("Database '{schema}' not found")),
                Ok(Some(Namespace::Project(p))) => {
                    if matches!(snapshot.table(&p.name, &table), Ok(None)) {
                        return Error::not_found(format!(
                            "Table '{table}' not found in database: {}",
                            p.name
                        ));
                    }
                }
                Ok(Some(Namespace::System))
                    if !INFO_TABLES.contains(&table.to_ascii_lowercase().as_str()) =>
                {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        crate::namespace::SYSTEM_DB
                    ));
                }
                Ok(Some(Namespace::Files)) => {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        crate::namespace::FILES_DB
                    ));
                }
                _ => {}
            }
        }
        error
    }
}

/// Batches to load, handed to the sink one at a time as they are read (an upload parses its
/// file as it goes); the sink's error stops the reading.
pub(crate) type BatchSource =
    Box<dyn FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()> + Send>;

/// Where [`SqlRunner::load_into`] writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LoadTarget<'a> {
    /// A table of this project.
    Project(&'a str),
    /// An uploaded file, a table of the `files` database.
    File,
}

/// A one-batch table of text columns (SHOW results).
fn text_table(columns: Vec<(&str, Vec<Option<String>>)>) -> Result<Outcome> {
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

/// A write that goes to a datasource's table.
struct RemoteWrite {
    source: datasources::Datasource,
    table: String,
    /// The columns an INSERT named, if it named any.
    columns: Option<Vec<String>>,
}
