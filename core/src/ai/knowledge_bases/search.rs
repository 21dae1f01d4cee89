//! How a knowledge base search ranks (which searches a query's conditions ask for is
//! `query`'s to read): the question is embedded; `hybrid_search = true` mixes keyword (BM25) scores into
//! the vector distances, `hybrid_search_alpha = a` weighs them (1: vectors only, 0: keywords
//! only; 0.5 when only `hybrid_search` is given); `reranking = false` skips the knowledge
//! base's reranker. Conditions on `distance` or `relevance` hold for the final scores; every
//! other condition selects chunks before they are ranked (the nodes of the rows it keeps), and
//! the search looks among those only, so a filtered search keeps its recall.
//!
//! The vector side walks the knowledge base's HNSW graph, or computes every distance when few
//! chunks are searched (`knowledge_bases.exact_below`) or conditions on scores may drop any
//! row. The keyword side scores the chunks holding the question's words from the keyword
//! index. Mixed, `distance = a·vector distance + (1 − a)·(1 − bm25 / best bm25)` over both
//! sides' best. With a reranker, the nearest `min(2·LIMIT, LIMIT + 30)` candidates (MindsDB's
//! number) are scored by it, `relevance` is its score and the rows come most relevant first;
//! otherwise `relevance = 1 / (1 + distance)` and they come nearest first.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Float64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{
    concat_batches, filter_record_batch, interleave_record_batch, take_record_batch,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef, UInt32Type};
use datafusion::physical_expr::PhysicalExpr;

use datafusion::logical_expr::Expr;
use futures::StreamExt;

use super::pgvector::{PgSearch, PgStore};
use crate::catalog::kb_index::{self, KbIndex};
use crate::catalog::knowledge_bases::KnowledgeBase;
use crate::catalog::tables::ReadTables;
use crate::config::KnowledgeBasesConfig;
use crate::error::{Error, Result};
use crate::services::embeddings;
use crate::services::llm::Connector;
use crate::services::reranker;
use crate::sql::catalog::snapshot::Snapshot;

/// The search condition's column.
pub(crate) const CONTENT: &str = "content";
pub(crate) use crate::catalog::knowledge_bases::CHUNK_CONTENT;
/// Whether keyword scores are mixed in.
pub(crate) const HYBRID_SEARCH: &str = "hybrid_search";
/// The vector side's weight in a hybrid search.
pub(crate) const HYBRID_SEARCH_ALPHA: &str = "hybrid_search_alpha";
/// Whether the knowledge base's reranker scores the results.
pub(crate) const RERANKING: &str = "reranking";
/// Questions one knowledge base query may ask, searches and exclusions together, and branches
/// it may spread into (see `query`): each question is embedded and searched, so a query's cost
/// stays a small multiple of one search's.
pub(crate) const MAX_QUESTIONS: usize = 16;
/// Candidates read back from the chunk table at a time while conditions on scores are checked.
const WINDOW: usize = 256;
/// Candidates each side of a mixed search brings, at least.
const HYBRID_POOL: usize = 100;

/// What a search asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Search {
    pub(crate) question: String,
    /// Weight of the vector distance against the keyword one: 1 is a vector search.
    pub(crate) alpha: f64,
    /// Whether the reranker (if the knowledge base has one) scores the results.
    pub(crate) reranking: bool,
}

/// Chunk rows as a search shows them: the stored columns but the node, then `distance`,
/// `relevance`, `content` and the search's settings.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    pub(crate) schema: SchemaRef,
    /// Whether the knowledge base has a reranker.
    pub(crate) reranker: bool,
}

impl Shown {
    /// `stored` rows (the chunk table's columns) with their scores and `search`'s settings.
    pub(crate) fn batch(
        &self,
        stored: &RecordBatch,
        distance: ArrayRef,
        relevance: ArrayRef,
        search: Option<&Search>,
    ) -> Result<RecordBatch> {
        let rows = stored.num_rows();
        let last = stored.num_columns() - 1;
        let mut columns: Vec<ArrayRef> = stored.columns()[..last].to_vec();
        columns.push(distance);
        columns.push(relevance);
        columns.push(Arc::clone(stored.column(2)));
        let (hybrid, alpha, reranking): (ArrayRef, ArrayRef, ArrayRef) = match search {
            Some(search) => (
                // bounded: the rows of a batch of results in memory
                Arc::new(BooleanArray::from(vec![search.alpha < 1.0; rows])),
                // bounded: the rows of a batch of results in memory
                Arc::new(Float64Array::from(vec![search.alpha; rows])),
                Arc::new(BooleanArray::from(vec![
                    search.reranking && self.reranker;
                    rows
                ])),
            ),
            None => (
                new_null_array(&DataType::Boolean, rows),
                new_null_array(&DataType::Float64, rows),
                new_null_array(&DataType::Boolean, rows),
            ),
        };
        columns.extend([hybrid, alpha, reranking]);
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// A search of one knowledge base's chunk table, run when its plan executes.
pub(crate) struct Ranking {
    pub(crate) kb: KnowledgeBase,
    pub(crate) snapshot: Arc<Snapshot>,
    /// The chunk table's id.
    pub(crate) table: u64,
    pub(crate) search: Search,
    /// Questions whose relevant chunks are left out (see `query`).
    pub(crate) excluded: Vec<String>,
    pub(crate) shown: Shown,
    /// Where the chunks are when in PostgreSQL: the search runs there.
    pub(crate) store: Option<PgStore>,
    /// Conditions selecting chunks before they are ranked, as written (for PostgreSQL).
    pub(crate) row_filters: Vec<Expr>,
    /// Conditions selecting chunks before they are ranked.
    pub(crate) rows: Option<Arc<dyn PhysicalExpr>>,
    /// Conditions on the final `distance` and `relevance`.
    pub(crate) scores: Option<Arc<dyn PhysicalExpr>>,
    /// Rows wanted.
    pub(crate) limit: usize,
}

impl fmt::Debug for Ranking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ranking")
            .field("kb", &self.kb.name)
            .field("search", &self.search)
            .field("excluded", &self.excluded)
            .field("limit", &self.limit)
            .finish()
    }
}

/// A candidate row of a search: its node and final distance.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    node: u32,
    distance: f64,
}

impl Ranking {
    /// The found rows as shown, best first: the question embedded (unless the search is by
    /// keywords only), the chunks ranked on a blocking thread, then reranked if asked.
    pub(crate) async fn run(
        self: Arc<Self>,
        connector: Arc<Connector>,
    ) -> Result<Vec<RecordBatch>> {
        // The question and the excluded ones, embedded in one request.
        let mut vectors = match self.search.alpha > 0.0 {
            true => {
                let mut texts = vec![self.search.question.clone()];
                texts.extend(self.excluded.iter().cloned());
                self.embed(&connector, texts)
                    .await?
                    .into_iter()
                    .map(Some)
                    .collect()
            }
            // bounded: one per condition of the parsed statement
            false => vec![None; 1 + self.excluded.len()],
        };
        let query = vectors.remove(0);
        let reranker = self
            .kb
            .reranking_model
            .clone()
            .filter(|_| self.search.reranking);
        let wanted = match reranker {
            // MindsDB's number of candidates for its reranker.
            Some(_) => self
                .limit
                .saturating_mul(2)
                .min(self.limit.saturating_add(30)),
            None => self.limit,
        };
        let settings = connector.knowledge_bases.clone();
        let this = Arc::clone(&self);
        let check = reranker.is_none();
        let found = match &self.store {
            Some(store) => {
                self.remote_best(store, query.as_deref(), &vectors, wanted, check, &settings)
                    .await?
            }
            None => crate::memory::spawn_blocking(move || {
                this.best(query.as_deref(), &vectors, wanted, check, &settings)
            })
            .await
            .map_err(|e| Error::internal(format!("a knowledge base search failed: {e}")))??,
        };
        let Some(settings) = reranker else {
            return Ok(found);
        };
        let Some(first) = found.first() else {
            return Ok(found);
        };
        let found = concat_batches(&first.schema(), &found)?;
        let content = found
            .schema()
            .index_of("chunk_content")
            .map_err(|e| Error::internal(e.to_string()))?;
        let texts: Vec<String> = found
            .column(content)
            .as_string::<i32>()
            .iter()
            .map(|t| t.unwrap_or_default().to_string())
            .collect();
        connector
            .meter
            .take(self.snapshot.tenant, texts.len() as u64)
            .await?;
        let relevance =
            reranker::scores(&connector, &settings, &self.search.question, &texts).await?;
        let mut order: Vec<u32> = (0..u32::try_from(texts.len()).unwrap_or(u32::MAX)).collect();
        // Most relevant first; of equals, the nearer (they came nearest first).
        order.sort_by(|a, b| relevance[*b as usize].total_cmp(&relevance[*a as usize]));
        let position = found
            .schema()
            .index_of("relevance")
            .map_err(|e| Error::internal(e.to_string()))?;
        let mut columns = found.columns().to_vec();
        columns[position] = Arc::new(Float64Array::from(relevance));
        let scored = RecordBatch::try_new(found.schema(), columns)?;
        let mut ranked = take_record_batch(&scored, &UInt32Array::from(order))?;
        if let Some(scores) = &self.scores {
            ranked = filter(scores, &ranked)?;
        }
        Ok(vec![ranked.slice(0, ranked.num_rows().min(self.limit))])
    }

    /// The questions' normalised vectors, from the knowledge base's embedding model.
    async fn embed(&self, connector: &Connector, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        connector
            .meter
            .take(self.snapshot.tenant, texts.len() as u64)
            .await?;
        let endpoint = embeddings::endpoint(&self.kb.embedding_model, &connector.embedding());
        let vectors = embeddings::embed(connector, &endpoint, &texts).await?;
        if vectors.len() != texts.len() {
            return Err(Error::internal("no vector for the question"));
        }
        Ok(vectors)
    }

    /// [`Ranking::best`] of a knowledge base kept in PostgreSQL: ranked there in one
    /// statement, its rows streamed back until `wanted` pass the conditions checked here.
    async fn remote_best(
        &self,
        store: &PgStore,
        query: Option<&[f32]>,
        excluded: &[Option<Vec<f32>>],
        wanted: usize,
        check: bool,
        settings: &KnowledgeBasesConfig,
    ) -> Result<Vec<RecordBatch>> {
        let stored = self.snapshot.table_schema(self.table)?;
        let columns = PgStore::columns(&stored);
        let scores = self.scores.as_ref().filter(|_| check);
        let excluded_vectors: Vec<Vec<f32>> = excluded.iter().flatten().cloned().collect();
        let pool = match self.search.alpha < 1.0 {
            true => wanted.max(HYBRID_POOL),
            false => wanted,
        };
        let found = PgSearch {
            store,
            columns: &columns,
            query,
            question: &self.search.question,
            excluded_vectors: &excluded_vectors,
            excluded_texts: &self.excluded,
            alpha: self.search.alpha,
            filters: &self.row_filters,
            exhaustive: scores.is_some(),
            pool,
            ef_search: settings.ef_search,
        }
        .statement();
        let local = self.rows.as_ref().filter(|_| !found.all_pushed);
        let mut rows = std::pin::pin!(found.rows(stored, WINDOW.max(wanted.min(8192))));
        let mut out = Vec::new();
        let mut got = 0;
        // Dropping the stream once enough rows came cancels the rest on the server.
        while got < wanted {
            let Some(next) = rows.next().await else {
                break;
            };
            let (chunk, distance) = next?;
            let relevance: Float64Array = distance
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                .iter()
                .map(|d| d.map(|d| 1.0 / (1.0 + d)))
                .collect();
            let shown =
                self.shown
                    .batch(&chunk, distance, Arc::new(relevance), Some(&self.search))?;
            out.push(kept(shown, &[local, scores], wanted, &mut got)?);
        }
        Ok(out)
    }

    /// The first `wanted` rows by final distance, as shown (those the score conditions keep,
    /// with `check`), leaving out what the `excluded` questions (their vectors) find.
    fn best(
        &self,
        query: Option<&[f32]>,
        excluded: &[Option<Vec<f32>>],
        wanted: usize,
        check: bool,
        settings: &KnowledgeBasesConfig,
    ) -> Result<Vec<RecordBatch>> {
        let txn = &self.snapshot.txn;
        let Some(index) = kb_index::load(&self.snapshot.store, txn, self.table)? else {
            return Ok(Vec::new());
        };
        let dimensions = index.graph.params().dimensions;
        for vector in query
            .into_iter()
            .chain(excluded.iter().flatten().map(Vec::as_slice))
        {
            if vector.len() != dimensions {
                return Err(Error::invalid(format!(
                    "The embedding model answered a vector of {} dimensions for the question; knowledge base '{}' holds vectors of {dimensions} (was its embedding model changed?)",
                    vector.len(),
                    self.kb.name
                )));
            }
        }
        let allowed = match &self.rows {
            Some(predicate) => Some(self.allowed(predicate, &index)?),
            None => None,
        };
        let kept = |node: u32| allowed.as_ref().is_none_or(|a| a.contains(node));
        let count = allowed
            .as_ref()
            .map_or(index.graph.live() as usize, Bitset::count);
        // A chunk nearer an excluded question than the asked one is left out: by vector
        // distance, or without vectors (keywords only) by keyword score.
        let vectors: Vec<&[f32]> = excluded.iter().flatten().map(Vec::as_slice).collect();
        let mut left_out = Bitset::new(0);
        if query.is_none() && !self.excluded.is_empty() {
            left_out = Bitset::new(index.graph.nodes());
            let scores = |question: &str| -> Result<HashMap<u32, f64>> {
                let found =
                    kb_index::keyword_search(&index, txn, self.table, question, count, &kept)?;
                Ok(found.into_iter().collect())
            };
            let asked = scores(&self.search.question)?;
            for question in &self.excluded {
                for (node, score) in scores(question)? {
                    if score > asked.get(&node).copied().unwrap_or(0.0) {
                        left_out.insert(node);
                    }
                }
            }
        }
        // Distances are computed only when there is something to exclude (a search without
        // exclusions pays nothing here), and only for live nodes, which hold vectors.
        let nearer_excluded = |query: &[f32], node: u32| {
            if !index.graph.is_live(node) {
                return true;
            }
            let asked = index.graph.distance(query, node);
            vectors
                .iter()
                .any(|excluded| index.graph.distance(excluded, node) < asked)
        };
        let accept = |node: u32| {
            kept(node)
                && !left_out.contains(node)
                && (vectors.is_empty() || query.is_none_or(|query| !nearer_excluded(query, node)))
        };
        let filtered = allowed.is_some() || !self.excluded.is_empty();
        // Conditions on scores may drop any row: then every row is ranked.
        let scores = self.scores.as_ref().filter(|_| check);
        let exhaustive = scores.is_some() || count <= settings.exact_below;
        let candidates = self.candidates(
            &index,
            &self.search.question,
            query,
            &accept,
            filtered,
            count,
            wanted,
            exhaustive,
            settings,
        )?;
        self.read_best(&index, &candidates, wanted, scores)
    }

    /// The nodes whose rows the row conditions keep.
    fn allowed(&self, predicate: &Arc<dyn PhysicalExpr>, index: &KbIndex) -> Result<Bitset> {
        let txn = &self.snapshot.txn;
        let mut allowed = Bitset::new(index.graph.nodes());
        for (_, chunk) in txn.chunk_order_of(self.table)? {
            let stored = self.chunk(chunk)?;
            let rows = stored.num_rows();
            let nulls = new_null_array(&DataType::Float64, rows);
            let shown = self.shown.batch(&stored, Arc::clone(&nulls), nulls, None)?;
            let hits = predicate.evaluate(&shown)?.into_array(rows)?;
            let hits = hits.as_boolean();
            let nodes = stored.column(stored.num_columns() - 1);
            let nodes = nodes.as_primitive::<UInt32Type>();
            for row in 0..rows {
                if hits.is_valid(row) && hits.value(row) && nodes.is_valid(row) {
                    allowed.insert(nodes.value(row));
                }
            }
        }
        Ok(allowed)
    }

    /// The ranked candidates for `question` (its vector `query`): nearest by vector, best by
    /// keywords, or both mixed.
    #[allow(clippy::too_many_arguments)]
    fn candidates(
        &self,
        index: &KbIndex,
        question: &str,
        query: Option<&[f32]>,
        accept: &dyn Fn(u32) -> bool,
        filtered: bool,
        count: usize,
        wanted: usize,
        exhaustive: bool,
        settings: &KnowledgeBasesConfig,
    ) -> Result<Vec<Candidate>> {
        let alpha = self.search.alpha;
        let filter = filtered.then_some(accept);
        // Each side of a mixed search brings more than the rows wanted, so the mix has
        // enough to choose from.
        let pool = match exhaustive {
            true => count,
            false if alpha < 1.0 => wanted.max(HYBRID_POOL),
            false => wanted,
        };
        let nearest: Vec<(u32, f64)> = match query {
            Some(query) if exhaustive => pairs(&index.graph.exact(query, pool, filter)),
            Some(query) => pairs(&index.graph.search(
                query,
                pool,
                settings.ef_search.max(pool),
                filter,
            )),
            None => Vec::new(),
        };
        if alpha >= 1.0 {
            return Ok(nearest
                .into_iter()
                .map(|(node, distance)| Candidate { node, distance })
                .collect());
        }
        let keywords = kb_index::keyword_search(
            index,
            &self.snapshot.txn,
            self.table,
            question,
            pool,
            accept,
        )?;
        let best = keywords.first().map_or(0.0, |(_, score)| *score);
        let keyword_distance = |score: f64| match best > 0.0 {
            true => 1.0 - score / best,
            false => 1.0,
        };
        let mut candidates: Vec<Candidate> = match query {
            // Keywords only: a chunk without any of the question's words is no match.
            None => keywords
                .iter()
                .map(|(node, score)| Candidate {
                    node: *node,
                    distance: keyword_distance(*score),
                })
                .collect(),
            Some(query) => {
                let scores: HashMap<u32, f64> = keywords.iter().copied().collect();
                let mut vector: HashMap<u32, f64> = nearest.into_iter().collect();
                for (node, _) in &keywords {
                    vector
                        .entry(*node)
                        .or_insert_with(|| f64::from(index.graph.distance(query, *node)));
                }
                vector
                    .into_iter()
                    .map(|(node, distance)| Candidate {
                        node,
                        distance: alpha * distance
                            + (1.0 - alpha)
                                * keyword_distance(scores.get(&node).copied().unwrap_or(0.0)),
                    })
                    .collect()
            }
        };
        candidates.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.node.cmp(&b.node)));
        Ok(candidates)
    }

    /// The first `wanted` of the ordered `candidates` that the score conditions keep, read
    /// back from their chunks and shown.
    fn read_best(
        &self,
        index: &KbIndex,
        candidates: &[Candidate],
        wanted: usize,
        scores: Option<&Arc<dyn PhysicalExpr>>,
    ) -> Result<Vec<RecordBatch>> {
        let txn = &self.snapshot.txn;
        let rows = index.rows(txn, self.table)?;
        let order = txn.chunk_order_of(self.table)?;
        let mut out = Vec::new();
        let (mut found, mut next) = (0, 0);
        while found < wanted && next < candidates.len() {
            // Conditions on scores may drop rows: read ahead a window at a time.
            let size = match scores {
                Some(_) => WINDOW.max(wanted - found),
                None => wanted - found,
            };
            let window = &candidates[next..(next + size).min(candidates.len())];
            next += window.len();
            let mut chunks: HashMap<usize, usize> = HashMap::new();
            let mut batches = Vec::new();
            // bounded: a window of candidates in memory
            let mut picks = Vec::with_capacity(window.len());
            for candidate in window {
                let (position, row) = kb_index::row_of(rows, candidate.node).ok_or_else(|| {
                    Error::internal("a knowledge base's index names a chunk its table lacks")
                })?;
                let at = match chunks.get(&position) {
                    Some(at) => *at,
                    None => {
                        let (_, chunk) = order.get(position).ok_or_else(|| {
                            Error::internal("a knowledge base's chunk went missing")
                        })?;
                        batches.push(self.chunk(*chunk)?);
                        chunks.insert(position, batches.len() - 1);
                        batches.len() - 1
                    }
                };
                picks.push((at, row));
            }
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            let stored = interleave_record_batch(&refs, &picks)?;
            let distance: Float64Array = window.iter().map(|c| Some(c.distance)).collect();
            let relevance: Float64Array = window
                .iter()
                .map(|c| Some(1.0 / (1.0 + c.distance)))
                .collect();
            let shown = self.shown.batch(
                &stored,
                Arc::new(distance),
                Arc::new(relevance),
                Some(&self.search),
            )?;
            out.push(kept(shown, &[scores], wanted, &mut found)?);
        }
        Ok(out)
    }

    /// One chunk of the chunk table, through the store's chunk cache.
    fn chunk(&self, chunk: u64) -> Result<RecordBatch> {
        let cache = &self.snapshot.store.chunk_cache;
        let key = (self.table, chunk);
        if let Some(batch) = cache.get(key) {
            return Ok(batch);
        }
        let batch = self.snapshot.txn.chunk(self.table, chunk)?;
        if cache.admit(key) {
            cache.insert(key, batch.clone());
        }
        Ok(batch)
    }
}

/// Neighbours as (node, distance) pairs.
fn pairs(found: &[mindlite_vectors::hnsw::Neighbour]) -> Vec<(u32, f64)> {
    found
        .iter()
        .map(|n| (n.node, f64::from(n.distance)))
        .collect()
}

/// The rows of `shown` that every one of `conditions` holds for, no more than are still
/// `wanted` beyond the `found` ones (which they are counted into).
fn kept(
    mut shown: RecordBatch,
    conditions: &[Option<&Arc<dyn PhysicalExpr>>],
    wanted: usize,
    found: &mut usize,
) -> Result<RecordBatch> {
    for condition in conditions.iter().flatten() {
        shown = filter(condition, &shown)?;
    }
    let take = shown.num_rows().min(wanted.saturating_sub(*found));
    *found += take;
    Ok(shown.slice(0, take))
}

/// The rows of `batch` that `predicate` holds for.
fn filter(predicate: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<RecordBatch> {
    let hits = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
    Ok(filter_record_batch(batch, hits.as_boolean())?)
}

/// A set of node ids.
struct Bitset {
    words: Vec<u64>,
    count: usize,
}

impl Bitset {
    fn new(nodes: u32) -> Bitset {
        Bitset {
            // bounded: one bit per node of an index in memory
            words: vec![0; (nodes as usize).div_ceil(64)],
            count: 0,
        }
    }

    fn insert(&mut self, node: u32) {
        let Some(word) = self.words.get_mut(node as usize / 64) else {
            return;
        };
        let bit = 1u64 << (node % 64);
        if *word & bit == 0 {
            *word |= bit;
            self.count += 1;
        }
    }

    fn contains(&self, node: u32) -> bool {
        self.words
            .get(node as usize / 64)
            .is_some_and(|w| w & (1u64 << (node % 64)) != 0)
    }

    fn count(&self) -> usize {
        self.count
    }
}
