//! Statements that change stored tables: INSERT, UPDATE, DELETE, TRUNCATE, CREATE TABLE [AS],
//! DROP TABLE. DataFusion plans them; this module runs the plans into one redb write
//! transaction, on a blocking thread so the transaction never crosses an `.await`.
//! UPDATE and DELETE evaluate their WHERE chunk by chunk and rewrite only the chunks it matches,
//! in place; a WHERE with a subquery (which DataFusion runs only inside a plan) rewrites the table.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{filter_record_batch, not};
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{Column, TableReference};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{
    lit, when, CreateMemoryTable, DmlStatement, DropTable, Expr, LogicalPlan, LogicalPlanBuilder,
    WriteOp,
};
use datafusion::physical_expr::PhysicalExpr;
use futures::StreamExt;
use tokio::runtime::Handle;

use super::catalog::{Namespace, Snapshot, StoredTable, FILES_DB, SYSTEM_DB};
use super::names::{self, NameHint};
use super::session::Session;
use crate::error::{Error, Result};
use crate::store::{Store, WriteGuard, WriteLock};
use crate::tables::{self, TableWriter};
use crate::tenant::TenantId;

/// Everything a write needs on its blocking thread.
pub(crate) struct WriteJob {
    pub(crate) store: Arc<Store>,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) state: Session,
    pub(crate) tenant: TenantId,
    pub(crate) db: String,
    /// Set when the caller stops waiting (a cancelled query): the write stops and aborts.
    pub(crate) cancelled: Arc<AtomicBool>,
}

impl WriteJob {
    /// Runs `f` on a blocking thread inside a write transaction begun under `lock`; async
    /// pieces inside use `Handle::block_on`. `f` commits; dropping the guard aborts.
    pub(crate) async fn run<T: Send + 'static>(
        self,
        lock: WriteLock,
        f: impl FnOnce(&WriteJob, WriteGuard, &Handle) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        /// Marks the write cancelled when the waiting future is dropped before it finished.
        struct CancelOnDrop(Option<Arc<AtomicBool>>);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                if let Some(flag) = &self.0 {
                    flag.store(true, Ordering::SeqCst);
                }
            }
        }
        let handle = Handle::current();
        let mut cancel = CancelOnDrop(Some(Arc::clone(&self.cancelled)));
        let result = tokio::task::spawn_blocking(move || {
            let mut guard = self.store.begin_write(lock)?;
            guard.cancelled = Arc::clone(&self.cancelled);
            f(&self, guard, &handle)
        })
        .await
        .map_err(|e| Error::internal(format!("write task failed: {e}")));
        // Finished: nothing left to cancel.
        cancel.0 = None;
        result?
    }

    /// `(project, table)` that a table reference names, checking that the database is a project.
    fn resolve(&self, reference: &TableReference) -> Result<(String, String)> {
        let (db, table) = self.split(reference)?;
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
            Some(Namespace::Datasource(source)) => Err(Error::invalid(format!(
                "Datasource '{}' takes INSERT INTO and CREATE TABLE … (SELECT …); other changes to its tables are made in the datasource itself",
                source.name
            ))),
            None => Err(Error::not_found(format!("Database '{db}' not found"))),
        }
    }

    /// The database (the current one when not named) and table a reference names.
    fn split(&self, reference: &TableReference) -> Result<(String, String)> {
        Ok(match reference {
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
        })
    }

    /// Plans `expr` over the rows of `scan` for evaluation on stored chunks (with DataFusion's
    /// type coercion, so `id = 1.5` on an integer column works as in a query).
    fn physical(&self, expr: Expr, scan: &LogicalPlan) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self.state.create_physical_expr(expr, scan.schema())?)
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
            if self.cancelled.load(Ordering::SeqCst) {
                return Err(Error::new(
                    crate::ErrorKind::Unavailable,
                    "The statement was cancelled before it committed; nothing was written",
                ));
            }
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
            job.drain(handle, &dml.input, |batch| writer.push(batch))
                .map_err(|e| {
                    // Arrow's message names the VALUES column (`column1`), not the table.
                    if e.message().contains("non-nullable") {
                        let message = format!(
                            "NULL value violates a NOT NULL constraint of table '{}': {}",
                            dml.table_name,
                            e.message()
                        );
                        Error::new(e.kind(), message)
                    } else {
                        e
                    }
                })?;
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
            if has_subquery(&predicate) {
                // Subqueries run only inside DataFusion plans: keep what does not match, in one pass.
                let keep = LogicalPlanBuilder::from(scan)
                    .filter(predicate.is_not_true())?
                    .build()?;
                let before = record.row_count;
                let mut writer = TableWriter::replace(&guard.txn, job.tenant, record)?;
                job.drain(handle, &keep, |batch| writer.push(batch))?;
                let kept = writer.rows_written();
                writer.finish()?;
                before - kept
            } else {
                let hit = job.physical(predicate.is_true(), &scan)?;
                let mut deleted = 0u64;
                tables::rewrite_chunks(&guard.txn, job.tenant, record, |batch| {
                    let hits = evaluate(&hit, &batch)?;
                    let hits = hits.as_boolean();
                    if hits.true_count() == 0 {
                        return Ok(None);
                    }
                    deleted += hits.true_count() as u64;
                    Ok(Some(filter_record_batch(&batch, &not(hits)?)?))
                })?;
                deleted
            }
        }
        WriteOp::Update => {
            let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
                return Err(Error::invalid("UPDATE: unexpected plan shape"));
            };
            let (predicate, scan) = split_filter(&projection.input)?;
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
                let mut writer = TableWriter::replace(&guard.txn, job.tenant, record)?;
                job.drain(handle, &kept, |batch| writer.push(batch))?;
                job.drain(handle, &dml.input, |batch| {
                    updated += batch.num_rows() as u64;
                    writer.push(batch)
                })?;
                writer.finish()?;
            } else {
                // Chunk by chunk: chunks without a matching row stay as they are; in the others
                // each column becomes CASE WHEN hit THEN new ELSE old.
                let hit = predicate.is_true();
                let mut columns = Vec::with_capacity(projection.expr.len());
                for (i, new_value) in projection.expr.iter().enumerate() {
                    let (qualifier, field) = scan.schema().qualified_field(i);
                    let old = Expr::Column(Column::from((qualifier, field)));
                    let new_value = new_value.clone().unalias();
                    let value = if new_value == old {
                        old
                    } else {
                        when(hit.clone(), new_value).otherwise(old)?
                    };
                    columns.push(job.physical(value, &scan)?);
                }
                let hit = job.physical(hit, &scan)?;
                tables::rewrite_chunks(&guard.txn, job.tenant, record, |batch| {
                    let hits = evaluate(&hit, &batch)?;
                    let hits = hits.as_boolean().true_count();
                    if hits == 0 {
                        return Ok(None);
                    }
                    updated += hits as u64;
                    let values = columns
                        .iter()
                        .map(|column| evaluate(column, &batch))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Some(RecordBatch::try_new(batch.schema(), values)?))
                })?;
            }
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

/// Evaluates a planned expression on a chunk's rows.
fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
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
        tables::drop_table(&guard.txn, job.tenant, &project, &name)?;
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

/// DROP TABLE [IF EXISTS]; `DROP TABLE files.t` removes an uploaded file, as in MindsDB.
pub(crate) fn drop_table(job: &WriteJob, guard: WriteGuard, drop: DropTable) -> Result<()> {
    let (db, table) = job.split(&drop.name)?;
    let (project, name) = match job.snapshot.namespace(&db)? {
        Some(Namespace::Files) => (FILES_DB.to_string(), table),
        _ => job.resolve(&drop.name)?,
    };
    if !tables::drop_table(&guard.txn, job.tenant, &project, &name)? && !drop.if_exists {
        return Err(Error::not_found(format!(
            "Table '{name}' not found in database: {project}"
        )));
    }
    guard.commit()
}

#[cfg(test)]
mod tests {
    use crate::tables::{self, CHUNK_ORDER, TABLES};
    use crate::{Config, Engine, TenantId};

    /// Chunk ids of `mindsdb.t`, in row order.
    fn chunk_ids(engine: &Engine) -> Vec<u64> {
        let txn = engine.store().read().unwrap();
        let tables_table = txn.open_table(TABLES).unwrap();
        let record = tables::get(&tables_table, TenantId::LOCAL, "mindsdb", "t")
            .unwrap()
            .unwrap();
        let order = txn.open_table(CHUNK_ORDER).unwrap();
        tables::chunk_order(&order, record.id)
            .unwrap()
            .into_iter()
            .map(|(_, id)| id)
            .collect()
    }

    #[test]
    fn update_and_delete_rewrite_only_the_chunks_they_touch() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE t AS SELECT value AS id, 'x' AS s FROM generate_series(1, 200000) ORDER BY id");
        let before = chunk_ids(&engine);
        assert_eq!(before.len(), 4, "200,000 rows make four chunks");

        assert_eq!(
            sql("UPDATE t SET s = 'y' WHERE id = 70000").affected_rows,
            Some(1)
        );
        let after = chunk_ids(&engine);
        assert_eq!(
            (after[0], after[2], after[3]),
            (before[0], before[2], before[3])
        );
        assert_ne!(
            after[1], before[1],
            "the chunk holding id 70000 is rewritten"
        );

        assert_eq!(
            sql("DELETE FROM t WHERE id > 196608").affected_rows,
            Some(3392)
        );
        assert_eq!(
            chunk_ids(&engine).len(),
            3,
            "the emptied last chunk is gone"
        );
        assert_eq!(sql("DELETE FROM t WHERE id = -1").affected_rows, Some(0));
        assert_eq!(
            chunk_ids(&engine)[..3],
            after[..3],
            "a DELETE matching nothing writes nothing"
        );

        let rows = sql(
            "SELECT count(*), min(id), max(id), sum(CASE WHEN s = 'y' THEN 1 ELSE 0 END) FROM t",
        );
        let row: Vec<String> = (0..4)
            .map(|i| {
                datafusion::arrow::util::display::array_value_to_string(
                    rows.batches[0].column(i),
                    0,
                )
                .unwrap()
            })
            .collect();
        assert_eq!(row, ["196608", "1", "196608", "1"]);
        // Row order survives the in-place rewrites.
        let ids = sql("SELECT id FROM t");
        let ids: Vec<i64> = ids
            .batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(ids, (1..=196608).collect::<Vec<i64>>());
    }
}
