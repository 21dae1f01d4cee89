//! Engine configuration: one struct, loadable from TOML or JSON, defaults for everything, and
//! `MINDLITE_<SECTION>_<KEY>` environment variables that override the file (for example
//! `MINDLITE_HTTP_PORT=8080` or `MINDLITE_STORAGE_BATCH_CACHE_MB=0`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which edition the engine runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Edition {
    /// One implicit tenant; HTTP auth optional.
    #[default]
    Local,
    /// Many tenants, every request authenticated.
    Hosted,
}

/// Storage settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The redb file used by fronts that open "the default store" (the HTTP server, the shell).
    pub path: PathBuf,
    /// redb's page cache, in MiB. Default: 256 locally, 64 hosted.
    pub page_cache_mb: Option<u64>,
    /// Decoded table chunks kept in memory between queries, in MiB; 0 turns the cache off.
    /// Default: 512 locally, 64 hosted.
    pub batch_cache_mb: Option<u64>,
    /// Knowledge bases' search indexes (vectors and links) kept in memory between searches,
    /// in MiB; the one searched last always stays. Default: 4096 locally, 512 hosted.
    pub index_cache_mb: Option<u64>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("./mindlite-data/mindlite.redb"),
            page_cache_mb: None,
            batch_cache_mb: None,
            index_cache_mb: None,
        }
    }
}

/// Query execution settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Parallel partitions per query; 0 means one per CPU core.
    pub target_partitions: usize,
    /// Threads of the engine's runtime, which runs statements (and the HTTP server's
    /// connections); 0 means two per CPU core and at least 4. More threads than cores let the
    /// operating system share the CPU between a statement that computes for a long stretch
    /// (a large sort) and everyone else's short ones, instead of queueing them behind it; many
    /// more cost throughput and tail latency when the machine is busy (benches/hostile.sh).
    pub worker_threads: usize,
    /// Items one select list may have (SQLite's default is 2,000): planning a select list takes
    /// time that grows faster than its length.
    pub max_columns: usize,
    /// How deep a statement's expressions and queries may nest (DuckDB's
    /// `max_expression_depth`, SQLite's `SQLITE_MAX_EXPR_DEPTH`; both default to 1,000): every
    /// walk of a syntax tree or plan is recursive, so this bounds the stack they take. At most
    /// 1,000, which the engine's threads' stacks are sized for.
    pub max_expression_depth: usize,
    /// Threads that parse and plan statements (CPU work kept off the runtime's threads, which
    /// serve connections); 0 means two per CPU core and at least 4. A user's statements take at
    /// most half of them while others wait.
    pub planning_threads: usize,
    /// Rows per record batch inside DataFusion.
    pub batch_size: usize,
    /// The project a query runs in when its context names none.
    pub default_project: String,
    /// Memory for query operators (sorts, aggregations, joins) of all running statements
    /// together, in MiB; beyond it they spill to temporary files instead of growing. Default:
    /// 2048 locally, 256 hosted.
    pub memory_limit_mb: Option<u64>,
    /// Physical plans of repeated read queries kept for reuse until the next commit; 0 plans
    /// every query afresh.
    pub plan_cache_entries: usize,
    /// Seconds a statement may run, from its start to its last row; 0 is no limit. A request
    /// may ask for less, never more. Default: none locally, 300 in the hosted edition.
    pub statement_timeout_secs: Option<u64>,
    /// Largest result sent as one JSON document (`response_format` null), in MiB; a larger one
    /// is an error that points to the streaming formats. Default: 1024 locally, 64 hosted.
    pub max_document_mb: Option<u64>,
    /// Temporary-file space all running statements may use together (sorts and joins that
    /// spill, writes that stage their rows), in MiB. Default: 102400 locally, 10240 hosted.
    pub max_spill_mb: Option<u64>,
    /// Rows a write computes (CREATE TABLE AS, INSERT … SELECT, uploads) are staged before its
    /// short commit: in memory up to this many MiB, in a temporary file beyond.
    pub staging_memory_mb: u64,
    /// Memory one statement may hold at once, in MiB: everything allocated while working for
    /// it (operators, expression results, decoded files, training rows, parameter lists); over
    /// it the statement fails and writes nothing. 0 is no limit of its own. Enforced where
    /// `mindlite::TrackingAllocator` is the global allocator (the server, the C library and the
    /// Python module install it). Default: none locally, 512 hosted.
    pub statement_memory_mb: Option<u64>,
    /// The largest one value a function may make (`repeat`, `lpad`, `replace`, …), in MiB, as
    /// MySQL's `max_allowed_packet` bounds them: such a value is copied whole by each step that
    /// handles it. Default: 1024 locally, 64 hosted.
    pub max_value_mb: Option<u64>,
    /// Memory the whole process may hold before the statement that allocates more is stopped,
    /// in MiB; keeps what any caller does far from the kernel's out-of-memory killer. Default:
    /// three quarters of the machine's memory (or of the container's limit).
    pub process_memory_mb: Option<u64>,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            target_partitions: 0,
            worker_threads: 0,
            planning_threads: 0,
            max_columns: 4096,
            max_expression_depth: 1000,
            batch_size: 8192,
            default_project: "mindsdb".to_string(),
            memory_limit_mb: None,
            plan_cache_entries: 256,
            statement_timeout_secs: None,
            max_document_mb: None,
            max_spill_mb: None,
            staging_memory_mb: 64,
            statement_memory_mb: None,
            max_value_mb: None,
            process_memory_mb: None,
        }
    }
}

/// HTTP settings, read by the example server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Bind address.
    pub host: String,
    /// TCP port; MindsDB's is 47334.
    pub port: u16,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: u64,
    /// Largest accepted request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Seconds a kept-alive connection may wait for its next request (or go quiet in the
    /// middle of one) before it is closed.
    pub idle_timeout_secs: u64,
    /// Seconds a new connection has to send the first byte of its first request; also how
    /// long a kept-alive connection waits for its next one while the server is under pressure
    /// (half of `max_connections`, or of its address's share, open). Silent ones are closed.
    pub first_byte_timeout_secs: u64,
    /// Seconds a client has to send a whole request head once it started one (slow senders
    /// are cut off).
    pub head_timeout_secs: u64,
    /// Seconds a client has to send a whole request body.
    pub body_timeout_secs: u64,
    /// Connections open at once. A newcomer past it takes the place of a connection waiting
    /// for its next request (the address holding the most first); with none waiting it is
    /// refused with 503.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 client's /64) may have open at once; past it a
    /// newcomer takes the place of that address's own longest-waiting idle connection, or is
    /// refused with 429. Default: a quarter of `max_connections`, at least 64 (or all of them
    /// when fewer).
    pub max_connections_per_address: Option<usize>,
    /// Seconds a response write may make no progress (a client that does not read) before the
    /// connection is closed, and the statement behind a streamed result stopped.
    pub write_timeout_secs: u64,
    /// Names the `Host` header may give (with or without a port; `name:port` allows that port
    /// only); a request naming another is refused with 403, so a web page cannot reach the
    /// server under a name of its own (DNS rebinding). `"*"` allows any. Empty: `localhost`,
    /// `127.0.0.1`, `[::1]` and the bind address; `"*"` in the hosted edition.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example.com`, as browsers send them in `Origin`) whose pages
    /// may call the server; a request carrying another `Origin` is refused with 403. `"*"`
    /// allows any. Empty by default: no web page may.
    pub allowed_origins: Vec<String>,
    /// Request bodies being received at once may hold this many MiB together; a body that
    /// does not fit waits briefly, then gets 503. Default: 256 locally, 128 hosted.
    pub max_buffered_body_mb: Option<u64>,
    /// Requests per minute one client address may make to the routes that need no
    /// credentials (login, logout) and with credentials that fail; more get 429.
    /// Default: 600 locally, 120 hosted.
    pub unauthenticated_per_minute: Option<u32>,
    /// Where the Minds API (`/minds`, `/datasources`, `/chat/completions`, `/responses`) is
    /// mounted in the hosted edition.
    pub minds_prefix: String,
    /// Whether MindsDB's `company-id` / `user-id` request headers choose the tenant (hosted
    /// edition only). Turn it on only behind a proxy that authenticates every request and sets
    /// those headers itself: whoever can send them acts as any tenant. Off, a request carrying
    /// them is refused (403), so a proxy set up wrong fails loudly.
    pub trusted_tenant_headers: bool,
}

/// The MySQL wire protocol door of the server (`mysql`, pymysql, BI tools connect there as
/// to MindsDB's port 47335).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlConfig {
    /// Bind address; empty: `http.host`'s.
    pub host: String,
    /// TCP port; MindsDB's is 47335. 0: no MySQL door.
    pub port: u16,
    /// Connections open at once; a newcomer past it takes the place of an idle connection (the
    /// address holding the most first), and with none idle is refused (error 1040).
    pub max_connections: usize,
    /// Connections one client address (an IPv6 client's /64) may have open at once. Default:
    /// a quarter of `max_connections`, at least 64 (or all of them when fewer).
    pub max_connections_per_address: Option<usize>,
    /// Seconds a new connection has to log in.
    pub handshake_timeout_secs: u64,
    /// Seconds a connection may wait for its next command (MySQL's `wait_timeout`).
    pub idle_timeout_secs: u64,
    /// Seconds a client has to send a whole command once it started one.
    pub command_timeout_secs: u64,
    /// Seconds a write to the client may make no progress (a client that does not read)
    /// before the connection is closed and its statement stopped.
    pub write_timeout_secs: u64,
    /// The largest command a client may send, in MiB (MySQL's `max_allowed_packet`),
    /// including a prepared statement's long data.
    pub max_packet_mb: u64,
    /// Prepared statements one connection may hold at once.
    pub max_prepared_statements: usize,
}

impl Default for MysqlConfig {
    fn default() -> Self {
        MysqlConfig {
            host: String::new(),
            port: 47335,
            max_connections: 1024,
            max_connections_per_address: None,
            handshake_timeout_secs: 10,
            idle_timeout_secs: 28_800,
            command_timeout_secs: 120,
            write_timeout_secs: 30,
            max_packet_mb: 64,
            max_prepared_statements: 1024,
        }
    }
}

impl MysqlConfig {
    /// Connections one client address may have open at once (see the field).
    pub fn max_connections_per_address(&self) -> usize {
        let total = self.max_connections.max(1);
        self.max_connections_per_address
            .unwrap_or((total / 4).max(total.min(64)))
            .min(total)
    }
}

/// The server's MCP (Model Context Protocol) endpoint on the HTTP port: `/mcp/` (streamable
/// HTTP) and `/mcp/sse` (the older SSE transport), where AI assistants query the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Whether the endpoint is served; off, its paths are 404.
    pub enabled: bool,
    /// The most bytes one answer carries, in KiB of JSON, whole. A larger result is cut after
    /// the last row that fits, with a note saying so: an assistant's context holds little, and
    /// the rest would only be sent to be dropped.
    pub max_result_kb: u64,
    /// Sessions remembered at once, over all users; a new one past it ends the least recently
    /// used session of the user holding the most (its client is told to start a new one).
    pub max_sessions: usize,
    /// Sessions one user may have at once; a new one past it ends that user's least recently
    /// used.
    pub max_sessions_per_user: usize,
    /// Seconds a session may go unused before it ends.
    pub session_idle_timeout_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            enabled: true,
            max_result_kb: 1024,
            max_sessions: 4096,
            max_sessions_per_user: 64,
            session_idle_timeout_secs: 3600,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            host: "127.0.0.1".to_string(),
            port: 47334,
            max_body_bytes: 64 * 1024 * 1024,
            max_header_bytes: 64 * 1024,
            idle_timeout_secs: 60,
            first_byte_timeout_secs: 10,
            head_timeout_secs: 10,
            body_timeout_secs: 120,
            max_connections: 1024,
            max_connections_per_address: None,
            write_timeout_secs: 30,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_buffered_body_mb: None,
            unauthenticated_per_minute: None,
            minds_prefix: "/api/v1".to_string(),
            trusted_tenant_headers: false,
        }
    }
}

/// Authentication settings (local edition: off unless username and password are both set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Login name; empty means HTTP auth is off.
    pub username: String,
    /// Password; empty means HTTP auth is off.
    pub password: String,
    /// How long a login token stays valid, in seconds.
    pub token_lifetime_secs: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            username: String::new(),
            password: String::new(),
            token_lifetime_secs: 31 * 24 * 3600,
        }
    }
}

/// The default model: what agents use when they are created without one, and where model
/// settings they leave out come from. Any OpenAI-compatible endpoint serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The provider name recorded on agents (`openai`, `ollama`, …); all speak OpenAI's protocol.
    pub provider: String,
    /// The model to ask.
    pub model_name: String,
    /// The endpoint's base URL, up to and including `/v1`.
    pub base_url: String,
    /// The bearer key sent to the endpoint; empty sends none.
    pub api_key: String,
    /// Seconds one provider call may take, connecting and reading included.
    pub timeout_secs: u64,
    /// Largest reply read from a provider, in KiB (streamed or not); a larger one fails the call.
    pub max_reply_kb: u64,
    /// Tool calls one reply may make; more (or a tool-call index at or past it) fail the call.
    pub max_tool_calls: usize,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: "openai".to_string(),
            model_name: "gpt-4o".to_string(),
            base_url: "https://api.openai.com/v1".to_string(),
            api_key: String::new(),
            timeout_secs: 60,
            max_reply_kb: 4096,
            max_tool_calls: 16,
        }
    }
}

/// The default embedding model: what knowledge bases use when they are created without one,
/// and where settings they leave out come from. Any OpenAI-compatible `/embeddings` endpoint
/// serves (OpenAI, Ollama, vLLM, llama.cpp servers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// The provider name recorded on knowledge bases; all speak OpenAI's protocol.
    pub provider: String,
    /// The model to ask.
    pub model_name: String,
    /// The endpoint's base URL, up to and including `/v1`.
    pub base_url: String,
    /// The bearer key sent to the endpoint; empty sends none.
    pub api_key: String,
    /// Seconds one provider call may take, connecting and reading included.
    pub timeout_secs: u64,
    /// Texts embedded in one request (providers cap it: OpenAI at 2048).
    pub batch_size: usize,
    /// Largest reply read from a provider, in KiB; a larger one fails the call.
    pub max_reply_kb: u64,
    /// Most dimensions a vector may have; a provider sending more fails the call.
    pub max_dimensions: usize,
    /// The folder of models run in process (`provider = "local"`): each model a
    /// sentence-transformers folder (`config.json`, `model.safetensors`, `vocab.txt`) named by
    /// its folder's name. Empty: none (the local edition still takes a folder's absolute path).
    pub models_dir: String,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            provider: "openai".to_string(),
            model_name: "text-embedding-3-small".to_string(),
            base_url: "https://api.openai.com/v1".to_string(),
            api_key: String::new(),
            timeout_secs: 60,
            batch_size: 256,
            max_reply_kb: 65536,
            max_dimensions: 8192,
            models_dir: String::new(),
        }
    }
}

/// Limits of the agent loop and of its SQL sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Model calls per question before the agent gives up.
    pub max_steps: usize,
    /// Rows a tool query may return to the model; more are cut off and the model is told so.
    pub row_limit: usize,
    /// Seconds a tool query may run.
    pub sql_timeout_secs: u64,
    /// Sample rows per table shown to the model with the schema.
    pub sample_rows: usize,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            max_steps: 8,
            row_limit: 100,
            sql_timeout_secs: 10,
            sample_rows: 3,
        }
    }
}

/// One plan tier's quotas. A limit of 0 allows none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanConfig {
    /// Minds a user may have at once.
    pub max_minds: u64,
    /// Datasources a user may have at once (`CREATE DATABASE … ENGINE` and the Minds API alike).
    pub max_datasources: u64,
    /// Questions (chat completions, responses, agent completions) per window.
    pub questions_per_window: u64,
    /// The question window's length in seconds; it starts with the first question after the
    /// previous window ended.
    pub window_secs: u64,
    /// Whether the tier may register model-status callbacks.
    pub callbacks: bool,
    /// Provider calls made for a user per window: one per row an LLM-backed model predicts, per
    /// request to a knowledge base's embedding model, per chunk its reranker scores.
    pub model_calls_per_window: u64,
    /// Statements a user may have running at once (a streamed result runs until it is read).
    pub max_running_statements: u64,
    /// Models a user may have training at once.
    pub max_running_trainings: u64,
    /// Callbacks a user may have registered.
    pub max_callbacks: u64,
    /// Deliveries waiting to be sent for one user; events beyond it are logged as not queued.
    pub max_pending_deliveries: u64,
    /// Memory a user's running statements may hold together, in MiB (each also within
    /// `query.statement_memory_mb`); over it the statement that allocates fails. 0 is no cap.
    pub max_memory_mb: u64,
    /// Bytes a user may store, in MiB: its tables' and uploaded files' schemas, chunks and
    /// index entries, its knowledge bases' chunks and indexes. A write that would pass it
    /// fails and writes nothing; deleting is always allowed.
    pub max_storage_mb: u64,
    /// Temporary-file space a user's running statements may use together (their share of
    /// `query.max_spill_mb`: sorts and joins that spill, writes that stage their rows), in MiB.
    pub max_spill_mb: u64,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            max_minds: 3,
            max_datasources: 3,
            questions_per_window: 100,
            window_secs: 24 * 3600,
            callbacks: false,
            model_calls_per_window: 1_000,
            max_running_statements: 4,
            max_running_trainings: 1,
            max_callbacks: 10,
            max_pending_deliveries: 100,
            // With the server's own ~160 MiB (code, caches), one free user at its limit keeps
            // a small server near 512 MiB (the hostile benchmark in docs/benchmarks.md: 481-552 MiB).
            max_memory_mb: 256,
            max_storage_mb: 1024,
            max_spill_mb: 1024,
        }
    }
}

/// Hosted edition settings: plan tiers and the tier new users get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostedConfig {
    /// The tier of a user created without one; must name one of `plans`.
    pub default_plan: String,
    /// The tiers by name. A config that sets any replaces all of the defaults, which are
    /// `free` (3 minds, 3 datasources, 100 questions and 1,000 model calls a day, 4 statements
    /// and 1 training at once, no callbacks, 256 MiB of memory, 1 GiB stored, 1 GiB of temporary files) and `pro`
    /// (50, 50, 10,000 and 100,000 a day, 16 and 4 at once, 100 callbacks with up to 1,000
    /// deliveries pending, 4 GiB of memory, 100 GiB stored, 4 GiB of temporary files).
    pub plans: BTreeMap<String, PlanConfig>,
}

impl Default for HostedConfig {
    fn default() -> Self {
        let pro = PlanConfig {
            max_minds: 50,
            max_datasources: 50,
            questions_per_window: 10_000,
            window_secs: 24 * 3600,
            callbacks: true,
            model_calls_per_window: 100_000,
            max_running_statements: 16,
            max_running_trainings: 4,
            max_callbacks: 100,
            max_pending_deliveries: 1_000,
            max_memory_mb: 4096,
            max_storage_mb: 102_400,
            max_spill_mb: 4096,
        };
        HostedConfig {
            default_plan: "free".to_string(),
            plans: BTreeMap::from([
                ("free".to_string(), PlanConfig::default()),
                ("pro".to_string(), pro),
            ]),
        }
    }
}

/// Model-status callbacks (hosted edition): the attempt settings a registration leaves out,
/// and how many deliveries may be in flight at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbacksConfig {
    /// Attempts per event before it is given up.
    pub count: u32,
    /// Seconds between attempts.
    pub interval_secs: u32,
    /// Seconds an attempt may take, connecting to the last byte read.
    pub http_timeout_secs: u32,
    /// Deliveries in flight at once, over all callbacks.
    pub max_concurrent_deliveries: usize,
    /// Deliveries in flight at once for one user, so one user's slow receivers leave slots
    /// for everyone else's.
    pub max_concurrent_deliveries_per_user: usize,
    /// Attempts kept in each callback's delivery log (the newest; older ones are dropped).
    pub log_entries: usize,
}

impl Default for CallbacksConfig {
    fn default() -> Self {
        CallbacksConfig {
            count: 3,
            interval_secs: 10,
            http_timeout_secs: 5,
            max_concurrent_deliveries: 16,
            max_concurrent_deliveries_per_user: 4,
            log_entries: 1000,
        }
    }
}

/// Where the engine may connect: every outbound connection (LLM providers, callback receivers,
/// PostgreSQL) resolves its host and checks each address here when it connects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Whether addresses inside the operator's network are refused: loopback, private,
    /// link-local, carrier-grade NAT, unique-local, multicast, unspecified and reserved ranges
    /// (and IPv6 forms that embed them). Default: allowed locally, refused hosted.
    pub deny_internal: Option<bool>,
    /// Reachable even when internal addresses are refused: networks (`10.1.0.0/16`), addresses
    /// (`127.0.0.1`, `::1`), an address with a port (`127.0.0.1:11434`, `[::1]:8080`: that port
    /// only, for URLs and hosts that write the address), or host names (`ollama.internal`, any
    /// address it resolves to; `ollama.internal:11434`, that port only). The configured
    /// `llm.base_url` and `embedding.base_url` are always reachable at their URLs' path
    /// prefixes; other paths on their hosts are judged like any URL.
    pub allow: Vec<String>,
    /// Never reachable, in either edition, whatever `allow` says: networks or addresses (a host
    /// name would be resolved by a DNS its owner controls, so it cannot be denied).
    pub deny: Vec<String>,
}

/// Limits on what a datasource's server may send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatasourcesConfig {
    /// Largest single protocol message (a row, an error) accepted from a PostgreSQL server, in
    /// MiB; a larger one ends the statement.
    pub max_message_mb: u64,
    /// Tables a datasource may list (`SHOW TABLES`, agents' prompts); more end the listing.
    pub max_tables: usize,
}

impl Default for DatasourcesConfig {
    fn default() -> Self {
        DatasourcesConfig {
            max_message_mb: 64,
            max_tables: 100_000,
        }
    }
}

/// How jobs are scheduled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    /// How often the scheduler looks for jobs due, in milliseconds (at least 10).
    pub poll_interval_ms: u64,
    /// Jobs one user may have. Default: 10,000 locally, 100 hosted.
    pub max_jobs: Option<u64>,
    /// The shortest period a job may repeat at, in seconds. Default: 1 locally, 60 hosted.
    pub min_period_secs: Option<u64>,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            poll_interval_ms: 1000,
            max_jobs: None,
            min_period_secs: None,
        }
    }
}

/// Limits on uploaded files, checked while they are read (before anything is stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Rows one file may hold. Default: 1,000,000,000 locally, 10,000,000 hosted.
    pub max_rows: Option<u64>,
    /// Decoded size one file may have (its columns in memory, counted batch by batch), in MiB;
    /// a small compressed file that expands beyond it is refused. Default: 65536 locally, 1024 hosted.
    pub max_decoded_mb: Option<u64>,
    /// Whether `PUT /api/files/{name}` may fetch a file from a URL (`"source_type": "url"`,
    /// MindsDB's `url_file_upload.enabled`); where it may connect is the egress policy's to
    /// say. Default: on.
    pub url_upload: Option<bool>,
}

/// How knowledge bases index and search their chunks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KnowledgeBasesConfig {
    /// Links per chunk in the vector index (HNSW's M; twice as many on its lowest level),
    /// fixed for a knowledge base when its index is built by its first insert.
    pub hnsw_m: usize,
    /// Candidates weighed when a chunk's links are chosen (HNSW's efConstruction): more
    /// builds a better graph, more slowly. Fixed like `hnsw_m`.
    pub hnsw_ef_construction: usize,
    /// Candidates a search walks through (HNSW's efSearch): more finds more of the true
    /// nearest chunks, more slowly.
    pub ef_search: usize,
    /// A search among fewer chunks than this (after metadata conditions) computes every
    /// distance rather than walking the index, so its ranking is exact.
    pub exact_below: usize,
    /// Chunks one document may split into: a knowledge base's `chunk_size` is the user's, and
    /// a small one over a long text would otherwise make millions of chunks (and embedding
    /// requests) before anything refused it.
    pub max_chunks_per_document: usize,
    /// A PostgreSQL server with pgvector (`postgresql://user:password@host:port/database`)
    /// where knowledge bases created without `storage` keep their chunks, each in a table of
    /// its own that goes when it is dropped (MindsDB's `knowledge_bases.storage = pgvector`).
    /// Empty: they live in the engine's file. The hosted edition keeps them in the file all
    /// the same: there a user's bytes count against their plan's `max_storage_mb`, which the
    /// operator's server would escape.
    pub storage_url: String,
}

impl Default for KnowledgeBasesConfig {
    fn default() -> Self {
        KnowledgeBasesConfig {
            hnsw_m: 16,
            hnsw_ef_construction: 128,
            ef_search: 64,
            exact_below: 10_000,
            max_chunks_per_document: 100_000,
            storage_url: String::new(),
        }
    }
}

/// The engine configuration. Every field has a default, so `Config::default()` is a working setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `local` or `hosted`.
    pub edition: Edition,
    /// Storage settings.
    pub storage: StorageConfig,
    /// Query execution settings.
    pub query: QueryConfig,
    /// HTTP settings for the example server.
    pub http: HttpConfig,
    /// The server's MySQL wire protocol door.
    pub mysql: MysqlConfig,
    /// The server's MCP endpoint.
    pub mcp: McpConfig,
    /// Authentication settings.
    pub auth: AuthConfig,
    /// The default model for agents.
    pub llm: LlmConfig,
    /// The default embedding model of knowledge bases.
    pub embedding: EmbeddingConfig,
    /// How knowledge bases index and search.
    pub knowledge_bases: KnowledgeBasesConfig,
    /// Agent loop and sandbox limits.
    pub agents: AgentsConfig,
    /// Users' plan tiers (hosted edition).
    pub hosted: HostedConfig,
    /// Model-status callbacks (hosted edition).
    pub callbacks: CallbacksConfig,
    /// Where outbound connections may go.
    pub egress: EgressConfig,
    /// Limits on datasources' answers.
    pub datasources: DatasourcesConfig,
    /// Limits on uploaded files.
    pub files: FilesConfig,
    /// How jobs are scheduled.
    pub jobs: JobsConfig,
}

impl Config {
    /// Parses a config from TOML or JSON text (JSON when the text starts with `{`).
    /// Unknown keys are errors, so a typo never silently falls back to a default.
    pub fn parse(text: &str) -> Result<Config> {
        if text.trim_start().starts_with('{') {
            serde_json::from_str(text)
                .map_err(|e| Error::invalid(format!("invalid JSON config: {e}")))
        } else {
            toml::from_str(text).map_err(|e| Error::invalid(format!("invalid TOML config: {e}")))
        }
    }

    /// Checks what the types cannot: the default plan tier exists, and no window is zero long.
    pub fn validate(&self) -> Result<()> {
        if self.http.trusted_tenant_headers && !self.is_hosted() {
            return Err(Error::invalid(
                "http.trusted_tenant_headers needs edition = \"hosted\": the local edition has one tenant",
            ));
        }
        let hosted = &self.hosted;
        if !hosted.plans.contains_key(&hosted.default_plan) {
            let known: Vec<&str> = hosted.plans.keys().map(String::as_str).collect();
            return Err(Error::invalid(format!(
                "hosted.default_plan '{}' is not one of the plans ({})",
                hosted.default_plan,
                known.join(", ")
            )));
        }
        let callbacks = &self.callbacks;
        for (key, value) in [
            ("count", u64::from(callbacks.count)),
            ("interval_secs", u64::from(callbacks.interval_secs)),
            ("http_timeout_secs", u64::from(callbacks.http_timeout_secs)),
            (
                "max_concurrent_deliveries",
                callbacks.max_concurrent_deliveries as u64,
            ),
            ("log_entries", callbacks.log_entries as u64),
        ] {
            if value == 0 {
                return Err(Error::invalid(format!(
                    "callbacks.{key} must be at least 1"
                )));
            }
        }
        let depth = self.query.max_expression_depth;
        if !(16..=1000).contains(&depth) {
            return Err(Error::invalid(format!(
                "query.max_expression_depth must be between 16 and 1000 (the engine's stacks are sized for 1000), not {depth}"
            )));
        }
        if self.query.max_columns == 0 {
            return Err(Error::invalid("query.max_columns must be at least 1"));
        }
        if let Some((name, _)) = hosted.plans.iter().find(|(_, p)| p.window_secs == 0) {
            return Err(Error::invalid(format!(
                "hosted.plans.{name}.window_secs must be at least 1"
            )));
        }
        for (key, value) in [
            ("http.max_connections", self.http.max_connections as u64),
            (
                "http.max_connections_per_address",
                self.max_connections_per_address() as u64,
            ),
            (
                "http.first_byte_timeout_secs",
                self.http.first_byte_timeout_secs,
            ),
            ("http.write_timeout_secs", self.http.write_timeout_secs),
            ("http.head_timeout_secs", self.http.head_timeout_secs),
            ("http.body_timeout_secs", self.http.body_timeout_secs),
            ("http.max_buffered_body_mb", self.max_buffered_body_bytes()),
            ("llm.max_reply_kb", self.llm.max_reply_kb),
            ("llm.max_tool_calls", self.llm.max_tool_calls as u64),
            (
                "callbacks.max_concurrent_deliveries_per_user",
                callbacks.max_concurrent_deliveries_per_user as u64,
            ),
            (
                "datasources.max_message_mb",
                self.datasources.max_message_mb,
            ),
            ("datasources.max_tables", self.datasources.max_tables as u64),
            (
                "knowledge_bases.ef_search",
                self.knowledge_bases.ef_search as u64,
            ),
        ] {
            if value == 0 {
                return Err(Error::invalid(format!("{key} must be at least 1")));
            }
        }
        for host in &self.http.allowed_hosts {
            check_allowed_host(host)?;
        }
        for origin in &self.http.allowed_origins {
            check_allowed_origin(origin)?;
        }
        crate::egress::Rules::parse(&self.egress.allow, "egress.allow")?;
        crate::egress::Rules::parse_addresses(&self.egress.deny, "egress.deny")?;
        Ok(())
    }

    /// Whether this is the hosted edition.
    pub(crate) fn is_hosted(&self) -> bool {
        self.edition == Edition::Hosted
    }

    /// The edition's default when `value` is not set: `local` or `hosted`.
    fn or_edition<T: Copy>(&self, value: Option<T>, local: T, hosted: T) -> T {
        value.unwrap_or(if self.is_hosted() { hosted } else { local })
    }

    /// How long a statement may run (`query.statement_timeout_secs`); `None` for no limit.
    pub fn statement_timeout(&self) -> Option<Duration> {
        let secs = self.or_edition(self.query.statement_timeout_secs, 0, 300);
        (secs > 0).then(|| Duration::from_secs(secs))
    }

    /// How long a statement may run when its request asks for `requested`: the request's
    /// limit where it is smaller than the configured one, else the configured one.
    pub fn statement_limit(&self, requested: Option<Duration>) -> Option<Duration> {
        match (self.statement_timeout(), requested) {
            (Some(configured), Some(asked)) => Some(configured.min(asked)),
            (configured, asked) => configured.or(asked),
        }
    }

    /// Threads of the engine's runtime (`query.worker_threads`).
    pub fn worker_threads(&self) -> usize {
        match self.query.worker_threads {
            0 => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                (2 * cores).max(4)
            }
            n => n,
        }
    }

    /// Threads of the planning pool (`query.planning_threads`).
    pub fn planning_threads(&self) -> usize {
        match self.query.planning_threads {
            0 => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                (2 * cores).max(4)
            }
            n => n,
        }
    }

    /// The largest JSON document a result may become (`query.max_document_mb`), in bytes.
    pub fn max_document_bytes(&self) -> u64 {
        mib(self.or_edition(self.query.max_document_mb, 1024, 64))
    }

    /// redb's page cache (`storage.page_cache_mb`), in bytes.
    pub fn page_cache_bytes(&self) -> u64 {
        mib(self.or_edition(self.storage.page_cache_mb, 256, 64))
    }

    /// The decoded-chunk cache (`storage.batch_cache_mb`), in bytes.
    pub fn batch_cache_bytes(&self) -> u64 {
        mib(self.or_edition(self.storage.batch_cache_mb, 512, 64))
    }

    /// The knowledge bases' index cache (`storage.index_cache_mb`), in bytes.
    pub fn index_cache_bytes(&self) -> u64 {
        mib(self.or_edition(self.storage.index_cache_mb, 4096, 512))
    }

    /// Memory for query operators of all statements together (`query.memory_limit_mb`), in bytes.
    pub fn memory_limit_bytes(&self) -> u64 {
        mib(self.or_edition(self.query.memory_limit_mb, 2048, 256))
    }

    /// Bytes of request bodies the HTTP server holds at once (`http.max_buffered_body_mb`).
    pub fn max_buffered_body_bytes(&self) -> u64 {
        mib(self.or_edition(self.http.max_buffered_body_mb, 256, 128))
    }

    /// The largest one value a function may make (`query.max_value_mb`), in bytes.
    pub fn max_value_bytes(&self) -> u64 {
        mib(self.or_edition(self.query.max_value_mb, 1024, 64).max(1))
    }

    /// Memory one statement may hold (`query.statement_memory_mb`), in bytes; `None` for no
    /// limit of its own.
    pub fn statement_memory_bytes(&self) -> Option<u64> {
        let limit = self.or_edition(self.query.statement_memory_mb, 0, 512);
        (limit > 0).then(|| mib(limit))
    }

    /// Memory the process may hold before statements that allocate are stopped
    /// (`query.process_memory_mb`), in bytes: by default three quarters of the memory the
    /// process can have (the machine's, its cgroup's limit, or half its address-space limit, the lowest).
    pub fn process_memory_bytes(&self) -> u64 {
        match self.query.process_memory_mb {
            Some(limit) if limit > 0 => mib(limit),
            _ => available_memory() / 4 * 3,
        }
    }

    /// Connections one client address may have open (`http.max_connections_per_address`): a
    /// quarter of `http.max_connections`, at least 64 (all of them when fewer), so a client's
    /// pool or a browser's connections always fit; never more than `http.max_connections`.
    pub fn max_connections_per_address(&self) -> usize {
        let total = self.http.max_connections;
        self.http
            .max_connections_per_address
            .unwrap_or((total / 4).max(total.min(64)))
            .min(total)
    }

    /// The names the `Host` header may give (`http.allowed_hosts`): as configured, or when
    /// none are, the loopback names and the bind address locally, and any (`"*"`) in the
    /// hosted edition, which is served to other machines under names only its operator knows
    /// and whose every route but status, ping, login and logout needs an API key, which a
    /// page cannot borrow from the browser the way it borrows a local server's open door.
    pub fn allowed_hosts(&self) -> Vec<String> {
        if !self.http.allowed_hosts.is_empty() {
            return self.http.allowed_hosts.clone();
        }
        if self.is_hosted() {
            return vec!["*".to_string()];
        }
        let bind = &self.http.host;
        // An IPv6 address is written in brackets in a Host header.
        let bind = if bind.contains(':') && !bind.starts_with('[') {
            format!("[{bind}]")
        } else {
            bind.clone()
        };
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
        if !hosts.contains(&bind) {
            hosts.push(bind);
        }
        hosts
    }

    /// Temporary-file space for all statements together (`query.max_spill_mb`), in bytes.
    pub fn max_spill_bytes(&self) -> u64 {
        mib(self.or_edition(self.query.max_spill_mb, 102_400, 10_240))
    }

    /// Whether addresses inside the operator's network are refused (`egress.deny_internal`).
    pub fn egress_denies_internal(&self) -> bool {
        self.or_edition(self.egress.deny_internal, false, true)
    }

    /// The egress policy these settings describe: where the engine may connect.
    pub(crate) fn egress(&self) -> Result<crate::egress::Egress> {
        crate::egress::Egress::new(&crate::egress::EgressSettings {
            deny_internal: self.egress_denies_internal(),
            allow: &self.egress.allow,
            deny: &self.egress.deny,
            configured_urls: [&self.llm.base_url, &self.embedding.base_url],
        })
    }

    /// Rows an uploaded file may hold (`files.max_rows`).
    pub fn upload_max_rows(&self) -> u64 {
        self.or_edition(self.files.max_rows, 1_000_000_000, 10_000_000)
    }

    /// Decoded bytes an uploaded file may have (`files.max_decoded_mb`).
    pub fn upload_max_decoded_bytes(&self) -> u64 {
        mib(self.or_edition(self.files.max_decoded_mb, 65_536, 1024))
    }

    /// Whether files may be fetched from URLs (`files.url_upload`).
    pub fn url_upload(&self) -> bool {
        self.files.url_upload.unwrap_or(true)
    }

    /// Jobs one user may have (`jobs.max_jobs`).
    pub fn max_jobs(&self) -> u64 {
        self.or_edition(self.jobs.max_jobs, 10_000, 100)
    }

    /// The shortest period a job may repeat at (`jobs.min_period_secs`).
    pub fn min_job_period_secs(&self) -> u64 {
        self.or_edition(self.jobs.min_period_secs, 1, 60)
    }

    /// Requests per minute per client address on routes without credentials
    /// (`http.unauthenticated_per_minute`); 0 turns the limit off.
    pub fn unauthenticated_per_minute(&self) -> u32 {
        self.or_edition(self.http.unauthenticated_per_minute, 600, 120)
    }

    /// Reads and parses a config file (TOML, or JSON when the name ends in `.json` or the text
    /// starts with `{`).
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(format!("cannot read config file '{}': {e}", path.display()))
        })?;
        Config::parse(&text).map_err(|e| {
            Error::invalid(format!("config file '{}': {}", path.display(), e.message()))
        })
    }

    /// Applies `MINDLITE_<SECTION>_<KEY>` (or `MINDLITE_<KEY>` for top-level keys) overrides from
    /// the process environment.
    pub fn with_env_overrides(self) -> Result<Config> {
        self.with_overrides(std::env::vars())
    }

    /// Applies overrides given as `(name, value)` pairs named like the environment variables.
    /// Names that do not start with `MINDLITE_` are ignored; unknown `MINDLITE_` names are errors.
    pub fn with_overrides(
        self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config> {
        let mut tree = serde_json::to_value(&self)?;
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("MINDLITE_") else {
                continue;
            };
            let slot = find_slot(&mut tree, &rest.to_ascii_lowercase())
                .ok_or_else(|| Error::invalid(format!("unknown configuration variable {name}")))?;
            *slot = match slot {
                serde_json::Value::Number(_) => serde_json::from_str(&value).map_err(|_| {
                    Error::invalid(format!("{name} must be a number, got '{value}'"))
                })?,
                serde_json::Value::Bool(_) => match value.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => serde_json::Value::Bool(true),
                    "0" | "false" | "no" | "off" => serde_json::Value::Bool(false),
                    _ => {
                        return Err(Error::invalid(format!(
                            "{name} must be true or false, got '{value}'"
                        )))
                    }
                },
                // A list takes comma-separated items: MINDLITE_EGRESS_ALLOW=10.0.0.0/8,llm.internal
                serde_json::Value::Array(_) => serde_json::Value::Array(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|item| !item.is_empty())
                        .map(|item| serde_json::Value::String(item.to_string()))
                        .collect(),
                ),
                // A key whose default depends on the edition: a number or a boolean as such,
                // anything else as text (the config's own types then judge it).
                serde_json::Value::Null => serde_json::from_str(&value)
                    .ok()
                    .filter(|v: &serde_json::Value| v.is_number() || v.is_boolean())
                    .unwrap_or(serde_json::Value::String(value)),
                _ => serde_json::Value::String(value),
            };
        }
        serde_json::from_value(tree)
            .map_err(|e| Error::invalid(format!("invalid configuration override: {e}")))
    }
}

/// An `http.allowed_hosts` entry: `"*"`, or a host name or address as a `Host` header gives it
/// (`[::1]` for IPv6), optionally with `:port`.
fn check_allowed_host(entry: &str) -> Result<()> {
    // The name, and what follows it: nothing or `:port`.
    let (name, port) = match entry.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((address, port)) if address.parse::<std::net::Ipv6Addr>().is_ok() => {
                ("ipv6", port)
            }
            _ => ("", ""),
        },
        None => entry.split_at(entry.find(':').unwrap_or(entry.len())),
    };
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.parse::<u16>().is_ok());
    if entry == "*" || (name_ok && port_ok) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "http.allowed_hosts: '{entry}' is not a host name or address with an optional port (like 'localhost', 'mindlite.lan:47334' or '[::1]'), nor \"*\""
        )))
    }
}

/// An `http.allowed_origins` entry: `"*"`, or `scheme://host[:port]` as a browser sends it in
/// `Origin` (no path).
fn check_allowed_origin(entry: &str) -> Result<()> {
    if entry == "*" {
        return Ok(());
    }
    // A trailing slash, as an address bar shows it, is no path.
    let host = entry
        .strip_prefix("http://")
        .or_else(|| entry.strip_prefix("https://"))
        .map(|host| host.strip_suffix('/').unwrap_or(host));
    match host {
        Some(host) if !host.is_empty() && !host.contains(['/', '?', '#', ' ', '@']) => Ok(()),
        _ => Err(Error::invalid(format!(
            "http.allowed_origins: '{entry}' is not an origin like 'https://app.example.com' or 'http://localhost:3000' (scheme, host and optional port, no path), nor \"*\""
        ))),
    }
}

fn mib(mb: u64) -> u64 {
    mb.saturating_mul(1024 * 1024)
}

/// The memory this process can have: the machine's (`/proc/meminfo`'s MemTotal), or its
/// cgroup's limit when that is lower; 8 GiB where neither can be read.
fn available_memory() -> u64 {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        })
        .unwrap_or(8 << 30);
    // cgroup v2, then v1; "max" (or a huge v1 number) means no limit.
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    let memory = cgroup.map_or(machine, |limit| limit.min(machine));
    // A limit on the address space (ulimit -v, prlimit --as) counts what the process only
    // reserves too (thread stacks, malloc's arenas, mapped files): half of it is taken as
    // memory the process can use.
    let mut space = memory;
    for resource in [libc::RLIMIT_AS, libc::RLIMIT_DATA] {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given, which lives for the call.
        if unsafe { libc::getrlimit(resource, &mut limit) } == 0
            && limit.rlim_cur != libc::RLIM_INFINITY
        {
            space = space.min(limit.rlim_cur / 2);
        }
    }
    space
}

/// Finds the leaf named by `key`: a top-level key, or `<section>_<key>` for a nested one.
fn find_slot<'a>(tree: &'a mut serde_json::Value, key: &str) -> Option<&'a mut serde_json::Value> {
    let map = tree.as_object_mut()?;
    let section = map
        .keys()
        .find(|section| {
            key == section.as_str()
                || key
                    .strip_prefix(section.as_str())
                    .is_some_and(|rest| rest.starts_with('_'))
        })?
        .clone();
    let entry = map.get_mut(&section)?;
    if key == section {
        return (!entry.is_object()).then_some(entry);
    }
    entry.as_object_mut()?.get_mut(&key[section.len() + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_give_the_same_config() {
        let from_toml = Config::parse("edition = \"hosted\"\n[http]\nport = 8080\n").unwrap();
        let from_json = Config::parse(r#"{"edition":"hosted","http":{"port":8080}}"#).unwrap();
        assert_eq!(from_toml, from_json);
        assert_eq!(from_toml.http.port, 8080);
        assert_eq!(from_toml.http.host, "127.0.0.1");
        assert_eq!(from_toml.edition, Edition::Hosted);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Config::parse("[http]\nprot = 1\n").unwrap_err();
        assert!(err.message().contains("prot"), "{err}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let vars = [
            ("MINDLITE_HTTP_PORT".to_string(), "9000".to_string()),
            (
                "MINDLITE_STORAGE_BATCH_CACHE_MB".to_string(),
                "0".to_string(),
            ),
            ("MINDLITE_EDITION".to_string(), "hosted".to_string()),
            (
                "MINDLITE_QUERY_DEFAULT_PROJECT".to_string(),
                "p".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let config = Config::default().with_overrides(vars).unwrap();
        assert_eq!(config.http.port, 9000);
        assert_eq!(config.storage.batch_cache_mb, Some(0));
        assert_eq!(config.edition, Edition::Hosted);
        assert_eq!(config.query.default_project, "p");
    }

    #[test]
    fn edition_defaults_are_stricter_when_hosted_and_overridable() {
        let local = Config::default();
        let hosted = Config::parse("edition = \"hosted\"").unwrap();
        assert_eq!(local.statement_timeout(), None);
        assert_eq!(hosted.statement_timeout(), Some(Duration::from_secs(300)));
        assert!(!local.egress_denies_internal() && hosted.egress_denies_internal());
        assert!(hosted.max_document_bytes() < local.max_document_bytes());
        assert!(hosted.upload_max_decoded_bytes() < local.upload_max_decoded_bytes());
        let vars = [
            ("MINDLITE_QUERY_STATEMENT_TIMEOUT_SECS", "5"),
            ("MINDLITE_EGRESS_DENY_INTERNAL", "false"),
            ("MINDLITE_EGRESS_ALLOW", "10.0.0.0/8, llm.internal"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let changed = hosted.with_overrides(vars).unwrap();
        assert_eq!(changed.statement_timeout(), Some(Duration::from_secs(5)));
        assert!(!changed.egress_denies_internal());
        assert_eq!(changed.egress.allow, ["10.0.0.0/8", "llm.internal"]);
        let err = Config::parse("[egress]\nallow = [\"10.0.0.0/99\"]")
            .unwrap()
            .validate();
        assert!(err.unwrap_err().message().contains("egress.allow"));
    }

    #[test]
    fn an_address_gets_a_quarter_of_the_connections_but_never_fewer_than_a_pool_needs() {
        let share = |total: usize| {
            let mut config = Config::default();
            config.http.max_connections = total;
            config.max_connections_per_address()
        };
        assert_eq!(share(1024), 256);
        assert_eq!(share(100), 64);
        assert_eq!(share(5), 5);
        let mut config = Config::default();
        config.http.max_connections_per_address = Some(2000);
        assert_eq!(
            config.max_connections_per_address(),
            1024,
            "capped by the total"
        );
        config.http.max_connections_per_address = Some(0);
        let err = config.validate().unwrap_err();
        assert!(err.message().contains("http.max_connections_per_address"));
    }

    #[test]
    fn the_local_server_answers_its_own_names_and_the_hosted_one_any() {
        let local = Config::default();
        assert_eq!(local.allowed_hosts(), ["localhost", "127.0.0.1", "[::1]"]);
        let mut bound = Config::default();
        bound.http.host = "::".to_string();
        assert_eq!(bound.allowed_hosts()[3], "[::]");
        let hosted = Config::parse("edition = \"hosted\"").unwrap();
        assert_eq!(hosted.allowed_hosts(), ["*"]);
        let vars = [(
            "MINDLITE_HTTP_ALLOWED_HOSTS",
            "mindlite.lan, 192.168.1.5:47334",
        )]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let listed = hosted.with_overrides(vars).unwrap();
        assert_eq!(
            listed.allowed_hosts(),
            ["mindlite.lan", "192.168.1.5:47334"]
        );
        listed.validate().unwrap();
    }

    #[test]
    fn malformed_hosts_and_origins_are_refused_naming_their_key() {
        let parse = |text: &str| Config::parse(text).unwrap().validate();
        for good in [
            r#"allowed_hosts = ["*", "localhost:8080", "[::1]", "[fe80::1]:80", "a-b.example"]"#,
            r#"allowed_origins = ["*", "https://app.example.com", "http://localhost:3000"]"#,
        ] {
            parse(&format!("[http]\n{good}")).unwrap();
        }
        for (bad, key) in [
            (
                r#"allowed_hosts = ["http://localhost"]"#,
                "http.allowed_hosts",
            ),
            (r#"allowed_hosts = ["host:99999"]"#, "http.allowed_hosts"),
            (r#"allowed_hosts = ["[not-v6]"]"#, "http.allowed_hosts"),
            (r#"allowed_hosts = [""]"#, "http.allowed_hosts"),
            (
                r#"allowed_origins = ["app.example.com"]"#,
                "http.allowed_origins",
            ),
            (
                r#"allowed_origins = ["https://app.example.com/path"]"#,
                "http.allowed_origins",
            ),
        ] {
            let err = parse(&format!("[http]\n{bad}")).unwrap_err();
            assert!(err.message().contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_overrides_name_the_variable() {
        let err = Config::default()
            .with_overrides([("MINDLITE_HTTP_PORT".to_string(), "abc".to_string())])
            .unwrap_err();
        assert!(err.message().contains("MINDLITE_HTTP_PORT"), "{err}");
        let err = Config::default()
            .with_overrides([("MINDLITE_NOPE".to_string(), "1".to_string())])
            .unwrap_err();
        assert!(err.message().contains("MINDLITE_NOPE"), "{err}");
    }
}
