//! Statements that change stored tables: INSERT, UPDATE, DELETE, TRUNCATE, `CREATE TABLE [AS]`,
//! DROP TABLE. DataFusion plans them; this module runs the plans on a blocking thread, so the
//! transaction never crosses an `.await`.
//!
//! Writers never wait on readers: a write's input (the rows of INSERT … SELECT or CREATE TABLE
//! AS, including slow datasource reads, and the chunks an UPDATE or DELETE rewrites) is
//! computed from a read snapshot before the writer lock is taken, and staged (encoded chunks,
//! in memory then in a temporary file); the lock is held only to check that the target is
//! still the one read and to commit. If other writes keep changing the target meanwhile, the
//! statement runs again as the table's sole writer (see [`Claim`](crate::sql::write::job::Claim)), which cannot conflict and
//! leaves every other table free to be written.
//!
//! UPDATE and DELETE evaluate their WHERE chunk by chunk and rewrite only the chunks it
//! matches, in place; a WHERE with a subquery (which DataFusion runs only inside a plan)
//! rewrites the table.

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
use tokio::runtime::Handle;
use tokio::sync::OwnedRwLockWriteGuard;

use super::constraints::{self, Checks, Declared};
use super::job::{Staged, WriteJob};
use super::upsert::Conflict;
use crate::catalog::constraints::OnConflict;
use crate::catalog::namespace::FILES_DB;
use crate::catalog::tables::ReadTables;
use crate::catalog::tables::{self, Retired, Rewrite, StagedRows, TableRecord, TableWriter};
use crate::error::{Error, Result};
use crate::sql::catalog::names::{self, NameHint};
use crate::sql::catalog::snapshot::Namespace;
use crate::sql::catalog::stored_table::StoredTable;

/// What an INSERT writes, as computed before the writer lock.
enum Insert {
    /// Rows that replace the table's (INSERT OVERWRITE).
    Overwrite(StagedRows),
    /// Rows appended, whose keys nothing resolves (checked as they are written).
    Plain(StagedRows),
    /// Rows resolved against the stored rows they conflict with (OR REPLACE, DO NOTHING).
    Resolved(tables::Resolved),
    /// ON CONFLICT DO UPDATE, resolved likewise.
    Updated(super::upsert::Prepared),
}

fn stored_target(dml: &DmlStatement) -> Result<TableRecord> {
    let provider = datafusion::catalog::default_table_source::source_as_provider(&dml.target)?;
    provider
        .downcast_ref::<StoredTable>()
        .map(|t| t.record.clone())
        .ok_or_else(|| Error::invalid(format!("Table '{}' is read-only", dml.table_name)))
}

/// Arrow's message names the VALUES column (`column1`), not the table: say which table.
fn named_not_null(table: &TableReference, e: Error) -> Error {
    if e.message().contains("non-nullable") {
        let message = format!(
            "NULL value violates a NOT NULL constraint of table '{table}': {}",
            e.message()
        );
        Error::new(e.kind(), message)
    } else {
        e
    }
}

/// What a write that replaces every row of a table may write before its tenant's storage
/// limit applies (see [`WriteJob::credit`]): the bytes of the content it replaces, as read,
/// valid only while the table's chunk order is still `base` (a table that lost rows
/// meanwhile frees less: the write then runs again, against what it holds then).
struct Credit {
    bytes: u64,
    base: Option<Vec<(u64, u64)>>,
    _held: Option<OwnedRwLockWriteGuard<()>>,
}

impl WriteJob {
    /// What rows that replace every row of `read`'s table may write before the tenant's
    /// storage limit applies (see `storage::Replacement`): nothing for a tenant without one,
    /// a table small enough to be emptied in place, or while another write replacing the
    /// same table holds the credit (each would count the same bytes).
    fn credit(&self, read: &TableRecord) -> Result<Credit> {
        let snapshot = &self.snapshot.txn;
        let none = Credit {
            bytes: 0,
            base: None,
            _held: None,
        };
        if !tables::outgrows_a_step(read)
            || !crate::catalog::storage::limited(snapshot, self.tenant)?
        {
            return Ok(none);
        }
        let lock = self
            .store
            .object_lock(&format!("credit of table {}", read.id));
        let Ok(held) = lock.try_write_owned() else {
            return Ok(none);
        };
        Ok(Credit {
            bytes: tables::content_bytes(snapshot, read)?,
            base: Some(snapshot.chunk_order_of(read.id)?),
            _held: Some(held),
        })
    }
}

/// INSERT, UPDATE, DELETE and TRUNCATE; returns the affected row count. An INSERT's rows whose
/// unique key is taken are resolved as `conflict` says.
pub(crate) fn run_dml(
    job: &WriteJob,
    handle: &Handle,
    dml: DmlStatement,
    conflict: Conflict,
) -> Result<Staged<u64>> {
    // Refuses writes outside projects with a message naming the database.
    let (project, name) = job.resolve(&dml.table_name)?;
    let read = stored_target(&dml)?;
    let schema = job.snapshot.table_schema(read.id)?;
    let checks = Checks::of(&job.state, &read, &schema)?;
    let affected = match &dml.op {
        WriteOp::Insert(op) => {
            // Rows that may replace stored ones or update them are resolved against the
            // stored rows as the snapshot has them, before the writer lock (applied if the
            // table is still as read), and their entries made inside the transaction.
            let resolving = matches!(op, InsertOp::Replace)
                || conflict.on != OnConflict::Fail
                || conflict.update.is_some();
            let keyed = !read.constraints.unique_keys().is_empty();
            let resolved = keyed && resolving;
            let staging = match op {
                InsertOp::Overwrite => job.replacing(&read, schema)?,
                _ if resolved => job.staged(&read.name, schema),
                _ => job.appending(&read, schema)?,
            };
            let staged = job
                .stage(handle, &dml.input, staging, &checks)
                .map_err(|e| named_not_null(&dml.table_name, e))?;
            let plain = matches!(op, InsertOp::Append) && !resolved && conflict.update.is_none();
            if plain && staged.lands() {
                return land_rows(job, handle, &project, &read, staged);
            }
            if matches!(op, InsertOp::Overwrite) && staged.lands() && job.may_land {
                return land_renewal(job, handle, &project, &name, &read, staged, false);
            }
            let source = &job.snapshot.txn;
            let mut insert = match (op, &conflict.update) {
                (InsertOp::Overwrite, _) => Insert::Overwrite(staged),
                (InsertOp::Append, Some(upsert)) => {
                    Insert::Updated(upsert.prepare(job, source, &read, staged, &checks)?)
                }
                (InsertOp::Replace, _) if keyed => Insert::Resolved(tables::resolve_conflicts(
                    source,
                    &read,
                    staged,
                    OnConflict::Replace,
                    || job.spool(),
                )?),
                (InsertOp::Append, None) if keyed && conflict.on != OnConflict::Fail => {
                    Insert::Resolved(tables::resolve_conflicts(
                        source,
                        &read,
                        staged,
                        conflict.on,
                        || job.spool(),
                    )?)
                }
                _ => Insert::Plain(staged),
            };
            #[cfg(test)]
            if matches!(insert, Insert::Resolved(_) | Insert::Updated(_)) {
                watch::planned(&read.name);
            }
            let credit = match insert {
                Insert::Overwrite(_) => Some(job.credit(&read)?),
                _ => None,
            };
            let rewrite = match &mut insert {
                Insert::Resolved(resolved) => resolved.rewrite_mut(),
                Insert::Updated(prepared) => Some(prepared.rewrite_mut()),
                _ => None,
            };
            let landing = match rewrite {
                Some(rewrite) => match land_rewrite(job, handle, &project, &read, rewrite)? {
                    Some(landing) => landing,
                    None => return Ok(Staged::TargetChanged),
                },
                None => Landing::none(job, handle),
            };
            let guard = job.lock(handle)?;
            let Some(record) = job.still(&guard, &project, &name, &read)? else {
                return Ok(Staged::TargetChanged);
            };
            // Resolved by the keys the table had as read: a unique index made or dropped
            // since would resolve differently.
            if resolving && record.constraints != read.constraints {
                return Ok(Staged::TargetChanged);
            }
            let table = record.id;
            let rows = match insert {
                Insert::Overwrite(staged) => (|| {
                    if let Some(base) = credit.as_ref().and_then(|c| c.base.as_ref()) {
                        if guard.txn.chunk_order_of(record.id)? != *base {
                            return Ok(None);
                        }
                    }
                    let rows = staged.rows();
                    let replaced = credit.as_ref().map_or(0, |c| c.bytes);
                    let mut writer =
                        TableWriter::replace(&guard.txn, job.tenant, record, replaced)?;
                    writer.push_staged(staged)?;
                    writer.finish()?;
                    Ok(Some((rows, Retired::nothing())))
                })(),
                Insert::Plain(staged) => {
                    tables::append_staged(&guard.txn, job.tenant, record, staged)
                        .map(|rows| Some((rows, Retired::nothing())))
                }
                Insert::Resolved(resolved) => resolved.apply(&guard.txn, job.tenant, record),
                Insert::Updated(prepared) => prepared.apply(&guard.txn, job.tenant, record),
            };
            let Staged::Done(rows) = landed_over(job, &guard.txn, table, rows)? else {
                return Ok(Staged::TargetChanged);
            };
            // Resolved against rows another write has changed since: again, as the table's
            // sole writer.
            let Some((rows, retired)) = rows else {
                return Ok(Staged::TargetChanged);
            };
            guard.commit()?;
            landing.published(retired);
            return Ok(Staged::Done(rows));
        }
        WriteOp::Delete => {
            let (predicate, scan) = split_filter(&dml.input)?;
            if has_subquery(&predicate) {
                // Subqueries run only inside DataFusion plans: keep what does not match, in one pass.
                let keep = LogicalPlanBuilder::from(scan)
                    .filter(predicate.is_not_true())?
                    .build()?;
                let staged = job.stage(handle, &keep, job.replacing(&read, schema)?, &checks)?;
                let deleted = read.row_count - staged.rows();
                return replace_if_unchanged(job, handle, &project, &name, &read, staged)
                    .map(|done| done.map(|()| deleted));
            }
            let hit = job.physical(predicate.is_true(), &scan)?;
            let change = |batch: RecordBatch| {
                let hits = evaluate(&hit, &batch)?;
                let hits = hits.as_boolean();
                if hits.true_count() == 0 {
                    return Ok(None);
                }
                let kept = filter_record_batch(&batch, &not(hits)?)?;
                Ok(Some((kept, hits.true_count() as u64)))
            };
            rewrite(job, handle, &project, &name, &read, change)?
        }
        WriteOp::Update => {
            let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
                return Err(Error::invalid("UPDATE: unexpected plan shape"));
            };
            let (predicate, scan) = split_filter(&projection.input)?;
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
                let mut staged = job.replacing(&read, schema)?;
                job.drain(handle, &kept, |batch| staged.push(batch).map(drop))?;
                let untouched = staged.rows();
                job.drain(handle, &dml.input, |batch| {
                    checks.verify(&staged.push(batch)?)
                })?;
                let updated = staged.rows() - untouched;
                return replace_if_unchanged(job, handle, &project, &name, &read, staged)
                    .map(|done| done.map(|()| updated));
            }
            // Chunk by chunk: chunks without a matching row stay as they are; in the others
            // each column becomes CASE WHEN hit THEN new ELSE old.
            let hit = predicate.is_true();
            // bounded: one per column of the table
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
            let change = |batch: RecordBatch| {
                let hits = evaluate(&hit, &batch)?;
                let hits = hits.as_boolean().true_count();
                if hits == 0 {
                    return Ok(None);
                }
                let values = columns
                    .iter()
                    .map(|column| evaluate(column, &batch))
                    .collect::<Result<Vec<_>>>()?;
                let updated = RecordBatch::try_new(batch.schema(), values)?;
                checks.verify(&updated)?;
                Ok(Some((updated, hits as u64)))
            };
            rewrite(job, handle, &project, &name, &read, change)
                .map_err(|e| named_not_null(&dml.table_name, e))?
        }
        WriteOp::Truncate => {
            let guard = job.lock(handle)?;
            let Some(record) = job.still(&guard, &project, &name, &read)? else {
                return Ok(Staged::TargetChanged);
            };
            let n = record.row_count;
            // Writes no row: nothing to check against the limit.
            TableWriter::replace(&guard.txn, job.tenant, record, 0)?.finish()?;
            guard.commit()?;
            return Ok(Staged::Done(n));
        }
        other => return Err(Error::invalid(format!("{other} is not supported"))),
    };
    Ok(affected)
}

/// How many times a rewrite is computed from a fresh snapshot when other writes keep changing
/// its table between its reading and its commit; after that the statement runs again as the
/// table's sole writer (see [`Claim`](crate::sql::write::job::Claim)).
const OPTIMISTIC_ATTEMPTS: usize = 3;

/// Rewrites the chunks of `read` that `change` changes (returning their new rows and how many
/// rows it affected), computed from the snapshot and applied if the table is unchanged; if it
/// changed, computed again from a new snapshot (and, after [`OPTIMISTIC_ATTEMPTS`], the
/// statement is to run again as the table's sole writer).
fn rewrite(
    job: &WriteJob,
    handle: &Handle,
    project: &str,
    name: &str,
    read: &TableRecord,
    mut change: impl FnMut(RecordBatch) -> Result<Option<(RecordBatch, u64)>>,
) -> Result<Staged<u64>> {
    let affected = std::cell::Cell::new(0u64);
    let mut counted = |batch: RecordBatch| -> Result<Option<RecordBatch>> {
        Ok(change(batch)?.map(|(rows, hits)| {
            affected.set(affected.get() + hits);
            rows
        }))
    };
    let mut fresh: Option<redb::ReadTransaction> = None;
    let mut read = read.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        affected.set(0);
        let source = fresh.as_ref().unwrap_or(&job.snapshot.txn);
        let mut planned =
            tables::plan_rewrite(source, &read, job.spool(), job.spool(), &mut counted)?;
        #[cfg(test)]
        watch::planned(&read.name);
        let Some(landing) = land_rewrite(job, handle, project, &read, &mut planned)? else {
            return Ok(Staged::TargetChanged);
        };
        let guard = job.lock(handle)?;
        let Some(record) = job.still(&guard, project, name, &read)? else {
            return Ok(Staged::TargetChanged);
        };
        if planned.is_empty() {
            // Nothing matched in the snapshot; the table may have rows now that would: recheck
            // only if it changed.
            if guard.txn.chunk_order_of(record.id)? == source.chunk_order_of(read.id)? {
                return Ok(Staged::Done(0));
            }
        }
        let applied = tables::apply_rewrite(&guard.txn, job.tenant, record.clone(), planned);
        let Staged::Done(applied) = landed_over(job, &guard.txn, record.id, applied)? else {
            return Ok(Staged::TargetChanged);
        };
        if let Some(retired) = applied {
            guard.commit()?;
            landing.published(retired);
            return Ok(Staged::Done(affected.get()));
        }
        affected.set(0);
        if attempt >= OPTIMISTIC_ATTEMPTS {
            if !job.owns_target {
                // Other writes of the table keep committing in between: the statement runs
                // again as the table's sole writer (see `Claim`).
                return Ok(Staged::TargetChanged);
            }
            // What this attempt landed holds copies of the keys it keeps, which a rewrite
            // applied here would meet: again, holding the writer lock (it then lands nothing).
            if landing.id.is_some() {
                return Ok(Staged::TargetChanged);
            }
            // Only a write that takes no claim can have changed it (none of a statement's):
            // computed from what is there now, inside the transaction.
            let again =
                tables::plan_rewrite(&guard.txn, &record, job.spool(), job.spool(), &mut counted)?;
            let applied = tables::apply_rewrite(&guard.txn, job.tenant, record, again)?;
            debug_assert!(
                applied.is_some(),
                "a rewrite planned inside the transaction applies"
            );
            guard.commit()?;
            return Ok(Staged::Done(affected.get()));
        }
        // Another write landed in between: computed again from a snapshot taken after it.
        drop(guard);
        drop(landing);
        job.check_cancelled()?;
        let snapshot = job.store.read()?;
        match tables::record(&snapshot, job.tenant, project, name)? {
            Some(now) if now.id == read.id => read = now,
            _ => return Ok(Staged::TargetChanged),
        }
        fresh = Some(snapshot);
    }
}

/// Replaces the rows of `read` with `staged` if the table is as it was read; otherwise the
/// statement must run again under the lock (its rows were computed from an older state).
fn replace_if_unchanged(
    job: &WriteJob,
    handle: &Handle,
    project: &str,
    name: &str,
    read: &TableRecord,
    staged: StagedRows,
) -> Result<Staged<()>> {
    if staged.lands() && job.may_land {
        return land_renewal(job, handle, project, name, read, staged, true).map(|s| s.map(drop));
    }
    let credit = job.credit(read)?;
    let guard = job.lock(handle)?;
    let Some(record) = job.still(&guard, project, name, read)? else {
        return Ok(Staged::TargetChanged);
    };
    let before = job.snapshot.txn.chunk_order_of(read.id)?;
    if guard.txn.chunk_order_of(record.id)? != before {
        return Ok(Staged::TargetChanged);
    }
    let mut writer = TableWriter::replace(&guard.txn, job.tenant, record, credit.bytes)?;
    writer.push_staged(staged)?;
    writer.finish()?;
    guard.commit()?;
    Ok(Staged::Done(()))
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
/// A query's rows are staged before the lock is taken.
pub(crate) fn create_table(
    job: &WriteJob,
    handle: &Handle,
    create: CreateMemoryTable,
    hints: Option<Vec<NameHint>>,
    declared: Declared,
) -> Result<Staged<Option<u64>>> {
    let (project, name) = job.resolve(&create.name)?;
    if create.temporary {
        return Err(Error::invalid("TEMPORARY tables are not supported"));
    }
    let from_query =
        !matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row);
    let input_schema = create.input.schema().as_arrow().clone();
    let names = names::column_names(&input_schema, hints.as_deref(), names::Purpose::Store);
    let primary_key: Vec<usize> = create
        .constraints
        .iter()
        .flat_map(|c| match c {
            datafusion::common::Constraint::PrimaryKey(columns) => columns.clone(),
            datafusion::common::Constraint::Unique(_) => Vec::new(),
        })
        .collect();
    // A table made from a query takes its column names as the query shows them, and allows NULLs
    // everywhere, as DuckDB and SQLite do; a primary key's columns never hold NULL (as in
    // DuckDB; SQLite allows it only for historical reasons).
    let fields: Vec<Field> = input_schema
        .fields()
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (f, n))| {
            let field = f.as_ref().clone();
            let field = if from_query {
                field.with_name(n.clone()).with_nullable(true)
            } else {
                field
            };
            if primary_key.contains(&i) {
                field.with_nullable(false)
            } else {
                field
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let declared = constraints::of_create(&create, declared)?;
    let checks = Checks::of_constraints(&job.state, &name, &declared, &schema)?;
    if job.snapshot.table(&project, &name)?.is_some() && create.if_not_exists {
        return Ok(Staged::Done(None));
    }
    let mut staged = if from_query {
        // The query's batches carry its own field names: give them the table's.
        let target = Arc::clone(&schema);
        let indexes = tables::key_indexes(&name, &declared);
        let mut staged = StagedRows::replacing(&name, &indexes, Arc::clone(&schema), job.spool())?;
        job.drain(handle, &create.input, |batch| {
            job.check_cancelled()?;
            let batch = RecordBatch::try_new(Arc::clone(&target), batch.columns().to_vec())?;
            checks.verify(&staged.push(batch)?)
        })?;
        Some(staged)
    } else {
        None
    };
    // Rows of a keyed table that fill more than a chunk land ahead, as an append's do, under
    // the new table's ids (see `tables::RowLanding::creating`); the commit creates the table
    // with them. Declared before the write guard, so that the guard goes first.
    let mut landed = Landing::none(job, handle);
    let mut landing = None;
    if let Some(staged) = staged.take_if(|s| s.lands() && job.may_land) {
        let keep_going = || job.check_cancelled();
        let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>| {
            landing_step(job, handle, work)
        };
        let (rows, result) = tables::RowLanding::creating(
            job.tenant,
            &project,
            &name,
            &declared,
            staged,
            &mut step,
            &keep_going,
        );
        landed.id = rows.id();
        result?;
        landing = Some(rows);
    }
    let guard = job.lock(handle)?;
    // The project may have gone, or the name been taken, while the rows were computed
    // (`files` is always there).
    if project != FILES_DB
        && crate::catalog::projects::named(&guard.txn, job.tenant, &project)?.is_none()
    {
        return Ok(Staged::TargetChanged);
    }
    crate::catalog::rules::name_is_no_view(&guard.txn, job.tenant, &project, &name)?;
    let existing = tables::record(&guard.txn, job.tenant, &project, &name)?;
    if existing.is_some() {
        if create.if_not_exists {
            return Ok(Staged::Done(None));
        }
        if !create.or_replace {
            return Err(Error::conflict(format!(
                "Table '{name}' already exists in database: {project}"
            )));
        }
        tables::drop_table(&guard.txn, job.tenant, &project, &name)?;
    }
    if let Some(mut rows) = landing {
        let affected = rows.publish_created(&guard.txn, &schema, declared)?;
        guard.commit()?;
        landed.published(Retired::nothing());
        return Ok(Staged::Done(Some(affected)));
    }
    let record = tables::create(&guard.txn, job.tenant, &project, &name, &schema, declared)?;
    let mut affected = None;
    if let Some(staged) = staged {
        let mut writer = TableWriter::append(&guard.txn, job.tenant, record)?;
        affected = Some(staged.rows());
        writer.push_staged(staged)?;
        writer.finish()?;
    }
    guard.commit()?;
    Ok(Staged::Done(affected))
}

/// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] name ON project.table (columns)`: the entries are
/// encoded from the snapshot without the writer lock (a unique index's duplicates found
/// there), land a chunk per transaction under an id nothing names yet, and the index is
/// published in one short transaction; when that fails, nothing of it is left.
pub(crate) fn create_index(
    job: &WriteJob,
    handle: &Handle,
    project: &str,
    table: &str,
    index: crate::catalog::constraints::Index,
    if_not_exists: bool,
) -> Result<()> {
    let start = tables::IndexBuild::start(
        &job.snapshot.txn,
        job.tenant,
        project,
        table,
        index,
        if_not_exists,
    )?;
    let tables::IndexStart::Build(mut build) = start else {
        return Ok(());
    };
    let keep_going = || job.check_cancelled();
    let gone = || {
        Error::conflict(format!(
            "Table '{table}' in database {project} was dropped or replaced while its index was built; nothing was written"
        ))
    };
    let published = build_index(job, handle, &mut build, if_not_exists, &keep_going, &gone);
    if !matches!(published, Ok(tables::Publish::Done)) {
        discard_landing(handle, job, build.landing());
    }
    published.map(drop)
}

/// Lands `build`'s entries and publishes the index (see [`tables::IndexBuild`]): chunks
/// written meanwhile are encoded from newer snapshots, entries of chunks gone are swept,
/// until the table holds still long enough; after [`OPTIMISTIC_ATTEMPTS`] what changed last
/// is done under the lock.
fn build_index(
    job: &WriteJob,
    handle: &Handle,
    build: &mut tables::IndexBuild,
    if_not_exists: bool,
    keep_going: &dyn Fn() -> Result<()>,
    gone: &dyn Fn() -> Error,
) -> Result<tables::Publish> {
    let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>| {
        landing_step(job, handle, work)
    };
    let snapshot = &job.snapshot.txn;
    if !build.stage(snapshot, job.tenant, job.spool(), keep_going)? {
        return Err(gone());
    }
    let mut attempt = 1;
    loop {
        build.land(job.tenant, &mut step, keep_going)?;
        // Chunks written since the last snapshot: their entries too are encoded unlocked.
        let fresh = job.store.read()?;
        if !build.stage(&fresh, job.tenant, job.spool(), keep_going)? {
            return Err(gone());
        }
        build.land(job.tenant, &mut step, keep_going)?;
        build.sweep_gone(&fresh, job.tenant, &mut step)?;
        let guard = job.lock(handle)?;
        let last = attempt >= OPTIMISTIC_ATTEMPTS;
        match build.publish(&guard.txn, job.tenant, if_not_exists, last)? {
            tables::Publish::Done => {
                guard.commit()?;
                return Ok(tables::Publish::Done);
            }
            tables::Publish::Exists => return Ok(tables::Publish::Exists),
            tables::Publish::Again => attempt += 1,
        }
    }
}

/// Runs `work` as one step of a landing (see `catalog::landing`): a write transaction of
/// its own, committed without waiting for the disk (the publishing commit is durable, and
/// makes the steps so). A crash after some steps leaves a landing that the next open of the
/// file discards, or nothing of it.
fn landing_step(
    job: &WriteJob,
    handle: &Handle,
    work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>,
) -> Result<()> {
    let mut guard = job.lock(handle)?;
    guard.need_not_persist()?;
    work(&guard.txn)?;
    guard.commit()
}

/// Appends `staged` (rows for `read`'s table of `project`) by landing its full chunks and
/// their index entries a chunk per transaction, then publishing them in one short one, so
/// the writer lock is never held for more than a chunk's worth of entries. Returns the rows
/// inserted, or that the statement must run again (see [`landed_over`]); on an error or a
/// rerun nothing of them is left.
pub(crate) fn land_rows(
    job: &WriteJob,
    handle: &Handle,
    project: &str,
    read: &TableRecord,
    staged: StagedRows,
) -> Result<Staged<u64>> {
    let keep_going = || job.check_cancelled();
    let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>| {
        landing_step(job, handle, work)
    };
    let (mut landing, landed) =
        tables::RowLanding::land(job.tenant, project, read, staged, &mut step, &keep_going);
    let published = landed.and_then(|()| {
        let guard = job.lock(handle)?;
        let published = landing.publish(&guard.txn);
        let published = landed_over(job, &guard.txn, read.id, published)?;
        if let Staged::Done(_) = published {
            guard.commit()?;
        }
        Ok(published)
    });
    if !matches!(published, Ok(Staged::Done(_))) {
        discard_landing(handle, job, landing.id());
    }
    again_if_renewed(job, project, read, published)
}

/// Lands `staged`, rows that become the whole content of `read`'s table `project.name`,
/// under a table id and index entry ids of their own (see `tables::RowLanding::renewing`),
/// a chunk per transaction, then renews the table with them in one short one; with
/// `unchanged` (the rows were computed from the table's), only if its chunk order is still
/// the one read. Returns the rows written, or that the statement must run again; on an
/// error or a rerun nothing of them is left.
fn land_renewal(
    job: &WriteJob,
    handle: &Handle,
    project: &str,
    name: &str,
    read: &TableRecord,
    staged: StagedRows,
    unchanged: bool,
) -> Result<Staged<u64>> {
    let keep_going = || job.check_cancelled();
    let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>| {
        landing_step(job, handle, work)
    };
    let credit = job.credit(read)?;
    let as_read = || job.snapshot.txn.chunk_order_of(read.id);
    // Rows computed from the table's rows, or written against the credit of its content,
    // are for the table as read.
    let base = match unchanged || credit.base.is_some() {
        true => Some(as_read()?),
        false => None,
    };
    let checks_base = base.is_some();
    let (mut landing, landed) = tables::RowLanding::renewing(
        job.tenant,
        project,
        read,
        (credit.bytes, base),
        staged,
        &mut step,
        &keep_going,
    );
    let published = landed.and_then(|()| {
        let guard = job.lock(handle)?;
        let Some(record) = job.still(&guard, project, name, read)? else {
            return Ok(Staged::TargetChanged);
        };
        let moved = || -> Result<bool> {
            let before = job.snapshot.txn.chunk_order_of(read.id)?;
            Ok(guard.txn.chunk_order_of(record.id)? != before)
        };
        if record.constraints != read.constraints || (checks_base && moved()?) {
            return Ok(Staged::TargetChanged);
        }
        let rows = landing.publish_renewal(&guard.txn)?;
        guard.commit()?;
        Ok(Staged::Done(rows))
    });
    if !matches!(published, Ok(Staged::Done(_))) {
        discard_landing(handle, job, landing.id());
    }
    // Rows computed from rows another write changed meanwhile are computed again.
    let published = match published {
        Err(e) if checks_base && e.kind() == crate::ErrorKind::Conflict && job.may_land => {
            let now = job.store.read()?;
            match now.chunk_order_of(read.id)? != as_read()? {
                true => Ok(Staged::TargetChanged),
                false => Err(e),
            }
        }
        published => published,
    };
    again_if_renewed(job, project, read, published)
}

/// `result` of a write that landed rows for `read`'s table of `project`, unless it failed
/// because the table was renewed meanwhile (TRUNCATE, INSERT OVERWRITE: see `tables::renew`):
/// that is the same table under a new id, and the write runs again, into it. Not on a
/// statement's last turn, nor inside an explicit transaction: it reports the change.
fn again_if_renewed<T>(
    job: &WriteJob,
    project: &str,
    read: &TableRecord,
    result: Result<Staged<T>>,
) -> Result<Staged<T>> {
    match result {
        Err(e)
            if e.kind() == crate::ErrorKind::Conflict
                && job.may_land
                && given_new_id(job, project, read)? =>
        {
            Ok(Staged::TargetChanged)
        }
        result => result,
    }
}

/// Whether `read`'s table of `project` now has another id (it was renewed, or dropped and
/// created again).
fn given_new_id(job: &WriteJob, project: &str, read: &TableRecord) -> Result<bool> {
    let txn = job.store.read()?;
    let now = tables::record(&txn, job.tenant, project, &read.name)?;
    Ok(now.is_some_and(|now| now.id != read.id))
}

/// `result` of a write of the table `table` inside `txn`, unless it failed on a key that is
/// taken while a rewrite lands chunks of the table: the key may be one of the rows it keeps,
/// landed again beside the chunk it replaces, so the write runs again as the table's sole
/// writer, after the rewrite, rather than fail. (A key taken by an append's landing is taken:
/// the first to write a key wins.) A statement that holds the writer lock from its start (the
/// last turn) or runs in an explicit transaction has no next turn: it reports the key.
fn landed_over<T>(
    job: &WriteJob,
    txn: &redb::WriteTransaction,
    table: u64,
    result: Result<T>,
) -> Result<Staged<T>> {
    match result {
        Err(e)
            if e.kind() == crate::ErrorKind::ConstraintViolation
                && job.may_land
                && crate::catalog::landing::touches_other(txn, table, None, true)? =>
        {
            Ok(Staged::TargetChanged)
        }
        result => result.map(Staged::Done),
    }
}

/// What a rewrite landed ahead of its commit (see `tables::Rewrite::land`), discarded when
/// dropped unless [`Landing::published`]: a rewrite not applied (its table changed, an error)
/// leaves nothing. Declared before the statement's write guard, so that the guard (and the
/// writer lock) goes first.
struct Landing<'a> {
    job: &'a WriteJob,
    handle: &'a Handle,
    id: Option<u64>,
}

impl<'a> Landing<'a> {
    /// Nothing landed.
    fn none(job: &'a WriteJob, handle: &'a Handle) -> Landing<'a> {
        Landing {
            job,
            handle,
            id: None,
        }
    }

    /// The rewrite committed: its landing is published; what it retired is swept now, a
    /// step per transaction. Outside the statement's memory account and deadline, like a
    /// discard (its result is committed); a failure (of the disk) leaves the rest to the next
    /// open of the file.
    fn published(mut self, retired: Retired) {
        self.id = None;
        let (store, handle) = (&self.job.store, self.handle);
        let user = crate::memory::current().parent_key();
        let _outside = crate::memory::enter(crate::memory::Tag::NONE);
        let _ = retired.sweep(&mut |work| {
            let lock = handle.block_on(store.lock_writes_as(user));
            let mut guard = store.begin_write(lock)?;
            guard.need_not_persist()?;
            work(&guard.txn)?;
            guard.commit()
        });
    }
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        discard_landing(self.handle, self.job, self.id.take());
    }
}

/// Lands `rewrite` (of `read`'s table in `project`) ahead of its commit when it writes more
/// index entries than a step (see `tables::Rewrite::land`), so that its commit holds the
/// writer lock for a few keys per changed chunk. Not inside an explicit transaction (its
/// steps are the transaction's), nor for a statement that holds the writer lock from its
/// start (it must not be overtaken). `None` when another statement's landing overtook it.
fn land_rewrite<'a>(
    job: &'a WriteJob,
    handle: &'a Handle,
    project: &str,
    read: &TableRecord,
    rewrite: &mut Rewrite,
) -> Result<Option<Landing<'a>>> {
    let mut landing = Landing::none(job, handle);
    if !rewrite.lands() || !job.may_land {
        return Ok(Some(landing));
    }
    let keep_going = || job.check_cancelled();
    let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> Result<()>| {
        landing_step(job, handle, work)
    };
    let landed = rewrite.land(job.tenant, project, read, &mut step, &keep_going);
    landing.id = rewrite.landing();
    Ok(landed?.then_some(landing))
}

/// Discards what a failed statement landed (see `catalog::landing`), a step per transaction.
/// This is no longer the statement's work: it runs outside its memory account and deadline,
/// so that a stopped statement leaves nothing behind. For a statement inside an explicit
/// transaction nothing is done: the failed statement aborted it, and the ROLLBACK that must
/// follow takes the landing away with the rest. A failure here (of the disk) leaves the landing to the next
/// open of the file.
pub(crate) fn discard_landing(handle: &Handle, job: &WriteJob, id: Option<u64>) {
    let Some(id) = id else { return };
    let store = &job.store;
    if job.in_transaction {
        return;
    }
    let user = crate::memory::current().parent_key();
    let _outside = crate::memory::enter(crate::memory::Tag::NONE);
    loop {
        let lock = handle.block_on(store.lock_writes_as(user));
        let Ok(mut guard) = store.begin_write(lock) else {
            return;
        };
        if guard.need_not_persist().is_err() {
            return;
        }
        let Ok(done) = tables::discard_landed_step(&guard.txn, id) else {
            return;
        };
        if guard.commit().is_err() || done {
            return;
        }
    }
}

/// DROP TABLE [IF EXISTS]; `DROP TABLE files.t` removes an uploaded file, as in MindsDB.
pub(crate) fn drop_table(job: &WriteJob, handle: &Handle, drop: DropTable) -> Result<()> {
    let (db, table) = job.split(&drop.name)?;
    let (project, name) = match job.snapshot.namespace(&db)? {
        Some(Namespace::Files) => (FILES_DB.to_string(), table),
        _ => job.resolve(&drop.name)?,
    };
    let guard = job.lock(handle)?;
    if !tables::drop_table(&guard.txn, job.tenant, &project, &name)? && !drop.if_exists {
        return Err(Error::not_found(format!(
            "Table '{name}' not found in database: {project}"
        )));
    }
    guard.commit()
}

/// What tests watch of rewrites: a hook per table, run each time a rewrite's change (or an
/// INSERT's resolution of its conflicts) has been computed, before the writer lock is taken to
/// apply it.
#[cfg(test)]
pub(crate) mod watch {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock};

    use parking_lot::Mutex;

    type Hook = Arc<dyn Fn() + Send + Sync>;

    static PLANNED: LazyLock<Mutex<HashMap<String, Hook>>> = LazyLock::new(Default::default);

    /// Runs `hook` each time a rewrite of `table` (or a resolution) has computed its change.
    pub(crate) fn on_planned(table: &str, hook: impl Fn() + Send + Sync + 'static) {
        PLANNED.lock().insert(table.to_string(), Arc::new(hook));
    }

    pub(crate) fn planned(table: &str) {
        // Cloned out, so the hook may itself write (and plan) without holding the registry.
        let hook = PLANNED.lock().get(table).cloned();
        if let Some(hook) = hook {
            hook();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    use parking_lot::Mutex;

    use crate::catalog::indexes::observe;
    use crate::catalog::tables::{self, ReadTables};
    use crate::store::schema::TABLES;
    use crate::{Config, Engine, TenantId};

    /// The single value of a one-row, one-column result, as text.
    fn value(engine: &Engine, sql: &str) -> String {
        let rows = engine.sql_blocking(sql).unwrap();
        datafusion::arrow::util::display::array_value_to_string(rows.batches[0].column(0), 0)
            .unwrap()
    }

    #[test]
    fn index_entries_are_staged_while_the_writer_lock_is_free() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE staged_keys (id BIGINT PRIMARY KEY, v BIGINT, w VARCHAR)");
        sql("CREATE INDEX staged_keys_w ON staged_keys (w)");
        // Each time a chunk's entries are staged, the writer lock is free for anyone.
        let (free, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (store, seen_free, seen_held) = (
            Arc::clone(engine.store()),
            Arc::clone(&free),
            Arc::clone(&held),
        );
        observe::on_staged("staged_keys", move || {
            let counter = match store.try_lock_writes() {
                Ok(_) => &seen_free,
                Err(_) => &seen_held,
            };
            counter.fetch_add(1, Ordering::SeqCst);
        });
        sql("INSERT INTO staged_keys SELECT value, value % 7, 'w' || value FROM generate_series(1, 200000)");
        assert_eq!(held.load(Ordering::SeqCst), 0);
        assert_eq!(
            free.load(Ordering::SeqCst),
            3,
            "three full chunks of 65,536 rows"
        );
        // Under the lock, only the rows short of a full chunk were encoded.
        let locked = observe::encoded_locked_rows("staged_keys");
        assert_eq!(locked, 200_000 - 3 * 65_536);
        // CREATE INDEX stages every chunk's entries too, and encodes none under the lock.
        sql("CREATE UNIQUE INDEX staged_keys_id_w ON staged_keys (id, w)");
        assert_eq!(free.load(Ordering::SeqCst), 3 + 4);
        assert_eq!(observe::encoded_locked_rows("staged_keys"), locked);
        assert_eq!(held.load(Ordering::SeqCst), 0);
        // Uniqueness stays exact: within one statement, against stored rows, and for a
        // unique index over duplicates.
        let e = engine
            .sql_blocking("INSERT INTO staged_keys SELECT value % 70000 + 300000, 0, 'x' FROM generate_series(1, 140000)")
            .unwrap_err();
        // Which duplicate is named first depends on the order the partitions are staged in.
        let named = |e: &crate::Error| -> u64 {
            let after = e.message().split("Duplicate key (").nth(1).unwrap_or("");
            after.split(')').next().unwrap_or("").parse().unwrap_or(0)
        };
        assert!((300_000..370_000).contains(&named(&e)), "{e}");
        let e = engine
            .sql_blocking("INSERT INTO staged_keys SELECT value + 199000, 0, 'x' FROM generate_series(1, 70000)")
            .unwrap_err();
        assert!((199_001..=200_000).contains(&named(&e)), "{e}");
        let e = engine
            .sql_blocking("CREATE UNIQUE INDEX staged_keys_v ON staged_keys (v)")
            .unwrap_err();
        assert!(e.message().contains("UNIQUE INDEX staged_keys_v"), "{e}");
        assert_eq!(value(&engine, "SELECT count(*) FROM staged_keys"), "200000");
        assert_eq!(
            value(
                &engine,
                "SELECT count(*) FROM staged_keys WHERE w = 'w123456'"
            ),
            "1"
        );
    }

    #[test]
    fn a_key_taken_while_the_rows_were_staged_is_still_refused() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        engine
            .sql_blocking("CREATE TABLE raced_keys (id BIGINT PRIMARY KEY)")
            .unwrap();
        // While the big insert stages its first chunk, another statement takes one of its
        // keys (the writer lock is free) and commits.
        let once = Arc::new(AtomicBool::new(false));
        let (racer, fired) = (engine.clone(), Arc::clone(&once));
        observe::on_staged("raced_keys", move || {
            if !fired.swap(true, Ordering::SeqCst) {
                racer
                    .sql_blocking("INSERT INTO raced_keys VALUES (100000)")
                    .unwrap();
            }
        });
        let e = engine
            .sql_blocking("INSERT INTO raced_keys SELECT value FROM generate_series(1, 150000)")
            .unwrap_err();
        assert!(once.load(Ordering::SeqCst));
        assert!(e.message().contains("Duplicate key (100000)"), "{e}");
        assert_eq!(value(&engine, "SELECT count(*) FROM raced_keys"), "1");
        // A key nobody else has: the insert lands, checked against what changed.
        once.store(false, Ordering::SeqCst);
        let (racer, fired) = (engine.clone(), Arc::clone(&once));
        observe::on_staged("raced_keys", move || {
            if !fired.swap(true, Ordering::SeqCst) {
                racer
                    .sql_blocking("INSERT INTO raced_keys VALUES (-1)")
                    .unwrap();
            }
        });
        engine
            .sql_blocking(
                "INSERT INTO raced_keys SELECT value + 200000 FROM generate_series(1, 150000)",
            )
            .unwrap();
        assert_eq!(value(&engine, "SELECT count(*) FROM raced_keys"), "150002");
    }

    #[test]
    fn a_rewrite_overtaken_by_writes_of_its_table_runs_again_as_its_sole_writer() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE overtaken AS SELECT value AS id, 0 AS v FROM generate_series(1, 1000)");
        sql("CREATE TABLE elsewhere (x BIGINT)");
        let plans = Arc::new(AtomicUsize::new(0));
        let (racer, count, store) = (
            engine.clone(),
            Arc::clone(&plans),
            Arc::clone(engine.store()),
        );
        let late = Arc::new(Mutex::new(None));
        let late_insert = Arc::clone(&late);
        super::watch::on_planned("overtaken", move || {
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= super::OPTIMISTIC_ATTEMPTS {
                // Each time the UPDATE has computed its change, another write of its table
                // commits first.
                racer
                    .sql_blocking(&format!("INSERT INTO overtaken VALUES ({}, 0)", 2000 + n))
                    .unwrap();
                return;
            }
            // Running again as the table's sole writer: the writer lock is free for every
            // other table meanwhile, and a write of this table waits for the UPDATE to end.
            assert!(store.try_lock_writes().is_ok(), "the writer lock is free");
            racer
                .sql_blocking("INSERT INTO elsewhere VALUES (1)")
                .unwrap();
            let waiting = racer.clone();
            *late_insert.lock() = Some(std::thread::spawn(move || {
                waiting
                    .sql_blocking("INSERT INTO overtaken VALUES (-1, 0)")
                    .unwrap();
            }));
        });
        sql("UPDATE overtaken SET v = 1");
        super::watch::on_planned("overtaken", || {});
        let waited = late
            .lock()
            .take()
            .expect("the UPDATE ran again as sole writer");
        waited.join().unwrap();
        assert_eq!(plans.load(Ordering::SeqCst), super::OPTIMISTIC_ATTEMPTS + 1);
        // Every row committed before the UPDATE's last run was updated; the write that
        // waited for it committed after it.
        assert_eq!(
            value(&engine, "SELECT count(*) FROM overtaken WHERE v = 1"),
            "1003"
        );
        assert_eq!(value(&engine, "SELECT v FROM overtaken WHERE id = -1"), "0");
        assert_eq!(value(&engine, "SELECT count(*) FROM elsewhere"), "1");
    }

    #[test]
    fn conflicting_inserts_resolve_before_the_writer_lock_against_the_rows_that_won() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE resolved (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("INSERT INTO resolved SELECT value, 0 FROM generate_series(1, 1000)");
        // Each time a statement has resolved its rows against the stored ones, the writer lock
        // is free; the first time, another write of the table takes the key before it.
        let calls = Arc::new(AtomicUsize::new(0));
        let racing: Arc<Mutex<Option<&'static str>>> = Arc::new(Mutex::new(None));
        let (racer, count, store, race) = (
            engine.clone(),
            Arc::clone(&calls),
            Arc::clone(engine.store()),
            Arc::clone(&racing),
        );
        super::watch::on_planned("resolved", move || {
            count.fetch_add(1, Ordering::SeqCst);
            assert!(store.try_lock_writes().is_ok(), "the writer lock is free");
            let first = race.lock().take();
            if let Some(statement) = first {
                racer.sql_blocking(statement).unwrap();
            }
        });
        let cases = [
            (
                "INSERT INTO resolved VALUES (5000, 7)",
                "INSERT INTO resolved VALUES (5000, 1), (6000, 1) ON CONFLICT (id) DO UPDATE SET v = resolved.v + excluded.v",
                "SELECT sum(v) FROM resolved WHERE id IN (5000, 6000)",
                "9",
            ),
            (
                "INSERT INTO resolved VALUES (7000, 9)",
                "INSERT OR REPLACE INTO resolved VALUES (7000, 1)",
                "SELECT v FROM resolved WHERE id = 7000",
                "1",
            ),
            (
                "INSERT INTO resolved VALUES (8000, 9)",
                "INSERT INTO resolved VALUES (8000, 1) ON CONFLICT DO NOTHING",
                "SELECT v FROM resolved WHERE id = 8000",
                "9",
            ),
        ];
        for (first, statement, check, expected) in cases {
            calls.store(0, Ordering::SeqCst);
            *racing.lock() = Some(first);
            sql(statement);
            // Resolved against the rows as read, then again, as the table's sole writer,
            // against the row that won the race.
            assert_eq!(calls.load(Ordering::SeqCst), 2, "{statement}");
            assert_eq!(value(&engine, check), expected, "{statement}");
        }
        super::watch::on_planned("resolved", || {});
        assert_eq!(value(&engine, "SELECT count(*) FROM resolved"), "1004");
    }

    /// Checks that nothing of a rewrite's landing and retired chunks is left: the table's one
    /// index holds `entries` entries, no chunk is marked retired, no landing is left, and the
    /// bytes counted are those a recount finds.
    fn nothing_retired_left(engine: &Engine, entries: u64) {
        use crate::store::schema::RETIRED_CHUNKS;
        use redb::ReadableTableMetadata;
        let [stored_entries, _, landings, landed, stored] = footprint(engine);
        assert_eq!(stored_entries, entries);
        assert_eq!([landings, landed], [0, 0], "no landing is left");
        let txn = engine.store().read().unwrap();
        assert_eq!(txn.open_table(RETIRED_CHUNKS).unwrap().len().unwrap(), 0);
        drop(txn);
        // The sweeper may still hold the writer lock for a moment after its last step's
        // commit made the counts above visible: wait for it rather than try.
        let lock = engine.block_on(engine.store().lock_writes_detached());
        let guard = engine.store().begin_write(lock).unwrap();
        let counted = tables::stored_bytes(&guard.txn).unwrap();
        assert_eq!(stored, counted[&TenantId::LOCAL], "bytes counted as stored");
    }

    #[test]
    fn a_landing_step_ends_early_while_another_user_waits_for_the_writer_lock() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        let steps_of = |entries: usize| entries.div_ceil(crate::catalog::indexes::STEP_ENTRIES);
        sql("CREATE TABLE yielding (id BIGINT PRIMARY KEY)");
        let steps = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let other = Arc::new(Mutex::new(None));
        let (count, racer, (stopping, thread)) = (
            Arc::clone(&steps),
            engine.clone(),
            (Arc::clone(&stop), Arc::clone(&other)),
        );
        observe::on_landed("yielding", move || {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                // From the first step on, another user writes without pause: it waits for
                // the writer lock while each of the landing's steps holds it.
                let (racer, stopping) = (racer.clone(), Arc::clone(&stopping));
                *thread.lock() = Some(std::thread::spawn(move || {
                    while !stopping.load(Ordering::SeqCst) {
                        drop(racer.block_on(racer.store().lock_writes_as(77)));
                    }
                }));
            }
        });
        // Two full chunks land, each with its entries in steps (the rest of the rows goes in
        // with the publishing commit).
        sql("INSERT INTO yielding SELECT value FROM generate_series(1, 140000)");
        observe::on_landed("yielding", || {});
        stop.store(true, Ordering::SeqCst);
        other
            .lock()
            .take()
            .expect("the other user wrote")
            .join()
            .unwrap();
        let taken = steps.load(Ordering::SeqCst);
        assert!(
            taken > 2 * steps_of(tables::CHUNK_ROWS),
            "{taken} steps, as many as with nobody waiting: none ended early for the other user"
        );
        assert_eq!(value(&engine, "SELECT count(*) FROM yielding"), "140000");
        assert_eq!(
            value(
                &engine,
                "SELECT count(DISTINCT id) FROM yielding WHERE id > 139000"
            ),
            "1000"
        );
        let e = engine
            .sql_blocking("INSERT INTO yielding VALUES (139999)")
            .unwrap_err();
        assert!(e.message().contains("Duplicate key (139999)"), "{e}");
        nothing_retired_left(&engine, 140_000);
    }

    #[test]
    fn a_rewrite_of_an_indexed_chunk_lands_then_sweeps_the_old_one_in_steps() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        let steps_of = |entries: usize| entries.div_ceil(crate::catalog::indexes::STEP_ENTRIES);
        sql("CREATE TABLE retiring (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("CREATE TABLE beside (x BIGINT)");
        // One chunk: a change to one of its rows rewrites all of its entries.
        sql("INSERT INTO retiring SELECT value, 0 FROM generate_series(1, 20000)");
        let steps = Arc::new(AtomicUsize::new(0));
        let taking = Arc::new(Mutex::new(None));
        let (racer, count, thread) = (engine.clone(), Arc::clone(&steps), Arc::clone(&taking));
        observe::on_landed("retiring", move || {
            let step = count.fetch_add(1, Ordering::SeqCst);
            // Between two steps the writer lock is free: another statement commits.
            racer.sql_blocking("INSERT INTO beside VALUES (1)").unwrap();
            // Nothing is published before the statement commits.
            assert_eq!(value(&racer, "SELECT v FROM retiring WHERE id = 5"), "0");
            if step == 0 {
                // A key the rewrite lands again: the insert waits for the rewrite (the key may
                // have been the rewrite's to drop), then finds it taken.
                let racer = racer.clone();
                *thread.lock() = Some(std::thread::spawn(move || {
                    racer.sql_blocking("INSERT INTO retiring VALUES (7, 1)")
                }));
            }
        });
        sql("UPDATE retiring SET v = 1 WHERE id = 5");
        observe::on_landed("retiring", || {});
        let taken = taking.lock().take().expect("the rewrite landed");
        let e = taken.join().unwrap().unwrap_err();
        assert!(e.message().contains("Duplicate key (7)"), "{e}");
        assert_eq!(steps.load(Ordering::SeqCst), steps_of(20_000));
        assert_eq!(
            value(&engine, "SELECT count(*) FROM beside"),
            steps_of(20_000).to_string()
        );
        assert_eq!(value(&engine, "SELECT v FROM retiring WHERE id = 5"), "1");
        assert_eq!(value(&engine, "SELECT count(*) FROM retiring"), "20000");
        nothing_retired_left(&engine, 20_000);

        // While a DELETE's old chunk is swept, its entries are still in the file: the key it
        // deleted is free, the others are taken.
        let sweeps = Arc::new(AtomicUsize::new(0));
        let (racer, count) = (engine.clone(), Arc::clone(&sweeps));
        observe::on_swept("retiring", move || {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                racer
                    .sql_blocking("INSERT INTO retiring VALUES (6, 2)")
                    .unwrap();
                let e = racer
                    .sql_blocking("INSERT INTO retiring VALUES (7, 2)")
                    .unwrap_err();
                assert!(e.message().contains("Duplicate key (7)"), "{e}");
                assert_eq!(value(&racer, "SELECT count(*) FROM retiring"), "20000");
            }
        });
        sql("DELETE FROM retiring WHERE id = 6");
        observe::on_swept("retiring", || {});
        assert_eq!(sweeps.load(Ordering::SeqCst), steps_of(20_000));
        assert_eq!(value(&engine, "SELECT v FROM retiring WHERE id = 6"), "2");
        assert_eq!(value(&engine, "SELECT count(*) FROM retiring"), "20000");
        nothing_retired_left(&engine, 20_000);

        // A key the rewrite takes from a row it does not replace is refused, and what it landed
        // goes.
        let e = engine
            .sql_blocking("UPDATE retiring SET id = 6 WHERE id = 9")
            .unwrap_err();
        assert!(e.message().contains("Duplicate key (6)"), "{e}");
        nothing_retired_left(&engine, 20_000);
        assert_eq!(
            value(&engine, "SELECT count(*) FROM retiring WHERE id = 9"),
            "1"
        );
        // Upserts and replacements of one row of the full chunk land the same way.
        sql("INSERT INTO retiring VALUES (10, 5) ON CONFLICT (id) DO UPDATE SET v = excluded.v");
        sql("INSERT OR REPLACE INTO retiring VALUES (11, 6)");
        assert_eq!(
            value(&engine, "SELECT sum(v) FROM retiring WHERE id IN (10, 11)"),
            "11"
        );
        assert_eq!(value(&engine, "SELECT count(*) FROM retiring"), "20000");
        nothing_retired_left(&engine, 20_000);
    }

    #[test]
    fn a_landing_rewrite_and_the_writes_it_meets_run_again_rather_than_fail() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        let steps_of = |entries: usize| entries.div_ceil(crate::catalog::indexes::STEP_ENTRIES);
        // A full chunk and a small last one.
        sql("CREATE TABLE met (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("INSERT INTO met SELECT value, 0 FROM generate_series(1, 70000)");
        // After the rewrite's first step another write changes the table (a row merged into
        // its last chunk): the rewrite stops landing at its next step and runs again.
        let steps = Arc::new(AtomicUsize::new(0));
        let (racer, count) = (engine.clone(), Arc::clone(&steps));
        observe::on_landed("met", move || {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                racer
                    .sql_blocking("INSERT INTO met VALUES (100000, 1)")
                    .unwrap();
            }
        });
        sql("UPDATE met SET v = 2 WHERE id = 5");
        observe::on_landed("met", || {});
        assert_eq!(steps.load(Ordering::SeqCst), 1 + steps_of(65_536));
        assert_eq!(
            value(&engine, "SELECT sum(v) FROM met WHERE id IN (5, 100000)"),
            "3"
        );
        nothing_retired_left(&engine, 70_001);

        // A write that meets the keys a landing rewrite lands again (the last chunk, merged
        // with a new row, takes its keys anew) waits for the rewrite and runs again.
        sql("CREATE TABLE small (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("INSERT INTO small SELECT value, 0 FROM generate_series(1, 3000)");
        let waiting = Arc::new(Mutex::new(None));
        let (racer, thread) = (engine.clone(), Arc::clone(&waiting));
        observe::on_landed("small", move || {
            let racer = racer.clone();
            let inserted = std::thread::spawn(move || {
                racer.sql_blocking("INSERT INTO small VALUES (100000, 1)")
            });
            // Time for it to meet the landed keys (it then waits for the rewrite's claim).
            std::thread::sleep(std::time::Duration::from_millis(300));
            *thread.lock() = Some(inserted);
        });
        sql("UPDATE small SET v = 2 WHERE id = 5");
        observe::on_landed("small", || {});
        let inserted = waiting.lock().take().expect("the rewrite landed");
        inserted.join().unwrap().unwrap();
        assert_eq!(
            value(&engine, "SELECT sum(v) FROM small WHERE id IN (5, 100000)"),
            "3"
        );
        assert_eq!(value(&engine, "SELECT count(*) FROM small"), "3001");
    }

    #[test]
    fn a_landing_begun_outside_a_transaction_never_joins_one_begun_meanwhile() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE joined (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("INSERT INTO joined SELECT value, 0 FROM generate_series(1, 20000)");
        // After the rewrite's first step another session begins a transaction and rolls it
        // back 300 ms later. Had the next steps joined it, the rollback would have taken the
        // entries they wrote while the rewrite went on to publish its chunk.
        let ended = Arc::new(Mutex::new(None));
        let (racer, thread) = (engine.clone(), Arc::clone(&ended));
        observe::on_landed("joined", move || {
            let mut thread = thread.lock();
            if thread.is_none() {
                racer.sql_blocking("BEGIN").unwrap();
                racer
                    .sql_blocking("INSERT INTO joined VALUES (-1, 0)")
                    .unwrap();
                let racer = racer.clone();
                *thread = Some(std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    racer.sql_blocking("ROLLBACK").unwrap();
                }));
            }
        });
        sql("UPDATE joined SET v = 1 WHERE id = 5");
        observe::on_landed("joined", || {});
        ended
            .lock()
            .take()
            .expect("a transaction began")
            .join()
            .unwrap();
        assert_eq!(value(&engine, "SELECT count(*) FROM joined"), "20000");
        // Found through the index: every entry of the new chunk is there.
        for id in [5, 5000, 10000, 19999] {
            let expected = if id == 5 { "1" } else { "0" };
            let found = value(&engine, &format!("SELECT v FROM joined WHERE id = {id}"));
            assert_eq!(found, expected, "id {id}");
        }
        nothing_retired_left(&engine, 20_000);
    }

    /// What the file holds beside table records: index entries, chunks, landings and landed
    /// chunks (counts), and the local tenant's stored bytes.
    fn footprint(engine: &Engine) -> [u64; 5] {
        use crate::store::schema::{CHUNKS, INDEX_ENTRIES, LANDED_CHUNKS, LANDINGS, STORAGE_BYTES};
        use redb::ReadableTableMetadata;
        let txn = engine.store().read().unwrap();
        let stored = txn
            .open_table(STORAGE_BYTES)
            .unwrap()
            .get(TenantId::LOCAL.0)
            .unwrap()
            .map_or(0, |v| v.value());
        [
            txn.open_table(INDEX_ENTRIES).unwrap().len().unwrap(),
            txn.open_table(CHUNKS).unwrap().len().unwrap(),
            txn.open_table(LANDINGS).unwrap().len().unwrap(),
            txn.open_table(LANDED_CHUNKS).unwrap().len().unwrap(),
            stored,
        ]
    }

    #[test]
    fn a_big_insert_lands_a_chunk_at_a_time_and_others_write_between() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE landed_keys (id BIGINT PRIMARY KEY, v VARCHAR)");
        sql("CREATE TABLE other (x BIGINT)");
        let steps = Arc::new(AtomicUsize::new(0));
        let (racer, count) = (engine.clone(), Arc::clone(&steps));
        observe::on_landed("landed_keys", move || {
            let step = count.fetch_add(1, Ordering::SeqCst);
            // Between two steps the writer lock is free: another statement commits.
            racer.sql_blocking("INSERT INTO other VALUES (1)").unwrap();
            if step == 0 {
                // Nothing landed is visible before the statement commits...
                assert_eq!(value(&racer, "SELECT count(*) FROM landed_keys"), "0");
                // ...but its keys are taken: the second to write a key fails.
                let e = racer
                    .sql_blocking("INSERT INTO landed_keys VALUES (5, 'racer')")
                    .unwrap_err();
                assert!(e.message().contains("Duplicate key (5)"), "{e}");
                racer
                    .sql_blocking("INSERT INTO landed_keys VALUES (-5, 'racer')")
                    .unwrap();
            }
        });
        sql("INSERT INTO landed_keys SELECT value, 'v' FROM generate_series(1, 200000)");
        let per_chunk = 65_536 / crate::catalog::indexes::STEP_ENTRIES;
        assert_eq!(
            steps.load(Ordering::SeqCst),
            3 * per_chunk,
            "three full chunks, each in steps of STEP_ENTRIES entries"
        );
        assert_eq!(
            value(&engine, "SELECT count(*) FROM other"),
            (3 * per_chunk).to_string()
        );
        assert_eq!(value(&engine, "SELECT count(*) FROM landed_keys"), "200001");
        assert_eq!(
            value(&engine, "SELECT v FROM landed_keys WHERE id = 5"),
            "v"
        );
        assert_eq!(
            value(&engine, "SELECT v FROM landed_keys WHERE id = 199999"),
            "v"
        );
        assert_eq!(footprint(&engine)[2..4], [0, 0], "no landing is left");
    }

    #[test]
    fn a_failed_or_stopped_landing_leaves_nothing_behind() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE failed_keys (id BIGINT PRIMARY KEY, w VARCHAR)");
        sql("CREATE INDEX failed_keys_w ON failed_keys (w)");
        sql("INSERT INTO failed_keys VALUES (1, 'a')");
        let before = footprint(&engine);
        // Key 17 comes again in the third chunk: two chunks have landed when it is found.
        let e = engine
            .sql_blocking(
                "INSERT INTO failed_keys SELECT CASE WHEN value = 150000 THEN 17 ELSE value + 10 END, 'w' \
                 FROM generate_series(1, 200000)",
            )
            .unwrap_err();
        assert!(e.message().contains("Duplicate key (17)"), "{e}");
        assert_eq!(footprint(&engine), before);
        // Stopped after its first step: nothing of it either.
        let stopper = engine.clone();
        observe::on_landed("failed_keys", move || stopper.interrupt());
        let e = engine
            .sql_blocking(
                "INSERT INTO failed_keys SELECT value + 10, 'w' FROM generate_series(1, 200000)",
            )
            .unwrap_err();
        observe::on_landed("failed_keys", || {});
        assert!(e.message().contains("interrupted"), "{e}");
        // The caller hears of the stop at once; the statement's thread discards what landed
        // right after.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while footprint(&engine) != before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(footprint(&engine), before);
        // No entry of either is left to refuse the same keys.
        sql("INSERT INTO failed_keys SELECT value + 10, 'w' FROM generate_series(1, 200000)");
        assert_eq!(value(&engine, "SELECT count(*) FROM failed_keys"), "200001");
        assert_eq!(
            value(&engine, "SELECT count(*) FROM failed_keys WHERE w = 'w'"),
            "200000"
        );
    }

    #[test]
    fn a_landing_left_by_a_stopped_process_is_discarded_when_the_file_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("landed.redb");
        let engine = Engine::open(&path, Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        sql("CREATE TABLE left_keys (id BIGINT PRIMARY KEY)");
        sql("INSERT INTO left_keys VALUES (1)");
        let before = footprint(&engine);
        // The process "stops" after two steps: the file is copied as it is once they
        // committed, with the landing half done.
        let copy = dir.path().join("copy.redb");
        let (file, target) = (path.clone(), copy.clone());
        let steps = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&steps);
        observe::on_landed("left_keys", move || {
            if count.fetch_add(1, Ordering::SeqCst) == 1 {
                std::fs::copy(&file, &target).unwrap();
            }
        });
        sql("INSERT INTO left_keys SELECT value + 1 FROM generate_series(1, 200000)");
        observe::on_landed("left_keys", || {});
        drop(engine);
        let reopened = Engine::open(&copy, Config::default()).unwrap();
        assert_eq!(footprint(&reopened), before);
        assert_eq!(value(&reopened, "SELECT count(*) FROM left_keys"), "1");
        reopened
            .sql_blocking("INSERT INTO left_keys SELECT value + 1 FROM generate_series(1, 200000)")
            .unwrap();
        assert_eq!(value(&reopened, "SELECT count(*) FROM left_keys"), "200001");
    }

    /// Waits (30 s at most) until `done` holds for the engine's footprint.
    fn wait_for(engine: &Engine, done: impl Fn(&[u64; 5]) -> bool) -> [u64; 5] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let now = footprint(engine);
            if done(&now) || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn what_drops_leave_is_swept_in_steps_and_a_rolled_back_drop_keeps_it() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        let empty = footprint(&engine);
        sql("CREATE TABLE swept (id BIGINT PRIMARY KEY, w VARCHAR)");
        sql("INSERT INTO swept SELECT value, 'w' || (value % 10) FROM generate_series(1, 200000)");
        sql("CREATE INDEX swept_w ON swept (w)");
        assert_eq!(footprint(&engine)[0], 400_000, "two indexes' entries");
        sql("DROP INDEX swept_w");
        let after = wait_for(&engine, |f| f[0] == 200_000 && f[2] == 0);
        assert_eq!(after[0], 200_000, "the dropped index's entries are swept");
        assert_eq!(
            value(&engine, "SELECT count(*) FROM swept WHERE w = 'w3'"),
            "20000"
        );
        // A DROP rolled back leaves everything in place, sweeper or not.
        sql("BEGIN");
        sql("DROP TABLE swept");
        sql("ROLLBACK");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(footprint(&engine), after);
        assert_eq!(value(&engine, "SELECT w FROM swept WHERE id = 7"), "w7");
        sql("DROP TABLE swept");
        assert_eq!(
            wait_for(&engine, |f| *f == empty),
            empty,
            "the table's chunks, entries and bytes are gone"
        );
        // The name is free again, and its keys with it.
        sql("CREATE TABLE swept (id BIGINT PRIMARY KEY)");
        sql("INSERT INTO swept SELECT value FROM generate_series(1, 200000)");
        assert_eq!(value(&engine, "SELECT count(*) FROM swept"), "200000");
    }

    /// Waits for the sweeper to have nothing left, then checks what [`nothing_retired_left`]
    /// checks.
    fn settled(engine: &Engine, entries: u64) {
        wait_for(engine, |f| f[2] == 0);
        nothing_retired_left(engine, entries);
    }

    /// Runs `statement` (which must succeed) after the first landing step into `table`;
    /// returns whether it ran.
    fn once_landed(engine: &Engine, table: &str, statement: &'static str) -> Arc<AtomicBool> {
        let ran = Arc::new(AtomicBool::new(false));
        let (racer, once) = (engine.clone(), Arc::clone(&ran));
        observe::on_landed(table, move || {
            if !once.swap(true, Ordering::SeqCst) {
                racer.sql_blocking(statement).unwrap();
            }
        });
        ran
    }

    /// The id of the table `mindsdb.name`.
    fn table_id(engine: &Engine, name: &str) -> u64 {
        let txn = engine.store().read().unwrap();
        let tables_table = txn.open_table(TABLES).unwrap();
        tables::get(&tables_table, TenantId::LOCAL, "mindsdb", name)
            .unwrap()
            .unwrap()
            .id
    }

    #[test]
    fn replacing_every_row_of_a_large_table_renews_it_and_the_sweeper_removes_the_old_rows() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        // A table whose rows and entries make a step's work is emptied in the statement's own
        // transaction: it keeps its id.
        sql("CREATE TABLE kept (id BIGINT PRIMARY KEY)");
        sql("INSERT INTO kept VALUES (1), (2)");
        let id = table_id(&engine, "kept");
        sql("TRUNCATE TABLE kept");
        assert_eq!(table_id(&engine, "kept"), id);
        assert_eq!(footprint(&engine)[2], 0, "nothing for the sweeper");

        sql("CREATE TABLE renewed (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("INSERT INTO renewed SELECT value, 0 FROM generate_series(1, 20000)");
        // TRUNCATE unlinks the 20,000 rows and their entries (the sweeper's) and the keys are
        // free at once.
        let id = table_id(&engine, "renewed");
        sql("TRUNCATE TABLE renewed");
        assert_ne!(table_id(&engine, "renewed"), id, "renewed");
        assert_eq!(value(&engine, "SELECT count(*) FROM renewed"), "0");
        sql("INSERT INTO renewed SELECT value, 1 FROM generate_series(1, 20000)");
        settled(&engine, 20_000);

        // Rows that repeat a key replace nothing.
        let id = table_id(&engine, "renewed");
        let e = engine
            .sql_blocking(
                "INSERT OVERWRITE renewed SELECT value % 10, 2 FROM generate_series(1, 20000)",
            )
            .unwrap_err();
        assert!(e.message().contains("Duplicate key"), "{e}");
        assert_eq!(table_id(&engine, "renewed"), id);
        assert_eq!(value(&engine, "SELECT sum(v) FROM renewed"), "20000");
        sql("INSERT OVERWRITE renewed SELECT value, 2 FROM generate_series(1, 30000)");
        assert_ne!(table_id(&engine, "renewed"), id, "renewed");
        assert_eq!(value(&engine, "SELECT sum(v) FROM renewed"), "60000");
        assert_eq!(
            value(&engine, "SELECT v FROM renewed WHERE id = 25000"),
            "2"
        );
        settled(&engine, 30_000);

        // A DELETE with a subquery writes the rows it keeps into the renewed table.
        sql("DELETE FROM renewed WHERE id IN (SELECT value FROM generate_series(1, 20000))");
        assert_eq!(value(&engine, "SELECT min(id) FROM renewed"), "20001");
        assert_eq!(value(&engine, "SELECT count(*) FROM renewed"), "10000");
        settled(&engine, 10_000);

        // Inside a transaction, a ROLLBACK undoes the renewal, and the old rows stay.
        let id = table_id(&engine, "renewed");
        sql("BEGIN");
        sql("TRUNCATE TABLE renewed");
        assert_eq!(value(&engine, "SELECT count(*) FROM renewed"), "0");
        sql("ROLLBACK");
        assert_eq!(table_id(&engine, "renewed"), id);
        assert_eq!(value(&engine, "SELECT count(*) FROM renewed"), "10000");
        assert_eq!(
            value(&engine, "SELECT v FROM renewed WHERE id = 25000"),
            "2"
        );
        settled(&engine, 10_000);
        sql("BEGIN");
        sql("TRUNCATE TABLE renewed");
        sql("INSERT INTO renewed VALUES (25000, 3)");
        sql("COMMIT");
        assert_eq!(
            value(&engine, "SELECT v FROM renewed WHERE id = 25000"),
            "3"
        );
        settled(&engine, 1);

        // An insert landing its rows when the table is emptied runs again, into the renewed
        // table, rather than fail. The table holds one row: it is renewed because of the
        // landing, whose chunks are in the file under its id (emptied in place, they went too,
        // and the insert then published a chunk that was no longer there).
        let truncated = once_landed(&engine, "renewed", "TRUNCATE TABLE renewed");
        sql("INSERT INTO renewed SELECT value, 4 FROM generate_series(100001, 240000)");
        observe::on_landed("renewed", || {});
        assert!(truncated.load(Ordering::SeqCst), "the insert landed");
        assert_eq!(value(&engine, "SELECT count(*) FROM renewed"), "140000");
        assert_eq!(value(&engine, "SELECT min(id) FROM renewed"), "100001");
        settled(&engine, 140_000);
    }

    #[test]
    fn rows_that_replace_a_table_land_in_steps_under_new_ids() {
        let engine = Engine::open_in_memory(Config::default()).unwrap();
        let sql = |q: &str| engine.sql_blocking(q).unwrap();
        let steps_of = |entries: usize| entries.div_ceil(crate::catalog::indexes::STEP_ENTRIES);
        sql("CREATE TABLE relanded (id BIGINT PRIMARY KEY, v BIGINT)");
        sql("CREATE TABLE aside (x BIGINT)");
        sql("INSERT INTO relanded SELECT value, 0 FROM generate_series(1, 140000)");
        let steps = Arc::new(AtomicUsize::new(0));
        let (racer, count) = (engine.clone(), Arc::clone(&steps));
        observe::on_landed("relanded", move || {
            count.fetch_add(1, Ordering::SeqCst);
            // Between two steps the writer lock is free: another statement commits.
            racer.sql_blocking("INSERT INTO aside VALUES (1)").unwrap();
            // The old rows are the table's until the commit, and so are their keys.
            assert_eq!(value(&racer, "SELECT sum(v) FROM relanded"), "0");
            let e = racer
                .sql_blocking("INSERT INTO relanded VALUES (1, 9)")
                .unwrap_err();
            assert!(e.message().contains("Duplicate key (1)"), "{e}");
        });
        let id = table_id(&engine, "relanded");
        sql("INSERT OVERWRITE relanded SELECT value, 1 FROM generate_series(1, 140000)");
        observe::on_landed("relanded", || {});
        // Two full chunks, each in steps of entries; the 8,928 rows left over are written
        // by the commit.
        assert_eq!(steps.load(Ordering::SeqCst), 2 * steps_of(65_536));
        assert_ne!(table_id(&engine, "relanded"), id, "renewed");
        assert_eq!(value(&engine, "SELECT sum(v) FROM relanded"), "140000");
        assert_eq!(
            value(&engine, "SELECT v FROM relanded WHERE id = 139999"),
            "1"
        );
        settled(&engine, 140_000);

        // Rows that repeat a key are refused where they land, and nothing of them is left.
        let id = table_id(&engine, "relanded");
        let e = engine
            .sql_blocking(
                "INSERT OVERWRITE relanded SELECT value % 70000, 2 FROM generate_series(1, 140000)",
            )
            .unwrap_err();
        assert!(e.message().contains("Duplicate key"), "{e}");
        assert_eq!(table_id(&engine, "relanded"), id);
        assert_eq!(value(&engine, "SELECT sum(v) FROM relanded"), "140000");
        settled(&engine, 140_000);

        // A DELETE with a subquery lands the rows it keeps. A write to the table between its
        // steps changes the rows it computed from: it stops at its next step, runs again,
        // and keeps that row too.
        let steps = Arc::new(AtomicUsize::new(0));
        let (racer, count) = (engine.clone(), Arc::clone(&steps));
        observe::on_landed("relanded", move || {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                racer
                    .sql_blocking("INSERT INTO relanded VALUES (200000, 5)")
                    .unwrap();
            }
        });
        sql("DELETE FROM relanded WHERE id IN (SELECT value FROM generate_series(1, 10))");
        observe::on_landed("relanded", || {});
        assert_eq!(steps.load(Ordering::SeqCst), 1 + 2 * steps_of(65_536));
        assert_eq!(value(&engine, "SELECT count(*) FROM relanded"), "139991");
        assert_eq!(value(&engine, "SELECT min(id) FROM relanded"), "11");
        assert_eq!(
            value(&engine, "SELECT v FROM relanded WHERE id = 200000"),
            "5"
        );
        settled(&engine, 139_991);

        // Rows landing for a table that another statement renews meanwhile land again, for
        // the renewed table.
        let once = once_landed(&engine, "relanded", "TRUNCATE TABLE relanded");
        sql("INSERT OVERWRITE relanded SELECT value, 3 FROM generate_series(1, 140000)");
        observe::on_landed("relanded", || {});
        assert!(once.load(Ordering::SeqCst));
        assert_eq!(value(&engine, "SELECT sum(v) FROM relanded"), "420000");
        settled(&engine, 140_000);

        // A keyed table made from a query lands its rows in steps too, and appears with them
        // at its commit; OR REPLACE hands the old table to the sweeper.
        let steps = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new((
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'made'",
            "0",
        )));
        let (racer, count, check) = (engine.clone(), Arc::clone(&steps), Arc::clone(&seen));
        observe::on_landed("made", move || {
            count.fetch_add(1, Ordering::SeqCst);
            racer.sql_blocking("INSERT INTO aside VALUES (2)").unwrap();
            let (query, expected) = *check.lock();
            assert_eq!(
                value(&racer, query),
                expected,
                "nothing is published before the commit"
            );
        });
        sql("CREATE TABLE made (id BIGINT PRIMARY KEY, v BIGINT) AS SELECT value AS id, 1 AS v FROM generate_series(1, 140000)");
        assert_eq!(steps.load(Ordering::SeqCst), 2 * steps_of(65_536));
        assert_eq!(value(&engine, "SELECT sum(v) FROM made"), "140000");
        let e = engine
            .sql_blocking("INSERT INTO made VALUES (139999, 2)")
            .unwrap_err();
        assert!(e.message().contains("Duplicate key (139999)"), "{e}");
        settled(&engine, 280_000);
        *seen.lock() = ("SELECT sum(v) FROM made", "140000");
        let id = table_id(&engine, "made");
        let e = engine
            .sql_blocking("CREATE OR REPLACE TABLE made (id BIGINT PRIMARY KEY, v BIGINT) AS SELECT value % 100000 AS id, 2 AS v FROM generate_series(1, 140000)")
            .unwrap_err();
        assert!(e.message().contains("Duplicate key"), "{e}");
        assert_eq!(table_id(&engine, "made"), id);
        sql("CREATE OR REPLACE TABLE made (id BIGINT PRIMARY KEY, v BIGINT) AS SELECT value AS id, 2 AS v FROM generate_series(1, 140000)");
        observe::on_landed("made", || {});
        assert_ne!(table_id(&engine, "made"), id);
        assert_eq!(value(&engine, "SELECT sum(v) FROM made"), "280000");
        assert_eq!(value(&engine, "SELECT v FROM made WHERE id = 139999"), "2");
        settled(&engine, 280_000);
    }

    #[test]
    fn a_renewal_a_stopped_process_left_is_discarded_when_the_file_opens() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::execution::disk_manager::DiskManagerBuilder;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("renewal.redb");
        let engine = Engine::open(&path, Config::default()).unwrap();
        engine
            .sql_blocking("CREATE TABLE left_over (id BIGINT PRIMARY KEY, v BIGINT)")
            .unwrap();
        engine
            .sql_blocking("INSERT INTO left_over SELECT value, 0 FROM generate_series(1, 1000)")
            .unwrap();
        let before = footprint(&engine);
        let store = Arc::clone(engine.store());
        let (record, schema) = {
            let txn = store.read().unwrap();
            let record = tables::get(
                &txn.open_table(TABLES).unwrap(),
                TenantId::LOCAL,
                "mindsdb",
                "left_over",
            )
            .unwrap()
            .unwrap();
            let schema = tables::schema(
                &txn.open_table(crate::store::schema::TABLE_SCHEMAS).unwrap(),
                record.id,
            )
            .unwrap();
            (record, schema)
        };
        // Rows that would replace the table's: two full chunks, landed and never published,
        // as a process stopped before its commit leaves them.
        let disk = Arc::new(DiskManagerBuilder::default().build().unwrap());
        let mut staged = tables::StagedRows::replacing(
            &record.name,
            &record.constraints.indexes,
            Arc::clone(&schema),
            crate::spool::Spool::new(disk, 0),
        )
        .unwrap();
        let ids = Int64Array::from_iter_values(1..=140_000);
        let zeros = Int64Array::from_iter_values(std::iter::repeat_n(0, 140_000));
        staged
            .push(
                super::RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(zeros)]).unwrap(),
            )
            .unwrap();
        let mut step = |work: &mut dyn FnMut(&redb::WriteTransaction) -> crate::Result<()>| {
            let lock = loop {
                // The sweeper may hold the lock a moment; it leaves a renewal alone.
                match store.try_lock_writes() {
                    Ok(lock) => break lock,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            };
            let guard = store.begin_write(lock)?;
            work(&guard.txn)?;
            guard.commit()
        };
        let (landing, landed) = tables::RowLanding::renewing(
            TenantId::LOCAL,
            "mindsdb",
            &record,
            (0, None),
            staged,
            &mut step,
            &|| Ok(()),
        );
        landed.unwrap();
        drop(landing);
        let during = footprint(&engine);
        assert_eq!(during[2], 1, "one landing");
        assert_eq!(during[0], before[0] + 131_072, "two chunks' entries landed");
        drop(store);
        drop(engine);
        let engine = Engine::open(&path, Config::default()).unwrap();
        // Opening makes it a dropped table's leftovers, which the sweeper removes.
        assert_eq!(
            wait_for(&engine, |f| *f == before),
            before,
            "nothing of the landing is left"
        );
        assert_eq!(value(&engine, "SELECT count(*) FROM left_over"), "1000");
        engine
            .sql_blocking(
                "INSERT OVERWRITE left_over SELECT value, 1 FROM generate_series(1, 140000)",
            )
            .unwrap();
        assert_eq!(value(&engine, "SELECT sum(v) FROM left_over"), "140000");
    }

    #[test]
    fn a_replacement_counts_the_bytes_it_replaces_only_while_they_are_there_and_only_once() {
        let mut config = Config {
            edition: crate::Edition::Hosted,
            ..Config::default()
        };
        let plan = crate::PlanConfig {
            max_storage_mb: 16,
            ..crate::PlanConfig::default()
        };
        config.hosted.plans.insert("snug".into(), plan);
        config.hosted.default_plan = "snug".into();
        let engine = Engine::open_in_memory(config).unwrap();
        engine
            .block_on(engine.create_user("bob", Some("snug")))
            .unwrap();
        let key = engine.block_on(engine.create_api_key("bob")).unwrap().key;
        let bob = engine.as_user(&key).unwrap();
        let sql = |q: &str| bob.sql_blocking(q).unwrap();
        let hashes = |rows: u64| {
            format!("SELECT value AS id, md5(CAST(value AS VARCHAR)) AS h FROM generate_series(1, {rows})")
        };
        let over_quota = |e: crate::Error| {
            assert_eq!(e.kind(), crate::ErrorKind::QuotaExceeded, "{e}");
        };
        sql("CREATE TABLE credited (id BIGINT PRIMARY KEY, h VARCHAR)");
        sql(&format!("INSERT INTO credited {}", hashes(150_000)));
        let held = bob.limits().unwrap().storage_bytes.used;
        assert!(held > 8 << 20 && held < 16 << 20, "{held}");

        // Another overwrite of the table while one lands gets no credit of its own: both
        // would count the same bytes as freed.
        let once = Arc::new(AtomicBool::new(false));
        let (racer, first, rows) = (bob.clone(), Arc::clone(&once), hashes(150_000));
        observe::on_landed("credited", move || {
            if !first.swap(true, Ordering::SeqCst) {
                let e = racer
                    .sql_blocking(&format!("INSERT OVERWRITE credited {rows}"))
                    .unwrap_err();
                assert_eq!(e.kind(), crate::ErrorKind::QuotaExceeded, "{e}");
            }
        });
        sql(&format!("INSERT OVERWRITE credited {}", hashes(150_000)));
        assert!(once.load(Ordering::SeqCst));
        assert_eq!(value(&bob, "SELECT count(*) FROM credited"), "150000");

        // The table loses its rows while an overwrite lands against their bytes: the
        // overwrite runs again, against what the table holds then, and no longer fits.
        let once = Arc::new(AtomicBool::new(false));
        let (racer, first, rows) = (bob.clone(), Arc::clone(&once), hashes(150_000));
        observe::on_landed("credited", move || {
            if !first.swap(true, Ordering::SeqCst) {
                racer
                    .sql_blocking("DELETE FROM credited WHERE id > 10")
                    .unwrap();
                // What the DELETE left counts until the sweeper has removed it; refused
                // meanwhile, the CREATE waits for the sweep and runs again.
                racer
                    .sql_blocking(&format!("CREATE TABLE elsewhere AS {rows}"))
                    .unwrap();
            }
        });
        let e = bob
            .sql_blocking(&format!("INSERT OVERWRITE credited {}", hashes(150_000)))
            .unwrap_err();
        observe::on_landed("credited", || {});
        over_quota(e);
        assert_eq!(value(&bob, "SELECT count(*) FROM credited"), "10");
        assert_eq!(value(&bob, "SELECT count(*) FROM elsewhere"), "150000");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while bob.limits().unwrap().storage_bytes.used > 16 << 20 {
            assert!(
                std::time::Instant::now() < deadline,
                "over the limit for good"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Chunk ids of `mindsdb.t`, in row order.
    fn chunk_ids(engine: &Engine) -> Vec<u64> {
        let txn = engine.store().read().unwrap();
        let record = tables::record(&txn, TenantId::LOCAL, "mindsdb", "t")
            .unwrap()
            .unwrap();
        txn.chunk_order_of(record.id)
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
