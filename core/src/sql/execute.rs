//! One SQL statement planned and run: reads through the plan cache, writes through the
//! write path (`write`) with the turns a write takes when others overtake it, views, and
//! the errors a failed plan is explained by.

use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::planner::object_name_to_table_reference;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};

use super::catalog::names;
use super::catalog::snapshot::{self, Namespace, Snapshot};
use super::planning::order;
use super::planning::plan_cache::{self, PlanKey};
use super::planning::session::Session;
use super::request::{Outcome, ResultContext, TableResult};
use super::write::job::{self, table_key};
use super::write::{constraints, dml, upsert};
use super::{parse, SqlRunner};
use crate::catalog::namespace::{FILES_DB, INFO_TABLES};
use crate::catalog::tables;
use crate::error::{Error, Result};
use crate::services::connectors::Connection;
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
pub(super) enum Turn {
    Optimistic,
    SoleWriter,
    WriterLock,
}

impl SqlRunner {
    /// A write's job over `snapshot`, planned in `state`; `held` is the writer lock when it
    /// was taken before the snapshot.
    pub(crate) fn job(
        &self,
        tenant: TenantId,
        db: &str,
        snapshot: Arc<Snapshot>,
        state: Session,
        held: Option<crate::store::WriteLock>,
        claim: Option<job::Claim>,
    ) -> job::WriteJob {
        job::WriteJob {
            store: Arc::clone(&self.services.store),
            state,
            snapshot,
            tenant,
            db: db.to_string(),
            cancelled: tokio_util::sync::CancellationToken::new(),
            owns_target: held.is_some() || matches!(claim, Some(job::Claim::Sole { .. })),
            may_land: held.is_none() && !self.services.store.in_transaction(),
            in_transaction: self.services.store.in_transaction(),
            held: parking_lot::Mutex::new(held),
            _claim: claim,
            staging_memory: usize::try_from(
                self.services
                    .config
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
    pub(super) async fn execute_sql(
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
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
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
        // The table the write claims from before its snapshot (see `job::Claim`), when it
        // names one: shared, or alone when it runs again.
        let target = match turn {
            Turn::Optimistic | Turn::SoleWriter
                if local_write && !self.services.store.in_transaction() =>
            {
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
        let conflict = upsert::take_conflict(&mut statement)?;
        // Awaited here, not on the write's blocking thread: writers queued behind a sole one
        // never fill the blocking pool that the sole one needs to run.
        let claim = match target {
            Some((project, name)) => {
                let lock = self
                    .services
                    .store
                    .object_lock(&table_key(tenant, &project, &name));
                Some(match turn {
                    Turn::SoleWriter => job::Claim::Sole {
                        _guard: lock.write_owned().await,
                    },
                    _ => job::Claim::Shared {
                        _guard: lock.read_owned().await,
                    },
                })
            }
            None => None,
        };
        let held = if local_write && turn == Turn::WriterLock {
            Some(self.services.store.lock_writes().await)
        } else {
            None
        };
        let snapshot = Snapshot::showing_secrets(
            Arc::clone(&self.services.store),
            tenant,
            context.show_secrets,
        )?;
        // Rewrites keep row order, so they run on one partition.
        let partitions = match statement {
            Statement::Update(_) | Statement::Delete(_) => 1,
            _ => self.target_partitions,
        };
        let state = self.session(Arc::clone(&snapshot), &context.db, partitions)?;
        let df_statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        // The statement is cloned (for the error's explanation) on the planning pool: cloning
        // is recursive, and a chain of 500 UNIONs overflowed a runtime thread's stack. Only a
        // statement that failed to plan comes back.
        let (state, planned, failed) = self
            .plan_on_pool(tenant, async move {
                let planned = state.statement_to_plan(df_statement.clone()).await;
                let failed = planned.is_err().then_some(df_statement);
                (state, planned, failed)
            })
            .await?;
        let plan = match (planned, failed) {
            (Ok(plan), _) => plan,
            (Err(e), Some(df_statement)) => {
                return Err(self
                    .explain_plan_error(&state, &snapshot, &df_statement, &context.db, e)
                    .await)
            }
            (Err(e), None) => return Err(e.into()),
        };
        if let Some(target) = remote {
            drop(snapshot);
            return self.write_remote(tenant, state, plan, target).await;
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
                .map(|()| job::Staged::Done(None)),
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
            (job::Staged::Done(affected_rows), _) => Ok(Outcome::Ok { affected_rows }),
            // Its target changed while its rows were computed: again, as the table's sole
            // writer, and should even that be overtaken (by a write that takes no claim, such
            // as dropping the project), holding the writer lock.
            (job::Staged::TargetChanged, Some(statement)) => {
                let next = match turn {
                    Turn::Optimistic => Turn::SoleWriter,
                    _ => Turn::WriterLock,
                };
                Box::pin(self.execute_sql(tenant, context, statement, None, next, swept)).await
            }
            (job::Staged::TargetChanged, None) => Err(Error::internal(
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
        if self.services.store.in_transaction() || !sweeping(&self.services.store)? {
            return Err(refused);
        }
        #[cfg(test)]
        sweep_waits::waited(&self.services.store);
        let until = std::time::Instant::now() + SWEEP_WAIT;
        loop {
            if crate::cancel::check().is_err() || std::time::Instant::now() >= until {
                return Err(refused);
            }
            // A read of the small landings table: the sweeper removes a step's worth at a
            // time, each its own commit, and nothing signals the last one to a statement.
            tokio::time::sleep(SWEEP_POLL).await;
            if !sweeping(&self.services.store)? {
                return Ok(());
            }
        }
    }

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
                    if plan_cache::is_reentrant(&physical)
                        && self.services.store.commits() == generation
                    {
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
    async fn explain_plan_error(
        &self,
        state: &SessionState,
        snapshot: &Snapshot,
        statement: &datafusion::sql::parser::Statement,
        db: &str,
        error: datafusion::error::DataFusionError,
    ) -> Error {
        let error = Error::from(error);
        let created = match statement {
            datafusion::sql::parser::Statement::Statement(s) => match s.as_ref() {
                Statement::CreateTable(c) => Some(c),
                _ => None,
            },
            _ => None,
        };
        // A new table's own name is not a missing table (its columns may be).
        if !error.message().contains("not found") || created.is_some_and(|c| c.query.is_none()) {
            return error;
        }
        let Ok(references) = state.resolve_table_references(statement) else {
            return error;
        };
        let target =
            created.and_then(|c| object_name_to_table_reference(c.name.clone(), true).ok());
        for reference in references {
            if target.as_ref() == Some(&reference) {
                continue;
            }
            // A datasource's table: in its own words when it lacks it ("relation … does not
            // exist"); `pg.schema.table` names another of its schemas.
            if let Some(missing) = self.missing_remote(snapshot, &reference, db).await {
                return missing;
            }
            let Some((schema, table)) = snapshot::db_and_table(&reference, db) else {
                let catalog = reference.catalog().unwrap_or_default();
                // `files.book.sheet`: the workbook said what is missing.
                if catalog.eq_ignore_ascii_case(FILES_DB) {
                    return error;
                }
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
                Ok(Some(Namespace::Log))
                    if !crate::catalog::namespace::LOG_TABLES
                        .contains(&table.to_ascii_lowercase().as_str()) =>
                {
                    return Error::not_found(format!(
                        "Table '{table}' not found in database: {}",
                        crate::catalog::namespace::LOG_DB
                    ));
                }
                _ => {}
            }
        }
        error
    }

    /// Why the datasource table `reference` names cannot be read, when it names one that does
    /// not exist (`pg.t`, or `pg.schema.t` for another schema of a PostgreSQL datasource).
    async fn missing_remote(
        &self,
        snapshot: &Snapshot,
        reference: &TableReference,
        db: &str,
    ) -> Option<Error> {
        let (mut source, table) = match reference {
            TableReference::Full {
                catalog,
                schema,
                table,
            } if catalog.as_ref() != snapshot::CATALOG => {
                let Ok(Some(Namespace::Datasource(mut source))) = snapshot.namespace(catalog)
                else {
                    return None;
                };
                source.parameters.insert(
                    "schema".into(),
                    serde_json::Value::String(schema.to_string()),
                );
                (source, table.to_string())
            }
            _ => {
                let (schema, table) = snapshot::db_and_table(reference, db)?;
                match snapshot.namespace(&schema) {
                    Ok(Some(Namespace::Datasource(source))) => (source, table),
                    _ => return None,
                }
            }
        };
        if table.starts_with(crate::services::connectors::table::NATIVE) {
            return None;
        }
        source.name = source.name.to_ascii_lowercase();
        let connection = Connection::of(&source, &self.services.net).ok()?;
        match connection.table(&table).await {
            Ok(Some(_)) => None,
            Ok(None) => Some(connection.missing_table(&source.name, &table).await),
            Err(e) => Some(e),
        }
    }
}
