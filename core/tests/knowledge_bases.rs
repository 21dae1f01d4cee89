//! Knowledge bases through SQL, against a deterministic fake embedding server on 127.0.0.1:
//! a text's vector counts its words, each hashed to one of 64 dimensions, so texts sharing
//! words are near and the expected ranking of a small corpus is known; words holding digits
//! (identifiers such as `E1234`) mean nothing to it, as codes mean little to a real embedding
//! model, which is what keyword search is for. A text holding `EMBEDFAIL` makes the server
//! answer 500, one holding `SLOWLY` makes it take 150 ms. The same server answers chat
//! completions from a script (for agents), scores chunks as a reranker (90 for a chunk
//! mentioning tails, 20 otherwise) and records every chat request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use mindlite::{encode_document, Config, Engine, InsertProgress, QueryRequest};
use serde_json::{json, Value};

const DIMENSIONS: usize = 64;

/// The fake provider; records the number of texts of every embeddings request, and every chat
/// request, answered with the SQL tool calls in `script` and then a final text.
struct FakeEmbedder {
    base_url: String,
    requests: Arc<Mutex<Vec<usize>>>,
    chats: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<Vec<String>>>,
}

impl FakeEmbedder {
    fn start() -> FakeEmbedder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let chats = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(Vec::new()));
        let shared = (
            Arc::clone(&requests),
            Arc::clone(&chats),
            Arc::clone(&script),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared.0, &shared.1, &shared.2));
            }
        });
        FakeEmbedder {
            base_url,
            requests,
            chats,
            script,
        }
    }
}

fn vector(text: &str) -> Vec<f64> {
    let mut v = vec![0.0; DIMENSIONS];
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2 && !w.chars().any(|c| c.is_ascii_digit()))
    {
        // FNV-1a
        let mut h: u64 = 0xcbf29ce484222325;
        for b in word.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        v[(h % DIMENSIONS as u64) as usize] += 1.0;
    }
    v
}

fn serve(
    stream: TcpStream,
    seen: &Mutex<Vec<usize>>,
    chats: &Mutex<Vec<Value>>,
    script: &Mutex<Vec<String>>,
) {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: Value = serde_json::from_slice(&body).unwrap();
    if request_line.contains("/chat/completions") {
        let system = request["messages"][0]["content"].as_str().unwrap_or("");
        let reranking = system.starts_with("Score the relevance");
        let chunk = request["messages"][1]["content"].as_str().unwrap_or("");
        let score = if chunk.contains("tails") { "90" } else { "20" };
        chats.lock().unwrap().push(request.clone());
        let next = {
            let mut script = script.lock().unwrap();
            (!reranking && !system.starts_with("You write test questions") && !script.is_empty())
                .then(|| script.remove(0))
        };
        // Asked for a test question: the text itself, so a search finds its document first.
        let question = system
            .starts_with("You write test questions")
            .then(|| chunk.trim_start_matches("Text:\n").to_string());
        let message = match next {
            _ if reranking => json!({"role": "assistant", "content": score}),
            _ if question.is_some() => json!({"role": "assistant", "content": format!(
                "```json\n{}\n```",
                json!({"query": question, "reference_answer": "it"})
            )}),
            Some(query) => json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "sql_query", "arguments": json!({"query": query}).to_string()}}]}),
            None => json!({"role": "assistant", "content": "The launch is on Friday."}),
        };
        let body = json!({"choices": [{"index": 0, "message": message}]}).to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let mut stream = reader.into_inner();
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body.as_bytes());
        return;
    }
    let texts: Vec<String> = request["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    seen.lock().unwrap().push(texts.len());
    if texts.iter().any(|t| t.contains("SLOWLY")) {
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    let (status, body) = if texts.iter().any(|t| t.contains("EMBEDFAIL")) {
        (500, json!({"error": {"message": "model overloaded"}}))
    } else {
        let data: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t)}))
            .collect();
        (
            200,
            json!({"object": "list", "data": data, "model": request["model"]}),
        )
    };
    let body = body.to_string();
    let mut stream = reader.into_inner();
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

/// Whether this copy of the suite keeps its knowledge bases in PostgreSQL with pgvector
/// (`integration.rs` includes this file twice).
fn on_pgvector() -> bool {
    module_path!().ends_with("_pgvector")
}

/// The pgvector server `scripts/pgvector.sh` started (its URL in `PGVECTOR_TEST_URL`), for the
/// copy of the suite that keeps its knowledge bases there; `None` for the other.
fn pgvector_url() -> Option<String> {
    if !on_pgvector() {
        return None;
    }
    match std::env::var("PGVECTOR_TEST_URL") {
        Ok(url) => Some(url),
        Err(_) => {
            // The test command always starts one; so must CI.
            assert!(
                std::env::var("CI").is_err(),
                "PGVECTOR_TEST_URL is not set: run scripts/test.sh, which starts PostgreSQL with pgvector"
            );
            eprintln!("SKIPPED pgvector: PGVECTOR_TEST_URL is not set (scripts/pgvector.sh start CACHE DIR PORT); the suite runs on the file");
            None
        }
    }
}

/// The name a child process runs test `name` of this copy of the suite by.
fn child_test(name: &str) -> String {
    let module = module_path!();
    format!(
        "{}::{name}",
        module.strip_prefix("integration::").unwrap_or(module)
    )
}

fn config(embedder: &FakeEmbedder) -> Config {
    let mut config = Config::default();
    if let Some(url) = pgvector_url() {
        config.knowledge_bases.storage_url = url;
    }
    config.embedding.base_url = embedder.base_url.clone();
    config.embedding.model_name = "fake-embedder".into();
    config.embedding.batch_size = 4;
    config.llm.base_url = embedder.base_url.clone();
    config.llm.model_name = "fake-model".into();
    config
}

fn doc(engine: &Engine, sql: &str) -> Value {
    let result = engine.query_blocking(QueryRequest::new(sql));
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

fn exec(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "ok", "{sql}: {d}");
    d
}

fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

/// A knowledge base `kb` of four documents with `category` and `year` metadata.
fn corpus(engine: &Engine) {
    exec(
        engine,
        "CREATE KNOWLEDGE_BASE kb USING metadata_columns = ['category', 'year']",
    );
    exec(
        engine,
        "INSERT INTO kb (id, content, category, year) VALUES \
         (1, 'Cats purr when they are content and meow at people', 'pets', 2001), \
         (2, 'Dogs bark at strangers and wag their tails', 'pets', 1999), \
         (3, 'The stock market fell as interest rates rose', 'finance', 2020), \
         (4, 'Cats and dogs can live together as pets', 'pets', 2015)",
    );
}

fn ids(engine: &Engine, sql: &str) -> Vec<String> {
    rows(engine, sql)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_search_ranks_by_meaning_and_returns_mindsdb_s_columns() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    let d = doc(
        &engine,
        "SELECT * FROM kb WHERE content = 'why do cats purr and meow'",
    );
    let names: Vec<&str> = d["column_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "id",
            "chunk_id",
            "chunk_content",
            "metadata",
            "category",
            "year",
            "distance",
            "relevance",
            "content",
            "hybrid_search",
            "hybrid_search_alpha",
            "reranking"
        ]
    );
    let data = d["data"].as_array().unwrap();
    assert_eq!(data.len(), 4, "{d}");
    assert_eq!(data[0][0], "1");
    assert_eq!(data[0][1], "1:content:1of1:0to50");
    assert_eq!(data[0][4], "pets");
    assert_eq!(data[0][5], 2001);
    let metadata: Value = serde_json::from_str(data[0][3].as_str().unwrap()).unwrap();
    assert_eq!(metadata, json!({"category": "pets", "year": 2001}));
    // Nearest first; relevance is 1 / (1 + distance).
    let distance = |row: &Value| row[6].as_f64().unwrap();
    for pair in data.windows(2) {
        assert!(distance(&pair[0]) <= distance(&pair[1]), "{d}");
    }
    let relevance = data[0][7].as_f64().unwrap();
    assert!((relevance - 1.0 / (1.0 + distance(&data[0]))).abs() < 1e-9);
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'stock market' LIMIT 1"
        ),
        ["3"]
    );
    // A value that does not fit its metadata column is an error, never a NULL.
    let unfit = error(
        &engine,
        "INSERT INTO kb (id, content, category, year) VALUES (9, 'x', 'pets', 'n/a')",
    );
    assert!(unfit.contains("does not fit"), "{unfit}");
    // Without a question: every chunk, no distance.
    let all = rows(&engine, "SELECT id, distance FROM kb ORDER BY id");
    assert_eq!(
        all,
        json!([["1", null], ["2", null], ["3", null], ["4", null]])
    );
}

#[test]
fn metadata_filters_apply_before_ranking_and_relevance_thresholds_after() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    // The nearest document is about cats (1), but only finance is asked for: the best of
    // those comes back, not an empty post-filtered top 1.
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' AND category = 'finance' LIMIT 1"
        ),
        ["3"]
    );
    for (filter, expected) in [
        ("year > 2000", vec!["1", "4", "3"]),
        ("year >= 2015 AND category <> 'finance'", vec!["4"]),
        ("category IN ('finance')", vec!["3"]),
        ("year BETWEEN 1990 AND 2001", vec!["1", "2"]),
        ("category LIKE 'fin%'", vec!["3"]),
        ("year IS NULL", vec![]),
        ("id = '2'", vec!["2"]),
        ("year <= 1999", vec!["2"]),
        ("year < 2000 OR category = 'finance'", vec!["2", "3"]),
        ("category NOT IN ('pets')", vec!["3"]),
        ("NOT (year > 2000)", vec!["2"]),
    ] {
        let got = ids(
            &engine,
            &format!("SELECT id FROM kb WHERE content = 'cats purr and meow' AND ({filter})"),
        );
        assert_eq!(got, expected, "{filter}");
    }
    let relevant = rows(
        &engine,
        "SELECT id, relevance FROM kb WHERE content = 'cats purr and meow' AND relevance >= 0.6",
    );
    let relevant = relevant.as_array().unwrap();
    assert!(!relevant.is_empty() && relevant.len() < 4, "{relevant:?}");
    assert!(relevant.iter().all(|r| r[1].as_f64().unwrap() >= 0.6));
}

#[test]
fn content_like_in_not_like_and_or_search_as_mindsdb_26_reads_them() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    // LIKE asks its pattern without the outer wildcards, as `=` does; so does chunk_content.
    let asked = ids(&engine, "SELECT id FROM kb WHERE content = 'stock market'");
    assert_eq!(asked[0], "3");
    for like in [
        "content LIKE '%stock market%'",
        "content LIKE 'stock market'",
        "chunk_content LIKE '% stock market %'",
    ] {
        assert_eq!(
            ids(&engine, &format!("SELECT id FROM kb WHERE {like}")),
            asked,
            "{like}"
        );
    }
    // NOT LIKE leaves out the chunks nearer it than the question: the one about dogs barking,
    // and here the one about markets, which is about neither but a little nearer barking.
    let before = embedder.requests.lock().unwrap().len();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content LIKE 'cats and dogs pets' \
             AND content NOT LIKE 'dogs bark strangers'"
        ),
        ["4", "1"]
    );
    // The question and the excluded one are embedded in one request.
    assert_eq!(embedder.requests.lock().unwrap()[before..], [2]);
    for excluded in [
        "content != 'dogs bark strangers'",
        "NOT content LIKE 'dogs bark strangers'",
        "content NOT IN ('dogs bark strangers', 'wag tails')",
    ] {
        assert_eq!(
            ids(
                &engine,
                &format!("SELECT id FROM kb WHERE content = 'cats and dogs pets' AND {excluded}")
            ),
            ["4", "1"],
            "{excluded}"
        );
    }
    // IN and OR ask each question; the answers come once each, in the order asked.
    for either in [
        "content IN ('stock market', 'purr meow')",
        "(content = 'stock market' OR content LIKE '%purr meow%')",
    ] {
        assert_eq!(
            ids(
                &engine,
                &format!("SELECT id FROM kb WHERE {either} AND relevance > 0.6")
            ),
            ["3", "1"],
            "{either}"
        );
    }
    // A branch without a question reads the chunks its conditions keep, after the searches,
    // without the chunks they answered.
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE (content = 'stock market' AND relevance > 0.6) \
             OR year < 2000 OR category = 'finance'"
        ),
        ["3", "2"]
    );
    // Each branch keeps its own conditions; conditions beside the OR hold in every branch.
    let mut both = ids(
        &engine,
        "SELECT id FROM kb WHERE ((content LIKE 'cats' AND year > 2010) \
         OR (content LIKE 'market' AND category = 'finance')) AND relevance > 0.55",
    );
    both.sort();
    assert_eq!(both, ["3", "4"]);
    // Through an alias, a join and a subquery that filters first.
    assert_eq!(
        ids(
            &engine,
            "SELECT k.id FROM (SELECT * FROM kb WHERE year > 1990) k \
             WHERE k.content LIKE 'cats and dogs pets' AND k.content NOT LIKE 'dogs bark strangers'"
        ),
        ["4", "1"]
    );
    exec(
        &engine,
        "CREATE VIEW recent AS SELECT * FROM kb WHERE year > 1990",
    );
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM recent WHERE content LIKE 'cats and dogs pets' \
             AND content NOT LIKE 'dogs bark strangers'"
        ),
        ["4", "1"]
    );
    exec(&engine, "CREATE TABLE years (y INT)");
    exec(&engine, "INSERT INTO years VALUES (2015), (2020)");
    assert_eq!(
        ids(
            &engine,
            "SELECT k.id FROM kb k JOIN years ON k.year = years.y \
             WHERE k.content = 'stock market' AND k.content != 'cats dogs pets'"
        ),
        ["3"]
    );
    // A column a projection names `content`, and a table's own `content`, compare as SQL does.
    assert_eq!(
        ids(
            &engine,
            "SELECT s.id FROM (SELECT chunk_id AS content, id FROM kb) s \
             WHERE s.content = '2:content:1of1:0to42'"
        ),
        ["2"]
    );
    exec(&engine, "CREATE TABLE pages (id TEXT, content TEXT)");
    exec(&engine, "INSERT INTO pages VALUES ('a', 'x'), ('b', 'y')");
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM pages WHERE content LIKE 'x' OR content IN ('y', 'z')"
        ),
        ["a", "b"]
    );
    assert!(rows(&engine, "SELECT id FROM kb WHERE content IS NULL")
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content IS NOT NULL ORDER BY id"
        ),
        ["1", "2", "3", "4"]
    );
    let alone = error(&engine, "SELECT id FROM kb WHERE content NOT LIKE 'war'");
    assert!(alone.contains("beside a question"), "{alone}");
    let many = (0..17)
        .map(|i| format!("'q{i}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let spread = error(
        &engine,
        &format!("SELECT id FROM kb WHERE content IN ({many})"),
    );
    assert!(spread.contains("more than 16 questions"), "{spread}");
    let crossed = error(
        &engine,
        "SELECT id FROM kb WHERE (content = 'a' OR content = 'b') AND (content = 'c' OR content = 'd') \
         AND (content = 'e' OR content = 'f') AND (content = 'g' OR content = 'h') \
         AND (content = 'i' OR content = 'j')",
    );
    assert!(crossed.contains("more than 16 searches"), "{crossed}");
    let excluded = error(
        &engine,
        &format!("SELECT id FROM kb WHERE content = 'a' AND content NOT IN ({many})"),
    );
    assert!(excluded.contains("more than 16 questions"), "{excluded}");
    // Thousands of excluded texts are refused at once, not spread first.
    let long = (0..8000)
        .map(|i| format!("'w{i}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let refused = error(
        &engine,
        &format!("SELECT id FROM kb WHERE content = 'a' AND content NOT IN ({long})"),
    );
    assert!(refused.contains("more than 16 questions"), "{refused}");
    // A search the knowledge base cannot answer (OR with another table's column, above the
    // join) is an error naming it, never chunk text compared with the question.
    let above = error(
        &engine,
        "SELECT k.id FROM kb k JOIN years ON k.year = years.y \
         WHERE k.content = 'stock market' OR years.y = 2015",
    );
    assert!(
        above.contains("content = 'stock market' cannot be answered by its knowledge base"),
        "{above}"
    );
    // NOT over OR reads the conditions beneath (De Morgan's).
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats and dogs pets' \
             AND NOT (content = 'dogs bark strangers' OR year > 2010)"
        ),
        ["1"]
    );
    // EXPLAIN names the searches and calls no model.
    let before = embedder.requests.lock().unwrap().len();
    let plan = rows(
        &engine,
        "EXPLAIN SELECT id FROM kb WHERE (content = 'a' AND content NOT LIKE 'b') OR year < 2000",
    )
    .to_string();
    assert!(
        plan.contains("limit=10 alpha=1 reranking=false excluding=1; then the chunks"),
        "{plan}"
    );
    assert_eq!(embedder.requests.lock().unwrap().len(), before);
}

#[test]
fn hybrid_search_mixes_keyword_scores_into_the_vector_ranking() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    exec(&engine, "CREATE KNOWLEDGE_BASE manual");
    exec(
        &engine,
        "INSERT INTO manual (id, content) VALUES \
         (1, 'E1234 indicates a blocked filter'), \
         (2, 'An error in the display'), \
         (3, 'Error messages and what they mean explained'), \
         (4, 'Cleaning the pump every month')",
    );
    let search = |conditions: &str| {
        ids(
            &engine,
            &format!("SELECT id FROM manual WHERE content = 'error E1234' {conditions}"),
        )
    };
    // The code means nothing to the embedder: by meaning, the display's error is nearest.
    assert_eq!(search("LIMIT 1"), ["2"]);
    // By keywords alone, the rare code outweighs the common word; a chunk holding neither
    // is no match. The question is not embedded at all.
    let embedded = embedder.requests.lock().unwrap().len();
    assert_eq!(search("AND hybrid_search_alpha = 0"), ["1", "2", "3"]);
    assert_eq!(embedder.requests.lock().unwrap().len(), embedded);
    // Mixed: at MindsDB's default weight (0.5) meaning still wins this one, with more weight
    // on keywords the code does.
    assert_eq!(search("AND hybrid_search = true LIMIT 1"), ["2"]);
    assert_eq!(
        search("AND hybrid_search = true AND hybrid_search_alpha = 0.3 LIMIT 1"),
        ["1"]
    );
    assert_eq!(search("AND hybrid_search_alpha = 1 LIMIT 1"), ["2"]);
    // Every chunk is ranked, nearest first, with relevance from the mixed distance and the
    // search's settings shown.
    let all = rows(
        &engine,
        "SELECT id, distance, relevance, hybrid_search, hybrid_search_alpha, reranking \
         FROM manual WHERE content = 'error E1234' AND hybrid_search",
    );
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 4, "{all:?}");
    for row in all {
        let distance = row[1].as_f64().unwrap();
        assert!((row[2].as_f64().unwrap() - 1.0 / (1.0 + distance)).abs() < 1e-9);
        assert_eq!(
            row.as_array().unwrap()[3..],
            [json!(true), json!(0.5), json!(false)]
        );
    }
    for pair in all.windows(2) {
        assert!(pair[0][1].as_f64() <= pair[1][1].as_f64(), "{all:?}");
    }
    // Conditions select before ranking, thresholds apply to the mixed scores.
    assert_eq!(
        search("AND hybrid_search_alpha = 0 AND id <> '1'"),
        ["2", "3"]
    );
    let kept = rows(
        &engine,
        "SELECT relevance FROM manual WHERE content = 'error E1234' AND hybrid_search \
         AND relevance > 0.6",
    );
    let kept = kept.as_array().unwrap();
    assert!(!kept.is_empty() && kept.len() < 4, "{kept:?}");
    for (conditions, says) in [
        ("AND hybrid_search_alpha = 1.5", "between 0 and 1"),
        ("AND (hybrid_search OR id = '1')", "joined by AND"),
    ] {
        let e = error(
            &engine,
            &format!("SELECT id FROM manual WHERE content = 'error' {conditions}"),
        );
        assert!(e.contains(says), "{conditions}: {e}");
    }
    let e = error(&engine, "SELECT id FROM manual WHERE hybrid_search = true");
    assert!(e.contains("needs a content"), "{e}");
}

#[test]
fn a_reranker_scores_the_found_chunks_unless_reranking_is_off() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb USING reranking_model = {\"model_name\": \"fake-reranker\", \"api_key\": \"sk-rerank\"}",
    );
    exec(
        &engine,
        "INSERT INTO kb (id, content) VALUES \
         (1, 'Cats purr when they are content and meow at people'), \
         (2, 'Dogs bark at strangers and wag their tails'), \
         (3, 'The stock market fell as interest rates rose'), \
         (4, 'Cats and dogs can live together as pets')",
    );
    // The reranker prefers the chunk about tails, whatever the vectors say.
    let ranked = rows(
        &engine,
        "SELECT id, relevance, reranking FROM kb WHERE content = 'cats purr' LIMIT 2",
    );
    assert_eq!(ranked[0], json!(["2", 0.9, true]));
    assert_eq!(ranked[1][1], json!(0.2));
    {
        let chats = embedder.chats.lock().unwrap();
        // MindsDB's candidate count: min(2 · LIMIT, LIMIT + 30), here every chunk.
        assert_eq!(chats.len(), 4);
        assert_eq!(chats[0]["model"], "fake-reranker");
        let system = chats[0]["messages"][0]["content"].as_str().unwrap();
        assert!(system.ends_with("Search query: cats purr"), "{system}");
    }
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' AND relevance >= 0.5"
        ),
        ["2"]
    );
    let calls = embedder.chats.lock().unwrap().len();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' AND reranking = false LIMIT 1"
        ),
        ["1"]
    );
    assert_eq!(embedder.chats.lock().unwrap().len(), calls);
    // The reranker's key is masked wherever the knowledge base is shown.
    let shown = || {
        let shown = rows(
            &engine,
            "SELECT reranking_model FROM information_schema.knowledge_bases",
        );
        serde_json::from_str::<Value>(shown[0][0].as_str().unwrap()).unwrap()
    };
    assert_eq!(
        shown(),
        json!({"model_name": "fake-reranker", "api_key": "******"})
    );
    // ALTER merges settings in, `false` removes the reranker.
    exec(
        &engine,
        "ALTER KNOWLEDGE_BASE kb USING reranking_model = {\"model_name\": \"other\"}",
    );
    assert_eq!(shown(), json!({"model_name": "other", "api_key": "******"}));
    exec(
        &engine,
        "ALTER KNOWLEDGE_BASE kb USING reranking_model = false",
    );
    assert_eq!(shown(), Value::Null);
    let calls = embedder.chats.lock().unwrap().len();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' LIMIT 1"
        ),
        ["1"]
    );
    assert_eq!(embedder.chats.lock().unwrap().len(), calls);
    // What the stored chunks depend on cannot change.
    for (using, says) in [
        (
            "embedding_model = {\"model_name\": \"another\"}",
            "You can't update 'model_name'",
        ),
        (
            "metadata_columns = ['year']",
            "fixed once it holds documents",
        ),
        ("storage = 'x'", "cannot be altered"),
        ("id_column = 'content'", "cannot also be"),
    ] {
        let e = error(&engine, &format!("ALTER KNOWLEDGE_BASE kb USING {using}"));
        assert!(e.contains(says), "{using}: {e}");
    }
    let e = error(&engine, "ALTER KNOWLEDGE_BASE nope USING id_column = 'x'");
    assert!(e.contains("does not exist"), "{e}");
    // Later inserts chunk as altered.
    exec(
        &engine,
        "ALTER KNOWLEDGE_BASE kb USING preprocessing = {\"text_chunking_config\": {\"chunk_size\": 20, \"chunk_overlap\": 0}}",
    );
    exec(
        &engine,
        "INSERT INTO kb (id, content) VALUES (5, 'Parrots talk and sing and whistle all day long')",
    );
    let chunks = rows(&engine, "SELECT count(*) FROM kb WHERE id = '5'");
    assert!(chunks[0][0].as_i64().unwrap() > 1, "{chunks}");
}

#[test]
fn reinserting_a_document_replaces_its_chunks_and_delete_removes_documents() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE p_kb USING preprocessing = {\"text_chunking_config\": {\"chunk_size\": 40, \"chunk_overlap\": 10}}",
    );
    let long = "Alpha bravo charlie delta echo foxtrot. Golf hotel india juliet kilo lima. \
                Mike november oscar papa quebec romeo.";
    exec(
        &engine,
        &format!("INSERT INTO p_kb (id, content, source) VALUES ('a', '{long}', 'wiki'), ('b', 'short note', 'mail')"),
    );
    let chunks = rows(&engine, "SELECT chunk_id FROM p_kb WHERE id = 'a'");
    let chunks = chunks.as_array().unwrap();
    assert!(chunks.len() >= 3, "{chunks:?}");
    let total = chunks.len();
    assert_eq!(chunks[0][0], format!("a:content:1of{total}:0to40"));
    // Again with other text: only the new chunks remain.
    let d = exec(
        &engine,
        "INSERT INTO p_kb (id, content, source) VALUES ('a', 'replaced text', 'wiki')",
    );
    assert_eq!(d["affected_rows"], 1);
    assert_eq!(
        rows(
            &engine,
            "SELECT chunk_id, chunk_content FROM p_kb WHERE id = 'a'"
        ),
        json!([["a:content:1of1:0to13", "replaced text"]])
    );
    // Metadata not declared: every other column, fixed by the first insert.
    assert_eq!(
        rows(&engine, "SELECT id, source FROM p_kb ORDER BY id"),
        json!([["a", "wiki"], ["b", "mail"]])
    );
    exec(&engine, "DELETE FROM p_kb WHERE source = 'mail'");
    assert_eq!(ids(&engine, "SELECT id FROM p_kb"), ["a"]);
    exec(&engine, "DELETE FROM p_kb WHERE id = 'a'");
    assert_eq!(rows(&engine, "SELECT count(*) FROM p_kb"), json!([[0]]));
    assert!(error(&engine, "UPDATE p_kb SET source = 'x'").contains("not supported"));
    let twice = error(
        &engine,
        "INSERT INTO p_kb (id, content) VALUES ('z', 'one'), ('z', 'two')",
    );
    assert!(twice.contains("given twice"), "{twice}");
    assert_eq!(rows(&engine, "SELECT count(*) FROM p_kb"), json!([[0]]));
}

#[test]
fn insert_select_embeds_in_batches_and_joins_with_tables() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    exec(
        &engine,
        "CREATE TABLE docs (doc_id INT, title TEXT, body TEXT)",
    );
    exec(
        &engine,
        "INSERT INTO docs VALUES (10, 'Felines', 'cats purr and meow'), \
         (11, 'Canines', 'dogs bark and fetch'), (12, 'Money', 'bonds and stocks and markets'), \
         (13, 'Birds', 'parrots talk and sing'), (14, 'Fish', 'salmon swim upstream'), \
         (15, 'Bugs', 'ants build colonies')",
    );
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE mindsdb.docs_kb USING id_column = 'doc_id', content_columns = ['body'], \
         metadata_columns = ['title'], embedding_model = {\"provider\": \"openai\", \"model_name\": \"fake-embedder\"}",
    );
    let before = embedder.requests.lock().unwrap().len();
    let d = exec(
        &engine,
        "INSERT INTO docs_kb SELECT doc_id, title, body FROM docs",
    );
    assert_eq!(d["affected_rows"], 6);
    // Six texts in batches of at most four.
    let sizes: Vec<usize> = embedder.requests.lock().unwrap()[before..].to_vec();
    assert_eq!(sizes, [4, 2]);
    let joined = rows(
        &engine,
        "SELECT d.title, k.chunk_content FROM docs_kb AS k JOIN docs AS d ON CAST(k.id AS INT) = d.doc_id \
         WHERE k.content = 'do cats meow' ORDER BY k.distance LIMIT 1",
    );
    assert_eq!(joined, json!([["Felines", "cats purr and meow"]]));
    assert!(error(
        &engine,
        "INSERT INTO docs_kb (doc_id, title) VALUES (1, 'x')"
    )
    .contains("needs its content column 'body'"));
}

#[test]
fn a_failed_embedding_leaves_the_knowledge_base_as_it_was() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    let message = error(
        &engine,
        "INSERT INTO kb (id, content) VALUES (1, 'new text for one'), (9, 'EMBEDFAIL here'), \
         (10, 'more'), (11, 'and more'), (12, 'and more again')",
    );
    assert!(message.contains("model overloaded"), "{message}");
    assert_eq!(
        rows(
            &engine,
            "SELECT id, chunk_content FROM kb WHERE id IN ('1', '9')"
        ),
        json!([["1", "Cats purr when they are content and meow at people"]])
    );
}

#[test]
fn statements_and_errors_name_what_is_wrong() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    exec(&engine, "CREATE TABLE t (a INT)");
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb1 USING embedding_model = {\"api_key\": \"sk-secret\"}",
    );
    exec(&engine, "CREATE KNOWLEDGE_BASE IF NOT EXISTS kb1");
    assert!(error(&engine, "CREATE KNOWLEDGE_BASE kb1").contains("already exists"));
    assert!(error(&engine, "CREATE KNOWLEDGE_BASE t").contains("Table 't' already exists"));
    assert!(
        error(&engine, "CREATE TABLE kb1 (a INT)").contains("Knowledge base 'kb1' already exists")
    );
    assert!(error(&engine, "CREATE KNOWLEDGE_BASE kb2 USING colour = 'red'").contains("colour"));
    assert!(error(&engine, "CREATE KNOWLEDGE_BASE nope.kb2").contains("nope"));
    let shown = rows(&engine, "SHOW KNOWLEDGE_BASES");
    assert_eq!(shown.as_array().unwrap().len(), 1);
    assert_eq!(shown[0][0], "kb1");
    assert!(shown[0][2].as_str().unwrap().contains("******"));
    assert!(!shown.to_string().contains("sk-secret"));
    assert_eq!(
        rows(&engine, "DESCRIBE KNOWLEDGE_BASE mindsdb.kb1")[0][6],
        "id"
    );
    exec(&engine, "DROP KNOWLEDGE_BASE kb1");
    exec(&engine, "DROP KNOWLEDGE_BASE IF EXISTS kb1");
    assert!(error(&engine, "DROP KNOWLEDGE_BASE kb1").contains("does not exist"));
    assert_eq!(rows(&engine, "SHOW KNOWLEDGE_BASES"), json!([]));
}

#[test]
fn knowledge_bases_persist_and_go_with_their_project_and_agents_may_name_them() {
    let embedder = FakeEmbedder::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb.redb");
    {
        let engine = Engine::open(&path, config(&embedder)).unwrap();
        exec(&engine, "CREATE PROJECT proj");
        exec(&engine, "CREATE KNOWLEDGE_BASE proj.notes");
        exec(
            &engine,
            "INSERT INTO proj.notes (id, content) VALUES (1, 'the launch is on friday'), (2, 'lunch is at noon')",
        );
    }
    let engine = Engine::open(&path, config(&embedder)).unwrap();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM proj.notes WHERE content = 'when is the launch' LIMIT 1"
        ),
        ["1"]
    );
    let agent = |kbs: Value| {
        engine.block_on(engine.create_agent(
            "proj",
            json!({"name": "helper", "data": {"knowledge_bases": kbs}}),
        ))
    };
    let missing = agent(json!(["proj.other"])).unwrap_err();
    assert!(
        missing.message().contains("does not exist"),
        "{}",
        missing.message()
    );
    agent(json!(["proj.notes"])).unwrap();
    // The agent searches its knowledge base through its SQL tool.
    embedder
        .script
        .lock()
        .unwrap()
        .push("SELECT chunk_content FROM proj.notes WHERE content = 'launch day' LIMIT 1".into());
    let answer = engine
        .block_on(engine.ask_agent(
            "proj",
            "helper",
            &json!([{"role": "user", "content": "When is the launch?"}]),
        ))
        .unwrap();
    assert_eq!(answer.content, "The launch is on Friday.");
    let chats = embedder.chats.lock().unwrap().clone();
    let system = chats[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("Knowledge base proj.notes"), "{system}");
    let tool_result = chats[1]["messages"][3]["content"].to_string();
    assert!(
        tool_result.contains("the launch is on friday"),
        "{tool_result}"
    );
    assert!(!tool_result.contains("lunch is at noon"), "{tool_result}");
    exec(&engine, "DROP AGENT proj.helper");
    // Granted tables are not granted knowledge bases.
    engine
        .block_on(engine.create_agent(
            "proj",
            json!({"name": "tables_only", "data": {"tables": ["proj.*"]}}),
        ))
        .unwrap();
    embedder
        .script
        .lock()
        .unwrap()
        .push("SELECT chunk_content FROM proj.notes LIMIT 1".into());
    engine
        .block_on(engine.ask_agent(
            "proj",
            "tables_only",
            &json!([{"role": "user", "content": "When is the launch?"}]),
        ))
        .unwrap();
    let chats = embedder.chats.lock().unwrap().clone();
    let refused = chats.last().unwrap()["messages"].to_string();
    assert!(
        refused.contains("not one of this agent's knowledge bases"),
        "{refused}"
    );
    exec(&engine, "DROP AGENT proj.tables_only");
    exec(&engine, "DROP PROJECT proj");
    exec(&engine, "CREATE PROJECT proj");
    assert_eq!(rows(&engine, "SHOW KNOWLEDGE_BASES FROM proj"), json!([]));
    exec(&engine, "CREATE KNOWLEDGE_BASE proj.notes");
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM proj.notes"),
        json!([[0]])
    );
}

const CRASH_CHILD_ENV: &str = "MINDLITE_KB_CRASH_WRITER_DB";
const DOCUMENTS: u64 = 12;

/// Document `id` as written by insert number `version`: several chunks, each naming both.
fn versioned(version: u64, id: u64) -> String {
    (0..8)
        .map(|n| format!("version{version} document{id} part{n} of its text."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writer mode of the crash test: re-inserts every document with a new version, in a loop,
/// acknowledging each statement after it returned. Only active when the parent sets the
/// environment variable.
#[test]
fn kb_crash_writer_child() {
    let Ok(path) = std::env::var(CRASH_CHILD_ENV) else {
        return;
    };
    let embedder = FakeEmbedder::start();
    let engine = Engine::open(&path, config(&embedder)).expect("child opens the database");
    engine
        .sql_blocking(
            "CREATE KNOWLEDGE_BASE IF NOT EXISTS kb USING preprocessing = \
             {\"text_chunking_config\": {\"chunk_size\": 80, \"chunk_overlap\": 20}}",
        )
        .unwrap();
    // Versions go on from the last one stored.
    let stored = doc(
        &engine,
        "SELECT chunk_content FROM kb WHERE id = '1' LIMIT 1",
    );
    let start = stored["data"][0][0]
        .as_str()
        .and_then(|text| {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix("version"))
        })
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(1, |v| v + 1);
    for version in start.. {
        let rows: Vec<String> = (1..=DOCUMENTS)
            .map(|id| format!("({id}, '{}')", versioned(version, id)))
            .collect();
        engine
            .sql_blocking(&format!(
                "INSERT INTO kb (id, content) VALUES {}",
                rows.join(", ")
            ))
            .unwrap();
        let mut out = std::io::stdout().lock();
        writeln!(out, "ack {version}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn a_killed_insert_leaves_every_document_whole_at_one_version() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb-crash.redb");
    let me = std::env::current_exe().unwrap();
    let mut last_acknowledged = 0u64;
    let embedder = FakeEmbedder::start();
    let mut searching = config(&embedder);
    searching.knowledge_bases.exact_below = 0;
    for (trial, pause_ms) in [150u64, 400, 90, 700, 250, 520].into_iter().enumerate() {
        let mut child = Command::new(&me)
            .args([
                "--exact",
                &child_test("kb_crash_writer_child"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|line| {
                    line.split("ack ")
                        .nth(1)
                        .and_then(|n| n.trim().parse::<u64>().ok())
                })
                .max()
        });
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if let Some(acked) = reader.join().unwrap() {
            last_acknowledged = last_acknowledged.max(acked);
        }
        let engine = Engine::open(&path, searching.clone())
            .unwrap_or_else(|e| panic!("trial {trial}: the file does not reopen: {e}"));
        let d = doc(&engine, "SELECT id, chunk_id, chunk_content FROM kb");
        if d["type"] == "error" {
            // Killed before the knowledge base was created.
            continue;
        }
        let mut versions = std::collections::BTreeMap::<String, (u64, usize, usize)>::new();
        for row in d["data"].as_array().unwrap() {
            let id = row[0].as_str().unwrap().to_string();
            let text = row[2].as_str().unwrap();
            let total: usize = row[1]
                .as_str()
                .unwrap()
                .split(':')
                .nth(2)
                .unwrap()
                .split("of")
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let version: u64 = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("version"))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("trial {trial}: chunk without a version: {text}"));
            let entry = versions.entry(id.clone()).or_insert((version, 0, total));
            assert_eq!(
                entry.0, version,
                "trial {trial}: document {id} mixes versions"
            );
            entry.1 += 1;
        }
        let mut seen = std::collections::BTreeSet::new();
        for (id, (version, chunks, total)) in &versions {
            assert_eq!(chunks, total, "trial {trial}: document {id} is partial");
            assert!(
                *version >= last_acknowledged,
                "trial {trial}: document {id} at version {version}, but {last_acknowledged} was acknowledged"
            );
            seen.insert(*version);
        }
        // The indexes are the rows': each document's word finds exactly its chunks holding
        // it, and a search over the vectors finds chunks of the table only.
        let stored: Vec<(String, String)> = d["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_str().unwrap().into(), r[2].as_str().unwrap().into()))
            .collect();
        for id in 1..=DOCUMENTS {
            let word = format!("document{id}");
            let mut holding: Vec<String> = stored
                .iter()
                .filter(|(_, text)| {
                    text.split(|c: char| !c.is_alphanumeric())
                        .any(|w| w == word)
                })
                .map(|(id, _)| id.clone())
                .collect();
            let mut found = ids(
                &engine,
                &format!("SELECT id FROM kb WHERE content = '{word}' AND hybrid_search_alpha = 0 LIMIT 100000"),
            );
            holding.sort();
            found.sort();
            assert_eq!(found, holding, "trial {trial}: the keyword index of {word}");
        }
        let nearest = rows(
            &engine,
            "SELECT chunk_id FROM kb WHERE content = 'its text' LIMIT 100000",
        );
        assert!(nearest.as_array().unwrap().len() <= stored.len());
        if !versions.is_empty() {
            assert_eq!(
                versions.len() as u64,
                DOCUMENTS,
                "trial {trial}: documents missing"
            );
            assert_eq!(
                seen.len(),
                1,
                "trial {trial}: one statement landed in part: {seen:?}"
            );
        }
    }
    assert!(
        last_acknowledged >= 3,
        "the writers made too little progress: {last_acknowledged}"
    );
}

/// The handles of two users of a hosted engine on the fake embedder (they keep it open).
fn hosted_alice_and_bob(embedder: &FakeEmbedder) -> (Engine, Engine) {
    let mut config = config(embedder);
    config.edition = mindlite::Edition::Hosted;
    let engine = Engine::open_in_memory(config).unwrap();
    let handle = |name: &str| {
        engine.block_on(engine.create_user(name, None)).unwrap();
        let key = engine.block_on(engine.create_api_key(name)).unwrap().key;
        engine.as_user(&key).unwrap()
    };
    (handle("alice"), handle("bob"))
}

#[test]
fn tenants_see_only_their_knowledge_bases_and_reach_only_the_configured_embedder() {
    let embedder = FakeEmbedder::start();
    let (alice, bob) = hosted_alice_and_bob(&embedder);
    exec(&alice, "CREATE KNOWLEDGE_BASE kb");
    exec(
        &alice,
        "INSERT INTO kb (id, content) VALUES (1, 'alice private plans')",
    );
    assert!(error(&bob, "SELECT * FROM kb").contains("not found"));
    assert_eq!(rows(&bob, "SHOW KNOWLEDGE_BASES"), json!([]));
    exec(&bob, "CREATE KNOWLEDGE_BASE kb");
    assert_eq!(rows(&bob, "SELECT count(*) FROM kb"), json!([[0]]));
    assert_eq!(rows(&alice, "SELECT count(*) FROM kb"), json!([[1]]));
    // A tenant's own endpoint inside the operator's network is refused before any call: an
    // address written in the URL when the knowledge base is created or altered, a name when
    // it is first used. The configured embedder's own address is reachable under its path
    // only.
    let refused_at = |engine: &Engine, sql: &str, setting: &str| {
        let refused = error(engine, sql);
        assert!(
            refused.contains(&format!(
                "'{setting}.base_url' was refused by the egress policy"
            )),
            "{sql}: {refused}"
        );
    };
    let (configured, root) = (
        embedder.base_url.clone(),
        embedder.base_url.trim_end_matches("/v1").to_string(),
    );
    refused_at(
        &bob,
        "CREATE KNOWLEDGE_BASE sneaky USING embedding_model = {\"base_url\": \"http://127.0.0.1:9/v1\"}",
        "embedding_model",
    );
    refused_at(
        &bob,
        "CREATE KNOWLEDGE_BASE sneaky USING reranking_model = {\"provider\": \"openai\", \"model_name\": \"m\", \"base_url\": \"http://[::ffff:169.254.169.254]/v1\"}",
        "reranking_model",
    );
    refused_at(
        &bob,
        &format!("CREATE KNOWLEDGE_BASE sneaky USING embedding_model = {{\"base_url\": \"{root}/admin\"}}"),
        "embedding_model",
    );
    assert_eq!(
        rows(&bob, "SELECT name FROM information_schema.knowledge_bases"),
        json!([["kb"]])
    );
    let before = rows(
        &bob,
        "SELECT embedding_model, reranking_model FROM information_schema.knowledge_bases",
    );
    refused_at(
        &bob,
        "ALTER KNOWLEDGE_BASE kb USING embedding_model = {\"base_url\": \"http://10.0.0.1/v1\"}",
        "embedding_model",
    );
    refused_at(
        &bob,
        "ALTER KNOWLEDGE_BASE kb USING reranking_model = {\"provider\": \"openai\", \"model_name\": \"m\", \"base_url\": \"http://127.0.0.1:9/v1\"}",
        "reranking_model",
    );
    assert_eq!(
        rows(
            &bob,
            "SELECT embedding_model, reranking_model FROM information_schema.knowledge_bases"
        ),
        before,
        "a refused ALTER changed nothing"
    );
    exec(
        &bob,
        &format!(
            "ALTER KNOWLEDGE_BASE kb USING embedding_model = {{\"base_url\": \"{configured}\"}}"
        ),
    );
    exec(
        &bob,
        "CREATE KNOWLEDGE_BASE sneaky USING embedding_model = {\"base_url\": \"http://localhost:9/v1\"}",
    );
    let refused = error(&bob, "INSERT INTO sneaky (id, content) VALUES (1, 'x')");
    assert!(
        refused
            .contains("refused by the egress policy: this server does not connect to 'localhost'"),
        "{refused}"
    );
}

/// `n` texts of `words` words each from a vocabulary of sixty, drawn by a fixed-seed generator.
fn texts(n: usize, words: usize, seed: u64) -> Vec<String> {
    let vocabulary: Vec<String> = (0..60)
        .map(|i| {
            let letters: String = format!("{i:02}")
                .bytes()
                .map(|b| char::from(b'a' + (b - b'0')))
                .collect();
            format!("word{letters}x")
        })
        .collect();
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    (0..n)
        .map(|_| {
            (0..words)
                .map(|_| vocabulary[next() % vocabulary.len()].clone())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn cosine_distance(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    1.0 - dot / (norm(a) * norm(b))
}

#[test]
fn the_vector_index_finds_what_computing_every_distance_finds() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    // Every search walks the graph, however few the chunks.
    config.knowledge_bases.exact_below = 0;
    config.embedding.batch_size = 64;
    let engine = Engine::open_in_memory(config).unwrap();
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb USING metadata_columns = ['shard']",
    );
    let documents = texts(600, 6, 1);
    for (batch, docs) in documents.chunks(150).enumerate() {
        let values: Vec<String> = docs
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let id = batch * 150 + i;
                format!("({id}, '{text}', {})", id % 10)
            })
            .collect();
        exec(
            &engine,
            &format!(
                "INSERT INTO kb (id, content, shard) VALUES {}",
                values.join(", ")
            ),
        );
    }
    // Two documents in three are replaced, then a tenth of them deleted: the graph keeps
    // their old nodes as waypoints until it is rebuilt.
    let replaced = texts(400, 6, 2);
    let values: Vec<String> = replaced
        .iter()
        .enumerate()
        .map(|(id, text)| format!("({id}, '{text}', {})", id % 10))
        .collect();
    exec(
        &engine,
        &format!(
            "INSERT INTO kb (id, content, shard) VALUES {}",
            values.join(", ")
        ),
    );
    exec(&engine, "DELETE FROM kb WHERE shard = 7");
    let mut current: Vec<(usize, String)> = documents.into_iter().enumerate().collect();
    for (id, text) in replaced.into_iter().enumerate() {
        current[id].1 = text;
    }
    current.retain(|(id, _)| id % 10 != 7);
    let (mut found, mut wanted) = (0, 0);
    for (q, question) in texts(40, 2, 3).iter().enumerate() {
        let filter = if q % 2 == 0 { "" } else { "AND shard = 3" };
        let got = rows(
            &engine,
            &format!("SELECT id, distance FROM kb WHERE content = '{question}' {filter} LIMIT 5"),
        );
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), 5, "{question}");
        let query = vector(question);
        let mut exact: Vec<f64> = current
            .iter()
            .filter(|(id, _)| q % 2 == 0 || id % 10 == 3)
            .map(|(_, text)| cosine_distance(&query, &vector(text)))
            .collect();
        exact.sort_by(f64::total_cmp);
        let fifth = exact[4];
        for row in got {
            let id: usize = row[0].as_str().unwrap().parse().unwrap();
            assert!(id % 10 != 7, "a deleted document was found");
            if q % 2 == 1 {
                assert_eq!(id % 10, 3, "the filter was not kept");
            }
            let text = &current.iter().find(|(i, _)| *i == id).unwrap().1;
            let distance = row[1].as_f64().unwrap();
            assert!((distance - cosine_distance(&query, &vector(text))).abs() < 1e-5);
            if distance <= fifth + 1e-6 {
                found += 1;
            }
        }
        wanted += 5;
    }
    let recall = f64::from(found) / f64::from(wanted);
    assert!(recall >= 0.95, "recall@5 {recall}");
    // The same through the keyword index: only chunks holding the word, the best first.
    let word = "wordaax";
    let keyword = ids(
        &engine,
        &format!(
            "SELECT id FROM kb WHERE content = '{word}' AND hybrid_search_alpha = 0 LIMIT 1000"
        ),
    );
    let holding: Vec<usize> = current
        .iter()
        .filter(|(_, text)| text.split(' ').any(|w| w == word))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(keyword.len(), holding.len());
    assert!(keyword
        .iter()
        .all(|id| holding.contains(&id.parse::<usize>().unwrap())));
}

#[test]
fn inserts_into_one_knowledge_base_from_many_threads_all_land() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    config.knowledge_bases.exact_below = 0;
    let engine = Engine::open_in_memory(config).unwrap();
    exec(&engine, "CREATE KNOWLEDGE_BASE kb");
    let writers: Vec<_> = (0..4)
        .map(|thread| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for round in 0..5 {
                    let values: Vec<String> = (0..6)
                        .map(|i| {
                            let id = thread * 100 + round * 6 + i;
                            format!("({id}, 'thread{thread} writes document{id} in round{round}')")
                        })
                        .collect();
                    exec(
                        &engine,
                        &format!("INSERT INTO kb (id, content) VALUES {}", values.join(", ")),
                    );
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(rows(&engine, "SELECT count(*) FROM kb"), json!([[120]]));
    // Every chunk is in both indexes once: a search for all of them finds each.
    let all = ids(
        &engine,
        "SELECT id FROM kb WHERE content = 'writes document in round' LIMIT 500",
    );
    let distinct: std::collections::BTreeSet<&String> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (120, 120));
    let keyword = ids(
        &engine,
        "SELECT id FROM kb WHERE content = 'thread2' AND hybrid_search_alpha = 0 LIMIT 500",
    );
    assert_eq!(keyword.len(), 30);
    assert!(keyword.iter().all(|id| id.starts_with('2')));
}

#[test]
fn an_insert_reports_its_progress_and_stops_when_told() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    config.embedding.batch_size = 1;
    let engine = Engine::open_in_memory(config).unwrap();
    exec(&engine, "CREATE KNOWLEDGE_BASE kb");
    let documents: Vec<Value> = (0..6)
        .map(|i| json!({"id": i, "content": format!("document {i} arrives SLOWLY")}))
        .collect();
    // Another connection watches the insert on the board while it runs.
    let watcher = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            for _ in 0..200 {
                let seen = rows_of(
                    &engine,
                    "SELECT status, embedded FROM information_schema.knowledge_base_inserts",
                );
                if seen
                    .iter()
                    .any(|r| r[0] == "reading" && r[1].as_u64() >= Some(1))
                {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            false
        })
    };
    let reports = Arc::new(Mutex::new(Vec::<InsertProgress>::new()));
    let keep = Arc::clone(&reports);
    let inserted = engine
        .block_on(engine.insert_into_knowledge_base(
            "mindsdb",
            "kb",
            json!({"rows": documents}),
            Some(Box::new(move |p: &InsertProgress| {
                keep.lock().unwrap().push(p.clone());
                true
            })),
        ))
        .unwrap();
    assert_eq!(inserted, 6);
    assert!(
        watcher.join().unwrap(),
        "the board never showed the insert running"
    );
    let reports = reports.lock().unwrap();
    // One report per embedding request (one text each), then storing, then done.
    let embedded: Vec<u64> = reports
        .iter()
        .filter(|p| p.status == "reading")
        .map(|p| p.embedded)
        .collect();
    assert!(embedded.windows(2).all(|w| w[0] <= w[1]), "{embedded:?}");
    assert!(embedded.contains(&6), "{embedded:?}");
    let last = reports.last().unwrap();
    assert_eq!(
        (
            last.status.as_str(),
            last.documents,
            last.chunks,
            last.indexed
        ),
        ("done", 6, 6, 6)
    );
    assert!(reports.iter().any(|p| p.status == "storing"));
    // Told to stop after the second request: nothing is written.
    let stopped = engine.block_on(engine.insert_into_knowledge_base(
        "mindsdb",
        "kb",
        json!({"rows": [{"id": 10, "content": "more SLOWLY"}, {"id": 11, "content": "and more SLOWLY"}, {"id": 12, "content": "SLOWLY again"}]}),
        Some(Box::new(|p: &InsertProgress| p.embedded < 2)),
    ));
    let e = stopped.unwrap_err();
    assert!(e.message().contains("cancelled"), "{e}");
    assert_eq!(rows(&engine, "SELECT count(*) FROM kb"), json!([[6]]));
    let board = rows_of(
        &engine,
        "SELECT name, status, documents, error FROM information_schema.knowledge_base_inserts",
    );
    assert_eq!(board.len(), 2);
    assert_eq!(board[0], json!(["kb", "done", 6, null]));
    assert_eq!(board[1][1], "failed");
    assert!(board[1][3].as_str().unwrap().contains("cancelled"));
}

fn rows_of(engine: &Engine, sql: &str) -> Vec<Value> {
    rows(engine, sql).as_array().unwrap().clone()
}

#[test]
fn a_local_model_embeds_in_process() {
    let Ok(dir) = std::env::var("MINILM_TEST_DIR") else {
        assert!(
            std::env::var("CI").is_err(),
            "MINILM_TEST_DIR is not set: scripts/test.sh unpacks the model and sets it"
        );
        eprintln!("skipped: MINILM_TEST_DIR is not set (scripts/test.sh sets it)");
        return;
    };
    let dir = std::path::Path::new(&dir);
    let mut config = Config::default();
    // No embedding server at all: the configured one is unreachable.
    config.embedding.base_url = "http://127.0.0.1:9/v1".into();
    config.embedding.models_dir = dir.parent().unwrap().display().to_string();
    let engine = Engine::open_in_memory(config).unwrap();
    let name = dir.file_name().unwrap().to_str().unwrap();
    exec(
        &engine,
        &format!(
            "CREATE KNOWLEDGE_BASE kb USING embedding_model = {{\"provider\": \"local\", \"model_name\": \"{name}\"}}"
        ),
    );
    exec(
        &engine,
        "INSERT INTO kb (id, content) VALUES \
         (1, 'To reset your password, open the settings page and choose Forgot password.'), \
         (2, 'Our office is closed on public holidays.'), \
         (3, 'The quarterly report shows revenue growth in Europe.')",
    );
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'I cannot log in to my account' LIMIT 1"
        ),
        ["1"]
    );
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'When are you open?' LIMIT 1"
        ),
        ["2"]
    );
    let e = error(
        &engine,
        "CREATE KNOWLEDGE_BASE other USING embedding_model = {\"provider\": \"local\", \"model_name\": \"no_such_model\"}",
    );
    assert!(e.contains("no_such_model"), "{e}");
}

#[test]
fn a_hosted_mind_searches_the_knowledge_bases_it_names() {
    let embedder = FakeEmbedder::start();
    let (alice, bob) = hosted_alice_and_bob(&embedder);
    exec(&alice, "CREATE KNOWLEDGE_BASE handbook");
    exec(
        &alice,
        "INSERT INTO handbook (id, content) VALUES (1, 'holidays need two weeks notice'), \
         (2, 'the canteen serves soup daily')",
    );
    let mind = alice
        .block_on(alice.create_mind(json!({"name": "hr", "knowledge_bases": ["handbook"]})))
        .unwrap();
    assert_eq!(mind.knowledge_bases, ["mindsdb.handbook"]);
    assert_eq!(
        alice.get_mind("hr").unwrap().to_wire_json()["knowledge_bases"],
        json!(["mindsdb.handbook"])
    );
    embedder.script.lock().unwrap().push(
        "SELECT chunk_content FROM mindsdb.handbook WHERE content = 'holidays notice' LIMIT 1"
            .into(),
    );
    let question = mindlite::ChatRequest::from_chat_completions(
        br#"{"model": "hr", "messages": [{"role": "user", "content": "How early do I ask for holidays?"}]}"#,
    )
    .unwrap();
    alice.block_on(alice.ask_mind(&question)).unwrap();
    let chats = embedder.chats.lock().unwrap().clone();
    let system = chats[chats.len() - 2]["messages"][0]["content"].to_string();
    assert!(
        system.contains("Knowledge base mindsdb.handbook"),
        "{system}"
    );
    let tool_result = chats.last().unwrap()["messages"][3]["content"].to_string();
    assert!(tool_result.contains("two weeks notice"), "{tool_result}");
    // Another tenant cannot name it; a knowledge base a mind searches stays until removed.
    let refused = bob
        .block_on(bob.create_mind(json!({"name": "spy", "knowledge_bases": ["handbook"]})))
        .unwrap_err();
    assert!(refused.message().contains("not found"), "{refused}");
    let e = error(&alice, "DROP KNOWLEDGE_BASE handbook");
    assert!(e.contains("used by mind 'hr'"), "{e}");
    let e = error(&alice, "DROP PROJECT mindsdb");
    assert!(!e.is_empty());
    alice
        .block_on(alice.update_mind("hr", json!({"knowledge_bases": []})))
        .unwrap();
    exec(&alice, "DROP KNOWLEDGE_BASE handbook");
}

#[test]
fn knowledge_bases_count_against_max_storage_mb_and_give_their_bytes_back_exactly() {
    let embedder = FakeEmbedder::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb.redb");
    let mut config = config(&embedder);
    config.embedding.batch_size = 256;
    config.edition = mindlite::Edition::Hosted;
    config.hosted.plans.insert(
        "small".into(),
        mindlite::PlanConfig {
            max_storage_mb: 1,
            ..mindlite::PlanConfig::default()
        },
    );
    config.hosted.default_plan = "small".into();
    let ann = |engine: &Engine| {
        let key = engine.block_on(engine.create_api_key("ann")).unwrap().key;
        engine.as_user(&key).unwrap()
    };
    let stored = |engine: &Engine| engine.limits().unwrap().storage_bytes.used;
    let documents = |from: u32, to: u32| {
        format!(
            "INSERT INTO kb (id, content) SELECT value, 'document about ' || md5(CAST(value AS VARCHAR)) \
             FROM generate_series({from}, {to})"
        )
    };

    let engine = Engine::open(&path, config.clone()).unwrap();
    engine.block_on(engine.create_user("ann", None)).unwrap();
    let handle = ann(&engine);
    exec(&handle, "CREATE KNOWLEDGE_BASE kb");
    assert_eq!(stored(&handle), 0);
    exec(&handle, &documents(1, 500));
    let some = stored(&handle);
    assert!(
        some > 500 * 64 * 4,
        "chunks, vectors and postings count: {some}"
    );
    // Past 1 MiB: refused whole, naming the key.
    let refused = error(&handle, &documents(501, 5000));
    assert!(
        refused.contains("hosted.plans.small.max_storage_mb")
            && refused.contains("nothing was written"),
        "{refused}"
    );
    assert_eq!(rows(&handle, "SELECT count(*) FROM kb"), json!([[500]]));
    assert_eq!(stored(&handle), some);
    // Deleted and replaced documents keep the count exact: a count from scratch agrees.
    exec(&handle, "DELETE FROM kb WHERE id > 400");
    exec(
        &handle,
        "INSERT INTO kb (id, content) VALUES (1, 'replaced text for the first one')",
    );
    let kept = stored(&handle);
    assert!(kept < some, "{kept} after {some}");
    drop(handle);
    engine.close();
    let db = redb::Database::open(&path).unwrap();
    let txn = db.begin_write().unwrap();
    assert!(txn
        .delete_table(redb::TableDefinition::<u64, u64>::new("storage_bytes"))
        .unwrap());
    txn.commit().unwrap();
    drop(db);

    let engine = Engine::open(&path, config).unwrap();
    let handle = ann(&engine);
    assert_eq!(stored(&handle), kept);
    exec(&handle, "DROP KNOWLEDGE_BASE kb");
    // Its chunks are removed by the sweeper after the DROP, their bytes given back as it goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while stored(&handle) != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(stored(&handle), 0);
}

/// Waits (up to 10 s) until the embedder has had `n` requests in all.
fn wait_for_requests(embedder: &FakeEmbedder, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while embedder.requests.lock().unwrap().len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no embedding request came"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Documents that take 150 ms each to embed (one per request).
fn slow_documents(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": i, "content": format!("document {i} arrives SLOWLY")}))
        .collect()
}

#[test]
fn rest_inserts_stop_at_the_statement_deadline_and_write_nothing() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    config.embedding.batch_size = 1;
    config.query.statement_timeout_secs = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    exec(&engine, "CREATE KNOWLEDGE_BASE kb");
    exec(
        &engine,
        "CREATE TABLE docs AS SELECT value AS id, 'row ' || value || ' arrives SLOWLY' AS content FROM generate_series(1, 30)",
    );
    for body in [
        json!({"rows": slow_documents(30)}),
        json!({"query": "SELECT id, content FROM docs"}),
    ] {
        let started = std::time::Instant::now();
        let stopped = engine
            .block_on(engine.insert_into_knowledge_base("mindsdb", "kb", body, None))
            .unwrap_err();
        assert!(stopped.message().contains("time limit"), "{stopped}");
        // Generous: the limit is 1 s; embedding everything takes 4.5 s.
        assert!(started.elapsed() < std::time::Duration::from_millis(3500));
        // The embedding calls stopped with it, and nothing was written.
        let made = embedder.requests.lock().unwrap().len();
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(embedder.requests.lock().unwrap().len() <= made + 1);
        assert_eq!(rows(&engine, "SELECT count(*) FROM kb"), json!([[0]]));
    }
}

#[test]
fn dropping_a_knowledge_base_stops_its_inserts_at_once() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    config.embedding.batch_size = 1;
    let engine = Engine::open_in_memory(config).unwrap();
    for (drop, name) in [
        ("DROP KNOWLEDGE_BASE kb", "mindsdb.kb"),
        ("DROP PROJECT p", "p.kb"),
    ] {
        let (project, kb) = name.split_once('.').unwrap();
        if project == "p" {
            exec(&engine, "CREATE PROJECT p");
        }
        exec(&engine, &format!("CREATE KNOWLEDGE_BASE {name}"));
        let before = embedder.requests.lock().unwrap().len();
        let inserting = {
            let (engine, project, kb) = (engine.clone(), project.to_string(), kb.to_string());
            std::thread::spawn(move || {
                let body = json!({"rows": slow_documents(40)});
                let result =
                    engine.block_on(engine.insert_into_knowledge_base(&project, &kb, body, None));
                (result, std::time::Instant::now())
            })
        };
        wait_for_requests(&embedder, before + 2);
        let dropped_at = std::time::Instant::now();
        exec(&engine, drop);
        let (result, ended_at) = inserting.join().unwrap();
        let e = result.unwrap_err();
        assert!(e.message().contains("cancelled"), "{name}: {e}");
        // At once: within the embedding request in flight (150 ms), generously bounded.
        assert!(
            ended_at.duration_since(dropped_at) < std::time::Duration::from_secs(2),
            "{name}: the insert ran on for {:?}",
            ended_at.duration_since(dropped_at)
        );
        let made = embedder.requests.lock().unwrap().len();
        assert!(made < before + 40, "{name}: every document was embedded");
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(embedder.requests.lock().unwrap().len() <= made + 1);
    }
}

#[test]
fn a_rest_insert_takes_one_of_the_users_running_statements() {
    let embedder = FakeEmbedder::start();
    let mut config = config(&embedder);
    config.edition = mindlite::Edition::Hosted;
    config.hosted.plans.insert(
        "one".into(),
        mindlite::PlanConfig {
            max_running_statements: 1,
            ..mindlite::PlanConfig::default()
        },
    );
    config.hosted.default_plan = "one".into();
    let engine = Engine::open_in_memory(config).unwrap();
    engine.block_on(engine.create_user("ann", None)).unwrap();
    let key = engine.block_on(engine.create_api_key("ann")).unwrap().key;
    let ann = engine.as_user(&key).unwrap();
    exec(&ann, "CREATE KNOWLEDGE_BASE kb");
    // One place is all it needs (it once took two, and a plan of one refused every insert).
    let body = json!({"rows": [{"id": 1, "content": "one document"}]});
    let inserted = ann
        .block_on(ann.insert_into_knowledge_base("mindsdb", "kb", body, None))
        .unwrap();
    assert_eq!(inserted, 1);
    assert_eq!(rows(&ann, "SELECT count(*) FROM kb"), json!([[1]]));
}

/// The texts embedded since `before`, of every embeddings request.
fn embedded_since(embedder: &FakeEmbedder, before: usize) -> usize {
    embedder.requests.lock().unwrap()[before..].iter().sum()
}

/// `docs (doc_id, body)` of `n` rows, and the knowledge base `docs_kb` over it.
fn docs(engine: &Engine, n: u64, body: impl Fn(u64) -> String) {
    exec(engine, "CREATE TABLE docs (doc_id INT, body TEXT)");
    let rows: Vec<String> = (1..=n).map(|i| format!("({i}, '{}')", body(i))).collect();
    exec(
        engine,
        &format!("INSERT INTO docs VALUES {}", rows.join(", ")),
    );
    exec(
        engine,
        "CREATE KNOWLEDGE_BASE docs_kb USING id_column = 'doc_id', content_columns = ['body']",
    );
}

fn kb_ids(engine: &Engine, kb: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = rows(engine, &format!("SELECT DISTINCT id FROM {kb}"))
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().parse().unwrap())
        .collect();
    ids.sort();
    ids
}

#[test]
fn inserts_in_batches_stop_or_skip_on_errors_and_resume_where_they_stopped() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    docs(&engine, 7, |i| match i {
        4 => "EMBEDFAIL text".to_string(),
        i => format!("document number {i} about cats"),
    });
    let insert = "INSERT INTO docs_kb SELECT doc_id, body FROM docs \
                  USING batch_size = 2, track_column = doc_id";
    let message = error(&engine, insert);
    assert!(message.contains("model overloaded"), "{message}");
    assert_eq!(
        kb_ids(&engine, "docs_kb"),
        [1, 2],
        "the batch before the error stays"
    );
    let queries = rows(
        &engine,
        "SELECT id, processed_rows, error IS NOT NULL, finished_at IS NOT NULL, sql, \
         parameters FROM information_schema.queries",
    );
    assert_eq!(queries[0][0], 1);
    assert_eq!(queries[0][1], 2);
    assert_eq!(
        (&queries[0][2], &queries[0][3]),
        (&json!(true), &json!(true))
    );
    assert!(queries[0][4].as_str().unwrap().contains("batch_size = 2"));
    assert_eq!(
        serde_json::from_str::<Value>(queries[0][5].as_str().unwrap()).unwrap(),
        json!({"batch_size": 2, "track_column": "doc_id"})
    );

    // Put right and resumed: only what was not done is embedded.
    exec(
        &engine,
        "UPDATE docs SET body = 'fixed text' WHERE doc_id = 4",
    );
    let before = embedder.requests.lock().unwrap().len();
    let resumed = doc(&engine, "SELECT query_resume(1)");
    assert_eq!(resumed["affected_rows"], 5, "{resumed}");
    assert_eq!(embedded_since(&embedder, before), 5);
    assert_eq!(kb_ids(&engine, "docs_kb"), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        rows(
            &engine,
            "SELECT processed_rows, error FROM information_schema.queries WHERE id = 1"
        ),
        json!([[7, null]])
    );
    assert!(error(&engine, "SELECT query_resume(1)").contains("finished"));

    // error = 'skip': the failing batch is left out and noted, the rest goes in.
    exec(
        &engine,
        "UPDATE docs SET body = 'EMBEDFAIL again' WHERE doc_id = 4",
    );
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb2 USING id_column = 'doc_id', content_columns = ['body']",
    );
    let done = doc(
        &engine,
        "INSERT INTO kb2 SELECT doc_id, body FROM docs USING batch_size = 2, \
         track_column = doc_id, error = 'skip', threads = 4",
    );
    assert_eq!(done["affected_rows"], 5, "{done}");
    assert_eq!(kb_ids(&engine, "kb2"), [1, 2, 5, 6, 7]);
    let noted = rows(
        &engine,
        "SELECT processed_rows, error, context FROM information_schema.queries WHERE id = 2",
    );
    assert_eq!(noted[0][0], 5);
    assert!(noted[0][1].as_str().unwrap().contains("model overloaded"));
    let context: Value = serde_json::from_str(noted[0][2].as_str().unwrap()).unwrap();
    assert_eq!(context["skipped_batches"], 1);

    // Cancelled: its record goes; an unknown id is named.
    exec(&engine, "SELECT query_cancel(2)");
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM information_schema.queries"),
        json!([[1]])
    );
    assert!(error(&engine, "SELECT query_cancel(2)").contains("Query 2 not found"));
    assert!(error(
        &engine,
        "INSERT INTO docs SELECT 1, 'x' USING batch_size = 1"
    )
    .contains("knowledge bases"));
    // A REAL tracked column advances exactly (its values are compared as REALs), and a
    // UNION is a SELECT like any.
    exec(
        &engine,
        "CREATE TABLE reals (doc_id INT, v REAL, body TEXT)",
    );
    exec(
        &engine,
        "INSERT INTO reals VALUES (1, 0.1, 'first real'), (2, 0.2, 'second real'), (3, 0.3, 'third')",
    );
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb3 USING id_column = 'doc_id', content_columns = ['body']",
    );
    let done = doc(
        &engine,
        "INSERT INTO kb3 SELECT doc_id, v, body FROM reals WHERE doc_id < 3 \
         UNION ALL SELECT doc_id, v, body FROM reals WHERE doc_id = 3 \
         USING batch_size = 1, track_column = v",
    );
    assert_eq!(done["affected_rows"], 3, "{done}");
    assert_eq!(kb_ids(&engine, "kb3"), [1, 2, 3]);
    assert!(error(
        &engine,
        "INSERT INTO docs_kb VALUES (9, 'x') USING batch_size = 1"
    )
    .contains("takes a SELECT"));
}

#[test]
fn kb_skip_existing_embeds_only_new_documents_and_kb_no_upsert_loads_without_looking() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    docs(&engine, 5, |i| format!("document {i} about dogs"));
    exec(
        &engine,
        "INSERT INTO docs_kb SELECT doc_id, body FROM docs WHERE doc_id <= 3",
    );
    exec(&engine, "UPDATE docs SET body = 'changed' WHERE doc_id = 1");
    let before = embedder.requests.lock().unwrap().len();
    let done = doc(
        &engine,
        "INSERT INTO docs_kb SELECT doc_id, body FROM docs USING kb_skip_existing = true",
    );
    assert_eq!(done["affected_rows"], 2, "{done}");
    assert_eq!(embedded_since(&embedder, before), 2);
    assert_eq!(
        rows(&engine, "SELECT chunk_content FROM docs_kb WHERE id = '1'"),
        json!([["document 1 about dogs"]]),
        "a stored document is left as it is"
    );
    exec(
        &engine,
        "CREATE KNOWLEDGE_BASE kb2 USING id_column = 'doc_id', content_columns = ['body']",
    );
    let loaded = doc(
        &engine,
        "INSERT INTO kb2 SELECT doc_id, body FROM docs USING kb_no_upsert = true",
    );
    assert_eq!(loaded["affected_rows"], 5, "{loaded}");
    assert_eq!(kb_ids(&engine, "kb2"), [1, 2, 3, 4, 5]);
}

const BATCH_CHILD_ENV: &str = "MINDLITE_KB_BATCH_WRITER_DB";
const BATCH_DOCUMENTS: u64 = 24;

/// Writer mode of the test below: one slow insert in batches of one row (each embedding call
/// takes 150 ms), killed by the parent midway.
#[test]
fn kb_batch_writer_child() {
    let Ok(path) = std::env::var(BATCH_CHILD_ENV) else {
        return;
    };
    let embedder = FakeEmbedder::start();
    let engine = Engine::open(&path, config(&embedder)).expect("child opens the database");
    let _ = engine.sql_blocking(
        "INSERT INTO docs_kb SELECT doc_id, body FROM docs USING batch_size = 1, track_column = doc_id",
    );
}

#[test]
fn an_insert_in_batches_killed_midway_resumes_after_its_last_batch() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb-batches.redb");
    let embedder = FakeEmbedder::start();
    {
        let engine = Engine::open(&path, config(&embedder)).unwrap();
        docs(&engine, BATCH_DOCUMENTS, |i| {
            format!("document {i} SLOWLY written")
        });
    }
    // Killed while it runs (24 batches of at least 150 ms); a child slow to start under load
    // may be killed before it began, and is then started again with longer.
    let mut recorded = json!([]);
    for pause_ms in [1500u64, 2500, 3000] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &child_test("kb_batch_writer_child"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(BATCH_CHILD_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let engine = Engine::open(&path, config(&embedder)).unwrap();
        recorded = rows(
            &engine,
            "SELECT id, processed_rows, error FROM information_schema.queries",
        );
        if !recorded.as_array().unwrap().is_empty() {
            break;
        }
    }
    assert!(
        !recorded.as_array().unwrap().is_empty(),
        "the insert never began"
    );
    let engine = Engine::open(&path, config(&embedder)).unwrap();
    let done = recorded[0][1].as_u64().unwrap();
    assert!(
        done < BATCH_DOCUMENTS,
        "killed before it finished: {recorded}"
    );
    assert!(
        recorded[0][2].as_str().unwrap().contains("Interrupted"),
        "{recorded}"
    );
    let stored = kb_ids(&engine, "docs_kb");
    // In pgvector a batch commits there before it is recorded here: a kill between the two
    // leaves one batch more stored than recorded, which the resume writes again (by chunk id,
    // so once).
    let also_next = on_pgvector() && stored == (1..=done + 1).collect::<Vec<_>>();
    assert!(
        stored == (1..=done).collect::<Vec<_>>() || also_next,
        "the batches done, whole: {stored:?}, {done} recorded"
    );

    let before = embedder.requests.lock().unwrap().len();
    let id = recorded[0][0].as_u64().unwrap();
    let resumed = doc(&engine, &format!("SELECT query_resume({id})"));
    assert_eq!(
        resumed["affected_rows"],
        BATCH_DOCUMENTS - done,
        "{resumed}"
    );
    assert_eq!(
        embedded_since(&embedder, before) as u64,
        BATCH_DOCUMENTS - done,
        "nothing embedded twice"
    );
    assert_eq!(
        kb_ids(&engine, "docs_kb"),
        (1..=BATCH_DOCUMENTS).collect::<Vec<_>>()
    );
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM docs_kb"),
        json!([[BATCH_DOCUMENTS]]),
        "each document once"
    );
}

#[test]
fn evaluate_by_llm_relevancy_scores_the_chunks_found() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    // The fake reranker scores the chunk about tails 0.9 and every other 0.2.
    let result = rows(
        &engine,
        "EVALUATE KNOWLEDGE_BASE kb USING test_table = mindsdb.rel_tests, \
         version = 'llm_relevancy', generate_data = {'count': 4}, save_to = mindsdb.rel_scores",
    );
    let row = &result[0];
    let number = |i: usize| row[i].as_f64().unwrap();
    assert!(
        (number(0) - (0.9 + 3.0 * 0.2) / 4.0).abs() < 1e-9,
        "avg_relevancy: {row}"
    );
    let list = |i: usize| -> Vec<f64> { serde_json::from_str(row[i].as_str().unwrap()).unwrap() };
    assert_eq!(list(1).len(), 4, "a score per position: {row}");
    assert_eq!(
        list(4).last(),
        Some(&1.0),
        "every question finds the relevant chunk: {row}"
    );
    let mrr = number(3);
    assert!(mrr > 0.25 && mrr <= 1.0, "mean_mrr: {row}");
    assert_eq!(row[10], "kb");
    // The generated table: MindsDB's (text, question, answer, id), the id a row number.
    assert_eq!(
        rows(&engine, "SELECT count(*), min(id), max(id) FROM rel_tests"),
        json!([[4, 0, 3]])
    );
    assert_eq!(
        rows(
            &engine,
            "SELECT count(*), name FROM rel_scores GROUP BY name"
        ),
        json!([[1, "kb"]])
    );
    // Every found chunk of every question was scored.
    let scored = embedder
        .chats
        .lock()
        .unwrap()
        .iter()
        .filter(|c| {
            c["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("Score the relevance"))
        })
        .count();
    assert_eq!(scored, 16);
}

#[test]
fn evaluate_generates_questions_finds_their_documents_and_saves_the_result() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    corpus(&engine);
    let result = rows(
        &engine,
        "EVALUATE KNOWLEDGE_BASE mindsdb.kb USING test_table = mindsdb.kb_tests, \
         generate_data = {'count': 3}, save_to = mindsdb.kb_scores",
    );
    let row = &result[0];
    assert_eq!(
        (&row[0], &row[1], &row[2]),
        (&json!(3), &json!(3), &json!(3)),
        "{row}"
    );
    let recall: Value = serde_json::from_str(row[3].as_str().unwrap()).unwrap();
    assert_eq!(
        recall["0"], 1.0,
        "each question finds its own document first"
    );
    assert_eq!(row[6], "kb");
    // The generated test table: the text, its question and answer, and the document's id.
    let tests = rows(
        &engine,
        "SELECT question = text, answer, doc_id FROM kb_tests",
    );
    assert_eq!(tests.as_array().unwrap().len(), 3);
    assert!(tests
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t[0] == json!(true) && t[1] == "it"));
    assert_eq!(
        rows(&engine, "SELECT total, total_found, name FROM kb_scores"),
        json!([[3, 3, "kb"]])
    );

    // A test table of one's own: a question whose document is not found counts as such.
    exec(&engine, "CREATE TABLE qa (question TEXT, doc_id INT)");
    exec(
        &engine,
        "INSERT INTO qa VALUES ('do dogs bark at strangers', 2), ('interest rates and the market', 3), \
         ('something unrelated entirely', 99)",
    );
    let result = rows(
        &engine,
        "EVALUATE KNOWLEDGE_BASE kb USING test_table = mindsdb.qa, version = 'doc_id', \
         save_to = mindsdb.kb_scores",
    );
    assert_eq!((&result[0][0], &result[0][1]), (&json!(3), &json!(2)));
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM kb_scores"),
        json!([[2]]),
        "results are appended"
    );
    // from_sql names its columns, in any order; without them it is refused by name.
    exec(
        &engine,
        "CREATE TABLE articles (doc_id INT, body TEXT, extra TEXT)",
    );
    exec(
        &engine,
        "INSERT INTO articles VALUES (2, 'Dogs bark at strangers and wag their tails', 'x')",
    );
    exec(
        &engine,
        "EVALUATE KNOWLEDGE_BASE kb USING test_table = mindsdb.from_articles, evaluate = false, \
         generate_data = {'from_sql': 'SELECT doc_id AS id, extra, body AS content FROM articles'}",
    );
    assert_eq!(
        rows(&engine, "SELECT doc_id, text FROM from_articles"),
        json!([["2", "Dogs bark at strangers and wag their tails"]])
    );
    let message = error(
        &engine,
        "EVALUATE KNOWLEDGE_BASE kb USING test_table = mindsdb.t2, \
         generate_data = {'from_sql': 'SELECT doc_id, body FROM articles'}",
    );
    assert!(message.contains("id and content"), "{message}");
    // evaluate = false only writes the test table.
    let d = doc(
        &engine,
        "EVALUATE KNOWLEDGE_BASE kb USING test_table = mindsdb.only_tests, generate_data = true, \
         evaluate = false",
    );
    assert_eq!(d["type"], "ok", "{d}");
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM only_tests"),
        json!([[4]])
    );

    for (using, mention) in [
        ("version = 'doc_id'", "test_table"),
        ("test_table = qa", "database.table"),
        (
            "test_table = mindsdb.qa, version = 'llm_relevancy'",
            "question and answer",
        ),
        (
            "test_table = mindsdb.qa, generate_data = {'count': 0}",
            "count",
        ),
        ("test_table = mindsdb.nope", "question and doc_id"),
    ] {
        let message = error(
            &engine,
            &format!("EVALUATE KNOWLEDGE_BASE kb USING {using}"),
        );
        assert!(message.contains(mention), "{using}: {message}");
    }
    assert!(error(
        &engine,
        "EVALUATE KNOWLEDGE_BASE nope USING test_table = mindsdb.qa"
    )
    .contains("nope"));
}

/// Runs `sql` on the pgvector server directly; each row's values as text.
fn pg_admin(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let config: tokio_postgres::Config = url.parse().unwrap();
    crate::postgres::admin(&config, sql)
}

/// Statements the pgvector server logged that mention `needle`, since `from` lines.
fn pg_logged(from: usize, needle: &str) -> Vec<String> {
    let log = std::env::var("PGVECTOR_TEST_LOG").expect("PGVECTOR_TEST_LOG goes with the URL");
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .skip(from)
        .filter(|l| l.contains(needle) && (l.contains("statement: ") || l.contains("execute ")))
        .map(str::to_string)
        .collect()
}

/// Lines the pgvector server has logged so far.
fn pg_log_lines() -> usize {
    let log = std::env::var("PGVECTOR_TEST_LOG").expect("PGVECTOR_TEST_LOG goes with the URL");
    std::fs::read_to_string(log).unwrap().lines().count()
}

#[test]
fn storage_names_a_pgvector_table_that_holds_the_chunks_and_answers_the_searches() {
    let embedder = FakeEmbedder::start();
    let engine = Engine::open_in_memory(config(&embedder)).unwrap();
    // What storage names must be a PostgreSQL datasource's table (checked without a server).
    let dir = tempfile::tempdir().unwrap();
    exec(
        &engine,
        &format!(
            "CREATE DATABASE files_ds WITH ENGINE = 'files', PARAMETERS = {{\"path\": \"{}\"}}",
            dir.path().display()
        ),
    );
    for (using, says) in [
        (
            "storage = nosuch.t",
            "datasource 'nosuch', which does not exist",
        ),
        (
            "storage = files_ds.t",
            "datasource 'files_ds' is not PostgreSQL",
        ),
        ("storage = 'vec'", "datasource.table"),
        ("vector_store = 'vec'", "storage = datasource.table"),
    ] {
        let e = error(&engine, &format!("CREATE KNOWLEDGE_BASE bad USING {using}"));
        assert!(e.contains(says), "{using}: {e}");
    }
    assert!(!rows(&engine, "SHOW KNOWLEDGE_BASES")
        .to_string()
        .contains("bad"));
    // Only the copy of the suite on PostgreSQL has a server to look into.
    let Some(url) = pgvector_url() else {
        return;
    };
    let table = format!("kb docs {}", std::process::id());
    pg_admin(&url, &format!("DROP TABLE IF EXISTS \"{table}\""));
    exec(
        &engine,
        &format!(
            "CREATE DATABASE vec WITH ENGINE = 'postgres', PARAMETERS = {{\"url\": \"{url}\"}}"
        ),
    );
    // MindsDB's syntax: the table by its datasource's name (an odd name quoted as text).
    exec(
        &engine,
        &format!(
            "CREATE KNOWLEDGE_BASE kb USING storage = 'vec.{table}', metadata_columns = ['category', 'year']"
        ),
    );
    // The datasource holds the knowledge base's vectors: it stays while the knowledge base does.
    let e = error(&engine, "DROP DATABASE vec");
    assert!(
        e.contains("keeps the chunks of knowledge base 'mindsdb.kb'"),
        "{e}"
    );
    // Renamed, the datasource takes the knowledge base with it.
    for (from, to) in [("vec", "vec_renamed"), ("vec_renamed", "vec")] {
        engine
            .block_on(engine.update_datasource(from, serde_json::json!({"name": to})))
            .unwrap();
        let described = engine.get_knowledge_base("mindsdb", "kb").unwrap().wire();
        assert_eq!(described["vector_database"], to);
    }
    let described = engine.get_knowledge_base("mindsdb", "kb").unwrap().wire();
    assert_eq!(described["vector_database"], "vec");
    assert_eq!(described["vector_database_table"], table.as_str());
    exec(
        &engine,
        "INSERT INTO kb (id, content, category, year) VALUES \
         (1, 'Cats purr when they are content and meow at people', 'pets', 2001), \
         (2, 'Dogs bark at strangers and wag their tails', 'pets', 1999), \
         (3, 'The stock market fell as interest rates rose', 'finance', 2020), \
         (4, 'Cats and dogs can live together as pets', 'pets', 2015)",
    );
    let count = |sql: &str| pg_admin(&url, sql)[0][0].clone().unwrap();
    assert_eq!(count(&format!("SELECT count(*) FROM \"{table}\"")), "4");
    // The vectors are pgvector's, under an HNSW index; the words under a GIN one.
    assert_eq!(
        count(&format!(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '\"{table}\"'::regclass AND attname = 'embedding'"
        )),
        "vector(64)"
    );
    let indexes = pg_admin(
        &url,
        &format!("SELECT indexdef FROM pg_indexes WHERE tablename = '{table}'"),
    );
    let indexes = format!("{indexes:?}");
    assert!(
        indexes.contains(
            "USING hnsw (embedding vector_cosine_ops) WITH (m='16', ef_construction='128')"
        ),
        "{indexes}"
    );
    assert!(indexes.contains("USING gin (content_tsv)"), "{indexes}");
    assert_eq!(
        count(&format!("SELECT year FROM \"{table}\" WHERE id = '3'")),
        "2020"
    );
    // Inserted again, a document replaces its chunks: nothing doubles.
    exec(
        &engine,
        "INSERT INTO kb (id, content, category, year) VALUES (1, 'Cats purr and sleep all day', 'pets', 2002)",
    );
    assert_eq!(count(&format!("SELECT count(*) FROM \"{table}\"")), "4");
    assert_eq!(
        count(&format!(
            "SELECT chunk_content FROM \"{table}\" WHERE id = '1'"
        )),
        "Cats purr and sleep all day"
    );
    // A search without conditions walks the index, with as many rows as asked.
    let from = pg_log_lines();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' LIMIT 2"
        )[0],
        "1"
    );
    let sent = pg_logged(from, "<=>");
    assert!(
        sent.iter()
            .any(|s| s.contains("ORDER BY t.\"embedding\" <=> $1::vector LIMIT 2")),
        "{sent:?}"
    );
    // A metadata condition goes into the same statement, which walks the index and ranks
    // every row the condition keeps when the walk finds too few.
    let from = pg_log_lines();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats' AND category = 'finance'"
        ),
        ["3"]
    );
    let sent = pg_logged(from, "<=>");
    assert!(
        sent.iter().any(|s| s.contains("\"category\" = E'finance'")
            && s.contains("WITH ml_walk AS (")
            && s.contains("UNION ALL")),
        "{sent:?}"
    );
    // 3,000 chunks as near the question as document 1 (its vector scaled: the same cosine
    // distance, yet not a copy pgvector would fold into one index entry) fill the widest
    // walk (1,000), so the walk alone finds no finance chunk; the exact ranking in the same
    // statement does.
    pg_admin(
        &url,
        &format!(
            "INSERT INTO \"{table}\" (id, chunk_id, chunk_content, metadata, category, year, embedding) \
             SELECT 'b' || g, 'b' || g || ':0', 'bulk', '{{}}', 'bulk', 2000, \
               (SELECT ('[' || string_agg((x * (1 + g * 1e-5))::text, ',' ORDER BY i) || ']')::vector \
                FROM unnest((SELECT embedding::real[] FROM \"{table}\" WHERE id = '1')) WITH ORDINALITY u(x, i)) \
             FROM generate_series(1, 3000) g; \
             ANALYZE \"{table}\""
        ),
    );
    let walked = pg_admin(
        &url,
        &format!(
            "SET enable_seqscan = off; SET hnsw.ef_search = 1000; \
             SELECT id FROM \"{table}\" WHERE category = 'finance' \
             ORDER BY embedding <=> (SELECT embedding FROM \"{table}\" WHERE id = '1') LIMIT 1"
        ),
    );
    assert!(walked.is_empty(), "the walk alone finds {walked:?}");
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats purr' AND category = 'finance' LIMIT 1"
        ),
        ["3"]
    );
    // Where enough of the walk passes the conditions, it is the answer.
    let found = ids(
        &engine,
        "SELECT id FROM kb WHERE content = 'cats purr' AND category = 'bulk' LIMIT 2",
    );
    assert!(found.iter().all(|id| id.starts_with('b')), "{found:?}");
    assert_eq!(found.len(), 2);
    pg_admin(
        &url,
        &format!("DELETE FROM \"{table}\" WHERE category = 'bulk'"),
    );
    // Keywords rank in PostgreSQL's full text search.
    let from = pg_log_lines();
    let found = ids(
        &engine,
        "SELECT id FROM kb WHERE content = 'stock market' AND hybrid_search_alpha = 0 LIMIT 1",
    );
    assert_eq!(found, ["3"]);
    assert!(!pg_logged(from, "ml_idf").is_empty());
    // EXPLAIN says where the search runs.
    let plan = format!(
        "{}",
        rows(&engine, "EXPLAIN SELECT id FROM kb WHERE content = 'cats'")
    );
    assert!(plan.contains("in pgvector at 127.0.0.1"), "{plan}");
    // A condition PostgreSQL would compute otherwise (arithmetic) is checked here, on rows
    // the statement ranks without a LIMIT, so none is lost to it.
    let from = pg_log_lines();
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM kb WHERE content = 'cats' AND year + 1 > 2016 LIMIT 1"
        ),
        ["3"]
    );
    let sent = pg_logged(from, "<=>");
    assert!(
        sent.iter()
            .any(|s| s.contains("OFFSET 0) ml_e ORDER BY ml_e.ml_distance, ")
                && !s.contains("LIMIT")),
        "{sent:?}"
    );
    // Conditions on scores hold for the final distances.
    let near = rows(
        &engine,
        "SELECT id, distance FROM kb WHERE content = 'cats purr' AND distance < 0.5 LIMIT 10",
    );
    let near = near.as_array().unwrap();
    assert_eq!(near.len(), 1, "{near:?}");
    assert_eq!(near[0][0], "1");
    assert!(near[0][1].as_f64().unwrap() < 0.5, "{near:?}");
    // DELETE removes the document's rows there.
    exec(&engine, "DELETE FROM kb WHERE id = '2'");
    assert_eq!(count(&format!("SELECT count(*) FROM \"{table}\"")), "3");
    // The datasource's table is the user's: dropping the knowledge base leaves it.
    exec(&engine, "DROP KNOWLEDGE_BASE kb");
    assert_eq!(count(&format!("SELECT count(*) FROM \"{table}\"")), "3");
    // A knowledge base made over a table with rows searches them from the start, its
    // metadata columns the table's (or those named, which it must have).
    exec(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE again USING storage = 'vec.{table}'"),
    );
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM again WHERE content = 'stock market' AND year > 2010 LIMIT 1"
        ),
        ["3"]
    );
    let listed = rows(&engine, "SELECT id, category FROM again ORDER BY id");
    assert_eq!(
        listed,
        serde_json::json!([["1", "pets"], ["3", "finance"], ["4", "pets"]])
    );
    exec(&engine, "DROP KNOWLEDGE_BASE again");
    let e = error(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE again USING storage = 'vec.{table}', metadata_columns = ['colour']"),
    );
    assert!(e.contains("has no column 'colour'"), "{e}");
    let other = format!("{table} other");
    pg_admin(
        &url,
        &format!("CREATE TABLE \"{other}\" (id text, body text)"),
    );
    let e = error(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE again USING storage = 'vec.{other}'"),
    );
    assert!(e.contains("has no column 'chunk_id'"), "{e}");
    pg_admin(&url, &format!("DROP TABLE \"{other}\""));
    // A column whose comparisons PostgreSQL makes otherwise (char's padding) is refused as
    // metadata, so no condition on it is sent; left out by metadata_columns, it is fine.
    pg_admin(
        &url,
        &format!("CREATE TABLE \"{other}\" (id text, chunk_id text PRIMARY KEY, chunk_content text, metadata text, embedding vector(64), content_tsv tsvector, tag text, code char(3))"),
    );
    let e = error(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE again USING storage = 'vec.{other}'"),
    );
    assert!(
        e.contains("'code'") && e.contains("compares otherwise"),
        "{e}"
    );
    exec(
        &engine,
        &format!(
            "CREATE KNOWLEDGE_BASE again USING storage = 'vec.{other}', metadata_columns = ['tag']"
        ),
    );
    exec(&engine, "DROP KNOWLEDGE_BASE again");
    pg_admin(&url, &format!("DROP TABLE \"{other}\""));
    assert!(!rows(&engine, "SHOW KNOWLEDGE_BASES")
        .to_string()
        .contains("again"));
    // A table there whose vectors are not the model's is refused by name.
    pg_admin(&url, &format!("DROP TABLE \"{table}\""));
    pg_admin(
        &url,
        &format!("CREATE TABLE \"{table}\" (id text, chunk_id text PRIMARY KEY, chunk_content text, metadata text, embedding vector(3), content_tsv tsvector)"),
    );
    exec(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE small USING storage = 'vec.{table}'"),
    );
    let e = error(
        &engine,
        "INSERT INTO small (id, content) VALUES (1, 'cats')",
    );
    assert!(e.contains("vector(3)") && e.contains("vector(64)"), "{e}");
    pg_admin(&url, &format!("DROP TABLE \"{table}\""));
    // Metadata named oddly is quoted wherever it goes (PostgreSQL reads `\` in a name as
    // itself); the table's own names are refused.
    pg_admin(&url, &format!("DROP TABLE IF EXISTS \"{table}\""));
    exec(
        &engine,
        &format!("CREATE KNOWLEDGE_BASE odd USING storage = 'vec.{table}'"),
    );
    let odd = r#"a\") text); drop table x; --"#;
    let mut first = serde_json::Map::new();
    first.insert("id".into(), json!(1));
    first.insert("content".into(), json!("Cats purr"));
    first.insert(odd.into(), json!("q"));
    first.insert("tag".into(), json!("it's"));
    let inserted = engine.block_on(engine.insert_into_knowledge_base(
        "mindsdb",
        "odd",
        json!({"rows": [first, {"id": 2, "content": "Dogs bark", odd: "r", "tag": "a''b"}]}),
        None,
    ));
    assert_eq!(inserted.unwrap(), 2);
    assert_eq!(
        count(&format!(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = '\"{table}\"'::regclass AND attname = 'a\\\") text); drop table x; --'"
        )),
        "1"
    );
    // Text the unparser would write wrongly is compared here, not sent.
    assert_eq!(
        ids(
            &engine,
            "SELECT id FROM odd WHERE content = 'cats' AND tag = 'a''''b'"
        ),
        ["2"]
    );
    pg_admin(&url, &format!("DROP TABLE \"{table}\""));
    for column in ["embedding", "ml_score"] {
        exec(
            &engine,
            &format!("CREATE KNOWLEDGE_BASE {column}_kb USING storage = 'vec.{table}'"),
        );
        let e = error(
            &engine,
            &format!("INSERT INTO {column}_kb (id, content, {column}) VALUES (1, 'Cats', 'x')"),
        );
        assert!(
            e.contains(&format!("Column '{column}' cannot be a metadata column")),
            "{e}"
        );
    }
    // Without storage, knowledge_bases.storage_url gives each its own table, dropped with it.
    exec(&engine, "CREATE KNOWLEDGE_BASE own");
    exec(
        &engine,
        "INSERT INTO own (id, content) VALUES (1, 'Cats purr')",
    );
    let own = engine.get_knowledge_base("mindsdb", "own").unwrap();
    let own_table = own.storage.unwrap().table;
    assert!(own_table.starts_with("mindlite_own_"), "{own_table}");
    let exists = |name: &str| {
        pg_admin(
            &url,
            &format!("SELECT to_regclass('\"{name}\"') IS NOT NULL"),
        )[0][0]
            .clone()
            .unwrap()
    };
    assert_eq!(exists(&own_table), "t");
    exec(&engine, "DROP KNOWLEDGE_BASE own");
    assert_eq!(exists(&own_table), "f");
    // So do those of a dropped project.
    exec(&engine, "CREATE PROJECT elsewhere");
    exec(&engine, "CREATE KNOWLEDGE_BASE elsewhere.notes");
    exec(
        &engine,
        "INSERT INTO elsewhere.notes (id, content) VALUES (1, 'Dogs bark')",
    );
    let notes = engine.get_knowledge_base("elsewhere", "notes").unwrap();
    let notes_table = notes.storage.unwrap().table;
    assert_eq!(exists(&notes_table), "t");
    exec(&engine, "DROP PROJECT elsewhere");
    assert_eq!(exists(&notes_table), "f");
}
