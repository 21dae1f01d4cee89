//! Every redb table of the file, in one place: the on-disk format at a glance. A table's rows
//! belong to the module named beside it, which reads and writes them; a change to any key or
//! value layout here is a change of [`FORMAT_VERSION`](super::FORMAT_VERSION).
//!
//! Keys start with the tenant (a user in the hosted edition, 0 in the local one), so one
//! tenant's rows are one key range. Names in keys are lower case. Values that are records are
//! JSON (serde), so a file can be read with any redb tool.

use redb::TableDefinition;

/// `meta` (store): `format_version` → the format this file was written in.
pub(crate) const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
/// `sequences` (store): a counter's name → its last value (ids are never reused).
pub(crate) const SEQUENCES: TableDefinition<&str, u64> = TableDefinition::new("sequences");

/// `projects` (projects): (tenant, name) → project record.
pub(crate) const PROJECTS: TableDefinition<(u64, &str), &str> = TableDefinition::new("projects");
/// `datasources` (datasources): (tenant, name) → datasource record (engine and parameters).
pub(crate) const DATASOURCES: TableDefinition<(u64, &str), &str> =
    TableDefinition::new("datasources");

/// `ml_engines` (ml_engines): (tenant, name) → ML engine record (its handler and parameters).
pub(crate) const ML_ENGINES: TableDefinition<(u64, &str), &str> =
    TableDefinition::new("ml_engines");

/// `settings` (settings): a server setting changed at run time → its value, as JSON.
pub(crate) const SETTINGS: TableDefinition<&str, &str> = TableDefinition::new("settings");

/// `variables` (variables): (tenant, name) → the value of `SET @name = …`, as JSON.
pub(crate) const VARIABLES: TableDefinition<(u64, &str), &str> = TableDefinition::new("variables");

/// `queries` (queries): (tenant, id) → a resumable query's record (its statement, how far it
/// came); the latest 1,000 of each tenant.
pub(crate) const QUERIES: TableDefinition<(u64, u64), &str> = TableDefinition::new("queries");

/// `jobs` (jobs): (tenant, project, name) → job record (its statements, schedule, next run and
/// `LAST` values).
pub(crate) const JOBS: TableDefinition<(u64, &str, &str), &str> = TableDefinition::new("jobs");
/// `job_queue` (jobs): (next run, tenant, job id) → `project\0name`: the jobs by when they run
/// next, so the scheduler reads only those due.
pub(crate) const JOB_QUEUE: TableDefinition<(u64, u64, u64), &str> =
    TableDefinition::new("job_queue");
/// `job_runs` (jobs): (tenant, run number) → one run's record (its job, start, end, error, the
/// statements run); the latest 1,000 of each tenant.
pub(crate) const JOB_RUNS: TableDefinition<(u64, u64), &str> = TableDefinition::new("job_runs");

/// `tables` (tables): (tenant, project, name) → table record.
pub(crate) const TABLES: TableDefinition<(u64, &str, &str), &str> = TableDefinition::new("tables");
/// `table_schemas` (tables): table id → its Arrow schema as an IPC stream without rows.
pub(crate) const TABLE_SCHEMAS: TableDefinition<u64, &[u8]> = TableDefinition::new("table_schemas");
/// `chunks` (tables): (table id, chunk id) → an LZ4-compressed Arrow IPC record batch.
pub(crate) const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
/// `chunk_order` (tables): (table id, position) → chunk id, the table's row order.
pub(crate) const CHUNK_ORDER: TableDefinition<(u64, u64), u64> =
    TableDefinition::new("chunk_order");

/// `index_entries` (indexes): (index id, the row's indexed values in Arrow's row format, chunk
/// id, row in the chunk) → nothing; one per indexed row.
pub(crate) const INDEX_ENTRIES: TableDefinition<(u64, &[u8], u64, u32), ()> =
    TableDefinition::new("index_entries");
/// `retired_chunks` (indexes): (index id, chunk id) → nothing: a chunk a rewrite replaced,
/// whose entries in that index take no key and are being removed.
pub(crate) const RETIRED_CHUNKS: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("retired_chunks");

/// `landings` (landing): landing id → what a statement writing ahead of its commit writes
/// into (JSON), until it is published or discarded.
pub(crate) const LANDINGS: TableDefinition<u64, &str> = TableDefinition::new("landings");
/// `landed_chunks` (landing): (landing id, chunk id) → its rows: the chunks a landing wrote.
pub(crate) const LANDED_CHUNKS: TableDefinition<(u64, u64), u64> =
    TableDefinition::new("landed_chunks");

/// `views` (views): (tenant, project, name) → view record (its query as SQL text).
pub(crate) const VIEWS: TableDefinition<(u64, &str, &str), &str> = TableDefinition::new("views");
/// `knowledge_bases` (knowledge_bases): (tenant, project, lower-cased name) → knowledge base
/// record; its chunks are a stored table of the database `{project}/kb`.
pub(crate) const KNOWLEDGE_BASES: TableDefinition<(u64, &str, &str), &str> =
    TableDefinition::new("knowledge_bases");

/// `kb_indexes` (kb_index): a knowledge base's chunk table id → the record of its search
/// indexes (JSON: the version stamp, the graph's counters, the words of its chunks).
pub(crate) const KB_INDEXES: TableDefinition<u64, &str> = TableDefinition::new("kb_indexes");
/// `kb_links` (kb_index): (chunk table id, page) → one page of the vector index's graph: its
/// nodes' levels, deletion marks and links.
pub(crate) const KB_LINKS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("kb_links");
/// `kb_vectors` (kb_index): (chunk table id, page, part) → one page's vectors, little-endian
/// `f32`s one vector after another, in parts of at most 1 MiB.
pub(crate) const KB_VECTORS: TableDefinition<(u64, u32, u32), &[u8]> =
    TableDefinition::new("kb_vectors");
/// `kb_postings` (kb_index): (chunk table id, word, block) → the chunks among nodes
/// `block · 65536 …` that hold the word: (node, count, chunk length) as varints, nodes ascending.
pub(crate) const KB_POSTINGS: TableDefinition<(u64, &str, u32), &[u8]> =
    TableDefinition::new("kb_postings");

/// `agents` (agents): (tenant, project, name) → agent record.
pub(crate) const AGENTS: TableDefinition<(u64, &str, &str), &str> = TableDefinition::new("agents");

/// A model version's key: (tenant, project, model name, version).
pub(crate) type VersionKey<'a> = (u64, &'a str, &'a str, u32);
/// `models` (models): version key → version record (status, settings, accuracies).
pub(crate) const MODELS: TableDefinition<VersionKey, &str> = TableDefinition::new("models");
/// `model_predictors` (models): version key → the trained predictor, serialized.
pub(crate) const PREDICTORS: TableDefinition<VersionKey, &[u8]> =
    TableDefinition::new("model_predictors");
/// `model_training_schemas` (models): version key → the schema of the rows a complete version
/// was trained on (an Arrow IPC stream, no rows).
pub(crate) const TRAINING_SCHEMAS: TableDefinition<VersionKey, &[u8]> =
    TableDefinition::new("model_training_schemas");
/// `model_status_outbox`: retired. Files written before 2026-11-25 kept a status-change event
/// per change here that nothing read; `models` deletes it when a file is opened.
pub(crate) const RETIRED_STATUS_OUTBOX: TableDefinition<u64, &str> =
    TableDefinition::new("model_status_outbox");

/// `callbacks` (callbacks): (tenant, callback id) → callback record (URL, filters, secret).
pub(crate) const CALLBACKS: TableDefinition<(u64, u64), &str> = TableDefinition::new("callbacks");
/// `callback_outbox` (callbacks): sequence number → a delivery still to make.
pub(crate) const OUTBOX: TableDefinition<u64, &str> = TableDefinition::new("callback_outbox");
/// `callback_deliveries` (callbacks): (tenant, callback id, attempt sequence) → one attempt's
/// log entry.
pub(crate) const DELIVERY_LOG: TableDefinition<(u64, u64, u64), &str> =
    TableDefinition::new("callback_deliveries");

/// `minds` (minds): (tenant, name) → mind record.
pub(crate) const MINDS: TableDefinition<(u64, &str), &str> = TableDefinition::new("minds");

/// `users` (users): user id → user record (name, plan, API keys).
pub(crate) const USERS: TableDefinition<u64, &str> = TableDefinition::new("users");
/// `user_names` (users): user name → user id.
pub(crate) const USER_NAMES: TableDefinition<&str, u64> = TableDefinition::new("user_names");
/// `api_keys` (users): SHA-256 of a key → (user id, key id).
pub(crate) const API_KEYS: TableDefinition<&[u8], (u64, u64)> = TableDefinition::new("api_keys");
/// `api_key_verifiers` (challenge): API key id → its verifier for MySQL logins, as JSON.
pub(crate) const API_KEY_VERIFIERS: TableDefinition<u64, &str> =
    TableDefinition::new("api_key_verifiers");
/// `auth_tokens` (auth): SHA-256 of a token → (tenant, expiry in Unix seconds).
pub(crate) const TOKENS: TableDefinition<&[u8], (u64, u64)> = TableDefinition::new("auth_tokens");

/// `quota_questions` (quotas): tenant → (window start in Unix seconds, questions asked in it).
pub(crate) const QUESTIONS: TableDefinition<u64, (u64, u64)> =
    TableDefinition::new("quota_questions");
/// `quota_model_calls` (quotas): tenant → (window start in Unix seconds, provider calls LLM
/// models made in it).
pub(crate) const MODEL_CALLS: TableDefinition<u64, (u64, u64)> =
    TableDefinition::new("quota_model_calls");

/// `storage_bytes` (storage): tenant → the bytes it stores (its tables' schemas, chunks and
/// index entries, its knowledge bases' index pages and postings), kept in step by every write.
pub(crate) const STORAGE_BYTES: TableDefinition<u64, u64> = TableDefinition::new("storage_bytes");
/// `storage_limits` (storage): plan name → the most bytes a user on it may store, written from
/// the configuration whenever the engine opens.
pub(crate) const STORAGE_LIMITS: TableDefinition<&str, u64> =
    TableDefinition::new("storage_limits");
