//! The datasources benchmark: a filtered query over a PostgreSQL table of N rows, with filter
//! push-down and with it turned off (`"push_down": false`): rows transferred from PostgreSQL
//! (the scan operator's output rows, from EXPLAIN ANALYZE) and time. `benches/datasources.sh`
//! starts the server and fills the table; this program reads `PGTEST_URL`. Prints one JSON object.
//!
//! ```text
//! datasources [--rows 1000000] [--runs 5]
//! ```

use std::time::Instant;

use mindlite::arrow::array::{Array, StringArray};
use mindlite::{Config, Engine};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a whole number"))
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `{"host", "port", "database", "user"}` from a `postgresql://user@host:port/db` URL.
fn parameters(url: &str) -> serde_json::Value {
    let rest = url
        .strip_prefix("postgresql://")
        .expect("a postgresql:// URL");
    let (user, rest) = rest.split_once('@').expect("user@host");
    let (host_port, database) = rest.split_once('/').expect("host:port/db");
    let (host, port) = host_port.split_once(':').expect("host:port");
    serde_json::json!({"host": host, "port": port.parse::<u16>().unwrap(), "database": database, "user": user})
}

/// The rows the PostgreSQL scan produced, from EXPLAIN ANALYZE's plan text.
fn rows_transferred(engine: &Engine, sql: &str) -> u64 {
    let explained = engine
        .sql_blocking(&format!("EXPLAIN ANALYZE {sql}"))
        .expect("explains");
    for batch in &explained.batches {
        let plans = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("plan text");
        for i in 0..plans.len() {
            for line in plans.value(i).lines() {
                if let Some(at) = line.find("PostgresScan") {
                    let metrics = &line[at..];
                    // DataFusion shows counts as `5000`, `5.00 K` or `1.00 M`.
                    let shown = metrics
                        .split("output_rows=")
                        .nth(1)
                        .expect("the scan's output_rows");
                    let mut words = shown.split([',', ']']).next().unwrap().split_whitespace();
                    let number: f64 = words.next().unwrap().parse().unwrap();
                    let scale = match words.next() {
                        Some("K") => 1e3,
                        Some("M") => 1e6,
                        Some("B") => 1e9,
                        _ => 1.0,
                    };
                    return (number * scale).round() as u64;
                }
            }
        }
    }
    panic!("no PostgresScan in the plan of {sql}");
}

pub fn main() {
    let rows = arg("--rows", 1_000_000);
    let runs = arg("--runs", 5) as usize;
    let url = std::env::var("PGTEST_URL").expect("PGTEST_URL (benches/datasources.sh sets it)");
    let engine = Engine::open_in_memory(Config::default()).expect("opens");
    let on = parameters(&url);
    let mut off = on.clone();
    off["push_down"] = serde_json::json!(false);
    for (name, params) in [("pg", &on), ("pg_all", &off)] {
        engine
            .sql_blocking(&format!(
                "CREATE DATABASE {name} ENGINE = 'postgres', PARAMETERS = {params}"
            ))
            .expect("connects");
    }
    let query = |db: &str| {
        format!(
            "SELECT id, name, amount FROM {db}.bench_rows WHERE category = 42 AND amount >= 500"
        )
    };
    let mut report = serde_json::Map::new();
    report.insert("table_rows".into(), rows.into());
    for db in ["pg", "pg_all"] {
        let sql = query(db);
        let mut times = Vec::new();
        let mut result_rows = 0;
        for _ in 0..runs {
            let started = Instant::now();
            let got = engine.sql_blocking(&sql).expect("runs");
            times.push(started.elapsed().as_secs_f64());
            result_rows = got.num_rows();
        }
        let label = if db == "pg" {
            "push_down"
        } else {
            "no_push_down"
        };
        report.insert(
            label.into(),
            serde_json::json!({
                "query": sql,
                "result_rows": result_rows,
                "rows_transferred": rows_transferred(&engine, &sql),
                "median_seconds": median(times),
            }),
        );
    }
    println!("{}", serde_json::Value::Object(report));
}
