//! mindlite embedded in a Rust program: open a database file, create a table, insert rows with
//! parameters, read a result as Arrow record batches, then stream another as JSON Lines without
//! holding it in memory.
//!
//! `cargo run -p mindlite-quickstart -- [FILE]` (default: a new file in the system's temporary
//! directory, removed at the end).

use std::io::Write;

use mindlite::arrow::array::{Array, Int64Array, StringArray};
use mindlite::arrow::compute::cast;
use mindlite::arrow::datatypes::DataType;
use mindlite::{Config, Engine, QueryRequest, WireFormat, WireStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, temporary) = match std::env::args().nth(1) {
        Some(path) => (std::path::PathBuf::from(path), false),
        None => (
            std::env::temp_dir().join(format!("mindlite-quickstart-{}.redb", std::process::id())),
            true,
        ),
    };

    // One file holds every table; the engine is cheap to clone and safe to share across threads.
    let engine = Engine::open(&path, Config::default())?;
    engine.sql_blocking("CREATE TABLE IF NOT EXISTS cities (name VARCHAR, population BIGINT)")?;

    // Values travel as parameters, never spliced into the SQL text.
    for (name, population) in [
        ("Lisbon", 545_000_i64),
        ("Porto", 232_000),
        ("Braga", 193_000),
    ] {
        let insert = QueryRequest::new("INSERT INTO cities VALUES (:name, :population)")
            .with_param("name", name.into())
            .with_param("population", population.into());
        engine.block_on(engine.query_blocking(insert).collect())?;
    }

    // A whole result as Arrow record batches.
    let request = QueryRequest::new(
        "SELECT name, population FROM cities WHERE population > :min ORDER BY population DESC",
    )
    .with_param("min", 200_000_i64.into());
    let rows = engine.block_on(engine.query_blocking(request).collect())?;
    println!("{} cities over 200,000:", rows.num_rows());
    for batch in &rows.batches {
        // Text may come back as any of Arrow's string layouts; a cast gives the plain one.
        let names = cast(batch.column(0), &DataType::Utf8)?;
        let names = names
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or("name is not text")?;
        let populations = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("population is not BIGINT")?;
        for row in 0..batch.num_rows() {
            println!("  {} {}", names.value(row), populations.value(row));
        }
    }

    // A result streamed in MindsDB's JSON Lines format, one piece at a time: a result of any
    // size passes through a small, bounded amount of memory.
    let result = engine.query_blocking(QueryRequest::new(
        "SELECT name, population * 2 AS doubled FROM cities ORDER BY name",
    ));
    let mut stream = WireStream::new(result, WireFormat::JsonLines);
    let mut out = std::io::stdout().lock();
    while let Some(piece) = engine.block_on(stream.next_chunk()) {
        out.write_all(&piece)?;
    }
    out.flush()?;

    // A bad statement is an error value naming what was wrong, never a panic.
    if let Err(error) = engine.sql_blocking("SELECT * FROM towns") {
        println!("error: {error}");
    }

    engine.close();
    if temporary {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
