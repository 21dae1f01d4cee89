//! Discarding what a landing step wrote when its statement does not commit.

use redb::{ReadableTable, WriteTransaction};

use crate::catalog::constraints::Index;
use crate::catalog::indexes::{self, Indexed};
use crate::catalog::landing::{self, Landed};
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::store::schema::{CHUNKS, LANDED_CHUNKS, TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

use super::codec::*;
use super::record::*;

/// The table of `tenant` whose id is `id`, if it still exists.
pub(super) fn by_id(
    txn: &WriteTransaction,
    tenant: TenantId,
    id: u64,
) -> Result<Option<TableRecord>> {
    let tables = txn.open_table(TABLES)?;
    for entry in tables.range((tenant.0, "", "")..)? {
        let (key, value) = entry?;
        if key.value().0 != tenant.0 {
            break;
        }
        let record: TableRecord = serde_json::from_str(value.value())?;
        if record.id == id {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

/// One step of discarding the landing `id` (a statement that failed after some of its data
/// landed, one a stopped process left, or what a DROP left): one landed chunk and its
/// entries, a sweep's share of an index's entries, or a few chunks of a dropped table; each
/// step counts the bytes it frees. Returns true once nothing of it is left. A knowledge base's
/// search indexes are not this module's: `rules` sweeps those.
pub(crate) fn discard_landed_step(txn: &WriteTransaction, id: u64) -> Result<bool> {
    let Some(what) = landing::get(txn, id)? else {
        return Ok(true);
    };
    let tenant = what.tenant();
    let retiring = matches!(what, Landed::Retired { .. });
    let (freed, done) = match what {
        Landed::Rows {
            table,
            indexes: ids,
            ..
        }
        | Landed::Retired {
            table,
            indexes: ids,
            ..
        } => match landing::first_chunk(txn, id)? {
            None => (0, true),
            // A retired chunk no longer marked is live again (never expected: a rewrite's
            // commit joins no transaction that could roll it back): it stays.
            Some((chunk, _))
                if retiring
                    && !ids
                        .first()
                        .map_or(Ok(false), |&i| indexes::is_retired(txn, i, chunk))? =>
            {
                landing::remove_chunk(txn, id, chunk)?;
                (0, false)
            }
            Some((chunk, _)) => {
                let bytes = txn
                    .open_table(CHUNKS)?
                    .remove((table, chunk))?
                    .map(|bytes| bytes.value().to_vec());
                let mut freed = bytes.as_ref().map_or(0, |b| b.len() as u64);
                // A table dropped meanwhile left its entries to the sweeper of the drop.
                if let (Some(bytes), Some(record)) = (bytes, by_id(txn, tenant, table)?) {
                    let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, table)?;
                    let landed: Vec<Index> = record
                        .constraints
                        .indexes
                        .into_iter()
                        .filter(|index| index.entries.is_some_and(|e| ids.contains(&e)))
                        .collect();
                    if let Some(indexed) = Indexed::of(&landed, &schema, &record.name)? {
                        freed += indexed.remove(txn, chunk, &decode_chunk(&bytes, None)?)?;
                    }
                }
                indexes::forget_retired(txn, &ids, chunk)?;
                landing::remove_chunk(txn, id, chunk)?;
                (freed, false)
            }
        },
        Landed::Dropped {
            table, mut indexes, ..
        } => match indexes.first().copied() {
            Some(index) => {
                let (freed, next) = indexes::sweep(txn, index, None, &|_| true)?;
                if next.is_none() {
                    indexes.remove(0);
                }
                let left = Landed::Dropped {
                    tenant: tenant.0,
                    table,
                    indexes,
                };
                landing::set(txn, id, &left)?;
                (freed, false)
            }
            None => match table {
                Some(table) => {
                    let mut chunks = txn.open_table(CHUNKS)?;
                    // A few chunks a step: each is up to a few MiB.
                    let some = chunks
                        .range((table, 0)..=(table, u64::MAX))?
                        .take(DROPPED_CHUNKS_A_STEP)
                        .map(|entry| entry.map(|(key, _)| key.value().1))
                        .collect::<std::result::Result<Vec<u64>, _>>()?;
                    let mut freed = 0;
                    for chunk in &some {
                        if let Some(bytes) = chunks.remove((table, *chunk))? {
                            freed += bytes.value().len() as u64;
                        }
                    }
                    (freed, some.is_empty())
                }
                None => (0, true),
            },
        },
        Landed::Renewal {
            table,
            indexes: ids,
            ..
        } => {
            // Nothing names the landed rows: from now on they are a dropped table's, whose
            // chunks are found by id (the list of them goes in this step, a row per chunk).
            let schema = txn
                .open_table(TABLE_SCHEMAS)?
                .remove(table)?
                .map_or(0, |bytes| bytes.value().len() as u64);
            txn.open_table(LANDED_CHUNKS)?
                .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
            let dropped = Landed::Dropped {
                tenant: tenant.0,
                table: Some(table),
                indexes: ids,
            };
            landing::set(txn, id, &dropped)?;
            (schema, false)
        }
        Landed::Search { .. } => {
            return Err(Error::internal(
                "a knowledge base's search indexes are swept with their own module",
            ))
        }
        Landed::Entries { index, .. } => {
            // Every entry examined goes, so each step starts again from the first.
            let (freed, next) = indexes::sweep(txn, index, None, &|_| true)?;
            (freed, next.is_none())
        }
    };
    storage::charge(txn, tenant, Change::removed(freed))?;
    if done {
        landing::end(txn, id)?;
    }
    Ok(done)
}

/// Chunks of a dropped table removed in one step of its sweep.
pub(super) const DROPPED_CHUNKS_A_STEP: usize = 4;
