//! Explicit transactions: BEGIN / COMMIT / ROLLBACK, savepoints, what they may not hold,
//! who may open them, and their durability when the process is killed or the engine closed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use mindlite::{encode_document, Config, Edition, Engine, QueryRequest};
use serde_json::{json, Value};

fn doc(engine: &Engine, request: QueryRequest) -> Value {
    let result = engine.query_blocking(request);
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

fn exec(engine: &Engine, sql: &str) {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "ok", "{sql}: {d}");
}

fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

fn memory() -> Engine {
    Engine::open_in_memory(Config::default()).unwrap()
}

#[test]
fn rollback_undoes_every_statement_since_begin_and_commit_keeps_them() {
    let engine = memory();
    exec(&engine, "CREATE TABLE kept (a INT PRIMARY KEY, b TEXT)");
    exec(&engine, "INSERT INTO kept VALUES (1, 'one')");
    assert!(!engine.in_transaction());
    exec(&engine, "BEGIN");
    assert!(engine.in_transaction());
    exec(&engine, "INSERT INTO kept VALUES (2, 'two')");
    exec(&engine, "UPDATE kept SET b = 'uno' WHERE a = 1");
    exec(&engine, "CREATE TABLE fresh AS SELECT 1 AS x");
    exec(&engine, "CREATE VIEW v AS SELECT a FROM kept");
    exec(&engine, "CREATE PROJECT p2");
    // The transaction reads its own writes.
    assert_eq!(
        rows(&engine, "SELECT a, b FROM kept ORDER BY a"),
        json!([[1, "uno"], [2, "two"]])
    );
    assert_eq!(rows(&engine, "SELECT count(*) FROM v"), json!([[2]]));
    exec(&engine, "ROLLBACK");
    assert!(!engine.in_transaction());
    assert_eq!(
        rows(&engine, "SELECT a, b FROM kept ORDER BY a"),
        json!([[1, "one"]])
    );
    assert!(error(&engine, "SELECT * FROM fresh").contains("not found"));
    assert!(error(&engine, "SELECT * FROM v").contains("not found"));
    assert!(error(&engine, "USE p2").contains("not found"));

    exec(&engine, "START TRANSACTION");
    exec(&engine, "DELETE FROM kept");
    exec(&engine, "DROP TABLE kept");
    exec(&engine, "ROLLBACK");
    assert_eq!(rows(&engine, "SELECT a FROM kept"), json!([[1]]));

    exec(&engine, "BEGIN TRANSACTION");
    exec(&engine, "INSERT INTO kept VALUES (3, 'three')");
    exec(&engine, "COMMIT");
    exec(&engine, "BEGIN; INSERT INTO kept VALUES (4, 'four'); END");
    assert_eq!(
        rows(&engine, "SELECT a FROM kept ORDER BY a"),
        json!([[1], [3], [4]])
    );
}

#[test]
fn a_failed_statement_aborts_the_transaction_as_in_duckdb() {
    let engine = memory();
    exec(&engine, "CREATE TABLE t (a INT PRIMARY KEY)");
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (1)");
    let e = error(&engine, "INSERT INTO t VALUES (2), (1)");
    assert!(e.contains("t"), "{e}");
    assert!(
        engine.in_transaction(),
        "the transaction is open until ROLLBACK"
    );
    for sql in ["INSERT INTO t VALUES (3)", "SELECT 1", "COMMIT"] {
        let e = error(&engine, sql);
        assert!(e.contains("Current transaction is aborted"), "{sql}: {e}");
    }
    exec(&engine, "ROLLBACK");
    assert_eq!(rows(&engine, "SELECT count(*) FROM t"), json!([[0]]));
    // A savepoint taken before the failure lets the transaction go on from there.
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (1)");
    exec(&engine, "SAVEPOINT s");
    error(&engine, "INSERT INTO t VALUES (1)");
    exec(&engine, "ROLLBACK TO s");
    exec(&engine, "INSERT INTO t VALUES (3)");
    exec(&engine, "COMMIT");
    assert_eq!(
        rows(&engine, "SELECT a FROM t ORDER BY a"),
        json!([[1], [3]])
    );
}

#[test]
fn misplaced_transaction_statements_are_clear_errors() {
    let engine = memory();
    assert_eq!(
        error(&engine, "COMMIT"),
        "cannot commit - no transaction is active"
    );
    assert_eq!(
        error(&engine, "ROLLBACK"),
        "cannot rollback - no transaction is active"
    );
    assert!(error(&engine, "SAVEPOINT a").contains("no transaction is active"));
    exec(&engine, "BEGIN");
    assert_eq!(
        error(&engine, "BEGIN"),
        "cannot start a transaction within a transaction"
    );
    assert_eq!(
        error(&engine, "RELEASE SAVEPOINT nope"),
        "no such savepoint: nope"
    );
    exec(&engine, "ROLLBACK");
}

#[test]
fn savepoints_roll_back_part_of_a_transaction() {
    let engine = memory();
    exec(&engine, "CREATE TABLE t (a INT)");
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (1)");
    exec(&engine, "SAVEPOINT one");
    exec(&engine, "INSERT INTO t VALUES (2)");
    exec(&engine, "SAVEPOINT two");
    exec(&engine, "INSERT INTO t VALUES (3)");
    exec(&engine, "ROLLBACK TO SAVEPOINT one");
    assert_eq!(rows(&engine, "SELECT a FROM t"), json!([[1]]));
    // `two` went with what came after `one`; `one` stays.
    assert_eq!(error(&engine, "ROLLBACK TO two"), "no such savepoint: two");
    exec(&engine, "INSERT INTO t VALUES (4)");
    exec(&engine, "ROLLBACK TO one");
    exec(&engine, "INSERT INTO t VALUES (5)");
    exec(&engine, "RELEASE one");
    assert_eq!(error(&engine, "ROLLBACK TO one"), "no such savepoint: one");
    exec(&engine, "COMMIT");
    assert_eq!(
        rows(&engine, "SELECT a FROM t ORDER BY a"),
        json!([[1], [5]])
    );
}

#[test]
fn chunks_read_inside_a_rolled_back_transaction_are_not_served_again() {
    // A rollback hands chunk ids out again: what the cache kept under them must go.
    let engine = memory();
    exec(&engine, "CREATE TABLE t (a BIGINT)");
    exec(&engine, "BEGIN");
    exec(
        &engine,
        "INSERT INTO t SELECT value FROM generate_series(1, 10000)",
    );
    for _ in 0..3 {
        assert_eq!(rows(&engine, "SELECT sum(a) FROM t"), json!([[50005000]]));
    }
    exec(&engine, "ROLLBACK");
    exec(
        &engine,
        "INSERT INTO t SELECT value FROM generate_series(1, 100)",
    );
    assert_eq!(rows(&engine, "SELECT sum(a) FROM t"), json!([[5050]]));
}

#[test]
fn the_http_api_and_the_hosted_edition_stay_autocommit() {
    let engine = memory();
    let (request, _) = QueryRequest::from_wire_json(br#"{"query": "BEGIN"}"#).unwrap();
    let d = doc(&engine, request);
    assert_eq!(d["type"], "error");
    assert!(
        d["error_message"]
            .as_str()
            .unwrap()
            .contains("not supported over HTTP"),
        "{d}"
    );
    assert!(!engine.in_transaction());

    let config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    let hosted = Engine::open_in_memory(config).unwrap();
    let e = error(&hosted, "BEGIN");
    assert!(e.contains("hosted edition"), "{e}");
}

#[test]
fn what_cannot_be_rolled_back_is_refused_inside_a_transaction() {
    let engine = memory();
    exec(&engine, "CREATE TABLE t (a INT, b INT)");
    exec(&engine, "BEGIN");
    let e = error(
        &engine,
        "CREATE MODEL m FROM mindlite (SELECT * FROM t) PREDICT b",
    );
    assert_eq!(
        e,
        "CREATE MODEL cannot run inside a transaction; COMMIT or ROLLBACK first"
    );
    exec(&engine, "ROLLBACK");
}

#[test]
fn closing_with_a_transaction_open_rolls_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let engine = Engine::open(&path, Config::default()).unwrap();
    exec(&engine, "CREATE TABLE t (a INT)");
    exec(&engine, "INSERT INTO t VALUES (1)");
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (2)");
    engine.close();
    let engine = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows(&engine, "SELECT a FROM t"), json!([[1]]));
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (3)");
    exec(&engine, "COMMIT");
    engine.close();
    let engine = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(
        rows(&engine, "SELECT a FROM t ORDER BY a"),
        json!([[1], [3]])
    );
}

const CHILD_ENV: &str = "MINDLITE_TRANSACTION_CHILD_DB";

/// Child mode (only when the parent sets the variable): commits one row, opens a transaction
/// holding a second, says so, then waits to be killed.
#[test]
fn transaction_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let engine = Engine::open(&path, Config::default()).unwrap();
    exec(&engine, "CREATE TABLE t (a INT)");
    exec(&engine, "BEGIN");
    exec(&engine, "INSERT INTO t VALUES (1)");
    exec(&engine, "COMMIT");
    exec(&engine, "BEGIN");
    exec(
        &engine,
        "INSERT INTO t SELECT value FROM generate_series(2, 70000)",
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nopen").unwrap();
    out.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn a_killed_process_keeps_what_it_committed_and_nothing_of_its_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "transactions::transaction_child", "--nocapture"])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let said_open = stdout
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim() == "open");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(said_open, "the child never opened its transaction");
    let engine = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows(&engine, "SELECT a FROM t"), json!([[1]]));
}
