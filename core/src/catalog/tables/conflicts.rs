//! INSERT … ON CONFLICT: the rows that collide with stored keys, resolved by REPLACE or DO
//! NOTHING ([`Resolved`]).

use datafusion::arrow::record_batch::RecordBatch;
use redb::WriteTransaction;

use crate::catalog::constraints::{KeySet, OnConflict};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store::schema::{CHUNK_ORDER, TABLES};
use crate::tenant::TenantId;

use super::read::*;
use super::record::*;
use super::rewrite::*;
use super::staged::*;
use super::writer::*;

/// New rows resolved against the stored rows their unique keys conflict with, computed from a
/// read of the table before the writer lock is taken ([`resolve_conflicts`]) and applied by
/// [`Resolved::apply`] if the table is still as read.
pub(crate) struct Resolved {
    /// The table's (position, chunk id) pairs as read.
    base: Vec<(u64, u64)>,
    /// The stored rows that go (`Replace`), their chunks rewritten.
    rewrite: Option<Rewrite>,
    /// The rows to append.
    rows: Vec<RecordBatch>,
}

/// Resolves `staged` (rows for `record`'s table) by `on_conflict` against the stored rows as
/// `source` has them: `Replace` removes the stored rows holding a new row's key, `Nothing`
/// drops the new rows whose key is taken (by a stored row or an earlier new one). Reads the
/// table's key columns from `source`, which needs no writer lock; `spool` gives spools for
/// what `Replace` rewrites. Rows that resolve conflicts are held in memory.
pub(crate) fn resolve_conflicts(
    source: &impl ReadTables,
    record: &TableRecord,
    staged: StagedRows,
    on_conflict: OnConflict,
    spool: impl Fn() -> Spool,
) -> Result<Resolved> {
    let base = source.chunk_order_of(record.id)?;
    let schema = source.schema_of(record.id)?;
    let mut sets = record
        .constraints
        .unique_keys()
        .iter()
        .map(|key| KeySet::new(key, &schema, &record.name))
        .collect::<Result<Vec<_>>>()?;
    let batches = staged.into_batches()?;
    let rewrite = match on_conflict {
        OnConflict::Replace => {
            // The new rows' keys (two new rows with one key fail), then the stored rows
            // holding any of them go.
            for batch in &batches {
                for set in &mut sets {
                    set.add(batch, &record.name)?;
                }
            }
            Some(plan_rewrite(source, record, spool(), spool(), |batch| {
                // bounded: one flag per row of a chunk in memory
                let mut keep = vec![true; batch.num_rows()];
                for set in &sets {
                    for (row, key) in set.keys(&batch)?.iter().enumerate() {
                        keep[row] &= !set.contains(key);
                    }
                }
                if keep.iter().all(|&k| k) {
                    return Ok(None);
                }
                Ok(Some(filter_rows(&batch, keep)?))
            })?)
        }
        OnConflict::Nothing | OnConflict::Fail => {
            for &(_, chunk) in &base {
                crate::cancel::check()?;
                let stored = source.chunk(record.id, chunk)?;
                for set in &mut sets {
                    set.make_room(stored.num_rows())?;
                    for key in set.keys(&stored)? {
                        set.insert(key);
                    }
                }
            }
            None
        }
    };
    // bounded: one per batch, the batches already in memory
    let mut rows = Vec::with_capacity(batches.len());
    for batch in batches {
        rows.push(match on_conflict {
            OnConflict::Nothing => {
                // Row by row: a row is kept when no key of it is taken, and then takes them.
                for set in &mut sets {
                    set.make_room(batch.num_rows())?;
                }
                let keys = sets
                    .iter()
                    .map(|set| set.keys(&batch))
                    .collect::<Result<Vec<_>>>()?;
                // bounded: one flag per row of a chunk in memory
                let mut keep = Vec::with_capacity(batch.num_rows());
                for row in 0..batch.num_rows() {
                    let free = sets
                        .iter()
                        .zip(&keys)
                        .all(|(set, k)| !set.contains(&k[row]));
                    if free {
                        for (set, k) in sets.iter_mut().zip(&keys) {
                            set.insert(k[row].clone());
                        }
                    }
                    keep.push(free);
                }
                filter_rows(&batch, keep)?
            }
            OnConflict::Replace | OnConflict::Fail => batch,
        });
    }
    Ok(Resolved {
        base,
        rewrite,
        rows,
    })
}

impl Resolved {
    /// Applies the resolution to `record`'s table inside `txn`: the rewrite of the stored rows
    /// that go, then the new rows. Returns the rows inserted, or `None` (writing nothing) when
    /// the table is no longer as it was read.
    pub(crate) fn apply(
        self,
        txn: &WriteTransaction,
        tenant: TenantId,
        record: TableRecord,
    ) -> Result<Option<(u64, Retired)>> {
        if chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)? != self.base {
            return Ok(None);
        }
        let (record, retired) = match self.rewrite {
            Some(rewrite) => {
                let (project, name) = (record.project.clone(), record.name.clone());
                let Some(retired) = apply_rewrite(txn, tenant, record, rewrite)? else {
                    return Ok(None);
                };
                let record = get(&txn.open_table(TABLES)?, tenant, &project, &name)?
                    .ok_or_else(|| Error::internal("a table went away during its own write"))?;
                (record, retired)
            }
            None => (record, Retired::nothing()),
        };
        let mut inserted = 0;
        let mut writer = TableWriter::append(txn, tenant, record)?;
        for batch in self.rows {
            inserted += batch.num_rows() as u64;
            writer.push(batch)?;
        }
        writer.finish()?;
        Ok(Some((inserted, retired)))
    }

    /// The rewrite of the stored rows that go, to land ahead of the commit.
    pub(crate) fn rewrite_mut(&mut self) -> Option<&mut Rewrite> {
        self.rewrite.as_mut()
    }
}

/// The rows of `batch` whose `keep` is true.
pub(super) fn filter_rows(batch: &RecordBatch, keep: Vec<bool>) -> Result<RecordBatch> {
    let keep = datafusion::arrow::array::BooleanArray::from(keep);
    Ok(datafusion::arrow::compute::filter_record_batch(
        batch, &keep,
    )?)
}
