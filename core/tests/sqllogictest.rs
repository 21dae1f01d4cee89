//! SQLite's sqllogictest corpus run against the engine, with the label `mindlite`: every file
//! in `tests/sqllogictest/` (or in the directory `MINDLITE_SLT_DIR` names), each on its own
//! in-memory engine, through the `sqllogictest` crate's runner.
//!
//! Results are formatted as SQLite's own driver formats them: by the type letter the record
//! declares (`I` an integer, `R` a real to three decimals, `T` text; `NULL`, `(empty)` for an
//! empty string), so a value of another type reads as SQLite would read it.
//!
//! The test prints each file's pass rate and fails when a file passes fewer records than its
//! floor in `tests/sqllogictest/floors.txt` (a ratchet: raise a floor when the engine gets
//! better). `MINDLITE_SLT_FAILURES=n` prints the first `n` failures of each file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{self as types, DataType};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use mindlite::{Config, Engine};
use sqllogictest::{DBOutput, DefaultColumnType, QueryExpect, Record, RecordOutput, Runner};

/// The engine behind one file, and the type letters of the query being run.
struct Db {
    engine: Arc<Engine>,
    declared: Arc<Mutex<Vec<DefaultColumnType>>>,
}

#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

impl sqllogictest::DB for Db {
    type Error = Failed;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, Failed> {
        let collected = self
            .engine
            .sql_blocking(sql)
            .map_err(|e| Failed(e.to_string()))?;
        if collected.column_names.is_empty() {
            return Ok(DBOutput::StatementComplete(
                collected.affected_rows.unwrap_or(0),
            ));
        }
        let declared = self.declared.lock().unwrap().clone();
        let width = collected.column_names.len();
        let mut rows = Vec::with_capacity(collected.num_rows());
        for batch in &collected.batches {
            for row in 0..batch.num_rows() {
                let values = batch.columns().iter().enumerate().map(|(i, column)| {
                    let letter = declared.get(i).cloned().unwrap_or(DefaultColumnType::Any);
                    format_value(column, row, &letter)
                });
                rows.push(values.collect::<Vec<_>>());
            }
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }

    fn engine_name(&self) -> &str {
        "mindlite"
    }
}

/// A value as SQLite's driver prints it for a column declared `letter`.
fn format_value(column: &ArrayRef, row: usize, letter: &DefaultColumnType) -> String {
    if column.is_null(row) {
        return "NULL".into();
    }
    let value = Value::of(column, row);
    match letter {
        DefaultColumnType::Integer => value.as_integer().to_string(),
        DefaultColumnType::FloatingPoint => format!("{:.3}", value.as_real()),
        DefaultColumnType::Text | DefaultColumnType::Any => {
            let text = value.as_text();
            if text.is_empty() {
                return "(empty)".into();
            }
            // SQLite's driver shows unprintable characters as '@'.
            text.chars()
                .map(|c| if (' '..='~').contains(&c) { c } else { '@' })
                .collect()
        }
    }
}

/// One non-null value, as SQLite would hold it.
enum Value {
    Integer(i64),
    Real(f64),
    Text(String),
}

impl Value {
    fn of(column: &ArrayRef, row: usize) -> Value {
        macro_rules! int {
            ($t:ty) => {
                Value::Integer(column.as_primitive::<$t>().value(row) as i64)
            };
        }
        match column.data_type() {
            DataType::Boolean => Value::Integer(column.as_boolean().value(row) as i64),
            DataType::Int8 => int!(types::Int8Type),
            DataType::Int16 => int!(types::Int16Type),
            DataType::Int32 => int!(types::Int32Type),
            DataType::Int64 => int!(types::Int64Type),
            DataType::UInt8 => int!(types::UInt8Type),
            DataType::UInt16 => int!(types::UInt16Type),
            DataType::UInt32 => int!(types::UInt32Type),
            DataType::UInt64 => int!(types::UInt64Type),
            DataType::Float32 => {
                Value::Real(column.as_primitive::<types::Float32Type>().value(row) as f64)
            }
            DataType::Float64 => {
                Value::Real(column.as_primitive::<types::Float64Type>().value(row))
            }
            _ => {
                let options = FormatOptions::default();
                let text = ArrayFormatter::try_new(column.as_ref(), &options)
                    .map(|f| f.value(row).to_string())
                    .unwrap_or_default();
                match column.data_type() {
                    DataType::Decimal128(..) | DataType::Decimal256(..) => {
                        Value::Real(text.parse().unwrap_or(0.0))
                    }
                    _ => Value::Text(text),
                }
            }
        }
    }

    /// `sqlite3_column_int64`: reals truncate toward zero, text reads its leading integer.
    fn as_integer(&self) -> i64 {
        match self {
            Value::Integer(i) => *i,
            Value::Real(r) => *r as i64,
            Value::Text(t) => leading_number(t) as i64,
        }
    }

    /// `sqlite3_column_double`.
    fn as_real(&self) -> f64 {
        match self {
            Value::Integer(i) => *i as f64,
            Value::Real(r) => *r,
            Value::Text(t) => leading_number(t),
        }
    }

    /// `sqlite3_column_text`: reals as SQLite prints them (`%!.15g`).
    fn as_text(&self) -> String {
        match self {
            Value::Integer(i) => i.to_string(),
            Value::Real(r) if r.fract() == 0.0 && r.abs() < 1e15 => format!("{r:.1}"),
            Value::Real(r) => format!("{r}"),
            Value::Text(t) => t.clone(),
        }
    }
}

/// The number a text begins with (0 when it begins with none), as SQLite converts text.
fn leading_number(text: &str) -> f64 {
    let text = text.trim_start();
    let end = (1..=text.len())
        .rev()
        .find(|&end| text.is_char_boundary(end) && text[..end].parse::<f64>().is_ok())
        .unwrap_or(0);
    text[..end].parse().unwrap_or(0.0)
}

/// What one file gave.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    failures: Vec<String>,
}

fn run_file(path: &Path, show: usize) -> Tally {
    let engine = Arc::new(Engine::open_in_memory(Config::default()).expect("an in-memory engine"));
    let declared = Arc::new(Mutex::new(Vec::new()));
    let mut runner = Runner::new({
        let (engine, declared) = (Arc::clone(&engine), Arc::clone(&declared));
        move || {
            let db = Db {
                engine: Arc::clone(&engine),
                declared: Arc::clone(&declared),
            };
            async move { Ok::<_, Failed>(db) }
        }
    });
    runner.add_label("mindlite");
    // The corpus was generated with SQLite's runner hashing results of more than 8 values
    // (`-ht 8`); files that say `hash-threshold` override it.
    runner.with_hash_threshold(8);
    // Values are compared flattened: SQLite's files put one value on each line.
    runner.with_validator(|normalizer, actual, expected| {
        let actual: Vec<String> = actual.iter().flatten().map(normalizer).collect();
        let expected: Vec<String> = expected
            .iter()
            .flat_map(|line| line.split_ascii_whitespace())
            .map(|v| normalizer(&v.to_string()))
            .collect();
        actual
            .join(" ")
            .split_ascii_whitespace()
            .eq(expected.iter().map(String::as_str))
    });
    let script =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let records = sqllogictest::parse_with_name::<DefaultColumnType>(
        &for_the_crate(&script),
        path.display().to_string(),
    )
    .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
    let mut tally = Tally::default();
    for record in records {
        let counted = matches!(record, Record::Statement { .. } | Record::Query { .. });
        if let Record::Query {
            expected: QueryExpect::Results { types, .. },
            ..
        } = &record
        {
            *declared.lock().unwrap() = types.clone();
        }
        let halt = matches!(record, Record::Halt { .. });
        match runner.run(record) {
            Ok(RecordOutput::Nothing) if counted => {} // skipped for this engine
            Ok(_) if counted => tally.passed += 1,
            Ok(_) => {}
            Err(e) => {
                tally.failed += 1;
                if tally.failures.len() < show {
                    tally.failures.push(e.to_string());
                }
            }
        }
        if halt {
            break;
        }
    }
    tally
}

/// The script as the crate's parser reads it. SQLite's runner reads only the label of `skipif`
/// / `onlyif` lines (the corpus comments on why after it), and a condition before `halt` decides
/// whether the file stops there; the crate's parser refuses anything after the label and would
/// hand a halt's conditions to the next statement, so both are resolved here.
fn for_the_crate(script: &str) -> String {
    let mut out = String::with_capacity(script.len());
    let mut pending: Vec<(&str, &str)> = Vec::new();
    for line in script.lines() {
        let mut words = line.split_ascii_whitespace();
        match (words.next(), words.next()) {
            (Some(kind @ ("skipif" | "onlyif")), Some(label)) => pending.push((kind, label)),
            (Some("halt"), None) => {
                let applies = pending
                    .drain(..)
                    .all(|(kind, label)| (kind == "onlyif") == (label == "mindlite"));
                if applies {
                    out.push_str("halt\n");
                }
            }
            _ => {
                for (kind, label) in pending.drain(..) {
                    out.push_str(&format!("{kind} {label}\n"));
                }
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The corpus: `MINDLITE_SLT_DIR`, or the repository's copy.
fn corpus() -> (PathBuf, Vec<PathBuf>) {
    let dir = std::env::var_os("MINDLITE_SLT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/sqllogictest"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .collect();
    files.sort();
    (dir, files)
}

/// `floors.txt`: `<file name> <records that must pass>` per line.
fn floors(dir: &Path) -> BTreeMap<String, usize> {
    std::fs::read_to_string(dir.join("floors.txt"))
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let (name, floor) = line.split_once(' ')?;
            Some((name.to_string(), floor.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn sqllogictest_corpus() {
    let show = std::env::var("MINDLITE_SLT_FAILURES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let (dir, files) = corpus();
    let floors = floors(&dir);
    // Files run side by side, each on its own engine.
    let queue = Arc::new(Mutex::new(files));
    let results = Arc::new(Mutex::new(BTreeMap::new()));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (queue, results) = (Arc::clone(&queue), Arc::clone(&results));
            std::thread::spawn(move || loop {
                let Some(path) = queue.lock().unwrap().pop() else {
                    return;
                };
                let started = std::time::Instant::now();
                let tally = run_file(&path, show);
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                results
                    .lock()
                    .unwrap()
                    .insert(name, (tally, started.elapsed()));
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a file's run panicked");
    }
    let results = results.lock().unwrap();
    let (mut passed, mut total, mut short) = (0, 0, Vec::new());
    println!(
        "{:<40} {:>8} {:>8} {:>8} {:>7}",
        "file", "passed", "records", "rate", "secs"
    );
    for (name, (tally, took)) in results.iter() {
        let records = tally.passed + tally.failed;
        println!(
            "{name:<40} {:>8} {records:>8} {:>7.2}% {:>7.1}",
            tally.passed,
            100.0 * tally.passed as f64 / records.max(1) as f64,
            took.as_secs_f64()
        );
        for failure in &tally.failures {
            println!("    {}", failure.replace('\n', "\n    "));
        }
        passed += tally.passed;
        total += records;
        if let Some(&floor) = floors.get(name) {
            if tally.passed < floor {
                short.push(format!("{name}: {} passed, floor {floor}", tally.passed));
            }
        }
    }
    println!(
        "{:<40} {passed:>8} {total:>8} {:>7.2}%",
        "all",
        100.0 * passed as f64 / total.max(1) as f64
    );
    assert!(short.is_empty(), "below the floor: {short:?}");
}
