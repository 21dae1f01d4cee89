//! A knowledge base's search indexes, in the redb file beside its chunk table and changed in the
//! same write transactions as its rows: the vector index (an HNSW graph, see `hnsw`) and the
//! keyword index (BM25 postings). Owns the redb tables `kb_indexes` (one record per chunk
//! table: a version stamp, the graph's counters, the words of its chunks), `kb_links` and
//! `kb_vectors` (the graph's pages) and `kb_postings` (per word and block of 65,536 nodes,
//! the chunks holding it).
//!
//! Every chunk row carries the id of its node in the last column of the chunk table (`node`);
//! the node's vector lives in the index, nowhere else. Readers share one [`KbIndex`] per
//! version, loaded once into the store's cache of derived data; a writer changes a copy
//! ([`IndexWriter`]), which stores only the pages and postings it changed, under a new stamp.
//! The bytes of pages, postings and records are counted to the knowledge base's tenant
//! through `storage`, in the transaction that changes them.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::UInt32Type;
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::bm25;
use crate::catalog::landing::{self, Landed};
use crate::catalog::storage::{self, Change};
use crate::catalog::tables::ReadTables;
use crate::error::{Error, Result};
use crate::store::schema::{KB_INDEXES, KB_LINKS, KB_POSTINGS, KB_VECTORS};
use crate::store::Store;
use crate::tenant::TenantId;
use mindlite_vectors::hnsw::{Graph, Params, Shape};

/// Bytes of one stored part of a page's vectors: redb gives large values power-of-two
/// extents, so parts just under one keep the file from growing by a third.
const VECTOR_PART: usize = (1 << 20) - 4096;
/// Nodes per block of postings: appending a chunk rewrites only its words' last blocks.
const BLOCK_SHIFT: u32 = 16;

/// Creates this module's redb tables in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(KB_INDEXES)?;
    txn.open_table(KB_LINKS)?;
    txn.open_table(KB_VECTORS)?;
    txn.open_table(KB_POSTINGS)?;
    Ok(())
}

/// What `kb_indexes` holds for one chunk table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct IndexRecord {
    /// Changes with every write, never to a value used before (random), so a version in
    /// memory is known to be the file's exactly when the stamps agree.
    pub(crate) stamp: u64,
    pub(crate) shape: Shape,
    /// Words in the live chunks, for their average length.
    pub(crate) words: u64,
}

/// A chunk holding a word: its node, the word's count in it and its length in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posting {
    pub(crate) node: u32,
    pub(crate) count: u32,
    pub(crate) length: u32,
}

/// A knowledge base's indexes in memory, at one version of its chunk table.
#[derive(Debug)]
pub(crate) struct KbIndex {
    pub(crate) record: IndexRecord,
    pub(crate) graph: Graph,
    /// Where each node's row is: (position of its chunk in the table's order) << 32 | row;
    /// `u64::MAX` for none. Found on first need.
    rows: OnceLock<Vec<u64>>,
}

impl KbIndex {
    /// BM25's view of the chunks.
    pub(crate) fn corpus(&self) -> bm25::Corpus {
        let chunks = u64::from(self.graph.live());
        bm25::Corpus {
            chunks,
            average_length: self.record.words as f64 / chunks.max(1) as f64,
        }
    }

    /// Where each node's row is in the chunk table `table` (whose last column holds the
    /// nodes), as `txn` holds it: its chunk's position in the table's order and its row.
    pub(crate) fn rows(&self, txn: &impl ReadTables, table: u64) -> Result<&[u64]> {
        if let Some(rows) = self.rows.get() {
            return Ok(rows);
        }
        // bounded: one slot per node of a graph already in memory
        let mut rows = vec![u64::MAX; self.graph.nodes() as usize];
        let node_column = txn.schema_of(table)?.fields().len() - 1;
        for (position, (_, chunk)) in txn.chunk_order_of(table)?.into_iter().enumerate() {
            let nodes = txn.chunk_columns(table, chunk, vec![node_column])?;
            for (row, node) in nodes
                .column(0)
                .as_primitive::<UInt32Type>()
                .iter()
                .enumerate()
            {
                let slot = node
                    .and_then(|n| rows.get_mut(n as usize))
                    .ok_or_else(|| Error::internal("a chunk row names a node the index lacks"))?;
                *slot = ((position as u64) << 32) | row as u64;
            }
        }
        Ok(self.rows.get_or_init(|| rows))
    }
}

/// Reading indexes, from a read snapshot or a write transaction alike.
pub(crate) trait ReadIndex {
    /// The index record of the chunk table `table`, if it has indexes.
    fn index_record(&self, table: u64) -> Result<Option<IndexRecord>>;
    /// The graph of `table` at `shape`, from its pages.
    fn index_graph(&self, table: u64, shape: Shape) -> Result<Graph>;
    /// Every posting of `word` in `table`, nodes ascending.
    fn postings(&self, table: u64, word: &str) -> Result<Vec<Posting>>;
}

macro_rules! read_index {
    ($txn:ty) => {
        impl ReadIndex for $txn {
            fn index_record(&self, table: u64) -> Result<Option<IndexRecord>> {
                match self.open_table(KB_INDEXES)?.get(table)? {
                    Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
                    None => Ok(None),
                }
            }

            fn index_graph(&self, table: u64, shape: Shape) -> Result<Graph> {
                let links = self.open_table(KB_LINKS)?;
                let vectors = self.open_table(KB_VECTORS)?;
                let pages = shape
                    .nodes
                    .div_ceil(mindlite_vectors::hnsw::PAGE_NODES as u32);
                // bounded: the pages of an index stored in the file
                let mut stored = Vec::with_capacity(pages as usize);
                for page in 0..pages {
                    let Some(page_links) = links.get((table, page))? else {
                        stored.push(None);
                        continue;
                    };
                    let mut bytes = Vec::new();
                    for part in vectors.range((table, page, 0)..=(table, page, u32::MAX))? {
                        bytes.extend_from_slice(part?.1.value());
                    }
                    stored.push(Some((page_links.value().to_vec(), bytes)));
                }
                Ok(Graph::decode(shape, stored)?)
            }

            fn postings(&self, table: u64, word: &str) -> Result<Vec<Posting>> {
                let postings = self.open_table(KB_POSTINGS)?;
                let mut out = Vec::new();
                for block in postings.range((table, word, 0)..=(table, word, u32::MAX))? {
                    decode_postings(block?.1.value(), &mut out)?;
                }
                Ok(out)
            }
        }
    };
}

read_index!(WriteTransaction);
read_index!(redb::ReadTransaction);

/// The indexes of the chunk table `table` as `txn` holds them (`None` before its first
/// insert): from the store's cache when that version is there, else read and cached.
pub(crate) fn load(
    store: &Store,
    txn: &impl ReadIndex,
    table: u64,
) -> Result<Option<Arc<KbIndex>>> {
    let Some(record) = txn.index_record(table)? else {
        return Ok(None);
    };
    if let Some(index) = store.derived.get::<KbIndex>((table, record.stamp)) {
        return Ok(Some(index));
    }
    let graph = txn.index_graph(table, record.shape)?;
    let index = Arc::new(KbIndex {
        record,
        graph,
        rows: OnceLock::new(),
    });
    publish(store, table, &index);
    Ok(Some(index))
}

/// Puts a version into the store's cache (a writer's, once it committed).
pub(crate) fn publish(store: &Store, table: u64, index: &Arc<KbIndex>) {
    let bytes = index.graph.memory_bytes() + index.graph.nodes() as usize * 8;
    store
        .derived
        .insert((table, index.record.stamp), Arc::clone(index), bytes);
}

/// Unlinks the indexes of the chunk table `table` (dropped with it), a table of `tenant`: their
/// record goes now, so no reader finds them, and their pages and postings, as many as the
/// knowledge base's chunks, are left to the sweeper ([`sweep_step`]), so that a DROP holds the
/// writer lock no longer than any small write.
pub(crate) fn drop_index(txn: &WriteTransaction, tenant: TenantId, table: u64) -> Result<()> {
    let removed = txn
        .open_table(KB_INDEXES)?
        .remove(table)?
        .map(|record| record.value().len() as u64);
    let Some(freed) = removed else {
        return Ok(());
    };
    landing::begin(
        txn,
        &Landed::Search {
            tenant: tenant.0,
            table,
        },
    )?;
    storage::charge(txn, tenant, Change::removed(freed))
}

/// Stored values a step of [`sweep_step`] removes from each of the index's tables: vector
/// parts are up to 1 MiB each, so a step frees a few MiB at most.
const SWEPT_A_STEP: [usize; 3] = [8, 256, 1024];

/// Removes some of the pages and postings that the dropped indexes of the chunk table `table`,
/// a table of `tenant`, left (see [`drop_index`]), counting the bytes freed; true once none
/// is left.
pub(crate) fn sweep_step(txn: &WriteTransaction, tenant: TenantId, table: u64) -> Result<bool> {
    let [vector_parts, link_pages, posting_blocks] = SWEPT_A_STEP;
    let mut freed = 0u64;
    let mut found = 0usize;
    {
        let mut vectors = txn.open_table(KB_VECTORS)?;
        let keys = vectors
            .range((table, 0, 0)..=(table, u32::MAX, u32::MAX))?
            .take(vector_parts)
            .map(|entry| entry.map(|(key, _)| key.value()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        found += keys.len();
        for key in keys {
            if let Some(old) = vectors.remove(key)? {
                freed += old.value().len() as u64;
            }
        }
    }
    {
        let mut links = txn.open_table(KB_LINKS)?;
        let keys = links
            .range((table, 0)..=(table, u32::MAX))?
            .take(link_pages)
            .map(|entry| entry.map(|(key, _)| key.value()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        found += keys.len();
        for key in keys {
            if let Some(old) = links.remove(key)? {
                freed += old.value().len() as u64;
            }
        }
    }
    {
        let mut postings = txn.open_table(KB_POSTINGS)?;
        let keys = postings
            .range((table, "", 0)..(table, "\u{10FFFF}", u32::MAX))?
            .take(posting_blocks)
            .map(|entry| {
                entry.map(|(key, _)| {
                    let (_, word, block) = key.value();
                    (word.to_string(), block)
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        found += keys.len();
        for (word, block) in keys {
            if let Some(old) = postings.remove((table, word.as_str(), block))? {
                freed += old.value().len() as u64;
            }
        }
    }
    storage::charge(txn, tenant, Change::removed(freed))?;
    Ok(found == 0)
}

/// The bytes of every chunk table's indexes, by table id (a file's first count, see
/// `storage`).
pub(crate) fn stored_bytes(txn: &WriteTransaction) -> Result<BTreeMap<u64, u64>> {
    let mut bytes = BTreeMap::new();
    let mut add = |table: u64, value: &[u8]| {
        *bytes.entry(table).or_insert(0) += value.len() as u64;
    };
    for entry in txn.open_table(KB_INDEXES)?.iter()? {
        let (key, value) = entry?;
        add(key.value(), value.value().as_bytes());
    }
    for entry in txn.open_table(KB_LINKS)?.iter()? {
        let (key, value) = entry?;
        add(key.value().0, value.value());
    }
    for entry in txn.open_table(KB_VECTORS)?.iter()? {
        let (key, value) = entry?;
        add(key.value().0, value.value());
    }
    for entry in txn.open_table(KB_POSTINGS)?.iter()? {
        let (key, value) = entry?;
        add(key.value().0, value.value());
    }
    Ok(bytes)
}

/// The `k` chunks that score best for the words of `question` among those `accept` takes,
/// best first (ties: lower node first), with their BM25 scores (none without any of its
/// words). The words' postings, each ascending by node, are merged, so a chunk's score is
/// summed where its postings meet and only the best `k` are ever kept: common words with
/// postings in most chunks cost a pass over them, not a map and a sort of every chunk.
pub(crate) fn keyword_search(
    index: &KbIndex,
    txn: &impl ReadIndex,
    table: u64,
    question: &str,
    k: usize,
    accept: &dyn Fn(u32) -> bool,
) -> Result<Vec<(u32, f64)>> {
    let corpus = index.corpus();
    let lists = bm25::terms(question)
        .iter()
        .map(|term| txn.postings(table, term))
        .collect::<Result<Vec<_>>>()?;
    let weights: Vec<bm25::Weight> = lists
        .iter()
        .map(|list| corpus.weight(list.len() as u64))
        .collect();
    // Each list's next posting, smallest node first (ties: the question's word order, so a
    // chunk's score adds up in the same order whatever the lists hold).
    let mut next: BinaryHeap<Reverse<(u32, usize)>> = lists
        .iter()
        .enumerate()
        .filter_map(|(i, list)| Some(Reverse((list.first()?.node, i))))
        .collect();
    // bounded: one per word of the question, whose text is in memory
    let mut at = vec![0usize; lists.len()];
    // bounded: k clamped to 4,096; more results grow the heap as they are found
    let mut best: BinaryHeap<Reverse<Scored>> = BinaryHeap::with_capacity(k.min(4096) + 1);
    while let Some(&Reverse((node, _))) = next.peek() {
        let mut score = 0.0;
        // The lists at `node` move on, each by replacing its entry in place (one sift).
        while let Some(mut top) = next.peek_mut() {
            let Reverse((n, i)) = *top;
            if n != node {
                break;
            }
            let posting = lists[i][at[i]];
            score += weights[i].score(posting.count, posting.length);
            at[i] += 1;
            match lists[i].get(at[i]) {
                Some(following) => *top = Reverse((following.node, i)),
                None => {
                    PeekMut::pop(top);
                }
            }
        }
        if score <= 0.0 || k == 0 {
            continue;
        }
        let scored = Scored { score, node };
        // Most chunks of a common word score below the worst kept: one comparison each.
        if best.len() == k && best.peek().is_some_and(|worst| scored <= worst.0) {
            continue;
        }
        if accept(node) && index.graph.is_live(node) {
            best.push(Reverse(scored));
            if best.len() > k {
                best.pop();
            }
        }
    }
    Ok(best
        .into_sorted_vec()
        .into_iter()
        .map(|Reverse(s)| (s.node, s.score))
        .collect())
}

/// A chunk's keyword score, ordered so that the better one is greater: a higher score, then
/// the lower node.
#[derive(Debug, Clone, Copy)]
struct Scored {
    score: f64,
    node: u32,
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.node.cmp(&self.node))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Scored {}

/// A change to one knowledge base's indexes, made on a copy of the version it started from
/// and stored by [`IndexWriter::save`] inside the write transaction.
pub(crate) struct IndexWriter {
    graph: Graph,
    words: u64,
    /// New postings by word.
    added: HashMap<String, Vec<Posting>>,
    /// Nodes whose postings go, by word.
    removed: HashMap<String, Vec<u32>>,
}

impl IndexWriter {
    /// A change to `from` (`None`: indexes still to be made, with `params`).
    pub(crate) fn new(from: Option<&KbIndex>, params: Params) -> IndexWriter {
        match from {
            Some(index) => IndexWriter {
                graph: index.graph.clone(),
                words: index.record.words,
                added: HashMap::new(),
                removed: HashMap::new(),
            },
            None => IndexWriter {
                graph: Graph::new(params),
                words: 0,
                added: HashMap::new(),
                removed: HashMap::new(),
            },
        }
    }

    /// The node id the next added chunk gets.
    pub(crate) fn next_node(&self) -> u32 {
        self.graph.nodes()
    }

    /// Vector length of the index.
    pub(crate) fn dimensions(&self) -> usize {
        self.graph.params().dimensions
    }

    /// Whether deleted nodes outnumber live ones in the graph, so it should be rebuilt.
    pub(crate) fn worth_rebuilding(&self) -> bool {
        self.graph.deleted() > self.graph.live()
    }

    /// Builds the graph anew without its deleted nodes, on every core.
    pub(crate) fn rebuild(&mut self) -> Result<()> {
        self.graph = self.graph.rebuilt(cores())?;
        Ok(())
    }

    /// Adds chunks: their nodes (ascending, from [`IndexWriter::next_node`] on), vectors and
    /// texts, the graph's links found on every core.
    pub(crate) fn add(&mut self, first: u32, vectors: &[Vec<f32>], texts: &[String]) -> Result<()> {
        let nodes: Vec<(u32, &[f32])> = (first..)
            .zip(vectors)
            .map(|(node, vector)| (node, vector.as_slice()))
            .collect();
        self.graph.insert_many(&nodes, cores())?;
        for ((node, _), text) in nodes.iter().zip(texts) {
            let (counts, length) = bm25::counts(text);
            self.words += u64::from(length);
            for (word, count) in counts {
                self.added.entry(word).or_default().push(Posting {
                    node: *node,
                    count,
                    length,
                });
            }
        }
        Ok(())
    }

    /// Removes a chunk (its node and its text) from both indexes.
    pub(crate) fn remove(&mut self, node: u32, text: &str) {
        if !self.graph.delete(node) {
            return;
        }
        let (counts, length) = bm25::counts(text);
        self.words = self.words.saturating_sub(u64::from(length));
        for word in counts.into_keys() {
            self.removed.entry(word).or_default().push(node);
        }
    }

    /// Stores the change into `txn` as the indexes of the chunk table `table`, a table of
    /// `tenant`, under a new stamp; returns the new version, to [`publish`] once `txn`
    /// committed. The bytes it changes are counted as one change, so one that shrinks the
    /// indexes passes even over the tenant's limit.
    pub(crate) fn save(
        mut self,
        txn: &WriteTransaction,
        tenant: TenantId,
        table: u64,
    ) -> Result<Arc<KbIndex>> {
        let mut change = Change::default();
        {
            let mut links = txn.open_table(KB_LINKS)?;
            let mut vectors = txn.open_table(KB_VECTORS)?;
            for page in self.graph.take_changed() {
                vectors.retain_in((table, page, 0)..=(table, page, u32::MAX), |_, old| {
                    change += Change::removed(old.len() as u64);
                    false
                })?;
                let old = match self.graph.encode_page(page) {
                    Some((page_links, page_vectors)) => {
                        for (part, bytes) in page_vectors.chunks(VECTOR_PART).enumerate() {
                            vectors.insert((table, page, part as u32), bytes)?;
                        }
                        change += Change::added((page_links.len() + page_vectors.len()) as u64);
                        links.insert((table, page), page_links.as_slice())?
                    }
                    None => links.remove((table, page))?,
                };
                change += Change::removed(old.map_or(0, |old| old.value().len() as u64));
            }
        }
        change += self.save_postings(txn, table)?;
        let record = IndexRecord {
            stamp: new_stamp()?,
            shape: self.graph.shape(),
            words: self.words,
        };
        let text = serde_json::to_string(&record)?;
        let old = txn
            .open_table(KB_INDEXES)?
            .insert(table, text.as_str())?
            .map_or(0, |old| old.value().len() as u64);
        change += Change {
            added: text.len() as u64,
            removed: old,
        };
        storage::charge(txn, tenant, change)?;
        Ok(Arc::new(KbIndex {
            record,
            graph: self.graph,
            rows: OnceLock::new(),
        }))
    }

    /// Rewrites the blocks of postings the change touched; returns the change of their bytes.
    fn save_postings(&mut self, txn: &WriteTransaction, table: u64) -> Result<Change> {
        type Block = (Vec<Posting>, Vec<u32>);
        let mut blocks: BTreeMap<(String, u32), Block> = BTreeMap::new();
        for (word, postings) in self.added.drain() {
            for posting in postings {
                let key = (word.clone(), posting.node >> BLOCK_SHIFT);
                blocks.entry(key).or_default().0.push(posting);
            }
        }
        for (word, nodes) in self.removed.drain() {
            for node in nodes {
                let key = (word.clone(), node >> BLOCK_SHIFT);
                blocks.entry(key).or_default().1.push(node);
            }
        }
        let mut postings = txn.open_table(KB_POSTINGS)?;
        let mut change = Change::default();
        for ((word, block), (added, mut removed)) in blocks {
            let mut list = Vec::new();
            if let Some(stored) = postings.get((table, word.as_str(), block))? {
                decode_postings(stored.value(), &mut list)?;
                change += Change::removed(stored.value().len() as u64);
            }
            removed.sort_unstable();
            list.retain(|p| removed.binary_search(&p.node).is_err());
            list.extend(added);
            list.sort_by_key(|p| p.node);
            if list.is_empty() {
                postings.remove((table, word.as_str(), block))?;
            } else {
                let encoded = encode_postings(&list);
                postings.insert((table, word.as_str(), block), encoded.as_slice())?;
                change += Change::added(encoded.len() as u64);
            }
        }
        Ok(change)
    }
}

/// Threads an index build uses: one per core.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A stamp not used before: 64 random bits.
fn new_stamp() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(u64::from_le_bytes(bytes))
}

fn encode_postings(list: &[Posting]) -> Vec<u8> {
    // bounded: a posting list already in memory
    let mut out = Vec::with_capacity(list.len() * 4);
    let mut previous = 0u32;
    for posting in list {
        varint(&mut out, posting.node - previous);
        varint(&mut out, posting.count);
        varint(&mut out, posting.length);
        previous = posting.node;
    }
    out
}

fn decode_postings(bytes: &[u8], out: &mut Vec<Posting>) -> Result<()> {
    let mut at = 0;
    let mut node = 0u32;
    while at < bytes.len() {
        node = node
            .checked_add(read_varint(bytes, &mut at)?)
            .ok_or_else(corrupt_postings)?;
        let count = read_varint(bytes, &mut at)?;
        let length = read_varint(bytes, &mut at)?;
        out.push(Posting {
            node,
            count,
            length,
        });
    }
    Ok(())
}

fn varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Result<u32> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*at).ok_or_else(corrupt_postings)?;
        *at += 1;
        value |= u32::from(byte & 0x7f)
            .checked_shl(shift)
            .ok_or_else(corrupt_postings)?;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(corrupt_postings())
}

fn corrupt_postings() -> Error {
    Error::internal("a knowledge base's keyword index is corrupt")
}

/// A node's (chunk position, row) in the table, from [`KbIndex::rows`]'s list.
pub(crate) fn row_of(rows: &[u64], node: u32) -> Option<(usize, usize)> {
    let at = *rows.get(node as usize)?;
    (at != u64::MAX).then_some(((at >> 32) as usize, (at & 0xffff_ffff) as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Postings held in memory, for [`keyword_search`] without a store.
    struct Lists(HashMap<String, Vec<Posting>>);

    impl ReadIndex for Lists {
        fn index_record(&self, _table: u64) -> Result<Option<IndexRecord>> {
            unreachable!("a keyword search reads postings only")
        }
        fn index_graph(&self, _table: u64, _shape: Shape) -> Result<Graph> {
            unreachable!("a keyword search reads postings only")
        }
        fn postings(&self, _table: u64, word: &str) -> Result<Vec<Posting>> {
            Ok(self.0.get(word).cloned().unwrap_or_default())
        }
    }

    #[test]
    fn keyword_search_ranks_as_a_tally_of_every_chunk_would() {
        let nodes = 2_000u32;
        let mut graph = Graph::new(Params {
            dimensions: 2,
            m: 4,
            ef_construction: 8,
        });
        for node in 0..nodes {
            graph.insert(node, &[1.0, 0.0]).unwrap();
        }
        for node in (0..nodes).step_by(7) {
            graph.delete(node);
        }
        // "common" is in nearly every chunk, "some" in every third, "rare" in a few; counts
        // and lengths vary so that scores differ, and some tie.
        let mut lists: HashMap<String, Vec<Posting>> = HashMap::new();
        for node in 0..nodes {
            let length = 20 + node % 13;
            for (word, every, count) in [
                ("common", 1, 1 + node % 3),
                ("some", 3, 1 + node % 5),
                ("rare", 97, 2),
            ] {
                if node % every == 0 && !(word == "common" && node % 50 == 1) {
                    lists.entry(word.to_string()).or_default().push(Posting {
                        node,
                        count,
                        length,
                    });
                }
            }
        }
        let words: u64 = u64::from(nodes) * 26;
        let index = KbIndex {
            record: IndexRecord {
                stamp: 1,
                shape: graph.shape(),
                words,
            },
            graph,
            rows: OnceLock::new(),
        };
        let lists = Lists(lists);
        let corpus = index.corpus();
        for (question, k, odd_only) in [
            ("rare common", 10, false),
            ("Some  COMMON rare some", 25, true),
            ("common", 3000, false),
            ("nothing", 10, false),
            ("rare", 0, false),
        ] {
            let accept = |node: u32| !odd_only || node % 2 == 1;
            let got = keyword_search(&index, &lists, 1, question, k, &accept).unwrap();
            // The tally: every chunk's score summed in the question's word order, all sorted.
            let mut tally: BTreeMap<u32, f64> = BTreeMap::new();
            for term in bm25::terms(question) {
                let postings = lists.postings(1, &term).unwrap();
                for p in &postings {
                    *tally.entry(p.node).or_insert(0.0) += corpus
                        .weight(postings.len() as u64)
                        .score(p.count, p.length);
                }
            }
            let mut expected: Vec<(u32, f64)> = tally
                .into_iter()
                .filter(|(node, score)| *score > 0.0 && accept(*node) && index.graph.is_live(*node))
                .collect();
            expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            expected.truncate(k);
            assert_eq!(got, expected, "{question}");
        }
    }

    #[test]
    fn postings_round_trip_and_refuse_damage() {
        let list = vec![
            Posting {
                node: 3,
                count: 1,
                length: 10,
            },
            Posting {
                node: 70_000,
                count: 300,
                length: 1 << 20,
            },
        ];
        let bytes = encode_postings(&list);
        let mut back = Vec::new();
        decode_postings(&bytes, &mut back).unwrap();
        assert_eq!(back, list);
        let mut cut = Vec::new();
        assert!(decode_postings(&bytes[..bytes.len() - 1], &mut cut).is_err());
        assert!(decode_postings(&[0xff; 8], &mut cut).is_err());
    }
}
