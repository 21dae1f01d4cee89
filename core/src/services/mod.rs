//! The services: what the engine does with the catalog's records. Each uses the catalog, the
//! store and the foundation below it, never the engine above.
//!
//! - `llm`: the OpenAI-compatible chat client every LLM call goes through;
//! - `embeddings`: how knowledge bases' texts become vectors: the OpenAI-compatible
//!   `/embeddings` client, or `sentence_models`, models run in process;
//! - `chunking`: splitting documents into overlapping chunks at natural boundaries;
//! - `reranker`: a chat model scoring the chunks a knowledge base search found;
//! - `ml`: training (the built-in trainer and its background worker) and predictions;
//! - `connectors`: reaching datasources (PostgreSQL, directories of files);
//! - `delivery`: sending model-status callbacks;
//! - `files`: decoding uploaded files into tables;
//! - `parquet_pages`: what a Parquet file's pages decode to, checked before any is decoded.

pub(crate) mod chunking;
pub(crate) mod connectors;
pub(crate) mod delivery;
pub(crate) mod embeddings;
pub(crate) mod files;
pub(crate) mod llm;
pub(crate) mod ml;
pub(crate) mod parquet_pages;
pub(crate) mod reranker;
pub(crate) mod sentence_models;
