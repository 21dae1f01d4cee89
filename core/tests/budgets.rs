//! Budgets by construction: everything a statement allocates counts toward its memory budget
//! (and its user's), sizes that input controls are checked before memory is taken, and a
//! statement stopped at its deadline commits nothing. Each attack here once took a server down
//! or held it; each must now end in an error naming the limit while the engine keeps
//! answering. These tests run on the tracking allocator, as the server does.

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mindlite::{Config, Edition, Engine, PlanConfig, QueryRequest};
use serde_json::{json, Value};

#[global_allocator]
static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;

/// A hosted engine whose statements may hold `statement_mb` and whose users' statements
/// together `user_mb`.
fn hosted(statement_mb: u64, user_mb: u64) -> Engine {
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.query.statement_memory_mb = Some(statement_mb);
    // One value may be large: these tests are about what statements hold, and
    // query.max_value_mb (64 hosted) would refuse their values first.
    config.query.max_value_mb = Some(4096);
    config.query.memory_limit_mb = Some(statement_mb / 2);
    config.hosted.plans.insert(
        "small".into(),
        PlanConfig {
            max_memory_mb: user_mb,
            max_running_statements: 8,
            ..PlanConfig::default()
        },
    );
    config.hosted.default_plan = "small".into();
    Engine::open_in_memory(config).unwrap()
}

fn user(engine: &Engine, name: &str) -> Engine {
    engine.block_on(engine.create_user(name, None)).unwrap();
    let key = engine.block_on(engine.create_api_key(name)).unwrap().key;
    engine.as_user(&key).unwrap()
}

/// The statement's error message, failing if it succeeded.
fn error_of(engine: &Engine, request: QueryRequest) -> String {
    let query = request.query.clone();
    match engine.block_on(async { engine.query(request).await.collect().await }) {
        Ok(rows) => panic!("{query} returned {} rows", rows.num_rows()),
        Err(e) => e.message().to_string(),
    }
}

fn one(engine: &Engine, sql: &str) -> Value {
    let rows = engine.sql_blocking(sql).unwrap();
    let batch = &rows.batches[0];
    let column = datafusion_json(batch);
    column[0].clone()
}

fn datafusion_json(batch: &mindlite::arrow::record_batch::RecordBatch) -> Vec<Value> {
    let mut writer = mindlite::arrow::json::ArrayWriter::new(Vec::new());
    writer.write(batch).unwrap();
    writer.finish().unwrap();
    let rows: Vec<Value> = serde_json::from_slice(&writer.into_inner()).unwrap();
    rows.into_iter()
        .map(|row| row.as_object().unwrap().values().next().cloned().unwrap())
        .collect()
}

#[test]
fn an_expression_that_outgrows_the_statements_memory_fails_naming_the_limit() {
    let engine = hosted(256, 384);
    let (mallory, alice) = (user(&engine, "mallory"), user(&engine, "alice"));
    let attack =
        "SELECT length(s) FROM (SELECT repeat('x', 500000000) AS s FROM generate_series(1, 4))";
    // Two at once, from two users, and alice keeps being answered.
    let attacks: Vec<_> = [mallory.clone(), alice.clone()]
        .into_iter()
        .map(|handle| std::thread::spawn(move || error_of(&handle, QueryRequest::new(attack))))
        .collect();
    for attack in attacks {
        let message = attack.join().unwrap();
        assert!(
            message.contains("statement_memory_mb") || message.contains("max_memory_mb"),
            "{message}"
        );
    }
    assert_eq!(one(&alice, "SELECT 1 + 1"), json!(2));
}

#[test]
fn a_long_literal_copied_into_every_row_fails_before_it_is_copied() {
    let engine = hosted(64, 128);
    let mallory = user(&engine, "mallory");
    let literal = "y".repeat(1 << 20);
    let message = error_of(
        &mallory,
        QueryRequest::new(format!(
            "SELECT '{literal}' AS s FROM generate_series(1, 100000)"
        )),
    );
    assert!(message.contains("long literal"), "{message}");
    // Compared, not copied: fine.
    let rows = mallory
        .sql_blocking(&format!(
            "SELECT count(*) FROM generate_series(1, 10) WHERE CAST(value AS VARCHAR) <> '{literal}'"
        ))
        .unwrap();
    assert_eq!(rows.num_rows(), 1);
}

#[test]
fn a_list_parameter_used_thousands_of_times_fails_before_it_is_copied() {
    let engine = hosted(256, 512);
    let mallory = user(&engine, "mallory");
    let values: Vec<Value> = (0..100_000).map(|n| json!(n)).collect();
    // 2,000 uses, side by side (a chain of 2,000 ORs would be refused for its depth).
    let uses = vec!["value IN :a"; 2_000].join(", ");
    let request = QueryRequest::new(format!("SELECT {uses} FROM generate_series(1, 3)"))
        .with_param("a", Value::Array(values));
    let started = Instant::now();
    let message = error_of(&mallory, request);
    assert!(message.contains("list parameters"), "{message}");
    assert!(message.contains("statement_memory_mb"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(60));
    // Used once, the same list is fine.
    let values: Vec<Value> = (0..100_000).map(|n| json!(n)).collect();
    let request =
        QueryRequest::new("SELECT count(*) AS n FROM generate_series(1, 3) WHERE value IN :a")
            .with_param("a", Value::Array(values));
    let rows = mallory
        .block_on(async { mallory.query(request).await.collect().await })
        .unwrap();
    assert_eq!(datafusion_json(&rows.batches[0]), [json!(3)]);
}

#[test]
fn a_huge_limit_takes_no_memory_of_its_own() {
    let engine = hosted(64, 128);
    let mallory = user(&engine, "mallory");
    let rows = mallory
        .sql_blocking(
            "SELECT value FROM generate_series(1, 10) ORDER BY value DESC LIMIT 10000000000000",
        )
        .unwrap();
    assert_eq!(rows.num_rows(), 10);
}

#[test]
fn a_select_list_wider_than_max_columns_is_refused_and_one_within_it_plans() {
    let engine = hosted(512, 1024);
    let mallory = user(&engine, "mallory");
    let columns = vec!["1"; 30_000].join(", ");
    let started = Instant::now();
    let message = error_of(&mallory, QueryRequest::new(format!("SELECT {columns}")));
    assert!(message.contains("query.max_columns"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // 4,000 copies of one name: named apart in linear time (it was quadratic).
    let columns = vec!["1"; 4_000].join(", ");
    let rows = mallory.sql_blocking(&format!("SELECT {columns}")).unwrap();
    assert_eq!(rows.column_names.len(), 4_000);
}

#[test]
fn statements_nested_deeper_than_a_thousand_are_refused_and_never_overflow_a_stack() {
    let engine = hosted(512, 1024);
    let mallory = user(&engine, "mallory");
    let sum = |terms: usize| format!("SELECT {}", vec!["1"; terms].join(" + "));
    assert_eq!(one(&mallory, &sum(900)), json!(900));
    let message = error_of(&mallory, QueryRequest::new(sum(1_500)));
    assert!(message.contains("1000 deep"), "{message}");
    // A chain far longer is refused before it is parsed (dropping its tree would recurse).
    let message = error_of(&mallory, QueryRequest::new(sum(200_000)));
    assert!(message.contains("operators"), "{message}");
    let union = |n: usize| vec!["SELECT 1 AS x"; n].join(" UNION ALL ");
    assert_eq!(mallory.sql_blocking(&union(300)).unwrap().num_rows(), 300);
    let message = error_of(&mallory, QueryRequest::new(union(5_000)));
    assert!(message.contains("deep"), "{message}");
    let ors = (0..600)
        .map(|n| format!("value = {n}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let rows = mallory
        .sql_blocking(&format!(
            "SELECT count(*) FROM generate_series(1, 1000) WHERE {ors}"
        ))
        .unwrap();
    assert_eq!(rows.num_rows(), 1);
    assert_eq!(one(&mallory, "SELECT 2 * 21"), json!(42));
}

#[test]
fn a_write_stopped_at_its_deadline_commits_nothing() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking("CREATE TABLE big AS SELECT value AS v FROM generate_series(1, 2000000)")
        .unwrap();
    let request =
        QueryRequest::new("CREATE INDEX by_v ON big (v)").with_timeout(Duration::from_millis(1));
    let message = error_of(&engine, request);
    assert!(message.contains("time limit"), "{message}");
    // Nothing was committed: the index can be made now, under its name.
    engine.sql_blocking("CREATE INDEX by_v ON big (v)").unwrap();
}

#[test]
fn a_users_statements_share_the_plans_memory() {
    let engine = hosted(256, 64);
    let mallory = user(&engine, "mallory");
    let message = error_of(
        &mallory,
        QueryRequest::new("SELECT length(repeat('x', 100000000))"),
    );
    assert!(
        message.contains("max_memory_mb") || message.contains("statement_memory_mb"),
        "{message}"
    );
    assert_eq!(
        one(&mallory, "SELECT length(repeat('x', 1000))"),
        json!(1000)
    );
}

/// A local engine whose statements may hold `statement_mb`, with the table `create` makes.
fn local_with_table(statement_mb: u64, create: &str) -> Engine {
    let mut config = Config::default();
    config.query.statement_memory_mb = Some(statement_mb);
    let engine = Engine::open_in_memory(config).unwrap();
    engine.sql_blocking(create).unwrap();
    engine
}

#[test]
fn an_upsert_refuses_a_key_set_larger_than_its_budget_before_making_it() {
    // The keys of the stored rows are gathered into a set before an upsert's rows are checked
    // against them: 300,000 keys grow it into a table of 512K buckets (about 21 MiB) in one
    // allocation, which must be refused before it is made, not seen after.
    let engine = local_with_table(24, "CREATE TABLE k (id BIGINT PRIMARY KEY)");
    for start in (1..300_000).step_by(50_000) {
        engine
            .sql_blocking(&format!(
                "INSERT INTO k SELECT value FROM generate_series({start}, {})",
                start + 49_999
            ))
            .unwrap();
    }
    let message = error_of(
        &engine,
        QueryRequest::new("INSERT INTO k VALUES (1) ON CONFLICT DO NOTHING"),
    );
    assert!(
        message.contains("the keys of the PRIMARY KEY (id) needs"),
        "{message}"
    );
    assert!(message.contains("query.statement_memory_mb"), "{message}");
    // Nothing was lost, and a plain insert (checked by the key's index) still goes in.
    assert_eq!(one(&engine, "SELECT count(*) FROM k"), json!(300_000));
    engine
        .sql_blocking("INSERT INTO k VALUES (300001)")
        .unwrap();
    assert_eq!(one(&engine, "SELECT count(*) FROM k"), json!(300_001));
}

#[test]
fn an_upsert_of_many_rows_refuses_its_key_map_before_making_it() {
    // ON CONFLICT DO UPDATE maps each new row's key to the row: a million new rows need a
    // table of 2M buckets (about 98 MiB), refused before it is made.
    let engine = local_with_table(48, "CREATE TABLE k (id BIGINT PRIMARY KEY, v INT)");
    engine.sql_blocking("INSERT INTO k VALUES (1, 0)").unwrap();
    let message = error_of(
        &engine,
        QueryRequest::new(
            "INSERT INTO k SELECT value, 0 FROM generate_series(1, 1000000) \
             ON CONFLICT (id) DO UPDATE SET v = 1",
        ),
    );
    assert!(
        message.contains("the keys of the statement's rows (id) needs"),
        "{message}"
    );
    assert!(message.contains("query.statement_memory_mb"), "{message}");
    assert_eq!(one(&engine, "SELECT count(*) FROM k"), json!(1));
    // A small one goes through.
    engine
        .sql_blocking("INSERT INTO k VALUES (1, 0), (2, 0) ON CONFLICT (id) DO UPDATE SET v = 1")
        .unwrap();
    assert_eq!(one(&engine, "SELECT sum(v) FROM k"), json!(1));
}
