//! A datasource's SQL server, whichever its engine: what the remote tables, their scans and
//! their writes (`table`) need to know of it — how names are quoted, how a column is
//! selected, which filters it computes as DataFusion does, how rows are read — answered by
//! the engine's own module (`postgres`, `mysql`).

use std::pin::Pin;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::Expr;
use futures::Stream;

use super::postgres::{Column, Kind};
use super::{mysql, postgres, pushdown};
use crate::error::{Error, Result};

/// A remote SQL server with its checked settings.
#[derive(Debug, Clone)]
pub(crate) enum Remote {
    Postgres(postgres::Settings),
    MySql(mysql::Settings),
}

/// Batches read from a remote statement.
pub(crate) type Batches = Pin<Box<dyn Stream<Item = Result<RecordBatch>> + Send>>;

impl Remote {
    /// Whether filters and limits are sent (the datasource's `push_down`).
    pub(crate) fn push_down(&self) -> bool {
        match self {
            Remote::Postgres(s) => s.push_down,
            Remote::MySql(s) => s.push_down,
        }
    }

    /// What identifies the server and account its statements run as: parts of a plan over
    /// tables of one key are sent as one statement.
    pub(crate) fn server_key(&self) -> String {
        match self {
            Remote::Postgres(s) => s.server_key(),
            Remote::MySql(s) => s.server_key(),
        }
    }

    /// `name` quoted as an identifier.
    pub(crate) fn quote(&self, name: &str) -> String {
        match self {
            Remote::Postgres(_) => postgres::quote(name),
            Remote::MySql(_) => mysql::quote(name),
        }
    }

    /// `table` of the datasource's schema or database, quoted.
    pub(crate) fn qualified(&self, table: &str) -> String {
        match self {
            Remote::Postgres(s) => s.qualified(table),
            Remote::MySql(s) => s.qualified(table),
        }
    }

    /// The select-list item that reads `column`.
    pub(crate) fn select_item(&self, column: &Column) -> String {
        match self {
            Remote::Postgres(_) => column.select_item(),
            Remote::MySql(_) => mysql::select_item(column),
        }
    }

    /// The SQL condition for `filter` over `columns`, or `None` when it must run locally.
    pub(crate) fn filter(&self, filter: &Expr, columns: &[Column]) -> Option<String> {
        match self {
            Remote::Postgres(_) => {
                pushdown::remote_filter(filter, columns, pushdown::Dialect::Postgres)
            }
            Remote::MySql(_) => pushdown::remote_filter(filter, columns, pushdown::Dialect::MySql),
        }
    }

    /// The scan operator's name and where it reads, for EXPLAIN.
    pub(crate) fn describe(&self) -> (&'static str, String) {
        match self {
            Remote::Postgres(s) => (
                "PostgresScan",
                format!("{}:{}/{}", s.host, s.port, s.database),
            ),
            Remote::MySql(s) => ("MySqlScan", format!("{}:{}/{}", s.host, s.port, s.database)),
        }
    }

    /// The columns of `table`; `None` when there is no such table.
    pub(crate) async fn table_columns(&self, table: &str) -> Result<Option<Vec<Column>>> {
        match self {
            Remote::Postgres(s) => postgres::table_columns(s, table).await,
            Remote::MySql(s) => mysql::table_columns(s, table).await,
        }
    }

    /// The columns a native query returns, described without running it.
    pub(crate) async fn query_columns(&self, sql: &str) -> Result<Vec<Column>> {
        match self {
            Remote::Postgres(s) => postgres::query_columns(s, sql).await,
            Remote::MySql(s) => mysql::query_columns(s, sql).await,
        }
    }

    /// Runs `sql` with `params` bound and streams its rows as batches of `schema`.
    pub(crate) fn read_rows(
        &self,
        sql: String,
        params: Arc<[Option<String>]>,
        schema: SchemaRef,
        kinds: Vec<Kind>,
        batch_size: usize,
    ) -> Batches {
        match self {
            Remote::Postgres(s) => Box::pin(postgres::read_rows(
                s.clone(),
                sql,
                params,
                schema,
                kinds,
                batch_size,
            )),
            // Only whole sub-plans bind values, and those go to PostgreSQL alone.
            Remote::MySql(_) if !params.is_empty() => Box::pin(futures::stream::once(async {
                Err(Error::internal("values bound to a MySQL read"))
            })),
            Remote::MySql(s) => {
                Box::pin(mysql::read_rows(s.clone(), sql, schema, kinds, batch_size))
            }
        }
    }
}
