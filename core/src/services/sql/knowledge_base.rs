//! Knowledge bases in SQL. Searching: [`KnowledgeBaseTable`], the table provider a knowledge
//! base's name resolves to, returns MindsDB's columns (`id, chunk_id, chunk_content, metadata,
//! <metadata columns>, distance, relevance`); a top-level `content = 'question'` condition makes
//! it a search: the question is embedded, every chunk's cosine distance to it computed (an
//! exact scan), and the nearest `LIMIT` (10 when not given) kept. Every other condition is
//! evaluated on the chunks before ranking, so a filtered search keeps its recall, and all
//! conditions are exact, so DataFusion hands the LIMIT down. Writing: [`insert`] chunks,
//! embeds and stores documents, replacing those with the same ids; [`delete`] removes whole
//! documents. Both are one transaction each: a statement lands whole or not at all.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, FixedSizeListArray, Float32Array,
    Float64Array, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{
    cast, concat_batches, filter_record_batch, sort_to_indices, take, take_record_batch,
    SortOptions,
};
use datafusion::arrow::datatypes::{DataType, Field, Float32Type, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, Operator, TableProviderFilterPushDown,
    WriteOp,
};
use datafusion::physical_plan::ExecutionPlan;
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;

use super::dml::{Staged, WriteJob};
use super::snapshot::Snapshot;
use crate::catalog::constraints::Constraints;
use crate::catalog::knowledge_bases::{self, chunk_db, KnowledgeBase};
use crate::catalog::tables::{self, ReadTables, StagedRows, TableRecord, TableWriter};
use crate::error::{Error, Result};
use crate::services::chunking;
use crate::services::embeddings;
use crate::services::llm::Connector;
use crate::store::schema::{KNOWLEDGE_BASES, TABLES};

const ID: &str = "id";
const CHUNK_ID: &str = "chunk_id";
const CHUNK_CONTENT: &str = "chunk_content";
const METADATA: &str = "metadata";
const DISTANCE: &str = "distance";
const RELEVANCE: &str = "relevance";
/// The search condition's column; it reads as the chunk's text.
const CONTENT: &str = "content";
/// The stored vectors' column (last of the chunk table, never shown).
const EMBEDDINGS: &str = "embeddings";
/// Columns of the chunk table before its metadata columns.
const LEADING: usize = 4;
/// Names a metadata column cannot take: the knowledge base's own columns.
const RESERVED: [&str; 8] = [
    ID,
    CHUNK_ID,
    CHUNK_CONTENT,
    METADATA,
    DISTANCE,
    RELEVANCE,
    CONTENT,
    EMBEDDINGS,
];
/// Rows a search returns without a LIMIT, as MindsDB's.
const DEFAULT_LIMIT: usize = 10;

/// A knowledge base at one snapshot, as a table.
#[derive(Debug)]
pub(crate) struct KnowledgeBaseTable {
    snapshot: Arc<Snapshot>,
    kb: KnowledgeBase,
    /// The chunk table, once something was inserted.
    chunks: Option<TableRecord>,
    schema: SchemaRef,
}

impl KnowledgeBaseTable {
    /// The knowledge base `kb` as `snapshot` holds it.
    pub(crate) fn new(snapshot: Arc<Snapshot>, kb: KnowledgeBase) -> Result<KnowledgeBaseTable> {
        let chunks = snapshot.table(&chunk_db(&kb.project), &kb.name)?;
        let stored = match &chunks {
            Some(record) => Some(snapshot.table_schema(record.id)?),
            None => None,
        };
        let schema = output_schema(&kb, stored.as_deref());
        Ok(KnowledgeBaseTable {
            snapshot,
            kb,
            chunks,
            schema,
        })
    }

    /// The question's normalised vector, from the knowledge base's embedding model.
    async fn embed_question(&self, state: &dyn Session, question: &str) -> Result<Vec<f32>> {
        let connector = super::predict::connector(state.config())?;
        let endpoint = embeddings::endpoint(&self.kb.embedding_model, &connector.embedding);
        let mut vectors =
            embeddings::embed(&connector.client, &endpoint, &[question.to_string()]).await?;
        vectors
            .pop()
            .ok_or_else(|| Error::internal("no vector for the question"))
    }

    /// The shown rows of stored chunk rows: distances to `query` when searching.
    fn output(&self, stored: &RecordBatch, query: Option<&[f32]>) -> Result<RecordBatch> {
        let rows = stored.num_rows();
        let last = stored.num_columns() - 1;
        let mut columns: Vec<ArrayRef> = stored.columns()[..last].to_vec();
        let (distance, relevance): (ArrayRef, ArrayRef) = match query {
            Some(query) => {
                let distance = distances(stored.column(last), query)?;
                let relevance: Float64Array = distance
                    .iter()
                    .map(|d| d.map(|d| 1.0 / (1.0 + d)))
                    .collect();
                (Arc::new(distance), Arc::new(relevance))
            }
            None => (
                new_null_array(&DataType::Float64, rows),
                new_null_array(&DataType::Float64, rows),
            ),
        };
        columns.push(distance);
        columns.push(relevance);
        columns.push(Arc::clone(stored.column(2)));
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// The shown columns: the chunk table's but its vectors, then distance, relevance, content.
fn output_schema(kb: &KnowledgeBase, stored: Option<&Schema>) -> SchemaRef {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let mut fields = vec![
        text(ID),
        text(CHUNK_ID),
        text(CHUNK_CONTENT),
        text(METADATA),
    ];
    match stored {
        Some(stored) => {
            let last = stored.fields().len() - 1;
            fields.extend(
                stored.fields()[LEADING..last]
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true)),
            );
        }
        None => fields.extend(kb.metadata_columns.iter().map(|c| text(c))),
    }
    fields.push(Field::new(DISTANCE, DataType::Float64, true));
    fields.push(Field::new(RELEVANCE, DataType::Float64, true));
    fields.push(text(CONTENT));
    Arc::new(Schema::new(fields))
}

#[async_trait]
impl TableProvider for KnowledgeBaseTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Every condition is the search's or evaluated on the chunks here, before ranking.
        Ok(vec![TableProviderFilterPushDown::Exact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut question: Option<String> = None;
        let mut rest = Vec::new();
        for filter in filters {
            match question_of(filter) {
                Some(given) => {
                    if question.as_ref().is_some_and(|q| *q != given) {
                        return Err(Error::invalid(format!(
                            "A search of knowledge base '{}' takes one content = '…' condition",
                            self.kb.name
                        ))
                        .into());
                    }
                    question = Some(given);
                }
                None => rest.push(unqualified(filter.clone())?),
            }
        }
        let predicate = match conjunction(rest) {
            Some(expr) => {
                let schema = DFSchema::try_from(self.schema.as_ref().clone())?;
                Some(state.create_physical_expr(expr, &schema)?)
            }
            None => None,
        };
        let query = match &question {
            Some(question) => Some(self.embed_question(state, question).await?),
            None => None,
        };
        let top = query.as_ref().map(|_| limit.unwrap_or(DEFAULT_LIMIT));
        let mut best: Option<RecordBatch> = None;
        let mut all = Vec::new();
        let mut rows = 0;
        if let Some(record) = &self.chunks {
            let txn = &self.snapshot.txn;
            for (_, chunk) in txn.chunk_order_of(record.id)? {
                let stored = txn.chunk(record.id, chunk)?;
                let mut out = self.output(&stored, query.as_deref())?;
                if let Some(predicate) = &predicate {
                    let hits = predicate.evaluate(&out)?.into_array(out.num_rows())?;
                    out = filter_record_batch(&out, hits.as_boolean())?;
                }
                match top {
                    Some(k) => best = Some(nearest(best.take(), out, k)?),
                    None => {
                        let room = limit.map_or(usize::MAX, |l| l - rows);
                        rows += out.num_rows().min(room);
                        all.push(out.slice(0, out.num_rows().min(room)));
                        if limit.is_some_and(|l| rows >= l) {
                            break;
                        }
                    }
                }
            }
        }
        let batches = match top {
            Some(_) => best.into_iter().collect(),
            None => all,
        };
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// The question of a `content = 'text'` condition.
fn question_of(expr: &Expr) -> Option<String> {
    let Expr::BinaryExpr(binary) = expr else {
        return None;
    };
    if binary.op != Operator::Eq {
        return None;
    }
    let text = |e: &Expr| match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s.clone()),
        _ => None,
    };
    let is_content = |e: &Expr| matches!(e, Expr::Column(c) if c.name == CONTENT);
    match (binary.left.as_ref(), binary.right.as_ref()) {
        (left, right) if is_content(left) => text(right),
        (left, right) if is_content(right) => text(left),
        _ => None,
    }
}

/// `expr` with its columns' table qualifiers dropped (they name the scan, whose schema has none).
fn unqualified(expr: Expr) -> Result<Expr> {
    Ok(expr
        .transform(|e| match e {
            Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                Column::new_unqualified(c.name),
            ))),
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// Cosine distances of stored normalised vectors to a normalised query.
fn distances(embeddings: &ArrayRef, query: &[f32]) -> Result<Float64Array> {
    let list = embeddings.as_fixed_size_list();
    let dimensions = usize::try_from(list.value_length()).unwrap_or(0);
    if dimensions != query.len() {
        return Err(Error::invalid(format!(
            "The embedding model answered a vector of {} dimensions for the question; this knowledge base holds vectors of {dimensions} (was its embedding model changed?)",
            query.len()
        )));
    }
    let values = list.values().as_primitive::<Float32Type>().values();
    Ok((0..list.len())
        .map(|i| {
            if list.is_null(i) {
                return None;
            }
            let start = usize::try_from(list.value_offset(i)).unwrap_or(0);
            let dot: f32 = values[start..start + dimensions]
                .iter()
                .zip(query)
                .map(|(a, b)| a * b)
                .sum();
            Some((1.0 - f64::from(dot)).max(0.0))
        })
        .collect())
}

/// The `k` rows of `best` and `new` nearest the question, nearest first.
fn nearest(best: Option<RecordBatch>, new: RecordBatch, k: usize) -> Result<RecordBatch> {
    let both = match best {
        Some(best) => concat_batches(&new.schema(), [&best, &new])?,
        None => new,
    };
    let distance = both
        .schema()
        .index_of(DISTANCE)
        .map_err(|e| Error::internal(e.to_string()))?;
    let order = sort_to_indices(
        both.column(distance),
        Some(SortOptions {
            descending: false,
            nulls_first: false,
        }),
        Some(k),
    )?;
    Ok(take_record_batch(&both, &order)?)
}

/// `INSERT INTO kb …`: the rows of `source` (named as the insert names them) chunked,
/// embedded and stored, replacing every chunk of the documents with their ids. Returns the
/// documents inserted.
pub(crate) fn insert(
    job: &WriteJob,
    handle: &Handle,
    kb: KnowledgeBase,
    source: LogicalPlan,
    connector: Arc<Connector>,
) -> Result<Staged<u64>> {
    let db = chunk_db(&kb.project);
    let read = job.snapshot.table(&db, &kb.name)?;
    let mut ingest = Ingest {
        endpoint: embeddings::endpoint(&kb.embedding_model, &connector.embedding),
        kb: &kb,
        connector: &connector,
        schema: match &read {
            Some(record) => Some(job.snapshot.table_schema(record.id)?),
            None => None,
        },
        ids: HashSet::new(),
        documents: 0,
        staged: None,
    };
    job.drain(handle, &source, |batch| {
        job.check_cancelled()?;
        ingest.add(handle, job, &batch)
    })?;
    let Ingest {
        ids,
        documents,
        staged,
        schema,
        ..
    } = ingest;
    let guard = job.lock(handle)?;
    let now = knowledge_bases::get(
        &guard.txn.open_table(KNOWLEDGE_BASES)?,
        job.tenant,
        &kb.project,
        &kb.name,
    )?;
    let key = kb.name.to_ascii_lowercase();
    let current = tables::get(&guard.txn.open_table(TABLES)?, job.tenant, &db, &key)?;
    if now.as_ref() != Some(&kb) || current.as_ref().map(|r| r.id) != read.as_ref().map(|r| r.id) {
        // Dropped, made anew or first filled meanwhile: again, under the lock.
        return Ok(Staged::TargetChanged);
    }
    let record = match (current, &schema) {
        (Some(record), _) => Some(record),
        (None, Some(schema)) if staged.is_some() => Some(tables::create(
            &guard.txn,
            job.tenant,
            &db,
            &key,
            schema,
            Constraints::default(),
        )?),
        _ => None,
    };
    if let Some(record) = record {
        remove_documents(&guard.txn, job, &record, &ids)?;
        if let Some(staged) = staged {
            let record = tables::get(&guard.txn.open_table(TABLES)?, job.tenant, &db, &key)?
                .ok_or_else(|| Error::internal("a knowledge base's chunk table went missing"))?;
            let mut writer = TableWriter::append(&guard.txn, job.tenant, record)?;
            writer.push_staged(staged)?;
            writer.finish()?;
        }
    }
    guard.commit()?;
    Ok(Staged::Done(documents))
}

/// The knowledge base a write statement targets, if it does.
pub(crate) fn target(dml: &DmlStatement) -> Option<KnowledgeBase> {
    let provider =
        datafusion::catalog::default_table_source::source_as_provider(&dml.target).ok()?;
    provider
        .downcast_ref::<KnowledgeBaseTable>()
        .map(|t| t.kb.clone())
}

/// A DELETE of a knowledge base as the plan of the ids of the documents it removes; other
/// writes are refused (documents change by inserting them again).
pub(crate) fn deleted_ids(dml: DmlStatement) -> Result<(KnowledgeBase, LogicalPlan)> {
    let kb = target(&dml).ok_or_else(|| Error::internal("not a knowledge base"))?;
    if dml.op != WriteOp::Delete {
        return Err(Error::invalid(format!(
            "Knowledge base '{}' takes INSERT (which replaces documents of the same id) and DELETE; {} is not supported",
            kb.name, dml.op
        )));
    }
    let ids = LogicalPlanBuilder::from(dml.input.as_ref().clone())
        .project(vec![Expr::Column(Column::new_unqualified(ID))])?
        .distinct()?
        .build()?;
    Ok((kb, ids))
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
    let db = chunk_db(&kb.project);
    let read = job.snapshot.table(&db, &kb.name)?;
    let guard = job.lock(handle)?;
    let key = kb.name.to_ascii_lowercase();
    let current = tables::get(&guard.txn.open_table(TABLES)?, job.tenant, &db, &key)?;
    if current.as_ref().map(|r| r.id) != read.as_ref().map(|r| r.id) {
        return Ok(Staged::TargetChanged);
    }
    if let Some(record) = current {
        remove_documents(&guard.txn, job, &record, &found)?;
    }
    guard.commit()?;
    Ok(Staged::Done(found.len() as u64))
}

/// Removes, inside the write transaction, the chunks of the documents `ids`.
fn remove_documents(
    txn: &redb::WriteTransaction,
    job: &WriteJob,
    record: &TableRecord,
    ids: &HashSet<String>,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let rewrite = tables::plan_rewrite(txn, record, job.spool(), |batch| {
        let id = batch.column(0).as_string::<i32>();
        let keep: BooleanArray = id
            .iter()
            .map(|id| Some(!id.is_some_and(|id| ids.contains(id))))
            .collect();
        if keep.true_count() == batch.num_rows() {
            return Ok(None);
        }
        Ok(Some(filter_record_batch(&batch, &keep)?))
    })?;
    if !tables::apply_rewrite(txn, job.tenant, record.clone(), rewrite)? {
        return Err(Error::internal(
            "a rewrite planned inside its transaction did not apply",
        ));
    }
    Ok(())
}

/// Documents on their way into the chunk table.
struct Ingest<'a> {
    kb: &'a KnowledgeBase,
    connector: &'a Connector,
    endpoint: embeddings::Endpoint,
    /// The chunk table's schema: the existing table's, or fixed by the first rows.
    schema: Option<SchemaRef>,
    /// Ids of the documents inserted (their old chunks go).
    ids: HashSet<String>,
    documents: u64,
    staged: Option<StagedRows>,
}

impl Ingest<'_> {
    /// Chunks, embeds and stages the documents of one source batch.
    fn add(&mut self, handle: &Handle, job: &WriteJob, batch: &RecordBatch) -> Result<()> {
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
        let ids: Vec<String> = match position(&kb.id_column) {
            Some(at) => {
                let column = strict_cast(batch.column(at), &DataType::Utf8)?;
                let column = column.as_string::<i32>();
                (0..column.len())
                    .map(|row| match column.is_null(row) {
                        true => Err(Error::invalid(format!(
                            "The id column '{}' is NULL in a row inserted into knowledge base '{}'",
                            kb.id_column, kb.name
                        ))),
                        false => Ok(column.value(row).to_string()),
                    })
                    .collect::<Result<_>>()?
            }
            // MindsDB's way without an id column: the document's content names it.
            None => (0..batch.num_rows())
                .map(|row| {
                    let mut hash = Sha256::new();
                    for (_, text) in &contents {
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
                .collect(),
        };
        let mut rows = Vec::new();
        let mut chunk_ids = Vec::new();
        let mut texts = Vec::new();
        for (row, id) in ids.iter().enumerate() {
            // Which of two rows of one document should win is not for the engine to guess.
            if !self.ids.insert(id.clone()) {
                return Err(Error::invalid(format!(
                    "Document id '{id}' is given twice in one INSERT INTO knowledge base '{}'",
                    kb.name
                )));
            }
            self.documents += 1;
            for (column, text) in &contents {
                let text = text.as_string::<i32>();
                if text.is_null(row) {
                    continue;
                }
                let pieces = chunking::chunks(text.value(row), kb.chunk_size, kb.chunk_overlap);
                let total = pieces.len();
                for (n, piece) in pieces.into_iter().enumerate() {
                    rows.push(u32::try_from(row).map_err(|_| Error::invalid("batch too large"))?);
                    chunk_ids.push(format!(
                        "{id}:{column}:{}of{total}:{}to{}",
                        n + 1,
                        piece.start,
                        piece.end
                    ));
                    texts.push(piece.text.to_string());
                }
            }
        }
        if texts.is_empty() {
            return Ok(());
        }
        let embedding = embeddings::embed(&self.connector.client, &self.endpoint, &texts);
        let vectors = handle
            .block_on(job.unless_cancelled(embedding))
            .ok_or_else(crate::store::cancelled)??;
        if vectors.len() != texts.len() {
            return Err(Error::internal("the embedding model lost texts"));
        }
        let dimensions = vectors[0].len();
        let rows = UInt32Array::from(rows);
        let metadata_columns: Vec<(String, ArrayRef)> = metadata
            .iter()
            .map(|(name, data_type)| {
                let column = match position(name) {
                    Some(at) => strict_cast(batch.column(at), data_type)?,
                    None => new_null_array(data_type, batch.num_rows()),
                };
                Ok((name.clone(), take(&column, &rows, None)?))
            })
            .collect::<Result<_>>()?;
        let schema = match &self.schema {
            Some(schema) => Arc::clone(schema),
            None => {
                let mut fields = vec![
                    Field::new(ID, DataType::Utf8, true),
                    Field::new(CHUNK_ID, DataType::Utf8, true),
                    Field::new(CHUNK_CONTENT, DataType::Utf8, true),
                    Field::new(METADATA, DataType::Utf8, true),
                ];
                fields.extend(
                    metadata_columns
                        .iter()
                        .map(|(name, array)| Field::new(name, array.data_type().clone(), true)),
                );
                fields.push(vector_field(dimensions)?);
                let schema = Arc::new(Schema::new(fields));
                self.schema = Some(Arc::clone(&schema));
                schema
            }
        };
        let stored_dimensions = match schema.fields().last().map(|f| f.data_type()) {
            Some(DataType::FixedSizeList(_, n)) => usize::try_from(*n).unwrap_or(0),
            _ => 0,
        };
        if stored_dimensions != dimensions {
            return Err(Error::invalid(format!(
                "The embedding model answered vectors of {dimensions} dimensions; knowledge base '{}' holds vectors of {stored_dimensions}",
                kb.name
            )));
        }
        let flat: Float32Array = vectors.into_iter().flatten().collect();
        let DataType::FixedSizeList(item, _) = vector_field(dimensions)?.data_type().clone() else {
            return Err(Error::internal("a vector field is a fixed-size list"));
        };
        let vectors = FixedSizeListArray::try_new(
            item,
            i32::try_from(dimensions).map_err(|_| Error::invalid("too many dimensions"))?,
            Arc::new(flat),
            None,
        )?;
        let ids = StringArray::from(ids);
        let mut columns: Vec<ArrayRef> = vec![
            take(&ids, &rows, None)?,
            Arc::new(StringArray::from(chunk_ids)),
            Arc::new(StringArray::from(texts)),
            Arc::new(metadata_json(&metadata_columns, rows.len())?),
        ];
        columns.extend(metadata_columns.into_iter().map(|(_, array)| array));
        columns.push(Arc::new(vectors));
        let chunk_rows = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let staged = self
            .staged
            .get_or_insert_with(|| job.staged(&kb.name, Arc::clone(&schema)));
        staged.push(chunk_rows)?;
        Ok(())
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

fn vector_field(dimensions: usize) -> Result<Field> {
    let size = i32::try_from(dimensions).map_err(|_| Error::invalid("too many dimensions"))?;
    Ok(Field::new(
        EMBEDDINGS,
        DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), size),
        true,
    ))
}

/// Each of `rows` rows' metadata as one JSON object (columns with NULL left out).
fn metadata_json(columns: &[(String, ArrayRef)], rows: usize) -> Result<StringArray> {
    if columns.is_empty() {
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
