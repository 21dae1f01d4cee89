//! Writes that land ahead of their statement's commit. A statement that adds a lot to a table
//! (an INSERT of many rows into a table with indexes, a CREATE INDEX over a big table) would
//! otherwise hold the single writer lock while it puts every index entry into the B-tree:
//! seconds during which no other tenant can write. Instead it writes its chunks and their
//! entries in steps of one chunk, each its own short transaction, and then publishes them in
//! one transaction whose work is bounded by the number of chunks, not rows (a table's chunk
//! order and record, or an index's record).
//!
//! What has landed but is not published is invisible: readers find a table's chunks through
//! its chunk order and an index through the table's record, and neither names landed data
//! before the publishing transaction. Unique keys are checked as each step writes them,
//! against every entry in the file then, including other landings' (two statements inserting
//! one key: the second to write it fails, as it would had the first committed). A rewrite
//! lands its chunks' unchanged keys again beside the chunks it replaces, so a write that
//! meets a taken key while a rewrite of its table is landing may have met such
//! a copy: it runs again as the table's sole writer, after the rewrite, instead of failing.
//! Rows that replace a whole table (INSERT OVERWRITE, CREATE TABLE … AS, a DELETE or UPDATE
//! with a subquery) land under a table id and index entry ids nothing names yet, so that
//! their keys meet only each other's; their commit gives the table those ids and hands the
//! old content to the sweeper, as a DROP does.
//!
//! This module keeps the record of each landing: what it belongs to and which chunks it wrote,
//! so that a statement that fails after some steps (its deadline, a duplicate key, a crash)
//! can be discarded, again in steps: by the statement itself, or when the file is next
//! opened (what DROPs left, by the sweeper once the engine starts). `tables` does the landing
//! and the discarding.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::store;
use crate::store::schema::{LANDED_CHUNKS, LANDINGS};
use crate::tenant::TenantId;

/// What a landing writes into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Landed {
    /// Chunks of rows appended to a table, or of a rewrite's chunks replacing others, with
    /// the entries of its indexes `indexes`.
    Rows {
        /// The table's owner, whose stored bytes the landed data counts to.
        tenant: u64,
        /// The table's id (tables are found by id when discarding).
        table: u64,
        /// The ids of the indexes whose entries were written with the chunks.
        indexes: Vec<u64>,
        /// Whether the chunks are a rewrite's: they hold again the keys of the rows they keep
        /// from the chunks they replace.
        #[serde(default)]
        rewrite: bool,
    },
    /// What a DROP left to remove: the entries of `indexes`, then (for a dropped table) the
    /// chunks of `table`. Nothing names them any more; the engine's sweeper removes them in
    /// steps after the DROP commits, counting the bytes freed as it goes.
    Dropped {
        /// The owner, whose stored bytes go down as they are removed.
        tenant: u64,
        /// The dropped table's id, whose chunks go; `None` for a dropped index.
        table: Option<u64>,
        /// The entry ids of the dropped indexes still holding entries.
        indexes: Vec<u64>,
    },
    /// The search indexes of a dropped knowledge base's chunk table `table` (the vector
    /// graph's pages and the keyword postings, as many as its chunks): their record is gone,
    /// so nothing names them, and the sweeper removes them in steps like a DROP's leftovers.
    Search {
        /// The owner, whose stored bytes go down as they are removed.
        tenant: u64,
        /// The chunk table's id, the key of its indexes' pages and postings.
        table: u64,
    },
    /// Chunks a rewrite replaced, retired (see `indexes`), with their entries in the indexes
    /// `indexes`: the rewrite removes them in steps after its commit; a stopped process
    /// leaves them to the next open of the file.
    Retired {
        /// The table's owner, whose stored bytes go down as they are removed.
        tenant: u64,
        /// The table's id.
        table: u64,
        /// The entry ids of the table's indexes when the chunks were retired.
        indexes: Vec<u64>,
    },
    /// Chunks of rows that are to become the whole content of a table, landed under a table
    /// id (`table`) and index entry ids (`indexes`) nothing names yet, with the schema under
    /// that id (see `tables::RowLanding::renewing`). Discarded, it is a dropped table's.
    Renewal {
        /// The table's owner, whose stored bytes the landed data counts to.
        tenant: u64,
        /// The id the table gets when the rows are published.
        table: u64,
        /// The entry ids its indexes get.
        indexes: Vec<u64>,
    },
    /// Entries of an index being made (not yet in the table's record) under id `index`.
    Entries {
        /// The table's owner.
        tenant: u64,
        /// The table's id.
        table: u64,
        /// The index's entry id.
        index: u64,
    },
}

impl Landed {
    /// Whose bytes the landed data is.
    pub(crate) fn tenant(&self) -> TenantId {
        match self {
            Landed::Rows { tenant, .. }
            | Landed::Dropped { tenant, .. }
            | Landed::Search { tenant, .. }
            | Landed::Retired { tenant, .. }
            | Landed::Renewal { tenant, .. }
            | Landed::Entries { tenant, .. } => TenantId(*tenant),
        }
    }
}

/// Creates this module's redb tables in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(LANDINGS)?;
    txn.open_table(LANDED_CHUNKS)?;
    Ok(())
}

/// Records a new landing of `what`; returns its id.
pub(crate) fn begin(txn: &WriteTransaction, what: &Landed) -> Result<u64> {
    let id = store::next_id(txn, "landing")?;
    txn.open_table(LANDINGS)?
        .insert(id, serde_json::to_string(what)?.as_str())?;
    Ok(id)
}

/// Records what is left of the landing `id` (a dropped object's sweep going on).
pub(crate) fn set(txn: &WriteTransaction, id: u64, what: &Landed) -> Result<()> {
    txn.open_table(LANDINGS)?
        .insert(id, serde_json::to_string(what)?.as_str())?;
    Ok(())
}

/// What the landing `id` writes into; `None` once it is published or discarded.
pub(crate) fn get(txn: &WriteTransaction, id: u64) -> Result<Option<Landed>> {
    match txn.open_table(LANDINGS)?.get(id)? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// Notes that the landing `id` wrote chunk `chunk` of `rows` rows.
pub(crate) fn add_chunk(txn: &WriteTransaction, id: u64, chunk: u64, rows: u64) -> Result<()> {
    txn.open_table(LANDED_CHUNKS)?.insert((id, chunk), rows)?;
    Ok(())
}

/// The first chunk the landing `id` still holds (lowest chunk id), with its rows.
pub(crate) fn first_chunk(txn: &WriteTransaction, id: u64) -> Result<Option<(u64, u64)>> {
    let table = txn.open_table(LANDED_CHUNKS)?;
    let first = table.range((id, 0)..=(id, u64::MAX))?.next().transpose()?;
    Ok(first.map(|(key, rows)| (key.value().1, rows.value())))
}

/// Forgets that the landing `id` holds chunk `chunk` (published or discarded).
pub(crate) fn remove_chunk(txn: &WriteTransaction, id: u64, chunk: u64) -> Result<()> {
    txn.open_table(LANDED_CHUNKS)?.remove((id, chunk))?;
    Ok(())
}

/// Forgets the landing `id` itself, once nothing of it is left to publish or discard.
pub(crate) fn end(txn: &WriteTransaction, id: u64) -> Result<()> {
    txn.open_table(LANDINGS)?.remove(id)?;
    Ok(())
}

/// The landings in the file: at open, those a stopped process left behind.
pub(crate) fn all(txn: &WriteTransaction) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in txn.open_table(LANDINGS)?.iter()? {
        ids.push(entry?.0.value());
    }
    Ok(ids)
}

/// The landings that are what DROPs left, in `txn` (a snapshot): the sweeper's work.
pub(crate) fn dropped(txn: &redb::ReadTransaction) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in txn.open_table(LANDINGS)?.iter()? {
        let (id, value) = entry?;
        if let Landed::Dropped { .. } | Landed::Search { .. } = serde_json::from_str(value.value())?
        {
            ids.push(id.value());
        }
    }
    Ok(ids)
}

/// Whether what `tenant`'s DROPs left (and its failed statements' discards handed over) is
/// still in the file for the sweeper, in the snapshot `txn`: counted as stored until
/// removed, so a storage refusal made meanwhile may not stand once it is gone.
pub(crate) fn sweeping(txn: &redb::ReadTransaction, tenant: TenantId) -> Result<bool> {
    for entry in txn.open_table(LANDINGS)?.iter()? {
        let (_, value) = entry?;
        let what: Landed = serde_json::from_str(value.value())?;
        if matches!(what, Landed::Dropped { .. } | Landed::Search { .. }) && what.tenant() == tenant
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether a landing of rows into the table `table` other than `own` (the caller's) is in
/// progress, only a rewrite's when `rewrites` is set: a write whose key is taken may then
/// have met that landing's unpublished row.
pub(crate) fn touches_other(
    txn: &WriteTransaction,
    table: u64,
    own: Option<u64>,
    rewrites: bool,
) -> Result<bool> {
    for entry in txn.open_table(LANDINGS)?.iter()? {
        let (id, value) = entry?;
        if Some(id.value()) == own {
            continue;
        }
        if let Landed::Rows {
            table: t, rewrite, ..
        } = serde_json::from_str(value.value())?
        {
            if t == table && (rewrite || !rewrites) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether a landing of rows into the table `table` is in progress, or the chunks a rewrite
/// of it retired are being swept: either has chunks or index entries of the table in the
/// file that its chunk order does not name.
pub(crate) fn lands_into(txn: &WriteTransaction, table: u64) -> Result<bool> {
    for entry in txn.open_table(LANDINGS)?.iter()? {
        let (_, value) = entry?;
        if let Landed::Rows { table: t, .. } | Landed::Retired { table: t, .. } =
            serde_json::from_str(value.value())?
        {
            if t == table {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether a landing of rows into the table `table` is in progress (or being discarded): its
/// unique keys are then in the file without being in any snapshot's chunk order, so a writer
/// of that table must look up every unique key it writes.
pub(crate) fn touches(txn: &WriteTransaction, table: u64) -> Result<bool> {
    for entry in txn.open_table(LANDINGS)?.iter()? {
        let (_, value) = entry?;
        if let Landed::Rows { table: t, .. } = serde_json::from_str(value.value())? {
            if t == table {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
