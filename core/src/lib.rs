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

mod admission;
mod agent_loop;
mod agents;
mod auth;
mod callbacks;
mod cancel;
mod chat;
mod config;
mod connectors;
mod datasources;
mod egress;
mod engine;
mod error;
mod files;
mod hosted;
mod llm;
mod minds;
mod ml;
mod models;
mod namespace;
mod projects;
mod quotas;
mod reader;
mod rules;
mod spool;
mod sql;
mod status;
mod store;
mod tables;
mod tenant;
mod time;
mod users;

pub use agent_loop::{AgentEvent, AgentStream, Answer};
pub use agents::Agent;
pub use auth::LoginToken;
pub use chat::{ChatApi, ChatRequest, MindStream};
pub use config::{
    AgentsConfig, AuthConfig, CallbacksConfig, Config, DatasourcesConfig, Edition, EgressConfig,
    FilesConfig, HostedConfig, HttpConfig, LlmConfig, PlanConfig, QueryConfig, StorageConfig,
};
pub use engine::{Collected, Engine};
pub use error::{Error, ErrorKind, Result, Subject};
pub use files::{FileFormat, FileInfo};
pub use hosted::HostedApi;
pub use minds::{Mind, MindDatasource};
pub use models::Model;
pub use projects::Project;
pub use quotas::{Limits, Usage, WindowUsage};
pub use reader::BlockingReader;
pub use sql::encode::{encode_document, WireFormat, WireStream};
pub use sql::{
    LoadMode, Outcome, QueryContext, QueryRequest, QueryResult, ResultContext, TableResult,
    TypedParam,
};
pub use status::{AuthStatus, Status};
pub use tables::sql_type_name;
pub use tenant::TenantId;
pub use users::{ApiKeyInfo, IssuedApiKey, User, API_KEY_PREFIX};

/// The Arrow and DataFusion versions mindlite speaks, re-exported so fronts use the same ones.
pub use datafusion::arrow;
