//! PostgreSQL datasources against a real server: `scripts/postgres.sh` starts one on
//! 127.0.0.1 and the test command passes its URL in `PGTEST_URL` and its statement log in
//! `PGTEST_LOG`. What was pushed down is read from that log, not assumed. Each test
//! works in tables of its own name, so the tests can run at once.

use std::time::{Duration, Instant};

use mindlite::{encode_document, Config, Engine, QueryContext, QueryRequest};
use serde_json::{json, Value};

/// The server's URL and log, or `None` (with a note) when no server was started for this run.
pub(crate) fn server() -> Option<(tokio_postgres::Config, String)> {
    let Ok(url) = std::env::var("PGTEST_URL") else {
        // The test command always starts one; so must CI.
        assert!(
            std::env::var("CI").is_err(),
            "PGTEST_URL is not set: run scripts/test.sh, which starts PostgreSQL"
        );
        eprintln!("SKIPPED: PGTEST_URL is not set (scripts/postgres.sh start DIR PORT)");
        return None;
    };
    let log = std::env::var("PGTEST_LOG").expect("PGTEST_LOG goes with PGTEST_URL");
    Some((url.parse().expect("PGTEST_URL is a postgresql:// URL"), log))
}

/// Runs statements on the server directly, to set up and to check what mindlite wrote.
pub(crate) fn admin(config: &tokio_postgres::Config, sql: &str) -> Vec<Vec<Option<String>>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let mut out = Vec::new();
        for message in client.simple_query(sql).await.unwrap() {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                out.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                );
            }
        }
        out
    })
}

/// `PARAMETERS = {…}` for the test server.
pub(crate) fn parameters(config: &tokio_postgres::Config) -> Value {
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => panic!("PGTEST_URL must name a TCP host"),
    };
    json!({
        "host": host,
        "port": config.get_ports()[0],
        "database": config.get_dbname().unwrap(),
        "user": config.get_user().unwrap(),
        "password": "s3cret-pw",
    })
}

fn doc_with(engine: &Engine, request: QueryRequest) -> Value {
    let result = engine.query_blocking(request);
    let body = engine.block_on(encode_document(result));
    serde_json::from_slice(&body).unwrap()
}

pub(crate) fn doc(engine: &Engine, sql: &str) -> Value {
    doc_with(engine, QueryRequest::new(sql))
}

pub(crate) fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

pub(crate) fn ok(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "ok", "{sql}: {d}");
    d
}

pub(crate) fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

/// The statements the server logged that mention `needle`.
pub(crate) fn logged(log: &str, needle: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle) && (l.contains("statement: ") || l.contains("execute ")))
        .map(str::to_string)
        .collect()
}

/// An engine with the datasource `pg` on the test server.
pub(crate) fn engine_with_pg(config: &tokio_postgres::Config) -> Engine {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    ok(
        &engine,
        &format!(
            "CREATE DATABASE pg WITH ENGINE = 'postgres', PARAMETERS = {}",
            parameters(config)
        ),
    );
    engine
}

#[test]
fn filters_projections_and_limits_reach_postgres() {
    let Some((config, log)) = server() else {
        return;
    };
    admin(
        &config,
        "DROP TABLE IF EXISTS pd_items; \
         CREATE TABLE pd_items (id int8 PRIMARY KEY, name text, price numeric(10,2), qty int4, note varchar(20)); \
         INSERT INTO pd_items SELECT i, 'item ' || i, i * 1.5, i % 7, NULL FROM generate_series(1, 2000) i;",
    );
    let engine = engine_with_pg(&config);
    assert_eq!(
        rows(
            &engine,
            "SELECT id, name, price FROM pg.pd_items WHERE id > 1990 AND qty = 3 ORDER BY id LIMIT 10"
        ),
        json!([[1991, "item 1991", 2986.5], [1998, "item 1998", 2997.0]])
    );
    // The filter, the projection, the ORDER BY and its LIMIT all go to the server.
    let sent = logged(&log, "pd_items");
    let select = sent
        .iter()
        .rev()
        .find(|l| l.contains("ORDER BY"))
        .unwrap_or_else(|| panic!("no ORDER BY in {sent:#?}"));
    assert!(
        select.contains("WHERE (\"t1\".\"id\" > CAST(1990 AS BIGINT)) AND (\"t1\".\"qty\" = 3)")
            && select.contains("ORDER BY \"t2\".\"c0\" ASC NULLS LAST LIMIT 10"),
        "{select}"
    );

    // Without ordering, the limit goes to the server too.
    let got = rows(
        &engine,
        "SELECT name FROM pg.pd_items WHERE name = 'item 7' LIMIT 1",
    );
    assert_eq!(got, json!([["item 7"]]));
    // The text is a bound value, not part of the statement.
    let last = logged(&log, "pd_items").pop().unwrap();
    assert!(
        last.contains("WHERE (\"t1\".\"name\" = CAST($1 AS VARCHAR))") && last.contains("LIMIT 1"),
        "{last}"
    );
    assert!(!last.contains("item 7"), "{last}");

    // Text is ordered by its bytes, as here, whatever the database's collation.
    let got = rows(
        &engine,
        "SELECT count(*) FROM pg.pd_items WHERE name < 'item 2' AND id <= 20",
    );
    assert_eq!(got, json!([[11]]));
    let last = logged(&log, "pd_items").pop().unwrap();
    assert!(
        last.contains("((\"t1\".\"name\") COLLATE \"C\" < (CAST($1 AS VARCHAR)) COLLATE \"C\")"),
        "{last}"
    );

    // count(*) is counted by the server: one row comes back.
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM pg.pd_items"),
        json!([[2000]])
    );
    let last = logged(&log, "pd_items").pop().unwrap();
    assert!(
        last.contains("count(CAST(1 AS BIGINT))") && last.contains("FROM \"public\".\"pd_items\""),
        "{last}"
    );

    // A join of a stored table with a remote one.
    ok(&engine, "CREATE TABLE wanted (id BIGINT, why VARCHAR)");
    ok(&engine, "INSERT INTO wanted VALUES (5, 'five'), (6, 'six')");
    assert_eq!(
        rows(
            &engine,
            "SELECT w.why, p.name FROM wanted w JOIN pg.pd_items p ON p.id = w.id ORDER BY w.id"
        ),
        json!([["five", "item 5"], ["six", "item 6"]])
    );
}

#[test]
fn pushdown_can_be_turned_off_for_comparison() {
    let Some((config, log)) = server() else {
        return;
    };
    admin(
        &config,
        "DROP TABLE IF EXISTS off_items; CREATE TABLE off_items AS SELECT i AS id FROM generate_series(1, 100) i;",
    );
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let mut params = parameters(&config);
    params["push_down"] = json!(false);
    ok(
        &engine,
        &format!("CREATE DATABASE pg ENGINE = 'postgres', PARAMETERS = {params}"),
    );
    assert_eq!(
        rows(&engine, "SELECT id FROM pg.off_items WHERE id > 98 LIMIT 5"),
        json!([[99], [100]])
    );
    let last = logged(&log, "off_items").pop().unwrap();
    assert!(
        last.ends_with("SELECT \"id\" FROM \"public\".\"off_items\""),
        "{last}"
    );
}

#[test]
fn remote_types_read_as_arrow_types() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS ty_values; \
         CREATE TABLE ty_values (b bool, s int2, i int4, l int8, r real, d double precision, \
           n numeric, p numeric(12,3), t text, c char(3), day date, at timestamp, atz timestamptz, \
           j jsonb, u uuid, bin bytea, span interval); \
         INSERT INTO ty_values VALUES (true, -2, 40000, 5000000000, 1.5, -2.25, 12345.678, -0.05, \
           'it''s', 'ab', '2024-02-29', '2024-02-29 13:14:15.5', '2024-02-29 13:14:15+02', \
           '{\"a\": [1, 2]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x0102', '1 day 2 hours'); \
         INSERT INTO ty_values VALUES (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
           NULL, NULL, NULL, NULL, NULL, NULL, NULL);",
    );
    let engine = engine_with_pg(&config);
    let got = rows(
        &engine,
        "SELECT b, s, i, l, r, d, n, p, t, c, day, at, atz, j, u, span FROM pg.ty_values ORDER BY b",
    );
    assert_eq!(
        got[0],
        json!([
            true,
            -2,
            40000,
            5000000000i64,
            1.5,
            -2.25,
            12345.678,
            -0.05,
            "it's",
            "ab ",
            "2024-02-29",
            "2024-02-29 13:14:15.500000",
            "2024-02-29 11:14:15.000000",
            "{\"a\": [1, 2]}",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "1 day 02:00:00"
        ]),
        "{got}"
    );
    assert!(
        got[1].as_array().unwrap().iter().all(Value::is_null),
        "{got}"
    );
    let types = rows(
        &engine,
        "SELECT arrow_typeof(p), arrow_typeof(n), arrow_typeof(atz), arrow_typeof(bin) FROM pg.ty_values LIMIT 1",
    );
    assert_eq!(
        types,
        json!([[
            "Decimal128(12, 3)",
            "Float64",
            "Timestamp(µs, \"UTC\")",
            "Binary"
        ]])
    );
}

#[test]
fn native_queries_run_as_written() {
    let Some((config, log)) = server() else {
        return;
    };
    admin(
        &config,
        "DROP TABLE IF EXISTS nq_items; CREATE TABLE nq_items AS SELECT i AS id, 'n' || i AS name FROM generate_series(1, 10) i;",
    );
    let engine = engine_with_pg(&config);
    // PostgreSQL's own syntax (::, ILIKE) that DataFusion would not take.
    let got = rows(
        &engine,
        "SELECT * FROM pg (SELECT id::text AS id_text, name FROM nq_items WHERE name ILIKE 'N1%' ORDER BY id)",
    );
    assert_eq!(got, json!([["1", "n1"], ["10", "n10"]]));
    assert!(
        logged(&log, "nq_items").iter().any(|l| l.contains(
            "SELECT id::text AS id_text, name FROM nq_items WHERE name ILIKE 'N1%' ORDER BY id"
        )),
        "{:#?}",
        logged(&log, "nq_items")
    );
    // Joined and filtered locally, with an alias.
    let got = rows(
        &engine,
        "SELECT q.name FROM pg (SELECT * FROM nq_items) AS q WHERE q.id > 8 ORDER BY q.id",
    );
    assert_eq!(got, json!([["n9"], ["n10"]]));
    let message = error(&engine, "SELECT * FROM pg (SELECT * FROM nq_missing)");
    assert!(
        message.contains("nq_missing") && message.contains("does not exist"),
        "{message}"
    );
    // On a project, a native query runs there (as mindsdb_sdk sends queries it moves).
    assert_eq!(
        rows(&engine, "SELECT * FROM mindsdb (SELECT 1)"),
        serde_json::json!([[1]])
    );
    let message = error(
        &engine,
        "SELECT * FROM pg (SELECT '1 day'::interval AS span)",
    );
    assert!(
        message.contains("'span'") && message.contains("interval"),
        "{message}"
    );
}

#[test]
fn the_catalog_shows_datasources_with_secrets_masked() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS cat_one; CREATE TABLE cat_one (x int);",
    );
    let engine = engine_with_pg(&config);
    let got = rows(
        &engine,
        "SELECT name, type, engine, connection_data FROM information_schema.databases WHERE name = 'pg'",
    );
    let shown: Value = serde_json::from_str(got[0][3].as_str().unwrap()).unwrap();
    assert_eq!(
        (got[0][1].clone(), got[0][2].clone()),
        (json!("data"), json!("postgres"))
    );
    assert_eq!(shown["password"], "******");
    assert_eq!(shown["port"], parameters(&config)["port"]);
    let mut request = QueryRequest::new(
        "SELECT connection_data FROM information_schema.databases WHERE name = 'pg'",
    );
    request.context = QueryContext {
        db: None,
        show_secrets: true,
    };
    let d = doc_with(&engine, request);
    assert!(
        d["data"][0][0].as_str().unwrap().contains("s3cret-pw"),
        "{d}"
    );
    assert_eq!(d["context"]["show_secrets"], true);

    let tables = rows(&engine, "SHOW TABLES FROM pg");
    assert!(
        tables.as_array().unwrap().contains(&json!(["cat_one"])),
        "{tables}"
    );
    let full = rows(&engine, "SHOW FULL DATABASES");
    assert!(
        full.as_array()
            .unwrap()
            .contains(&json!(["pg", "data", "postgres"])),
        "{full}"
    );

    // A project cannot take the name, nor a second datasource.
    assert!(error(&engine, "CREATE PROJECT pg").contains("already exists"));
    let again = format!(
        "CREATE DATABASE pg ENGINE = 'postgres', PARAMETERS = {}",
        parameters(&config)
    );
    assert!(error(&engine, &again).contains("already exists"));
    ok(
        &engine,
        &again.replace("DATABASE pg", "DATABASE IF NOT EXISTS pg"),
    );

    // ALTER to a port nothing listens on is refused, and the datasource keeps working.
    let mut bad = parameters(&config);
    bad["port"] = json!(1);
    let message = error(&engine, &format!("ALTER DATABASE pg PARAMETERS = {bad}"));
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert_eq!(
        rows(&engine, "SELECT count(*) FROM pg.cat_one"),
        json!([[0]])
    );
    assert!(error(&engine, "ALTER DATABASE mindsdb PARAMETERS = {}").contains("not a datasource"));
    // One key changes; the others stay.
    ok(&engine, "ALTER DATABASE pg password = 'changed-pw'");
    let mut request = QueryRequest::new(
        "SELECT connection_data FROM information_schema.databases WHERE name = 'pg'",
    );
    request.context.show_secrets = true;
    let shown: Value =
        serde_json::from_str(doc_with(&engine, request)["data"][0][0].as_str().unwrap()).unwrap();
    assert_eq!(shown["password"], "changed-pw");
    assert_eq!(shown["port"], parameters(&config)["port"]);

    ok(&engine, "DROP DATABASE pg");
    assert!(error(&engine, "SELECT * FROM pg.cat_one").contains("pg"));
    assert!(error(&engine, "DROP DATABASE pg").contains("does not exist"));
}

#[test]
fn bad_datasources_are_refused_with_the_reason() {
    let Some((config, _)) = server() else { return };
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let mut params = parameters(&config);
    params["port"] = json!(1);
    let message = error(
        &engine,
        &format!("CREATE DATABASE down ENGINE = 'postgres', PARAMETERS = {params}"),
    );
    assert!(
        message.contains("Cannot connect to PostgreSQL at 127.0.0.1:1"),
        "{message}"
    );
    let mut params = parameters(&config);
    params["database"] = json!("no_such_db");
    let message = error(
        &engine,
        &format!("CREATE DATABASE down ENGINE = 'postgres', PARAMETERS = {params}"),
    );
    assert!(message.contains("no_such_db"), "{message}");
    let mut params = parameters(&config);
    params["schema"] = json!("nowhere");
    let message = error(
        &engine,
        &format!("CREATE DATABASE down ENGINE = 'postgres', PARAMETERS = {params}"),
    );
    assert!(message.contains("no schema 'nowhere'"), "{message}");
    let message = error(
        &engine,
        "CREATE DATABASE down ENGINE = 'oracle', PARAMETERS = {\"host\": \"127.0.0.1\"}",
    );
    assert!(
        message.contains("Unknown database engine 'oracle'"),
        "{message}"
    );
    // Nothing was stored by the failures.
    assert_eq!(
        rows(
            &engine,
            "SELECT count(*) FROM information_schema.databases WHERE name = 'down'"
        ),
        json!([[0]])
    );
}

#[test]
fn writes_go_through_in_one_remote_transaction() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS wr_target; DROP TABLE IF EXISTS wr_copy; \
         CREATE TABLE wr_target (id int8 PRIMARY KEY, name text, at date);",
    );
    let engine = engine_with_pg(&config);
    let d = ok(
        &engine,
        "INSERT INTO pg.wr_target (id, name, at) VALUES (1, 'one', '2024-01-02'), (2, NULL, NULL)",
    );
    assert_eq!(d["affected_rows"], 2, "{d}");
    ok(&engine, "CREATE TABLE local_rows (id BIGINT, name VARCHAR)");
    engine
        .sql_blocking(&format!(
            "INSERT INTO local_rows VALUES {}",
            (3..2503)
                .map(|i| format!("({i}, 'r{i}')"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .unwrap();
    let d = ok(
        &engine,
        "INSERT INTO pg.wr_target (id, name) SELECT id, name FROM local_rows",
    );
    assert_eq!(d["affected_rows"], 2500, "{d}");
    assert_eq!(
        admin(&config, "SELECT count(*), min(at)::text FROM wr_target"),
        vec![vec![Some("2502".into()), Some("2024-01-02".into())]]
    );
    // A duplicate key in the middle: nothing of that INSERT stays.
    let message = error(
        &engine,
        "INSERT INTO pg.wr_target (id, name) VALUES (9000, 'new'), (1, 'dup')",
    );
    assert!(message.contains("duplicate key"), "{message}");
    assert_eq!(
        admin(&config, "SELECT count(*) FROM wr_target WHERE id = 9000"),
        vec![vec![Some("0".into())]]
    );

    let d = ok(
        &engine,
        "CREATE TABLE pg.wr_copy (SELECT id, name, id * 0.5 AS half FROM local_rows WHERE id < 13)",
    );
    assert_eq!(d["affected_rows"], 10, "{d}");
    assert_eq!(
        rows(&engine, "SELECT sum(half), count(name) FROM pg.wr_copy"),
        json!([[37.5, 10]])
    );
    assert!(error(&engine, "CREATE TABLE pg.wr_copy (SELECT 1 AS x)").contains("already exists"));
    ok(
        &engine,
        "CREATE OR REPLACE TABLE pg.wr_copy (SELECT 1 AS x)",
    );
    assert_eq!(rows(&engine, "SELECT * FROM pg.wr_copy"), json!([[1]]));
    assert!(error(&engine, "DELETE FROM pg.wr_target").contains("INSERT INTO"));
    // Replacing a table from a query over itself: built aside, swapped in at the end.
    ok(
        &engine,
        "CREATE OR REPLACE TABLE pg.wr_copy (SELECT x + 1 AS x FROM pg.wr_copy)",
    );
    assert_eq!(rows(&engine, "SELECT x FROM pg.wr_copy"), json!([[2]]));
}

#[test]
fn inserts_leave_unnamed_columns_to_their_defaults_and_bytes_intact() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS wd_rows;          CREATE TABLE wd_rows (id serial PRIMARY KEY, name text, at timestamptz NOT NULL DEFAULT now(), b bytea);",
    );
    let engine = engine_with_pg(&config);
    ok(
        &engine,
        "INSERT INTO pg.wd_rows (name) VALUES ('first'), ('second')",
    );
    ok(
        &engine,
        "INSERT INTO pg.wd_rows (name, b) SELECT 'bytes', decode('5c7800ff', 'hex')",
    );
    assert_eq!(
        admin(
            &config,
            "SELECT id, name, at IS NOT NULL, encode(b, 'hex') FROM wd_rows ORDER BY id"
        ),
        vec![
            vec![
                Some("1".into()),
                Some("first".into()),
                Some("t".into()),
                None
            ],
            vec![
                Some("2".into()),
                Some("second".into()),
                Some("t".into()),
                None
            ],
            vec![
                Some("3".into()),
                Some("bytes".into()),
                Some("t".into()),
                Some("5c7800ff".into())
            ],
        ]
    );
    assert!(error(&engine, "INSERT INTO pg.wd_rows (nope) VALUES (1)").contains("nope"));
}

#[test]
fn reads_are_read_only_and_unrepresentable_values_are_errors() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS ro_rows; CREATE TABLE ro_rows (id int, day date);          INSERT INTO ro_rows VALUES (1, '2024-01-01'), (2, 'infinity');",
    );
    let engine = engine_with_pg(&config);
    let message = error(
        &engine,
        "SELECT * FROM pg (WITH gone AS (DELETE FROM ro_rows RETURNING *) SELECT * FROM gone)",
    );
    assert!(message.contains("read-only transaction"), "{message}");
    assert_eq!(
        admin(&config, "SELECT count(*) FROM ro_rows"),
        vec![vec![Some("2".into())]]
    );
    let message = error(&engine, "SELECT day FROM pg.ro_rows");
    assert!(
        message.contains("'day'") && message.contains("infinity"),
        "{message}"
    );
    // A pushed-down filter that leaves it out reads fine.
    assert_eq!(
        rows(&engine, "SELECT day FROM pg.ro_rows WHERE id = 1"),
        json!([["2024-01-01"]])
    );
}

#[test]
fn models_train_from_a_datasource() {
    let Some((config, _)) = server() else { return };
    admin(
        &config,
        "DROP TABLE IF EXISTS ml_rows; \
         CREATE TABLE ml_rows AS SELECT i AS x, 3 * i + 1 AS y FROM generate_series(1, 200) i;",
    );
    let engine = engine_with_pg(&config);
    rows(
        &engine,
        "CREATE MODEL mindsdb.line FROM pg (SELECT x, y FROM ml_rows WHERE x::int % 2 = 0) PREDICT y",
    );
    let started = Instant::now();
    loop {
        let status = rows(
            &engine,
            "SELECT status, error FROM mindsdb.models WHERE name = 'line'",
        );
        if status[0][0] == "complete" {
            break;
        }
        assert_ne!(status[0][0], "error", "{status}");
        assert!(started.elapsed() < Duration::from_secs(120), "{status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = rows(&engine, "SELECT y FROM mindsdb.line WHERE x = 101");
    let y = got[0][0].as_f64().unwrap();
    assert!((y - 304.0).abs() < 15.0, "{got}");
}

/// Connections go through the egress policy (every address of the host checked when
/// connecting), and no message the server sends may exceed `datasources.max_message_mb`.
#[test]
fn the_egress_policy_and_the_message_cap_hold_for_postgresql() {
    let Some((config, _)) = server() else { return };
    let params = parameters(&config);
    let create = |name: &str, params: &Value| {
        format!("CREATE DATABASE {name} WITH ENGINE = 'postgres', PARAMETERS = {params}")
    };
    // Internal addresses refused: the literal address and a name that resolves to it alike.
    let mut strict = Config::default();
    strict.egress.deny_internal = Some(true);
    strict.datasources.max_message_mb = 1;
    let engine = Engine::open_in_memory(strict.clone()).unwrap();
    let refused = error(&engine, &create("pg", &params));
    assert!(
        refused.contains("refused by the egress policy"),
        "{refused}"
    );
    let mut by_name = params.clone();
    by_name["host"] = json!("localhost");
    let refused = error(&engine, &create("pg", &by_name));
    assert!(
        refused
            .contains("refused by the egress policy: this server does not connect to 'localhost'"),
        "{refused}"
    );
    // Allowed by address and port: connects, and a 3 MB value in one row is refused.
    let port = config.get_ports()[0];
    strict.egress.allow = vec![format!("127.0.0.1:{port}")];
    let engine = Engine::open_in_memory(strict).unwrap();
    ok(&engine, &create("pg", &params));
    let big = error(
        &engine,
        "SELECT length(big) FROM pg (SELECT repeat('x', 3000000) AS big)",
    );
    assert!(big.contains("datasources.max_message_mb"), "{big}");
    let small = rows(&engine, "SELECT n FROM pg (SELECT 7 AS n)");
    assert_eq!(small, json!([[7]]));
}
