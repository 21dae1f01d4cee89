//! What a caller asks of SQL and what it gets back: a request in MindsDB's `POST
//! /api/sql/query` shape (and its JSON), its context, and the result — rows as a stream of
//! record batches, a count of rows changed, or an error.

use std::collections::HashMap;

use datafusion::execution::SendableRecordBatchStream;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A query as MindsDB's `POST /api/sql/query` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryRequest {
    /// SQL text: one statement, or several separated by `;` (the result is the last one's;
    /// see `one_statement`).
    pub query: String,
    /// Where one-part names resolve.
    #[serde(default)]
    pub context: QueryContext,
    /// Values for `:name` placeholders, and for `@name` in the values of MindsDB's statements
    /// (`PARAMETERS = {"password": @pw}`), where they come before the variables `SET` kept.
    #[serde(default)]
    pub params: HashMap<String, serde_json::Value>,
    /// Values for `:name` placeholders that JSON has no literal for (dates, timestamps, exact
    /// decimals, bytes), from the in-process fronts; not part of the wire format.
    #[serde(skip)]
    pub typed_params: HashMap<String, TypedParam>,
    /// How long the statements may run: less than `query.statement_timeout_secs` if asked
    /// (never more). The wire body's `timeout`, in seconds.
    #[serde(skip)]
    pub timeout: Option<std::time::Duration>,
    /// Whether the text must hold one statement, as MindsDB's HTTP API takes it (set by
    /// [`QueryRequest::from_wire_json`]); the in-process fronts run several in order.
    #[serde(skip)]
    pub one_statement: bool,
    /// Whether every statement must commit on its own (BEGIN refused), as MindsDB's HTTP API
    /// does (set by [`QueryRequest::from_wire_json`]); the in-process fronts can open
    /// transactions.
    #[serde(skip)]
    pub autocommit: bool,
}

/// A parameter value of a type JSON cannot carry, bound as a typed SQL literal
/// (`CAST('2024-01-31' AS DATE)`, `X'00ff'`), so `SELECT :d` gives a date, not text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedParam {
    /// A calendar date, `YYYY-MM-DD`.
    Date(String),
    /// A timestamp without time zone, `YYYY-MM-DD HH:MM:SS[.fraction]`; callers convert zoned
    /// times to UTC first.
    Timestamp(String),
    /// An exact decimal number in plain notation, like `-12.50` (at most 38 digits).
    Decimal(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

/// A statement with MySQL's positional parameters (`SELECT * FROM t WHERE a = ? AND b = ?`),
/// as a prepared statement keeps it: the `?`s counted and named, so each execution binds its
/// values as literals, never spliced into the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positional {
    query: String,
    count: usize,
}

/// One value for a positional parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum PositionalValue {
    /// A JSON value (null, a boolean, a number, a text).
    Json(serde_json::Value),
    /// A value JSON cannot carry.
    Typed(TypedParam),
}

impl Positional {
    /// Reads `sql`'s positional parameters: each `?` outside quotes and comments.
    pub fn parse(sql: &str) -> Result<Positional> {
        let (query, count) = crate::sql::parse::name_positional(sql, Positional::name)?;
        Ok(Positional { query, count })
    }

    /// How many values an execution takes.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The request that runs the statement with `values`, one per `?` in order, in `context`;
    /// every statement commits on its own (a server's clients share one store).
    pub fn request(
        &self,
        context: QueryContext,
        values: Vec<PositionalValue>,
    ) -> Result<QueryRequest> {
        if values.len() != self.count {
            return Err(Error::invalid(format!(
                "The statement takes {} parameters and {} were given",
                self.count,
                values.len()
            )));
        }
        let mut request = QueryRequest {
            query: self.query.clone(),
            context,
            autocommit: true,
            ..Default::default()
        };
        for (i, value) in values.into_iter().enumerate() {
            let name = Positional::name(i + 1);
            match value {
                PositionalValue::Json(value) => request.params.insert(name, value),
                PositionalValue::Typed(value) => {
                    request.typed_params.insert(name, value);
                    None
                }
            };
        }
        Ok(request)
    }

    /// The name the `index`-th `?` (from 1) is bound by.
    fn name(index: usize) -> String {
        format!("mysql_param_{index}")
    }
}

impl QueryRequest {
    /// A request for `query` in the default project, without parameters.
    pub fn new(query: impl Into<String>) -> Self {
        QueryRequest {
            query: query.into(),
            ..Default::default()
        }
    }

    /// Limits how long the statements may run (to less than the configured limit, if any).
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// One statement the engine runs on a user's behalf (a job's, a batched insert's, an
    /// evaluation's) in `db`, as the HTTP API takes one: alone, committed on its own.
    pub(crate) fn on_behalf(sql: impl Into<String>, db: &str) -> QueryRequest {
        QueryRequest {
            context: QueryContext {
                db: Some(db.to_string()),
                show_secrets: false,
            },
            one_statement: true,
            autocommit: true,
            ..QueryRequest::new(sql)
        }
    }

    /// Sets the current database (`context.db`).
    pub fn with_db(mut self, db: impl Into<String>) -> Self {
        self.context.db = Some(db.into());
        self
    }

    /// Adds a `:name` parameter (which `@name` in the values of MindsDB's statements also
    /// reads, as MindsDB's request parameters do).
    pub fn with_param(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.params.insert(name.into(), value);
        self
    }

    /// Adds a `:name` parameter of a type JSON cannot carry.
    ///
    /// ```
    /// use mindlite::{Config, Engine, QueryRequest, TypedParam};
    /// let engine = Engine::open_in_memory(Config::default()).unwrap();
    /// let request = QueryRequest::new("SELECT :d + INTERVAL '1 day' AS next")
    ///     .with_typed_param("d", TypedParam::Date("2024-02-28".into()));
    /// let rows = engine.block_on(engine.query_blocking(request).collect()).unwrap();
    /// assert_eq!(rows.batches[0].schema().field(0).data_type().to_string(), "Date32");
    /// ```
    pub fn with_typed_param(mut self, name: impl Into<String>, value: TypedParam) -> Self {
        self.typed_params.insert(name.into(), value);
        self
    }
}

/// The request context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryContext {
    /// The current database; the configured default project when absent.
    #[serde(default)]
    pub db: Option<String>,
    /// Whether `information_schema.databases` shows datasource passwords unmasked.
    #[serde(default)]
    pub show_secrets: bool,
}

/// The context returned with every result (`USE` changes `db`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultContext {
    /// Whether secrets are shown in `CONNECTION_DATA`, as the request asked.
    pub show_secrets: bool,
    /// The current database after the request ran.
    pub db: String,
}

/// What a request produced.
pub struct QueryResult {
    /// The context after the request.
    pub context: ResultContext,
    /// The outcome of the last statement.
    pub outcome: Outcome,
    /// The most bytes [`encode_document`](crate::sql::encode::encode_document) makes of it; a larger
    /// result becomes an error document that points to the streaming formats. The engine sets
    /// `query.max_document_mb`; `None` is no limit.
    pub document_limit: Option<u64>,
}

impl QueryResult {
    /// A request that failed before any statement ran.
    pub(crate) fn failed(context: ResultContext, error: Error) -> QueryResult {
        QueryResult {
            context,
            outcome: Outcome::Error(error),
            document_limit: None,
        }
    }
}

/// A table, an ok with a row count, or an error: SQL failures are results, not transport errors.
pub enum Outcome {
    /// Rows, as a lazy stream of record batches.
    Table(TableResult),
    /// A statement without rows; `affected_rows` is `None` for DDL.
    Ok {
        /// Rows inserted, updated or deleted.
        affected_rows: Option<u64>,
    },
    /// The statement failed; nothing it would have changed was changed.
    Error(Error),
}

/// Rows with the column names to show (which may differ from the Arrow field names).
pub struct TableResult {
    /// Column names as MindsDB shows them.
    pub column_names: Vec<String>,
    /// The batches, produced as they are pulled.
    pub stream: SendableRecordBatchStream,
}

impl std::fmt::Debug for TableResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableResult")
            .field("column_names", &self.column_names)
            .finish()
    }
}

/// How [`Engine::load`](crate::Engine::load) treats the table it loads into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Append to an existing table: columns matched by position and cast to its types.
    Append,
    /// Create the table with the data's columns; an existing table is a conflict.
    Create,
    /// Create the table, replacing an existing one (its columns and rows) in the same transaction.
    Replace,
}
