//! The limits that keep one caller from holding the engine: statement time limits and
//! interrupts, the size of a JSON document, uploads that decode to too much, and writes that
//! compute their rows without holding the writer lock (so a slow one delays no other) and
//! still lose no concurrent change.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindlite::{encode_document, Config, Engine, ErrorKind, FileFormat, QueryRequest};
use serde_json::Value;

const ENDLESS: &str =
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r";

fn doc(engine: &Engine, request: QueryRequest) -> Value {
    let result = engine.query_blocking(request);
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

fn error_of(engine: &Engine, request: QueryRequest) -> String {
    let d = doc(engine, request);
    assert_eq!(d["type"], "error", "{d}");
    d["error_message"].as_str().unwrap().to_string()
}

#[test]
fn a_statement_stops_at_the_configured_limit_or_the_requests_smaller_one() {
    let mut config = Config::default();
    config.query.statement_timeout_secs = Some(2);
    let engine = Engine::open_in_memory(config).unwrap();
    let started = Instant::now();
    let message = error_of(&engine, QueryRequest::new(ENDLESS));
    assert!(message.contains("time limit"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A request may ask for less, never more.
    let started = Instant::now();
    error_of(
        &engine,
        QueryRequest::new(ENDLESS).with_timeout(Duration::from_millis(300)),
    );
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "the request's limit held"
    );
    let started = Instant::now();
    error_of(
        &engine,
        QueryRequest::new(ENDLESS).with_timeout(Duration::from_secs(3600)),
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the configured limit held"
    );
    // A streamed result stops at the limit too, after its first rows.
    let result = engine.query_blocking(
        QueryRequest::new("SELECT value FROM generate_series(1, 1000000000000)")
            .with_timeout(Duration::from_millis(500)),
    );
    let rows = engine.block_on(result.collect());
    assert!(rows.unwrap_err().message().contains("time limit"));
}

#[test]
fn an_interrupt_stops_what_runs_on_the_handle_and_nothing_after() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let running = {
        let engine = engine.clone();
        std::thread::spawn(move || error_of(&engine, QueryRequest::new(ENDLESS)))
    };
    std::thread::sleep(Duration::from_millis(300));
    engine.interrupt();
    assert!(running.join().unwrap().contains("interrupted"));
    let rows = engine.sql_blocking("SELECT 1 AS one").unwrap();
    assert_eq!(rows.num_rows(), 1);
}

#[test]
fn a_result_too_large_for_one_document_points_to_the_streaming_formats() {
    let mut config = Config::default();
    config.query.max_document_mb = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    let message = error_of(
        &engine,
        QueryRequest::new("SELECT value, repeat('x', 100) AS pad FROM generate_series(1, 100000)"),
    );
    assert!(message.contains("query.max_document_mb"), "{message}");
    assert!(message.contains("jsonlines"), "{message}");
    let small = doc(&engine, QueryRequest::new("SELECT 1 AS one"));
    assert_eq!(small["type"], "table");
}

#[test]
fn an_upload_over_its_caps_is_refused_and_nothing_is_stored() {
    let mut config = Config::default();
    config.files.max_rows = Some(1000);
    config.files.max_decoded_mb = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    let rows: String = std::iter::once("n,s\n".to_string())
        .chain((0..5000).map(|i| format!("{i},x\n")))
        .collect();
    let err = engine
        .block_on(engine.upload_file("many", rows.into_bytes(), Some(FileFormat::Csv), None))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("files.max_rows"), "{err}");
    let wide: String = std::iter::once("n,s\n".to_string())
        .chain((0..500).map(|i| format!("{i},{}\n", "y".repeat(5000))))
        .collect();
    let err = engine
        .block_on(engine.upload_file("wide", wide.into_bytes(), None, Some("w.csv")))
        .unwrap_err();
    assert!(err.message().contains("files.max_decoded_mb"), "{err}");
    assert!(
        engine.list_files().unwrap().is_empty(),
        "nothing half-stored"
    );
    engine
        .block_on(engine.upload_file("ok", b"a\n1\n".to_vec(), None, None))
        .unwrap();
    assert_eq!(engine.list_files().unwrap().len(), 1);
}

/// Rows a statement computes go through a temporary file past `query.staging_memory_mb`; the
/// table holds them all, in order, and the temporary space is given back.
#[test]
fn a_write_larger_than_its_staging_memory_is_stored_whole() {
    let mut config = Config::default();
    config.query.staging_memory_mb = 0;
    let engine = Engine::open_in_memory(config).unwrap();
    let written = engine
        .sql_blocking(
            "CREATE TABLE big AS SELECT value AS id, repeat('z', 50) AS pad FROM generate_series(1, 300000) ORDER BY value",
        )
        .unwrap();
    assert_eq!(written.affected_rows, Some(300_000));
    engine
        .sql_blocking("INSERT INTO big SELECT id + 300000, pad FROM big")
        .unwrap();
    let check = engine
        .sql_blocking(
            "SELECT count(*) AS n, min(id) AS lo, max(id) AS hi, count(DISTINCT id) AS d FROM big",
        )
        .unwrap();
    let text = datafusion_text(&check);
    assert_eq!(text, ["600000", "1", "600000", "600000"]);
}

/// With the temporary space used up, a write fails naming the limit and writes nothing.
#[test]
fn a_write_that_does_not_fit_the_temporary_space_writes_nothing() {
    let mut config = Config::default();
    config.query.staging_memory_mb = 0;
    config.query.max_spill_mb = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    let err = engine
        .sql_blocking(
            "CREATE TABLE big AS SELECT value AS id, repeat('z', 200) AS pad FROM generate_series(1, 300000)",
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded, "{err}");
    assert!(err.message().contains("query.max_spill_mb"), "{err}");
    assert!(
        engine.sql_blocking("SELECT * FROM big").is_err(),
        "no table was made"
    );
}

/// Two UPDATEs and a stream of INSERTs at once: each UPDATE computes its chunks from a
/// snapshot, and one whose table changed meanwhile is run again under the lock, so no update
/// is lost and no inserted row disappears.
#[test]
fn concurrent_updates_and_inserts_lose_nothing() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking(
            "CREATE TABLE t AS SELECT value AS id, 0 AS v FROM generate_series(1, 100000)",
        )
        .unwrap();
    const UPDATES: usize = 6;
    const INSERTS: usize = 30;
    let updater = |engine: Engine| {
        std::thread::spawn(move || {
            for _ in 0..UPDATES {
                engine.sql_blocking("UPDATE t SET v = v + 1").unwrap();
            }
        })
    };
    let a = updater(engine.clone());
    let b = updater(engine.clone());
    let inserter = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            for i in 0..INSERTS {
                engine
                    .sql_blocking(&format!("INSERT INTO t VALUES ({}, 0)", 1_000_000 + i))
                    .unwrap();
            }
        })
    };
    for thread in [a, b, inserter] {
        thread.join().unwrap();
    }
    let check = engine
        .sql_blocking(
            "SELECT count(*) AS n, min(CASE WHEN id <= 100000 THEN v END) AS lo, max(CASE WHEN id <= 100000 THEN v END) AS hi, max(v) AS top FROM t",
        )
        .unwrap();
    let text = datafusion_text(&check);
    let expected_updates = (2 * UPDATES).to_string();
    assert_eq!(text[0], (100_000 + INSERTS).to_string(), "no row lost");
    assert_eq!(
        text[1], expected_updates,
        "every update reached every first row"
    );
    assert_eq!(text[2], expected_updates);
    assert_eq!(text[3], expected_updates);
}

/// A slow write (here a CREATE TABLE AS reading a slow PostgreSQL query) reads its rows before
/// it takes the writer lock: small writes meanwhile finish at once, before it does.
#[test]
fn a_slow_create_table_as_does_not_hold_up_other_writes() {
    let Ok(url) = std::env::var("PGTEST_URL") else {
        assert!(std::env::var("CI").is_err(), "PGTEST_URL is not set");
        eprintln!("SKIPPED: PGTEST_URL is not set");
        return;
    };
    let pg: tokio_postgres::Config = url.parse().unwrap();
    let host = match &pg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => panic!("PGTEST_URL must name a TCP host"),
    };
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking(&format!(
            "CREATE DATABASE pg WITH ENGINE = 'postgres', PARAMETERS = {{\"host\": \"{host}\", \"port\": {}, \"database\": \"{}\", \"user\": \"{}\"}}",
            pg.get_ports()[0],
            pg.get_dbname().unwrap(),
            pg.get_user().unwrap()
        ))
        .unwrap();
    engine.sql_blocking("CREATE TABLE small (n INT)").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let slow = {
        let (engine, done) = (engine.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let written = engine
                .sql_blocking(
                    "CREATE TABLE slow AS SELECT * FROM pg (SELECT x, pg_sleep(0.01) IS NULL AS slept FROM generate_series(1, 250) AS x)",
                )
                .unwrap();
            done.store(true, Ordering::SeqCst);
            written.affected_rows
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    for n in 0..5 {
        let started = Instant::now();
        engine
            .sql_blocking(&format!("INSERT INTO small VALUES ({n})"))
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a small write waited {:?}",
            started.elapsed()
        );
    }
    assert!(
        !done.load(Ordering::SeqCst),
        "the small writes finished while the slow one still ran"
    );
    assert_eq!(slow.join().unwrap(), Some(250));
    let n = engine.sql_blocking("SELECT count(*) FROM small").unwrap();
    assert_eq!(datafusion_text(&n), ["5"]);
}

/// The first row of a result as text.
fn datafusion_text(rows: &mindlite::Collected) -> Vec<String> {
    let batch = &rows.batches[0];
    (0..batch.num_columns())
        .map(|i| mindlite::arrow::util::display::array_value_to_string(batch.column(i), 0).unwrap())
        .collect()
}

#[test]
fn an_upload_stops_at_the_statement_deadline_and_stores_nothing() {
    let mut config = Config::default();
    config.query.statement_timeout_secs = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    // Three million rows: seconds of decoding and staging.
    let rows: String = std::iter::once("n,s\n".to_string())
        .chain((0..3_000_000).map(|i| format!("{i},row number {i}\n")))
        .collect();
    let started = Instant::now();
    let err = engine
        .block_on(engine.upload_file("big", rows.into_bytes(), Some(FileFormat::Csv), None))
        .unwrap_err();
    assert!(err.message().contains("time limit"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped after {:?} (generous: the limit is 1 s)",
        started.elapsed()
    );
    // What was read is dropped: nothing is stored, now or later.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(engine.list_files().unwrap().is_empty());
}

#[test]
fn a_long_chain_of_unions_is_answered_without_exhausting_a_stack() {
    // Just inside `query.max_expression_depth` (1,000): each UNION is a level. Cloning the
    // parsed chain on a runtime thread overflowed its stack at about 450, aborting the process.
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let sql = (0..990)
        .map(|i| format!("SELECT {i} AS x"))
        .collect::<Vec<_>>()
        .join(" UNION ");
    let d = doc(
        &engine,
        QueryRequest::new(format!("SELECT count(*) FROM ({sql}) u")),
    );
    assert_eq!(d["data"], serde_json::json!([[990]]), "{d}");
    // Past the limit, a clear refusal.
    let sql = (0..1200)
        .map(|i| format!("SELECT {i} AS x"))
        .collect::<Vec<_>>()
        .join(" UNION ");
    let message = error_of(&engine, QueryRequest::new(sql));
    assert!(message.contains("query.max_expression_depth"), "{message}");
}
