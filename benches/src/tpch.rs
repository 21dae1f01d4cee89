//! TPC-H over PostgreSQL or MariaDB: the 22 queries of `benches/tpch/qN.sql` read tables of the
//! server through a datasource with push-down (whole sub-plans sent as one statement) and
//! through one with `"push_down": false` (rows read whole, computed here). For each: rows
//! transferred (the output rows of every `PostgresScan` or `MySqlScan` in `EXPLAIN ANALYZE`),
//! wall time (median of `--runs`, one run past 60 s, `--timeout` seconds a statement), the
//! operators left in mindlite (the query was sent whole when none but plumbing is), and whether
//! both return the same rows (sorted, numbers to 6 significant digits; a difference is printed
//! loudly). `benches/tpch.sh` loads the data, times the queries on the server itself into the
//! file given by `--server-times`, and runs this program, which reads `PGTEST_URL` (PostgreSQL)
//! or `MYTEST_URL` (`--server mariadb`). Prints a JSON object per query as it goes, then a
//! Markdown table.
//!
//! ```text
//! tpch [--server postgres|mariadb] [--queries 1,2,…] [--runs 3] [--timeout 300]
//!      [--server-times FILE] [--dir benches/tpch]
//! ```

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mindlite::arrow::array::{Array, StringArray};
use mindlite::arrow::datatypes::DataType;
use mindlite::arrow::util::display::array_value_to_string;
use mindlite::{Collected, Config, Engine, QueryRequest};

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

/// Operators that only move rows between threads or rename columns: a plan with nothing but
/// these above one scan of the server was sent whole.
const PLUMBING: [&str; 5] = [
    "ProjectionExec",
    "CoalesceBatchesExec",
    "RepartitionExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
];

/// What `EXPLAIN ANALYZE` tells of one run.
struct Explained {
    /// Sum of the output rows of every scan of the server.
    rows_transferred: u64,
    scans: usize,
    /// Operators that ran in mindlite, plumbing left out.
    local: BTreeSet<String>,
}

/// A count as DataFusion shows it: `5000`, `5.00 K`, `1.00 M`.
fn count(shown: &str) -> u64 {
    let mut words = shown
        .split([',', ']'])
        .next()
        .unwrap_or("")
        .split_whitespace();
    let number: f64 = words.next().and_then(|w| w.parse().ok()).expect("a count");
    let scale = match words.next() {
        Some("K") => 1e3,
        Some("M") => 1e6,
        Some("B") => 1e9,
        _ => 1.0,
    };
    (number * scale).round() as u64
}

fn explain(plan_text: &Collected, scan: &str) -> Explained {
    let mut explained = Explained {
        rows_transferred: 0,
        scans: 0,
        local: BTreeSet::new(),
    };
    for batch in &plan_text.batches {
        let plans = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("plan text");
        for i in 0..plans.len() {
            for line in plans.value(i).lines() {
                let name = line
                    .trim_start()
                    .split([':', ' ', ','])
                    .next()
                    .unwrap_or("");
                if name == scan {
                    // The metrics come last; the statement before them may hold anything.
                    let shown = line.rsplit("output_rows=").next().expect("output_rows");
                    explained.rows_transferred += count(shown);
                    explained.scans += 1;
                } else if name.ends_with("Exec") && !PLUMBING.contains(&name) {
                    explained.local.insert(name.to_string());
                }
            }
        }
    }
    explained
}

/// The rows as sorted text, numbers to 6 significant digits, for comparing two runs.
fn normalized(result: &Collected) -> Vec<String> {
    let mut rows = Vec::new();
    for batch in &result.batches {
        for row in 0..batch.num_rows() {
            let values: Vec<String> = batch
                .columns()
                .iter()
                .map(|column| {
                    let text = array_value_to_string(column, row).expect("shows a value");
                    let numeric = matches!(
                        column.data_type(),
                        DataType::Float32
                            | DataType::Float64
                            | DataType::Decimal128(..)
                            | DataType::Decimal256(..)
                    );
                    match text.parse::<f64>() {
                        Ok(v) if numeric && !column.is_null(row) => format!("{v:.5e}"),
                        _ => text,
                    }
                })
                .collect();
            rows.push(values.join(" | "));
        }
    }
    rows.sort();
    rows
}

/// One query through one datasource: times, rows, and what `EXPLAIN ANALYZE` shows.
struct Run {
    /// Median seconds, or `None` when the statement timed out.
    seconds: Option<f64>,
    rows: Vec<String>,
    explained: Option<Explained>,
    error: Option<String>,
}

fn run(
    engine: &Engine,
    server: &Server,
    db: &str,
    sql: &str,
    runs: usize,
    timeout: Duration,
) -> Run {
    let execute = |text: &str| {
        let mut request = QueryRequest::new(text).with_db(db);
        request.timeout = Some(timeout);
        engine.block_on(engine.query_blocking(request).collect())
    };
    let mut times = Vec::new();
    let mut rows = Vec::new();
    while times.len() < runs {
        let started = Instant::now();
        let result = execute(sql);
        let took = started.elapsed().as_secs_f64();
        match result {
            Ok(got) => rows = normalized(&got),
            Err(e) if took >= timeout.as_secs_f64() - 1.0 => {
                eprintln!("{db}: timed out after {took:.0} s ({e})");
                let (seconds, explained) = (None, None);
                return Run {
                    seconds,
                    rows,
                    explained,
                    error: None,
                };
            }
            Err(e) => {
                let (seconds, explained, error) = (None, None, Some(e.to_string()));
                return Run {
                    seconds,
                    rows,
                    explained,
                    error,
                };
            }
        }
        times.push(took);
        if took > 60.0 {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    let explained = execute(&format!("EXPLAIN ANALYZE {sql}"))
        .map(|plan| explain(&plan, server.scan))
        .map_err(|e| eprintln!("{db}: EXPLAIN ANALYZE failed: {e}"))
        .ok();
    let seconds = Some(times[times.len() / 2]);
    Run {
        seconds,
        rows,
        explained,
        error: None,
    }
}

/// The server the tables are in.
struct Server {
    /// The datasource engine.
    engine: &'static str,
    /// Its name in the table.
    name: &'static str,
    /// The scan operator reading from it.
    scan: &'static str,
    parameters: serde_json::Value,
}

impl Server {
    /// `--server`'s, from the URL its script exported.
    fn from_args() -> Server {
        let (engine, name, scan, variable) = match arg("--server").as_deref() {
            None | Some("postgres") => ("postgres", "PostgreSQL", "PostgresScan", "PGTEST_URL"),
            Some("mariadb") => ("mariadb", "MariaDB", "MySqlScan", "MYTEST_URL"),
            Some(other) => panic!("--server is postgres or mariadb, not {other}"),
        };
        let url = std::env::var(variable)
            .unwrap_or_else(|_| panic!("{variable} (benches/tpch.sh sets it)"));
        Server {
            engine,
            name,
            scan,
            parameters: parameters(&url),
        }
    }
}

/// `{"host", "port", "database", "user"[, "password"]}` from a `scheme://user[:password]@host:port/db`
/// URL.
fn parameters(url: &str) -> serde_json::Value {
    let (_, rest) = url.split_once("://").expect("a scheme://… URL");
    let (credentials, rest) = rest.split_once('@').expect("user@host");
    let (host_port, database) = rest.split_once('/').expect("host:port/db");
    let (host, port) = host_port.split_once(':').expect("host:port");
    let port: u16 = port.parse().expect("a port number");
    let mut parameters =
        serde_json::json!({"host": host, "port": port, "database": database, "user": credentials});
    if let Some((user, password)) = credentials.split_once(':') {
        parameters["user"] = serde_json::json!(user);
        parameters["password"] = serde_json::json!(password);
    }
    parameters
}

fn seconds(time: Option<f64>) -> String {
    time.map_or("timeout".to_string(), |s| format!("{s:.2}"))
}

pub fn main() {
    let runs: usize = arg("--runs").map_or(3, |r| r.parse().expect("a number of runs"));
    let timeout = Duration::from_secs(arg("--timeout").map_or(300, |t| t.parse().expect("secs")));
    let dir = arg("--dir").unwrap_or_else(|| "benches/tpch".to_string());
    let queries: Vec<u32> = arg("--queries").map_or((1..=22).collect(), |list| {
        list.split(',')
            .map(|q| q.parse().expect("a query number"))
            .collect()
    });
    let server = Server::from_args();
    // `q1 0.123` or `q17 timeout` lines, from benches/tpch.sh.
    let server_times = arg("--server-times")
        .or_else(|| arg("--postgres-times"))
        .map(|file| std::fs::read_to_string(file).expect("reads the server's times"))
        .unwrap_or_default();
    let engine = Engine::open_in_memory(Config::default()).expect("opens");
    let on = server.parameters.clone();
    let mut off = on.clone();
    off["push_down"] = serde_json::json!(false);
    for (name, params) in [("pg", &on), ("pg_all", &off)] {
        engine
            .sql_blocking(&format!(
                "CREATE DATABASE {name} ENGINE = '{}', PARAMETERS = {params}",
                server.engine
            ))
            .expect("connects");
    }
    let mut table = vec![
        format!("| query | rows transferred, push-down | rows transferred, no push-down | time, push-down | time, no push-down | time, {} | sent | left in mindlite |", server.name),
        "|---|---:|---:|---:|---:|---:|---|---|".to_string(),
    ];
    let mut mismatches = Vec::new();
    for q in queries {
        let path = format!("{dir}/q{q}.sql");
        let text = std::fs::read_to_string(&path).expect("reads the query");
        let sql = text.trim().trim_end_matches(';');
        eprintln!("q{q} …");
        let pushed = run(&engine, &server, "pg", sql, runs, timeout);
        let all = run(&engine, &server, "pg_all", sql, runs, timeout);
        let same = pushed.seconds.is_some() && all.seconds.is_some();
        if same && pushed.rows != all.rows {
            let only_pushed: Vec<&String> = pushed
                .rows
                .iter()
                .filter(|r| !all.rows.contains(r))
                .collect();
            let only_all: Vec<&String> = all
                .rows
                .iter()
                .filter(|r| !pushed.rows.contains(r))
                .collect();
            eprintln!(
                "!!!!! MISMATCH q{q}: {} rows with push-down, {} without\n  only with push-down: {:?}\n  only without: {:?}",
                pushed.rows.len(),
                all.rows.len(),
                &only_pushed[..only_pushed.len().min(5)],
                &only_all[..only_all.len().min(5)],
            );
            mismatches.push(q);
        }
        let remote = server_times
            .lines()
            .find_map(|l| l.strip_prefix(&format!("q{q} ")))
            .unwrap_or("-")
            .trim();
        let transferred = |r: &Run| {
            r.explained
                .as_ref()
                .map_or("-".to_string(), |e| e.rows_transferred.to_string())
        };
        let (sent, local) = match &pushed.explained {
            Some(e) if e.scans == 1 && e.local.is_empty() => ("whole".to_string(), String::new()),
            Some(e) => (
                format!("partly ({} statements)", e.scans),
                e.local.iter().cloned().collect::<Vec<_>>().join(", "),
            ),
            None => ("-".to_string(), String::new()),
        };
        let report = serde_json::json!({
            "query": q,
            "rows": pushed.rows.len(),
            "same_rows": if same { Some(pushed.rows == all.rows) } else { None },
            "push_down": {"seconds": pushed.seconds, "rows_transferred": transferred(&pushed), "error": pushed.error},
            "no_push_down": {"seconds": all.seconds, "rows_transferred": transferred(&all), "error": all.error},
            "server_seconds": remote,
            "sent": sent,
            "local_operators": local,
        });
        println!("{report}");
        table.push(format!(
            "| Q{q} | {} | {} | {} | {} | {remote} | {sent} | {local} |",
            transferred(&pushed),
            transferred(&all),
            pushed
                .error
                .as_ref()
                .map_or(seconds(pushed.seconds), |_| "error".into()),
            all.error
                .as_ref()
                .map_or(seconds(all.seconds), |_| "error".into()),
        ));
    }
    println!("{}", table.join("\n"));
    if mismatches.is_empty() {
        println!("push-down and no push-down returned the same rows for every query that finished");
    } else {
        println!("!!!!! DIFFERENT ROWS with and without push-down: queries {mismatches:?}");
    }
}
