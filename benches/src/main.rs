//! Benchmarks of mindlite against its peers, one binary for all of them (each binary links all
//! of DataFusion, so one per benchmark cost a debug build over a gigabyte of disk). The shell
//! scripts beside this crate build it in release mode and run one benchmark each:
//!
//! ```text
//! mindlite-bench callbacks|datasources|groupby|index|kb|minilm|models|tpch [ARGS]
//! ```

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

mod callbacks;
mod datasources;
mod groupby;
mod index;
mod kb;
mod minilm;
mod models;
mod tpch;

fn main() {
    let benchmarks: [(&str, fn()); 8] = [
        ("callbacks", callbacks::main),
        ("datasources", datasources::main),
        ("groupby", groupby::main),
        ("index", index::main),
        ("kb", kb::main),
        ("minilm", minilm::main),
        ("models", models::main),
        ("tpch", tpch::main),
    ];
    let name = std::env::args().nth(1).unwrap_or_default();
    match benchmarks.iter().find(|(known, _)| *known == name) {
        Some((_, run)) => run(),
        None => {
            let names: Vec<&str> = benchmarks.iter().map(|(known, _)| *known).collect();
            eprintln!("usage: mindlite-bench {} [ARGS]", names.join("|"));
            std::process::exit(2);
        }
    }
}
