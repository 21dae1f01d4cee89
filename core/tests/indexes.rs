//! Secondary indexes: lookups through them give what a scan gives, after every kind of write;
//! they are used (only the rows they find are read); unique ones are enforced by their entries.

use mindlite::{encode_document, Config, Engine, QueryRequest};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

fn doc(engine: &Engine, sql: &str) -> Value {
    let result = engine.query_blocking(QueryRequest::new(sql));
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

fn exec(engine: &Engine, sql: &str) {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "ok", "{sql}: {d}");
}

fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

/// The rows the scan under the filter of `sql` handed on, from EXPLAIN ANALYZE.
fn rows_read(engine: &Engine, sql: &str) -> String {
    let plan = rows(engine, &format!("EXPLAIN ANALYZE {sql}")).to_string();
    let at = plan.find("selectivity=").expect("a FilterExec");
    let rest = &plan[at..];
    rest[rest.find('/').unwrap() + 1..rest.find(')').unwrap()].to_string()
}

#[test]
fn lookups_read_only_the_rows_the_index_finds() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    exec(
        &engine,
        "CREATE TABLE t AS SELECT value AS id, value AS copy, 'n' || value AS name \
         FROM generate_series(1, 200000)",
    );
    exec(&engine, "CREATE INDEX t_id ON t (id)");
    exec(&engine, "CREATE INDEX t_name ON t (name, id)");
    assert_eq!(
        rows(&engine, "SELECT id, name FROM t WHERE id = 150000"),
        json!([[150000, "n150000"]])
    );
    assert_eq!(rows_read(&engine, "SELECT * FROM t WHERE id = 150000"), "1");
    assert_eq!(rows_read(&engine, "SELECT * FROM t WHERE 7 = id"), "1");
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE id IN (3, 99, 150000)"),
        "3"
    );
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE id BETWEEN 1000 AND 1099"),
        "100"
    );
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE id > 199990"),
        "10"
    );
    // The first column of a composite index.
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE name = 'n77'"),
        "1"
    );
    // Without an index, every row.
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE copy = 150000"),
        "200.0 K"
    );
    // A value no row of the column's type can equal finds nothing.
    assert_eq!(rows(&engine, "SELECT id FROM t WHERE id = 1.5"), json!([]));
    assert_eq!(
        rows(&engine, "SELECT id FROM t WHERE id IN (NULL, 2)"),
        json!([[2]])
    );
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM t WHERE id BETWEEN 10 AND 1"),
        json!([[0]])
    );
    exec(&engine, "DROP INDEX t_id");
    assert_eq!(
        rows_read(&engine, "SELECT * FROM t WHERE id = 150000"),
        "200.0 K"
    );
    assert_eq!(
        rows(&engine, "SELECT id FROM t WHERE id = 150000"),
        json!([[150000]])
    );
}

#[test]
fn unique_indexes_are_enforced_through_their_entries() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    exec(&engine, "CREATE TABLE u (a INT, b TEXT)");
    exec(
        &engine,
        "INSERT INTO u VALUES (1, 'x'), (2, 'x'), (NULL, 'y'), (NULL, 'y')",
    );
    let e = error(&engine, "CREATE UNIQUE INDEX u_b ON u (b)");
    assert!(e.contains("Duplicate key (x)"), "{e}");
    exec(&engine, "CREATE UNIQUE INDEX u_a ON u (a)");
    let e = error(&engine, "INSERT INTO u VALUES (3, 'z'), (1, 'w')");
    assert!(
        e.contains(
            "Duplicate key (1) violates the UNIQUE INDEX u_a constraint on (a) of table 'u'"
        ),
        "{e}"
    );
    assert_eq!(rows(&engine, "SELECT count(*) FROM u"), json!([[4]]));
    // Keys that trade places are no duplicates; NULLs never conflict.
    exec(&engine, "UPDATE u SET a = 3 - a WHERE a IS NOT NULL");
    exec(&engine, "INSERT INTO u VALUES (NULL, 'z')");
    let e = error(&engine, "UPDATE u SET a = 1");
    assert!(e.contains("Duplicate key (1)"), "{e}");
    assert_eq!(
        rows(&engine, "SELECT a, b FROM u WHERE a IN (1, 2) ORDER BY a"),
        json!([[1, "x"], [2, "x"]])
    );
    exec(&engine, "INSERT OR REPLACE INTO u VALUES (2, 'replaced')");
    assert_eq!(
        rows(&engine, "SELECT b FROM u WHERE a = 2"),
        json!([["replaced"]])
    );
}

/// Random writes to a table with an indexed column and an unindexed copy of it: every lookup
/// through the index answers as the scan of the copy does.
#[test]
fn lookups_agree_with_scans_after_random_writes() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    exec(
        &engine,
        "CREATE TABLE r (id BIGINT, copy BIGINT, s TEXT, scopy TEXT)",
    );
    exec(&engine, "CREATE INDEX r_id ON r (id)");
    exec(&engine, "CREATE INDEX r_s ON r (s)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut next = 0;
    for step in 0..60 {
        let v = rng.gen_range(0..3000);
        match rng.gen_range(0..7) {
            0..=2 => {
                let n = [1, 50, 9000][rng.gen_range(0..3)];
                exec(
                    &engine,
                    &format!(
                        "INSERT INTO r SELECT (value * 7919) % 3000, (value * 7919) % 3000, \
                         'k' || ((value * 31) % 500), 'k' || ((value * 31) % 500) \
                         FROM generate_series({next}, {})",
                        next + n - 1
                    ),
                );
                next += n;
            }
            3 => exec(
                &engine,
                &format!("DELETE FROM r WHERE copy < {v} AND copy > {v} - 40"),
            ),
            4 => exec(
                &engine,
                &format!(
                    "UPDATE r SET id = id + 1, copy = copy + 1 WHERE copy % 97 = {}",
                    v % 97
                ),
            ),
            5 => {
                exec(&engine, "BEGIN");
                exec(
                    &engine,
                    &format!("DELETE FROM r WHERE copy % 5 = {}", v % 5),
                );
                exec(&engine, "ROLLBACK");
            }
            _ => exec(
                &engine,
                &format!(
                    "UPDATE r SET s = 'k' || {}, scopy = 'k' || {} WHERE copy = {v}",
                    v % 500,
                    v % 500
                ),
            ),
        }
        for (indexed, scanned) in [
            (format!("id = {v}"), format!("copy = {v}")),
            (
                format!("id IN ({v}, {}, -1)", v + 13),
                format!("copy IN ({v}, {}, -1)", v + 13),
            ),
            (
                format!("id BETWEEN {v} AND {}", v + 200),
                format!("copy BETWEEN {v} AND {}", v + 200),
            ),
            (format!("id < {}", v / 3), format!("copy < {}", v / 3)),
            (format!("id >= {v}"), format!("copy >= {v}")),
            (
                format!("s = 'k{}'", v % 500),
                format!("scopy = 'k{}'", v % 500),
            ),
            (
                format!("s > 'k{}'", v % 500),
                format!("scopy > 'k{}'", v % 500),
            ),
        ] {
            let query = |filter: &str| {
                rows(
                    &engine,
                    &format!(
                        "SELECT count(*), sum(copy), min(scopy), max(scopy) FROM r WHERE {filter}"
                    ),
                )
            };
            assert_eq!(query(&indexed), query(&scanned), "step {step}: {indexed}");
        }
    }
}

#[test]
fn index_entries_survive_reopening_and_go_with_their_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ix.redb");
    let engine = Engine::open(&path, Config::default()).unwrap();
    exec(
        &engine,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 1000)",
    );
    exec(&engine, "CREATE UNIQUE INDEX t_id ON t (id)");
    engine.close();
    let engine = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows_read(&engine, "SELECT * FROM t WHERE id = 500"), "1");
    assert!(error(&engine, "INSERT INTO t VALUES (500)").contains("Duplicate key (500)"));
    exec(&engine, "DROP TABLE t");
    exec(&engine, "CREATE TABLE t (id BIGINT)");
    exec(&engine, "CREATE UNIQUE INDEX t_id ON t (id)");
    exec(&engine, "INSERT INTO t VALUES (500)");
    assert_eq!(
        rows(&engine, "SELECT id FROM t WHERE id = 500"),
        json!([[500]])
    );
}

#[test]
fn primary_keys_and_unique_sets_are_backed_by_indexes() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    exec(
        &engine,
        "CREATE TABLE p (id BIGINT PRIMARY KEY, code TEXT UNIQUE, n INT)",
    );
    exec(
        &engine,
        "INSERT INTO p SELECT value, 'c' || value, value % 10 FROM generate_series(1, 100000)",
    );
    assert_eq!(rows_read(&engine, "SELECT * FROM p WHERE id = 777"), "1");
    assert_eq!(
        rows_read(&engine, "SELECT * FROM p WHERE code = 'c777'"),
        "1"
    );
    let e = error(&engine, "INSERT INTO p VALUES (5, 'new', 0)");
    assert_eq!(
        e,
        "Duplicate key (5) violates the PRIMARY KEY constraint on (id) of table 'p'"
    );
    let e = error(&engine, "UPDATE p SET code = 'c1' WHERE id = 2");
    assert!(
        e.contains("violates the UNIQUE constraint on (code)"),
        "{e}"
    );
    let e = error(&engine, "DROP INDEX p_pkey");
    assert_eq!(
        e,
        "Index 'p_pkey' cannot be dropped: the PRIMARY KEY constraint of table 'p' needs it"
    );
    // The name is taken in the project: a table's key index gets another.
    exec(&engine, "CREATE TABLE q (id INT PRIMARY KEY)");
    exec(&engine, "CREATE INDEX q2_pkey ON q (id)");
    exec(&engine, "CREATE TABLE q2 (id INT PRIMARY KEY)");
    exec(&engine, "INSERT INTO q2 VALUES (1)");
    assert!(error(&engine, "INSERT INTO q2 VALUES (1)").contains("PRIMARY KEY"));
    exec(&engine, "DROP INDEX q2_pkey");
    exec(&engine, "DROP TABLE q2");
}
