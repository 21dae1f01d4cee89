//! The local embedding provider's speed: all-MiniLM-L6-v2 (or any sentence-transformers BERT
//! folder) run in process by `mindlite_vectors::sentence`.
//!
//! 1. The model alone: sentences per second and tokens per second on 1 and 2 threads, for short
//!    texts (a dozen words, a question's length) and for 1,000-character chunks (a knowledge
//!    base's default chunk, about 200 tokens).
//! 2. Through the engine: `INSERT INTO kb SELECT …` of documents of 1,000 characters into a
//!    knowledge base whose `embedding_model` is `{"provider": "local", "model_name": DIR}`
//!    (chunking, embedding, both indexes and the commit), rows per second; then searches
//!    (`WHERE content = '…'`, the question embedded in process) with their p50.
//!
//! The texts are words drawn from the model's own vocabulary (whole words only, fixed seed), so
//! their token counts are those of real prose. Prints one JSON object per measurement.
//!
//! ```text
//! minilm --model target/minilm/model [--texts 1000] [--docs 2000] [--searches 200]
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use mindlite::{Config, Engine};
use mindlite_vectors::sentence::SentenceModel;
use serde_json::{json, Value};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn number(name: &str, default: usize) -> usize {
    arg(name).map_or(default, |v| v.parse().expect("a number"))
}

fn report(value: Value) {
    println!("{value}");
    std::io::stdout().flush().ok();
}

/// Whole words of the vocabulary (no `##` pieces, no `[..]` specials, letters only), drawn with
/// a fixed-seed xorshift into texts of about `chars` characters.
fn texts(vocab: &str, count: usize, chars: usize, seed: u64) -> Vec<String> {
    let words: Vec<&str> = vocab
        .lines()
        .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    let mut state = seed;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let mut text = String::new();
            while text.len() < chars {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(words[next() as usize % words.len()]);
            }
            text
        })
        .collect()
}

pub fn main() {
    let dir = PathBuf::from(arg("--model").expect("--model DIR (a sentence-transformers folder)"));
    let dir = std::fs::canonicalize(&dir).expect("the model folder");
    let count = number("--texts", 1000);
    let docs = number("--docs", 2000);
    let searches = number("--searches", 200);
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).expect("a model file");
    let weights = std::fs::read(dir.join("model.safetensors")).expect("model.safetensors");
    let vocab = read("vocab.txt");
    let model = SentenceModel::from_files(
        &read("config.json"),
        &weights,
        &vocab,
        std::fs::read_to_string(dir.join("sentence_bert_config.json"))
            .ok()
            .as_deref(),
    )
    .expect("the model loads");

    // 1. The model alone.
    for (kind, chars) in [("short", 80), ("chunk", 1000)] {
        let batch = texts(&vocab, count, chars, 11);
        let tokens: usize = batch.iter().map(|t| model.tokens(t).len()).sum();
        for threads in [1, 2] {
            let start = Instant::now();
            let vectors = model.embed_all(&batch, threads);
            let seconds = start.elapsed().as_secs_f64();
            assert_eq!(vectors.len(), batch.len());
            report(json!({"phase": "encode", "texts": kind, "count": count,
                "tokens_per_text": tokens as f64 / count as f64, "threads": threads,
                "texts_per_s": count as f64 / seconds, "tokens_per_s": tokens as f64 / seconds}));
        }
    }

    // 2. Through the engine.
    let data = tempfile::tempdir().expect("a temporary directory");
    let engine = Engine::open(data.path().join("minilm.redb"), Config::default()).expect("open");
    let model_name = dir.to_str().expect("a UTF-8 path");
    engine
        .sql_blocking(&format!(
            "CREATE KNOWLEDGE_BASE kb USING embedding_model = \
             {{\"provider\": \"local\", \"model_name\": \"{model_name}\"}}"
        ))
        .expect("create");
    engine
        .sql_blocking("CREATE TABLE docs (id INT, content VARCHAR)")
        .expect("table");
    let bodies = texts(&vocab, docs, 990, 23);
    let values: Vec<String> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| format!("({i}, '{body}')"))
        .collect();
    engine
        .sql_blocking(&format!("INSERT INTO docs VALUES {}", values.join(", ")))
        .expect("docs");
    let start = Instant::now();
    engine
        .sql_blocking("INSERT INTO kb SELECT id, content FROM docs")
        .expect("insert");
    let seconds = start.elapsed().as_secs_f64();
    report(
        json!({"phase": "engine_insert", "documents": docs, "seconds": seconds,
        "rows_per_s": docs as f64 / seconds}),
    );
    let questions = texts(&vocab, searches, 60, 31);
    let mut times = Vec::with_capacity(searches);
    for question in &questions {
        let start = Instant::now();
        engine
            .sql_blocking(&format!(
                "SELECT id FROM kb WHERE content = '{question}' LIMIT 10"
            ))
            .expect("search");
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    report(json!({"phase": "engine_search", "searches": searches,
        "p50_ms": times[times.len() / 2], "p95_ms": times[times.len() * 95 / 100]}));
}
