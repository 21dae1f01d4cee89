//! Running SQL: requests whose results stream, the collected forms for callers that want
//! rows, and batches loaded into tables.

use std::cell::Cell;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use crate::cancel::Control;
use crate::error::{panic_message, Error, Result};
use crate::sql::{LoadMode, Outcome, QueryRequest, QueryResult, TableResult};
use crate::tenant::TenantId;

use super::{AbortOnDrop, Engine, InRuntime, Inner, RUNTIME_OF};
use futures::{FutureExt, StreamExt};

/// A fully read result, for callers that want rows rather than a stream.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Column names as shown (empty for statements without rows).
    pub column_names: Vec<String>,
    /// All record batches.
    pub batches: Vec<RecordBatch>,
    /// Rows changed, for INSERT / UPDATE / DELETE / CREATE TABLE AS.
    pub affected_rows: Option<u64>,
}

impl Collected {
    /// Total number of rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

impl QueryResult {
    /// Reads the whole result; an SQL error becomes `Err`.
    pub async fn collect(self) -> Result<Collected> {
        match self.outcome {
            Outcome::Error(e) => Err(e),
            Outcome::Ok { affected_rows } => Ok(Collected {
                column_names: Vec::new(),
                batches: Vec::new(),
                affected_rows,
            }),
            Outcome::Table(TableResult {
                column_names,
                mut stream,
            }) => {
                let mut batches = Vec::new();
                while let Some(batch) = stream.next().await {
                    batches.push(batch?);
                }
                Ok(Collected {
                    column_names,
                    batches,
                    affected_rows: None,
                })
            }
        }
    }
}

impl Engine {
    /// Runs a request. Work happens on the engine's runtime, so this can be awaited from any
    /// executor; a table result's stream also runs its tasks there.
    pub async fn query(&self, request: QueryRequest) -> QueryResult {
        self.query_as(self.tenant, request).await
    }

    /// Runs a request as `tenant` (the hosted edition's entry point). A caller already on
    /// the engine's runtime (the HTTP server serves from it) runs the request in place; others
    /// hand it to the runtime, which costs a task and a cross-thread wake-up per request.
    /// Either way, dropping the returned future stops the statement.
    pub(crate) async fn query_as(&self, tenant: TenantId, request: QueryRequest) -> QueryResult {
        let context = self.inner.sql.request_context(&request);
        let control = Control::new(
            self.inner.services.config.statement_limit(request.timeout),
            &self.interrupts,
        );
        let run = Self::run(Arc::clone(&self.inner), tenant, request, control);
        let joined = if RUNTIME_OF.with(Cell::get) == self.inner.id {
            // The same guard a spawned task has: a panic becomes an error result.
            std::panic::AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .map_err(|panic| panic_message(&*panic))
        } else {
            let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, run));
            (&mut task.0).await.map_err(|e| e.to_string())
        };
        joined.unwrap_or_else(|e| {
            QueryResult::failed(context, Error::internal(format!("query task failed: {e}")))
        })
    }

    /// Runs a request on the engine's runtime under `control`, in one of the tenant's places
    /// for running statements (held until a table result is read or dropped); a table result's
    /// stream keeps running there whoever polls it.
    async fn run(
        inner: Arc<Inner>,
        tenant: TenantId,
        request: QueryRequest,
        control: Control,
    ) -> QueryResult {
        let context = inner.sql.request_context(&request);
        let (ticket, tenant_memory) = match inner.services.admit_statement(tenant) {
            Ok(admitted) => admitted,
            Err(e) => return QueryResult::failed(context, e),
        };
        let control = control.with_memory(
            inner.services.config.statement_memory_bytes(),
            tenant_memory,
        );
        let ran = control
            .run(async { Ok(inner.sql.run(tenant, &request).await) })
            .await;
        let mut result = ran.unwrap_or_else(|stopped| QueryResult::failed(context, stopped));
        result.document_limit = Some(inner.services.config.max_document_bytes());
        if let Outcome::Table(table) = result.outcome {
            let in_runtime = Box::pin(RecordBatchStreamAdapter::new(
                table.stream.schema(),
                InRuntime {
                    inner: table.stream,
                    handle: inner.handle.clone(),
                    failed: false,
                },
            ));
            result.outcome = Outcome::Table(TableResult {
                column_names: table.column_names,
                stream: control.guard(in_runtime, ticket),
            });
        }
        result
    }

    /// [`Engine::query`] for callers outside async code. Must not be called from inside an async task.
    pub fn query_blocking(&self, request: QueryRequest) -> QueryResult {
        self.block_on(self.query(request))
    }

    /// MindsDB's `parametrize_constants`: one SQL statement with its literals turned into
    /// named parameters (`:name`), as `{"query", "parameters": [{"name", "value", "type"}],
    /// "databases": {db: [tables]}}`. Only reads the text; runs nothing.
    pub fn parametrize_constants(&self, sql: &str) -> Result<serde_json::Value> {
        let mut commands = self.inner.sql.parse_text(self.tenant, sql)?;
        let statement = match (commands.len(), commands.pop()) {
            (1, Some(crate::sql::Command::Sql(statement))) => *statement,
            (1, Some(_)) => {
                return Err(Error::invalid(
                    "Only a SQL statement has constants to parametrize, not a MindsDB one",
                ))
            }
            _ => return Err(Error::invalid("Send one statement to parametrize")),
        };
        let done = crate::sql::parse::parametrize::parametrize(statement);
        Ok(serde_json::json!({
            "query": done.query,
            "parameters": done.parameters,
            "databases": done.databases,
        }))
    }

    /// Runs `sql` in the default project and reads the whole result.
    pub async fn sql(&self, sql: &str) -> Result<Collected> {
        self.query(QueryRequest::new(sql)).await.collect().await
    }

    /// Appends record batches to the stored table `db.table`, in one transaction: all rows or
    /// none. Columns are matched by position and cast to the table's types; returns the rows written.
    pub async fn insert_batches(
        &self,
        db: &str,
        table: &str,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let schema = match batches.first() {
            Some(batch) => batch.schema(),
            None => Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        };
        self.load(Some(db), table, schema, batches, LoadMode::Append)
            .await
    }

    /// Loads record batches into the stored table `table` of project `db` (the default project
    /// when `None`), in one transaction: all rows or none. [`LoadMode`] says whether the table
    /// is appended to, created with `schema`'s columns, or replaced. Returns the rows written.
    pub async fn load(
        &self,
        db: Option<&str>,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        mode: LoadMode,
    ) -> Result<u64> {
        let (control, _ticket) = self.statement_control()?;
        if RUNTIME_OF.with(Cell::get) == self.inner.id {
            // In place, so a caller that drops this future cancels the load.
            let load = self
                .inner
                .sql
                .load(self.tenant, db, table, schema, batches, mode);
            return control.run(load).await;
        }
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let (db, table) = (db.map(str::to_string), table.to_string());
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            let load = inner
                .sql
                .load(tenant, db.as_deref(), &table, schema, batches, mode);
            control.run(load).await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("load task failed: {e}")))?
    }

    /// [`Engine::sql`] for callers outside async code.
    pub fn sql_blocking(&self, sql: &str) -> Result<Collected> {
        self.block_on(self.sql(sql))
    }
}
