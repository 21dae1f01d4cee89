//! Rewriting the chunks an UPDATE or DELETE touches ([`Rewrite`]), and retiring the chunks a
//! rewrite replaced ([`Retired`]).

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use redb::{ReadableTable, WriteTransaction};

use crate::catalog::indexes::{self, Indexed, Lookups, Signature};
use crate::catalog::landing::{self, Landed};
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store::schema::{CHUNKS, CHUNK_ORDER, LANDED_CHUNKS, TABLE_SCHEMAS};
use crate::tenant::TenantId;

use super::codec::*;
use super::read::*;
use super::record::*;
use super::row_landing::*;
use super::staged::*;
use super::writer::*;

/// Chunk-by-chunk changes to a table computed from a read snapshot (an UPDATE or DELETE that
/// ran before taking the writer lock), applied by [`apply_rewrite`] if the table is still as
/// it was read. The index entries of the chunks that go and of those that come are encoded
/// with it, so applying it only writes them.
pub(crate) struct Rewrite {
    /// The table's (position, chunk id) pairs as read.
    base: Vec<(u64, u64)>,
    /// The id of the table read.
    table_id: u64,
    /// Per changed chunk: its position in the spool's numbers, its new rows as bytes (empty
    /// when every row went), followed by their index entries when the table has indexes
    /// (see [`split_staged`]); the chunk ids and row counts alongside. Taken when the new
    /// chunks land ([`Rewrite::land`]).
    changes: Option<Spool>,
    /// (position, old chunk id, old rows, new rows) per change, in order.
    index: Vec<(u64, u64, u64, u64)>,
    /// The indexes the entries were encoded for, and the encoded entries of the changed
    /// chunks as they were (numbered by old chunk id), when the table has indexes.
    entries: Option<(Signature, Spool)>,
    /// Those indexes, ready to write and remove entries.
    indexed: Option<Indexed>,
    /// The bytes the changed chunks' entries take.
    old_entry_bytes: u64,
    /// The new chunks, once they landed.
    landed: Option<LandedRewrite>,
}

/// The new chunks of a rewrite that landed ahead of its commit (see [`Rewrite::land`]).
pub(super) struct LandedRewrite {
    /// The landing's record, once a step committed one (a rewrite that only removes rows
    /// lands no chunk).
    id: Option<u64>,
    /// The entry ids of the table's indexes the chunks landed with.
    ids: Vec<u64>,
    /// Per change, in order: the new chunk's id, `None` when every row went.
    chunks: Vec<Option<u64>>,
    /// The bytes the landed chunks and entries take, counted ahead (see
    /// `storage::charge_ahead`).
    bytes: u64,
}

impl Rewrite {
    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether the rewrite should land ahead of its commit ([`Rewrite::land`]): its table has
    /// indexes, and the entries it adds and retires are more than a step writes (a one-row
    /// change to a full chunk: 65,536 out and in). Applied inside one transaction instead,
    /// they would all be written under the writer lock.
    pub(crate) fn lands(&self) -> bool {
        let Some((signature, _)) = &self.entries else {
            return false;
        };
        let rows: u64 = self.index.iter().map(|&(_, _, old, new)| old + new).sum();
        rows.saturating_mul(signature.len() as u64) > indexes::STEP_ENTRIES as u64
    }

    /// Lands the new chunks with their index entries through `step`s, as appended rows land
    /// (see `landing`): for `record`'s table of `project`, as read. Keys held by the chunks
    /// the rewrite replaces do not count as taken. [`apply_rewrite`] then publishes them and
    /// retires the old chunks, in a transaction bounded by the number of changed chunks.
    /// Returns false when another statement's landing may hold a key the rewrite writes
    /// (the statement then runs again, see `landing`). On an error or false, what landed is
    /// the caller's to discard ([`Rewrite::landing`]).
    pub(crate) fn land(
        &mut self,
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<bool> {
        let (Some(indexed), Some(changes)) = (self.indexed.as_ref(), self.changes.take()) else {
            return Err(Error::internal("a rewrite to land has no index entries"));
        };
        let replaced: Vec<u64> = self.index.iter().map(|&(_, old, ..)| old).collect();
        let mut landing = RowLanding::new(tenant, project, record, 0, None);
        let rewriting = Rewriting {
            base: &self.base,
            replaced: &replaced,
        };
        let mut index = self.index.iter();
        // bounded: one per chunk of the rewrite's index, already in memory
        let mut chunks = Vec::with_capacity(self.index.len());
        let mut overtaken = false;
        let landed = changes.drain(|position, bytes| {
            let &(_, _, _, rows) = index
                .next()
                .filter(|(at, ..)| *at == position)
                .ok_or_else(|| Error::internal("a staged rewrite lost its order"))?;
            if rows == 0 || overtaken {
                chunks.push(None);
                return Ok(());
            }
            let (bytes, entries) = split_staged(&bytes)?;
            let chunk = (rows, bytes, entries);
            let id = landing.land_one(indexed, chunk, Some(&rewriting), &mut *step, keep_going)?;
            overtaken = id.is_none();
            chunks.push(id);
            Ok(())
        });
        self.landed = Some(LandedRewrite {
            id: landing.id,
            ids: landing.ids,
            chunks,
            bytes: landing.landed_bytes,
        });
        landed.map(|()| !overtaken)
    }

    /// The record of what [`Rewrite::land`] landed, if anything: what to discard when the
    /// rewrite is not applied.
    pub(crate) fn landing(&self) -> Option<u64> {
        self.landed.as_ref().and_then(|landed| landed.id)
    }
}

/// The chunks a landed rewrite replaced, retired (see `indexes`): their entries and bytes are
/// removed in steps after the rewrite commits ([`Retired::sweep`]), each step short, instead
/// of under the writer lock of the rewrite's commit. What a stopped process left of them is
/// removed when the file is next opened (the landing's record says what).
pub(crate) struct Retired {
    work: Option<RetiredWork>,
}

pub(super) struct RetiredWork {
    /// The landing's record (a [`Landed::Retired`]).
    landing: u64,
    tenant: TenantId,
    table: u64,
    /// The table's name, for what tests watch.
    #[cfg_attr(not(test), allow(dead_code))]
    name: String,
    /// The indexes' entry ids.
    ids: Vec<u64>,
    indexed: Indexed,
    /// The retired chunks' encoded entries, numbered by chunk id.
    entries: Spool,
}

impl Retired {
    /// Nothing to sweep: a rewrite applied in one transaction.
    pub(crate) fn nothing() -> Retired {
        Retired { work: None }
    }

    /// Removes the retired chunks' entries, a share per `step`, then each chunk's bytes and
    /// mark, counting the bytes freed.
    pub(crate) fn sweep(self, step: Step<'_>) -> Result<()> {
        let Some(work) = self.work else {
            return Ok(());
        };
        work.entries.drain(|chunk, entries| {
            let mut from = 0;
            loop {
                let mut left = None;
                step(&mut |txn| {
                    // Not retired (any more): an explicit transaction that the rewrite's
                    // commit joined was rolled back; the chunk is live.
                    let retired = match work.ids.first() {
                        Some(&id) => indexes::is_retired(txn, id, chunk)?,
                        None => false,
                    };
                    if !retired {
                        return Ok(());
                    }
                    let part = indexes::Part::step(from);
                    let (mut freed, next) = work.indexed.remove_part(txn, chunk, &entries, part)?;
                    left = next;
                    if next.is_none() {
                        if let Some(bytes) = txn.open_table(CHUNKS)?.remove((work.table, chunk))? {
                            freed += bytes.value().len() as u64;
                        }
                        indexes::forget_retired(txn, &work.ids, chunk)?;
                        landing::remove_chunk(txn, work.landing, chunk)?;
                    }
                    storage::charge(txn, work.tenant, Change::removed(freed))?;
                    Ok(())
                })?;
                #[cfg(test)]
                indexes::observe::swept(&work.name);
                match left {
                    Some(next) => from = next,
                    None => return Ok(()),
                }
            }
        })?;
        step(&mut |txn| match landing::get(txn, work.landing)? {
            Some(Landed::Retired { table, .. })
                if table == work.table && landing::first_chunk(txn, work.landing)?.is_none() =>
            {
                landing::end(txn, work.landing)
            }
            _ => Ok(()),
        })
    }
}

/// Computes, from `txn` (a snapshot or the write transaction), the chunks `change` rewrites,
/// without writing them. `change` gets each chunk's rows and returns `None` to leave the chunk
/// untouched, or its new rows (possibly none). Changed chunks get new ids at their old
/// positions (see [`apply_rewrite`]), so row order holds and untouched chunks are never copied.
/// `changes` stages the new rows; `old` the index entries of the changed chunks as they were.
pub(crate) fn plan_rewrite(
    txn: &impl ReadTables,
    record: &TableRecord,
    changes: Spool,
    old: Spool,
    change: impl FnMut(RecordBatch) -> Result<Option<RecordBatch>>,
) -> Result<Rewrite> {
    plan_rewrite_probing(txn, record, changes, old, None, change)
}

/// Which columns of a chunk tell whether a rewrite touches it, and the test on those columns.
pub(crate) type ChunkProbe<'a> = (Vec<usize>, &'a dyn Fn(&RecordBatch) -> bool);

/// [`plan_rewrite`] reading only the `probe` columns of each chunk first, and the whole chunk
/// only when the probe's test finds it holds rows to change: a change to a few rows of a large
/// table decodes little more than those columns.
pub(crate) fn plan_rewrite_probing(
    txn: &impl ReadTables,
    record: &TableRecord,
    changes: Spool,
    old: Spool,
    mut probe: Option<ChunkProbe<'_>>,
    mut change: impl FnMut(RecordBatch) -> Result<Option<RecordBatch>>,
) -> Result<Rewrite> {
    let schema = txn.schema_of(record.id)?;
    let base = txn.chunk_order_of(record.id)?;
    let indexed = Indexed::of(&record.constraints.indexes, &schema, &record.name)?;
    let mut changes = changes;
    let mut rewrite = Rewrite {
        base: base.clone(),
        table_id: record.id,
        changes: None,
        index: Vec::new(),
        entries: indexed.as_ref().map(|i| (i.signature(), old)),
        indexed: None,
        old_entry_bytes: 0,
        landed: None,
    };
    for (position, chunk) in base {
        if let Some((columns, touches)) = probe.as_mut() {
            if !touches(&txn.chunk_columns(record.id, chunk, columns.clone())?) {
                continue;
            }
        }
        let batch = txn.chunk(record.id, chunk)?;
        let old_rows = batch.num_rows() as u64;
        let gone = match &indexed {
            Some(indexed) => Some(indexed.encode_unchecked(&batch)?),
            None => None,
        };
        let Some(new) = change(batch)? else {
            continue;
        };
        let new_rows = new.num_rows() as u64;
        let bytes = if new_rows == 0 {
            Vec::new()
        } else {
            let new = RecordBatch::try_new(Arc::clone(&schema), new.columns().to_vec())?;
            encode_batches(&schema, &[compact(&new)?])?
        };
        let bytes = match &indexed {
            Some(indexed) if new_rows > 0 => {
                let entries = indexed.encode(&new)?;
                // bounded: the chunk's bytes and entries, both already in memory
                let mut record = Vec::with_capacity(8 + bytes.len() + entries.len());
                record.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                record.extend_from_slice(&bytes);
                record.extend_from_slice(&entries);
                record
            }
            _ => bytes,
        };
        if let (Some((_, old)), Some(gone), Some(indexed)) =
            (rewrite.entries.as_mut(), gone, &indexed)
        {
            rewrite.old_entry_bytes += indexed.entries_bytes(&gone)?;
            old.push(chunk, gone)?;
        }
        changes.push(position, bytes)?;
        rewrite.index.push((position, chunk, old_rows, new_rows));
    }
    rewrite.changes = Some(changes);
    rewrite.indexed = indexed;
    Ok(rewrite)
}

/// Applies `rewrite` to the table `record` names inside `txn`: publishes the chunks it landed
/// ([`Rewrite::land`]), or writes them here. Returns `None` (writing nothing) when the table
/// is no longer as it was read: another write changed it since (or, for a landed rewrite,
/// its indexes); otherwise what is left to sweep.
pub(crate) fn apply_rewrite(
    txn: &WriteTransaction,
    tenant: TenantId,
    mut record: TableRecord,
    mut rewrite: Rewrite,
) -> Result<Option<Retired>> {
    if record.id != rewrite.table_id
        || chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)? != rewrite.base
    {
        return Ok(None);
    }
    if let Some(landed) = rewrite.landed.take() {
        return publish_rewrite(txn, tenant, record, rewrite, landed);
    }
    let changes = rewrite
        .changes
        .take()
        .ok_or_else(|| Error::internal("a rewrite lost its changes"))?;
    let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
    let indexed = Indexed::of(&record.constraints.indexes, &schema, &record.name)?;
    // Entries encoded for the indexes the table has now (none made or dropped meanwhile);
    // otherwise they are encoded here from the chunks.
    let staged = match (&indexed, &rewrite.entries) {
        (Some(indexed), Some((signature, _))) => *signature == indexed.signature(),
        _ => false,
    };
    // The new rows were spooled with their entries when the table had indexes as read.
    let encoded_with_entries = rewrite.entries.is_some();
    let mut chunks = txn.open_table(CHUNKS)?;
    // Counted as one change: a rewrite that shrinks the table passes even over the limit.
    let mut change = Change::default();
    if let Some(indexed) = &indexed {
        // Every old entry goes before any new one comes, so a key that moves between chunks
        // is no duplicate.
        match rewrite.entries {
            Some((_, old)) if staged => old.drain(|chunk, entries| {
                change += Change::removed(indexed.remove_encoded(txn, chunk, &entries)?);
                Ok(())
            })?,
            _ => {
                for &(_, old_chunk, ..) in &rewrite.index {
                    let bytes = chunks.get((record.id, old_chunk))?.ok_or_else(|| {
                        Error::internal(format!(
                            "chunk {old_chunk} of table id {} is missing",
                            record.id
                        ))
                    })?;
                    change += Change::removed(indexed.remove(
                        txn,
                        old_chunk,
                        &decode_chunk(bytes.value(), None)?,
                    )?);
                }
            }
        }
    }
    let mut order = txn.open_table(CHUNK_ORDER)?;
    let mut index = rewrite.index.into_iter();
    changes.drain(|position, bytes| {
        let (at, old_chunk, old_rows, new_rows) =
            index
                .next()
                .filter(|(at, ..)| *at == position)
                .ok_or_else(|| Error::internal("a staged rewrite lost its order"))?;
        if let Some(old) = chunks.remove((record.id, old_chunk))? {
            change += Change::removed(old.value().len() as u64);
        }
        record.row_count = record.row_count - old_rows + new_rows;
        if record.tail.is_some_and(|t| t.position == at) {
            record.tail = None;
        }
        if new_rows == 0 {
            order.remove((record.id, at))?;
            return Ok(());
        }
        let (rows, entries) = match encoded_with_entries {
            true => split_staged(&bytes)?,
            false => (bytes.as_slice(), &[][..]),
        };
        chunks.insert((record.id, record.next_chunk), rows)?;
        order.insert((record.id, at), record.next_chunk)?;
        change += Change::added(rows.len() as u64);
        match &indexed {
            Some(indexed) if staged => {
                change +=
                    Change::added(indexed.write(txn, record.next_chunk, entries, Lookups::All)?)
            }
            Some(indexed) => {
                change += Change::added(indexed.add(
                    txn,
                    record.next_chunk,
                    &decode_chunk(rows, None)?,
                )?)
            }
            None => {}
        }
        record.next_chunk += 1;
        Ok(())
    })?;
    drop((chunks, order));
    storage::charge(txn, tenant, change)?;
    save(txn, tenant, &record)?;
    verify_keys(txn, &record)?;
    Ok(Some(Retired::nothing()))
}

/// Publishes a rewrite whose new chunks `landed`: each takes its old chunk's position, and the
/// old chunks are retired, to be swept after the commit. The work is a few keys per changed
/// chunk. `None` when the table's indexes are no longer those the chunks landed with.
pub(super) fn publish_rewrite(
    txn: &WriteTransaction,
    tenant: TenantId,
    mut record: TableRecord,
    rewrite: Rewrite,
    landed: LandedRewrite,
) -> Result<Option<Retired>> {
    if entry_ids(&record) != landed.ids {
        return Ok(None);
    }
    let (Some(indexed), Some((_, entries))) = (rewrite.indexed, rewrite.entries) else {
        return Err(Error::internal("a landed rewrite has no index entries"));
    };
    if landed.chunks.len() != rewrite.index.len() {
        return Err(Error::internal("a landed rewrite lost some of its chunks"));
    }
    // What landed must still be in the file: steps that joined an explicit transaction begun
    // meanwhile are gone if it rolled back.
    if let Some(id) = landed.id {
        let rows = txn.open_table(LANDED_CHUNKS)?;
        for chunk in landed.chunks.iter().flatten() {
            if rows.get((id, *chunk))?.is_none() {
                return Ok(None);
            }
        }
    }
    // Counted as one change, as a rewrite applied at once is: one that shrinks the table
    // passes even over the limit.
    let mut freed = rewrite.old_entry_bytes;
    let chunks = txn.open_table(CHUNKS)?;
    for &(_, old, ..) in &rewrite.index {
        freed += chunks
            .get((record.id, old))?
            .map_or(0, |b| b.value().len() as u64);
    }
    drop(chunks);
    if landed.bytes > freed {
        storage::check_net(txn, tenant, landed.bytes, freed)?;
    }
    let retired = landing::begin(
        txn,
        &Landed::Retired {
            tenant: tenant.0,
            table: record.id,
            indexes: landed.ids.clone(),
        },
    )?;
    let mut order = txn.open_table(CHUNK_ORDER)?;
    for (&(at, old, old_rows, new_rows), new) in rewrite.index.iter().zip(&landed.chunks) {
        indexes::retire(txn, &landed.ids, old)?;
        landing::add_chunk(txn, retired, old, old_rows)?;
        record.row_count = record.row_count - old_rows + new_rows;
        if record.tail.is_some_and(|t| t.position == at) {
            record.tail = None;
        }
        match (new, landed.id) {
            (Some(chunk), Some(id)) => {
                order.insert((record.id, at), *chunk)?;
                landing::remove_chunk(txn, id, *chunk)?;
            }
            (Some(_), None) => {
                return Err(Error::internal("a landed chunk has no landing"));
            }
            (None, _) => {
                order.remove((record.id, at))?;
            }
        }
    }
    drop(order);
    if let Some(id) = landed.id {
        landing::end(txn, id)?;
    }
    save(txn, tenant, &record)?;
    verify_keys(txn, &record)?;
    Ok(Some(Retired {
        work: Some(RetiredWork {
            landing: retired,
            tenant,
            table: record.id,
            name: record.name.clone(),
            ids: landed.ids,
            indexed,
            entries,
        }),
    }))
}
