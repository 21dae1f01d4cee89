//! A request run: its statements parsed (a feature's by the feature), a cached plan reused,
//! and each statement of the database (projects, datasources, `USE`, `SHOW`) run here;
//! SQL statements go on to `execute`.

use std::sync::Arc;

use super::catalog::features::ProjectObject;
use super::catalog::snapshot::{Namespace, Snapshot};
use super::client::{self, ClientStatement};
use super::execute::Turn;
use super::planning::order;
use super::planning::plan_cache::{self, PlanKey};
use super::planning::session::Session;
use super::request::{Outcome, QueryRequest, QueryResult, ResultContext, TableResult};
use super::variables;
use super::{parse, text_table, transaction, Command, SqlRunner};
use crate::catalog::datasources;
use crate::catalog::namespace::{FILES_DB, INFO_TABLES};
use crate::catalog::projects;
use crate::error::{Error, Result};
use crate::tenant::TenantId;

impl SqlRunner {
    /// `DROP DATABASE` / `DROP PROJECT` (see `rules::drop_database`): the trainings and
    /// knowledge-base inserts of its objects stop at once; its knowledge bases' own tables on
    /// the server of `knowledge_bases.storage_url` are dropped once its records have gone
    /// (a server that cannot be reached then keeps them; the statement has landed).
    pub(crate) async fn drop_database(
        &self,
        tenant: TenantId,
        name: &str,
        if_exists: bool,
    ) -> Result<()> {
        let default = self.default_project.clone();
        let object = crate::running::Object::project(tenant, name);
        let name = name.to_string();
        let owned = self
            .services
            .store
            .write_dropping(object, move |txn| {
                crate::catalog::rules::drop_database(txn, tenant, &name, if_exists, &default)
            })
            .await?;
        if owned.is_empty() {
            return Ok(());
        }
        let url = &self.services.config.knowledge_bases.storage_url;
        let settings =
            crate::services::connectors::postgres::storage_settings(url, &self.services.net)?;
        let remote = crate::services::connectors::remote::Remote::Postgres(settings);
        for table in owned {
            crate::services::connectors::table::drop_table(&remote, &table, true)
                .await
                .map_err(|e| {
                    Error::new(
                        e.kind(),
                        format!(
                            "Project dropped, but its knowledge base table {table} stays on the storage server: {}",
                            e.message()
                        ),
                    )
                })?;
        }
        Ok(())
    }

    /// Runs every statement of `request` in order and returns the last result; the first
    /// failure stops the request and is its result.
    pub(crate) async fn run(&self, tenant: TenantId, request: &QueryRequest) -> QueryResult {
        let mut context = self.request_context(request);
        // Read before anything else: a plan kept now is current only while no commit follows.
        let generation = self.services.store.commits();
        let key = PlanKey::new(tenant, &context.db, request);
        // An aborted transaction refuses statements below; a cached plan must not slip past.
        let aborted = self.services.store.check_not_aborted().is_err();
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
                    if let Err(e) = self.services.store.check_not_aborted() {
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
                            self.services.store.abort_transaction(e.message());
                            last = Outcome::Error(e);
                            break;
                        }
                    }
                }
                last
            }
        };
        if self.services.store.commits() != generation {
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
            let store = &self.services.store;
            return parse::parse_limited(
                &request.query,
                &request.params,
                &request.typed_params,
                parse::ShapeLimits::of(&self.services.config.query),
                &|words| super::claim(&self.extensions, words),
                &|name| variables::lookup(Arc::clone(store), tenant, &request.params, name),
            );
        }
        let (query, params, typed) = (
            request.query.clone(),
            request.params.clone(),
            request.typed_params.clone(),
        );
        let limits = parse::ShapeLimits::of(&self.services.config.query);
        let extensions = Arc::clone(&self.extensions);
        let store = Arc::clone(&self.services.store);
        self.services
            .compute
            .run(tenant, move || {
                parse::parse_limited(
                    &query,
                    &params,
                    &typed,
                    limits,
                    &|words| super::claim(&extensions, words),
                    &|name| variables::lookup(Arc::clone(&store), tenant, &params, name),
                )
            })
            .await?
    }

    /// The statements of stored or generated text `sql` (a knowledge base's SELECT, an
    /// agent's query, a model's statement), parsed as a request's are, without parameters:
    /// `@name` reads only the variables `tenant` kept.
    pub(crate) fn parse_text(&self, tenant: TenantId, sql: &str) -> Result<Vec<Command>> {
        let none = std::collections::HashMap::new();
        let store = &self.services.store;
        parse::parse_limited(
            sql,
            &none,
            &std::collections::HashMap::new(),
            parse::ShapeLimits::of(&self.services.config.query),
            &|words| super::claim(&self.extensions, words),
            &|name| variables::lookup(Arc::clone(store), tenant, &none, name),
        )
    }

    /// Runs planning work (`work`: planning a statement, optimizing, making its physical plan)
    /// for `tenant` on the pool, not on an async worker; it awaits what it must (table
    /// resolution) on the engine's runtime.
    pub(super) async fn plan_on_pool<F>(&self, tenant: TenantId, work: F) -> Result<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.services
            .compute
            .run_async(tenant, tokio::runtime::Handle::current(), work)
            .await
    }

    fn run_cached(&self, tenant: TenantId, cached: &plan_cache::CachedPlan) -> Result<Outcome> {
        let task_ctx = self.sessions.task_ctx_of(tenant, || {
            crate::catalog::users::plan_in(&self.services.store.read()?, tenant)
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

    /// What database `db` lists as its tables, sorted by name: a project's stored tables,
    /// views and the features' objects (models, agents, knowledge bases), a datasource's
    /// tables as it reports them, the system views. NotFound for no such database.
    pub(crate) async fn database_objects(
        &self,
        tenant: TenantId,
        db: &str,
    ) -> Result<Vec<ProjectObject>> {
        let db = db.to_ascii_lowercase();
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let named = |names: Vec<String>, kind: &'static str| -> Vec<ProjectObject> {
            names
                .into_iter()
                .map(|name| ProjectObject::new(name, kind))
                .collect()
        };
        let mut objects = match snapshot.namespace(&db)? {
            None => return Err(Error::not_found(format!("Database '{db}' not found"))),
            Some(Namespace::System) => named(INFO_TABLES.map(String::from).to_vec(), "SYSTEM VIEW"),
            Some(Namespace::Log) => named(
                crate::catalog::namespace::LOG_TABLES
                    .map(String::from)
                    .to_vec(),
                "SYSTEM VIEW",
            ),
            Some(Namespace::Files) => named(
                snapshot
                    .tables(FILES_DB)?
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
                "BASE TABLE",
            ),
            Some(Namespace::Project(p)) => {
                let tables = snapshot.tables(&p.name)?.into_iter().map(|t| t.name);
                let views = snapshot.views(&p.name)?.into_iter().map(|v| v.name);
                let mut objects = named(tables.collect(), "BASE TABLE");
                objects.extend(named(views.collect(), "VIEW"));
                for feature in self.extensions.iter() {
                    for object in feature.objects(&snapshot, &p.name)? {
                        // A stored table or view of the same name hides the object.
                        if !objects
                            .iter()
                            .any(|o| o.name.eq_ignore_ascii_case(&object.name))
                        {
                            objects.push(object);
                        }
                    }
                }
                objects
            }
            Some(Namespace::Datasource(source)) => {
                drop(snapshot);
                let connection =
                    crate::services::connectors::Connection::of(&source, &self.services.net)?;
                named(connection.table_names().await?, "BASE TABLE")
            }
        };
        objects.sort_by_key(|o| o.name.to_ascii_lowercase());
        Ok(objects)
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
                self.services
                    .store
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
                let edition = self.services.config.edition;
                let (engine, parameters) = crate::services::connectors::check(
                    &engine,
                    parameters,
                    edition,
                    &self.services.net,
                )
                .await?;
                let hosted = self.services.config.hosted.clone();
                self.services
                    .store
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
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
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
                    self.services.config.edition,
                    &self.services.net,
                )
                .await?;
                self.services
                    .store
                    .write(move |txn| {
                        datasources::set_parameters(txn, tenant, &source.name, parameters)
                    })
                    .await?;
                ok(None)
            }
            Command::DropProject { name, if_exists } => {
                self.drop_database(tenant, &name, if_exists).await?;
                ok(None)
            }
            Command::Use(name) => {
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
                if snapshot.namespace(&name)?.is_none() {
                    return Err(Error::not_found(format!("Database '{name}' not found")));
                }
                context.db = name.to_ascii_lowercase();
                ok(None)
            }
            Command::ShowDatabases { full } => {
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
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
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
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
                let tables: Vec<(String, &str)> = self
                    .database_objects(tenant, &db)
                    .await?
                    .into_iter()
                    .map(|object| (object.name, object.kind))
                    .collect();
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
            Command::ShowClient { table, like } => {
                let query = client::show(table, like.as_deref())?;
                let once = Turn::Optimistic;
                Box::pin(self.execute_sql(tenant, context, query, None, once, false)).await
            }
            Command::Feature(statement) => statement.run(self, tenant, context).await,
            Command::Sql(statement) => {
                match client::read(&statement)? {
                    Some(ClientStatement::Accepted) => return ok(None),
                    Some(ClientStatement::Variables(assignments)) => {
                        self.set_variables(tenant, assignments).await?;
                        return ok(None);
                    }
                    Some(ClientStatement::Query(query)) => {
                        let once = Turn::Optimistic;
                        return Box::pin(
                            self.execute_sql(tenant, context, *query, None, once, false),
                        )
                        .await;
                    }
                    None => {}
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
}
