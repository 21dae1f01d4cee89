//! The GROUP BY benchmark of the engine-core issue: load N rows (i64 id, f64 value uniform in
//! [0, 1000), utf8 category with 100 distinct values) into a stored table, then time
//! `SELECT category, count(*), avg(value) FROM t GROUP BY category`. Prints one JSON object.
//! The same rows go to a CSV (`--csv`) so `groupby_peers.py` loads DuckDB and SQLite with them.
//!
//! ```text
//! groupby [--rows 5000000] [--runs 5] [--uncached-runs RUNS] [--csv PATH]
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use mindlite::arrow::array::{Float64Array, Int64Array, StringArray};
use mindlite::arrow::record_batch::RecordBatch;
use mindlite::{Config, Engine};

const QUERY: &str = "SELECT category, count(*), avg(value) FROM t GROUP BY category";
const BATCH: usize = 65_536;

/// splitmix64: a fixed, portable sequence so every engine gets the same values.
fn value_of(i: u64) -> f64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 1000.0
}

fn batches(rows: u64) -> Vec<RecordBatch> {
    let categories: Vec<String> = (0..100).map(|c| format!("category_{c:02}")).collect();
    (0..rows)
        .step_by(BATCH)
        .map(|start| {
            let end = (start + BATCH as u64).min(rows);
            RecordBatch::try_from_iter(vec![
                (
                    "id",
                    Arc::new(Int64Array::from_iter_values((start..end).map(|i| i as i64))) as _,
                ),
                (
                    "value",
                    Arc::new(Float64Array::from_iter_values((start..end).map(value_of))) as _,
                ),
                (
                    "category",
                    Arc::new(StringArray::from_iter_values(
                        (start..end).map(|i| categories[(i % 100) as usize].as_str()),
                    )) as _,
                ),
            ])
            .expect("columns of equal length")
        })
        .collect()
}

fn write_csv(path: &str, data: &[RecordBatch]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "id,value,category")?;
    for batch in data {
        let id = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("id is i64");
        let value = batch
            .column(1)
            .as_any()
            .downcast_ref::<Float64Array>()
            .expect("value is f64");
        let category = batch
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("category is utf8");
        for r in 0..batch.num_rows() {
            // `{:?}` prints the shortest text that parses back to the same f64.
            writeln!(
                out,
                "{},{:?},{}",
                id.value(r),
                value.value(r),
                category.value(r)
            )?;
        }
    }
    out.flush()
}

fn time_query(engine: &Engine) -> f64 {
    let start = Instant::now();
    let result = engine.sql_blocking(QUERY).expect("benchmark query runs");
    assert_eq!(result.num_rows(), 100);
    start.elapsed().as_secs_f64() * 1000.0
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn main() {
    let mut rows: u64 = 5_000_000;
    let mut runs = 5;
    let mut uncached_runs = None;
    let mut csv = None;
    let mut args = std::env::args().skip(2);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--rows" => rows = value().parse().expect("--rows takes a number"),
            "--runs" => runs = value().parse().expect("--runs takes a number"),
            "--uncached-runs" => {
                uncached_runs = Some(value().parse().expect("--uncached-runs takes a number"))
            }
            "--csv" => csv = Some(value()),
            other => panic!("unknown argument {other}"),
        }
    }
    let data = batches(rows);
    if let Some(path) = &csv {
        write_csv(path, &data).expect("CSV written");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.redb");

    let engine = Engine::open(&path, Config::default()).expect("engine opens");
    engine
        .sql_blocking("CREATE TABLE t (id BIGINT, value DOUBLE, category VARCHAR)")
        .expect("table created");
    let start = Instant::now();
    let loaded = engine
        .block_on(engine.insert_batches("mindsdb", "t", data))
        .expect("rows load");
    let load_s = start.elapsed().as_secs_f64();
    assert_eq!(loaded, rows);
    drop(engine);
    let file_mb = std::fs::metadata(&path)
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0);

    // Warm: the engine keeps decoded chunks in its cache between queries (the default).
    let engine = Engine::open(&path, Config::default()).expect("engine reopens");
    // A chunk enters the cache the second time it is read, so the second query is cold too.
    let cold_ms = time_query(&engine);
    let second_ms = time_query(&engine);
    let warm: Vec<f64> = (0..runs).map(|_| time_query(&engine)).collect();
    drop(engine);

    // No chunk cache: every query decodes every chunk from redb.
    let mut config = Config::default();
    config.storage.batch_cache_mb = Some(0);
    let engine = Engine::open(&path, config).expect("engine reopens");
    let uncached: Vec<f64> = (0..uncached_runs.unwrap_or(runs))
        .map(|_| time_query(&engine))
        .collect();

    let report = serde_json::json!({
        "engine": "mindlite",
        "rows": rows,
        "load_s": load_s,
        "file_mb": file_mb,
        "first_query_ms": cold_ms,
        "second_query_ms": second_ms,
        "warm_median_ms": median(warm.clone()),
        "warm_runs_ms": warm,
        "uncached_median_ms": median(uncached.clone()),
        "uncached_runs_ms": uncached,
    });
    println!("{report}");
}
