//! Writing knowledge bases: [`insert`] chunks, embeds and stores documents, replacing those
//! with the same ids; [`delete`] removes whole documents. Each is one transaction that changes
//! the chunk table and its indexes (`catalog::kb_index`) together: a statement lands whole or
//! not at all.
//!
//! A knowledge base has one writer at a time (the store's object lock, taken before anything
//! is read): it embeds its rows and builds its new index version without the writer lock,
//! since both take long, and takes that lock only to store what it built. Node ids are handed
//! out from the version it started from, which nobody else can change meanwhile; a change
//! that slipped in all the same (a drop, a rollback) makes it start again.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, filter_record_batch, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion::logical_expr::LogicalPlan;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;
use tokio::sync::OwnedRwLockWriteGuard;

use super::pgvector::{PgStore, PgWriter};
use super::table::{CHUNK_CONTENT, CHUNK_ID, ID, LEADING, METADATA, NODE, RESERVED};
use crate::catalog::constraints::Constraints;
use crate::catalog::kb_index::{self, IndexRecord, IndexWriter, ReadIndex};
use crate::catalog::knowledge_bases::{self, chunk_db, KnowledgeBase};
use crate::catalog::tables::ReadTables;
use crate::catalog::tables::{self, StagedRows, TableRecord, TableWriter};
use crate::error::{Error, Result};
use crate::progress::{InsertProgress, Tracker};
use crate::services::chunking;
use crate::services::embeddings;
use crate::services::llm::Connector;
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::write::job::{Staged, WriteJob};
use mindlite_vectors::hnsw::Params;

/// How an insert treats documents the knowledge base has already (MindsDB's `USING
/// kb_skip_existing`, `kb_no_upsert`); by default it replaces them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InsertOptions {
    /// Rows whose document id is stored already are left out before anything is embedded.
    pub(crate) skip_existing: bool,
    /// Stored documents are not looked for at all (faster; for loading into an empty
    /// knowledge base: a document given again is then stored twice, as in MindsDB).
    pub(crate) no_upsert: bool,
}

/// `INSERT INTO kb …`: the rows of `source` (named as the insert names them) chunked,
/// embedded and stored, replacing every chunk of the documents with their ids (as `options`
/// say). Returns the documents inserted.
pub(crate) fn insert(
    job: &WriteJob,
    handle: &Handle,
    kb: KnowledgeBase,
    source: LogicalPlan,
    connector: Arc<Connector>,
    progress: Arc<Mutex<Tracker>>,
    options: InsertOptions,
) -> Result<Staged<u64>> {
    // Dropping the knowledge base (or its project) cancels the insert: no more embedding calls.
    let object = crate::running::Object::knowledge_base(job.tenant, &kb.project, &kb.name);
    let _running = job.store.running.register(&object, job.cancelled.clone());
    let _writer = lock_knowledge_base(job, handle, &kb)?;
    let base = Base::read(job, &kb)?;
    let settings = &connector.knowledge_bases;
    // The remote transaction opens at the first write, not before the rows are read.
    let remote = pg_store(job, &kb, &connector)?.map(|store| RemoteWrite {
        store,
        writer: None,
        hnsw: (settings.hnsw_m, settings.hnsw_ef_construction),
    });
    let mut ingest = Ingest {
        endpoint: embeddings::endpoint(&kb.embedding_model, &connector.embedding()),
        kb: &kb,
        connector: &connector,
        schema: base.schema.clone(),
        index: base
            .index
            .as_ref()
            .map(|index| IndexWriter::new(Some(index), index.graph.params())),
        params: (settings.hnsw_m, settings.hnsw_ef_construction),
        max_chunks: settings.max_chunks_per_document,
        ids: HashSet::new(),
        documents: 0,
        staged: None,
        progress: &progress,
        remote,
        options,
        cleared: HashSet::new(),
        stored: base
            .record
            .as_ref()
            .map(|r| r.id)
            .filter(|_| options.skip_existing),
    };
    if let Some(writer) = ingest.index.as_mut().filter(|w| w.worth_rebuilding()) {
        writer.rebuild()?;
    }
    job.drain(handle, &source, |batch| {
        job.check_cancelled()?;
        ingest.add(handle, job, &batch)
    })?;
    let Ingest {
        ids,
        documents,
        staged,
        schema,
        index,
        remote,
        ..
    } = ingest;
    progress.lock().report(|p| p.status = "storing".into());
    // The remote rows land first: inserting them again (if the knowledge base changed
    // meanwhile and this starts over) replaces them, ids and chunk ids being the same.
    let is_remote = remote.is_some();
    if let Some(writer) = remote.and_then(|r| r.writer) {
        crate::memory::wait(handle, job.unless_cancelled(writer.commit()))
            .ok_or_else(crate::store::cancelled)??;
    }
    let guard = job.lock(handle)?;
    if !base.is_current(&guard.txn, job, &kb)? {
        // Dropped, made anew or changed by a rollback meanwhile: again from the start.
        progress.lock().report(|p| {
            *p = InsertProgress {
                status: "reading".into(),
                documents: 0,
                chunks: 0,
                embedded: 0,
                indexed: 0,
                ..p.clone()
            }
        });
        return Ok(Staged::TargetChanged);
    }
    let db = chunk_db(&kb.project);
    let key = kb.name.to_ascii_lowercase();
    let record = match (base.record, &schema) {
        (Some(record), _) => Some(record),
        (None, Some(schema)) if staged.is_some() || is_remote => Some(tables::create(
            &guard.txn,
            job.tenant,
            &db,
            &key,
            schema,
            Constraints::default(),
        )?),
        _ => None,
    };
    let (Some(record), Some(mut index), false) = (record, index, is_remote) else {
        guard.commit()?;
        return Ok(Staged::Done(documents));
    };
    if !options.no_upsert {
        remove_documents(&guard.txn, job, &record, &ids, &mut index)?;
    }
    if let Some(staged) = staged {
        let record = tables::record(&guard.txn, job.tenant, &db, &key)?
            .ok_or_else(|| Error::internal("a knowledge base's chunk table went missing"))?;
        let mut writer = TableWriter::append(&guard.txn, job.tenant, record)?;
        writer.push_staged(staged)?;
        writer.finish()?;
    }
    let saved = index.save(&guard.txn, job.tenant, record.id)?;
    guard.commit()?;
    kb_index::publish(&job.store, record.id, &saved);
    Ok(Staged::Done(documents))
}

/// `DELETE FROM kb WHERE …`: every chunk of the documents whose ids `ids` (a plan of one
/// column) yields. Returns the documents removed.
pub(crate) fn delete(
    job: &WriteJob,
    handle: &Handle,
    kb: KnowledgeBase,
    ids: LogicalPlan,
) -> Result<Staged<u64>> {
    let mut found = HashSet::new();
    job.drain(handle, &ids, |batch| {
        let column = cast(batch.column(0), &DataType::Utf8)?;
        found.extend(
            column
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_string),
        );
        Ok(())
    })?;
    let _writer = lock_knowledge_base(job, handle, &kb)?;
    let connector = crate::sql::planning::session::connector(job.state.config())?;
    if let Some(store) = pg_store(job, &kb, &connector)? {
        crate::memory::wait(handle, job.unless_cancelled(store.delete(&found)))
            .ok_or_else(crate::store::cancelled)??;
        return Ok(Staged::Done(found.len() as u64));
    }
    let base = Base::read(job, &kb)?;
    let guard = job.lock(handle)?;
    if !base.is_current(&guard.txn, job, &kb)? {
        return Ok(Staged::TargetChanged);
    }
    if let (Some(record), Some(index)) = (&base.record, &base.index) {
        let mut writer = IndexWriter::new(Some(index), index.graph.params());
        remove_documents(&guard.txn, job, record, &found, &mut writer)?;
        let saved = writer.save(&guard.txn, job.tenant, record.id)?;
        guard.commit()?;
        kb_index::publish(&job.store, record.id, &saved);
    }
    Ok(Staged::Done(found.len() as u64))
}

/// Where `kb` keeps its chunks when in PostgreSQL.
fn pg_store(job: &WriteJob, kb: &KnowledgeBase, connector: &Connector) -> Result<Option<PgStore>> {
    if kb.storage.is_none() {
        return Ok(None);
    }
    let snapshot = Snapshot::new(Arc::clone(&job.store), job.tenant)?;
    PgStore::of(
        kb,
        &snapshot,
        &connector.net,
        &connector.knowledge_bases.storage_url,
    )
}

/// Takes the knowledge base's writer lock. Inside an explicit transaction, or holding the
/// store's writer lock already, it is not waited for: its holder may be waiting for the
/// writer lock this statement's transaction keeps.
fn lock_knowledge_base(
    job: &WriteJob,
    handle: &Handle,
    kb: &KnowledgeBase,
) -> Result<OwnedRwLockWriteGuard<()>> {
    let key = format!(
        "knowledge base {} {}.{}",
        job.tenant.0,
        kb.project,
        kb.name.to_ascii_lowercase()
    );
    let lock = job.store.object_lock(&key);
    if job.store.in_transaction() || job.held.lock().is_some() {
        return lock.try_write_owned().map_err(|_| {
            Error::conflict(format!(
                "Another write into knowledge base '{}' is running; try again when it has finished",
                kb.name
            ))
        });
    }
    crate::memory::wait(handle, job.unless_cancelled(lock.write_owned()))
        .ok_or_else(crate::store::cancelled)
}

/// The knowledge base's state a write starts from: read after its writer lock was taken, so
/// no other writer of it can have changed it since.
struct Base {
    record: Option<TableRecord>,
    schema: Option<SchemaRef>,
    index: Option<Arc<kb_index::KbIndex>>,
    stamp: Option<IndexRecord>,
}

impl Base {
    fn read(job: &WriteJob, kb: &KnowledgeBase) -> Result<Base> {
        let txn = job.store.read()?;
        let record = tables::record(&txn, job.tenant, &chunk_db(&kb.project), &kb.name)?;
        let (schema, index, stamp) = match &record {
            Some(record) => (
                Some(txn.schema_of(record.id)?),
                kb_index::load(&job.store, &txn, record.id)?,
                txn.index_record(record.id)?,
            ),
            None => (None, None, None),
        };
        Ok(Base {
            record,
            schema,
            index,
            stamp,
        })
    }

    /// Whether the knowledge base is still as read: the same record, chunk table and index.
    fn is_current(
        &self,
        txn: &redb::WriteTransaction,
        job: &WriteJob,
        kb: &KnowledgeBase,
    ) -> Result<bool> {
        let now = knowledge_bases::named(&txn, job.tenant, &kb.project, &kb.name)?;
        let table = tables::record(&txn, job.tenant, &chunk_db(&kb.project), &kb.name)?;
        let stamp = match &table {
            Some(record) => txn.index_record(record.id)?,
            None => None,
        };
        Ok(now.as_ref() == Some(kb)
            && table.as_ref().map(|r| r.id) == self.record.as_ref().map(|r| r.id)
            && stamp.map(|s| s.stamp) == self.stamp.map(|s| s.stamp))
    }
}

/// Removes, inside the write transaction, the chunks of the documents `ids`, and their nodes
/// and words from `index`.
fn remove_documents(
    txn: &redb::WriteTransaction,
    job: &WriteJob,
    record: &TableRecord,
    ids: &HashSet<String>,
    index: &mut IndexWriter,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    // Only the ids are read of chunks holding none of the documents.
    let touches = |ids_only: &RecordBatch| {
        ids_only
            .column(0)
            .as_string::<i32>()
            .iter()
            .any(|id| id.is_some_and(|id| ids.contains(id)))
    };
    let probe: tables::ChunkProbe = (vec![0], &touches);
    let rewrite = tables::plan_rewrite_probing(
        txn,
        record,
        job.spool(),
        job.spool(),
        Some(probe),
        |batch| {
            let id = batch.column(0).as_string::<i32>();
            let keep: BooleanArray = id
                .iter()
                .map(|id| Some(!id.is_some_and(|id| ids.contains(id))))
                .collect();
            if keep.true_count() == batch.num_rows() {
                return Ok(None);
            }
            let texts = batch.column(2).as_string::<i32>();
            let nodes = batch.column(batch.num_columns() - 1);
            let nodes = nodes.as_primitive::<UInt32Type>();
            for row in (0..batch.num_rows()).filter(|row| !keep.value(*row)) {
                if nodes.is_valid(row) {
                    let text = if texts.is_null(row) {
                        ""
                    } else {
                        texts.value(row)
                    };
                    index.remove(nodes.value(row), text);
                }
            }
            Ok(Some(filter_record_batch(&batch, &keep)?))
        },
    )?;
    // Planned inside the transaction, never landed: nothing is retired.
    if tables::apply_rewrite(txn, job.tenant, record.clone(), rewrite)?.is_none() {
        return Err(Error::internal(
            "a rewrite planned inside its transaction did not apply",
        ));
    }
    Ok(())
}

/// The document id of each row of `batch`: its id column's text, or without one (MindsDB's
/// way) a hash of its content columns.
fn document_ids(kb: &KnowledgeBase, batch: &RecordBatch) -> Result<Vec<String>> {
    let source = batch.schema();
    let position = |name: &str| {
        source
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(name))
    };
    if let Some(at) = position(&kb.id_column) {
        let column = strict_cast(batch.column(at), &DataType::Utf8)?;
        let column = column.as_string::<i32>();
        return (0..column.len())
            .map(|row| match column.is_null(row) {
                true => Err(Error::invalid(format!(
                    "The id column '{}' is NULL in a row inserted into knowledge base '{}'",
                    kb.id_column, kb.name
                ))),
                false => Ok(column.value(row).to_string()),
            })
            .collect();
    }
    let contents = kb
        .content_columns
        .iter()
        .filter_map(|column| position(column))
        .map(|at| strict_cast(batch.column(at), &DataType::Utf8))
        .collect::<Result<Vec<_>>>()?;
    Ok((0..batch.num_rows())
        .map(|row| {
            let mut hash = Sha256::new();
            for text in &contents {
                let text = text.as_string::<i32>();
                hash.update(if text.is_null(row) {
                    ""
                } else {
                    text.value(row)
                });
                hash.update([0]);
            }
            hash.finalize()[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect())
}

/// Which of `ids` the chunk table `table` holds documents of, read a chunk's id column at a
/// time (nothing of the table is held beyond one chunk).
fn stored_ids(job: &WriteJob, table: u64, ids: &[String]) -> Result<HashSet<String>> {
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let txn = job.store.read()?;
    let mut found = HashSet::new();
    for (_, chunk) in txn.chunk_order_of(table)? {
        job.check_cancelled()?;
        let column = txn.chunk_columns(table, chunk, vec![0])?;
        for id in column.column(0).as_string::<i32>().iter().flatten() {
            if wanted.contains(id) && !found.contains(id) {
                found.insert(id.to_string());
            }
        }
    }
    Ok(found)
}

/// A knowledge base's PostgreSQL table, and the insert's transaction there once it wrote.
struct RemoteWrite {
    store: PgStore,
    writer: Option<PgWriter>,
    /// M and efConstruction for the HNSW index of a table the insert makes.
    hnsw: (usize, usize),
}

impl RemoteWrite {
    /// The insert's remote transaction, begun at its first use.
    fn writer(&mut self, handle: &Handle, job: &WriteJob) -> Result<&mut PgWriter> {
        if self.writer.is_none() {
            let opened = PgWriter::open(self.store.clone(), self.hnsw);
            self.writer = Some(
                crate::memory::wait(handle, job.unless_cancelled(opened))
                    .ok_or_else(crate::store::cancelled)??,
            );
        }
        self.writer
            .as_mut()
            .ok_or_else(|| Error::internal("a remote transaction went missing"))
    }
}

/// Chunks embedded, indexed and staged at once: a document's chunks go in groups, so its
/// size, not the memory, bounds how many it may have.
const GROUP_CHUNKS: usize = 1024;

/// Chunks made from a source batch and not yet embedded.
#[derive(Default)]
struct Group {
    /// The source row of each chunk.
    rows: Vec<u32>,
    chunk_ids: Vec<String>,
    texts: Vec<String>,
}

/// A batch of inserted documents, as a group of its chunks needs it.
struct Source {
    /// The documents' ids, by row.
    ids: StringArray,
    /// The metadata columns by name, typed as the chunk table holds them.
    metadata: Vec<(String, ArrayRef)>,
    /// What one chunk's copy of each row's metadata takes.
    row_bytes: Vec<u64>,
}

/// Documents on their way into the chunk table and its indexes.
struct Ingest<'a> {
    kb: &'a KnowledgeBase,
    connector: &'a Connector,
    endpoint: embeddings::Endpoint,
    /// The chunk table's schema: the existing table's, or fixed by the first rows.
    schema: Option<SchemaRef>,
    /// The new version of the indexes: the existing one's copy, or made by the first rows.
    index: Option<IndexWriter>,
    /// HNSW's M and efConstruction for an index made by this insert.
    params: (usize, usize),
    /// Chunks one document may make (`knowledge_bases.max_chunks_per_document`).
    max_chunks: usize,
    /// Ids of the documents inserted (their old chunks go).
    ids: HashSet<String>,
    documents: u64,
    staged: Option<StagedRows>,
    progress: &'a Mutex<Tracker>,
    /// Where the chunks go, for a knowledge base kept in PostgreSQL.
    remote: Option<RemoteWrite>,
    options: InsertOptions,
    /// Documents whose old remote chunks were deleted already.
    cleared: HashSet<String>,
    /// The chunk table whose documents are left out (`kb_skip_existing`), if any.
    stored: Option<u64>,
}
impl Ingest<'_> {
    /// Chunks, embeds and stages the documents of one source batch, less those stored
    /// already when they are to be skipped.
    fn add(&mut self, handle: &Handle, job: &WriteJob, batch: &RecordBatch) -> Result<()> {
        let stored = match (&mut self.remote, self.stored) {
            (Some(remote), _) if self.options.skip_existing => {
                let ids = document_ids(self.kb, batch)?;
                let writer = remote.writer(handle, job)?;
                crate::memory::wait(handle, job.unless_cancelled(writer.stored_ids(&ids)))
                    .ok_or_else(crate::store::cancelled)??
            }
            (None, Some(table)) => stored_ids(job, table, &document_ids(self.kb, batch)?)?,
            _ => return self.add_rows(handle, job, batch),
        };
        let ids = document_ids(self.kb, batch)?;
        if stored.is_empty() {
            return self.add_rows(handle, job, batch);
        }
        let keep: BooleanArray = ids.iter().map(|id| Some(!stored.contains(id))).collect();
        self.add_rows(handle, job, &filter_record_batch(batch, &keep)?)
    }

    /// Chunks, embeds and stages the documents of one source batch.
    fn add_rows(&mut self, handle: &Handle, job: &WriteJob, batch: &RecordBatch) -> Result<()> {
        let kb = self.kb;
        let source = batch.schema();
        let position = |name: &str| {
            source
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
        };
        let contents = kb
            .content_columns
            .iter()
            .map(|column| {
                let at = position(column).ok_or_else(|| {
                    Error::invalid(format!(
                        "INSERT INTO knowledge base '{}' needs its content column '{column}' (content_columns = {:?})",
                        kb.name, kb.content_columns
                    ))
                })?;
                Ok((column.to_ascii_lowercase(), strict_cast(batch.column(at), &DataType::Utf8)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let metadata = self.metadata_names(&source)?;
        let ids = document_ids(kb, batch)?;
        let columns = metadata
            .iter()
            .map(|(name, data_type)| {
                let column = match position(name) {
                    Some(at) => strict_cast(batch.column(at), data_type)?,
                    None => new_null_array(data_type, batch.num_rows()),
                };
                Ok((name.clone(), column))
            })
            .collect::<Result<Vec<_>>>()?;
        // What each document's metadata takes: every chunk of it carries a copy (twice: the
        // columns and the JSON object).
        // bounded: one per row of a batch in memory
        let mut row_bytes = vec![0u64; batch.num_rows()];
        for (_, column) in &columns {
            for (row, bytes) in crate::sql::planning::bounded::value_bytes(column)
                .into_iter()
                .enumerate()
            {
                row_bytes[row] = row_bytes[row].saturating_add(bytes.saturating_mul(2) + 16);
            }
        }
        let source = Source {
            ids: StringArray::from(ids.clone()),
            metadata: columns,
            row_bytes,
        };
        self.report(job, |p| p.documents += batch.num_rows() as u64);
        let mut group = Group::default();
        for (row, id) in ids.iter().enumerate() {
            // Which of two rows of one document should win is not for the engine to guess.
            if !self.ids.insert(id.clone()) {
                return Err(Error::invalid(format!(
                    "Document id '{id}' is given twice in one INSERT INTO knowledge base '{}'",
                    kb.name
                )));
            }
            self.documents += 1;
            let row_number = u32::try_from(row).map_err(|_| Error::invalid("batch too large"))?;
            for (column, text) in &contents {
                let text = text.as_string::<i32>();
                if text.is_null(row) {
                    continue;
                }
                let document =
                    chunking::Document::new(text.value(row), kb.chunk_size, kb.chunk_overlap)?;
                // Chunk ids name the total, so the chunks are counted before they are made,
                // no further than the limit.
                let total = document.chunks().take(self.max_chunks + 1).count();
                if total > self.max_chunks {
                    return Err(Error::invalid(format!(
                        "Document '{id}' splits into more than {} chunks of chunk_size {}, over the limit knowledge_bases.max_chunks_per_document; give the knowledge base a larger chunk_size",
                        self.max_chunks, kb.chunk_size
                    )));
                }
                for (n, piece) in document.chunks().enumerate() {
                    group.rows.push(row_number);
                    group.chunk_ids.push(format!(
                        "{id}:{column}:{}of{total}:{}to{}",
                        n + 1,
                        piece.start,
                        piece.end
                    ));
                    group.texts.push(piece.text.to_string());
                    // A document of millions of chunks goes in a group at a time.
                    if group.texts.len() >= GROUP_CHUNKS {
                        self.flush(handle, job, &source, std::mem::take(&mut group))?;
                    }
                }
            }
        }
        if !group.texts.is_empty() {
            self.flush(handle, job, &source, group)?;
        }
        Ok(())
    }

    /// Embeds, indexes and stages one group of chunks of `source`'s documents.
    fn flush(
        &mut self,
        handle: &Handle,
        job: &WriteJob,
        source: &Source,
        group: Group,
    ) -> Result<()> {
        crate::cancel::check()?;
        let kb = self.kb;
        let Group {
            rows,
            chunk_ids,
            texts,
        } = group;
        let metadata_bytes = rows
            .iter()
            .map(|row| source.row_bytes.get(*row as usize).copied().unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        crate::capacity::check(
            metadata_bytes,
            "Copying the documents' metadata into each chunk",
        )?;
        self.report(job, |p| p.chunks += texts.len() as u64);
        // Every request to the embedding model counts against the tenant's plan, before it is
        // made; progress is reported after each.
        // bounded: one per chunk text already in memory
        let mut vectors = Vec::with_capacity(texts.len());
        for part in texts.chunks(self.endpoint.batch_size.max(1)) {
            crate::memory::wait(handle, self.connector.meter.take(job.tenant, 1))?;
            let embedding = embeddings::embed(self.connector, &self.endpoint, part);
            let got = crate::memory::wait(handle, job.unless_cancelled(embedding))
                .ok_or_else(crate::store::cancelled)??;
            if let (Some(first), Some(new)) = (vectors.first().map(Vec::len), got.first()) {
                if new.len() != first {
                    return Err(Error::invalid(format!(
                        "The embedding model answered vectors of {} and of {first} dimensions in one insert",
                        new.len()
                    )));
                }
            }
            vectors.extend(got);
            self.report(job, |p| p.embedded += part.len() as u64);
        }
        if vectors.len() != texts.len() {
            return Err(Error::internal("the embedding model lost texts"));
        }
        let dimensions = vectors[0].len();
        let rows = UInt32Array::from(rows);
        let metadata_columns: Vec<(String, ArrayRef)> = source
            .metadata
            .iter()
            .map(|(name, column)| Ok((name.clone(), take(column, &rows, None)?)))
            .collect::<Result<_>>()?;
        let schema = match &self.schema {
            Some(schema) => Arc::clone(schema),
            None => {
                let schema = chunk_schema(
                    metadata_columns
                        .iter()
                        .map(|(name, array)| Field::new(name, array.data_type().clone(), true))
                        .collect(),
                )?;
                self.schema = Some(Arc::clone(&schema));
                schema
            }
        };
        if let Some(remote) = self.remote.as_mut() {
            let writer = remote.writer(handle, job)?;
            let documents = take(&source.ids, &rows, None)?;
            let mut columns: Vec<ArrayRef> = vec![
                Arc::clone(&documents),
                Arc::new(StringArray::from(chunk_ids)),
                Arc::new(StringArray::from(texts)),
                Arc::new(metadata_json(&metadata_columns, rows.len())?),
            ];
            columns.extend(metadata_columns.into_iter().map(|(_, array)| array));
            columns.push(new_null_array(&DataType::UInt32, rows.len()));
            let chunk_rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
            // A document's old chunks go before its first new ones are written.
            let fresh: Vec<String> = match self.options.no_upsert {
                true => Vec::new(),
                false => documents
                    .as_string::<i32>()
                    .iter()
                    .flatten()
                    .filter(|id| self.cleared.insert(id.to_string()))
                    .map(str::to_string)
                    .collect(),
            };
            let written = async {
                writer.clear(&fresh).await?;
                writer.write(&chunk_rows, &vectors).await
            };
            crate::memory::wait(handle, job.unless_cancelled(written))
                .ok_or_else(crate::store::cancelled)??;
            self.report(job, |p| p.indexed += chunk_rows.num_rows() as u64);
            return Ok(());
        }
        let (m, ef_construction) = self.params;
        let index = self.index.get_or_insert_with(|| {
            IndexWriter::new(
                None,
                Params {
                    dimensions,
                    m,
                    ef_construction,
                },
            )
        });
        if index.dimensions() != dimensions {
            return Err(Error::invalid(format!(
                "The embedding model answered vectors of {dimensions} dimensions; knowledge base '{}' holds vectors of {}",
                kb.name,
                index.dimensions()
            )));
        }
        let first = index.next_node();
        let last = first
            .checked_add(u32::try_from(texts.len()).unwrap_or(u32::MAX))
            .filter(|last| *last < u32::MAX)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "Knowledge base '{}' has taken in 4 billion chunks; make a new one to take more",
                    kb.name
                ))
            })?;
        index.add(first, &vectors, &texts)?;
        self.report(job, |p| p.indexed += texts.len() as u64);
        let mut columns: Vec<ArrayRef> = vec![
            take(&source.ids, &rows, None)?,
            Arc::new(StringArray::from(chunk_ids)),
            Arc::new(StringArray::from(texts)),
            Arc::new(metadata_json(&metadata_columns, rows.len())?),
        ];
        columns.extend(metadata_columns.into_iter().map(|(_, array)| array));
        columns.push(Arc::new(UInt32Array::from_iter_values(first..last)));
        let chunk_rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let staged = self
            .staged
            .get_or_insert_with(|| job.staged(&kb.name, Arc::clone(&schema)));
        staged.push(chunk_rows)?;
        Ok(())
    }

    /// Reports progress; when the caller's callback asks to stop, the statement is cancelled.
    fn report(&self, job: &WriteJob, change: impl FnOnce(&mut InsertProgress)) {
        if !self.progress.lock().report(change) {
            job.cancelled.cancel();
        }
    }

    /// The metadata columns and their types: the chunk table's, else the declared ones (as
    /// the rows type them), else every column of the rows but the id and the content ones.
    fn metadata_names(&self, source: &Schema) -> Result<Vec<(String, DataType)>> {
        let kb = self.kb;
        let type_in_source = |name: &str| {
            source
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(name))
                .map(|f| f.data_type().clone())
        };
        let names: Vec<(String, DataType)> = match &self.schema {
            Some(schema) => {
                let last = schema.fields().len() - 1;
                return Ok(schema.fields()[LEADING..last]
                    .iter()
                    .map(|f| (f.name().clone(), f.data_type().clone()))
                    .collect());
            }
            None if !kb.metadata_columns.is_empty() => kb
                .metadata_columns
                .iter()
                .map(|c| {
                    let data_type = type_in_source(c).unwrap_or(DataType::Utf8);
                    (c.to_ascii_lowercase(), data_type)
                })
                .collect(),
            None => source
                .fields()
                .iter()
                .filter(|f| {
                    !f.name().eq_ignore_ascii_case(&kb.id_column)
                        && !kb
                            .content_columns
                            .iter()
                            .any(|c| f.name().eq_ignore_ascii_case(c))
                })
                .map(|f| (f.name().to_ascii_lowercase(), f.data_type().clone()))
                .collect(),
        };
        for (name, _) in &names {
            if RESERVED.contains(&name.as_str()) {
                return Err(Error::invalid(format!(
                    "Column '{name}' cannot be a metadata column of a knowledge base: the name is one of its own columns ({})",
                    RESERVED.join(", ")
                )));
            }
        }
        // A column of NULLs only is kept as text.
        Ok(names
            .into_iter()
            .map(|(name, t)| match t {
                DataType::Null => (name, DataType::Utf8),
                t => (name, t),
            })
            .collect())
    }
}

/// The schema of a knowledge base's chunk table with the metadata columns `metadata`: its
/// own columns first, each chunk's node in the indexes last. A metadata column may not take
/// a name of its own columns.
pub(crate) fn chunk_schema(metadata: Vec<Field>) -> Result<SchemaRef> {
    if let Some(field) = metadata
        .iter()
        .find(|f| RESERVED.iter().any(|r| r.eq_ignore_ascii_case(f.name())))
    {
        return Err(Error::invalid(format!(
            "Column '{}' cannot be a metadata column of a knowledge base: the name is one of its own columns ({}); name the metadata columns with metadata_columns",
            field.name(),
            RESERVED.join(", ")
        )));
    }
    let mut fields: Vec<Field> = [ID, CHUNK_ID, CHUNK_CONTENT, METADATA]
        .iter()
        .map(|name| Field::new(*name, DataType::Utf8, true))
        .collect();
    fields.extend(metadata);
    fields.push(Field::new(NODE, DataType::UInt32, true));
    Ok(Arc::new(Schema::new(fields)))
}

/// `array` as `to`, failing (naming the values) where a value does not convert, never NULL.
fn strict_cast(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let options = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    datafusion::arrow::compute::cast_with_options(array, to, &options).map_err(|e| {
        Error::invalid(format!(
            "A column inserted into a knowledge base does not fit its type {to}: {e}"
        ))
    })
}

/// Each of `rows` rows' metadata as one JSON object (columns with NULL left out).
fn metadata_json(columns: &[(String, ArrayRef)], rows: usize) -> Result<StringArray> {
    if columns.is_empty() {
        // bounded: the rows of a batch in memory
        return Ok(StringArray::from(vec!["{}"; rows]));
    }
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, array)| Field::new(name, array.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(
        schema,
        columns.iter().map(|(_, array)| Arc::clone(array)).collect(),
    )?;
    let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(Vec::new());
    writer.write(&batch)?;
    writer.finish()?;
    let text = String::from_utf8(writer.into_inner())
        .map_err(|_| Error::internal("metadata JSON is not UTF-8"))?;
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() != rows {
        return Err(Error::internal("metadata JSON lost rows"));
    }
    Ok(StringArray::from(lines))
}
