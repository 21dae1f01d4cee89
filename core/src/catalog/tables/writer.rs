//! Writing rows into a table inside one transaction ([`TableWriter`]): chunks appended at the
//! tail, staged rows taken over, keys verified.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use redb::{ReadableTable, WriteTransaction};

use crate::catalog::constraints::{column_index, KeySet};
use crate::catalog::indexes::{Indexed, Lookups};
use crate::catalog::landing::{self};
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::store::schema::{CHUNKS, CHUNK_ORDER, TABLE_SCHEMAS};
use crate::tenant::TenantId;

use super::codec::*;
use super::record::*;
use super::staged::*;
use super::types::*;

/// A last chunk smaller than this is merged with the next insert, so a stream of one-row
/// INSERTs does not leave one chunk per row.
pub(super) const SMALL_TAIL_ROWS: u64 = 8_192;

/// Appends rows to a table inside a write transaction: buffers batches into chunks of
/// [`CHUNK_ROWS`] rows and updates the record when finished. Memory stays bounded by one chunk.
pub(crate) struct TableWriter<'t> {
    txn: &'t WriteTransaction,
    tenant: TenantId,
    /// Set when the rows replace content still counted (see [`TableWriter::replace`]).
    pub(super) replacing: Option<storage::Replacement>,
    pub(super) record: TableRecord,
    schema: SchemaRef,
    pub(super) pending: ChunkBuffer,
    /// The table's indexes that hold entries, kept in step with the chunks written.
    indexed: Option<Indexed>,
    /// The entries the file holds for the table as the write began: what staged unique keys
    /// must not collide with. `None` when it holds none (no rows, or all replaced).
    present: Option<EntriesState>,
}

impl<'t> TableWriter<'t> {
    /// Starts appending to `record`'s table. A small last chunk is taken back into the buffer so
    /// it gets merged with the new rows.
    pub(crate) fn append(
        txn: &'t WriteTransaction,
        tenant: TenantId,
        mut record: TableRecord,
    ) -> Result<Self> {
        let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
        let indexed = Indexed::of(&record.constraints.indexes, &schema, &record.name)?;
        let present = match &indexed {
            Some(indexed) => {
                let order = chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)?;
                (!order.is_empty()).then(|| EntriesState {
                    table: record.id,
                    ids: indexed.ids(),
                    order,
                })
            }
            None => None,
        };
        let mut writer = TableWriter {
            txn,
            tenant,
            replacing: None,
            record: record.clone(),
            pending: ChunkBuffer::new(Arc::clone(&schema)),
            indexed,
            present,
            schema,
        };
        if let Some(tail) = record.tail.take() {
            if tail.rows < SMALL_TAIL_ROWS {
                txn.open_table(CHUNK_ORDER)?
                    .remove((record.id, tail.position))?;
                let mut chunks = txn.open_table(CHUNKS)?;
                if let Some(bytes) = chunks.remove((record.id, tail.chunk))? {
                    let batch = decode_chunk(bytes.value(), None)?;
                    let mut freed = bytes.value().len() as u64;
                    if let Some(indexed) = &writer.indexed {
                        freed += indexed.remove(txn, tail.chunk, &batch)?;
                    }
                    storage::charge(txn, tenant, Change::removed(freed))?;
                    // The rows are counted again when the merged chunk is written.
                    writer.record.row_count -= batch.num_rows() as u64;
                    writer.pending.add(batch);
                }
                writer.record.tail = None;
            }
        }
        Ok(writer)
    }

    /// Starts rewriting `record`'s table from scratch: the rows pushed afterwards become its
    /// whole content. Its chunks are removed now, in the same transaction, when that is a
    /// step's work; a larger table is renewed ([`renew`]) and its old content swept after the
    /// commit. Inside an explicit transaction alike: a ROLLBACK undoes the renewal.
    /// `replaced` is what the table's content counts as stored, as read (see
    /// [`content_bytes`]; 0 for a tenant without a storage limit): a renewed table's stays
    /// counted until swept, and the new rows are checked against the limit as if it were gone.
    pub(crate) fn replace(
        txn: &'t WriteTransaction,
        tenant: TenantId,
        mut record: TableRecord,
        replaced: u64,
    ) -> Result<Self> {
        // Another statement's landing has chunks and entries in the file under the table's
        // ids that its chunk order does not show yet; removing every chunk of the table would
        // take them too. Renewed, the table is no longer the one the landing publishes into:
        // it stops and runs again, and what it landed goes with the old content.
        if outgrows_a_step(&record) || landing::lands_into(txn, record.id)? {
            let record = renew(txn, tenant, record)?;
            let mut writer = Self::append(txn, tenant, record)?;
            writer.replacing = Some(storage::Replacement::new(replaced));
            return Ok(writer);
        }
        let freed = remove_chunks(txn, &record)?;
        storage::charge(txn, tenant, Change::removed(freed))?;
        record.row_count = 0;
        record.tail = None;
        Self::append(txn, tenant, record)
    }

    /// Buffers a batch, writing full chunks as they fill up.
    pub(crate) fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = self.conform(batch)?;
        self.pending.add(batch);
        while let Some(chunk) = self.pending.full_chunk()? {
            self.write_chunk(&chunk)?;
        }
        Ok(())
    }

    /// Writes what is buffered and the updated record. The transaction is still the caller's to commit.
    pub(crate) fn finish(mut self) -> Result<TableRecord> {
        if let Some(all) = self.pending.rest()? {
            let tail = Tail {
                position: self.record.next_position,
                chunk: self.record.next_chunk,
                rows: all.num_rows() as u64,
            };
            self.write_chunk(&all)?;
            self.record.tail = Some(tail);
        }
        save(self.txn, self.tenant, &self.record)?;
        verify_keys(self.txn, &self.record)?;
        Ok(self.record)
    }

    pub(super) fn write_chunk(&mut self, batch: &RecordBatch) -> Result<()> {
        let bytes = encode_batches(&self.schema, &[compact(batch)?])?;
        let (id, chunk, position) = (
            self.record.id,
            self.record.next_chunk,
            self.record.next_position,
        );
        self.txn
            .open_table(CHUNKS)?
            .insert((id, chunk), bytes.as_slice())?;
        self.txn
            .open_table(CHUNK_ORDER)?
            .insert((id, position), chunk)?;
        let mut added = bytes.len() as u64;
        if let Some(indexed) = &self.indexed {
            added += indexed.add(self.txn, chunk, batch)?;
        }
        charge_written(self.txn, self.tenant, self.replacing.as_ref(), added)?;
        self.record.next_chunk += 1;
        self.record.next_position += 1;
        self.record.row_count += batch.num_rows() as u64;
        Ok(())
    }

    /// Gives the batch the table's schema, refusing NULLs in NOT NULL columns.
    fn conform(&self, batch: RecordBatch) -> Result<RecordBatch> {
        conform(&self.schema, &self.record.name, batch)
    }

    /// Appends rows staged before the transaction began (see [`StagedRows`]): their full
    /// chunks go in as they were encoded, with the index entries encoded beside them, the
    /// rest is buffered like pushed rows. A small last chunk of the table taken back for
    /// merging is written first, so row order holds.
    ///
    /// Staged unique keys were checked against the snapshot the rows came from; they are
    /// looked up again only when the table's entries are no longer that snapshot's (another
    /// write changed the table meanwhile), or when the staging saw their hash twice. Entries
    /// staged for other indexes than the table has now (an index made meanwhile) are
    /// encoded here from the chunks.
    pub(crate) fn push_staged(&mut self, staged: StagedRows) -> Result<()> {
        let StagedRows {
            chunks,
            mut pending,
            keys,
            ..
        } = staged;
        if !chunks.is_empty() {
            if let Some(all) = self.pending.rest()? {
                self.write_chunk(&all)?;
            }
            let (id, txn, tenant) = (self.record.id, self.txn, self.tenant);
            let mut chunks_table = txn.open_table(CHUNKS)?;
            let mut order = txn.open_table(CHUNK_ORDER)?;
            let indexed = &self.indexed;
            let usable = match (indexed, &keys) {
                (Some(indexed), Some(keys)) => keys.signature == indexed.signature(),
                _ => false,
            };
            // Another statement's landing puts unique keys into the file that no snapshot's
            // chunk order shows: while one is in progress, every key is looked up.
            let landing = indexed.is_some() && landing::touches(txn, id)?;
            let lookups = match &keys {
                Some(keys)
                    if !landing && (self.present.is_none() || self.present == keys.checked) =>
                {
                    Lookups::Suspects(&keys.seen)
                }
                _ => Lookups::All,
            };
            chunks.drain(|chunk_rows, bytes| {
                let (chunk, entries) = match &keys {
                    Some(_) => split_staged(&bytes)?,
                    None => (bytes.as_slice(), &[][..]),
                };
                chunks_table.insert((id, self.record.next_chunk), chunk)?;
                let mut added = chunk.len() as u64;
                match indexed {
                    Some(indexed) if usable => {
                        added += indexed.write(txn, self.record.next_chunk, entries, lookups)?
                    }
                    Some(indexed) => {
                        added +=
                            indexed.add(txn, self.record.next_chunk, &decode_chunk(chunk, None)?)?
                    }
                    None => {}
                }
                charge_written(txn, tenant, self.replacing.as_ref(), added)?;
                order.insert((id, self.record.next_position), self.record.next_chunk)?;
                self.record.next_chunk += 1;
                self.record.next_position += 1;
                self.record.row_count += chunk_rows;
                Ok(())
            })?;
        }
        if let Some(rest) = pending.rest()? {
            self.push(rest)?;
        }
        Ok(())
    }
}

/// Appends `staged` to `record`'s table inside `txn`: rows whose unique keys nobody resolves
/// ([`OnConflict::Fail`](crate::catalog::constraints::OnConflict::Fail), or a table without unique keys), checked when the writer finishes.
/// Rows that may conflict are resolved before the writer lock ([`resolve_conflicts`](super::conflicts::resolve_conflicts)).
pub(crate) fn append_staged(
    txn: &WriteTransaction,
    tenant: TenantId,
    record: TableRecord,
    staged: StagedRows,
) -> Result<u64> {
    let rows = staged.rows();
    let mut writer = TableWriter::append(txn, tenant, record)?;
    writer.push_staged(staged)?;
    writer.finish()?;
    Ok(rows)
}

/// Fails when two rows of the table share the values of one of its unique keys. Run inside
/// the transaction that changed the rows, before it commits: the statement then stores
/// nothing. It reads the key columns of the whole table: primary keys and UNIQUE constraints
/// have no index entries.
pub(super) fn verify_keys(txn: &WriteTransaction, record: &TableRecord) -> Result<()> {
    // A unique index with entries was checked as they went in.
    let mut keys = record.constraints.unique_keys();
    keys.retain(|key| !key.checked_by_entries);
    if keys.is_empty() {
        return Ok(());
    }
    // Only the keys' columns are decoded.
    let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
    let mut columns = Vec::new();
    for key in &keys {
        for column in key.columns {
            let index = column_index(&schema, column, &record.name)?;
            if !columns.contains(&index) {
                columns.push(index);
            }
        }
    }
    let keyed = Arc::new(schema.project(&columns)?);
    let mut sets = keys
        .iter()
        .map(|key| KeySet::new(key, &keyed, &record.name))
        .collect::<Result<Vec<_>>>()?;
    let chunks = txn.open_table(CHUNKS)?;
    for (_, chunk) in chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)? {
        let bytes = chunks.get((record.id, chunk))?.ok_or_else(|| {
            Error::internal(format!(
                "chunk {chunk} of table id {} is missing",
                record.id
            ))
        })?;
        let batch = decode_chunk(bytes.value(), Some(columns.clone()))?;
        for set in &mut sets {
            set.add(&batch, &record.name)?;
        }
    }
    Ok(())
}
