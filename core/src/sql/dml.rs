//! Statements that change stored tables: INSERT, UPDATE, DELETE, TRUNCATE, CREATE TABLE [AS],
//! DROP TABLE. DataFusion plans them; this module runs the plans into one redb write
//! transaction, on a blocking thread so the transaction never crosses an `.await`.
//! UPDATE and DELETE rewrite the table in order, keeping rows whose predicate is not true.

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{Column, TableReference};
use datafusion::execution::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{
    lit, when, CreateMemoryTable, DmlStatement, DropTable, Expr, LogicalPlan, LogicalPlanBuilder,
    WriteOp,
};
use futures::StreamExt;
use tokio::runtime::Handle;

use super::catalog::{Namespace, Snapshot, StoredTable, FILES_DB, SYSTEM_DB};
use super::names::{self, NameHint};
use crate::error::{Error, Result};
use crate::store::{Store, WriteGuard, WriteLock};
use crate::tables::{self, TableWriter};
use crate::tenant::TenantId;

const HIT: &str = "__mindlite_hit";

/// Everything a write needs on its blocking thread.
pub(crate) struct WriteJob {
    pub(crate) store: Arc<Store>,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) state: SessionState,
    pub(crate) tenant: TenantId,
    pub(crate) db: String,
}

impl WriteJob {
    /// Runs `f` on a blocking thread inside a write transaction begun under `lock`; async
    /// pieces inside use `Handle::block_on`. `f` commits; dropping the guard aborts.
    pub(crate) async fn run<T: Send + 'static>(
        self,
        lock: WriteLock,
        f: impl FnOnce(&WriteJob, WriteGuard, &Handle) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let handle = Handle::current();
        tokio::task::spawn_blocking(move || {
            let guard = self.store.begin_write(lock)?;
            f(&self, guard, &handle)
        })
        .await
        .map_err(|e| Error::internal(format!("write task failed: {e}")))?
    }

    /// `(project, table)` that a table reference names, checking that the database is a project.
    fn resolve(&self, reference: &TableReference) -> Result<(String, String)> {
        let (db, table) = match reference {
            TableReference::Bare { table } => (self.db.clone(), table.to_string()),
            TableReference::Partial { schema, table } => (schema.to_string(), table.to_string()),
            TableReference::Full {
                catalog,
                schema,
                table,
            } if catalog.as_ref() == super::catalog::CATALOG => {
                (schema.to_string(), table.to_string())
            }
            TableReference::Full { catalog, .. } => {
                return Err(Error::not_found(format!("Database '{catalog}' not found")))
            }
        };
        match self.snapshot.namespace(&db)? {
            Some(Namespace::Project(p)) => Ok((p.name, table)),
            Some(Namespace::System) | Some(Namespace::Files) => Err(Error::invalid(format!(
                "Database '{}' is read-only: tables can only be written in a project",
                if db.eq_ignore_ascii_case(SYSTEM_DB) {
                    SYSTEM_DB
                } else {
                    FILES_DB
                }
            ))),
            None => Err(Error::not_found(format!("Database '{db}' not found"))),
        }
    }

    /// Pulls every batch of `plan` through `sink`, inside this blocking thread.
    fn drain(
        &self,
        handle: &Handle,
        plan: &LogicalPlan,
        mut sink: impl FnMut(datafusion::arrow::record_batch::RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let physical = handle.block_on(self.state.create_physical_plan(plan))?;
        let mut stream =
            handle.block_on(async { super::order::execute(physical, self.state.task_ctx()) })?;
        while let Some(batch) = handle.block_on(stream.next()) {
            sink(batch?)?;
        }
        Ok(())
    }
}

fn stored_target(dml: &DmlStatement) -> Result<tables::TableRecord> {
    let provider = datafusion::catalog::default_table_source::source_as_provider(&dml.target)?;
    provider
        .downcast_ref::<StoredTable>()
        .map(|t| t.record.clone())
        .ok_or_else(|| Error::invalid(format!("Table '{}' is read-only", dml.table_name)))
}

/// INSERT, UPDATE, DELETE and TRUNCATE; returns the affected row count.
pub(crate) fn run_dml(
    job: &WriteJob,
    guard: WriteGuard,
    handle: &Handle,
    dml: DmlStatement,
) -> Result<u64> {
    // Refuses writes outside projects with a message naming the database.
    job.resolve(&dml.table_name)?;
    let record = stored_target(&dml)?;
    let affected = match &dml.op {
        WriteOp::Insert(InsertOp::Append) | WriteOp::Insert(InsertOp::Overwrite) => {
            let mut writer = if matches!(dml.op, WriteOp::Insert(InsertOp::Overwrite)) {
                TableWriter::replace(&guard.txn, job.tenant, record)?
            } else {
                TableWriter::append(&guard.txn, job.tenant, record)?
            };
            job.drain(handle, &dml.input, |batch| writer.push(batch))?;
            let n = writer.rows_written();
            writer.finish()?;
            n
        }
        WriteOp::Insert(InsertOp::Replace) => {
            return Err(Error::invalid(
                "REPLACE INTO is not supported: tables have no unique keys",
            ))
        }
        WriteOp::Delete => {
            let (predicate, scan) = split_filter(&dml.input)?;
            let keep = LogicalPlanBuilder::from(scan)
                .filter(predicate.is_not_true())?
                .build()?;
            let before = record.row_count;
            let mut writer = TableWriter::replace(&guard.txn, job.tenant, record)?;
            job.drain(handle, &keep, |batch| writer.push(batch))?;
            let kept = writer.rows_written();
            writer.finish()?;
            before - kept
        }
        WriteOp::Update => {
            let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
                return Err(Error::invalid("UPDATE: unexpected plan shape"));
            };
            let (predicate, scan) = split_filter(&projection.input)?;
            let mut writer = TableWriter::replace(&guard.txn, job.tenant, record)?;
            let mut updated = 0u64;
            if has_subquery(&predicate) {
                if predicate.is_volatile() {
                    return Err(Error::invalid(
                        "UPDATE … WHERE with both a subquery and a volatile function (such as random()) is not supported",
                    ));
                }
                // DataFusion runs IN / EXISTS subqueries only inside filters, so rows are taken in
                // two filtered passes: the untouched ones, then the updated ones (which thereby
                // move to the end of the table).
                let kept = LogicalPlanBuilder::from(scan)
                    .filter(predicate.is_not_true())?
                    .build()?;
                job.drain(handle, &kept, |batch| writer.push(batch))?;
                job.drain(handle, &dml.input, |batch| {
                    updated += batch.num_rows() as u64;
                    writer.push(batch)
                })?;
            } else {
                // One pass in table order: each column becomes CASE WHEN hit THEN new ELSE old.
                let hit = predicate.is_true();
                let mut exprs = Vec::with_capacity(projection.expr.len() + 1);
                for (i, new_value) in projection.expr.iter().enumerate() {
                    let (qualifier, field) = scan.schema().qualified_field(i);
                    let old = Expr::Column(Column::from((qualifier, field)));
                    let new_value = new_value.clone().unalias();
                    let value = if new_value == old {
                        old
                    } else {
                        when(hit.clone(), new_value).otherwise(old)?
                    };
                    exprs.push(value.alias(field.name()));
                }
                exprs.push(hit.alias(HIT));
                let rewrite = LogicalPlanBuilder::from(scan).project(exprs)?.build()?;
                job.drain(handle, &rewrite, |batch| {
                    let last = batch.num_columns() - 1;
                    updated += batch.column(last).as_boolean().true_count() as u64;
                    writer.push(batch.project(&(0..last).collect::<Vec<_>>())?)
                })?;
            }
            writer.finish()?;
            updated
        }
        WriteOp::Truncate => {
            let n = record.row_count;
            TableWriter::replace(&guard.txn, job.tenant, record)?.finish()?;
            n
        }
        other => return Err(Error::invalid(format!("{other} is not supported"))),
    };
    guard.commit()?;
    Ok(affected)
}

fn has_subquery(predicate: &Expr) -> bool {
    predicate
        .exists(|e| {
            Ok(matches!(
                e,
                Expr::InSubquery(_) | Expr::Exists(_) | Expr::ScalarSubquery(_)
            ))
        })
        .unwrap_or(true)
}

/// Splits `Filter(p, scan)` into `(p, scan)`; a bare scan gets the predicate `true`.
fn split_filter(plan: &LogicalPlan) -> Result<(Expr, LogicalPlan)> {
    match plan {
        LogicalPlan::Filter(filter) => {
            check_scan(&filter.input)?;
            Ok((filter.predicate.clone(), filter.input.as_ref().clone()))
        }
        other => {
            check_scan(other)?;
            Ok((lit(true), other.clone()))
        }
    }
}

fn check_scan(plan: &LogicalPlan) -> Result<()> {
    match plan {
        LogicalPlan::TableScan(_) => Ok(()),
        LogicalPlan::SubqueryAlias(alias) => check_scan(&alias.input),
        _ => Err(Error::invalid(
            "UPDATE and DELETE take one table and a WHERE clause; FROM, USING, ORDER BY and LIMIT are not supported (use a subquery in WHERE)",
        )),
    }
}

/// CREATE TABLE (with columns, or AS a query); returns the rows written when there was a query.
pub(crate) fn create_table(
    job: &WriteJob,
    guard: WriteGuard,
    handle: &Handle,
    create: CreateMemoryTable,
    hints: Option<Vec<NameHint>>,
) -> Result<Option<u64>> {
    let (project, name) = job.resolve(&create.name)?;
    if create.temporary {
        return Err(Error::invalid("TEMPORARY tables are not supported"));
    }
    if !create.constraints.is_empty() {
        return Err(Error::invalid(
            "PRIMARY KEY, UNIQUE and other constraints are not supported yet; NOT NULL is",
        ));
    }
    if !create.column_defaults.is_empty() {
        return Err(Error::invalid(
            "DEFAULT column values are not supported yet",
        ));
    }
    let from_query =
        !matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row);
    let input_schema = create.input.schema().as_arrow().clone();
    let names = names::column_names(&input_schema, hints.as_deref(), names::Purpose::Store);
    // A table made from a query takes its column names as the query shows them, and allows NULLs
    // everywhere, as DuckDB and SQLite do.
    let fields: Vec<Field> = input_schema
        .fields()
        .iter()
        .zip(&names)
        .map(|(f, n)| {
            let field = f.as_ref().clone();
            if from_query {
                field.with_name(n.clone()).with_nullable(true)
            } else {
                field
            }
        })
        .collect();
    let schema = Schema::new(fields);
    if job.snapshot.table(&project, &name)?.is_some() {
        if create.if_not_exists {
            return Ok(None);
        }
        if !create.or_replace {
            return Err(Error::conflict(format!(
                "Table '{name}' already exists in database: {project}"
            )));
        }
        tables::drop(&guard.txn, job.tenant, &project, &name)?;
    }
    let record = tables::create(&guard.txn, job.tenant, &project, &name, &schema)?;
    let mut affected = None;
    if from_query {
        let mut writer = TableWriter::append(&guard.txn, job.tenant, record)?;
        let target = Arc::clone(writer.schema());
        job.drain(handle, &create.input, |batch| {
            writer.push(datafusion::arrow::record_batch::RecordBatch::try_new(
                Arc::clone(&target),
                batch.columns().to_vec(),
            )?)
        })?;
        affected = Some(writer.rows_written());
        writer.finish()?;
    }
    guard.commit()?;
    Ok(affected)
}

/// DROP TABLE [IF EXISTS].
pub(crate) fn drop_table(job: &WriteJob, guard: WriteGuard, drop: DropTable) -> Result<()> {
    let (project, name) = job.resolve(&drop.name)?;
    if !tables::drop(&guard.txn, job.tenant, &project, &name)? && !drop.if_exists {
        return Err(Error::not_found(format!(
            "Table '{name}' not found in database: {project}"
        )));
    }
    guard.commit()
}
