//! The knowledge-base benchmark's mindlite side (`benches/kb.sh` runs it, then the peers in
//! `kb_peers.py` on the same files).
//!
//! 1. Data: N unit vectors of D dimensions around N/1000 cluster centres, and Q queries drawn
//!    the same way (a fixed-seed generator), written to `--dir` as little-endian f32
//!    (`base.f32`, `queries.f32`), with the exact top 10 of every query (`truth.u32`) and of
//!    every query among the vectors whose id is a multiple of 10 (`truth10.u32`, the 10 %
//!    filter), found by computing every distance.
//! 2. The index alone (`mindlite_vectors::hnsw`, as knowledge bases use it): build time with M
//!    and efConstruction, then recall@10, p50 latency and queries per second on 1 and 2
//!    threads at several ef, unfiltered and with the 10 % filter; an exact search's time
//!    beside the time of one read of every vector (the memory-bandwidth bound).
//! 3. Through the engine: `INSERT INTO kb SELECT …` of the N vectors' documents, embedded by a
//!    fake OpenAI-compatible server on 127.0.0.1 that answers each text `v<i>` with vector i
//!    (index build included), rows/s and peak RSS; then SQL searches (`WHERE content = 'q<j>'`)
//!    with their p50, QPS and recall@10.
//! 4. Hybrid search on a corpus of text documents (`--docs`), embedded by a fake that hashes
//!    words: p50 and QPS of vector-only, hybrid and keyword searches, and how often a document
//!    is found from three of its rarest words; then questions of three of its commonest words
//!    (long postings).
//!
//! Prints one JSON object per measurement, one per line.
//!
//! ```text
//! kb --dir benches/data/kb [--n 1000000] [--d 384] [--queries 1000] [--m 16]
//!    [--ef-construction 128] [--docs 100000] [--skip-engine] [--hybrid-only] [--rounds 1]
//!    [--engine-only] [--storage-url postgresql://…]
//! ```
//!
//! `--storage-url` keeps the engine's knowledge bases in PostgreSQL with pgvector (the server's
//! HNSW index and full-text search; `knowledge_bases.storage_url`); `--engine-only` skips the
//! index on its own and the hybrid corpus.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mindlite::{Config, Engine};
use mindlite_vectors::hnsw::{dot, Graph, Params};
use serde_json::{json, Value};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn dir_arg() -> PathBuf {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("benches/data/kb"))
}

/// A fixed-seed generator: xorshift64* for uniforms, Box–Muller for normals.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
}

/// `n` vectors around `centres` (each point: its centre plus noise of about 0.75 its length).
fn points(centres: &[Vec<f32>], n: usize, d: usize, rng: &mut Rng) -> Vec<f32> {
    let spread = 0.75 / (d as f32).sqrt();
    let mut out = Vec::with_capacity(n * d);
    for _ in 0..n {
        let centre = &centres[(rng.uniform() * centres.len() as f64) as usize % centres.len()];
        let mut v: Vec<f32> = centre.iter().map(|c| c + spread * rng.normal()).collect();
        normalise(&mut v);
        out.extend_from_slice(&v);
    }
    out
}

fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).expect("write data");
}

fn write_u32(path: &Path, values: &[u32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).expect("write data");
}

/// The exact top `k` of each query among the vectors `keep` takes, nearest first, on 2 threads.
fn truth(base: &[f32], queries: &[f32], d: usize, k: usize, keep: fn(usize) -> bool) -> Vec<u32> {
    let q = queries.len() / d;
    let half = q / 2;
    let top = |range: std::ops::Range<usize>| -> Vec<u32> {
        let mut out = Vec::new();
        for j in range {
            let query = &queries[j * d..(j + 1) * d];
            let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
            for (i, v) in base.chunks_exact(d).enumerate() {
                if !keep(i) {
                    continue;
                }
                let distance = 1.0 - dot(query, v);
                if best.len() < k || distance < best[k - 1].0 {
                    let at = best.partition_point(|b| b.0 <= distance);
                    best.insert(at, (distance, i as u32));
                    best.truncate(k);
                }
            }
            out.extend(best.iter().map(|b| b.1));
        }
        out
    };
    std::thread::scope(|s| {
        let first = s.spawn(|| top(0..half));
        let second = top(half..q);
        let mut all = first.join().expect("truth thread");
        all.extend(second);
        all
    })
}

fn percentile(times: &[f64], p: f64) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn recall(found: &[Vec<u32>], truth: &[u32], k: usize) -> f64 {
    let hits: usize = found
        .iter()
        .enumerate()
        .map(|(j, f)| {
            let t = &truth[j * k..(j + 1) * k];
            f.iter().take(k).filter(|n| t.contains(n)).count()
        })
        .sum();
    hits as f64 / (found.len() * k) as f64
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn report(value: Value) {
    println!("{value}");
    std::io::stdout().flush().ok();
}

/// Searches every query on `threads` threads; returns the results, p50 ms (1 thread) and QPS.
fn run_queries(
    queries: &[f32],
    d: usize,
    threads: usize,
    search: &(dyn Fn(&[f32]) -> Vec<u32> + Sync),
) -> (Vec<Vec<u32>>, f64, f64) {
    let q = queries.len() / d;
    let start = Instant::now();
    let per = q.div_ceil(threads);
    let results: Vec<(Vec<u32>, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t * per..((t + 1) * per).min(q))
                        .map(|j| {
                            let at = Instant::now();
                            let found = search(&queries[j * d..(j + 1) * d]);
                            (found, at.elapsed().as_secs_f64() * 1000.0)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("search thread"))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let times: Vec<f64> = results.iter().map(|r| r.1).collect();
    (
        results.into_iter().map(|r| r.0).collect(),
        percentile(&times, 0.5),
        q as f64 / wall,
    )
}

pub fn main() {
    let n = arg("--n", 1_000_000) as usize;
    let d = arg("--d", 384) as usize;
    let q = arg("--queries", 1000) as usize;
    let m = arg("--m", 16) as usize;
    let ef_construction = arg("--ef-construction", 128) as usize;
    let docs = arg("--docs", 100_000) as usize;
    let dir = dir_arg();
    std::fs::create_dir_all(&dir).expect("data directory");
    if flag("--hybrid-only") {
        hybrid(
            docs,
            &FakeEmbedder::start(Arc::new(Vec::new()), Vec::new(), d),
        );
        return;
    }

    // 1. Data.
    let start = Instant::now();
    let mut rng = Rng(20_261_126);
    let centres: Vec<Vec<f32>> = (0..(n / 1000).max(1))
        .map(|_| {
            let mut c: Vec<f32> = (0..d).map(|_| rng.normal()).collect();
            normalise(&mut c);
            c
        })
        .collect();
    let base = Arc::new(points(&centres, n, d, &mut rng));
    let queries = points(&centres, q, d, &mut rng);
    let truth_all = truth(&base, &queries, d, 10, |_| true);
    let truth_tenth = truth(&base, &queries, d, 10, |i| i % 10 == 0);
    write_f32(&dir.join("base.f32"), &base);
    write_f32(&dir.join("queries.f32"), &queries);
    write_u32(&dir.join("truth.u32"), &truth_all);
    write_u32(&dir.join("truth10.u32"), &truth_tenth);
    report(
        json!({"phase": "data", "n": n, "d": d, "queries": q, "clusters": centres.len(),
        "seconds": start.elapsed().as_secs_f64()}),
    );

    // 2. The index alone.
    let engine_only = flag("--engine-only");
    if !engine_only {
        let params = Params {
            dimensions: d,
            m,
            ef_construction,
        };
        let nodes: Vec<(u32, &[f32])> = base
            .chunks_exact(d)
            .enumerate()
            .map(|(i, v)| (i as u32, v))
            .collect();
        let mut graph = Graph::new(params);
        for threads in [1usize, 2] {
            graph = Graph::new(params);
            let start = Instant::now();
            graph.insert_many(&nodes, threads).expect("insert");
            let build_s = start.elapsed().as_secs_f64();
            report(json!({"phase": "index_build", "engine": "mindlite", "m": m,
            "ef_construction": ef_construction, "seconds": build_s,
            "vectors_per_s": n as f64 / build_s, "threads": threads}));
        }
        drop(nodes);
        let tenth = |node: u32| node.is_multiple_of(10);
        for ef in [16usize, 32, 64, 128, 256] {
            for (filter, truth) in [("none", &truth_all), ("10%", &truth_tenth)] {
                for threads in [1usize, 2] {
                    let search = |query: &[f32]| -> Vec<u32> {
                        let accept: Option<&dyn Fn(u32) -> bool> = match filter {
                            "none" => None,
                            _ => Some(&tenth),
                        };
                        graph
                            .search(query, 10, ef, accept)
                            .iter()
                            .map(|f| f.node)
                            .collect()
                    };
                    let (found, p50, qps) = run_queries(&queries, d, threads, &search);
                    report(
                        json!({"phase": "index_search", "engine": "mindlite", "ef": ef,
                    "filter": filter, "threads": threads, "recall_at_10": recall(&found, truth, 10),
                    "p50_ms": p50, "qps": qps}),
                    );
                }
            }
        }
        // Exact search, one thread, against one read of every vector.
        let exact_queries = 20.min(q);
        let start = Instant::now();
        for j in 0..exact_queries {
            std::hint::black_box(graph.exact(&queries[j * d..(j + 1) * d], 10, None));
        }
        let exact_ms = start.elapsed().as_secs_f64() * 1000.0 / exact_queries as f64;
        // The bound: one pass over as many bytes as the vectors hold, by one thread, at the
        // memory bandwidth a plain integer reduction (which the compiler vectorises) reaches.
        let words: Vec<u64> = (0..n * d / 2).map(|i| i as u64).collect();
        let start = Instant::now();
        let mut folded = 0u64;
        for _ in 0..3 {
            folded ^= words.iter().fold(0u64, |a, w| a ^ w);
        }
        std::hint::black_box(folded);
        let read_ms = start.elapsed().as_secs_f64() * 1000.0 / 3.0;
        drop(words);
        let bytes = (n * d * 4) as f64;
        report(
            json!({"phase": "exact_search", "engine": "mindlite", "threads": 1,
        "ms_per_query": exact_ms, "bandwidth_bound_ms": read_ms,
        "bandwidth_gb_s": bytes / read_ms / 1e6, "times_the_bound": exact_ms / read_ms}),
        );
        drop(graph);
    }

    if flag("--skip-engine") {
        return;
    }

    // 3. Through the engine.
    let embedder = FakeEmbedder::start(Arc::clone(&base), queries.clone(), d);
    let data = tempfile::tempdir().expect("a temporary directory");
    let mut config = Config::default();
    config.embedding.base_url = embedder.base_url.clone();
    config.embedding.model_name = "bench".into();
    config.embedding.batch_size = 1000;
    config.knowledge_bases.hnsw_m = m;
    config.knowledge_bases.hnsw_ef_construction = ef_construction;
    let storage = text_arg("--storage-url");
    let engine_name = match &storage {
        Some(_) => "mindlite+pgvector",
        None => "mindlite",
    };
    if let Some(url) = storage {
        config.knowledge_bases.storage_url = url;
    }
    let engine = Engine::open(data.path().join("kb.redb"), config).expect("open");
    engine
        .sql_blocking("CREATE KNOWLEDGE_BASE kb USING metadata_columns = ['shard']")
        .expect("create");
    let start = Instant::now();
    engine
        .sql_blocking(&format!(
            "INSERT INTO kb (id, content, shard) SELECT value AS id, 'v' || value AS content, \
             value % 10 AS shard FROM generate_series(0, {}) ",
            n - 1
        ))
        .expect("insert");
    let insert_s = start.elapsed().as_secs_f64();
    let file_mb = std::fs::metadata(data.path().join("kb.redb"))
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0);
    report(
        json!({"phase": "ingest", "engine": engine_name, "rows": n, "seconds": insert_s,
        "rows_per_s": n as f64 / insert_s, "peak_rss_mb": peak_rss_mb(), "file_mb": file_mb}),
    );
    for (filter, truth) in [("none", &truth_all), ("10%", &truth_tenth)] {
        let condition = match filter {
            "none" => "",
            _ => "AND shard = 0",
        };
        let mut times = Vec::new();
        let mut found = Vec::new();
        let start = Instant::now();
        for j in 0..q {
            let at = Instant::now();
            let rows = engine
                .sql_blocking(&format!(
                    "SELECT id FROM kb WHERE content = 'q{j}' {condition} LIMIT 10"
                ))
                .expect("search");
            times.push(at.elapsed().as_secs_f64() * 1000.0);
            found.push(
                first_column(&rows)
                    .iter()
                    .map(|id| id.parse().expect("an id"))
                    .collect(),
            );
        }
        report(
            json!({"phase": "sql_search", "engine": engine_name, "filter": filter,
            "threads": 1, "recall_at_10": recall(&found, truth, 10),
            "p50_ms": percentile(&times, 0.5), "qps": q as f64 / start.elapsed().as_secs_f64()}),
        );
    }
    drop(engine);
    if engine_only {
        return;
    }

    // 4. Hybrid search on text documents.
    hybrid(docs, &embedder);
}

/// Hybrid search on `docs` generated documents of 40 words from a vocabulary of 20,000 with
/// Zipf's law, embedded by hashing their words. `--rounds R` asks every question R times (for
/// a profiler; the figures are of all rounds).
fn hybrid(docs: usize, embedder: &FakeEmbedder) {
    let data = tempfile::tempdir().expect("a temporary directory");
    let mut config = Config::default();
    config.embedding.base_url = embedder.base_url.clone();
    config.embedding.model_name = "words".into();
    config.embedding.batch_size = 1000;
    let engine = Engine::open(data.path().join("text.redb"), config).expect("open");
    engine
        .sql_blocking("CREATE KNOWLEDGE_BASE notes")
        .expect("create");
    let mut rng = Rng(7);
    let vocabulary = 20_000usize;
    // Zipf: the word of rank r is drawn with weight 1/r.
    let weights: Vec<f64> = (1..=vocabulary).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(vocabulary);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cumulative.push(acc);
    }
    let word = |rank: usize| format!("w{}", to_letters(rank));
    let mut texts = Vec::with_capacity(docs);
    for _ in 0..docs {
        let words: Vec<usize> = (0..40)
            .map(|_| {
                let u = rng.uniform();
                cumulative.partition_point(|c| *c < u).min(vocabulary - 1)
            })
            .collect();
        texts.push(words);
    }
    let start = Instant::now();
    for (batch, chunk) in texts.chunks(10_000).enumerate() {
        let values: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, words)| {
                let text: Vec<String> = words.iter().map(|w| word(*w)).collect();
                format!("({}, 'doc {}')", batch * 10_000 + i, text.join(" "))
            })
            .collect();
        engine
            .sql_blocking(&format!(
                "INSERT INTO notes (id, content) VALUES {}",
                values.join(", ")
            ))
            .expect("insert");
    }
    let insert_s = start.elapsed().as_secs_f64();
    report(
        json!({"phase": "hybrid_ingest", "engine": "mindlite", "documents": docs,
        "seconds": insert_s, "rows_per_s": docs as f64 / insert_s}),
    );
    // Questions: three of a document's rarest words (whose postings are short), and three of
    // its commonest (whose postings cover much of the corpus).
    let rounds = arg("--rounds", 1) as usize;
    let targets: Vec<usize> = (0..200 * rounds).map(|i| (i % 200 * 7919) % docs).collect();
    for (words, mode, condition) in [
        ("rarest", "vector", ""),
        ("rarest", "hybrid", "AND hybrid_search = true"),
        ("rarest", "keyword", "AND hybrid_search_alpha = 0"),
        ("commonest", "hybrid", "AND hybrid_search = true"),
        ("commonest", "keyword", "AND hybrid_search_alpha = 0"),
    ] {
        let mut times = Vec::new();
        let mut hits = 0;
        let start = Instant::now();
        for target in &targets {
            let mut ranks = texts[*target].clone();
            ranks.sort_unstable();
            ranks.dedup();
            if words == "rarest" {
                ranks.reverse();
            }
            let question: Vec<String> = ranks.iter().take(3).map(|w| word(*w)).collect();
            let at = Instant::now();
            let rows = engine
                .sql_blocking(&format!(
                    "SELECT id FROM notes WHERE content = '{}' {condition} LIMIT 10",
                    question.join(" ")
                ))
                .expect("search");
            times.push(at.elapsed().as_secs_f64() * 1000.0);
            let ids = first_column(&rows);
            if ids.iter().any(|id| *id == target.to_string()) {
                hits += 1;
            }
        }
        report(
            json!({"phase": "hybrid_search", "engine": "mindlite", "mode": mode,
            "question": words, "documents": docs, "p50_ms": percentile(&times, 0.5),
            "qps": targets.len() as f64 / start.elapsed().as_secs_f64(),
            "found_at_10": hits as f64 / targets.len() as f64}),
        );
    }
}

/// The first column of a result, as text.
fn first_column(rows: &mindlite::Collected) -> Vec<String> {
    use mindlite::arrow::array::{Array, AsArray};
    let mut out = Vec::new();
    for batch in &rows.batches {
        let text = mindlite::arrow::compute::cast(
            batch.column(0),
            &mindlite::arrow::datatypes::DataType::Utf8,
        )
        .expect("a column cast to text");
        let text = text.as_string::<i32>();
        out.extend((0..text.len()).map(|i| text.value(i).to_string()));
    }
    out
}

fn to_letters(mut n: usize) -> String {
    let mut s = String::new();
    loop {
        s.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            return s;
        }
    }
}

/// An OpenAI-compatible `/embeddings` server on 127.0.0.1: `v<i>` is base vector i, `q<j>`
/// query j, any other text the sum of its words hashed into the dimensions.
struct FakeEmbedder {
    base_url: String,
}

impl FakeEmbedder {
    fn start(base: Arc<Vec<f32>>, queries: Vec<f32>, d: usize) -> FakeEmbedder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        let queries = Arc::new(queries);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (base, queries) = (Arc::clone(&base), Arc::clone(&queries));
                std::thread::spawn(move || serve(stream, &base, &queries, d));
            }
        });
        FakeEmbedder { base_url }
    }
}

fn vector_of(text: &str, base: &[f32], queries: &[f32], d: usize) -> Vec<f32> {
    let indexed = |prefix: char, values: &[f32]| -> Option<Vec<f32>> {
        let i: usize = text.strip_prefix(prefix)?.parse().ok()?;
        values.get(i * d..(i + 1) * d).map(<[f32]>::to_vec)
    };
    if let Some(v) = indexed('v', base).or_else(|| indexed('q', queries)) {
        return v;
    }
    let mut v = vec![0.0f32; d];
    for word in text.split_whitespace() {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        v[(h % d as u64) as usize] += 1.0;
    }
    if v.iter().all(|x| *x == 0.0) {
        v[0] = 1.0;
    }
    v
}

fn serve(stream: TcpStream, base: &[f32], queries: &[f32], d: usize) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let texts: Vec<&str> = request["input"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = String::with_capacity(texts.len() * d * 12);
        out.push_str("{\"object\":\"list\",\"data\":[");
        for (i, text) in texts.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                "{{\"object\":\"embedding\",\"index\":{i},\"embedding\":["
            ));
            for (k, x) in vector_of(text, base, queries, d).iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str(&x.to_string());
            }
            out.push_str("]}");
        }
        out.push_str("],\"model\":\"bench\"}");
        let mut reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            out.len()
        );
        reply.push_str(&out);
        // One write, sent at once: a head and a body written apart meet Nagle's algorithm and
        // the client's delayed ACK, which add 40 ms to every request.
        let stream = reader.get_mut();
        if stream.set_nodelay(true).is_err() || stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
