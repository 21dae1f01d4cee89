//! Whole sub-plans sent to PostgreSQL (`connectors::remote_plan`), against the server the
//! test command starts. What was sent is read from the server's statement log; every answer
//! is checked against the same query computed here, over the rows of the same tables read
//! whole through a second datasource with `"push_down": false`: a seeded generator of a few
//! hundred queries (joins, aggregates, windows, TopK, subqueries, DISTINCT, UNION, odd values)
//! compares the two.

use mindlite::{Config, Engine, QueryRequest};
use serde_json::{json, Value};

use super::postgres::{admin, doc, error, logged, ok, parameters, rows, server};

use std::time::{Duration, Instant};

/// Tables with odd names and values: a quote and a space in a table's name, a column whose
/// name has a quote and capitals, text with quotes, backslashes, `%` and non-ASCII letters,
/// under a collation (ICU's English) that orders capitals and accents unlike byte order.
const SETUP: &str = r#"
DROP SCHEMA IF EXISTS {schema} CASCADE;
CREATE SCHEMA {schema};
SET search_path = {schema};
CREATE TABLE fd_customers (id int8 PRIMARY KEY, "Name" text, region text COLLATE "en-x-icu", joined date, score numeric(8,2));
CREATE TABLE fd_orders (id int8 PRIMARY KEY, customer_id int8, amount double precision, qty int4, placed date, status text COLLATE "en-x-icu", at timestamp);
CREATE TABLE "fd odd ""t""" (id int4, "we""ird Col" text);
INSERT INTO fd_customers
  SELECT i, CASE WHEN i % 9 = 0 THEN NULL ELSE 'cust ' || i END,
         (ARRAY['north', 'south', 'east', 'west', 'it''s', 'ünïcode'])[1 + i % 6],
         DATE '2023-01-01' + i * 3, CASE WHEN i % 11 = 0 THEN NULL ELSE (i * 7.31) % 100 END
  FROM generate_series(1, 60) i;
INSERT INTO fd_orders
  SELECT i, 1 + (i * 7) % 70, CASE WHEN i % 13 = 0 THEN NULL ELSE ((i * 37) % 1000) / 4.0 END,
         (i * 5) % 9, DATE '2024-01-01' + (i % 200),
         (ARRAY['paid', 'open', 'it''s', 'back\slash', '50%', 'ünïcode', 'Paid', 'Zed'])[1 + i % 8],
         TIMESTAMP '2024-01-01 00:00:00' + (i * 5417) * INTERVAL '1 second'
  FROM generate_series(1, 400) i;
INSERT INTO "fd odd ""t""" VALUES (1, 'a''b'), (2, 'c"d'), (3, NULL), (2, 'e\f');
CREATE TABLE fd_wide (x numeric(20,10));
INSERT INTO fd_wide VALUES (12345.0000000001), (12345.0000000002), (12345.0000000002), (-0.0000000001);
"#;

/// Makes the tables in the schema `schema` (each test has its own), and returns an engine
/// with `pg` (push-down on) and `local` (off) on them.
fn engine(config: &tokio_postgres::Config, schema: &str) -> Engine {
    admin(config, &SETUP.replace("{schema}", schema));
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let mut params = parameters(config);
    params["schema"] = json!(schema);
    ok(
        &engine,
        &format!("CREATE DATABASE pg ENGINE = 'postgres', PARAMETERS = {params}"),
    );
    let mut off = params.clone();
    off["push_down"] = json!(false);
    ok(
        &engine,
        &format!("CREATE DATABASE local ENGINE = 'postgres', PARAMETERS = {off}"),
    );
    engine
}

/// The last statement the server logged that names the table `table` of `schema`.
fn last_sent(log: &str, schema: &str, table: &str) -> String {
    let needle = format!("\"{schema}\".\"{table}\"");
    logged(log, &needle)
        .pop()
        .unwrap_or_else(|| panic!("nothing sent naming {needle}"))
}

/// `sql`'s rows, checked against the same query computed here (`local.` for `pg.`), the
/// second run after the first so the log's last statement is the pushed one's.
fn compared(engine: &Engine, sql: &str, sorted: bool) -> Value {
    let here = rows(engine, &sql.replace("pg.", "local."));
    let there = rows(engine, sql);
    if sorted {
        assert_eq!(canonical(&there), canonical(&here), "{sql}");
    } else {
        assert_eq!(there, here, "{sql}");
    }
    there
}

/// The plan `EXPLAIN` shows for `sql`, as one text.
fn explain(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, &format!("EXPLAIN {sql}"));
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].to_string()
}

/// `rows` as sorted texts, numbers rounded to 9 significant digits (sums of doubles may add
/// in another order remotely).
fn canonical(rows: &Value) -> Vec<String> {
    fn cell(v: &Value) -> String {
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(i) => i.to_string(),
                None => format!("{:.9e}", n.as_f64().unwrap()),
            },
            other => other.to_string(),
        }
    }
    let mut out: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(cell)
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn joins_aggregates_windows_topk_and_subqueries_go_to_postgres_whole() {
    const SCHEMA: &str = "fed_shapes";
    let Some((config, log)) = server() else {
        return;
    };
    let engine = engine(&config, SCHEMA);

    // Uncorrelated scalar subqueries are written inside the statement, and a mean of decimals
    // is truncated at its scale, as here.
    let sql = "SELECT region, avg(score) AS a FROM pg.fd_customers \
               WHERE score > (SELECT avg(score) FROM pg.fd_customers WHERE id < 30) \
               GROUP BY region ORDER BY region";
    compared(&engine, sql, false);
    let sent = last_sent(&log, SCHEMA, "fd_customers");
    assert!(
        sent.contains("> (SELECT t")
            && sent.contains("div((sum(")
            && sent.contains(r#"COLLATE "C" ASC NULLS LAST) AS q"#),
        "{sent}"
    );

    // A mean of 14 decimal places: past the 16 digits PostgreSQL keeps of a quotient.
    compared(&engine, "SELECT avg(x) FROM pg.fd_wide", false);
    assert!(last_sent(&log, SCHEMA, "fd_wide").contains("div((sum("));

    // A join with GROUP BY and HAVING: one statement, one row per group back (HAVING is a
    // WHERE over the grouped rows).
    let sql = "SELECT c.region, count(*) AS n, sum(o.qty) AS q FROM pg.fd_orders o \
               JOIN pg.fd_customers c ON o.customer_id = c.id \
               WHERE o.status <> 'open' GROUP BY c.region HAVING count(*) > 10";
    compared(&engine, sql, true);
    let sent = last_sent(&log, SCHEMA, "fd_customers");
    for part in [
        "INNER JOIN",
        "FROM \"fed_shapes\".\"fd_customers\"",
        "GROUP BY",
        "count(CAST(1 AS BIGINT))",
        "> CAST(10 AS BIGINT))",
    ] {
        assert!(sent.contains(part), "{part} not in {sent}");
    }
    // The text is bound, not written into the statement.
    assert!(
        sent.contains("CAST($1 AS VARCHAR)") && !sent.contains("'open'"),
        "{sent}"
    );
    let plan = explain(&engine, sql);
    assert!(
        plan.contains("PostgresScan") && plan.contains("GROUP BY"),
        "{plan}"
    );
    assert!(!plan.contains("AggregateExec"), "{plan}");

    // ORDER BY … LIMIT (TopK): ten rows cross the wire, not 400.
    let sql = "SELECT id, amount FROM pg.fd_orders WHERE amount IS NOT NULL \
               ORDER BY amount DESC, id LIMIT 10";
    compared(&engine, sql, false);
    let sent = last_sent(&log, SCHEMA, "fd_orders");
    assert!(
        sent.contains("DESC NULLS FIRST") && sent.contains("LIMIT 10"),
        "{sent}"
    );

    // A window function.
    let sql =
        "SELECT id, customer_id, row_number() OVER (PARTITION BY customer_id ORDER BY id) AS r, \
               sum(qty) OVER (PARTITION BY customer_id) AS s FROM pg.fd_orders";
    compared(&engine, sql, true);
    let sent = last_sent(&log, SCHEMA, "fd_orders");
    assert!(sent.contains("row_number() OVER (PARTITION BY"), "{sent}");

    // Subqueries (as DataFusion decorrelates them: semi and anti joins, a join to an aggregate).
    for sql in [
        "SELECT id FROM pg.fd_customers c WHERE EXISTS \
         (SELECT 1 FROM pg.fd_orders o WHERE o.customer_id = c.id AND o.qty > 6)",
        "SELECT id FROM pg.fd_customers WHERE id NOT IN \
         (SELECT customer_id FROM pg.fd_orders WHERE customer_id IS NOT NULL AND status = 'paid')",
        "SELECT id, amount FROM pg.fd_orders WHERE amount > (SELECT avg(amount) FROM pg.fd_orders)",
    ] {
        compared(&engine, sql, true);
    }
    // EXISTS (a semi join, written as EXISTS) and the scalar subquery's join (to its one-row
    // aggregate) are sent whole; NOT IN's anti join, whose NULLs mean "no rows", stays here.
    for (sql, whole) in [
        (
            "SELECT id FROM pg.fd_customers c WHERE EXISTS \
             (SELECT 1 FROM pg.fd_orders o WHERE o.customer_id = c.id AND o.qty > 6)",
            true,
        ),
        (
            "SELECT id, amount FROM pg.fd_orders WHERE amount > (SELECT avg(amount) FROM pg.fd_orders)",
            true,
        ),
        (
            "SELECT id FROM pg.fd_customers WHERE id NOT IN (SELECT customer_id FROM pg.fd_orders)",
            false,
        ),
    ] {
        let plan = explain(&engine, sql);
        assert_eq!(!plan.contains("JoinExec"), whole, "{sql}: {plan}");
    }

    // Quoting: odd table and column names, and values with quotes and backslashes.
    // (Double quotes are strings in MindsDB's SQL; backticks quote names.)
    let sql =
        r#"SELECT `we"ird Col`, count(*) FROM pg.`fd odd "t"` WHERE id <> 1 GROUP BY `we"ird Col`"#;
    assert_eq!(compared(&engine, sql, true).as_array().unwrap().len(), 3);
    let sent = last_sent(&log, SCHEMA, "fd odd \"\"t\"\"");
    assert!(
        sent.contains(r#""fed_shapes"."fd odd ""t""""#) && sent.contains(r#""we""ird Col""#),
        "{sent}"
    );

    // Text is ordered by its bytes there, as here.
    let sql = "SELECT `Name` FROM pg.fd_customers WHERE region = 'north' ORDER BY `Name` LIMIT 3";
    compared(&engine, sql, false);
    assert!(
        last_sent(&log, SCHEMA, "fd_customers").contains(r#"COLLATE "C" ASC NULLS LAST LIMIT 3"#)
    );

    // A join with a stored table: only the remote side's part is sent.
    ok(&engine, "CREATE TABLE wanted (id BIGINT)");
    ok(&engine, "INSERT INTO wanted VALUES (3), (4)");
    let got = rows(
        &engine,
        "SELECT w.id, count(*) FROM wanted w JOIN pg.fd_orders o ON o.customer_id = w.id GROUP BY w.id ORDER BY w.id",
    );
    assert_eq!(
        got,
        rows(
            &engine,
            "SELECT w.id, count(*) FROM wanted w JOIN local.fd_orders o ON o.customer_id = w.id GROUP BY w.id ORDER BY w.id"
        )
    );
}

#[test]
fn results_keep_the_types_planned_and_remote_errors_pass_through() {
    const SCHEMA: &str = "fed_types";
    let Some((config, log)) = server() else {
        return;
    };
    let engine = engine(&config, SCHEMA);
    // sum(bigint) is numeric in PostgreSQL, bigint here; avg(int) a double; sums of
    // numeric(8,2) stay exact decimals; min/max of dates and timestamps stay such.
    let sql =
        "SELECT sum(o.id), avg(qty), sum(score), min(joined), max(at), count(DISTINCT region) \
               FROM pg.fd_customers c JOIN pg.fd_orders o ON o.customer_id = c.id";
    let here = doc(&engine, &sql.replace("pg.", "local."));
    let got = doc(&engine, sql);
    assert_eq!(got["type"], "table", "{got}");
    assert_eq!(got["column_types"], here["column_types"], "{got}");
    assert_eq!(canonical(&got["data"]), canonical(&here["data"]));
    assert!(last_sent(&log, SCHEMA, "fd_customers").contains("CAST(q.c5 AS bigint)"));

    // An overflow is PostgreSQL's error, in its words.
    let message = error(
        &engine,
        "SELECT sum(id * 4611686018427387904) FROM pg.fd_orders GROUP BY qty",
    );
    assert!(
        message.contains("PostgreSQL: bigint out of range"),
        "{message}"
    );

    // Turned off, nothing but the scan is sent.
    let _ = rows(
        &engine,
        "SELECT qty, count(*) FROM local.fd_orders GROUP BY qty",
    );
    assert!(!last_sent(&log, SCHEMA, "fd_orders").contains("GROUP BY"));
}

#[test]
fn what_an_attack_found_answers_as_computed_here() {
    const SCHEMA: &str = "fed_attack";
    let Some((config, log)) = server() else {
        return;
    };
    let engine = engine(&config, SCHEMA);
    for sql in [
        // A GROUP BY at the top: the unparser writes aggregates before keys.
        "SELECT qty, max(id) FROM pg.fd_orders GROUP BY qty",
        "SELECT status, max(qty), sum(amount), min(placed) FROM pg.fd_orders GROUP BY status",
        "SELECT qty % 3, count(*) FROM pg.fd_orders GROUP BY qty % 3",
        // Columns of the same name from two tables.
        "SELECT c.id, o.id FROM pg.fd_customers c JOIN pg.fd_orders o ON c.id = o.customer_id",
        // A scalar subquery in the select list (a join to a named aggregate).
        "SELECT id, (SELECT max(qty) FROM pg.fd_orders o WHERE o.customer_id = c.id) AS m FROM pg.fd_customers c",
        "SELECT qty / id AS q, qty % id AS m FROM pg.fd_orders ORDER BY id LIMIT 10",
        // Numbers keep their types: 0.1 a double (PostgreSQL reads numeric), 2000000000 a
        // bigint (PostgreSQL reads integer).
        "SELECT id FROM pg.fd_orders WHERE CASE WHEN id > 3 THEN 0.1 ELSE 0.7 END + 0.2 = 0.3",
        "SELECT qty, sum(CASE WHEN id > 0 THEN 0.1 ELSE 0 END) FROM pg.fd_orders GROUP BY qty",
        "SELECT qty, sum(CASE WHEN id > 0 THEN 2000000000 END * 2) FROM pg.fd_orders GROUP BY qty",
        // A FULL JOIN without an equality (PostgreSQL refuses it): joined here.
        "SELECT c.id, o.id FROM pg.fd_customers c FULL JOIN pg.fd_orders o ON c.id > o.customer_id + 60",
    ] {
        compared(&engine, sql, true);
    }
    // LIMIT … OFFSET: DataFusion's sort fetches both; only the LIMIT's rows come back.
    let got = compared(
        &engine,
        "SELECT id FROM pg.fd_orders ORDER BY id LIMIT 2 OFFSET 1",
        false,
    );
    assert_eq!(got, json!([[2], [3]]));
    assert!(last_sent(&log, SCHEMA, "fd_orders").contains("LIMIT 2 OFFSET 1"));

    // A column under a non-deterministic collation groups by its own rule remotely: it is
    // read whole and grouped here.
    admin(
        &config,
        &format!(
            "SET search_path = {SCHEMA}; \
             CREATE COLLATION IF NOT EXISTS ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false); \
             CREATE TABLE words (w text COLLATE ci); \
             INSERT INTO words VALUES ('apple'), ('Apple'), ('APPLE'), ('banana');"
        ),
    );
    let sql = "SELECT w, count(*) FROM pg.words GROUP BY w";
    assert_eq!(compared(&engine, sql, true).as_array().unwrap().len(), 4);
    assert!(!last_sent(&log, SCHEMA, "words").contains("GROUP BY"));

    // A statement stopped before its first row is cancelled on the server.
    let slow = "SELECT count(*) FROM pg.fd_orders a JOIN pg.fd_orders b ON a.id <> b.id \
                JOIN pg.fd_orders c ON b.id <> c.id JOIN pg.fd_orders d ON c.id <> d.id";
    let result =
        engine.query_blocking(QueryRequest::new(slow).with_timeout(Duration::from_secs(1)));
    let body = engine.block_on(mindlite::encode_document(result));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["type"], "error", "{answer}");
    let started = Instant::now();
    loop {
        let running = admin(
            &config,
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%fd_orders%<>%' AND pid <> pg_backend_pid()",
        );
        if running[0][0].as_deref() == Some("0") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the statement still runs on the server"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A small seeded generator (xorshift), so a failure names a query that can be run again.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options[self.below(options.len() as u64) as usize]
    }

    /// A condition on the orders table `o`.
    fn order_condition(&mut self) -> String {
        let one = |g: &mut Gen| -> String {
            match g.below(11) {
                0 => format!("o.qty > {}", g.below(9)),
                1 => format!(
                    "o.status = '{}'",
                    g.pick(&[
                        "paid",
                        "open",
                        "it''s",
                        "back\\slash",
                        "50%",
                        "ünïcode",
                        "none"
                    ])
                ),
                2 => format!(
                    "o.amount BETWEEN {} AND {}",
                    g.below(100),
                    100 + g.below(200)
                ),
                3 => format!("o.placed >= DATE '2024-0{}-01'", 1 + g.below(7)),
                4 => "o.status IN ('paid', 'it''s', '50%')".to_string(),
                5 => format!(
                    "o.status LIKE '{}'",
                    g.pick(&["p%", "%a%", "50\\%", "_pen"])
                ),
                6 => "o.amount IS NULL".to_string(),
                7 => format!("o.customer_id % {} = 0", 2 + g.below(5)),
                8 => format!("o.at < TIMESTAMP '2024-01-{:02} 00:00:00'", 2 + g.below(20)),
                9 => format!(
                    "substr(o.status, {}{}) IN ('p', 'pa', 'ü', 'n', '', 'it''s', 'nïc')",
                    1 + g.below(3),
                    g.pick(&["", ", 0", ", 1", ", 3"])
                ),
                _ => format!(
                    "o.status {} '{}'",
                    g.pick(&["<", ">=", "BETWEEN 'P' AND"]),
                    g.pick(&["p", "P", "ü", "Zed", "open"])
                ),
            }
        };
        match self.below(4) {
            0 => format!("{} AND {}", one(self), one(self)),
            1 => format!("({} OR {})", one(self), one(self)),
            2 => format!("NOT ({})", one(self)),
            _ => one(self),
        }
    }

    fn query(&mut self) -> String {
        let cond = self.order_condition();
        let k = self.below(10);
        match self.below(17) {
            0 => {
                let g = self.pick(&[
                    "o.qty",
                    "o.status",
                    "o.placed",
                    "o.customer_id % 4",
                    "extract(year FROM o.placed)",
                    "date_part('month', o.at)",
                ]);
                format!(
                    "SELECT {g} AS g, count(*), sum(o.qty), min(o.amount), max(o.amount), avg(o.qty) \
                     FROM pg.fd_orders o WHERE {cond} GROUP BY {g} HAVING count(*) > {k}"
                )
            }
            1 => format!(
                "SELECT c.region, count(*), sum(o.amount), sum(c.score), max(c.joined) \
                 FROM pg.fd_orders o JOIN pg.fd_customers c ON o.customer_id = c.id \
                 WHERE {cond} GROUP BY c.region"
            ),
            2 => format!(
                "SELECT o.id, o.amount, o.qty FROM pg.fd_orders o WHERE {cond} \
                 ORDER BY o.{} {}, o.id LIMIT {}",
                self.pick(&["amount", "qty", "placed", "at", "status"]),
                self.pick(&["ASC", "DESC", "DESC NULLS LAST", "ASC NULLS FIRST"]),
                1 + k * 3
            ),
            3 => format!(
                "SELECT o.id, rank() OVER (PARTITION BY o.qty ORDER BY o.amount, o.id) AS r, \
                 count(*) OVER (PARTITION BY o.status) AS n, \
                 sum(o.qty) OVER (ORDER BY o.id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s \
                 FROM pg.fd_orders o WHERE {cond}"
            ),
            4 => format!(
                "SELECT c.id, c.`Name` FROM pg.fd_customers c WHERE {} EXISTS \
                 (SELECT 1 FROM pg.fd_orders o WHERE o.customer_id = c.id AND {cond})",
                self.pick(&["", "NOT"])
            ),
            5 => format!(
                "SELECT c.id FROM pg.fd_customers c WHERE c.id {} \
                 (SELECT o.customer_id FROM pg.fd_orders o WHERE o.customer_id IS NOT NULL AND {cond})",
                self.pick(&["IN", "NOT IN"])
            ),
            6 => format!(
                "SELECT o.id, o.amount FROM pg.fd_orders o WHERE o.amount > \
                 (SELECT avg(o.amount) FROM pg.fd_orders o WHERE {cond})"
            ),
            7 => format!(
                "SELECT DISTINCT o.status, o.qty FROM pg.fd_orders o WHERE {cond}"
            ),
            8 => format!(
                "SELECT c.id, o.id, o.qty FROM pg.fd_customers c LEFT JOIN pg.fd_orders o \
                 ON o.customer_id = c.id AND o.qty > {k} WHERE c.id < {}",
                10 + self.below(50)
            ),
            9 => format!(
                "SELECT o.customer_id AS id FROM pg.fd_orders o WHERE {cond} \
                 UNION{} SELECT c.id FROM pg.fd_customers c WHERE c.score > {}",
                self.pick(&["", " ALL"]),
                self.below(100)
            ),
            10 => format!(
                "SELECT CASE WHEN o.amount > {} THEN 'big' WHEN o.amount IS NULL THEN 'none' ELSE 'small' END AS k, \
                 count(*), sum(o.qty * 2 + 1), sum(o.qty / 2), sum(o.qty % 4), coalesce(max(o.amount), -1) \
                 FROM pg.fd_orders o WHERE {cond} GROUP BY 1",
                self.below(250)
            ),
            11 => format!(
                "SELECT c.region, avg(c.score), count(*) FROM pg.fd_customers c \
                 WHERE c.score > (SELECT avg(c2.score) FROM pg.fd_customers c2 WHERE c2.id < {}) \
                 OR c.id = {k} GROUP BY c.region \
                 HAVING sum(c.score) > (SELECT sum(o.qty) * 0.5 FROM pg.fd_orders o WHERE {cond})",
                10 + self.below(50)
            ),
            12 => format!(
                "SELECT o.qty, max(o.id), min(o.placed), sum(o.amount) FROM pg.fd_orders o \
                 WHERE {cond} GROUP BY o.qty"
            ),
            13 => format!(
                "SELECT o.id, o.qty FROM pg.fd_orders o WHERE {cond} ORDER BY o.id LIMIT {} OFFSET {}",
                1 + k,
                self.below(30)
            ),
            14 => format!(
                "SELECT c.id, o.id, o.qty / 2, o.qty % 3 FROM pg.fd_customers c \
                 JOIN pg.fd_orders o ON o.customer_id = c.id WHERE {cond} ORDER BY o.id LIMIT {}",
                5 + k
            ),
            15 => format!(
                "SELECT c.id, (SELECT max(o.qty) FROM pg.fd_orders o WHERE o.customer_id = c.id AND {cond}) AS m \
                 FROM pg.fd_customers c"
            ),
            _ => format!(
                "SELECT c.region, count(DISTINCT o.status), min(o.at) FROM pg.fd_customers c \
                 {} JOIN pg.fd_orders o ON o.customer_id = c.id WHERE {cond} GROUP BY c.region",
                self.pick(&["", "LEFT", "RIGHT", "FULL"])
            ),
        }
    }
}

#[test]
fn generated_queries_answer_as_computed_here() {
    const SCHEMA: &str = "fed_generated";
    let Some((config, log)) = server() else {
        return;
    };
    let engine = engine(&config, SCHEMA);
    let seed: u64 = std::env::var("FEDERATION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x005e_ed42);
    let count: usize = std::env::var("FEDERATION_QUERIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut gen = Gen(seed);
    let mut sent_whole = 0;
    for i in 0..count {
        let sql = gen.query();
        let here = doc(&engine, &sql.replace("pg.", "local."));
        let there = doc(&engine, &sql);
        assert_eq!(
            there["type"], here["type"],
            "query {i} (seed {seed}): {sql}\npushed: {there}\nlocal: {here}"
        );
        if here["type"] == "table" {
            assert_eq!(
                canonical(&there["data"]),
                canonical(&here["data"]),
                "query {i} (seed {seed}): {sql}"
            );
        }
        if explain(&engine, &sql).contains("CAST(q.c0") {
            sent_whole += 1;
        }
    }
    // Most of these are computed by the server whole (the rest: text order, our own rules).
    assert!(
        sent_whole * 10 >= count * 6,
        "only {sent_whole} of {count} queries were sent whole"
    );
    assert!(!logged(&log, "fd_orders").is_empty());
}
