//! mindlite: an embeddable data-and-AI query engine. SQL over tables stored in one redb file,
//! run by Apache DataFusion, with results as Arrow record batches or MindsDB's wire formats.
//!
//! ```
//! use mindlite::{Config, Engine, QueryRequest, WireFormat, encode_document};
//! let engine = Engine::open_in_memory(Config::default()).unwrap();
//! engine.sql_blocking("CREATE TABLE t (a INT, b VARCHAR)").unwrap();
//! engine.sql_blocking("INSERT INTO t VALUES (1, 'x'), (2, 'y')").unwrap();
//! let result = engine.query_blocking(QueryRequest::new("SELECT a, b FROM t ORDER BY a"));
//! let body = engine.block_on(encode_document(result));
//! assert_eq!(
//!     String::from_utf8(body).unwrap(),
//!     r#"{"type":"table","data":[[1,"x"],[2,"y"]],"column_names":["a","b"],"context":{"show_secrets":false,"db":"mindsdb"}}"#
//! );
//! ```

// Foundation: what every layer above stands on.
mod admission;
mod bm25;
mod cancel;
mod capacity;
mod compute;
mod config;
mod egress;
mod error;
mod memory;
mod progress;
mod running;
mod sandbox;
mod spill;
mod spool;
mod tenant;
mod time;
pub mod wire;

// The layers above it, lowest first (`docs/architecture.md`); each uses only those before it.
/// The redb file and its tables.
mod store;

/// The records of each kind of object, and the rules about them.
mod catalog;

/// Clients the layers above call: LLM and embedding providers, chunking, training, datasources,
/// callbacks' delivery, upload decoding.
mod services;

/// The relational engine over DataFusion: statements, planning, writes, the wire formats.
mod sql;

/// MindsDB's AI objects as SQL: models, knowledge bases, agents, minds.
mod ai;

/// The public facade.
mod engine;

pub use ai::agents::answer::{AgentEvent, AgentStream, Answer};
pub use ai::minds::chat::{ChatApi, ChatRequest, MindAnswer, MindStream};
pub use catalog::agents::Agent;
pub use catalog::auth::LoginToken;
pub use catalog::callbacks::{
    CallbackAttempts, CallbackFilter, CallbackInfo, CallbackSummary, DeliveryAttempt,
    RegisteredCallback,
};
pub use catalog::datasources::DatasourceInfo;
pub use catalog::knowledge_bases::{KbStorage, KnowledgeBase};
pub use catalog::minds::{Mind, MindDatasource};
pub use catalog::models::Model;
pub use catalog::projects::Project;
pub use catalog::quotas::{Limits, Usage, WindowUsage};
pub use catalog::tables::sql_type_name;
pub use catalog::users::{ApiKeyInfo, IssuedApiKey, User, API_KEY_PREFIX};
pub use catalog::views::View;
pub use config::{
    AgentsConfig, AuthConfig, CallbacksConfig, Config, DatasourcesConfig, Edition, EgressConfig,
    EmbeddingConfig, FilesConfig, HostedConfig, HttpConfig, JobsConfig, KnowledgeBasesConfig,
    LlmConfig, McpConfig, MysqlConfig, PlanConfig, QueryConfig, StorageConfig,
};
pub use engine::database_api::{Database, DatabaseTable, TableColumn};
pub use engine::hosted::HostedApi;
pub use engine::query_api::Collected;
pub use engine::reader::BlockingReader;
pub use engine::status::{ActiveTasks, AuthStatus, Status};
pub use engine::Engine;
pub use error::{Error, ErrorKind, Result, Subject};
pub use memory::RequestMemory;
pub use mindlite_memory::{keep_malloc_trimmed, TrackingAllocator};
pub use progress::{InsertProgress, ProgressCallback};
pub use services::files::{FileFormat, FileInfo};
pub use sql::encode::{
    encode_document, encode_rows_capped, json_cells, CappedRows, WireFormat, WireStream,
};
pub use sql::{
    LoadMode, Outcome, Positional, PositionalValue, QueryContext, QueryRequest, QueryResult,
    ResultContext, TableResult, TypedParam,
};
pub use tenant::TenantId;

// The unit tests run on the tracking allocator, as the server does.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

/// The Arrow and DataFusion versions mindlite speaks, re-exported so fronts use the same ones.
pub use datafusion::arrow;
