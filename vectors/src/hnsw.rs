//! Approximate nearest neighbours: a hierarchical navigable small world graph (Malkov and
//! Yashunin, 2016) over L2-normalised `f32` vectors, ranked by cosine distance (1 − dot
//! product). This module is the graph in memory; `catalog::kb_index` keeps it in the redb file.
//!
//! Node ids are handed out in increasing order. A node's vector and its links live in pages of
//! [`PAGE_NODES`] nodes held by `Arc`: a writer works on a clone of the graph, which copies only
//! the pages it changes, while readers go on searching the version they hold; the changed pages
//! are the ones written back. A deleted node stays in the graph as a waypoint, never returned,
//! until [`Graph::rebuilt`] drops it. A node's level is a hash of its id, so the same inserts
//! always build the same graph.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::distance::prefetch;
use crate::{Error, Result};

// The distance kernels, where callers of the graph have always found them.
pub use crate::distance::{dot, dot4};

/// Nodes per page (a power of two: a node's page is its id shifted right).
pub const PAGE_NODES: usize = 1 << PAGE_SHIFT;
const PAGE_SHIFT: u32 = 10;
/// The highest level a node can get (far above what a billion nodes reach).
const MAX_LEVEL: u8 = 16;
/// How far apart two distances may be and still count as equal (`f32` sums of products).
const ROUNDING: f32 = 1e-5;
/// A page's encoding, so a change of it is recognised.
const PAGE_FORMAT: u8 = 1;

/// Which nodes a search may return; `None` takes all.
pub type Filter<'a> = Option<&'a dyn Fn(u32) -> bool>;

/// How a graph is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Length of every vector.
    pub dimensions: usize,
    /// Links per node on the levels above the lowest, which has twice as many.
    pub m: usize,
    /// Candidates considered when a node's links are chosen.
    pub ef_construction: usize,
}

/// One page of nodes: their levels, deletion marks and links.
#[derive(Debug, Clone, Default, PartialEq)]
struct NodePage {
    level: Vec<u8>,
    dead: Vec<bool>,
    /// The lowest level's links: per node, a count and then `2m` slots.
    base: Vec<u32>,
    /// Links above the lowest level: per node, `level` lists of a count and `m` slots.
    upper: Vec<Vec<u32>>,
}

/// A graph over the vectors of nodes `0..nodes()`; ids never given a vector are holes (dead).
#[derive(Debug, Clone)]
pub struct Graph {
    params: Params,
    nodes: u32,
    live: u32,
    /// Nodes deleted but still linked, as waypoints.
    deleted: u32,
    entry: Option<u32>,
    /// Per page, its nodes' vectors one after another, with room for a whole page (zeros where
    /// no node is yet); `None` for a page without live nodes. One allocation a page: a search
    /// reaches a vector through two loads.
    vectors: Vec<Option<Arc<[f32]>>>,
    pages: Vec<Option<Arc<NodePage>>>,
    /// Pages changed since [`Graph::take_changed`] was last called.
    changed: BTreeSet<u32>,
}

/// A node and its distance to a query, ordered by distance (then id, so ties are stable).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    /// Cosine distance to the query.
    pub distance: f32,
    /// The node's id.
    pub node: u32,
}

impl Eq for Neighbour {}

impl Ord for Neighbour {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.node.cmp(&other.node))
    }
}

impl PartialOrd for Neighbour {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a graph's pages and counters are, apart from the pages themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// How the graph is built.
    pub params: Params,
    /// Node ids handed out.
    pub nodes: u32,
    /// Nodes not deleted.
    pub live: u32,
    /// Nodes deleted but still linked.
    pub deleted: u32,
    /// Where searches start.
    pub entry: Option<u32>,
}

impl Graph {
    /// An empty graph.
    pub fn new(params: Params) -> Graph {
        Graph {
            params,
            nodes: 0,
            live: 0,
            deleted: 0,
            entry: None,
            vectors: Vec::new(),
            pages: Vec::new(),
            changed: BTreeSet::new(),
        }
    }

    /// How it is built.
    pub fn params(&self) -> Params {
        self.params
    }

    /// Node ids handed out (the next node gets this id).
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// Nodes not deleted.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Nodes deleted but still in the graph, as waypoints.
    pub fn deleted(&self) -> u32 {
        self.deleted
    }

    /// Its counters, to store beside its pages.
    pub fn shape(&self) -> Shape {
        Shape {
            params: self.params,
            nodes: self.nodes,
            live: self.live,
            deleted: self.deleted,
            entry: self.entry,
        }
    }

    /// Bytes it holds in memory (vectors and links).
    pub fn memory_bytes(&self) -> usize {
        let vectors: usize = self.vectors.iter().flatten().map(|v| v.len() * 4).sum();
        let links: usize = self
            .pages
            .iter()
            .flatten()
            .map(|p| p.base.capacity() * 4 + p.level.len() * 2 + p.upper.len() * 24)
            .sum();
        vectors + links
    }

    /// Whether `node` holds a vector and was not deleted.
    pub fn is_live(&self, node: u32) -> bool {
        node < self.nodes
            && self.pages[page_of(node)]
                .as_ref()
                .is_some_and(|p| !p.dead[slot_of(node)])
    }

    /// The vector of a node that holds one.
    pub fn vector(&self, node: u32) -> &[f32] {
        let d = self.params.dimensions;
        let page = self.vectors[page_of(node)]
            .as_deref()
            .expect("a node with links has its vector page");
        &page[slot_of(node) * d..(slot_of(node) + 1) * d]
    }

    /// The cosine distance of `query` to a node that holds a vector.
    pub fn distance(&self, query: &[f32], node: u32) -> f32 {
        (1.0 - dot(query, self.vector(node))).max(0.0)
    }

    /// The cosine distances of `query` to `nodes`, four at a time (each load of the query
    /// serves four products).
    fn distances<'a>(
        &'a self,
        query: &'a [f32],
        nodes: &'a [u32],
    ) -> impl Iterator<Item = f32> + 'a {
        nodes.chunks(4).flat_map(move |group| {
            let mut out = [0.0f32; 4];
            match *group {
                [a, b, c, d] => {
                    let dots = dot4(
                        query,
                        [
                            self.vector(a),
                            self.vector(b),
                            self.vector(c),
                            self.vector(d),
                        ],
                    );
                    for (o, dot) in out.iter_mut().zip(dots) {
                        *o = (1.0 - dot).max(0.0);
                    }
                }
                _ => {
                    for (o, n) in out.iter_mut().zip(group) {
                        *o = self.distance(query, *n);
                    }
                }
            }
            out.into_iter().take(group.len())
        })
    }

    fn page(&self, node: u32) -> &NodePage {
        self.pages[page_of(node)]
            .as_deref()
            .expect("a linked node has its page")
    }

    fn level(&self, node: u32) -> u8 {
        self.page(node).level[slot_of(node)]
    }

    /// The links of `node` on `level`.
    fn links(&self, node: u32, level: u8) -> &[u32] {
        let page = self.page(node);
        let slot = slot_of(node);
        if level == 0 {
            let width = 2 * self.params.m + 1;
            let at = slot * width;
            let count = page.base[at] as usize;
            return &page.base[at + 1..at + 1 + count];
        }
        let width = self.params.m + 1;
        let at = (level as usize - 1) * width;
        let list = &page.upper[slot];
        let count = list[at] as usize;
        &list[at + 1..at + 1 + count]
    }

    /// A page to change: copied first if a reader shares it, and noted as changed.
    fn page_mut(&mut self, node: u32) -> &mut NodePage {
        let page = page_of(node);
        self.changed.insert(page as u32);
        Arc::make_mut(
            self.pages[page]
                .as_mut()
                .expect("a linked node has its page"),
        )
    }

    fn set_links(&mut self, node: u32, level: u8, links: &[u32]) {
        let (m, slot) = (self.params.m, slot_of(node));
        let page = self.page_mut(node);
        let (list, at) = match level {
            0 => (&mut page.base, slot * (2 * m + 1)),
            _ => (&mut page.upper[slot], (level as usize - 1) * (m + 1)),
        };
        let width = match level {
            0 => 2 * m,
            _ => m,
        };
        list[at] = links.len() as u32;
        list[at + 1..at + 1 + links.len()].copy_from_slice(links);
        // Unused slots stay zero, so a page's encoding depends on its links alone.
        list[at + 1 + links.len()..at + 1 + width].fill(0);
    }

    /// Adds the node `node` (at least [`Graph::nodes`]; ids skipped become holes) with
    /// `vector`, linking it into the graph.
    pub fn insert(&mut self, node: u32, vector: &[f32]) -> Result<()> {
        self.check_new(node, vector)?;
        let level = level_of(node, self.params.m);
        self.place(node, vector, level);
        let Some(entry) = self.entry else {
            self.entry = Some(node);
            return Ok(());
        };
        let plan = self.plan_links(node, vector, level, entry, &[]);
        self.apply_links(node, level, plan);
        Ok(())
    }

    /// Adds `nodes` (ids ascending, from [`Graph::nodes`] on) as [`Graph::insert`] does, on
    /// `threads` threads. Nodes go in batches: each batch's links are chosen in parallel
    /// against the graph as it was before the batch, with the batch's other members as
    /// further candidates, then stored in order. A batch is at most 1/64 of the graph (256 at
    /// most, one node while the graph is small), so what its members cannot see of each
    /// other through the graph is little. The same nodes build the same graph whatever the
    /// number of threads.
    pub fn insert_many(&mut self, nodes: &[(u32, &[f32])], threads: usize) -> Result<()> {
        let mut at = 0;
        while at < nodes.len() {
            let size = (self.live as usize / 64)
                .clamp(1, 256)
                .min(nodes.len() - at);
            let batch = &nodes[at..at + size];
            at += size;
            if size == 1 || threads <= 1 || self.entry.is_none() {
                for (node, vector) in batch {
                    self.insert(*node, vector)?;
                }
                continue;
            }
            // bounded: a batch of nodes being inserted, in memory
            let mut members = Vec::with_capacity(size);
            for (node, vector) in batch {
                self.check_new(*node, vector)?;
                let level = level_of(*node, self.params.m);
                self.place(*node, vector, level);
                members.push((*node, level));
            }
            let entry = self.entry.expect("a graph with live nodes has an entry");
            let graph: &Graph = self;
            let plans = crate::parallel_map(batch, threads, |(node, vector)| {
                let level = level_of(*node, graph.params.m);
                graph.plan_links(*node, vector, level, entry, &members)
            });
            self.apply_batch(members, plans, threads);
        }
        Ok(())
    }

    /// Stores a batch's planned links: each member's own first, then its neighbours' new
    /// links, each neighbour's list worked out once for all the members joining it (in
    /// parallel: a full list is pruned by the heuristic, which costs the most), then written.
    fn apply_batch(
        &mut self,
        members: Vec<(u32, u8)>,
        plans: Vec<Vec<(u8, Vec<Neighbour>)>>,
        threads: usize,
    ) {
        let mut joining: BTreeMap<(u32, u8), Vec<Neighbour>> = BTreeMap::new();
        for ((node, level), plan) in members.iter().zip(plans) {
            for (l, chosen) in plan {
                let ids: Vec<u32> = chosen.iter().map(|c| c.node).collect();
                self.set_links(*node, l, &ids);
                for neighbour in chosen {
                    joining
                        .entry((neighbour.node, l))
                        .or_default()
                        .push(Neighbour {
                            distance: neighbour.distance,
                            node: *node,
                        });
                }
            }
            let top = self.entry.map_or(0, |entry| self.level(entry));
            if *level > top {
                self.entry = Some(*node);
            }
        }
        let work: Vec<((u32, u8), Vec<Neighbour>)> = joining.into_iter().collect();
        let graph: &Graph = self;
        let lists = crate::parallel_map(&work, threads, |((to, l), new)| {
            graph.joined_links(*to, *l, new)
        });
        for (((to, l), _), list) in work.iter().zip(lists) {
            self.set_links(*to, *l, &list);
        }
    }

    /// The links of `to` on `level` once `new` nodes (with their distances to it) join them:
    /// all, or the heuristic's choice when they are too many.
    fn joined_links(&self, to: u32, level: u8, new: &[Neighbour]) -> Vec<u32> {
        let capacity = self.capacity(level);
        let links = self.links(to, level);
        if links.len() + new.len() <= capacity {
            return links
                .iter()
                .copied()
                .chain(new.iter().map(|n| n.node))
                .collect();
        }
        let mut candidates = self.linked(to, links);
        candidates.extend_from_slice(new);
        self.select(to, &candidates, capacity)
            .iter()
            .map(|c| c.node)
            .collect()
    }

    /// Fails unless `vector` fits and `node` may be added next.
    fn check_new(&self, node: u32, vector: &[f32]) -> Result<()> {
        if vector.len() != self.params.dimensions {
            return Err(Error::Invalid(format!(
                "a vector of {} dimensions in an index of {}",
                vector.len(),
                self.params.dimensions
            )));
        }
        if node < self.nodes || node == u32::MAX {
            return Err(Error::Invalid(format!(
                "node {node} cannot be added after {} nodes",
                self.nodes
            )));
        }
        Ok(())
    }

    /// The links a placed node `node` at `level` should get on each of its levels the graph
    /// has, found from `entry` (and among `mates`, nodes placed with it but not yet linked):
    /// for each level from the top down, the level and the chosen neighbours.
    fn plan_links(
        &self,
        node: u32,
        vector: &[f32],
        level: u8,
        entry: u32,
        mates: &[(u32, u8)],
    ) -> Vec<(u8, Vec<Neighbour>)> {
        let top = self.level(entry);
        let mut nearest = Neighbour {
            distance: self.distance(vector, entry),
            node: entry,
        };
        for l in (level + 1..=top).rev() {
            nearest = self.greedy(vector, nearest, l);
        }
        let mut entries = vec![nearest];
        let mut plan = Vec::new();
        for l in (0..=level.min(top)).rev() {
            // Nothing links to the new node yet, so the search cannot meet it.
            let mut found =
                self.search_level(vector, &entries, self.params.ef_construction, l, None);
            if !found.is_empty() {
                entries.clone_from(&found);
            }
            for (mate, mate_level) in mates {
                if *mate != node && *mate_level >= l {
                    found.push(Neighbour {
                        distance: self.distance(vector, *mate),
                        node: *mate,
                    });
                }
            }
            plan.push((l, self.select(node, &found, self.capacity(l))));
        }
        plan
    }

    /// Stores a node's planned links and adds it to its neighbours' links; makes it the entry
    /// when it rises above the graph's top.
    fn apply_links(&mut self, node: u32, level: u8, plan: Vec<(u8, Vec<Neighbour>)>) {
        for (l, chosen) in plan {
            let ids: Vec<u32> = chosen.iter().map(|c| c.node).collect();
            self.set_links(node, l, &ids);
            for neighbour in chosen {
                self.connect(neighbour.node, node, neighbour.distance, l);
            }
        }
        let top = self.entry.map_or(0, |entry| self.level(entry));
        if self.entry.is_none() || level > top {
            self.entry = Some(node);
        }
    }

    /// Stores a new node's vector and empty links, filling skipped ids with holes.
    fn place(&mut self, node: u32, vector: &[f32], level: u8) {
        let (m, d) = (self.params.m, self.params.dimensions);
        while self.nodes <= node {
            let id = self.nodes;
            let (page, slot) = (page_of(id), slot_of(id));
            if self.pages.len() <= page {
                self.pages.push(Some(Arc::new(NodePage::default())));
                self.vectors.push(Some(vector_page(d)));
            }
            let (hole, level) = match id == node {
                true => (false, level),
                false => (true, 0),
            };
            let nodes = self.pages[page].get_or_insert_with(Default::default);
            let nodes = Arc::make_mut(nodes);
            nodes.level.push(level);
            nodes.dead.push(hole);
            nodes.base.extend(std::iter::repeat_n(0, 2 * m + 1));
            // bounded: a node's level is logarithmic in the graph's size
            nodes.upper.push(vec![0; level as usize * (m + 1)]);
            if !hole {
                let vectors = writable(self.vectors[page].get_or_insert_with(|| vector_page(d)));
                vectors[slot * d..(slot + 1) * d].copy_from_slice(vector);
            }
            self.changed.insert(page as u32);
            self.nodes += 1;
        }
        self.live += 1;
    }

    /// Links per node on `level`.
    fn capacity(&self, level: u8) -> usize {
        match level {
            0 => 2 * self.params.m,
            _ => self.params.m,
        }
    }

    /// The nodes of `links` with their distances to `to`.
    fn linked(&self, to: u32, links: &[u32]) -> Vec<Neighbour> {
        let base = self.vector(to);
        links
            .iter()
            .map(|&n| Neighbour {
                distance: 1.0 - dot(base, self.vector(n)),
                node: n,
            })
            .collect()
    }

    /// Adds `node` (at `distance`) to the links of `to` on `level`, keeping the best when full.
    fn connect(&mut self, to: u32, node: u32, distance: f32, level: u8) {
        let capacity = self.capacity(level);
        let links = self.links(to, level);
        if links.len() < capacity {
            let mut grown = links.to_vec();
            grown.push(node);
            self.set_links(to, level, &grown);
            return;
        }
        let mut candidates = self.linked(to, links);
        candidates.push(Neighbour { distance, node });
        let kept: Vec<u32> = self
            .select(to, &candidates, capacity)
            .iter()
            .map(|c| c.node)
            .collect();
        self.set_links(to, level, &kept);
    }

    /// Malkov's heuristic: of `candidates` (neighbours of `base`), nearest first, those no
    /// nearer to any already chosen than to the base, so links reach out in every direction,
    /// up to `capacity`. Distances equal within rounding keep the candidate, and equal ones are
    /// taken in an order of their own for each base: copies of one vector then still link to
    /// each other, where one order for all would give every copy the same few links.
    fn select(&self, base: u32, candidates: &[Neighbour], capacity: usize) -> Vec<Neighbour> {
        let mut ordered = candidates.to_vec();
        ordered.sort_by(|a, b| {
            a.distance
                .total_cmp(&b.distance)
                .then(tie(base, a.node).cmp(&tie(base, b.node)))
        });
        // bounded: at most the candidates in memory
        let mut chosen: Vec<Neighbour> = Vec::with_capacity(capacity);
        for candidate in &ordered {
            if chosen.len() == capacity {
                break;
            }
            let vector = self.vector(candidate.node);
            let diverse = chosen
                .iter()
                .all(|c| 1.0 - dot(vector, self.vector(c.node)) + ROUNDING >= candidate.distance);
            if diverse {
                chosen.push(*candidate);
            }
        }
        chosen
    }

    /// Walks `level` from `start` to the node nearest `query`, one better neighbour at a time.
    fn greedy(&self, query: &[f32], start: Neighbour, level: u8) -> Neighbour {
        let mut best = start;
        loop {
            let mut moved = false;
            for &n in self.links(best.node, level) {
                let distance = self.distance(query, n);
                if distance < best.distance {
                    best = Neighbour { distance, node: n };
                    moved = true;
                }
            }
            if !moved {
                return best;
            }
        }
    }

    /// The best-first search of one level: up to `ef` nodes that `accept` takes (all when
    /// `None`), nearest first. Nodes it refuses (and deleted ones) are walked through but never
    /// returned. The unvisited neighbours of a node have their vectors prefetched together
    /// before their distances are computed, so their memory latencies overlap.
    fn search_level(
        &self,
        query: &[f32],
        entries: &[Neighbour],
        ef: usize,
        level: u8,
        accept: Filter<'_>,
    ) -> Vec<Neighbour> {
        // A search never keeps more candidates than the graph has nodes, whatever it asks.
        let ef = ef.min(self.nodes as usize).max(1);
        VISITED.with_borrow_mut(|visited| {
            visited.reset(self.nodes as usize);
            let mut candidates: BinaryHeap<std::cmp::Reverse<Neighbour>> =
                // bounded: ef is at most the graph's nodes (above)
                BinaryHeap::with_capacity(ef * 2);
            // bounded: ef is at most the graph's nodes (above)
            let mut found: BinaryHeap<Neighbour> = BinaryHeap::with_capacity(ef + 1);
            let deletions = self.deleted > 0;
            let takes = |n: u32| {
                accept.is_none_or(|accept| accept(n))
                    && !(deletions && self.page(n).dead[slot_of(n)])
            };
            for entry in entries {
                if visited.visit(entry.node) {
                    candidates.push(std::cmp::Reverse(*entry));
                    if takes(entry.node) {
                        found.push(*entry);
                    }
                }
            }
            while found.len() > ef {
                found.pop();
            }
            let mut bound = match found.len() >= ef {
                true => found.peek().map_or(f32::INFINITY, |f| f.distance),
                false => f32::INFINITY,
            };
            // bounded: the graph's links per node
            let mut fresh: Vec<u32> = Vec::with_capacity(2 * self.params.m);
            while let Some(std::cmp::Reverse(current)) = candidates.pop() {
                if current.distance > bound {
                    break;
                }
                fresh.clear();
                for &n in self.links(current.node, level) {
                    if visited.visit(n) {
                        prefetch(self.vector(n));
                        fresh.push(n);
                    }
                }
                for (&n, distance) in fresh.iter().zip(self.distances(query, &fresh)) {
                    if distance >= bound {
                        continue;
                    }
                    let neighbour = Neighbour { distance, node: n };
                    candidates.push(std::cmp::Reverse(neighbour));
                    if takes(n) {
                        found.push(neighbour);
                        if found.len() > ef {
                            found.pop();
                        }
                        if found.len() >= ef {
                            bound = found.peek().map_or(f32::INFINITY, |f| f.distance);
                        }
                    }
                }
            }
            found.into_sorted_vec()
        })
    }

    /// The `k` nodes nearest `query` that `accept` takes (all when `None`; never deleted
    /// ones), nearest first, found by walking the graph with `ef` candidates (more is slower
    /// and finds more of the true nearest).
    pub fn search(&self, query: &[f32], k: usize, ef: usize, accept: Filter<'_>) -> Vec<Neighbour> {
        let Some(entry) = self.entry else {
            return Vec::new();
        };
        if query.len() != self.params.dimensions || k == 0 {
            return Vec::new();
        }
        let mut nearest = Neighbour {
            distance: self.distance(query, entry),
            node: entry,
        };
        for level in (1..=self.level(entry)).rev() {
            nearest = self.greedy(query, nearest, level);
        }
        let k = k.min(self.nodes as usize);
        let mut found = self.search_level(query, &[nearest], ef.max(k), 0, accept);
        found.truncate(k);
        found
    }

    /// The `k` nodes nearest `query` that `accept` takes (all when `None`), by computing every
    /// distance.
    pub fn exact(&self, query: &[f32], k: usize, accept: Filter<'_>) -> Vec<Neighbour> {
        // No more results than the graph has nodes, whatever `k` asks (a LIMIT, say).
        let k = k.min(self.nodes as usize);
        // bounded: k is at most the graph's nodes (above)
        let mut best: BinaryHeap<Neighbour> = BinaryHeap::with_capacity(k + 1);
        if k == 0 || query.len() != self.params.dimensions {
            return Vec::new();
        }
        let d = self.params.dimensions;
        for (page, (nodes, vectors)) in self.pages.iter().zip(&self.vectors).enumerate() {
            let (Some(nodes), Some(vectors)) = (nodes, vectors) else {
                continue;
            };
            for (slot, vector) in vectors.chunks_exact(d).take(nodes.level.len()).enumerate() {
                let node = ((page << PAGE_SHIFT) + slot) as u32;
                if nodes.dead[slot] || accept.is_some_and(|accept| !accept(node)) {
                    continue;
                }
                let distance = (1.0 - dot(query, vector)).max(0.0);
                if best.len() < k {
                    best.push(Neighbour { distance, node });
                } else if best.peek().is_some_and(|worst| distance < worst.distance) {
                    best.pop();
                    best.push(Neighbour { distance, node });
                }
            }
        }
        best.into_sorted_vec()
    }

    /// Marks `node` deleted: it is never returned again. Returns whether it was live.
    pub fn delete(&mut self, node: u32) -> bool {
        if !self.is_live(node) {
            return false;
        }
        self.page_mut(node).dead[slot_of(node)] = true;
        self.live -= 1;
        self.deleted += 1;
        true
    }

    /// The live nodes, in id order.
    pub fn live_nodes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.nodes).filter(|&n| self.is_live(n))
    }

    /// The same live nodes with the same ids in a graph built anew on `threads` threads,
    /// without the deleted ones (whose pages are freed where no live node is left). Every page
    /// counts as changed.
    pub fn rebuilt(&self, threads: usize) -> Result<Graph> {
        let mut graph = Graph::new(self.params);
        let live: Vec<(u32, &[f32])> = self
            .live_nodes()
            .map(|node| (node, self.vector(node)))
            .collect();
        graph.insert_many(&live, threads)?;
        graph.pad_to(self.nodes);
        // The last page stays, holes and all: new nodes are placed after them.
        for page in 0..graph.pages.len().saturating_sub(1) {
            let empty = graph.pages[page]
                .as_ref()
                .is_some_and(|p| p.dead.iter().all(|d| *d));
            if empty {
                graph.pages[page] = None;
                graph.vectors[page] = None;
            }
        }
        graph.changed = (0..self.pages.len().max(graph.pages.len()) as u32).collect();
        Ok(graph)
    }

    /// Adds holes up to `nodes`, so ids handed out stay handed out.
    fn pad_to(&mut self, nodes: u32) {
        let (m, d) = (self.params.m, self.params.dimensions);
        while self.nodes < nodes {
            let page = page_of(self.nodes);
            if self.pages.len() <= page {
                self.pages.push(Some(Arc::new(NodePage::default())));
                self.vectors.push(Some(vector_page(d)));
            }
            let p = Arc::make_mut(self.pages[page].get_or_insert_with(Default::default));
            p.level.push(0);
            p.dead.push(true);
            p.base.extend(std::iter::repeat_n(0, 2 * m + 1));
            p.upper.push(Vec::new());
            self.changed.insert(page as u32);
            self.nodes += 1;
        }
    }

    /// The pages changed since the last call (their numbers), forgetting them.
    pub fn take_changed(&mut self) -> BTreeSet<u32> {
        std::mem::take(&mut self.changed)
    }

    /// Page `page` as stored: its links and marks, and its vectors (little-endian `f32`s);
    /// `None` for a freed page.
    pub fn encode_page(&self, page: u32) -> Option<(Vec<u8>, Vec<u8>)> {
        let nodes = self.pages.get(page as usize)?.as_deref()?;
        let vectors = self.vectors[page as usize].as_deref()?;
        // bounded: the encoding of a page in memory
        let mut links = Vec::with_capacity(nodes.base.len() * 4 + nodes.level.len() * 2 + 8);
        links.push(PAGE_FORMAT);
        links.extend_from_slice(&(nodes.level.len() as u32).to_le_bytes());
        for slot in 0..nodes.level.len() {
            links.push(nodes.level[slot]);
            links.push(u8::from(nodes.dead[slot]));
        }
        let m = self.params.m;
        for slot in 0..nodes.level.len() {
            let at = slot * (2 * m + 1);
            let count = nodes.base[at] as usize;
            for value in &nodes.base[at..at + 1 + count] {
                links.extend_from_slice(&value.to_le_bytes());
            }
            for level in 0..nodes.level[slot] as usize {
                let at = level * (m + 1);
                let list = &nodes.upper[slot];
                let count = list[at] as usize;
                for value in &list[at..at + 1 + count] {
                    links.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
        let used = &vectors[..nodes.level.len() * self.params.dimensions];
        // bounded: the encoding of a page in memory
        let mut bytes = Vec::with_capacity(used.len() * 4);
        for value in used {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        Some((links, bytes))
    }

    /// A graph of `shape` from its stored pages, in page order (`None` for a freed page).
    pub fn decode(
        shape: Shape,
        pages: impl IntoIterator<Item = Option<(Vec<u8>, Vec<u8>)>>,
    ) -> Result<Graph> {
        let corrupt =
            |what: &str| Error::Corrupt(format!("a vector index page is corrupt: {what}"));
        let (m, d) = (shape.params.m, shape.params.dimensions);
        let mut graph = Graph::new(shape.params);
        let expected_pages = shape.nodes.div_ceil(PAGE_NODES as u32) as usize;
        for stored in pages {
            let page = graph.pages.len();
            if page == expected_pages {
                return Err(corrupt("more pages than nodes"));
            }
            // Every page but the last is full; a freed page counts its nodes too.
            let count = (shape.nodes as usize - page * PAGE_NODES).min(PAGE_NODES);
            let Some((links, vectors)) = stored else {
                graph.pages.push(None);
                graph.vectors.push(None);
                continue;
            };
            let mut reader = Reader {
                bytes: &links,
                at: 0,
            };
            if reader.u8()? != PAGE_FORMAT {
                return Err(corrupt("unknown page format"));
            }
            if reader.u32()? as usize != count || vectors.len() != count * d * 4 {
                return Err(corrupt("wrong node count"));
            }
            let mut page = NodePage {
                // bounded: at most PAGE_NODES nodes
                level: Vec::with_capacity(count),
                // bounded: at most PAGE_NODES nodes
                dead: Vec::with_capacity(count),
                // bounded: at most PAGE_NODES nodes
                base: Vec::with_capacity(count * (2 * m + 1)),
                // bounded: at most PAGE_NODES nodes
                upper: Vec::with_capacity(count),
            };
            for _ in 0..count {
                let level = reader.u8()?;
                if level > MAX_LEVEL {
                    return Err(corrupt("level out of range"));
                }
                page.level.push(level);
                page.dead.push(reader.u8()? != 0);
            }
            let list = |reader: &mut Reader, width: usize, into: &mut Vec<u32>| -> Result<()> {
                let count = reader.u32()? as usize;
                if count > width {
                    return Err(corrupt("too many links"));
                }
                into.push(count as u32);
                for _ in 0..count {
                    let node = reader.u32()?;
                    if node >= shape.nodes {
                        return Err(corrupt("a link to a missing node"));
                    }
                    into.push(node);
                }
                into.extend(std::iter::repeat_n(0, width - count));
                Ok(())
            };
            for slot in 0..count {
                list(&mut reader, 2 * m, &mut page.base)?;
                // bounded: a node's level is logarithmic in the graph's size
                let mut upper = Vec::with_capacity(page.level[slot] as usize * (m + 1));
                for _ in 0..page.level[slot] {
                    list(&mut reader, m, &mut upper)?;
                }
                page.upper.push(upper);
            }
            // bounded: one page of vectors, dimensions checked at insert
            let mut values = vec![0.0f32; PAGE_NODES * d];
            for (value, b) in values.iter_mut().zip(vectors.chunks_exact(4)) {
                *value = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            graph.pages.push(Some(Arc::new(page)));
            graph.vectors.push(Some(values.into()));
        }
        if graph.pages.len() != expected_pages {
            return Err(corrupt("missing pages"));
        }
        if shape.entry.is_some_and(|e| e >= shape.nodes) {
            return Err(corrupt("the entry is not a node"));
        }
        // A link into a freed page would have nothing to read.
        for page in graph.pages.iter().flatten() {
            let linked = page
                .base
                .chunks(2 * m + 1)
                .flat_map(|l| &l[1..=l[0] as usize]);
            let upper = page
                .upper
                .iter()
                .flat_map(|u| u.chunks(m + 1).flat_map(|l| &l[1..=l[0] as usize]));
            if linked
                .chain(upper)
                .any(|n| graph.pages[page_of(*n)].is_none())
            {
                return Err(corrupt("a link into a freed page"));
            }
        }
        graph.nodes = shape.nodes;
        graph.live = shape.live;
        graph.deleted = shape.deleted;
        graph.entry = shape.entry;
        Ok(graph)
    }
}

/// Reads little-endian numbers off a page.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.bytes.get(self.at..self.at + N).ok_or_else(|| {
            Error::Corrupt("a vector index page is corrupt: it ends early".into())
        })?;
        self.at += N;
        Ok(bytes.try_into().expect("N bytes were taken"))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }
}

/// An order of nodes particular to `base`, for breaking ties among its candidates.
fn tie(base: u32, node: u32) -> u32 {
    let pair = (u64::from(base) << 32 | u64::from(node)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (pair >> 32) as u32
}

/// An empty page of vectors of `d` dimensions.
fn vector_page(d: usize) -> Arc<[f32]> {
    // bounded: one page of vectors, dimensions checked at insert
    vec![0.0f32; PAGE_NODES * d].into()
}

/// A page to write into: copied first if a reader shares it.
fn writable(page: &mut Arc<[f32]>) -> &mut [f32] {
    if Arc::get_mut(page).is_none() {
        *page = Arc::from(&page[..]);
    }
    Arc::get_mut(page).expect("a page just copied is shared with nobody")
}

fn page_of(node: u32) -> usize {
    (node >> PAGE_SHIFT) as usize
}

fn slot_of(node: u32) -> usize {
    (node as usize) & (PAGE_NODES - 1)
}

/// A node's level: ⌊−ln(u) / ln(m)⌋ for a uniform u drawn from a hash of its id.
fn level_of(node: u32, m: usize) -> u8 {
    // SplitMix64's finaliser: consecutive ids give unrelated draws.
    let mut x = u64::from(node).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let uniform = ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let level = -uniform.ln() / (m.max(2) as f64).ln();
    level.min(f64::from(MAX_LEVEL)) as u8
}

/// Which nodes one search has reached: a mark per node, a byte each (FAISS's visited table),
/// so clearing is one increment and, every 255 searches, one fill.
struct Visited {
    marks: Vec<u8>,
    mark: u8,
}

impl Visited {
    fn reset(&mut self, nodes: usize) {
        if self.marks.len() < nodes {
            // bounded: one mark per node of a graph in memory
            self.marks.resize(nodes, 0);
        }
        self.mark = self.mark.wrapping_add(1);
        if self.mark == 0 {
            self.marks.fill(0);
            self.mark = 1;
        }
    }

    /// Marks `node` reached; false if it already was.
    fn visit(&mut self, node: u32) -> bool {
        let mark = &mut self.marks[node as usize];
        if *mark == self.mark {
            return false;
        }
        *mark = self.mark;
        true
    }
}

thread_local! {
    static VISITED: RefCell<Visited> = const {
        RefCell::new(Visited {
            marks: Vec::new(),
            mark: 0,
        })
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` unit vectors of `d` dimensions around `clusters` centres (a fixed-seed generator).
    fn clustered(n: usize, d: usize, clusters: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut state = seed;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..clusters)
            .map(|_| (0..d).map(|_| next()).collect())
            .collect();
        (0..n)
            .map(|i| {
                let centre = &centres[i % clusters];
                let v: Vec<f32> = centre.iter().map(|c| c + 0.35 * next()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    fn params(d: usize) -> Params {
        Params {
            dimensions: d,
            m: 12,
            ef_construction: 100,
        }
    }

    fn recall(graph: &Graph, queries: &[Vec<f32>], ef: usize, accept: &dyn Fn(u32) -> bool) -> f64 {
        let mut hits = 0;
        for q in queries {
            let truth: Vec<u32> = graph
                .exact(q, 10, Some(accept))
                .iter()
                .map(|n| n.node)
                .collect();
            let found = graph.search(q, 10, ef, Some(accept));
            assert!(found
                .iter()
                .all(|n| accept(n.node) && graph.is_live(n.node)));
            hits += found.iter().filter(|n| truth.contains(&n.node)).count();
        }
        hits as f64 / (queries.len() * 10) as f64
    }

    #[test]
    fn searches_find_the_exact_nearest_almost_always() {
        // Queries come from the same clusters as the data, as questions do.
        let mut data = clustered(4100, 32, 20, 7);
        let queries = data.split_off(4000);
        let mut graph = Graph::new(params(32));
        for (i, v) in data.iter().enumerate() {
            graph.insert(i as u32, v).unwrap();
        }
        let all = |_: u32| true;
        let r = recall(&graph, &queries, 64, &all);
        assert!(r >= 0.95, "recall {r}");
        // The nearest of a stored vector is itself.
        let found = graph.search(&data[123], 1, 32, None);
        assert_eq!(found[0].node, 123);
        assert!(found[0].distance < 1e-5);
    }

    #[test]
    fn filtered_and_deleted_nodes_are_walked_through_but_never_returned() {
        let mut data = clustered(3060, 24, 10, 3);
        let queries = data.split_off(3000);
        let mut graph = Graph::new(params(24));
        for (i, v) in data.iter().enumerate() {
            graph.insert(i as u32, v).unwrap();
        }
        for node in (0..3000).step_by(3) {
            assert!(graph.delete(node));
        }
        assert!(!graph.delete(0), "already deleted");
        assert_eq!(graph.live(), 2000);
        // One node in ten passes the filter.
        let tenth = |n: u32| n % 10 == 1;
        let r = recall(&graph, &queries, 64, &tenth);
        assert!(r >= 0.95, "filtered recall {r}");
        let rebuilt = graph.rebuilt(2).unwrap();
        assert_eq!(rebuilt.live(), 2000);
        assert_eq!(rebuilt.nodes(), 3000);
        assert!(!rebuilt.is_live(0) && rebuilt.is_live(1));
        let r = recall(&rebuilt, &queries, 64, &|_| true);
        assert!(r >= 0.95, "rebuilt recall {r}");
    }

    #[test]
    fn a_writer_s_copy_leaves_the_readers_version_alone() {
        let data = clustered(2100, 16, 5, 5);
        let mut graph = Graph::new(params(16));
        for (i, v) in data[..2000].iter().enumerate() {
            graph.insert(i as u32, v).unwrap();
        }
        graph.take_changed();
        let before = graph.clone();
        let mut writer = graph.clone();
        for (i, v) in data[2000..].iter().enumerate() {
            writer.insert(2000 + i as u32, v).unwrap();
        }
        writer.delete(5);
        assert_eq!(before.nodes(), 2000);
        assert!(before.is_live(5));
        let changed = writer.take_changed();
        assert!(changed.contains(&1) && changed.contains(&2));
        assert!(changed.len() <= 3);
        // Only the changed pages differ; the untouched are shared, not copied.
        for page in 0..before.pages.len() {
            let shared = Arc::ptr_eq(
                before.pages[page].as_ref().unwrap(),
                writer.pages[page].as_ref().unwrap(),
            );
            assert_eq!(shared, !changed.contains(&(page as u32)), "page {page}");
        }
    }

    #[test]
    fn pages_round_trip_through_their_encoding() {
        let data = clustered(2500, 8, 4, 9);
        let mut graph = Graph::new(params(8));
        for (i, v) in data.iter().enumerate() {
            // Ids 10..20 are skipped: holes.
            let node = if i < 10 { i } else { i + 10 } as u32;
            graph.insert(node, v).unwrap();
        }
        graph.delete(42);
        let pages: Vec<_> = (0..graph.pages.len() as u32)
            .map(|p| graph.encode_page(p))
            .collect();
        let decoded = Graph::decode(graph.shape(), pages).unwrap();
        assert_eq!(decoded.shape(), graph.shape());
        assert_eq!(decoded.pages, graph.pages);
        assert_eq!(decoded.vectors, graph.vectors);
        assert!(!decoded.is_live(15) && !decoded.is_live(42));
        let q = &data[100];
        assert_eq!(decoded.search(q, 5, 40, None), graph.search(q, 5, 40, None));
        // A damaged page is an error, not a panic.
        let (mut links, vectors) = graph.encode_page(0).unwrap();
        links.truncate(links.len() / 2);
        assert!(Graph::decode(
            graph.shape(),
            vec![Some((links, vectors.clone())), None, None]
        )
        .is_err());
        let (mut links, _) = graph.encode_page(0).unwrap();
        links[5 + 2 * PAGE_NODES..5 + 2 * PAGE_NODES + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Graph::decode(graph.shape(), vec![Some((links, vectors)), None, None]).is_err());
    }

    #[test]
    fn many_inserted_on_threads_build_the_graph_one_thread_builds() {
        let mut data = clustered(6100, 32, 20, 17);
        let queries = data.split_off(6000);
        let nodes: Vec<(u32, &[f32])> = data
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u32, v.as_slice()))
            .collect();
        let mut two = Graph::new(params(32));
        two.insert_many(&nodes, 2).unwrap();
        let mut three = Graph::new(params(32));
        three.insert_many(&nodes, 3).unwrap();
        assert_eq!(two.pages, three.pages, "the thread count changes nothing");
        let r = recall(&two, &queries, 64, &|_| true);
        assert!(r >= 0.95, "recall {r}");
        assert!(
            two.insert_many(&[(5, &data[5])], 2).is_err(),
            "ids only go up"
        );
    }

    #[test]
    fn copies_of_one_vector_stay_reachable() {
        let mut graph = Graph::new(params(4));
        for node in 0..300 {
            graph.insert(node, &[0.5, 0.5, 0.5, 0.5]).unwrap();
        }
        // Were ties broken one way for all, every copy would link to the same few and a
        // search would find little more than those.
        let found = graph.search(&[1.0, 0.0, 0.0, 0.0], 300, 300, None);
        assert!(found.len() >= 285, "{}", found.len());
    }

    #[test]
    fn levels_are_a_hash_of_the_id() {
        assert_eq!(level_of(77, 16), level_of(77, 16));
        let high = (0..100_000).filter(|n| level_of(*n, 16) > 0).count();
        // About one node in sixteen rises above the lowest level.
        assert!((5_000..7_500).contains(&high), "{high}");
    }
}
