//! The table record: what a stored table is (its name, schema, row count, chunks' order and
//! tail), creating, listing, renewing and dropping it, and counting the bytes it stores to its
//! tenant.

use std::collections::HashSet;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::catalog::constraints::{column_index, Constraints, Index, PRIMARY_KEY, UNIQUE};
use crate::catalog::indexes::{self};
use crate::catalog::landing::{self, Landed};
use crate::catalog::namespace::{sheets_db, validate_name, FILES_DB};
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::store::schema::{CHUNKS, CHUNK_ORDER, TABLES, TABLE_SCHEMAS};
use crate::store::{self, Reads};
use crate::tenant::TenantId;

use super::codec::*;

/// A stored table's catalog record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRecord {
    /// Never reused; keys the schema and the chunks. A write that replaces every row of a
    /// large table (TRUNCATE, INSERT OVERWRITE) gives it a new one.
    pub id: u64,
    /// The table name as created.
    pub name: String,
    /// The project it lives in (lower case).
    pub project: String,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// Rows in the table.
    pub row_count: u64,
    /// The id the next chunk gets.
    pub next_chunk: u64,
    /// The position the next appended chunk takes.
    pub next_position: u64,
    /// The last chunk, while nothing has rewritten it: small ones are merged into by the next insert.
    pub tail: Option<Tail>,
    /// Its keys, checks, defaults and indexes (absent in records written before they existed).
    #[serde(default, skip_serializing_if = "Constraints::is_empty")]
    pub constraints: Constraints,
}

/// The last chunk of a table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// Its position in `chunk_order`.
    pub position: u64,
    /// Its chunk id.
    pub chunk: u64,
    /// Its row count.
    pub rows: u64,
}

/// Creates this module's redb tables in a new file, so read snapshots always find them.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    landing::init(txn)?;
    txn.open_table(TABLES)?;
    txn.open_table(TABLE_SCHEMAS)?;
    txn.open_table(CHUNKS)?;
    txn.open_table(CHUNK_ORDER)?;
    indexes::init(txn)
}

/// Reads a table record.
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<TableRecord>> {
    store::get_in_project(table, tenant, project, name)
}

/// All table records of a project, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<TableRecord>> {
    store::list_in_project(table, tenant, project)
}

/// A table record, read in `txn`.
pub(crate) fn record(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<TableRecord>> {
    get(&txn.reading(TABLES)?, tenant, project, name)
}

/// All table records of a project, by name, read in `txn`.
pub(crate) fn records(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<TableRecord>> {
    list(&txn.reading(TABLES)?, tenant, project)
}

/// Reads a table's Arrow schema.
pub(crate) fn schema(table: &impl ReadableTable<u64, &'static [u8]>, id: u64) -> Result<SchemaRef> {
    let bytes = table
        .get(id)?
        .ok_or_else(|| Error::internal(format!("schema of table id {id} is missing")))?;
    decode_schema(bytes.value())
}

/// Creates an empty table with `constraints`. Fails if it exists (the caller handles IF NOT
/// EXISTS / OR REPLACE) or when a constraint names a column it does not have.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    schema: &Schema,
    constraints: Constraints,
) -> Result<TableRecord> {
    create_with(txn, tenant, project, name, schema, constraints, None)
}

/// [`create`], under the table id and key indexes' entry ids of `landed` when rows landed
/// for it (see [`RowLanding::creating`](super::row_landing::RowLanding::creating)), whose schema is then in the file already.
pub(super) fn create_with(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    schema: &Schema,
    constraints: Constraints,
    landed: Option<(u64, &[u64])>,
) -> Result<TableRecord> {
    validate_name("table", name)?;
    let project = project.to_ascii_lowercase();
    let key = name.to_ascii_lowercase();
    let mut seen = HashSet::new();
    for field in schema.fields() {
        if !seen.insert(field.name().to_ascii_lowercase()) {
            return Err(Error::invalid(format!(
                "Duplicate column name '{}' in table '{name}'",
                field.name()
            )));
        }
    }
    if get(&txn.open_table(TABLES)?, tenant, &project, &key)?.is_some() {
        return Err(Error::conflict(format!(
            "Table '{name}' already exists in database: {project}"
        )));
    }
    let record = TableRecord {
        id: match landed {
            Some((table, _)) => table,
            None => store::next_id(txn, "table")?,
        },
        name: name.to_string(),
        project: project.clone(),
        created_at: crate::time::now_text(),
        row_count: 0,
        next_chunk: 0,
        next_position: 0,
        tail: None,
        constraints,
    };
    for key in record.constraints.unique_keys() {
        for column in key.columns {
            column_index(schema, column, name)?;
        }
    }
    let record = with_key_indexes(txn, tenant, record, landed.map(|(_, ids)| ids))?;
    txn.open_table(TABLES)?.insert(
        (tenant.0, project.as_str(), key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    if landed.is_some() {
        return Ok(record);
    }
    let encoded = encode_batches(schema, &[])?;
    txn.open_table(TABLE_SCHEMAS)?
        .insert(record.id, encoded.as_slice())?;
    storage::charge(txn, tenant, Change::added(encoded.len() as u64))?;
    Ok(record)
}

/// `record` with an index for its primary key and each UNIQUE set (named as PostgreSQL names
/// them, `t_pkey` and `t_a_b_key`, with a number added when the project has the name), so
/// keys are checked through index entries and lookups on them use the index. Their entries
/// get the ids `landed`, in order, when rows landed under them; new ones otherwise.
pub(super) fn with_key_indexes(
    txn: &WriteTransaction,
    tenant: TenantId,
    mut record: TableRecord,
    landed: Option<&[u64]>,
) -> Result<TableRecord> {
    let keys = key_indexes(&record.name, &record.constraints);
    if landed.is_some_and(|ids| ids.len() != keys.len()) {
        return Err(Error::internal(
            "landed rows have entries for other indexes",
        ));
    }
    for (at, index) in keys.into_iter().enumerate() {
        let name = index.name.clone();
        let mut chosen = name.clone();
        let mut n = 1;
        while find_index(&txn.open_table(TABLES)?, tenant, &record.project, &chosen)?.is_some()
            || record
                .constraints
                .indexes
                .iter()
                .any(|i| i.name.eq_ignore_ascii_case(&chosen))
        {
            chosen = format!("{name}{n}");
            n += 1;
        }
        let entries = match landed {
            Some(ids) => ids[at],
            None => store::next_id(txn, "index")?,
        };
        record.constraints.indexes.push(Index {
            name: chosen,
            entries: Some(entries),
            ..index
        });
    }
    Ok(record)
}

/// The indexes a new table named `table` gets for the keys `constraints` declares, in the
/// order [`create`] adds them, under their first-choice names and with a placeholder for
/// their entries' id: what rows for a table being made are staged with.
pub(crate) fn key_indexes(table: &str, constraints: &Constraints) -> Vec<Index> {
    let table = table.to_ascii_lowercase();
    let mut keys = Vec::new();
    if !constraints.primary_key.is_empty() {
        keys.push(Index {
            name: format!("{table}_pkey"),
            columns: constraints.primary_key.clone(),
            unique: true,
            entries: Some(0),
            backs: Some(PRIMARY_KEY.to_string()),
        });
    }
    for columns in &constraints.unique {
        keys.push(Index {
            name: format!("{table}_{}_key", columns.join("_").to_ascii_lowercase()),
            columns: columns.clone(),
            unique: true,
            entries: Some(0),
            backs: Some(UNIQUE.to_string()),
        });
    }
    keys
}

/// Drops a table and all its chunks. Returns false when it did not exist.
pub(crate) fn drop_table(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<bool> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let mut tables = txn.open_table(TABLES)?;
    let record: TableRecord = match tables.remove((tenant.0, project.as_str(), key.as_str()))? {
        Some(value) => serde_json::from_str(value.value())?,
        None => return Ok(false),
    };
    let schema = unlink_content(txn, tenant, &record)?;
    storage::charge(txn, tenant, Change::removed(schema.len() as u64))?;
    drop(tables);
    // An uploaded workbook's sheets go with it, however it is dropped.
    if project == FILES_DB {
        let sheets = sheets_db(&key);
        for sheet in records(txn, tenant, &sheets)? {
            drop_table(txn, tenant, &sheets, &sheet.name)?;
        }
    }
    Ok(true)
}

/// Unlinks `record`'s table from its content: removes its schema (returned, encoded) and
/// chunk order, and hands its chunks and index entries to the sweeper (see `landing`). One
/// small entry per chunk: the chunks themselves and their entries, as many as the rows, are
/// removed in steps after the commit, so the transaction is as short as any write.
pub(super) fn unlink_content(
    txn: &WriteTransaction,
    tenant: TenantId,
    record: &TableRecord,
) -> Result<Vec<u8>> {
    let id = record.id;
    let schema = txn
        .open_table(TABLE_SCHEMAS)?
        .remove(id)?
        .map(|bytes| bytes.value().to_vec())
        .unwrap_or_default();
    txn.open_table(CHUNK_ORDER)?
        .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
    let dropped = Landed::Dropped {
        tenant: tenant.0,
        table: Some(id),
        indexes: entry_ids(record),
    };
    landing::begin(txn, &dropped)?;
    Ok(schema)
}

/// Whether removing `record`'s rows and their index entries is more than a landing step's
/// work (see `indexes::STEP_ENTRIES`): then a write that replaces all of them renews the
/// table ([`renew`]) rather than remove them under the writer lock.
pub(crate) fn outgrows_a_step(record: &TableRecord) -> bool {
    let entries = record
        .row_count
        .saturating_mul(entry_ids(record).len() as u64);
    // Without entries, removing a chunk is one redb removal, whatever its rows; chunks are
    // closed by bytes too, so wide rows make more chunks than the rows alone say.
    entries > indexes::STEP_ENTRIES as u64 || record.row_count > RENEWED_ROWS
}

/// Rows of a table without indexes (16 chunks of narrow rows) beyond which a write that
/// replaces all of them renews the table rather than remove its chunks in its transaction.
pub(super) const RENEWED_ROWS: u64 = 16 * CHUNK_ROWS as u64;

/// The bytes `record`'s table's rows take in the snapshot `snapshot`: its published chunks
/// and their index entries (not those of other statements' landings, nor of retired chunks,
/// which their own statements free), and not its schema, which a renewal keeps. What a write
/// that replaces all its rows frees once the sweeper is done (see `storage::Replacement`).
/// As much reading as the table holds, done before the writer lock.
pub(crate) fn content_bytes(snapshot: &redb::ReadTransaction, record: &TableRecord) -> Result<u64> {
    let mut bytes = 0;
    let chunks = snapshot.open_table(CHUNKS)?;
    let order = chunk_order(&snapshot.open_table(CHUNK_ORDER)?, record.id)?;
    for (_, chunk) in &order {
        bytes += chunks
            .get((record.id, *chunk))?
            .map_or(0, |stored| stored.value().len() as u64);
    }
    let published: HashSet<u64> = order.into_iter().map(|(_, chunk)| chunk).collect();
    let entries = snapshot.open_table(store::schema::INDEX_ENTRIES)?;
    for id in entry_ids(record) {
        bytes += indexes::bytes_of(&entries, id, &published)?;
    }
    Ok(bytes)
}

/// Gives `record`'s table a new id and new index entry ids, with no rows, and hands its
/// content under the old ones to the sweeper, as a DROP does ([`unlink_content`]): what
/// TRUNCATE, INSERT OVERWRITE and the writes that replace every row do to a table too large
/// to empty in one short transaction. The name, schema and constraints stay; readers of
/// snapshots taken before still see the old rows under the old id. Returns the new record,
/// saved.
pub(super) fn renew(
    txn: &WriteTransaction,
    tenant: TenantId,
    record: TableRecord,
) -> Result<TableRecord> {
    let (table, ids) = new_ids(txn, &record)?;
    let schema = unlink_content(txn, tenant, &record)?;
    let record = emptied(record, table, &ids);
    // The same bytes under the new id: nothing to charge.
    txn.open_table(TABLE_SCHEMAS)?
        .insert(record.id, schema.as_slice())?;
    save(txn, tenant, &record)?;
    Ok(record)
}

/// A new table id, and a new entry id for each index of `record` that has entries (in order).
pub(super) fn new_ids(txn: &WriteTransaction, record: &TableRecord) -> Result<(u64, Vec<u64>)> {
    let table = store::next_id(txn, "table")?;
    let ids = entry_ids(record)
        .iter()
        .map(|_| store::next_id(txn, "index"))
        .collect::<Result<Vec<u64>>>()?;
    Ok((table, ids))
}

/// `record` with no rows under the table id `table`, its indexes' entry ids `ids` (one per
/// index that has entries, in order).
pub(super) fn emptied(record: TableRecord, table: u64, ids: &[u64]) -> TableRecord {
    let mut record = TableRecord {
        id: table,
        row_count: 0,
        next_chunk: 0,
        next_position: 0,
        tail: None,
        ..record
    };
    let mut ids = ids.iter();
    for index in &mut record.constraints.indexes {
        if index.entries.is_some() {
            index.entries = ids.next().copied();
        }
    }
    record
}

/// Drops every table of a project (when the project itself is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let names: Vec<String> = {
        let tables = txn.open_table(TABLES)?;
        list(&tables, tenant, project)?
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    for name in names {
        drop_table(txn, tenant, project, &name)?;
    }
    Ok(())
}

/// Removes every chunk of `record`'s table, and its indexes' entries. Returns the bytes they
/// took (for the caller to count).
pub(super) fn remove_chunks(txn: &WriteTransaction, record: &TableRecord) -> Result<u64> {
    let id = record.id;
    let mut bytes = 0;
    for index in &record.constraints.indexes {
        if let Some(entries) = index.entries {
            bytes += indexes::drop_entries(txn, entries)?;
        }
    }
    txn.open_table(CHUNKS)?
        .retain_in((id, 0)..=(id, u64::MAX), |_, chunk| {
            bytes += chunk.len() as u64;
            false
        })?;
    txn.open_table(CHUNK_ORDER)?
        .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
    Ok(bytes)
}

/// Which tenant each table belongs to, by table id (a file's first count, see `storage`).
pub(crate) fn owners(txn: &WriteTransaction) -> Result<std::collections::BTreeMap<u64, TenantId>> {
    let mut owners = std::collections::BTreeMap::new();
    for entry in txn.open_table(TABLES)?.iter()? {
        let (key, value) = entry?;
        let record: TableRecord = serde_json::from_str(value.value())?;
        owners.insert(record.id, TenantId(key.value().0));
    }
    Ok(owners)
}

/// The bytes each tenant's tables hold: schemas, chunks and index entries (a file's first
/// count, see `storage`).
pub(crate) fn stored_bytes(
    txn: &WriteTransaction,
) -> Result<std::collections::BTreeMap<TenantId, u64>> {
    let entries = indexes::stored_bytes(txn)?;
    let (schemas, chunks) = (txn.open_table(TABLE_SCHEMAS)?, txn.open_table(CHUNKS)?);
    let mut bytes = std::collections::BTreeMap::new();
    for entry in txn.open_table(TABLES)?.iter()? {
        let (key, value) = entry?;
        let record: TableRecord = serde_json::from_str(value.value())?;
        let mut sum = schemas
            .get(record.id)?
            .map_or(0, |schema| schema.value().len() as u64);
        for chunk in chunks.range((record.id, 0)..=(record.id, u64::MAX))? {
            sum += chunk?.1.value().len() as u64;
        }
        for index in record.constraints.indexes.iter().filter_map(|i| i.entries) {
            sum += entries.get(&index).copied().unwrap_or(0);
        }
        *bytes.entry(TenantId(key.value().0)).or_insert(0) += sum;
    }
    Ok(bytes)
}

/// A table's (position, chunk id) pairs, in row order.
pub(crate) fn chunk_order(
    order: &impl ReadableTable<(u64, u64), u64>,
    id: u64,
) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for entry in order.range((id, 0)..=(id, u64::MAX))? {
        let (key, chunk) = entry?;
        out.push((key.value().1, chunk.value()));
    }
    Ok(out)
}

/// Writes a table record back.
pub(super) fn save(txn: &WriteTransaction, tenant: TenantId, record: &TableRecord) -> Result<()> {
    let key = record.name.to_ascii_lowercase();
    txn.open_table(TABLES)?.insert(
        (tenant.0, record.project.as_str(), key.as_str()),
        serde_json::to_string(record)?.as_str(),
    )?;
    Ok(())
}

/// Counts `added` bytes a write wrote to `tenant`'s stored bytes: against the content it
/// replaces when `replacing` (see `storage::Replacement`).
pub(super) fn charge_written(
    txn: &WriteTransaction,
    tenant: TenantId,
    replacing: Option<&storage::Replacement>,
    added: u64,
) -> Result<()> {
    match replacing {
        Some(replacing) => replacing.charge(txn, tenant, added),
        None => storage::charge(txn, tenant, Change::added(added)),
    }
}

/// Runs one step of a landing: its argument in a write transaction of its own, committed
/// (the service layer takes the writer lock for it and releases it after).
pub(crate) type Step<'a> =
    &'a mut dyn FnMut(&mut dyn FnMut(&WriteTransaction) -> Result<()>) -> Result<()>;

/// The entry ids of a record's indexes, in its order.
pub(super) fn entry_ids(record: &TableRecord) -> Vec<u64> {
    record
        .constraints
        .indexes
        .iter()
        .filter_map(|index| index.entries)
        .collect()
}

/// The table of the project that has the index `name`.
pub(super) fn find_index(
    tables: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<TableRecord>> {
    Ok(list(tables, tenant, project)?.into_iter().find(|record| {
        record
            .constraints
            .indexes
            .iter()
            .any(|index| index.name.eq_ignore_ascii_case(name))
    }))
}
