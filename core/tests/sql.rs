//! SQL behaviour end to end: projects, tables, DML, SHOW, information_schema, parameters,
//! error messages, and persistence across close and reopen.

use mindlite::{encode_document, Config, Engine, Outcome, QueryRequest};
use serde_json::{json, Value};

fn engine() -> Engine {
    Engine::open_in_memory(Config::default()).unwrap()
}

/// The JSON document of a request, parsed.
fn doc(engine: &Engine, request: QueryRequest) -> Value {
    let result = engine.query_blocking(request);
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

/// The `data` rows of a query that must succeed.
fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

fn columns(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["column_names"].clone()
}

/// Runs a statement that must succeed and returns `affected_rows`.
fn exec(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "ok", "{sql}: {d}");
    d["affected_rows"].clone()
}

/// The error message of a statement that must fail.
fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, QueryRequest::new(sql));
    assert_eq!(d["type"], "error", "{sql}: {d}");
    assert_eq!(d["error_code"], 0);
    d["error_message"].as_str().unwrap().to_string()
}

#[test]
fn default_project_exists_and_cannot_be_dropped() {
    let e = engine();
    assert_eq!(
        rows(&e, "SHOW DATABASES"),
        json!([["information_schema"], ["log"], ["mindsdb"], ["files"]])
    );
    assert!(error(&e, "DROP DATABASE mindsdb").contains("cannot be dropped"));
    assert!(error(&e, "DROP PROJECT information_schema").contains("cannot be dropped"));
}

#[test]
fn projects_are_created_listed_and_dropped_in_every_spelling() {
    let e = engine();
    exec(&e, "CREATE PROJECT p1");
    exec(&e, "create database p2");
    exec(&e, "CREATE DATABASE p3 ENGINE = 'mindsdb' ");
    exec(&e, "CREATE DATABASE IF NOT EXISTS p3 WITH ENGINE 'mindsdb'");
    assert!(error(&e, "CREATE PROJECT p1").contains("already exists"));
    exec(&e, "CREATE PROJECT IF NOT EXISTS p1");
    assert_eq!(
        rows(&e, "SHOW PROJECTS"),
        json!([["mindsdb"], ["p1"], ["p2"], ["p3"]])
    );
    assert_eq!(columns(&e, "SHOW PROJECTS"), json!(["project"]));
    assert_eq!(
        rows(&e, "SHOW FULL DATABASES"),
        json!([
            ["information_schema", "system", null],
            ["log", "system", null],
            ["mindsdb", "project", "mindsdb"],
            ["p1", "project", "mindsdb"],
            ["p2", "project", "mindsdb"],
            ["p3", "project", "mindsdb"],
            ["files", "data", "files"]
        ])
    );
    assert_eq!(
        rows(
            &e,
            "select NAME from information_schema.databases where TYPE='project'"
        ),
        json!([["mindsdb"], ["p1"], ["p2"], ["p3"]])
    );
    assert_eq!(
        columns(&e, "select NAME, TYPE from information_schema.databases"),
        json!(["NAME", "TYPE"])
    );
    assert_eq!(
        columns(&e, "SELECT * FROM information_schema.databases"),
        json!(["NAME", "TYPE", "ENGINE", "CONNECTION_DATA"])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT connection_data FROM information_schema.databases WHERE name = 'files'"
        ),
        json!([["{}"]])
    );
    exec(&e, "DROP PROJECT p1");
    exec(&e, "DROP DATABASE p2");
    exec(&e, "DROP DATABASE IF EXISTS p2");
    assert!(error(&e, "DROP DATABASE p2").contains("does not exist"));
    assert_eq!(rows(&e, "SHOW PROJECTS"), json!([["mindsdb"], ["p3"]]));
    // A datasource is checked before anything is stored (core/tests/postgres.rs has the rest).
    assert!(error(
        &e,
        "CREATE DATABASE pg ENGINE = 'postgres', PARAMETERS = {\"host\": \"h\"}"
    )
    .contains("PostgreSQL parameter 'database' is required"));
    assert!(error(&e, "CREATE PROJECT files").contains("already exists"));
    assert!(error(&e, "CREATE PROJECT `bad-name`").contains("Invalid project name"));
}

#[test]
fn use_changes_the_returned_context() {
    let e = engine();
    exec(&e, "CREATE PROJECT p");
    let d = doc(&e, QueryRequest::new("USE p"));
    assert_eq!(d["context"], json!({"show_secrets": false, "db": "p"}));
    let d = doc(
        &e,
        QueryRequest::new("USE p; CREATE TABLE t (a INT); INSERT INTO t VALUES (1)"),
    );
    assert_eq!(d["context"]["db"], "p");
    assert_eq!(rows(&e, "SELECT a FROM p.t"), json!([[1]]));
    assert_eq!(
        doc(&e, QueryRequest::new("SELECT a FROM t").with_db("p"))["data"],
        json!([[1]])
    );
    assert!(error(&e, "USE nowhere").contains("nowhere"));
}

#[test]
fn tables_are_created_filled_changed_and_dropped() {
    let e = engine();
    exec(
        &e,
        "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, score DOUBLE, ok BOOLEAN, born DATE)",
    );
    assert_eq!(
        exec(&e, "INSERT INTO t VALUES (1, 'a', 1.5, true, '2024-01-02'), (2, 'b', NULL, false, NULL), (3, 'c', 3.5, NULL, '2024-03-04')"),
        json!(3)
    );
    assert_eq!(
        exec(&e, "INSERT INTO t (id, name) VALUES (4, 'd')"),
        json!(1)
    );
    assert_eq!(
        rows(&e, "SELECT * FROM t ORDER BY id"),
        json!([
            [1, "a", 1.5, true, "2024-01-02"],
            [2, "b", null, false, null],
            [3, "c", 3.5, null, "2024-03-04"],
            [4, "d", null, null, null]
        ])
    );
    assert!(error(&e, "INSERT INTO t (name) VALUES ('x')").contains("id"));
    assert_eq!(
        exec(
            &e,
            "UPDATE t SET score = score * 2, name = upper(name) WHERE id <= 2"
        ),
        json!(2)
    );
    assert_eq!(
        rows(&e, "SELECT id, name, score FROM t ORDER BY id LIMIT 2"),
        json!([[1, "A", 3.0], [2, "B", null]])
    );
    assert_eq!(exec(&e, "DELETE FROM t WHERE score IS NULL"), json!(2));
    assert_eq!(rows(&e, "SELECT id FROM t ORDER BY id"), json!([[1], [3]]));
    assert_eq!(exec(&e, "DELETE FROM t WHERE id = 99"), json!(0));
    assert_eq!(
        exec(
            &e,
            "INSERT INTO t SELECT id + 10, name, score, ok, born FROM t"
        ),
        json!(2)
    );
    assert_eq!(
        rows(&e, "SELECT count(*), sum(id) FROM t"),
        json!([[4, 28]])
    );
    assert_eq!(exec(&e, "DELETE FROM t"), json!(4));
    assert_eq!(rows(&e, "SELECT count(*) FROM t"), json!([[0]]));
    exec(&e, "DROP TABLE t");
    assert!(error(&e, "SELECT * FROM t").contains("Table 't' not found in database: mindsdb"));
    exec(&e, "DROP TABLE IF EXISTS t");
    assert!(error(&e, "DROP TABLE t").contains("not found"));
}

#[test]
fn create_table_as_select_in_every_mindsdb_spelling() {
    let e = engine();
    exec(&e, "CREATE PROJECT p");
    assert_eq!(
        exec(&e, "CREATE TABLE p.a AS SELECT 1 AS x, 'y' AS Y"),
        json!(1)
    );
    assert_eq!(rows(&e, "SELECT Y FROM p.a"), json!([["y"]]));
    assert_eq!(columns(&e, "SELECT * FROM p.a"), json!(["x", "y"]));
    assert_eq!(
        exec(&e, "CREATE TABLE p.b SELECT x + 1 AS x FROM p.a"),
        json!(1)
    );
    assert_eq!(
        exec(&e, "CREATE TABLE p.c (SELECT x * 10 AS x FROM p.b)"),
        json!(1)
    );
    assert_eq!(rows(&e, "SELECT x FROM p.c"), json!([[20]]));
    assert!(error(&e, "CREATE TABLE p.c SELECT 1 AS x").contains("already exists"));
    assert_eq!(
        exec(
            &e,
            "CREATE OR REPLACE TABLE p.c SELECT 5 AS z UNION ALL SELECT 6"
        ),
        json!(2)
    );
    assert_eq!(rows(&e, "SELECT * FROM p.c ORDER BY z"), json!([[5], [6]]));
    assert_eq!(columns(&e, "SELECT * FROM p.c"), json!(["z"]));
    exec(&e, "CREATE TABLE IF NOT EXISTS p.c SELECT 1 AS other");
    assert_eq!(columns(&e, "SELECT * FROM p.c"), json!(["z"]));
    // A table made from a query accepts NULLs later.
    exec(&e, "INSERT INTO p.c VALUES (NULL)");
    assert_eq!(
        rows(&e, "SELECT count(*) FROM p.c WHERE z IS NULL"),
        json!([[1]])
    );
    // A project also lists its `models` table, as MindsDB's do.
    assert_eq!(
        rows(&e, "SHOW TABLES FROM p"),
        json!([["a"], ["b"], ["c"], ["models"]])
    );
    assert_eq!(columns(&e, "SHOW TABLES FROM p"), json!(["Tables_in_p"]));
    assert_eq!(
        doc(&e, QueryRequest::new("show tables").with_db("p"))["column_names"],
        json!(["Tables_in_p"])
    );
    assert_eq!(
        rows(&e, "SHOW FULL TABLES IN p"),
        json!([
            ["a", "BASE TABLE"],
            ["b", "BASE TABLE"],
            ["c", "BASE TABLE"],
            ["models", "BASE TABLE"]
        ])
    );
}

#[test]
fn information_schema_lists_tables_and_columns() {
    let e = engine();
    exec(&e, "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR)");
    exec(&e, "INSERT INTO t VALUES (1, 'a')");
    assert_eq!(
        rows(&e, "SELECT table_schema, table_name, table_type, table_rows FROM information_schema.tables WHERE table_schema = 'mindsdb'"),
        json!([["mindsdb", "t", "BASE TABLE", 1]])
    );
    assert_eq!(
        rows(&e, "SELECT COLUMN_NAME, ORDINAL_POSITION, IS_NULLABLE, DATA_TYPE FROM information_schema.columns WHERE TABLE_NAME = 't'"),
        json!([["id", 1, "NO", "BIGINT"], ["name", 2, "YES", "VARCHAR"]])
    );
    assert!(error(
        &e,
        "INSERT INTO information_schema.tables SELECT * FROM information_schema.tables"
    )
    .contains("read-only"));
}

#[test]
fn full_select_is_datafusion() {
    let e = engine();
    exec(&e, "CREATE TABLE s (k VARCHAR, v INT)");
    exec(
        &e,
        "INSERT INTO s VALUES ('a', 1), ('a', 2), ('b', 3), ('c', 4)",
    );
    exec(&e, "CREATE TABLE n (k VARCHAR, label VARCHAR)");
    exec(&e, "INSERT INTO n VALUES ('a', 'alpha'), ('b', 'beta')");
    assert_eq!(
        rows(
            &e,
            "WITH totals AS (SELECT k, sum(v) AS total FROM s GROUP BY k) \
                  SELECT t.k, n.label, t.total, rank() OVER (ORDER BY t.total DESC) AS r \
                  FROM totals t LEFT JOIN n ON t.k = n.k ORDER BY t.k"
        ),
        json!([["a", "alpha", 3, 2], ["b", "beta", 3, 2], ["c", null, 4, 1]])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT k FROM s WHERE v > (SELECT avg(v) FROM s) ORDER BY k"
        ),
        json!([["b"], ["c"]])
    );
    assert_eq!(
        rows(&e, "SELECT upper(k), length(label) FROM n ORDER BY 1"),
        json!([["A", 5], ["B", 4]])
    );
    assert_eq!(
        columns(&e, "SELECT count(*), 1, 'x', v + 1 FROM s GROUP BY v"),
        json!(["count(*)", "1", "x", "v + 1"])
    );
    assert_eq!(
        columns(&e, "SELECT K AS Key FROM s LIMIT 1"),
        json!(["Key"])
    );
    assert_eq!(rows(&e, "SELECT count(*) FROM mindsdb.s"), json!([[4]]));
}

#[test]
fn parameters_bind_as_values_never_as_text() {
    let e = engine();
    exec(&e, "CREATE TABLE t (id INT, s VARCHAR)");
    let tricky = "it's a \"quote\" \\ and '); DROP TABLE t; --";
    let insert = QueryRequest::new("INSERT INTO t VALUES (:id, :s), (:id2, :nothing)")
        .with_param("id", json!(1))
        .with_param("s", json!(tricky))
        .with_param("id2", json!(2))
        .with_param("nothing", Value::Null);
    assert_eq!(doc(&e, insert)["affected_rows"], json!(2));
    let select = QueryRequest::new("SELECT id FROM t WHERE s = :s").with_param("s", json!(tricky));
    assert_eq!(doc(&e, select)["data"], json!([[1]]));
    let in_list = QueryRequest::new("SELECT id FROM t WHERE id IN :ids ORDER BY id")
        .with_param("ids", json!([1, 2, 3]));
    assert_eq!(doc(&e, in_list)["data"], json!([[1], [2]]));
    let in_parens =
        QueryRequest::new("SELECT id FROM t WHERE id NOT IN (:ids)").with_param("ids", json!([1]));
    assert_eq!(doc(&e, in_parens)["data"], json!([[2]]));
    let empty =
        QueryRequest::new("SELECT count(*) FROM t WHERE id IN :ids").with_param("ids", json!([]));
    assert_eq!(doc(&e, empty)["data"], json!([[0]]));
    let nulls = QueryRequest::new("SELECT id FROM t WHERE s IS NULL AND :x IS NULL")
        .with_param("x", Value::Null);
    assert_eq!(doc(&e, nulls)["data"], json!([[2]]));
    let unknown = doc(&e, QueryRequest::new("SELECT :missing"));
    assert_eq!(unknown["type"], "error");
    assert!(unknown["error_message"]
        .as_str()
        .unwrap()
        .contains(":missing"));
    assert_eq!(rows(&e, "SELECT count(*) FROM t"), json!([[2]]));
}

#[test]
fn errors_are_results_that_name_the_object() {
    let e = engine();
    assert_eq!(
        error(&e, "SELECT * FROM nosuch"),
        "Table 'nosuch' not found in database: mindsdb"
    );
    assert_eq!(
        error(&e, "SELECT * FROM nodb.t"),
        "Database 'nodb' not found"
    );
    exec(&e, "CREATE PROJECT p");
    exec(&e, "CREATE TABLE mindsdb.y (a INT)");
    assert_eq!(
        error(&e, "SELECT * FROM p.x JOIN mindsdb.y ON true"),
        "Table 'x' not found in database: p"
    );
    assert!(error(&e, "SELEC 1").starts_with("The SQL statement cannot be parsed - SELEC 1"));
    assert!(error(&e, "INSERT INTO nosuch VALUES (1)").contains("Table 'nosuch' not found"));
    exec(&e, "CREATE TABLE t (a INT)");
    assert!(error(&e, "SELECT b FROM t").contains("No field named b"));
    assert!(
        error(&e, "CREATE TABLE u (a INT REFERENCES t (a))").contains("not currently supported")
    );
    assert!(error(&e, "").contains("empty"));
}

#[test]
fn hostile_input_never_panics() {
    let e = engine();
    for sql in [
        "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((",
        "SELECT 'unterminated",
        "\u{0}\u{1}\u{ffff}",
        "SELECT * FROM (SELECT * FROM (SELECT 1)) x WHERE",
        "CREATE TABLE",
        "DROP",
        "SHOW",
        "USE",
        "CREATE DATABASE",
        "INSERT INTO t VALUES",
        ";;;",
        "SELECT 1; SELEC 2",
    ] {
        let d = doc(&e, QueryRequest::new(sql));
        assert_eq!(d["type"], "error", "{sql:?} gave {d}");
    }
    let deep = format!("SELECT {}1{}", "(".repeat(2000), ")".repeat(2000));
    assert_eq!(doc(&e, QueryRequest::new(deep))["type"], "error");
}

#[test]
fn a_failed_statement_changes_nothing() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT NOT NULL)");
    exec(&e, "INSERT INTO t VALUES (1), (2)");
    assert!(error(&e, "INSERT INTO t VALUES (3), (NULL)").contains("non-nullable"));
    assert!(error(&e, "INSERT INTO t SELECT NULL").contains("NOT NULL"));
    // Division by zero is NULL, which the NOT NULL column refuses.
    assert!(error(&e, "UPDATE t SET a = a / (a - 2)").contains("NOT NULL"));
    assert_eq!(rows(&e, "SELECT a FROM t ORDER BY a"), json!([[1], [2]]));
}

#[test]
fn data_and_catalog_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("db.redb");
    {
        let e = Engine::open(&path, Config::default()).unwrap();
        exec(&e, "CREATE PROJECT p");
        exec(&e, "CREATE TABLE p.t (id BIGINT, s VARCHAR)");
        exec(
            &e,
            "INSERT INTO p.t SELECT value, 'row' || value FROM generate_series(1, 150000)",
        );
        exec(&e, "DELETE FROM p.t WHERE id % 2 = 0");
        exec(&e, "INSERT INTO p.t VALUES (0, 'zero')");
    }
    let e = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows(&e, "SHOW PROJECTS"), json!([["mindsdb"], ["p"]]));
    assert_eq!(
        rows(&e, "SELECT count(*), min(id), max(id) FROM p.t"),
        json!([[75001, 0, 149999]])
    );
    assert_eq!(
        rows(&e, "SELECT s FROM p.t WHERE id = 99999"),
        json!([["row99999"]])
    );
}

#[test]
fn opening_bad_files_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.redb");
    std::fs::write(
        &junk,
        b"this is not a database file at all, just some text that is long enough",
    )
    .unwrap();
    let err = Engine::open(&junk, Config::default()).err().unwrap();
    assert!(
        err.message().contains("junk.redb") && err.message().contains("not a mindlite database"),
        "{err}"
    );

    let held = dir.path().join("held.redb");
    let _first = Engine::open(&held, Config::default()).unwrap();
    let err = Engine::open(&held, Config::default()).err().unwrap();
    assert!(
        err.message().contains("held.redb") && err.message().contains("already open"),
        "{err}"
    );

    let err = Engine::open(dir.path(), Config::default()).err().unwrap();
    assert!(err.message().contains("directory"), "{err}");
}

#[test]
fn another_format_version_is_refused_with_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn
                .open_table(redb::TableDefinition::<&str, &str>::new("meta"))
                .unwrap();
            meta.insert("format_version", "999").unwrap();
        }
        txn.commit().unwrap();
    }
    let err = Engine::open(&path, Config::default()).err().unwrap();
    assert!(
        err.message().contains("999")
            && err.message().contains("reads version 1")
            && err.message().contains("old.redb"),
        "{err}"
    );
}

#[test]
fn small_inserts_are_merged_and_large_ones_split_into_chunks() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a BIGINT)");
    for i in 0..50 {
        exec(&e, &format!("INSERT INTO t VALUES ({i})"));
    }
    exec(
        &e,
        "INSERT INTO t SELECT value FROM generate_series(1000, 200999)",
    );
    assert_eq!(
        rows(&e, "SELECT count(*), sum(a) FROM t"),
        json!([[200050, 20199901225i64]])
    );
    // The stream never hands out more than batch_size rows at a time.
    let result = e.query_blocking(QueryRequest::new("SELECT a FROM t"));
    let Outcome::Table(mut table) = result.outcome else {
        panic!("not a table")
    };
    let mut total = 0;
    while let Some(batch) = e.block_on(futures::StreamExt::next(&mut table.stream)) {
        let batch = batch.unwrap();
        assert!(batch.num_rows() <= 8192);
        total += batch.num_rows();
    }
    assert_eq!(total, 200050);
}

#[test]
fn engine_is_shared_across_threads() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a BIGINT)");
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let e = e.clone();
            std::thread::spawn(move || {
                for j in 0..25 {
                    exec(&e, &format!("INSERT INTO t VALUES ({})", i * 100 + j));
                    rows(&e, "SELECT count(*) FROM t");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        rows(&e, "SELECT count(*), count(DISTINCT a) FROM t"),
        json!([[100, 100]])
    );
}

#[test]
fn engine_and_its_futures_are_send() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: T) {}
    let e = engine();
    assert_send_sync(&e);
    assert_send(e.query(QueryRequest::new("SELECT 1")));
    assert_send(e.insert_batches("mindsdb", "t", Vec::new()));
}

#[test]
fn record_batches_append_atomically() {
    use mindlite::arrow::array::{Int64Array, StringArray};
    use mindlite::arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let e = engine();
    exec(&e, "CREATE TABLE t (id BIGINT NOT NULL, s VARCHAR)");
    let batch = |ids: Vec<Option<i64>>| {
        let n = ids.len();
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int64Array::from(ids)) as _),
            ("s", Arc::new(StringArray::from(vec!["v"; n])) as _),
        ])
        .unwrap()
    };
    let n = e
        .block_on(e.insert_batches(
            "mindsdb",
            "t",
            vec![batch(vec![Some(1), Some(2)]), batch(vec![Some(3)])],
        ))
        .unwrap();
    assert_eq!(n, 3);
    let err = e
        .block_on(e.insert_batches(
            "mindsdb",
            "t",
            vec![batch(vec![Some(4)]), batch(vec![None])],
        ))
        .unwrap_err();
    assert!(err.message().contains("NOT NULL"), "{err}");
    assert!(e
        .block_on(e.insert_batches("mindsdb", "nope", vec![]))
        .unwrap_err()
        .message()
        .contains("nope"));
    assert_eq!(rows(&e, "SELECT count(*), sum(id) FROM t"), json!([[3, 6]]));
}

#[test]
fn rows_come_back_in_insertion_order_without_order_by() {
    let e = engine();
    exec(
        &e,
        "CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 300000) ORDER BY id",
    );
    exec(&e, "INSERT INTO t VALUES (300001), (300002)");
    let all = e.sql_blocking("SELECT id FROM t").unwrap();
    let ids: Vec<i64> = all
        .batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<mindlite::arrow::array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(ids, (1..=300002).collect::<Vec<i64>>());
    for _ in 0..20 {
        assert_eq!(
            rows(&e, "SELECT 1 AS x UNION ALL SELECT 2 UNION ALL SELECT 3"),
            json!([[1], [2], [3]])
        );
    }
}

/// Random token soup (a cheap fuzzer): whatever the input, the answer is a result, not a panic.
#[test]
fn random_statements_always_give_results() {
    use rand::{Rng, SeedableRng};
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT, b VARCHAR, c DOUBLE)");
    exec(&e, "INSERT INTO t VALUES (1, 'x', 1.5), (2, NULL, -0.5)");
    let words = [
        "SELECT",
        "FROM",
        "WHERE",
        "t",
        "a",
        "b",
        "c",
        "*",
        ",",
        "(",
        ")",
        "1",
        "'s'",
        "NULL",
        "AND",
        "OR",
        "NOT",
        "=",
        "<",
        "+",
        "/",
        "GROUP",
        "BY",
        "ORDER",
        "LIMIT",
        "JOIN",
        "ON",
        "AS",
        "x",
        "INSERT",
        "INTO",
        "VALUES",
        "UPDATE",
        "SET",
        "DELETE",
        "CREATE",
        "TABLE",
        "DROP",
        "PROJECT",
        "DATABASE",
        "SHOW",
        "TABLES",
        "USE",
        "mindsdb",
        ".",
        ";",
        ":p",
        "IN",
        "count(*)",
        "sum(a)",
        "CASE",
        "WHEN",
        "THEN",
        "END",
        "UNION",
        "ALL",
        "information_schema",
        "databases",
        "WITH",
        "OVER",
        "`q`",
        "\"d\"",
        "None",
        "1e308",
        "-",
        "::",
        "[",
        "]",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..1500 {
        let n = rng.gen_range(1..14);
        let sql: Vec<&str> = (0..n)
            .map(|_| words[rng.gen_range(0..words.len())])
            .collect();
        let sql = sql.join(" ");
        let request = QueryRequest::new(sql.clone()).with_param("p", json!(3));
        let d = doc(&e, request);
        assert!(
            ["table", "ok", "error"].contains(&d["type"].as_str().unwrap()),
            "{sql}: {d}"
        );
    }
    // The table is still intact, whatever the soup did to it, or gone by a DROP: never corrupt.
    let d = doc(
        &e,
        QueryRequest::new("SELECT count(*) FROM information_schema.tables"),
    );
    assert_eq!(d["type"], "table");
}

/// VARCHAR is a string-view column; chunks cut from many batches must not carry the bytes of
/// every batch they were cut from (they once did, and a 5M-row table took 3.3 GB).
#[test]
fn stored_size_stays_proportional_to_the_data() {
    use mindlite::arrow::array::{ArrayRef, Int64Array, StringArray};
    use mindlite::arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("size.redb");
    {
        let e = Engine::open(&path, Config::default()).unwrap();
        exec(&e, "CREATE TABLE t (id BIGINT, category VARCHAR)");
        let batches: Vec<RecordBatch> = (0..20i64)
            .map(|b| {
                let ids = b * 50_000..(b + 1) * 50_000;
                RecordBatch::try_from_iter(vec![
                    (
                        "id",
                        Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
                    ),
                    (
                        "category",
                        Arc::new(StringArray::from_iter_values(
                            ids.map(|i| format!("category_{:02}", i % 100)),
                        )) as ArrayRef,
                    ),
                ])
                .unwrap()
            })
            .collect();
        assert_eq!(
            e.block_on(e.insert_batches("mindsdb", "t", batches))
                .unwrap(),
            1_000_000
        );
        assert_eq!(
            rows(&e, "SELECT count(DISTINCT category), max(id) FROM t"),
            json!([[100, 999_999]])
        );
    }
    // 1M rows of (8-byte id, 16-byte string view) are about 24 MB.
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size < 64 * 1024 * 1024,
        "the file is {} MB",
        size / 1_000_000
    );
}

#[test]
fn update_and_delete_take_subqueries_in_where() {
    let e = engine();
    exec(&e, "CREATE TABLE t (id INT, name VARCHAR)");
    exec(
        &e,
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
    );
    exec(&e, "CREATE TABLE u (id INT)");
    exec(&e, "INSERT INTO u VALUES (2), (3)");
    assert_eq!(
        exec(
            &e,
            "UPDATE t SET name = upper(name) WHERE id IN (SELECT id FROM u)"
        ),
        json!(2)
    );
    assert_eq!(
        exec(
            &e,
            "UPDATE t SET name = 'x' WHERE id > (SELECT max(id) FROM u)"
        ),
        json!(1)
    );
    assert_eq!(
        rows(&e, "SELECT id, name FROM t ORDER BY id"),
        json!([[1, "a"], [2, "B"], [3, "C"], [4, "x"]])
    );
    assert_eq!(
        exec(
            &e,
            "DELETE FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id)"
        ),
        json!(2)
    );
    assert_eq!(
        exec(&e, "UPDATE t AS x SET name = 'q' WHERE x.id = 1"),
        json!(1)
    );
    assert_eq!(
        rows(&e, "SELECT id, name FROM t ORDER BY id"),
        json!([[1, "q"], [4, "x"]])
    );
}

#[test]
fn engine_opens_and_runs_inside_async_code() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("async.redb");
    runtime.block_on(async {
        let e = Engine::open(&path, Config::default()).unwrap();
        e.sql("CREATE TABLE t (a INT)").await.unwrap();
        e.sql("INSERT INTO t VALUES (1), (2)").await.unwrap();
        assert_eq!(e.sql("SELECT sum(a) FROM t").await.unwrap().num_rows(), 1);
        // Dropped inside the runtime: must not panic.
        drop(e);
    });
}

#[test]
fn empty_files_open_and_foreign_redb_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let e = Engine::open(&empty, Config::default()).unwrap();
    assert_eq!(rows(&e, "SHOW PROJECTS"), json!([["mindsdb"]]));
    drop(e);

    let foreign = dir.path().join("foreign.redb");
    {
        let db = redb::Database::create(&foreign).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, &str>::new("their_data"))
            .unwrap()
            .insert("k", "v")
            .unwrap();
        txn.commit().unwrap();
    }
    let err = Engine::open(&foreign, Config::default()).err().unwrap();
    assert!(err.message().contains("not a mindlite database"), "{err}");
    // Refusing it left their file as it was.
    let db = redb::Database::open(&foreign).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let names: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    assert_eq!(names, ["their_data"]);
}

#[test]
fn inserted_batches_that_do_not_fit_are_refused_not_nulled() {
    use mindlite::arrow::array::{ArrayRef, Int64Array, StringArray};
    use mindlite::arrow::record_batch::RecordBatch;
    use std::sync::Arc;
    let e = engine();
    exec(&e, "CREATE TABLE t (id INT NOT NULL, n BIGINT)");
    let batch = |ids: ArrayRef, n: ArrayRef| {
        RecordBatch::try_from_iter(vec![("id", ids), ("n", n)]).unwrap()
    };
    let text = batch(
        Arc::new(Int64Array::from(vec![1])),
        Arc::new(StringArray::from(vec!["abc"])),
    );
    let err = e
        .block_on(e.insert_batches("mindsdb", "t", vec![text]))
        .unwrap_err();
    assert!(
        err.message().contains("Column 'n'") && err.message().contains("BIGINT"),
        "{err}"
    );
    let overflow = batch(
        Arc::new(Int64Array::from(vec![i64::MAX])),
        Arc::new(Int64Array::from(vec![1])),
    );
    let err = e
        .block_on(e.insert_batches("mindsdb", "t", vec![overflow]))
        .unwrap_err();
    assert!(err.message().contains("Column 'id'"), "{err}");
    let fits = batch(
        Arc::new(Int64Array::from(vec![7])),
        Arc::new(StringArray::from(vec!["42"])),
    );
    assert_eq!(
        e.block_on(e.insert_batches("mindsdb", "t", vec![fits]))
            .unwrap(),
        1
    );
    assert_eq!(rows(&e, "SELECT id, n FROM t"), json!([[7, 42]]));
}

#[test]
fn dml_shapes_that_are_not_supported_say_so() {
    let e = engine();
    exec(&e, "CREATE TABLE t (id INT)");
    exec(&e, "INSERT INTO t VALUES (1), (2)");
    assert!(error(
        &e,
        "UPDATE t SET id = 3 WHERE id IN (SELECT id FROM t) AND random() < 0.5"
    )
    .contains("volatile"));
    assert_eq!(rows(&e, "SELECT id FROM t ORDER BY id"), json!([[1], [2]]));
}

#[test]
fn wire_bodies_are_read_with_errors_naming_the_field() {
    use mindlite::WireFormat;
    let (request, format) = QueryRequest::from_wire_json(
        br#"{"query":"SELECT 1","context":{"db":"p","show_secrets":false},"params":{"a":null},"response_format":"sse"}"#,
    )
    .unwrap();
    assert_eq!(request.query, "SELECT 1");
    assert_eq!(request.context.db.as_deref(), Some("p"));
    assert_eq!(request.params["a"], Value::Null);
    assert_eq!(format, WireFormat::Sse);
    let cases: [(&[u8], &str); 8] = [
        (b"notjson", "not valid JSON"),
        (b"[1]", "JSON object"),
        (br#"{"q":"SELECT 1"}"#, "'query'"),
        (br#"{"query":1}"#, "'query' must be a string"),
        (br#"{"query":"SELECT 1","context":1}"#, "'context'"),
        (
            br#"{"query":"SELECT 1","context":{"db":2}}"#,
            "'context.db'",
        ),
        (br#"{"query":"SELECT 1","params":[1]}"#, "'params'"),
        (
            br#"{"query":"SELECT 1","response_format":"csv"}"#,
            "'response_format'",
        ),
    ];
    for (body, expected) in cases {
        let err = QueryRequest::from_wire_json(body).unwrap_err();
        assert_eq!(err.kind(), mindlite::ErrorKind::InvalidInput);
        assert!(err.message().contains(expected), "{expected}: {err}");
    }
}

#[test]
fn reused_sessions_start_fresh_for_every_request() {
    let e = engine();
    exec(&e, "CREATE PROJECT a");
    exec(&e, "CREATE PROJECT b");
    exec(&e, "CREATE TABLE a.t (x INT)");
    exec(&e, "INSERT INTO a.t VALUES (1)");
    exec(&e, "CREATE TABLE b.t (x INT)");
    exec(&e, "INSERT INTO b.t VALUES (2), (3)");
    // One-part names follow each request's database, whatever ran before on the same state.
    for _ in 0..3 {
        for (db, expected) in [("a", json!([[1]])), ("b", json!([[2], [3]]))] {
            let d = doc(&e, QueryRequest::new("SELECT x FROM t").with_db(db));
            assert_eq!(d["data"], expected, "{db}: {d}");
        }
    }
    // Each request reads the data committed before it, not a snapshot a state saw earlier.
    exec(&e, "INSERT INTO a.t VALUES (4)");
    assert_eq!(rows(&e, "SELECT count(*) FROM a.t"), json!([[2]]));
    exec(&e, "DROP TABLE b.t");
    assert!(error(&e, "SELECT * FROM b.t").contains("Table 't' not found"));
    // now() is the time of each request, not of the state's first use.
    let first = rows(&e, "SELECT CAST(now() AS VARCHAR)");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = rows(&e, "SELECT CAST(now() AS VARCHAR)");
    assert_ne!(first, second);
    // More concurrent requests than idle states: every one gets its own.
    let handles: Vec<_> = (0..24)
        .map(|i| {
            let e = e.clone();
            std::thread::spawn(move || {
                let db = if i % 2 == 0 { "a" } else { "mindsdb" };
                let d = doc(
                    &e,
                    QueryRequest::new(format!("SELECT {i} AS n")).with_db(db),
                );
                assert_eq!(d["data"], json!([[i]]), "{d}");
                assert_eq!(d["context"]["db"], db);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn requests_made_on_the_engines_own_runtime_run_in_place() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT)");
    exec(&e, "INSERT INTO t VALUES (1), (2), (3)");
    let on_runtime = e.clone();
    // A task spawned from block_on runs on the engine's worker threads, as the HTTP server's
    // connections do.
    let sums = e.block_on(async move {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let e = on_runtime.clone();
                tokio::spawn(async move {
                    let sum = e.sql("SELECT sum(a) AS s FROM t").await.unwrap();
                    let failed = e.sql("SELECT * FROM missing").await.unwrap_err();
                    (sum.num_rows(), failed.to_string())
                })
            })
            .collect();
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    });
    for (n, failed) in sums {
        assert_eq!(n, 1);
        assert!(failed.contains("Table 'missing' not found"), "{failed}");
    }
}

#[test]
fn repeated_queries_give_current_answers() {
    for entries in [256, 0] {
        let mut config = Config::default();
        config.query.plan_cache_entries = entries;
        config.query.target_partitions = 2;
        let e = Engine::open_in_memory(config).unwrap();
        exec(
            &e,
            "CREATE TABLE t AS SELECT value AS k, value % 7 AS g FROM generate_series(1, 200000)",
        );
        exec(&e, "CREATE TABLE u (g BIGINT, name VARCHAR)");
        exec(&e, "INSERT INTO u VALUES (0, 'zero'), (1, 'one')");
        // Aggregation over several chunks (repartitions), a join, a sort: run again and again.
        let queries = [
            ("SELECT g, count(*) AS n FROM t GROUP BY g ORDER BY g", json!([0, 28571])),
            ("SELECT u.name, count(*) FROM t JOIN u ON t.g = u.g GROUP BY u.name ORDER BY u.name", json!(["one", 28572])),
            ("SELECT k FROM t ORDER BY k DESC LIMIT 3", json!([200000])),
        ];
        for _ in 0..3 {
            for (sql, first) in &queries {
                assert_eq!(&rows(&e, sql)[0], first, "{sql}");
            }
        }
        // Several threads run the same kept plan at once.
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let e = e.clone();
                std::thread::spawn(move || {
                    let sum = rows(&e, "SELECT sum(k) FROM t WHERE g = 3");
                    // A scalar subquery's plan is never shared between runs.
                    let above = rows(
                        &e,
                        "SELECT count(*) FROM t WHERE k > (SELECT avg(k) FROM t)",
                    );
                    assert_eq!(above, json!([[100000]]));
                    sum
                })
            })
            .collect();
        let sums: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
        // Every kind of commit makes the next run see it.
        exec(&e, "INSERT INTO u VALUES (3, 'three')");
        assert_eq!(rows(&e, "SELECT count(*) FROM u"), json!([[3]]));
        exec(&e, "DELETE FROM u WHERE g = 3");
        assert_eq!(rows(&e, "SELECT count(*) FROM u"), json!([[2]]));
        let batch = e
            .sql_blocking("SELECT 5 AS g, 'five' AS name")
            .unwrap()
            .batches;
        e.block_on(e.insert_batches("mindsdb", "u", batch)).unwrap();
        assert_eq!(rows(&e, "SELECT count(*) FROM u"), json!([[3]]));
        exec(&e, "DROP TABLE u");
        assert!(error(&e, "SELECT count(*) FROM u").contains("Table 'u' not found"));
        // Parameters are part of what is kept.
        for x in [1, 2, 3] {
            let d = doc(
                &e,
                QueryRequest::new("SELECT :x * 10").with_param("x", json!(x)),
            );
            assert_eq!(d["data"], json!([[x * 10]]));
        }
    }
}

#[test]
fn load_creates_replaces_and_appends_in_one_transaction() {
    use mindlite::arrow::array::{Int64Array, LargeStringArray};
    use mindlite::arrow::record_batch::RecordBatch;
    use mindlite::LoadMode;
    use std::sync::Arc;
    let e = engine();
    let batch = RecordBatch::try_from_iter(vec![
        ("id", Arc::new(Int64Array::from(vec![1, 2])) as _),
        ("s", Arc::new(LargeStringArray::from(vec!["a", "b"])) as _),
    ])
    .unwrap();
    let schema = batch.schema();
    let load = |mode, batches: Vec<RecordBatch>| {
        e.block_on(e.load(None, "t", Arc::clone(&schema), batches, mode))
    };
    let missing = load(LoadMode::Append, vec![batch.clone()]).unwrap_err();
    assert_eq!(missing.kind(), mindlite::ErrorKind::NotFound, "{missing}");
    assert_eq!(load(LoadMode::Create, vec![batch.clone()]).unwrap(), 2);
    let taken = load(LoadMode::Create, vec![batch.clone()]).unwrap_err();
    assert_eq!(taken.kind(), mindlite::ErrorKind::Conflict, "{taken}");
    assert_eq!(load(LoadMode::Append, vec![batch.clone()]).unwrap(), 2);
    // Large strings are stored as plain ones.
    assert_eq!(
        rows(&e, "SELECT DATA_TYPE FROM information_schema.columns WHERE TABLE_NAME = 't' ORDER BY ORDINAL_POSITION"),
        json!([["BIGINT"], ["VARCHAR"]])
    );
    assert_eq!(rows(&e, "SELECT count(*) FROM t"), json!([[4]]));
    assert_eq!(load(LoadMode::Replace, vec![batch.slice(0, 1)]).unwrap(), 1);
    assert_eq!(rows(&e, "SELECT id, s FROM t"), json!([[1, "a"]]));
}

#[test]
fn typed_params_bind_as_typed_literals() {
    use mindlite::TypedParam;
    let e = engine();
    let request = QueryRequest::new("SELECT :d AS d, :t AS t, :n AS n, :b AS b")
        .with_typed_param("d", TypedParam::Date("2024-02-29".into()))
        .with_typed_param("t", TypedParam::Timestamp("2024-01-02 03:04:05.25".into()))
        .with_typed_param("n", TypedParam::Decimal("-12.50".into()))
        .with_typed_param("b", TypedParam::Bytes(vec![0, 255]));
    let got = e.block_on(e.query_blocking(request).collect()).unwrap();
    let types: Vec<String> = got.batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().to_string())
        .collect();
    assert_eq!(
        types,
        ["Date32", "Timestamp(µs)", "Decimal128(4, 2)", "Binary"]
    );
    for (param, text) in [
        (TypedParam::Date("2024-02-30".into()), "a date"),
        (TypedParam::Timestamp("yesterday".into()), "a timestamp"),
        (TypedParam::Decimal("1e5".into()), "plain notation"),
        (TypedParam::Decimal("1".repeat(39)), "38"),
    ] {
        let request = QueryRequest::new("SELECT :p").with_typed_param("p", param);
        match e.query_blocking(request).outcome {
            Outcome::Error(err) => assert!(err.message().contains(text), "{err}"),
            _ => panic!("{text}: accepted"),
        }
    }
}

#[test]
fn value_errors_and_constraint_violations_have_their_own_kinds() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT NOT NULL)");
    let kind = |sql: &str| {
        e.block_on(e.query_blocking(QueryRequest::new(sql)).collect())
            .unwrap_err()
            .kind()
    };
    assert_eq!(
        kind("SELECT CAST('x' AS INT)"),
        mindlite::ErrorKind::InvalidData
    );
    assert_eq!(
        kind("SELECT CAST(300 AS TINYINT)"),
        mindlite::ErrorKind::InvalidData
    );
    assert_eq!(
        kind("INSERT INTO t VALUES (NULL)"),
        mindlite::ErrorKind::ConstraintViolation
    );
    assert_eq!(
        kind("SELECT nosuch FROM t"),
        mindlite::ErrorKind::InvalidInput
    );
}

#[test]
fn close_releases_the_file_at_once_after_a_dropped_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let e = Engine::open(&path, Config::default()).unwrap();
    exec(
        &e,
        "CREATE TABLE t AS SELECT value AS v FROM generate_series(1, 200000)",
    );
    let result = e.query_blocking(QueryRequest::new("SELECT sum(v) FROM t, t AS u"));
    drop(result);
    e.close();
    let again = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows(&again, "SELECT count(*) FROM t"), json!([[200000]]));
}

/// The kind of error a statement that must fail gives.
fn error_kind(engine: &Engine, sql: &str) -> (mindlite::ErrorKind, String) {
    let e = engine
        .sql_blocking(sql)
        .err()
        .unwrap_or_else(|| panic!("{sql} succeeded"));
    (e.kind(), e.message().to_string())
}

#[test]
fn primary_key_unique_check_and_not_null_are_enforced_all_rows_or_none() {
    use mindlite::ErrorKind::ConstraintViolation;
    let e = engine();
    exec(
        &e,
        "CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT UNIQUE, n INT CHECK (n >= 0), \
         m INT NOT NULL DEFAULT 7, CHECK (n < m + 100))",
    );
    exec(
        &e,
        "INSERT INTO t (id, code, n) VALUES (1, 'a', 1), (2, NULL, 2), (3, NULL, 3)",
    );
    let (kind, message) = error_kind(
        &e,
        "INSERT INTO t (id, code, n) VALUES (4, 'x', 1), (1, 'y', 1)",
    );
    assert_eq!(kind, ConstraintViolation);
    assert!(
        message.contains("PRIMARY KEY") && message.contains("(1)"),
        "{message}"
    );
    let (kind, message) = error_kind(&e, "INSERT INTO t (id, code, n) VALUES (5, 'a', 1)");
    assert_eq!(kind, ConstraintViolation);
    assert!(
        message.contains("UNIQUE") && message.contains("code"),
        "{message}"
    );
    let (kind, message) = error_kind(&e, "INSERT INTO t (id, code, n) VALUES (6, 'b', -1)");
    assert_eq!(kind, ConstraintViolation);
    assert!(message.contains("CHECK (n >= 0)"), "{message}");
    assert_eq!(
        error_kind(&e, "INSERT INTO t (id, n, m) VALUES (6, 200, 1)").0,
        ConstraintViolation
    );
    assert_eq!(
        error_kind(&e, "INSERT INTO t (id, n) VALUES (NULL, 1)").0,
        ConstraintViolation
    );
    // Updates are checked too, and a failed one changes nothing.
    assert_eq!(
        error_kind(&e, "UPDATE t SET id = 1 WHERE id = 2").0,
        ConstraintViolation
    );
    assert_eq!(
        error_kind(&e, "UPDATE t SET n = -5 WHERE id = 3").0,
        ConstraintViolation
    );
    assert_eq!(
        rows(&e, "SELECT id, code, n, m FROM t ORDER BY id"),
        json!([[1, "a", 1, 7], [2, null, 2, 7], [3, null, 3, 7]])
    );
    // A NULL check result passes, as in SQL.
    exec(&e, "INSERT INTO t (id, n) VALUES (9, NULL)");
    // The primary key makes the other columns functionally dependent for GROUP BY.
    assert_eq!(
        rows(
            &e,
            "SELECT id, m, count(*) FROM t GROUP BY id ORDER BY id LIMIT 1"
        ),
        json!([[1, 7, 1]])
    );
}

#[test]
fn composite_keys_defaults_and_constraints_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.redb");
    {
        let e = Engine::open(&path, Config::default()).unwrap();
        e.sql_blocking(
            "CREATE TABLE pairs (a INT, b INT, note TEXT DEFAULT 'none', \
             created TIMESTAMP DEFAULT now(), PRIMARY KEY (a, b))",
        )
        .unwrap();
        e.sql_blocking("INSERT INTO pairs (a, b) VALUES (1, 1), (1, 2)")
            .unwrap();
    }
    let e = Engine::open(&path, Config::default()).unwrap();
    assert!(error(&e, "INSERT INTO pairs (a, b) VALUES (1, 2)").contains("(1, 2)"));
    exec(&e, "INSERT INTO pairs (a, b, note) VALUES (2, 1, 'x')");
    assert_eq!(
        rows(
            &e,
            "SELECT a, b, note, created IS NOT NULL FROM pairs ORDER BY a, b"
        ),
        json!([
            [1, 1, "none", true],
            [1, 2, "none", true],
            [2, 1, "x", true]
        ])
    );
    assert!(error(&e, "CREATE TABLE bad (a INT, PRIMARY KEY (nope))").contains("nope"));
    assert!(error(&e, "CREATE TABLE bad (a INT CHECK (nope > 1))").contains("nope"));
}

#[test]
fn conflicts_are_resolved_as_sqlite_and_duckdb_resolve_them() {
    let e = engine();
    exec(&e, "CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT UNIQUE)");
    exec(&e, "INSERT INTO kv VALUES (1, 'a'), (2, 'b')");
    assert_eq!(
        exec(&e, "INSERT OR REPLACE INTO kv VALUES (2, 'c')"),
        json!(1)
    );
    // A row conflicting on any key replaces the rows it conflicts with.
    exec(&e, "REPLACE INTO kv VALUES (3, 'a')");
    assert_eq!(
        rows(&e, "SELECT * FROM kv ORDER BY k"),
        json!([[2, "c"], [3, "a"]])
    );
    assert_eq!(
        exec(
            &e,
            "INSERT INTO kv VALUES (2, 'z'), (5, 'e'), (5, 'f') ON CONFLICT DO NOTHING"
        ),
        json!(1)
    );
    assert_eq!(
        exec(&e, "INSERT OR IGNORE INTO kv VALUES (6, 'c')"),
        json!(0)
    );
    assert_eq!(
        rows(&e, "SELECT * FROM kv ORDER BY k"),
        json!([[2, "c"], [3, "a"], [5, "e"]])
    );
    // Two new rows with one key cannot both replace (DuckDB refuses this too).
    assert!(error(&e, "INSERT OR REPLACE INTO kv VALUES (7, 'q'), (7, 'r')").contains("(7)"));
    // An upsert: the stored row is updated from the new one (`excluded`); others inserted.
    assert_eq!(
        exec(
            &e,
            "INSERT INTO kv VALUES (2, 'two'), (8, 'h') ON CONFLICT (k) DO UPDATE SET v = excluded.v || '!'"
        ),
        json!(2)
    );
    // WHERE limits the update; a row it refuses is neither updated nor inserted.
    exec(
        &e,
        "INSERT INTO kv VALUES (3, 'no') ON CONFLICT (k) DO UPDATE SET v = 'yes' WHERE v = 'zzz'",
    );
    exec(
        &e,
        "INSERT INTO kv VALUES (5, 'x') ON CONFLICT (k) DO UPDATE SET v = kv.v || v || excluded.v",
    );
    assert_eq!(
        rows(&e, "SELECT * FROM kv ORDER BY k"),
        json!([[2, "two!"], [3, "a"], [5, "eex"], [8, "h"]])
    );
    assert!(error(
        &e,
        "INSERT INTO kv VALUES (9, 'p'), (9, 'q') ON CONFLICT (k) DO UPDATE SET v = 'r'"
    )
    .contains("twice"));
    assert!(error(
        &e,
        "INSERT INTO kv VALUES (9, 'p') ON CONFLICT (nope) DO UPDATE SET v = 'r'"
    )
    .contains("no PRIMARY KEY or UNIQUE key"));
    // An update that would make two rows share a key fails and changes nothing.
    assert!(error(
        &e,
        "INSERT INTO kv VALUES (8, 'x') ON CONFLICT (k) DO UPDATE SET v = 'a'"
    )
    .contains("UNIQUE"));
    assert_eq!(rows(&e, "SELECT v FROM kv WHERE k = 8"), json!([["h"]]));
    // Without keys nothing conflicts.
    exec(&e, "CREATE TABLE plain (k INT)");
    exec(&e, "INSERT OR REPLACE INTO plain VALUES (1), (1)");
    assert_eq!(rows(&e, "SELECT count(*) FROM plain"), json!([[2]]));
}

#[test]
fn indexes_are_named_in_the_project_and_unique_ones_enforced() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT, b INT)");
    exec(&e, "INSERT INTO t VALUES (1, 1), (2, 1)");
    exec(&e, "CREATE INDEX ta ON t (a)");
    exec(&e, "CREATE INDEX IF NOT EXISTS ta ON t (b)");
    assert!(error(&e, "CREATE INDEX ta ON t (b)").contains("already exists"));
    assert!(error(&e, "CREATE UNIQUE INDEX tb ON t (b)").contains("Duplicate key (1)"));
    assert!(error(&e, "CREATE INDEX tc ON t (nope)").contains("nope"));
    exec(&e, "CREATE UNIQUE INDEX tu ON t (a, b)");
    assert!(error(&e, "INSERT INTO t VALUES (1, 1)").contains("UNIQUE INDEX tu"));
    exec(&e, "DROP INDEX tu");
    exec(&e, "INSERT INTO t VALUES (1, 1)");
    assert!(error(&e, "DROP INDEX tu").contains("not found"));
    exec(&e, "DROP INDEX IF EXISTS tu");
    // An index goes with its table.
    exec(&e, "DROP TABLE t");
    exec(&e, "CREATE TABLE t (a INT)");
    exec(&e, "CREATE INDEX ta ON t (a)");
}

#[test]
fn views_are_stored_queries_that_read_current_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.redb");
    {
        let e = Engine::open(&path, Config::default()).unwrap();
        e.sql_blocking("CREATE TABLE t1 (x INT, y TEXT)").unwrap();
        e.sql_blocking("INSERT INTO t1 VALUES (1, 'a'), (0, 'b'), (NULL, 'c')")
            .unwrap();
        e.sql_blocking("CREATE VIEW pos AS SELECT x, y FROM t1 WHERE x > 0")
            .unwrap();
        // MindsDB's spelling, with names for the columns.
        e.sql_blocking("CREATE VIEW mindsdb.named (n, label) AS (SELECT x, y FROM t1)")
            .unwrap();
    }
    let e = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(rows(&e, "SELECT * FROM pos"), json!([[1, "a"]]));
    exec(&e, "INSERT INTO t1 VALUES (5, 'e')");
    assert_eq!(
        rows(&e, "SELECT y FROM pos ORDER BY x"),
        json!([["a"], ["e"]])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT n, label FROM named JOIN pos ON named.n = pos.x ORDER BY n"
        ),
        json!([[1, "a"], [5, "e"]])
    );
    assert_eq!(
        rows(&e, "SHOW FULL TABLES"),
        json!([
            ["models", "BASE TABLE"],
            ["named", "VIEW"],
            ["pos", "VIEW"],
            ["t1", "BASE TABLE"]
        ])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT table_name, table_type FROM information_schema.tables \
             WHERE table_schema = 'mindsdb' ORDER BY table_name"
        ),
        json!([["named", "VIEW"], ["pos", "VIEW"], ["t1", "BASE TABLE"]])
    );
    assert!(error(&e, "CREATE VIEW pos AS SELECT 1").contains("already exists"));
    exec(&e, "CREATE VIEW IF NOT EXISTS pos AS SELECT 1");
    assert!(error(&e, "CREATE VIEW t1 AS SELECT 1").contains("already exists"));
    assert!(error(&e, "CREATE TABLE pos (a INT)").contains("already exists"));
    assert!(error(&e, "CREATE VIEW bad AS SELECT * FROM nope").contains("nope"));
    assert!(error(&e, "CREATE VIEW bad (a, b) AS SELECT 1").contains("2 columns"));
    // A view that would read itself, directly or through another, is refused.
    exec(&e, "CREATE VIEW outer_v AS SELECT * FROM pos");
    assert!(error(&e, "CREATE OR REPLACE VIEW pos AS SELECT * FROM outer_v").contains("itself"));
    exec(
        &e,
        "CREATE OR REPLACE VIEW pos AS SELECT x, y FROM t1 WHERE x = 0",
    );
    assert_eq!(rows(&e, "SELECT y FROM outer_v"), json!([["b"]]));
    assert!(error(&e, "INSERT INTO pos VALUES (1, 'z')").contains("read-only"));
    exec(&e, "DROP VIEW outer_v, pos");
    assert!(error(&e, "DROP VIEW pos").contains("not found"));
    exec(&e, "DROP VIEW IF EXISTS pos");
    // A view whose table went says so when read.
    exec(&e, "DROP TABLE t1");
    assert!(error(&e, "SELECT * FROM named").contains("View 'named'"));
    // Views go with their project.
    exec(&e, "CREATE PROJECT p");
    exec(&e, "CREATE VIEW p.one AS SELECT 1 AS a");
    exec(&e, "DROP PROJECT p");
    exec(&e, "CREATE PROJECT p");
    assert!(error(&e, "SELECT * FROM p.one").contains("not found"));
}

#[test]
fn correlated_subqueries_with_any_comparison_are_unnested() {
    let e = engine();
    exec(&e, "CREATE TABLE t1 (a INT, b INT, c INT, d INT)");
    exec(
        &e,
        "INSERT INTO t1 VALUES (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12), (NULL, 1, NULL, 0)",
    );
    assert_eq!(
        rows(
            &e,
            "SELECT a, (SELECT count(*) FROM t1 AS x WHERE x.c > t1.c AND x.d < t1.d + 5), \
             (SELECT sum(x.a) FROM t1 AS x WHERE x.b < t1.b) FROM t1 ORDER BY a"
        ),
        json!([[1, 1, null], [5, 1, 1], [9, 0, 6], [null, 0, null]])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT a, EXISTS (SELECT 1 FROM t1 AS x WHERE x.b < t1.b), \
             NOT EXISTS (SELECT 1 FROM t1 AS x WHERE x.b < t1.b) FROM t1 ORDER BY a"
        ),
        json!([
            [1, true, false],
            [5, true, false],
            [9, true, false],
            [null, false, true]
        ])
    );
    // IN keeps SQL's three values: NULL when not found and a NULL was among the candidates.
    assert_eq!(
        rows(
            &e,
            "SELECT a, a IN (SELECT c FROM t1), 1 IN (SELECT a FROM t1), \
             2 NOT IN (SELECT b FROM t1 AS x WHERE x.a > t1.a), \
             a NOT IN (SELECT a FROM t1 WHERE a > 4) FROM t1 ORDER BY a"
        ),
        json!([
            [1, null, true, true, true],
            [5, null, true, true, false],
            [9, null, true, true, false],
            [null, null, true, true, null]
        ])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT a FROM t1 WHERE a > 1 OR EXISTS (SELECT 1 FROM t1 AS x WHERE x.b < t1.b) \
             ORDER BY a"
        ),
        json!([[1], [5], [9]])
    );
    assert_eq!(
        rows(
            &e,
            "SELECT a FROM t1 WHERE (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) > 1 ORDER BY a"
        ),
        json!([[5], [9]])
    );
}

#[test]
fn sqlite_and_duckdb_habits_work() {
    let e = engine();
    exec(&e, "CREATE TABLE t (a INT, s TEXT)");
    exec(&e, "INSERT INTO t VALUES (4, 'x')");
    // Duplicate result names are kept as written.
    assert_eq!(
        columns(
            &e,
            "SELECT 38 AS c, -a AS c, a, a, count(*), COUNT(*) FROM t GROUP BY a"
        ),
        json!(["c", "c", "a", "a", "count(*)", "COUNT(*)"])
    );
    assert_eq!(
        rows(&e, "SELECT 38 AS c, -a AS c, a, a FROM t"),
        json!([[38, -4, 4, 4]])
    );
    // Division and remainder by zero are NULL; unary plus is the value itself.
    assert_eq!(
        rows(
            &e,
            "SELECT 1 / 0, a % 0, a / (a - a), 7 / 2, +s, +NULL FROM t"
        ),
        json!([[null, null, null, 3, "x", null]])
    );
    // An empty IN list: false, and NOT IN true, whatever the left side.
    assert_eq!(
        rows(
            &e,
            "SELECT 1 IN (), NULL IN (), a NOT IN (), NULL NOT IN () FROM t"
        ),
        json!([[false, false, true, true]])
    );
}

#[test]
fn mindsdb_dialect_escapes_files_and_native_queries_in_projects() {
    let e = engine();
    // Unknown backslash escapes are kept (a regex stays a regex); MySQL's known ones apply.
    assert_eq!(
        rows(
            &e,
            r"SELECT '\d+', 'it\'s', 'a\\b', 'tab\there', 'x''y', regexp_like('a12', '^a\d+$')"
        ),
        json!([[r"\d+", "it's", r"a\b", "tab\there", "x'y", true]])
    );
    // The files database is written as MindsDB writes it.
    exec(
        &e,
        "CREATE TABLE files.made (SELECT 1 AS id, 'Oslo' AS city)",
    );
    exec(&e, "INSERT INTO files.made (id, city) VALUES (2, 'Paris')");
    assert_eq!(
        rows(&e, "SELECT id, city FROM files.made ORDER BY id"),
        json!([[1, "Oslo"], [2, "Paris"]])
    );
    // A native query on a project runs there (mindsdb_sdk moves queries between databases so).
    exec(
        &e,
        "CREATE TABLE files.copy (SELECT * FROM mindsdb (SELECT 3 AS n))",
    );
    assert_eq!(rows(&e, "SELECT n FROM files.copy"), json!([[3]]));
    exec(&e, "DROP TABLE files.made");
    assert!(error(&e, "SELECT * FROM files.made").contains("not found"));
    // MindsDB's CREATE VIEW … FROM db AS (query).
    exec(&e, "CREATE TABLE t1 (x INT)");
    exec(&e, "INSERT INTO t1 VALUES (1), (5)");
    exec(
        &e,
        "CREATE VIEW big FROM mindsdb AS (SELECT x FROM t1 WHERE x > 2)",
    );
    assert_eq!(rows(&e, "SELECT x FROM big"), json!([[5]]));
    // … and without AS, as MindsDB's parser also takes it.
    exec(
        &e,
        "CREATE OR REPLACE VIEW small FROM mindsdb (SELECT x FROM t1 WHERE x < 2)",
    );
    assert_eq!(rows(&e, "SELECT x FROM small"), json!([[1]]));
}

/// What a MySQL client sends on connect, answered as MindsDB answers it: the server variables
/// (`SHOW VARIABLES`, `SELECT @@…`), character sets and collations, each SHOW filtered by LIKE
/// (ignoring case, as MySQL does) or WHERE; and session settings, accepted.
#[test]
fn mysql_client_statements_are_answered_as_mindsdb_answers_them() {
    let engine = engine();
    let all = rows(&engine, "SHOW VARIABLES");
    assert_eq!(all.as_array().unwrap().len(), 29);
    assert_eq!(all[0], json!(["auto_increment_increment", "1"]));
    assert_eq!(rows(&engine, "SHOW GLOBAL VARIABLES"), all);
    assert_eq!(
        columns(&engine, "SHOW VARIABLES"),
        json!(["Variable_name", "Value"])
    );
    assert_eq!(
        rows(&engine, "SHOW SESSION VARIABLES"),
        json!([
            ["auto_increment_increment", "1"],
            ["tx_isolation", "REPEATABLE-READ"],
            ["tx_read_only", "0"]
        ])
    );
    assert_eq!(
        rows(&engine, "SHOW SESSION STATUS"),
        rows(&engine, "SHOW SESSION VARIABLES")
    );
    assert_eq!(rows(&engine, "SHOW STATUS"), json!([]));
    assert_eq!(
        rows(&engine, "SHOW VARIABLES LIKE 'VERSION%'"),
        json!([["version_comment", "(MindsDB)"], ["version", "8.0.17"]])
    );
    assert_eq!(
        rows(
            &engine,
            "SHOW VARIABLES WHERE Variable_name IN ('lower_case_table_names', 'time_zone')"
        ),
        json!([["lower_case_table_names", "0"], ["time_zone", "SYSTEM"]])
    );
    assert_eq!(rows(&engine, "SHOW VARIABLES LIKE 'no_such_%'"), json!([]));
    assert_eq!(
        rows(
            &engine,
            "SELECT @@version, @@VERSION_COMMENT, @@session.auto_increment_increment"
        ),
        json!([["8.0.17", "(MindsDB)", 1]])
    );
    assert!(error(&engine, "SELECT @@no_such_variable").contains("no_such_variable"));
    assert_eq!(
        rows(
            &engine,
            "SELECT VERSION(), DATABASE(), SCHEMA(), CONNECTION_ID()"
        ),
        json!([["8.0.17", "mindsdb", "mindsdb", null]])
    );
    exec(&engine, "CREATE PROJECT elsewhere");
    let other = doc(
        &engine,
        QueryRequest::new("SELECT database()").with_db("elsewhere"),
    );
    assert_eq!(other["data"], json!([["elsewhere"]]), "{other}");
    assert_eq!(
        columns(&engine, "SHOW CHARSET"),
        json!(["Charset", "Description", "Default collation", "Maxlen"])
    );
    assert_eq!(
        rows(&engine, "SHOW CHARACTER SET WHERE maxlen > 3"),
        json!([["utf8mb4", "UTF-8 Unicode", "utf8mb4_general_ci", 4]])
    );
    assert_eq!(
        rows(&engine, "SHOW COLLATION LIKE 'latin1%'"),
        json!([[
            "latin1_swedish_ci",
            "latin1",
            8,
            "Yes",
            "Yes",
            1,
            "PAD SPACE"
        ]])
    );
    for setting in [
        "SET NAMES utf8mb4",
        "SET NAMES utf8 COLLATE utf8_general_ci",
        "SET autocommit = 1",
        "SET SESSION sql_mode = 'ANSI'",
        "SET @@session.autocommit = 0",
        "SET character_set_results = NULL",
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
    ] {
        assert_eq!(exec(&engine, setting), Value::Null, "{setting}");
    }
    assert_eq!(
        rows(&engine, "SHOW ENGINES"),
        json!([[
            "InnoDB",
            "DEFAULT",
            "Supports transactions, row-level locking, and foreign keys",
            "YES",
            "YES",
            "YES"
        ]])
    );
    assert_eq!(
        rows(&engine, "SHOW STORAGE ENGINES LIKE 'MyISAM'"),
        json!([])
    );
    assert_eq!(
        columns(&engine, "SHOW WARNINGS"),
        json!(["Level", "Code", "Message"])
    );
    assert_eq!(rows(&engine, "SHOW ERRORS"), json!([]));
    let status = columns(&engine, "SHOW FUNCTION STATUS");
    assert_eq!(status[1], "Name");
    assert_eq!(status.as_array().unwrap().len(), 11);
    assert_eq!(rows(&engine, "SHOW PROCEDURE STATUS LIKE '%'"), json!([]));
    assert!(error(&engine, "SHOW WARNINGS LIMIT 10").contains("LIKE 'pattern'"));
    assert!(error(&engine, "SHOW ENGINES WHERE engine = 'x'").contains("LIKE 'pattern'"));
    // Settings are kept nowhere: the variables are MindsDB's constants.
    assert_eq!(
        rows(&engine, "SHOW VARIABLES LIKE 'character_set_results'"),
        json!([["character_set_results", "utf8"]])
    );
}
