//! Stored tables. Owns four redb tables: `tables` (records keyed by tenant, project and
//! lower-cased name), `table_schemas` (Arrow IPC schema by table id), `chunks` (LZ4 Arrow IPC
//! record batches of up to [`CHUNK_ROWS`] rows keyed by (table id, chunk id)) and `chunk_order`
//! ((table id, position) → chunk id, the table's row order). Chunk ids are never reused: a
//! rewritten chunk gets a new id at the same position, in the same transaction, so a chunk id
//! always names the same bytes.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::{cast_with_options, concat_batches, CastOptions};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::record_batch::RecordBatch;
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::projects::validate_name;
use crate::store;
use crate::tenant::TenantId;

pub(crate) const TABLES: TableDefinition<(u64, &str, &str), &str> = TableDefinition::new("tables");
pub(crate) const TABLE_SCHEMAS: TableDefinition<u64, &[u8]> = TableDefinition::new("table_schemas");
pub(crate) const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
pub(crate) const CHUNK_ORDER: TableDefinition<(u64, u64), u64> =
    TableDefinition::new("chunk_order");

/// Rows per stored chunk: big enough that per-chunk overhead vanishes, small enough that a scan
/// holds little memory.
pub(crate) const CHUNK_ROWS: usize = 65_536;

/// A last chunk smaller than this is merged with the next insert, so a stream of one-row
/// INSERTs does not leave one chunk per row.
const SMALL_TAIL_ROWS: u64 = 8_192;

/// A stored table's catalog record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRecord {
    /// Stable id, never reused; keys the schema and the chunks.
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
    txn.open_table(TABLES)?;
    txn.open_table(TABLE_SCHEMAS)?;
    txn.open_table(CHUNKS)?;
    txn.open_table(CHUNK_ORDER)?;
    Ok(())
}

/// Reads a table record.
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<TableRecord>> {
    let (project, name) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    match table.get((tenant.0, project.as_str(), name.as_str()))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// All table records of a project, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<TableRecord>> {
    let project = project.to_ascii_lowercase();
    let mut out = Vec::new();
    let start = (tenant.0, project.as_str(), "");
    for entry in table.range(start..)? {
        let (key, value) = entry?;
        let (t, p, _) = key.value();
        if t != tenant.0 || p != project {
            break;
        }
        out.push(serde_json::from_str(value.value())?);
    }
    Ok(out)
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

/// Creates an empty table. Fails if it exists (the caller handles IF NOT EXISTS / OR REPLACE).
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    schema: &Schema,
) -> Result<TableRecord> {
    validate_name("table", name)?;
    let project = project.to_ascii_lowercase();
    let key = name.to_ascii_lowercase();
    let mut seen = std::collections::HashSet::new();
    for field in schema.fields() {
        if !seen.insert(field.name().to_ascii_lowercase()) {
            return Err(Error::invalid(format!(
                "Duplicate column name '{}' in table '{name}'",
                field.name()
            )));
        }
    }
    let mut tables = txn.open_table(TABLES)?;
    if tables
        .get((tenant.0, project.as_str(), key.as_str()))?
        .is_some()
    {
        return Err(Error::conflict(format!(
            "Table '{name}' already exists in database: {project}"
        )));
    }
    let record = TableRecord {
        id: store::next_id(txn, "table")?,
        name: name.to_string(),
        project: project.clone(),
        created_at: crate::time::now_text(),
        row_count: 0,
        next_chunk: 0,
        next_position: 0,
        tail: None,
    };
    tables.insert(
        (tenant.0, project.as_str(), key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    let mut schemas = txn.open_table(TABLE_SCHEMAS)?;
    schemas.insert(record.id, encode_batches(schema, &[])?.as_slice())?;
    Ok(record)
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
    txn.open_table(TABLE_SCHEMAS)?.remove(record.id)?;
    remove_chunks(txn, record.id)?;
    Ok(true)
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

fn remove_chunks(txn: &WriteTransaction, id: u64) -> Result<()> {
    txn.open_table(CHUNKS)?
        .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
    txn.open_table(CHUNK_ORDER)?
        .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
    Ok(())
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

/// Rewrites a table chunk by chunk, in place: `change` gets each chunk's rows and returns `None`
/// to leave the chunk untouched, or its new rows (possibly none). Changed chunks get new ids at
/// their old positions, so row order holds and untouched chunks are never copied.
pub(crate) fn rewrite_chunks(
    txn: &WriteTransaction,
    tenant: TenantId,
    mut record: TableRecord,
    mut change: impl FnMut(RecordBatch) -> Result<Option<RecordBatch>>,
) -> Result<TableRecord> {
    let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
    let mut chunks = txn.open_table(CHUNKS)?;
    let mut order = txn.open_table(CHUNK_ORDER)?;
    for (position, chunk) in chunk_order(&order, record.id)? {
        let batch = {
            let bytes = chunks.get((record.id, chunk))?.ok_or_else(|| {
                Error::internal(format!(
                    "chunk {chunk} of table id {} is missing",
                    record.id
                ))
            })?;
            decode_chunk(bytes.value(), None)?
        };
        let old_rows = batch.num_rows() as u64;
        let Some(new) = change(batch)? else {
            continue;
        };
        chunks.remove((record.id, chunk))?;
        record.row_count = record.row_count - old_rows + new.num_rows() as u64;
        if record.tail.is_some_and(|t| t.position == position) {
            record.tail = None;
        }
        if new.num_rows() == 0 {
            order.remove((record.id, position))?;
            continue;
        }
        let new = RecordBatch::try_new(Arc::clone(&schema), new.columns().to_vec())?;
        let bytes = encode_batches(&schema, &[compact(&new)?])?;
        chunks.insert((record.id, record.next_chunk), bytes.as_slice())?;
        order.insert((record.id, position), record.next_chunk)?;
        record.next_chunk += 1;
    }
    drop((chunks, order));
    save(txn, tenant, &record)?;
    Ok(record)
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

/// Appends rows to a table inside a write transaction: buffers batches into chunks of
/// [`CHUNK_ROWS`] rows and updates the record when finished. Memory stays bounded by one chunk.
pub(crate) struct TableWriter<'t> {
    txn: &'t WriteTransaction,
    tenant: TenantId,
    record: TableRecord,
    schema: SchemaRef,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    written: u64,
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
        let mut writer = TableWriter {
            txn,
            tenant,
            record: record.clone(),
            schema,
            pending: Vec::new(),
            pending_rows: 0,
            written: 0,
        };
        if let Some(tail) = record.tail.take() {
            if tail.rows < SMALL_TAIL_ROWS {
                txn.open_table(CHUNK_ORDER)?
                    .remove((record.id, tail.position))?;
                let mut chunks = txn.open_table(CHUNKS)?;
                if let Some(bytes) = chunks.remove((record.id, tail.chunk))? {
                    let batch = decode_chunk(bytes.value(), None)?;
                    // The rows are counted again when the merged chunk is written.
                    writer.record.row_count -= batch.num_rows() as u64;
                    writer.pending_rows += batch.num_rows();
                    writer.pending.push(batch);
                }
                writer.record.tail = None;
            }
        }
        Ok(writer)
    }

    /// Starts rewriting `record`'s table from scratch: its chunks are removed now, in the same
    /// transaction, and the rows pushed afterwards become its whole content.
    pub(crate) fn replace(
        txn: &'t WriteTransaction,
        tenant: TenantId,
        mut record: TableRecord,
    ) -> Result<Self> {
        remove_chunks(txn, record.id)?;
        record.row_count = 0;
        record.tail = None;
        Self::append(txn, tenant, record)
    }

    /// The table's schema; pushed batches must have its columns.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Buffers a batch, writing full chunks as they fill up.
    pub(crate) fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = self.conform(batch)?;
        self.written += batch.num_rows() as u64;
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        while self.pending_rows >= CHUNK_ROWS {
            let all = concat_batches(&self.schema, &self.pending)?;
            self.pending.clear();
            self.write_chunk(&all.slice(0, CHUNK_ROWS))?;
            self.pending_rows = all.num_rows() - CHUNK_ROWS;
            if self.pending_rows > 0 {
                // Copied, so the remainder does not keep the whole concatenated chunk alive
                // (and, through it, into the next chunk's buffers).
                self.pending
                    .push(compact(&all.slice(CHUNK_ROWS, self.pending_rows))?);
            }
        }
        Ok(())
    }

    /// Rows pushed so far (not counting rows merged from an earlier tail).
    pub(crate) fn rows_written(&self) -> u64 {
        self.written
    }

    /// Writes what is buffered and the updated record. The transaction is still the caller's to commit.
    pub(crate) fn finish(mut self) -> Result<TableRecord> {
        if self.pending_rows > 0 {
            let all = concat_batches(&self.schema, &self.pending)?;
            let tail = Tail {
                position: self.record.next_position,
                chunk: self.record.next_chunk,
                rows: all.num_rows() as u64,
            };
            self.write_chunk(&all)?;
            self.record.tail = Some(tail);
        }
        save(self.txn, self.tenant, &self.record)?;
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
        self.record.next_chunk += 1;
        self.record.next_position += 1;
        self.record.row_count += batch.num_rows() as u64;
        Ok(())
    }

    /// Gives the batch the table's schema, refusing NULLs in NOT NULL columns.
    fn conform(&self, batch: RecordBatch) -> Result<RecordBatch> {
        if batch.num_columns() != self.schema.fields().len() {
            return Err(Error::invalid(format!(
                "Table '{}' has {} columns but {} values were given",
                self.record.name,
                self.schema.fields().len(),
                batch.num_columns()
            )));
        }
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            let column = if column.data_type() == field.data_type() {
                column.clone()
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
                            self.record.name,
                            crate::sql::sql_type_name(field.data_type())
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
                        self.record.name
                    ),
                ));
            }
            columns.push(column);
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}
