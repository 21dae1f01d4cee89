//! `mindlite-shell`: a small SQL shell. Opens a database file and runs SQL given as arguments,
//! or read from stdin one statement per `;`-terminated chunk, printing each result. A
//! transaction (`BEGIN`) may span statements; one left open at the end is rolled back.
//!
//! ```text
//! mindlite-shell [--config FILE] [--format table|json|jsonlines|sse] [PATH] [SQL ...]
//! ```

use std::io::{BufRead, Write};
use std::process::ExitCode;

use mindlite::arrow::util::pretty::pretty_format_batches_with_schema;
use mindlite::{Config, Engine, Outcome, QueryRequest, WireFormat, WireStream};

/// Statements keep to their memory budgets, as in the server.
#[global_allocator]
static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;

const USAGE: &str =
    "usage: mindlite-shell [--config FILE] [--format table|json|jsonlines|sse] [PATH] [SQL ...]
Opens PATH (default: the config's storage.path, ./mindlite-data/mindlite.redb) and runs each SQL
argument; without SQL arguments, reads statements from stdin.";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(message) => {
            eprintln!("mindlite-shell: {message}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let mut args = std::env::args().skip(1).peekable();
    let mut config_file = None;
    let mut format = None;
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "--config" => config_file = Some(args.next().ok_or("--config needs a file")?),
            "--format" => format = Some(args.next().ok_or("--format needs a value")?),
            _ => positional.push(arg),
        }
    }
    let config = match &config_file {
        Some(file) => Config::from_file(file.as_ref()),
        None => Ok(Config::default()),
    }
    .and_then(Config::with_env_overrides)
    .map_err(|e| e.to_string())?;
    let wire = match format.as_deref() {
        None | Some("table") => None,
        Some("json") => Some(WireFormat::Json),
        Some(other) => Some(WireFormat::parse(Some(other)).map_err(|e| e.to_string())?),
    };
    // The first positional argument is the database when it does not look like SQL.
    let path = match positional.first() {
        Some(first) if !first.contains(char::is_whitespace) => positional.remove(0),
        _ => config.storage.path.display().to_string(),
    };
    let engine = Engine::open(&path, config).map_err(|e| e.to_string())?;
    let mut db = None;
    let mut failed = false;
    let mut run_one = |sql: &str| {
        let mut request = QueryRequest::new(sql);
        request.context.db = db.clone();
        let result = engine.query_blocking(request);
        db = Some(result.context.db.clone());
        failed |= !print_result(&engine, result, wire);
    };
    if positional.is_empty() {
        let stdin = std::io::stdin();
        let mut buffer = String::new();
        for line in stdin.lock().lines() {
            let line = line.map_err(|e| format!("reading stdin: {e}"))?;
            buffer.push_str(&line);
            buffer.push('\n');
            if line.trim_end().ends_with(';') {
                run_one(&buffer);
                buffer.clear();
            }
        }
        if !buffer.trim().is_empty() {
            run_one(&buffer);
        }
    } else {
        for sql in &positional {
            run_one(sql);
        }
    }
    if engine.in_transaction() {
        eprintln!("mindlite-shell: the open transaction was rolled back (no COMMIT)");
        failed = true;
    }
    engine.close();
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints one result; returns false for an error.
fn print_result(engine: &Engine, result: mindlite::QueryResult, wire: Option<WireFormat>) -> bool {
    let is_error = matches!(result.outcome, Outcome::Error(_));
    let mut out = std::io::stdout().lock();
    if let Some(format) = wire {
        let mut stream = WireStream::new(result, format);
        while let Some(piece) = engine.block_on(stream.next_chunk()) {
            let _ = out.write_all(&piece);
        }
        if format == WireFormat::Json {
            let _ = out.write_all(b"\n");
        }
        return !is_error;
    }
    match engine.block_on(result.collect()) {
        Err(e) => {
            eprintln!("Error: {e}");
            false
        }
        Ok(rows) if rows.column_names.is_empty() => {
            match rows.affected_rows {
                Some(n) => println!("OK, {n} rows affected"),
                None => println!("OK"),
            }
            true
        }
        Ok(rows) => {
            let fields: Vec<_> = match rows.batches.first() {
                Some(batch) => batch
                    .schema()
                    .fields()
                    .iter()
                    .zip(&rows.column_names)
                    .map(|(f, name)| f.as_ref().clone().with_name(name.clone()))
                    .collect(),
                None => rows
                    .column_names
                    .iter()
                    .map(|n| {
                        mindlite::arrow::datatypes::Field::new(
                            n,
                            mindlite::arrow::datatypes::DataType::Utf8,
                            true,
                        )
                    })
                    .collect(),
            };
            let schema = std::sync::Arc::new(mindlite::arrow::datatypes::Schema::new(fields));
            match pretty_format_batches_with_schema(schema, &rows.batches) {
                Ok(table) => println!("{table}"),
                Err(e) => eprintln!("Error: {e}"),
            }
            true
        }
    }
}
