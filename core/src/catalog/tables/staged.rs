//! Rows staged for a table before the writer lock is taken: encoded chunks spooled to disk,
//! with their key entries, ready to land ([`StagedRows`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::constraints::Index;
use crate::catalog::indexes::{self, Indexed, Signature, UniqueSeen};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store::schema::CHUNK_ORDER;

use super::codec::*;
use super::record::*;
use super::types::*;

/// Which index entries a table holds: the table's id, its indexes' entry ids and its chunk
/// order. Two equal states hold the same entries, since entries change only with chunks.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EntriesState {
    pub(super) table: u64,
    pub(super) ids: Vec<u64>,
    pub(super) order: Vec<(u64, u64)>,
}

/// A staged chunk's encoded rows and its encoded index entries, from the one record they
/// are spooled as (`rows' length (u64) | rows | entries`).
pub(super) fn split_staged(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let damaged = || Error::internal("a staged write's chunk is damaged");
    let (head, rest) = bytes.split_at_checked(8).ok_or_else(damaged)?;
    let length = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    rest.split_at_checked(usize::try_from(length).map_err(|_| damaged())?)
        .ok_or_else(damaged)
}

/// Rows for a table, conformed to its schema and encoded into full chunks before the write
/// that stores them takes the writer lock; [`TableWriter::push_staged`](super::writer::TableWriter::push_staged) appends them. Memory
/// stays bounded: encoded chunks go to a [`Spool`] (memory, then a temporary file). For a
/// table with indexes, each full chunk's index entries are encoded and sorted here too, and
/// unique keys checked, so that the writer lock is held only to write them.
pub(crate) struct StagedRows {
    table: String,
    pub(super) schema: SchemaRef,
    pub(super) chunks: Spool,
    /// Rows not yet making a full chunk.
    pub(super) pending: ChunkBuffer,
    pub(super) rows: u64,
    /// Full chunks staged so far.
    full: u64,
    /// The index entries staged with the chunks, when the table has indexes.
    pub(super) keys: Option<StagedKeys>,
}

/// What staging index entries keeps: the indexes, the snapshot's entries unique keys are
/// checked against, and the keys seen so far.
pub(super) struct StagedKeys {
    pub(super) indexed: Indexed,
    pub(super) signature: Signature,
    /// The index entries of the snapshot, when the rows join the rows stored there.
    snapshot: Option<indexes::SnapshotEntries>,
    /// Which entries unique keys were checked against: the snapshot's; `None` when against
    /// none (rows that replace all others, or fill a new table).
    pub(super) checked: Option<EntriesState>,
    pub(super) seen: UniqueSeen,
}

impl StagedRows {
    /// Staging for the table `table` of `schema`, which has no indexes.
    pub(crate) fn new(table: &str, schema: SchemaRef, chunks: Spool) -> StagedRows {
        StagedRows {
            table: table.to_string(),
            pending: ChunkBuffer::new(Arc::clone(&schema)),
            schema,
            chunks,
            rows: 0,
            full: 0,
            keys: None,
        }
    }

    /// Staging for rows appended to `record`'s table as `snapshot` has it (a read
    /// snapshot, the state the rows are computed from), with `schema` its schema: its
    /// indexes' entries are staged too, unique keys checked against the snapshot's.
    pub(crate) fn appending(
        record: &TableRecord,
        schema: SchemaRef,
        chunks: Spool,
        snapshot: &redb::ReadTransaction,
    ) -> Result<StagedRows> {
        let mut staged = StagedRows::new(&record.name, Arc::clone(&schema), chunks);
        let Some(indexed) = Indexed::of(&record.constraints.indexes, &schema, &record.name)? else {
            return Ok(staged);
        };
        let order = chunk_order(&snapshot.open_table(CHUNK_ORDER)?, record.id)?;
        let checked = (!order.is_empty()).then(|| EntriesState {
            table: record.id,
            ids: indexed.ids(),
            order,
        });
        staged.keys = Some(StagedKeys {
            signature: indexed.signature(),
            seen: indexed.unique_seen(),
            snapshot: match checked {
                Some(_) => Some(indexes::SnapshotEntries::open(snapshot)?),
                None => None,
            },
            checked,
            indexed,
        });
        Ok(staged)
    }

    /// Staging for rows that become the whole content of the table `table` with `indexes`
    /// (replacing its rows, or filling it new): its indexes' entries are staged too, unique
    /// keys checked among themselves.
    pub(crate) fn replacing(
        table: &str,
        indexes: &[Index],
        schema: SchemaRef,
        chunks: Spool,
    ) -> Result<StagedRows> {
        let mut staged = StagedRows::new(table, Arc::clone(&schema), chunks);
        if let Some(indexed) = Indexed::of(indexes, &schema, table)? {
            staged.keys = Some(StagedKeys {
                signature: indexed.signature(),
                seen: indexed.unique_seen(),
                snapshot: None,
                checked: None,
                indexed,
            });
        }
        Ok(staged)
    }

    /// Rows staged so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// Conforms and buffers a batch, encoding full chunks (and their index entries) as they
    /// fill up; returns the rows as they will be stored (for checks on them).
    pub(crate) fn push(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        if batch.num_rows() == 0 {
            return Ok(batch);
        }
        let batch = conform(&self.schema, &self.table, batch)?;
        self.rows += batch.num_rows() as u64;
        self.pending.add(batch.clone());
        while let Some(chunk) = self.pending.full_chunk()? {
            let rows = chunk.num_rows() as u64;
            self.full += 1;
            let encoded = encode_batches(&self.schema, &[compact(&chunk)?])?;
            let Some(keys) = self.keys.as_mut() else {
                self.chunks.push(rows, encoded)?;
                continue;
            };
            let entries = keys.indexed.encode(&chunk)?;
            keys.indexed
                .check_staged(&entries, keys.snapshot.as_ref(), &mut keys.seen)?;
            // bounded: one chunk's encoded rows and entries, already held
            let mut record = Vec::with_capacity(8 + encoded.len() + entries.len());
            record.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
            record.extend_from_slice(&encoded);
            record.extend_from_slice(&entries);
            self.chunks.push(rows, record)?;
            #[cfg(test)]
            indexes::observe::staged(&self.table);
        }
        Ok(batch)
    }
}

impl StagedRows {
    /// Every staged row, in order, decoded.
    pub(crate) fn into_batches(self) -> Result<Vec<RecordBatch>> {
        let StagedRows {
            chunks,
            mut pending,
            keys,
            ..
        } = self;
        let mut out = Vec::new();
        chunks.drain(|_, bytes| {
            let rows = match keys {
                Some(_) => split_staged(&bytes)?.0,
                None => bytes.as_slice(),
            };
            out.push(decode_chunk(rows, None)?);
            Ok(())
        })?;
        out.extend(pending.rest()?);
        Ok(out)
    }
}

impl StagedRows {
    /// Whether these rows should land in steps: they go into a table with indexes and fill
    /// more than one chunk, whose entries would hold the writer lock for long.
    pub(crate) fn lands(&self) -> bool {
        self.keys.is_some() && self.full > 1
    }
}
