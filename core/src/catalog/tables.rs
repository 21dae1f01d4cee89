//! Stored tables. Owns four redb tables: `tables` (records keyed by tenant, project and
//! lower-cased name), `table_schemas` (Arrow IPC schema by table id), `chunks` (LZ4 Arrow IPC
//! record batches of up to [`CHUNK_ROWS`] rows keyed by (table id, chunk id)) and `chunk_order`
//! ((table id, position) → chunk id, the table's row order). Chunk ids are never reused: a
//! rewritten chunk gets a new id at the same position, in the same transaction, so a chunk id
//! always names the same bytes. Every change of the bytes these tables and the index entries
//! hold is counted to the table's tenant through `storage`, in the transaction that makes it.

use std::collections::HashSet;
use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::{cast_with_options, concat_batches, CastOptions};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::record_batch::RecordBatch;
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::catalog::constraints::{
    column_index, Constraints, Index, KeySet, OnConflict, PRIMARY_KEY, UNIQUE,
};
use crate::catalog::indexes::{self, Indexed, Lookups, Signature, UniqueSeen};
use crate::catalog::landing::{self, Landed};
use crate::catalog::namespace::validate_name;
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store;
use crate::store::schema::{CHUNKS, CHUNK_ORDER, LANDED_CHUNKS, TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

/// Rows per stored chunk: big enough that per-chunk overhead vanishes, small enough that a scan
/// holds little memory.
pub(crate) const CHUNK_ROWS: usize = 65_536;

/// A last chunk smaller than this is merged with the next insert, so a stream of one-row
/// INSERTs does not leave one chunk per row.
const SMALL_TAIL_ROWS: u64 = 8_192;

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

/// Reads a table's Arrow schema.
pub(crate) fn schema(table: &impl ReadableTable<u64, &'static [u8]>, id: u64) -> Result<SchemaRef> {
    let bytes = table
        .get(id)?
        .ok_or_else(|| Error::internal(format!("schema of table id {id} is missing")))?;
    decode_schema(bytes.value())
}

/// A schema as stored: an Arrow IPC stream without batches.
pub(crate) fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    encode_batches(schema, &[])
}

/// A schema back from [`encode_schema`]'s bytes.
pub(crate) fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    Ok(StreamReader::try_new(Cursor::new(bytes), None)?.schema())
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
/// for it (see [`RowLanding::creating`]), whose schema is then in the file already.
fn create_with(
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
fn with_key_indexes(
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
    Ok(true)
}

/// Unlinks `record`'s table from its content: removes its schema (returned, encoded) and
/// chunk order, and hands its chunks and index entries to the sweeper (see `landing`). One
/// small entry per chunk: the chunks themselves and their entries, as many as the rows, are
/// removed in steps after the commit, so the transaction is as short as any write.
fn unlink_content(
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
const RENEWED_ROWS: u64 = 16 * CHUNK_ROWS as u64;

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
fn renew(txn: &WriteTransaction, tenant: TenantId, record: TableRecord) -> Result<TableRecord> {
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
fn new_ids(txn: &WriteTransaction, record: &TableRecord) -> Result<(u64, Vec<u64>)> {
    let table = store::next_id(txn, "table")?;
    let ids = entry_ids(record)
        .iter()
        .map(|_| store::next_id(txn, "index"))
        .collect::<Result<Vec<u64>>>()?;
    Ok((table, ids))
}

/// `record` with no rows under the table id `table`, its indexes' entry ids `ids` (one per
/// index that has entries, in order).
fn emptied(record: TableRecord, table: u64, ids: &[u64]) -> TableRecord {
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
fn remove_chunks(txn: &WriteTransaction, record: &TableRecord) -> Result<u64> {
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
fn save(txn: &WriteTransaction, tenant: TenantId, record: &TableRecord) -> Result<()> {
    let key = record.name.to_ascii_lowercase();
    txn.open_table(TABLES)?.insert(
        (tenant.0, record.project.as_str(), key.as_str()),
        serde_json::to_string(record)?.as_str(),
    )?;
    Ok(())
}

/// Decodes one stored chunk, reading only the `projection` columns when given.
pub(crate) fn decode_chunk(bytes: &[u8], projection: Option<Vec<usize>>) -> Result<RecordBatch> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), projection)?;
    let schema = reader.schema();
    match reader.next() {
        Some(batch) => Ok(batch?),
        None => Ok(RecordBatch::new_empty(schema)),
    }
}

/// A chunk is closed at this many bytes of rows even before it has [`CHUNK_ROWS`] rows, so
/// wide rows (long texts) do not make chunks that take gigabytes to buffer and decode.
const CHUNK_BYTES: usize = 16 * 1024 * 1024;

/// Rows waiting to make a chunk: batches of one schema, with their row and byte counts.
struct ChunkBuffer {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
}

impl ChunkBuffer {
    fn new(schema: SchemaRef) -> ChunkBuffer {
        ChunkBuffer {
            schema,
            batches: Vec::new(),
            rows: 0,
            bytes: 0,
        }
    }

    fn add(&mut self, batch: RecordBatch) {
        self.rows += batch.num_rows();
        self.bytes += rows_bytes(&batch);
        self.batches.push(batch);
    }

    /// The buffered rows as one batch: the one batch itself when there is only one (a big
    /// loaded batch is cut into chunks by slicing it, not copied again for every chunk).
    fn all(&self) -> Result<RecordBatch> {
        Ok(match self.batches.as_slice() {
            [one] => one.clone(),
            many => concat_batches(&self.schema, many)?,
        })
    }

    /// The next full chunk (`CHUNK_ROWS` rows, or fewer once they reach `CHUNK_BYTES`), taken
    /// out of the buffer; `None` while the rows make no full chunk yet.
    fn full_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows < CHUNK_ROWS && self.bytes < CHUNK_BYTES {
            return Ok(None);
        }
        let all = self.all()?;
        let take = if self.rows >= CHUNK_ROWS {
            CHUNK_ROWS
        } else {
            // By bytes: as many rows as fit, at least one.
            let per_row = (self.bytes / all.num_rows().max(1)).max(1);
            (CHUNK_BYTES / per_row).clamp(1, all.num_rows())
        };
        let chunk = all.slice(0, take);
        self.batches.clear();
        (self.rows, self.bytes) = (0, 0);
        let rest = all.num_rows() - take;
        if rest > 0 {
            // String views copied, so the remainder does not keep the whole concatenated
            // chunk alive (and, through it, into the next chunk's buffers); other columns are
            // cut from their buffers when the chunk is encoded.
            self.add(compact(&all.slice(take, rest))?);
        }
        Ok(Some(chunk))
    }

    /// Every buffered row as one batch, taken out of the buffer; `None` when it is empty.
    fn rest(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows == 0 {
            return Ok(None);
        }
        let all = self.all()?;
        self.batches.clear();
        (self.rows, self.bytes) = (0, 0);
        Ok(Some(all))
    }
}

/// The bytes `batch`'s rows take, counting of each buffer only the part they use.
/// `get_array_memory_size` counts whole buffers, so a slice of a big batch (a loaded Arrow
/// table, or the rows left after a chunk was cut) would count as all of it and close chunks
/// after a few thousand rows.
fn rows_bytes(batch: &RecordBatch) -> usize {
    // A view is 16 bytes; strings longer than 12 bytes live in a data buffer besides.
    let views = |views: &[u128]| -> usize {
        views
            .iter()
            .map(|view| {
                let len = *view as u32 as usize;
                16 + if len > 12 { len } else { 0 }
            })
            .sum()
    };
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View => views(column.as_string_view().views()),
            DataType::BinaryView => views(column.as_binary_view().views()),
            _ => column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size()),
        })
        .sum()
}

/// Chunks are LZ4-compressed Arrow IPC: decompression is cheaper than reading the extra bytes
/// through redb, and compressed chunks stay clear of redb's power-of-two rounding of large values.
fn encode_batches(schema: &Schema, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let options =
        IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
    let mut writer = StreamWriter::try_new_with_options(&mut out, schema, options)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Copies the live bytes of string and binary view columns into fresh buffers. A view array
/// (DataFusion's default for VARCHAR) keeps whole data buffers alive through slices and concats;
/// written as is, a chunk would carry the bytes of every batch it was cut from.
fn compact(batch: &RecordBatch) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View => Arc::new(column.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(column.as_binary_view().gc()) as ArrayRef,
            _ => Arc::clone(column),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Counts `added` bytes a write wrote to `tenant`'s stored bytes: against the content it
/// replaces when `replacing` (see `storage::Replacement`).
fn charge_written(
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

/// Appends rows to a table inside a write transaction: buffers batches into chunks of
/// [`CHUNK_ROWS`] rows and updates the record when finished. Memory stays bounded by one chunk.
pub(crate) struct TableWriter<'t> {
    txn: &'t WriteTransaction,
    tenant: TenantId,
    /// Set when the rows replace content still counted (see [`TableWriter::replace`]).
    replacing: Option<storage::Replacement>,
    record: TableRecord,
    schema: SchemaRef,
    pending: ChunkBuffer,
    /// The table's indexes that hold entries, kept in step with the chunks written.
    indexed: Option<Indexed>,
    /// The entries the file holds for the table as the write began: what staged unique keys
    /// must not collide with. `None` when it holds none (no rows, or all replaced).
    present: Option<EntriesState>,
}

/// Which index entries a table holds: the table's id, its indexes' entry ids and its chunk
/// order. Two equal states hold the same entries, since entries change only with chunks.
#[derive(Debug, Clone, PartialEq)]
struct EntriesState {
    table: u64,
    ids: Vec<u64>,
    order: Vec<(u64, u64)>,
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

    fn write_chunk(&mut self, batch: &RecordBatch) -> Result<()> {
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

/// A staged chunk's encoded rows and its encoded index entries, from the one record they
/// are spooled as (`rows' length (u64) | rows | entries`).
fn split_staged(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let damaged = || Error::internal("a staged write's chunk is damaged");
    let (head, rest) = bytes.split_at_checked(8).ok_or_else(damaged)?;
    let length = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    rest.split_at_checked(usize::try_from(length).map_err(|_| damaged())?)
        .ok_or_else(damaged)
}

/// Gives `batch` the table's `schema` (casting strictly: a value that does not fit is an
/// error), refusing NULLs in NOT NULL columns; `table` names the table in messages.
fn conform(schema: &SchemaRef, table: &str, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(Error::invalid(format!(
            "Table '{}' has {} columns but {} values were given",
            table,
            schema.fields().len(),
            batch.num_columns()
        )));
    }
    // bounded: the columns of a batch in memory
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let column = if column.data_type() == field.data_type() {
            Arc::clone(column)
        } else {
            // Unsafe casts fail on values that do not fit instead of turning them into NULLs.
            let options = CastOptions {
                safe: false,
                ..Default::default()
            };
            cast_with_options(column, field.data_type(), &options).map_err(|e| {
                Error::new(
                    crate::ErrorKind::InvalidData,
                    format!(
                        "Column '{}' of table '{}' takes {}: {e}",
                        field.name(),
                        table,
                        sql_type_name(field.data_type())
                    ),
                )
            })?
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(Error::new(
                crate::ErrorKind::ConstraintViolation,
                format!(
                    "NULL value in column '{}' of table '{}' violates its NOT NULL constraint",
                    field.name(),
                    table
                ),
            ));
        }
        columns.push(column);
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// Rows for a table, conformed to its schema and encoded into full chunks before the write
/// that stores them takes the writer lock; [`TableWriter::push_staged`] appends them. Memory
/// stays bounded: encoded chunks go to a [`Spool`] (memory, then a temporary file). For a
/// table with indexes, each full chunk's index entries are encoded and sorted here too, and
/// unique keys checked, so that the writer lock is held only to write them.
pub(crate) struct StagedRows {
    table: String,
    schema: SchemaRef,
    chunks: Spool,
    /// Rows not yet making a full chunk.
    pending: ChunkBuffer,
    rows: u64,
    /// Full chunks staged so far.
    full: u64,
    /// The index entries staged with the chunks, when the table has indexes.
    keys: Option<StagedKeys>,
}

/// What staging index entries keeps: the indexes, the snapshot's entries unique keys are
/// checked against, and the keys seen so far.
struct StagedKeys {
    indexed: Indexed,
    signature: Signature,
    /// The index entries of the snapshot, when the rows join the rows stored there.
    snapshot: Option<indexes::SnapshotEntries>,
    /// Which entries unique keys were checked against: the snapshot's; `None` when against
    /// none (rows that replace all others, or fill a new table).
    checked: Option<EntriesState>,
    seen: UniqueSeen,
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

/// Runs one step of a landing: its argument in a write transaction of its own, committed
/// (the service layer takes the writer lock for it and releases it after).
pub(crate) type Step<'a> =
    &'a mut dyn FnMut(&mut dyn FnMut(&WriteTransaction) -> Result<()>) -> Result<()>;

/// Rows appended to a table with indexes that land ahead of their statement's commit (see
/// `landing`): each full staged chunk goes into the file with its index entries in a step of
/// its own, then [`RowLanding::publish`] adds them to the table's chunk order in one
/// transaction, with the rows that make no full chunk.
pub(crate) struct RowLanding {
    tenant: TenantId,
    project: String,
    name: String,
    table: u64,
    /// The entry ids of the table's indexes as the rows were staged.
    ids: Vec<u64>,
    /// Its record in the file, once a step has committed one.
    id: Option<u64>,
    rows: u64,
    /// The staged rows that make no full chunk, written when publishing.
    pending: Option<ChunkBuffer>,
    /// The bytes landed so far (chunks and entries).
    landed_bytes: u64,
    /// Set when the rows are to become the table's whole content (see
    /// [`RowLanding::renewing`]).
    renewing: Option<Renewing>,
    /// Set when they replace content still counted (see `storage::Replacement`).
    replacing: Option<storage::Replacement>,
}

/// Where [`RowLanding::land_fresh`] lands: the tenant, project and (provisional) record of
/// the table, how it renews it, and the content the rows replace.
type Fresh<'a> = (
    TenantId,
    &'a str,
    &'a TableRecord,
    Renewing,
    Option<storage::Replacement>,
);

/// What a landing of rows that renew a table (see [`RowLanding::renewing`]) keeps beside
/// the new ids it lands under.
struct Renewing {
    /// The table's id as read, and its indexes' entry ids: the table the rows replace the
    /// rows of, as long as it has them; `None` for a table the statement creates.
    read: Option<(u64, Vec<u64>)>,
    /// The table's chunk order as read, when the rows were computed from its rows (a DELETE
    /// or UPDATE with a subquery) or are charged against its content's bytes (see
    /// `storage::Replacement`): a step finding it changed stops the landing.
    base: Option<Vec<(u64, u64)>>,
    /// The id of the next chunk landed (the renewed table's chunk ids start at 0).
    next_chunk: u64,
}

/// What landing a rewrite's chunk needs beside the chunk: the table's chunk order as the
/// rewrite read it (a step finding it changed stops the landing) and the chunks it replaces
/// (whose keys it may take again).
struct Rewriting<'a> {
    base: &'a [(u64, u64)],
    replaced: &'a [u64],
}

impl StagedRows {
    /// Whether these rows should land in steps: they go into a table with indexes and fill
    /// more than one chunk, whose entries would hold the writer lock for long.
    pub(crate) fn lands(&self) -> bool {
        self.keys.is_some() && self.full > 1
    }
}

fn changed_while_written(name: &str, project: &str) -> Error {
    Error::conflict(format!(
        "Table '{name}' in database {project} was dropped, replaced or given other indexes while the rows were written; nothing was written"
    ))
}

/// The entry ids of a record's indexes, in its order.
fn entry_ids(record: &TableRecord) -> Vec<u64> {
    record
        .constraints
        .indexes
        .iter()
        .filter_map(|index| index.entries)
        .collect()
}

impl RowLanding {
    /// A landing, not yet recorded, into `record`'s table of `project` (as read) of `rows`
    /// rows, with `pending` rows to write when publishing.
    fn new(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        rows: u64,
        pending: Option<ChunkBuffer>,
    ) -> RowLanding {
        RowLanding {
            tenant,
            project: project.to_ascii_lowercase(),
            name: record.name.clone(),
            table: record.id,
            ids: entry_ids(record),
            id: None,
            rows,
            pending,
            landed_bytes: 0,
            renewing: None,
            replacing: None,
        }
    }

    /// Lands `staged`, rows that become the whole content of `record`'s table (of
    /// `project`, as read), through `step`: under a table id and index entry ids of their
    /// own, taken with the schema by a first step (a [`Landed::Renewal`]), so that nothing
    /// reads them and their unique keys meet only each other. [`RowLanding::publish_renewal`]
    /// then renews the table with them. On an error, what landed is the caller's to discard
    /// ([`RowLanding::id`]).
    pub(crate) fn renewing(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        (replaced, base): (u64, Option<Vec<(u64, u64)>>),
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let renewing = Renewing {
            read: Some((record.id, entry_ids(record))),
            base,
            next_chunk: 0,
        };
        let replacing = Some(storage::Replacement::new(replaced));
        let fresh = (tenant, project, record, renewing, replacing);
        RowLanding::land_fresh(fresh, staged, step, keep_going)
    }

    /// Lands `staged`, the rows of the table `name` of `project` that the statement creates
    /// with `constraints` (and their key indexes), as [`RowLanding::renewing`] does;
    /// [`RowLanding::publish_created`] then creates the table with them.
    pub(crate) fn creating(
        tenant: TenantId,
        project: &str,
        name: &str,
        constraints: &Constraints,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        // What the record will be, but for its id, index names and entry ids.
        let record = TableRecord {
            id: 0,
            name: name.to_string(),
            project: project.to_ascii_lowercase(),
            created_at: String::new(),
            row_count: 0,
            next_chunk: 0,
            next_position: 0,
            tail: None,
            constraints: Constraints {
                indexes: key_indexes(name, constraints),
                ..constraints.clone()
            },
        };
        let renewing = Renewing {
            read: None,
            base: None,
            next_chunk: 0,
        };
        let fresh = (tenant, project, &record, renewing, None);
        RowLanding::land_fresh(fresh, staged, step, keep_going)
    }

    /// Lands `staged` (rows of `record`'s table of `project`, for `tenant`) under a new table
    /// id and entry ids, taken with the schema by a first step, as `renewing` says; the rows
    /// are charged against `replacing` when set.
    fn land_fresh(
        (tenant, project, record, renewing, replacing): Fresh<'_>,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let StagedRows {
            chunks,
            pending,
            rows,
            keys,
            schema,
            ..
        } = staged;
        let schema = &schema;
        let mut landing = RowLanding::new(tenant, project, record, rows, Some(pending));
        (landing.renewing, landing.replacing) = (Some(renewing), replacing);
        if keys.is_none() {
            return (
                landing,
                Err(Error::internal("rows to land have no index entries")),
            );
        }
        let mut begun = None;
        let first = step(&mut |txn| {
            landing.check_target(txn)?;
            let (table, ids) = new_ids(txn, record)?;
            let encoded = encode_batches(schema, &[])?;
            txn.open_table(TABLE_SCHEMAS)?
                .insert(table, encoded.as_slice())?;
            let replacing = landing.replacing.as_ref();
            charge_written(txn, tenant, replacing, encoded.len() as u64)?;
            let what = Landed::Renewal {
                tenant: tenant.0,
                table,
                indexes: ids.clone(),
            };
            begun = Some((table, ids, landing::begin(txn, &what)?));
            Ok(())
        });
        let landed = first.and_then(|()| {
            let (table, ids, id) = begun.ok_or_else(|| Error::internal("no landing begun"))?;
            (landing.table, landing.ids, landing.id) = (table, ids, Some(id));
            let indexed = emptied(record.clone(), table, &landing.ids);
            let indexed = Indexed::of(&indexed.constraints.indexes, schema, &record.name)?
                .ok_or_else(|| Error::internal("rows to land have no index entries"))?;
            chunks.drain(|chunk_rows, staged| {
                let (bytes, entries) = split_staged(&staged)?;
                let chunk = (chunk_rows, bytes, entries);
                landing.land_one(&indexed, chunk, None, &mut *step, keep_going)?;
                Ok(())
            })
        });
        (landing, landed)
    }

    /// Lands `staged`, rows appended to `record`'s table (of `project`, as read), through
    /// `step`. On an error, what landed is the caller's to discard ([`RowLanding::id`]).
    pub(crate) fn land(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let StagedRows {
            chunks,
            pending,
            rows,
            keys,
            ..
        } = staged;
        let mut landing = RowLanding::new(tenant, project, record, rows, Some(pending));
        let Some(keys) = keys else {
            return (
                landing,
                Err(Error::internal("rows to land have no index entries")),
            );
        };
        let landed = chunks.drain(|chunk_rows, staged| {
            let (bytes, entries) = split_staged(&staged)?;
            let chunk = (chunk_rows, bytes, entries);
            landing.land_one(&keys.indexed, chunk, None, &mut *step, keep_going)?;
            Ok(())
        });
        (landing, landed)
    }

    /// Lands one staged chunk (its rows, its encoded rows and its encoded entries): the chunk
    /// with its first entries, then the rest of its entries, a share per step. The entries of
    /// the chunks `replaced` (those a rewrite replaces) take no key. Returns the chunk's id, or
    /// `None` when a rewrite's key is taken while another statement lands rows in the table:
    /// the key may be that statement's, unpublished, so the rewrite is overtaken, not refused.
    fn land_one(
        &mut self,
        indexed: &Indexed,
        (rows, bytes, entries): (u64, &[u8], &[u8]),
        rewriting: Option<&Rewriting<'_>>,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<Option<u64>> {
        let replaced = rewriting.map_or(&[][..], |r| r.replaced);
        let (mut chunk, mut from) = (None, 0);
        loop {
            keep_going()?;
            let (mut done, mut overtaken) = ((None, 0, 0, None), false);
            let stepped = step(&mut |txn| {
                // A rewrite whose table changed since it was read (or whose indexes did) will
                // not apply: it stops landing and runs again.
                if let Some(rewriting) = rewriting {
                    let current = self.current(txn).ok();
                    let order = txn.open_table(CHUNK_ORDER)?;
                    if current.is_none() || chunk_order(&order, self.table)? != rewriting.base {
                        overtaken = true;
                        return Err(Error::conflict("the rewrite was overtaken"));
                    }
                }
                let (begun, id, mut added) = match chunk {
                    Some(id) => (None, id, 0),
                    None => {
                        let (begun, id) = self.land_chunk(txn, rows, bytes, rewriting.is_none())?;
                        (begun, id, bytes.len() as u64)
                    }
                };
                let part = indexes::Part::step(from);
                let written = self.land_entries(txn, indexed, id, entries, replaced, part);
                let (entries_added, next) = match written {
                    Err(e)
                        if rewriting.is_some()
                            && e.kind() == crate::ErrorKind::ConstraintViolation
                            && landing::touches_other(
                                txn,
                                self.table,
                                begun.or(self.id),
                                false,
                            )? =>
                    {
                        overtaken = true;
                        return Err(e);
                    }
                    written => written?,
                };
                match rewriting {
                    Some(_) => storage::charge_ahead(txn, self.tenant, entries_added)?,
                    None => {
                        charge_written(txn, self.tenant, self.replacing.as_ref(), entries_added)?
                    }
                }
                added += entries_added;
                done = (begun, id, added, next);
                Ok(())
            });
            if overtaken {
                return Ok(None);
            }
            stepped?;
            let (begun, id, added, next) = done;
            if begun.is_some() {
                self.id = begun;
            }
            if let Some(renewing) = &mut self.renewing {
                renewing.next_chunk = renewing.next_chunk.max(id + 1);
            }
            self.landed_bytes += added;
            chunk = Some(id);
            #[cfg(test)]
            indexes::observe::landed(&self.name);
            match next {
                Some(next) => from = next,
                None => return Ok(Some(id)),
            }
        }
    }

    /// The landing's record, once one was committed: what to discard when the statement fails.
    pub(crate) fn id(&self) -> Option<u64> {
        self.id
    }

    /// The table as `txn` has it, if it is still the one (and has the indexes) the rows were
    /// staged for.
    fn current(&self, txn: &WriteTransaction) -> Result<TableRecord> {
        let record = get(
            &txn.open_table(TABLES)?,
            self.tenant,
            &self.project,
            &self.name,
        )?;
        let (table, ids) = match &self.renewing {
            Some(Renewing {
                read: Some((table, ids)),
                ..
            }) => (*table, ids),
            Some(Renewing { read: None, .. }) => {
                return Err(Error::internal("a table being created has no record yet"))
            }
            None => (self.table, &self.ids),
        };
        record
            .filter(|r| r.id == table && entry_ids(r) == *ids)
            .ok_or_else(|| changed_while_written(&self.name, &self.project))
    }

    /// Fails when the table the rows go into is no longer the one they were staged for (see
    /// [`RowLanding::current`]); a table the statement creates is checked as it is created.
    fn check_target(&self, txn: &WriteTransaction) -> Result<()> {
        match &self.renewing {
            Some(Renewing { read: None, .. }) => Ok(()),
            Some(Renewing {
                read: Some((table, _)),
                base: Some(base),
                ..
            }) => {
                self.current(txn)?;
                if chunk_order(&txn.open_table(CHUNK_ORDER)?, *table)? != *base {
                    return Err(Error::conflict(format!(
                        "Table '{}' in database {} changed while the rows that replace its rows were computed from it; nothing was written",
                        self.name, self.project
                    )));
                }
                Ok(())
            }
            _ => self.current(txn).map(drop),
        }
    }

    /// Writes one staged chunk's rows, taking its chunk id (and recording the landing at the
    /// first chunk). Returns the landing's id when this step recorded it, and the chunk id.
    fn land_chunk(
        &self,
        txn: &WriteTransaction,
        rows: u64,
        bytes: &[u8],
        checked: bool,
    ) -> Result<(Option<u64>, u64)> {
        let chunk = match &self.renewing {
            // The renewed table's chunk ids are the landing's own.
            Some(renewing) => {
                self.check_target(txn)?;
                renewing.next_chunk
            }
            None => {
                let mut record = self.current(txn)?;
                // The chunk id is taken: nothing else writes a chunk under it.
                record.next_chunk += 1;
                save(txn, self.tenant, &record)?;
                record.next_chunk - 1
            }
        };
        let (id, begun) = match self.id {
            Some(id) => (id, None),
            None => {
                let what = Landed::Rows {
                    tenant: self.tenant.0,
                    table: self.table,
                    indexes: self.ids.clone(),
                    rewrite: !checked,
                };
                let id = landing::begin(txn, &what)?;
                (id, Some(id))
            }
        };
        txn.open_table(CHUNKS)?.insert((self.table, chunk), bytes)?;
        match checked {
            true => charge_written(
                txn,
                self.tenant,
                self.replacing.as_ref(),
                bytes.len() as u64,
            )?,
            false => storage::charge_ahead(txn, self.tenant, bytes.len() as u64)?,
        }
        landing::add_chunk(txn, id, chunk, rows)?;
        Ok((begun, chunk))
    }

    /// Writes the entries numbered `part` of a landed chunk (every unique key looked up: the
    /// file may hold keys no snapshot saw; those of the chunks `replaced` do not count).
    /// Returns their bytes and how many the chunk has.
    fn land_entries(
        &self,
        txn: &WriteTransaction,
        indexed: &Indexed,
        chunk: u64,
        entries: &[u8],
        replaced: &[u64],
        part: indexes::Part,
    ) -> Result<(u64, Option<usize>)> {
        self.check_target(txn)?;
        indexed.write_part(txn, chunk, entries, Lookups::All, replaced, part)
    }

    /// Publishes the landed chunks in `txn`: appends them to the table's chunk order (after a
    /// small last chunk merged with nothing, as an append keeps row order), then the rows
    /// that make no full chunk. Returns the rows inserted.
    pub(crate) fn publish(&mut self, txn: &WriteTransaction) -> Result<u64> {
        let record = self.current(txn)?;
        let mut writer = TableWriter::append(txn, self.tenant, record)?;
        if let Some(all) = writer.pending.rest()? {
            writer.write_chunk(&all)?;
        }
        if let Some(id) = self.id {
            while let Some((chunk, rows)) = landing::first_chunk(txn, id)? {
                txn.open_table(CHUNK_ORDER)?
                    .insert((self.table, writer.record.next_position), chunk)?;
                writer.record.next_position += 1;
                writer.record.row_count += rows;
                landing::remove_chunk(txn, id, chunk)?;
            }
            landing::end(txn, id)?;
        }
        if let Some(rest) = self
            .pending
            .take()
            .map(|mut p| p.rest())
            .transpose()?
            .flatten()
        {
            writer.push(rest)?;
        }
        writer.finish()?;
        Ok(self.rows)
    }
}

impl RowLanding {
    /// Publishes the rows landed by [`RowLanding::renewing`] in `txn`: the table, still as
    /// read, gets the landing's table id and entry ids, the landed chunks in order, then the
    /// rows that make no full chunk; its old content is the sweeper's, as a DROP's. The work
    /// grows with the chunks, not the rows. Returns the rows written.
    pub(crate) fn publish_renewal(&mut self, txn: &WriteTransaction) -> Result<u64> {
        let current = self.current(txn)?;
        let next_chunk = match &self.renewing {
            Some(renewing) => renewing.next_chunk,
            None => return Err(Error::internal("rows appended are not a renewal")),
        };
        let schema = unlink_content(txn, self.tenant, &current)?;
        storage::charge(txn, self.tenant, Change::removed(schema.len() as u64))?;
        let record = emptied(current, self.table, &self.ids);
        self.adopt(txn, record, next_chunk)
    }

    /// Publishes the rows landed by [`RowLanding::creating`] in `txn`: creates the table
    /// (its name must be free, its project there) with `constraints`, the landing's table id
    /// and entry ids, the landed chunks in order, then the rows that make no full chunk.
    /// Returns the rows written.
    pub(crate) fn publish_created(
        &mut self,
        txn: &WriteTransaction,
        schema: &Schema,
        constraints: Constraints,
    ) -> Result<u64> {
        let next_chunk = match &self.renewing {
            Some(Renewing {
                read: None,
                next_chunk,
                ..
            }) => *next_chunk,
            _ => return Err(Error::internal("the rows landed are not a new table's")),
        };
        let landed = Some((self.table, self.ids.as_slice()));
        let (project, name) = (self.project.clone(), self.name.clone());
        let record = create_with(
            txn,
            self.tenant,
            &project,
            &name,
            schema,
            constraints,
            landed,
        )?;
        self.adopt(txn, record, next_chunk)
    }

    /// Makes `record` (empty, under the landing's ids) hold the landed chunks, in order, then
    /// the rows that make no full chunk; `next_chunk` is the first chunk id not landed.
    fn adopt(
        &mut self,
        txn: &WriteTransaction,
        mut record: TableRecord,
        next_chunk: u64,
    ) -> Result<u64> {
        record.next_chunk = next_chunk;
        if let Some(id) = self.id {
            let mut order = txn.open_table(CHUNK_ORDER)?;
            while let Some((chunk, rows)) = landing::first_chunk(txn, id)? {
                order.insert((self.table, record.next_position), chunk)?;
                record.next_position += 1;
                record.row_count += rows;
                landing::remove_chunk(txn, id, chunk)?;
            }
            landing::end(txn, id)?;
        }
        save(txn, self.tenant, &record)?;
        let mut writer = TableWriter::append(txn, self.tenant, record)?;
        writer.replacing = self.replacing.take();
        if let Some(rest) = self
            .pending
            .take()
            .map(|mut p| p.rest())
            .transpose()?
            .flatten()
        {
            writer.push(rest)?;
        }
        writer.finish()?;
        Ok(self.rows)
    }
}

/// The table of `tenant` whose id is `id`, if it still exists.
fn by_id(txn: &WriteTransaction, tenant: TenantId, id: u64) -> Result<Option<TableRecord>> {
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
const DROPPED_CHUNKS_A_STEP: usize = 4;

/// Appends `staged` to `record`'s table inside `txn`: rows whose unique keys nobody resolves
/// ([`OnConflict::Fail`], or a table without unique keys), checked when the writer finishes.
/// Rows that may conflict are resolved before the writer lock ([`resolve_conflicts`]).
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
fn filter_rows(batch: &RecordBatch, keep: Vec<bool>) -> Result<RecordBatch> {
    let keep = datafusion::arrow::array::BooleanArray::from(keep);
    Ok(datafusion::arrow::compute::filter_record_batch(
        batch, &keep,
    )?)
}

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
struct LandedRewrite {
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

struct RetiredWork {
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
fn publish_rewrite(
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

/// Fails when two rows of the table share the values of one of its unique keys. Run inside
/// the transaction that changed the rows, before it commits: the statement then stores
/// nothing. It reads the key columns of the whole table: primary keys and UNIQUE constraints
/// have no index entries.
fn verify_keys(txn: &WriteTransaction, record: &TableRecord) -> Result<()> {
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

/// An index being made (`CREATE INDEX`). Its entries are encoded from a read snapshot without
/// the writer lock, then land in the file under an id no record names yet, a chunk per step
/// (see `landing`); [`IndexBuild::publish`] then adds the index to the table's record in one
/// short transaction. Chunks the table gained meanwhile are encoded from a newer snapshot and
/// land too; entries of chunks it lost meanwhile are swept away.
pub(crate) struct IndexBuild {
    project: String,
    table: String,
    table_id: u64,
    index: Index,
    /// The index over the table's key columns only (the chunks are read for those).
    indexed: Indexed,
    /// Where the key columns are in the table.
    columns: Vec<usize>,
    /// Encoded entries not landed yet, numbered by chunk id, in chunk order; one spool per
    /// snapshot read.
    staged: Vec<Spool>,
    /// The chunks staged so far.
    done: HashSet<u64>,
    /// The chunks whose entries are in the file.
    landed: HashSet<u64>,
    /// The landing's record, once the first step committed it.
    landing: Option<u64>,
    seen: UniqueSeen,
}

/// What [`IndexBuild::start`] found.
pub(crate) enum IndexStart {
    /// An index of that name exists and `IF NOT EXISTS` was given: nothing to do.
    Exists,
    /// The index to build.
    Build(Box<IndexBuild>),
}

/// What [`IndexBuild::publish`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// The index is the table's.
    Done,
    /// An index of that name was made meanwhile, and `IF NOT EXISTS` was given: nothing was.
    Exists,
    /// The table changed since the last snapshot: land what changed and try again.
    Again,
}

impl IndexBuild {
    /// Checks `index` for the table `project.table` as `txn` (a snapshot) has it: its name new
    /// among the project's indexes (`if_not_exists` makes an existing one a no-op), its
    /// columns the table's.
    pub(crate) fn start(
        txn: &redb::ReadTransaction,
        tenant: TenantId,
        project: &str,
        table: &str,
        index: Index,
        if_not_exists: bool,
    ) -> Result<IndexStart> {
        validate_name("index", &index.name)?;
        let tables = txn.open_table(TABLES)?;
        if find_index(&tables, tenant, project, &index.name)?.is_some() {
            if if_not_exists {
                return Ok(IndexStart::Exists);
            }
            return Err(index_exists(&index.name, project));
        }
        let record = get(&tables, tenant, project, table)?.ok_or_else(|| {
            Error::not_found(format!("Table '{table}' not found in database: {project}"))
        })?;
        let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
        let columns = index
            .columns
            .iter()
            .map(|column| column_index(&schema, column, &record.name))
            .collect::<Result<Vec<_>>>()?;
        // The key columns alone, in index order: chunks are read for those only.
        let keyed = schema.project(&columns)?;
        let local = Index {
            columns: keyed.fields().iter().map(|f| f.name().clone()).collect(),
            entries: Some(0),
            ..index.clone()
        };
        let indexed = Indexed::of(std::slice::from_ref(&local), &keyed, &record.name)?
            .ok_or_else(|| Error::internal("an index to build holds no entries"))?;
        Ok(IndexStart::Build(Box::new(IndexBuild {
            project: project.to_ascii_lowercase(),
            table: record.name.clone(),
            table_id: record.id,
            index,
            seen: indexed.unique_seen(),
            indexed,
            columns,
            staged: Vec::new(),
            done: HashSet::new(),
            landed: HashSet::new(),
            landing: None,
        })))
    }

    /// Encodes the entries of every chunk of the table in `txn` not encoded yet, in a new
    /// spool; `keep_going` is asked before each chunk (a cancelled statement stops). Returns
    /// false when the table is gone or replaced in `txn`.
    pub(crate) fn stage(
        &mut self,
        txn: &impl ReadTables,
        tables: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
        tenant: TenantId,
        spool: Spool,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<bool> {
        if get(tables, tenant, &self.project, &self.table)?.is_none_or(|r| r.id != self.table_id) {
            return Ok(false);
        }
        let mut staged = spool;
        for (_, chunk) in txn.chunk_order_of(self.table_id)? {
            if self.done.contains(&chunk) {
                continue;
            }
            keep_going()?;
            let batch = txn.chunk_columns(self.table_id, chunk, self.columns.clone())?;
            let entries = self.indexed.encode(&batch)?;
            self.indexed.check_staged(&entries, None, &mut self.seen)?;
            staged.push(chunk, entries)?;
            self.done.insert(chunk);
            #[cfg(test)]
            indexes::observe::staged(&self.table);
        }
        self.staged.push(staged);
        Ok(true)
    }

    /// The landing's record, once one was committed: what to discard when the build fails.
    pub(crate) fn landing(&self) -> Option<u64> {
        self.landing
    }

    /// The table as `txn` has it, if it is still the one the index is built for.
    fn current(&self, txn: &WriteTransaction, tenant: TenantId) -> Result<TableRecord> {
        get(&txn.open_table(TABLES)?, tenant, &self.project, &self.table)?
            .filter(|r| r.id == self.table_id)
            .ok_or_else(|| {
                Error::conflict(format!(
                    "Table '{}' in database {} was dropped or replaced while its index was built; nothing was written",
                    self.table, self.project
                ))
            })
    }

    /// Lands the staged entries, a chunk per `step`; the first step takes the index's id. The
    /// entries of a chunk the table no longer has are left out.
    pub(crate) fn land(
        &mut self,
        tenant: TenantId,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        if self.landing.is_none() {
            let mut ids = None;
            step(&mut |txn| {
                self.current(txn, tenant)?;
                let entries = store::next_id(txn, "index")?;
                let what = Landed::Entries {
                    tenant: tenant.0,
                    table: self.table_id,
                    index: entries,
                };
                ids = Some((landing::begin(txn, &what)?, entries));
                Ok(())
            })?;
            let (id, entries) = ids.ok_or_else(|| Error::internal("an index landing has no id"))?;
            self.landing = Some(id);
            self.indexed.set_id(entries);
        }
        for spool in std::mem::take(&mut self.staged) {
            spool.drain(|chunk, entries| {
                // A share of the chunk's entries per step; none when the chunk went meanwhile.
                let mut from = 0;
                loop {
                    keep_going()?;
                    let (mut written, mut left) = (false, None);
                    step(&mut |txn| {
                        let record = self.current(txn, tenant)?;
                        let live = chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)?
                            .iter()
                            .any(|(_, c)| *c == chunk);
                        if live {
                            let lookups = Lookups::Suspects(&self.seen);
                            let part = indexes::Part::step(from);
                            let (added, next) = self.indexed.write_part(
                                txn,
                                chunk,
                                &entries,
                                lookups,
                                &[],
                                part,
                            )?;
                            storage::charge(txn, tenant, Change::added(added))?;
                            left = next;
                        }
                        written = live;
                        Ok(())
                    })?;
                    if written {
                        self.landed.insert(chunk);
                    }
                    match left {
                        Some(next) if written => from = next,
                        _ => break,
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Removes, through `step`s, the landed entries of chunks the table in `txn` (a snapshot)
    /// no longer has (rewritten or deleted meanwhile).
    pub(crate) fn sweep_gone(
        &mut self,
        txn: &impl ReadTables,
        tenant: TenantId,
        step: Step<'_>,
    ) -> Result<()> {
        let live: HashSet<u64> = txn
            .chunk_order_of(self.table_id)?
            .into_iter()
            .map(|(_, chunk)| chunk)
            .collect();
        let gone: HashSet<u64> = self.landed.difference(&live).copied().collect();
        if gone.is_empty() {
            return Ok(());
        }
        let id = self.indexed.ids()[0];
        let mut cursor = None;
        loop {
            let mut next = None;
            step(&mut |txn| {
                let (freed, at) = indexes::sweep(txn, id, cursor.as_ref(), &|c| gone.contains(&c))?;
                storage::charge(txn, tenant, Change::removed(freed))?;
                next = at;
                Ok(())
            })?;
            match next {
                Some(at) => cursor = Some(at),
                None => break,
            }
        }
        self.landed.retain(|chunk| !gone.contains(chunk));
        Ok(())
    }

    /// Adds the index to the table's record inside `txn`: fails if its name was taken
    /// meanwhile (nothing with `if_not_exists`) or the table went. When the table changed
    /// since the entries landed, [`Publish::Again`], unless `last`: then the chunks written
    /// since are encoded here and the entries of chunks gone swept here (a unique index fails
    /// on a duplicate, exactly).
    pub(crate) fn publish(
        &mut self,
        txn: &WriteTransaction,
        tenant: TenantId,
        if_not_exists: bool,
        last: bool,
    ) -> Result<Publish> {
        if find_index(
            &txn.open_table(TABLES)?,
            tenant,
            &self.project,
            &self.index.name,
        )?
        .is_some()
        {
            if if_not_exists {
                return Ok(Publish::Exists);
            }
            return Err(index_exists(&self.index.name, &self.project));
        }
        let mut record = self.current(txn, tenant)?;
        let landing = self
            .landing
            .ok_or_else(|| Error::internal("an index is published before it landed"))?;
        let order = chunk_order(&txn.open_table(CHUNK_ORDER)?, self.table_id)?;
        let live: HashSet<u64> = order.iter().map(|(_, chunk)| *chunk).collect();
        let missing: Vec<u64> = order
            .iter()
            .map(|(_, chunk)| *chunk)
            .filter(|chunk| !self.landed.contains(chunk))
            .collect();
        let gone: HashSet<u64> = self.landed.difference(&live).copied().collect();
        if !last && (!missing.is_empty() || !gone.is_empty()) {
            return Ok(Publish::Again);
        }
        let id = self.indexed.ids()[0];
        let (mut freed, mut added) = (0, 0);
        let mut cursor = None;
        while !gone.is_empty() {
            let (bytes, at) = indexes::sweep(txn, id, cursor.as_ref(), &|c| gone.contains(&c))?;
            freed += bytes;
            match at {
                Some(at) => cursor = Some(at),
                None => break,
            }
        }
        for chunk in missing {
            let batch = txn.chunk_columns(self.table_id, chunk, self.columns.clone())?;
            added += self.indexed.add(txn, chunk, &batch)?;
        }
        storage::charge(txn, tenant, Change::removed(freed))?;
        storage::charge(txn, tenant, Change::added(added))?;
        record.constraints.indexes.push(Index {
            entries: Some(id),
            ..self.index.clone()
        });
        save(txn, tenant, &record)?;
        landing::end(txn, landing)?;
        Ok(Publish::Done)
    }
}

fn index_exists(name: &str, project: &str) -> Error {
    Error::conflict(format!(
        "Index '{name}' already exists in database: {project}"
    ))
}

/// Removes the index `name` of the project; `if_exists` makes a missing one a no-op.
pub(crate) fn drop_index(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let Some(mut record) = find_index(&txn.open_table(TABLES)?, tenant, project, name)? else {
        if if_exists {
            return Ok(());
        }
        return Err(Error::not_found(format!(
            "Index '{name}' not found in database: {project}"
        )));
    };
    let backs = record
        .constraints
        .indexes
        .iter()
        .find(|index| index.name.eq_ignore_ascii_case(name))
        .and_then(|index| index.backs.clone());
    if let Some(kind) = backs {
        return Err(Error::invalid(format!(
            "Index '{name}' cannot be dropped: the {kind} constraint of table '{}' needs it",
            record.name
        )));
    }
    let (dropped, kept) = std::mem::take(&mut record.constraints.indexes)
        .into_iter()
        .partition(|index| index.name.eq_ignore_ascii_case(name));
    record.constraints.indexes = kept;
    let entries: Vec<u64> = dropped
        .into_iter()
        .filter_map(|index: Index| index.entries)
        .collect();
    if !entries.is_empty() {
        // The entries are the sweeper's (see `landing`): as many as the rows.
        let dropped = Landed::Dropped {
            tenant: tenant.0,
            table: None,
            indexes: entries,
        };
        landing::begin(txn, &dropped)?;
    }
    save(txn, tenant, &record)
}

/// The table of the project that has the index `name`.
fn find_index(
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

/// Reading a table's schema and chunks, from a read snapshot or a write transaction alike.
pub(crate) trait ReadTables {
    fn schema_of(&self, id: u64) -> Result<SchemaRef>;
    fn chunk_order_of(&self, id: u64) -> Result<Vec<(u64, u64)>>;
    fn chunk(&self, id: u64, chunk: u64) -> Result<RecordBatch>;
    /// Only the `projection` columns of a chunk (decoding nothing else).
    fn chunk_columns(&self, id: u64, chunk: u64, projection: Vec<usize>) -> Result<RecordBatch>;
}

macro_rules! read_tables {
    ($txn:ty) => {
        impl ReadTables for $txn {
            fn schema_of(&self, id: u64) -> Result<SchemaRef> {
                schema(&self.open_table(TABLE_SCHEMAS)?, id)
            }

            fn chunk_order_of(&self, id: u64) -> Result<Vec<(u64, u64)>> {
                chunk_order(&self.open_table(CHUNK_ORDER)?, id)
            }

            fn chunk(&self, id: u64, chunk: u64) -> Result<RecordBatch> {
                let chunks = self.open_table(CHUNKS)?;
                let bytes = chunks.get((id, chunk))?.ok_or_else(|| {
                    Error::internal(format!("chunk {chunk} of table id {id} is missing"))
                })?;
                decode_chunk(bytes.value(), None)
            }

            fn chunk_columns(
                &self,
                id: u64,
                chunk: u64,
                projection: Vec<usize>,
            ) -> Result<RecordBatch> {
                let chunks = self.open_table(CHUNKS)?;
                let bytes = chunks.get((id, chunk))?.ok_or_else(|| {
                    Error::internal(format!("chunk {chunk} of table id {id} is missing"))
                })?;
                decode_chunk(bytes.value(), Some(projection))
            }
        }
    };
}

read_tables!(WriteTransaction);
read_tables!(redb::ReadTransaction);

/// The SQL name of an Arrow type, as `information_schema.columns.DATA_TYPE` shows it.
pub fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INTEGER UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray, StringViewArray};
    use datafusion::arrow::datatypes::Field;

    /// The row counts of the chunks a buffer cuts from `batches`, the rest last.
    fn chunk_rows(schema: SchemaRef, batches: Vec<RecordBatch>) -> Vec<usize> {
        let mut buffer = ChunkBuffer::new(schema);
        let mut rows = Vec::new();
        for batch in batches {
            buffer.add(batch);
            while let Some(chunk) = buffer.full_chunk().unwrap() {
                rows.push(chunk.num_rows());
            }
        }
        rows.extend(buffer.rest().unwrap().map(|rest| rest.num_rows()));
        rows
    }

    fn big(rows: usize, view: bool) -> RecordBatch {
        let text = |n: usize| format!("category_{:02}", n % 100);
        let strings: ArrayRef = if view {
            Arc::new(
                (0..rows)
                    .map(|n| Some(text(n)))
                    .collect::<StringViewArray>(),
            )
        } else {
            Arc::new((0..rows).map(|n| Some(text(n))).collect::<StringArray>())
        };
        let kind = strings.data_type().clone();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("category", kind, false),
        ]));
        let ids = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        RecordBatch::try_new(schema, vec![ids, strings]).unwrap()
    }

    #[test]
    fn a_big_batch_and_its_slices_make_full_chunks() {
        let rows = 300_000;
        for view in [false, true] {
            let batch = big(rows, view);
            let schema = batch.schema();
            // Whole: chunks of CHUNK_ROWS, the rest last.
            let whole = chunk_rows(Arc::clone(&schema), vec![batch.clone()]);
            assert_eq!(
                whole,
                [65_536, 65_536, 65_536, 65_536, 37_856],
                "view {view}"
            );
            // Slices of it, as a loaded table cut into batches: the same chunks, although each
            // slice's buffers are the whole batch's.
            let slices = (0..rows)
                .step_by(8_192)
                .map(|at| batch.slice(at, 8_192.min(rows - at)))
                .collect();
            assert_eq!(chunk_rows(schema, slices), whole, "view {view}");
        }
    }

    #[test]
    fn wide_rows_close_a_chunk_by_its_bytes() {
        let text = "x".repeat(1_000);
        let strings: ArrayRef = Arc::new(StringArray::from(vec![text.as_str(); 40_000]));
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![strings]).unwrap();
        let rows = chunk_rows(schema, vec![batch]);
        assert_eq!(rows.iter().sum::<usize>(), 40_000);
        // About 1,004 bytes a row: 16 MiB hold some 16,700 of them.
        assert!(rows[0] > 16_000 && rows[0] < 17_000, "{rows:?}");
    }
}
