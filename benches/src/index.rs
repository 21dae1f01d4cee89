//! The index benchmark's mindlite side: a table of N rows in a database file (`id`, a
//! permutation of 0..N so ids are not in storage order; `k`, the same values without an index;
//! `value`; `name`), then lookups of existing ids: on `k` (a full scan), `CREATE INDEX t_id ON
//! t (id)` (timed), and on `id`: points, `IN` of 3 values, 100-row `BETWEEN` ranges. Each
//! result's row count is checked. Prints one JSON object with the fields `index_bench.py` prints
//! for DuckDB and sqlite3 (`benches/index.sh` runs both).
//!
//! ```text
//! index [--rows 10000000] [--lookups 1000] [--runs 20] [--scans 5]
//! ```

use std::time::Instant;

use mindlite::{Config, Engine};

/// splitmix64, for the ids looked up.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

/// Runs `sql` and returns (milliseconds, rows).
fn timed(engine: &Engine, sql: &str) -> (f64, usize) {
    let start = Instant::now();
    let rows = engine
        .sql_blocking(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    (start.elapsed().as_secs_f64() * 1000.0, rows.num_rows())
}

/// Times each statement after an untimed first one, checking every row count.
fn series(engine: &Engine, statements: &[String], expect: usize) -> Vec<f64> {
    let mut times = Vec::new();
    for (i, sql) in statements.iter().enumerate() {
        let (ms, rows) = timed(engine, sql);
        assert_eq!(rows, expect, "{sql}");
        if i > 0 {
            times.push(ms);
        }
    }
    times
}

fn percentile(times: &[f64], p: f64) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn main() {
    let rows = arg("--rows", 10_000_000);
    let lookups = arg("--lookups", 1000);
    let runs = arg("--runs", 20);
    let scans = arg("--scans", 5);
    // A multiplier coprime with every N the benchmark uses (a prime other than 2 and 5) makes
    // i * P mod N a permutation.
    const P: u64 = 7_919;
    assert!(
        !rows.is_multiple_of(P),
        "--rows must not be a multiple of {P}"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = Engine::open(dir.path().join("bench.redb"), Config::default()).expect("open");
    let start = Instant::now();
    engine
        .sql_blocking(&format!(
            "CREATE TABLE t AS SELECT (value * {P}) % {rows} AS id, (value * {P}) % {rows} AS k, \
             random() AS value, 'name_' || ((value * {P}) % {rows}) AS name \
             FROM generate_series(0, {}) ",
            rows - 1
        ))
        .expect("load");
    let load_s = start.elapsed().as_secs_f64();
    let mut seed = 0;
    let mut pick = |high: u64| {
        seed += 1;
        mix(seed) % high
    };
    let scan: Vec<String> = (0..=scans)
        .map(|_| format!("SELECT * FROM t WHERE k = {}", pick(rows)))
        .collect();
    let scan = series(&engine, &scan, 1);
    let start = Instant::now();
    engine
        .sql_blocking("CREATE INDEX t_id ON t (id)")
        .expect("index");
    let index_s = start.elapsed().as_secs_f64();
    let point: Vec<String> = (0..=lookups)
        .map(|_| format!("SELECT * FROM t WHERE id = {}", pick(rows)))
        .collect();
    let point = series(&engine, &point, 1);
    let in3: Vec<String> = (0..=runs)
        .map(|_| {
            let a = pick(rows);
            let mut b = pick(rows);
            while b == a {
                b = pick(rows);
            }
            let mut c = pick(rows);
            while c == a || c == b {
                c = pick(rows);
            }
            format!("SELECT * FROM t WHERE id IN ({a}, {b}, {c})")
        })
        .collect();
    let in3 = series(&engine, &in3, 3);
    let ranges: Vec<String> = (0..=runs)
        .map(|_| {
            let v = pick(rows - 99);
            format!("SELECT * FROM t WHERE id BETWEEN {v} AND {}", v + 99)
        })
        .collect();
    let ranged = series(&engine, &ranges, 100);
    let file_mb = std::fs::metadata(dir.path().join("bench.redb"))
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0);
    let total: f64 = point.iter().sum();
    println!(
        "{}",
        serde_json::json!({
            "engine": format!("mindlite {}", env!("CARGO_PKG_VERSION")),
            "rows": rows,
            "load_s": load_s,
            "index_build_s": index_s,
            "scan_lookup_ms": percentile(&scan, 0.5),
            "point_p50_ms": percentile(&point, 0.5),
            "point_p95_ms": percentile(&point, 0.95),
            "point_qps": point.len() as f64 / (total / 1000.0),
            "in3_ms": percentile(&in3, 0.5),
            "range100_ms": percentile(&ranged, 0.5),
            "db_mb": file_mb,
            "scan_runs_ms": scan,
        })
    );
}
