//! `INSERT … ON CONFLICT [(columns)] DO UPDATE SET col = expr, … [WHERE condition]`, as DuckDB,
//! PostgreSQL and SQLite run it: a new row whose key a stored row has updates that row instead
//! (its assignments see the stored row by the table's name and the new one as `excluded`); the
//! others are inserted. The stored rows that conflict are found and rewritten chunk by chunk
//! from a read of the table before the writer lock is taken; inside the write transaction the
//! rewritten chunks replace theirs (if the table is still as read), the rest are appended, and
//! the keys verified.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::kernels::zip::zip;
use datafusion::arrow::compute::{
    and, concat_batches, filter_record_batch, is_not_null, not, take,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::{DFSchema, TableReference};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, DoUpdate, Expr as SqlExpr, Ident, OnConflictAction, OnInsert,
    SqliteOnConflict, Statement, VisitMut, VisitorMut,
};

use super::constraints::Checks;
use super::job::WriteJob;
use crate::catalog::constraints::{KeySet, OnConflict};
use crate::catalog::tables::{self, ReadTables, Rewrite, StagedRows, TableRecord, TableWriter};
use crate::error::{Error, ErrorKind, Result};
use crate::tenant::TenantId;

/// The name the new row goes by in the assignments.
const EXCLUDED: &str = "excluded";

/// A DO UPDATE clause, as written.
#[derive(Debug)]
pub(crate) struct Upsert {
    target: Option<Vec<String>>,
    assignments: Vec<(String, SqlExpr)>,
    selection: Option<SqlExpr>,
}

impl Upsert {
    /// Reads `ON CONFLICT [target] DO UPDATE …`.
    pub(crate) fn new(target: Option<ConflictTarget>, update: DoUpdate) -> Result<Upsert> {
        let target = match target {
            None => None,
            Some(ConflictTarget::Columns(columns)) => {
                Some(columns.into_iter().map(|c| c.value).collect())
            }
            Some(ConflictTarget::OnConstraint(name)) => {
                return Err(Error::invalid(format!(
                    "ON CONFLICT ON CONSTRAINT {name} is not supported: name the key's columns, as in ON CONFLICT (id)"
                )))
            }
        };
        let mut assignments = Vec::new();
        for assignment in update.assignments {
            match assignment.target {
                AssignmentTarget::ColumnName(name) => {
                    let column = name
                        .0
                        .last()
                        .and_then(|part| part.as_ident())
                        .map(|ident| ident.value.clone())
                        .ok_or_else(|| Error::invalid(format!("'{name}' is not a column")))?;
                    assignments.push((column, assignment.value));
                }
                AssignmentTarget::Tuple(_) => {
                    return Err(Error::invalid(
                        "ON CONFLICT DO UPDATE SET (a, b) = … is not supported: assign each column",
                    ))
                }
            }
        }
        Ok(Upsert {
            target,
            assignments,
            selection: update.selection,
        })
    }

    /// Resolves `staged` (rows for `record`'s table) against the stored rows as `source` has
    /// them: the stored rows new ones conflict with are rewritten by the assignments, the other
    /// new rows are to be inserted. Reads the table from `source`, which needs no writer lock;
    /// [`Prepared::apply`] writes the result.
    pub(crate) fn prepare(
        &self,
        job: &WriteJob,
        source: &impl ReadTables,
        record: &TableRecord,
        staged: StagedRows,
        checks: &Checks,
    ) -> Result<Prepared> {
        let schema: SchemaRef = source.schema_of(record.id)?;
        let key = self.key(record)?;
        let keys = KeySet::new(&key_of(&key), &schema, &record.name)?;
        let self_key = &key;
        let new = concat_batches(&schema, &staged.into_batches()?)?;
        // Each key of the new rows, once: a statement cannot update a row twice.
        let mut by_key = HashMap::new();
        crate::capacity::grow_map(&mut by_key, new.num_rows(), || {
            format!("the keys of the statement's rows ({})", self_key.join(", "))
        })?;
        for (row, key) in keys.keys(&new)?.into_iter().enumerate() {
            if let Some(key) = key {
                if by_key.insert(key, row as u32).is_some() {
                    return Err(Error::new(
                        ErrorKind::ConstraintViolation,
                        format!(
                            "Two rows of the statement have the same ({}) in table '{}': ON CONFLICT DO UPDATE cannot update a row twice",
                            self_key.join(", "),
                            record.name
                        ),
                    ));
                }
            }
        }
        let planned = self.plan(job, &record.name, &schema)?;
        // bounded: one flag per row of a batch in memory
        let mut consumed = vec![false; new.num_rows()];
        let mut updated = 0u64;
        let rewrite = tables::plan_rewrite(source, record, job.spool(), job.spool(), |stored| {
            let matches: UInt32Array = keys
                .keys(&stored)?
                .iter()
                .map(|key| key.as_ref().and_then(|key| by_key.get(key).copied()))
                .collect();
            if matches.null_count() == matches.len() {
                return Ok(None);
            }
            for index in matches.iter().flatten() {
                consumed[index as usize] = true;
            }
            let excluded = new
                .columns()
                .iter()
                .map(|column| take(column, &matches, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let mut columns = stored.columns().to_vec();
            columns.extend(excluded);
            let both = RecordBatch::try_new(Arc::clone(&planned.both), columns)?;
            let mut hit = is_not_null(&matches)?;
            if let Some(condition) = &planned.selection {
                let holds = evaluate(condition, &both)?;
                let holds = holds.as_boolean();
                // A NULL condition does not hold.
                let holds: BooleanArray = holds.iter().map(|v| Some(v == Some(true))).collect();
                hit = and(&hit, &holds)?;
            }
            updated += hit.true_count() as u64;
            let mut values = stored.columns().to_vec();
            for (column, value) in &planned.assignments {
                let value = evaluate(value, &both)?;
                let value =
                    datafusion::arrow::compute::cast(&value, schema.field(*column).data_type())?;
                values[*column] = zip(&hit, &value, &stored.column(*column))?;
            }
            let changed = RecordBatch::try_new(stored.schema(), values)?;
            checks.verify(&changed)?;
            Ok(Some(changed))
        })?;
        let fresh = filter_record_batch(&new, &not(&BooleanArray::from(consumed))?)?;
        Ok(Prepared {
            rewrite,
            fresh,
            updated,
        })
    }

    /// The unique key conflicts are looked for on: the target's, or the primary key (or the
    /// only unique key) when there is no target.
    fn key(&self, record: &TableRecord) -> Result<Vec<String>> {
        let keys = record.constraints.unique_keys();
        let same = |columns: &[String], target: &[String]| {
            columns.len() == target.len()
                && columns
                    .iter()
                    .all(|c| target.iter().any(|t| t.eq_ignore_ascii_case(c)))
        };
        let chosen = match &self.target {
            Some(target) => keys.iter().find(|key| same(key.columns, target)),
            None if record.constraints.primary_key.is_empty() && keys.len() != 1 => None,
            None => keys.first(),
        };
        chosen.map(|key| key.columns.to_vec()).ok_or_else(|| {
            Error::invalid(match &self.target {
                Some(target) => format!(
                    "ON CONFLICT ({}) names no PRIMARY KEY or UNIQUE key of table '{}'",
                    target.join(", "),
                    record.name
                ),
                None => format!(
                    "ON CONFLICT DO UPDATE on table '{}' needs its key's columns: ON CONFLICT (…) DO UPDATE",
                    record.name
                ),
            })
        })
    }

    /// The assignments and the condition, planned over the stored row (by the table's name, or
    /// unqualified) followed by the new one (`excluded`).
    fn plan(&self, job: &WriteJob, table: &str, schema: &SchemaRef) -> Result<Planned> {
        let mut fields: Vec<(Option<TableReference>, Arc<Field>)> = Vec::new();
        for field in schema.fields() {
            fields.push((Some(TableReference::bare(table)), Arc::clone(field)));
        }
        for field in schema.fields() {
            fields.push((Some(TableReference::bare(EXCLUDED)), Arc::clone(field)));
        }
        let df_schema = DFSchema::new_with_metadata(fields, Default::default())?;
        let both = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .chain(schema.fields().iter())
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let plan_one = |expr: &SqlExpr| -> Result<Arc<dyn PhysicalExpr>> {
            let mut expr = expr.clone();
            qualify(&mut expr, table);
            let text = expr.to_string();
            let logical = job
                .state
                .create_logical_expr(&text, &df_schema)
                .map_err(|e| Error::invalid(format!("ON CONFLICT DO UPDATE: {e}")))?;
            Ok(job.state.create_physical_expr(logical, &df_schema)?)
        };
        let assignments = self
            .assignments
            .iter()
            .map(|(column, value)| {
                let index = crate::catalog::constraints::column_index(schema, column, table)?;
                Ok((index, plan_one(value)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let selection = self.selection.as_ref().map(plan_one).transpose()?;
        Ok(Planned {
            both,
            assignments,
            selection,
        })
    }
}

/// A DO UPDATE resolved against a read of the table ([`Upsert::prepare`]).
pub(crate) struct Prepared {
    /// The chunks holding stored rows that new ones update, rewritten.
    rewrite: Rewrite,
    /// The new rows no stored row conflicts with.
    fresh: RecordBatch,
    /// How many stored rows the rewrite updates.
    updated: u64,
}

impl Prepared {
    /// Writes the updated rows and inserts the others in `record`'s table inside `txn`.
    /// Returns the rows inserted or updated and what the rewrite retired, or `None` (writing
    /// nothing) when the table is no longer as it was read.
    pub(crate) fn apply(
        self,
        txn: &redb::WriteTransaction,
        tenant: TenantId,
        record: TableRecord,
    ) -> Result<Option<(u64, tables::Retired)>> {
        let (project, name) = (record.project.clone(), record.name.clone());
        let Some(retired) = tables::apply_rewrite(txn, tenant, record, self.rewrite)? else {
            return Ok(None);
        };
        let record = tables::record(&txn, tenant, &project, &name)?
            .ok_or_else(|| Error::internal("a table went away during its own write"))?;
        let inserted = self.fresh.num_rows() as u64;
        let mut writer = TableWriter::append(txn, tenant, record)?;
        writer.push(self.fresh)?;
        writer.finish()?;
        Ok(Some((inserted + self.updated, retired)))
    }

    /// The rewrite of the stored rows it updates, to land ahead of the commit.
    pub(crate) fn rewrite_mut(&mut self) -> &mut Rewrite {
        &mut self.rewrite
    }
}

/// A DO UPDATE ready to evaluate on (stored row, new row) batches.
struct Planned {
    both: SchemaRef,
    assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
    selection: Option<Arc<dyn PhysicalExpr>>,
}

fn key_of(columns: &[String]) -> crate::catalog::constraints::UniqueKey<'_> {
    crate::catalog::constraints::UniqueKey {
        declared: "ON CONFLICT".into(),
        columns,
        checked_by_entries: false,
    }
}

/// Names without a table in `expr` name the stored row's columns, as in PostgreSQL.
fn qualify(expr: &mut SqlExpr, table: &str) {
    struct Qualify<'t>(&'t str);
    impl VisitorMut for Qualify<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> ControlFlow<()> {
            if let SqlExpr::Identifier(ident) = expr {
                *expr = SqlExpr::CompoundIdentifier(vec![
                    Ident::with_quote('"', self.0),
                    ident.clone(),
                ]);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = expr.visit(&mut Qualify(table));
}

/// Evaluates a planned expression on a batch.
fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// What an INSERT does with a row whose key is taken: skip it, replace, fail, or update the
/// stored row (`update`, for `ON CONFLICT … DO UPDATE`).
#[derive(Debug)]
pub(crate) struct Conflict {
    pub(crate) on: OnConflict,
    pub(crate) update: Option<Upsert>,
}

/// Takes an INSERT's conflict clause out of it (DataFusion plans only `OR REPLACE` and
/// `REPLACE INTO`, which it keeps).
pub(crate) fn take_conflict(statement: &mut Statement) -> Result<Conflict> {
    let on = take_resolution(statement)?;
    let Statement::Insert(insert) = statement else {
        return Ok(Conflict { on, update: None });
    };
    let update = match insert.on.take() {
        None => None,
        Some(OnInsert::OnConflict(clause)) => match clause.action {
            OnConflictAction::DoNothing => {
                return Ok(Conflict {
                    on: OnConflict::Nothing,
                    update: None,
                })
            }
            OnConflictAction::DoUpdate(update) => {
                Some(Upsert::new(clause.conflict_target, update)?)
            }
        },
        Some(other) => {
            return Err(Error::invalid(format!(
                "'{other}' is not supported: use ON CONFLICT (…) DO UPDATE, DO NOTHING or INSERT OR REPLACE"
            )))
        }
    };
    Ok(Conflict { on, update })
}

/// The resolution `OR …`, `REPLACE INTO` and MySQL's `INSERT IGNORE` ask for.
fn take_resolution(statement: &mut Statement) -> Result<OnConflict> {
    let Statement::Insert(insert) = statement else {
        return Ok(OnConflict::Fail);
    };
    let mut on_conflict = match insert.or.take() {
        Some(SqliteOnConflict::Replace) => {
            insert.replace_into = true;
            OnConflict::Replace
        }
        Some(SqliteOnConflict::Ignore) => OnConflict::Nothing,
        // ABORT, FAIL and ROLLBACK all fail the statement, which then stores nothing.
        Some(_) | None => OnConflict::Fail,
    };
    if insert.replace_into {
        on_conflict = OnConflict::Replace;
    }
    if std::mem::take(&mut insert.ignore) {
        on_conflict = OnConflict::Nothing;
    }
    Ok(on_conflict)
}
