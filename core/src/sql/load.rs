//! Writes that leave the store: INSERT and CREATE TABLE into a datasource's table (sent to its
//! server), and loads of Arrow batches into a stored table or an uploaded file.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::sql::sqlparser::ast::Statement;

use super::catalog::snapshot::{self, Namespace, Snapshot};
use super::planning::session::Session;
use super::request::{LoadMode, Outcome};
use super::write::constraints::Checks;
use super::SqlRunner;
use crate::catalog::constraints::Constraints;
use crate::catalog::datasources;
use crate::catalog::projects;
use crate::catalog::tables;
use crate::error::{Error, Result};
use crate::tenant::TenantId;

impl SqlRunner {
    /// The datasource table an INSERT or CREATE TABLE writes, read from the statement before
    /// planning; `None` for writes into the store.
    pub(crate) fn remote_write(
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
            Statement::Drop {
                object_type: datafusion::sql::sqlparser::ast::ObjectType::Table,
                names,
                ..
            } if names.len() == 1 => (names[0].clone(), None),
            _ => return Ok(None),
        };
        let Ok(reference) = datafusion::sql::planner::object_name_to_table_reference(name, true)
        else {
            return Ok(None);
        };
        let Some((db, table)) = snapshot::db_and_table(&reference, db) else {
            return Ok(None);
        };
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
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
    /// remote transaction; the store is not touched. `DROP TABLE pg.t` drops it there.
    pub(crate) async fn write_remote(
        &self,
        tenant: TenantId,
        state: Session,
        plan: LogicalPlan,
        target: RemoteWrite,
    ) -> Result<Outcome> {
        let connection =
            crate::services::connectors::Connection::of(&target.source, &self.services.net)?;
        let settings = connection.writable(&target.table)?;
        let (input, existing) = match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
                let existing = match (create.or_replace, create.if_not_exists) {
                    (true, _) => crate::services::connectors::table::Existing::Replace,
                    (false, true) => crate::services::connectors::table::Existing::Keep,
                    (false, false) => crate::services::connectors::table::Existing::Fail,
                };
                (create.input.as_ref().clone(), Some(existing))
            }
            LogicalPlan::Dml(insert) if matches!(insert.op, WriteOp::Insert(_)) => {
                (insert.input.as_ref().clone(), None)
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(drop)) => {
                crate::services::connectors::table::drop_table(
                    settings,
                    &target.table,
                    drop.if_exists,
                )
                .await?;
                return Ok(Outcome::Ok {
                    affected_rows: None,
                });
            }
            other => {
                return Err(Error::invalid(format!(
                    "{} is not supported on datasource '{}'",
                    other.display(),
                    target.source.name
                )))
            }
        };
        // Optimizing (push-down writes the remote statement) and physical planning are
        // data-sized work: on the planning pool, not an async worker.
        let (state, physical) = self
            .plan_on_pool(tenant, async move {
                let physical = state.create_physical_plan(&input).await;
                (state, physical)
            })
            .await?;
        let physical = physical?;
        let stream = datafusion::physical_plan::execute_stream(physical, state.task_ctx())?;
        let written = match existing {
            Some(existing) => {
                crate::services::connectors::table::create_table(
                    settings,
                    &target.table,
                    existing,
                    stream,
                )
                .await?
            }
            None => Some(
                crate::services::connectors::table::insert(
                    settings,
                    &target.table,
                    target.columns,
                    stream,
                )
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
            &db,
            table,
            schema,
            Box::new(move |sink| batches.into_iter().try_for_each(sink)),
            mode,
        )
        .await
    }

    /// Loads the batches `rows` hands on into the table `table` of the project `db`, as
    /// [`SqlRunner::load`] describes. The rows are read and staged (on a blocking
    /// thread, so `rows` may parse as it goes) before the writer lock is taken; a table
    /// replaced or dropped meanwhile is an error, and nothing is written.
    pub(crate) async fn load_into(
        &self,
        tenant: TenantId,
        db: &str,
        table: &str,
        schema: SchemaRef,
        rows: BatchSource,
        mode: LoadMode,
    ) -> Result<u64> {
        let db = db.to_ascii_lowercase();
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let state = self.session(Arc::clone(&snapshot), &db, 1)?;
        let job = self.job(tenant, &db, snapshot, state, None, None);
        let project = match job.snapshot.namespace(&db)? {
            Some(Namespace::Project(p)) => p.name,
            Some(_) => {
                return Err(Error::invalid(format!(
                    "Database '{db}' is read-only: tables can only be written in a project"
                )))
            }
            None => return Err(Error::not_found(format!("Database '{db}' not found"))),
        };
        if mode != LoadMode::Append {
            crate::catalog::namespace::validate_name("table", table)?;
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
            (_, LoadMode::Create | LoadMode::Replace) => stored_schema(&schema),
        };
        let table = table.to_string();
        let loaded = job
            .run(move |job, handle| {
                let mut staged = match (&read, mode) {
                    (Some(record), LoadMode::Append) => {
                        job.appending(record, Arc::clone(&staged_schema))?
                    }
                    _ => job.staged(&table, Arc::clone(&staged_schema)),
                };
                let checks = match &read {
                    Some(record) => Some(Checks::of(&job.state, record, &staged_schema)?),
                    None => None,
                };
                rows(&mut |batch| {
                    job.check_cancelled()?;
                    let batch = staged.push(batch)?;
                    match &checks {
                        Some(checks) => checks.verify(&batch),
                        None => Ok(()),
                    }
                })?;
                let rows = staged.rows();
                if let (Some(record), LoadMode::Append, true) = (&read, mode, staged.lands()) {
                    // An upload has no next turn: a key it met in another statement's
                    // unpublished rows (see `dml::land_rows`) fails it as a change.
                    return match super::write::dml::land_rows(job, handle, &project, record, staged)? {
                        super::write::job::Staged::Done(rows) => Ok(rows),
                        super::write::job::Staged::TargetChanged => Err(Error::conflict(format!(
                            "Table '{table}' in database {project} was being written by another statement while the rows were written; nothing was written, try again"
                        ))),
                    };
                }
                let guard = job.lock(handle)?;
                let current =
                    tables::record(&guard.txn, job.tenant, &project, &table)?;
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
                        if projects::named(&guard.txn, job.tenant, &project)?.is_none() {
                            return Err(Error::not_found(format!("Database '{project}' not found")));
                        }
                        tables::create(&guard.txn, job.tenant, &project, &table, &staged_schema, Constraints::default())?
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

    /// Creates `tables` (none may exist) and loads their rows, in one transaction: all of
    /// them or none. The rows are read and staged, table after table, before the writer lock
    /// is taken. Returns the rows of the first.
    pub(crate) async fn load_new(&self, tenant: TenantId, tables: Vec<NewTable>) -> Result<u64> {
        let Some(first) = tables.first() else {
            return Ok(0);
        };
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let state = self.session(Arc::clone(&snapshot), &first.db, 1)?;
        let job = self.job(tenant, &first.db, snapshot, state, None, None);
        let exists = |db: &str, name: &str| {
            Error::conflict(format!("Table '{name}' already exists in database: {db}"))
        };
        for table in &tables {
            if job.snapshot.table(&table.db, &table.name)?.is_some() {
                return Err(exists(&table.db, &table.name));
            }
        }
        let loaded = job
            .run(move |job, handle| {
                let mut staged = Vec::new();
                for table in tables {
                    let Some((schema, source)) = (table.open)()? else {
                        continue;
                    };
                    let schema = stored_schema(&schema);
                    let mut rows = job.staged(&table.name, Arc::clone(&schema));
                    source(&mut |batch| {
                        job.check_cancelled()?;
                        rows.push(batch).map(|_| ())
                    })?;
                    staged.push((table.db, table.name, schema, rows));
                }
                let guard = job.lock(handle)?;
                let mut first = None;
                for (db, name, schema, rows) in staged {
                    if tables::record(&guard.txn, job.tenant, &db, &name)?.is_some() {
                        return Err(exists(&db, &name));
                    }
                    let record = tables::create(
                        &guard.txn,
                        job.tenant,
                        &db,
                        &name,
                        &schema,
                        Constraints::default(),
                    )?;
                    first.get_or_insert(rows.rows());
                    let mut writer = tables::TableWriter::append(&guard.txn, job.tenant, record)?;
                    writer.push_staged(rows)?;
                    writer.finish()?;
                }
                guard.commit()?;
                Ok(first.unwrap_or(0))
            })
            .await;
        self.plans.clear();
        loaded
    }
}

/// Batches to load, handed to the sink one at a time as they are read (an upload parses its
/// file as it goes); the sink's error stops the reading.
pub(crate) type BatchSource =
    Box<dyn FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()> + Send>;

/// A table [`SqlRunner::load_new`] creates: in database `db` (a project's, `files`, or a
/// workbook's sheets'), named `name`, its columns and rows what `open` gives when its turn
/// comes (`None`: no table after all).
pub(crate) struct NewTable {
    pub(crate) db: String,
    pub(crate) name: String,
    pub(crate) open: TableSource,
}

/// What makes a [`NewTable`]'s columns and rows when its turn comes.
pub(crate) type TableSource = Box<dyn FnOnce() -> Result<Option<(SchemaRef, BatchSource)>> + Send>;

/// A write that goes to a datasource's table.
pub(crate) struct RemoteWrite {
    source: datasources::Datasource,
    table: String,
    /// The columns an INSERT named, if it named any.
    columns: Option<Vec<String>>,
}

/// The schema loaded rows of `schema` are stored as (see [`stored_type`]).
fn stored_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(stored_type(f.data_type()))
            })
            .collect::<Vec<Field>>(),
    ))
}

/// The type a loaded column is stored as: dictionaries become their values; text becomes a
/// string view, the type SQL gives VARCHAR columns, so a loaded table and one made by CREATE
/// TABLE read alike (and short strings, held inside their views, group and compare without
/// touching a data buffer: half the CPU of a GROUP BY on a 100-value text column); binary
/// becomes its plain form, and half floats become floats.
fn stored_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Dictionary(_, values) => stored_type(values),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8View,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Float16 => DataType::Float32,
        other => other.clone(),
    }
}
