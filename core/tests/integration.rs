//! The engine's integration tests, one module per file, built as one test binary (each binary
//! links all of DataFusion; one per file cost gigabytes of disk and minutes of linking). Tests
//! that re-run this binary as a child process name their child test by its module path.

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

mod agents;
mod auth;
mod callbacks;
mod crash;
mod directory;
mod federation;
mod hosted;
mod indexes;
mod jobs;
mod knowledge_bases;
/// The knowledge base tests again, every knowledge base kept in PostgreSQL with pgvector:
/// the file is loaded twice on purpose.
#[allow(clippy::duplicate_mod)]
#[path = "knowledge_bases.rs"]
mod knowledge_bases_pgvector;
mod layers;
mod limits;
mod models;
mod mysql;
mod postgres;
mod sql;
mod sqllogictest;
mod storage_quota;
mod transactions;
mod wire;
