//! Read-only queries for agents' `sql_query` tool: one SELECT, naming only tables
//! the agent was given, planned to a pure query (no DDL, DML or statements), cut at a row limit
//! and stopped at a time limit. Refusals are [`ErrorKind::Forbidden`] errors whose message
//! starts "Query refused", which the agent loop hands back to the model.

use std::sync::Arc;
use std::time::Duration;

use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::Statement;
use futures::StreamExt;

use crate::error::{Error, ErrorKind, Result};
use crate::sql::catalog::names;
use crate::sql::catalog::snapshot::{db_and_table, Namespace, Snapshot};
use crate::sql::parse::Command;
use crate::sql::planning::order;
use crate::sql::{encode, SqlRunner};
use crate::tenant::TenantId;

/// What an agent may read: `(db, name)` pairs, the database in lower case, the name as its
/// entry named it (see `agents::split_entry`), `*` for every one of `db`. Tables and
/// knowledge bases are granted apart: `data.tables = ["p.*"]` reaches no knowledge base.
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowed {
    pub(crate) tables: Vec<(String, String)>,
    pub(crate) knowledge_bases: Vec<(String, String)>,
}

impl Allowed {
    /// Whether `db.table` may be read. `exact` compares table names as they are written (a
    /// datasource's, whose server tells `orders` from `Orders`); otherwise case is ignored, as
    /// for tables stored here.
    fn permits(&self, db: &str, table: &str, exact: bool) -> bool {
        granted(&self.tables, db, table, exact)
    }

    /// Whether the knowledge base `db.kb` may be searched.
    fn permits_knowledge_base(&self, db: &str, kb: &str) -> bool {
        granted(&self.knowledge_bases, db, kb, false)
    }

    /// The databases of every grant.
    fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = (self.tables.iter().chain(&self.knowledge_bases))
            .map(|(db, _)| db.clone())
            .collect();
        dbs.sort();
        dbs.dedup();
        dbs
    }
}

fn granted(grants: &[(String, String)], db: &str, table: &str, exact: bool) -> bool {
    let db = db.to_ascii_lowercase();
    grants.iter().any(|(d, t)| {
        *d == db
            && (t == "*"
                || if exact {
                    t == table
                } else {
                    t.eq_ignore_ascii_case(table)
                })
    })
}

/// A table an agent may read, as its system prompt describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TableShape {
    pub(crate) db: String,
    pub(crate) table: String,
    /// (name, SQL type) per column.
    pub(crate) columns: Vec<(String, String)>,
    /// A knowledge base, searched with `WHERE content = '…'`.
    pub(crate) knowledge_base: bool,
}

/// A planned read-only query: its columns and the stream of its rows.
pub(crate) struct ReadOnlyQuery {
    pub(crate) column_names: Vec<String>,
    /// SQL type names, one per column.
    pub(crate) column_types: Vec<String>,
    pub(crate) stream: datafusion::physical_plan::SendableRecordBatchStream,
}

/// Rows a tool query returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolRows {
    pub(crate) column_names: Vec<String>,
    /// SQL type names, one per column.
    pub(crate) column_types: Vec<String>,
    pub(crate) rows: Vec<Vec<serde_json::Value>>,
    /// More rows existed than the limit let through.
    pub(crate) truncated: bool,
}

pub(crate) fn refused(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Forbidden, format!("Query refused: {why}"))
}

impl SqlRunner {
    /// The stored tables `allowed` names that exist now, with their columns' names and SQL
    /// types, by database and name.
    pub(crate) async fn tables_matching(
        &self,
        tenant: TenantId,
        allowed: &Allowed,
    ) -> Result<Vec<TableShape>> {
        let mut out = Vec::new();
        for db in allowed.databases() {
            let namespace =
                Snapshot::new(Arc::clone(&self.services.store), tenant)?.namespace(&db)?;
            // Stored tables live in projects and, uploaded, in `files`; a datasource's are
            // asked for (the snapshot is not held across the network).
            let holder = match namespace {
                Some(Namespace::Project(project)) => project.name,
                Some(Namespace::Files) => crate::catalog::namespace::FILES_DB.to_string(),
                Some(Namespace::Datasource(source)) => {
                    let connection =
                        crate::services::connectors::Connection::of(&source, &self.services.net)?;
                    for table in connection.table_names().await? {
                        if !allowed.permits(&db, &table, true) {
                            continue;
                        }
                        let Some(schema) = connection.table_schema(&table).await? else {
                            continue;
                        };
                        out.push(TableShape {
                            db: source.name.clone(),
                            table,
                            columns: schema
                                .fields()
                                .iter()
                                .map(|f| {
                                    (
                                        f.name().clone(),
                                        crate::catalog::tables::sql_type_name(f.data_type()),
                                    )
                                })
                                .collect(),
                            knowledge_base: false,
                        });
                    }
                    continue;
                }
                _ => continue,
            };
            let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
            for table in snapshot.tables(&holder)? {
                if !allowed.permits(&db, &table.name, false) {
                    continue;
                }
                let schema = snapshot.table_schema(table.id)?;
                let columns = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        (
                            f.name().clone(),
                            crate::catalog::tables::sql_type_name(f.data_type()),
                        )
                    })
                    .collect();
                out.push(TableShape {
                    db: holder.clone(),
                    table: table.name,
                    columns,
                    knowledge_base: false,
                });
            }
            for kb in snapshot.knowledge_bases(&holder)? {
                if !allowed.permits_knowledge_base(&db, &kb.name) {
                    continue;
                }
                let name = kb.name.clone();
                let table = crate::ai::knowledge_bases::table::KnowledgeBaseTable::new(
                    Arc::clone(&snapshot),
                    kb,
                )?;
                let columns = datafusion::catalog::TableProvider::schema(&table)
                    .fields()
                    .iter()
                    .map(|f| {
                        (
                            f.name().clone(),
                            crate::catalog::tables::sql_type_name(f.data_type()),
                        )
                    })
                    .collect();
                out.push(TableShape {
                    db: holder.clone(),
                    table: name,
                    columns,
                    knowledge_base: true,
                });
            }
        }
        Ok(out)
    }

    /// Runs `sql` for an agent whose current database is `db` and that may read `allowed`.
    pub(crate) async fn sandboxed_query(
        &self,
        tenant: TenantId,
        db: &str,
        sql: &str,
        allowed: &Allowed,
        row_limit: usize,
        timeout: Duration,
    ) -> Result<ToolRows> {
        let run = self.sandboxed(tenant, db, sql, allowed, row_limit);
        match tokio::time::timeout(timeout, run).await {
            Ok(rows) => rows,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "The query did not finish within {} s and was stopped",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    async fn sandboxed(
        &self,
        tenant: TenantId,
        db: &str,
        sql: &str,
        allowed: &Allowed,
        row_limit: usize,
    ) -> Result<ToolRows> {
        // Tables of datasources are named as their servers name them: case counts.
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let remote: std::collections::HashSet<String> = snapshot
            .datasources()?
            .into_iter()
            .map(|source| source.name.to_ascii_lowercase())
            .collect();
        let is_knowledge_base = |schema: &str, name: &str| {
            matches!(snapshot.namespace(schema), Ok(Some(Namespace::Project(_))))
                && matches!(snapshot.knowledge_base(schema, name), Ok(Some(_)))
        };
        // An agent is a table in SQL (`table.rs`), but never to an agent's tool, whatever its
        // data allows (`p.*`): an agent asking agents is a loop of model calls a prompt could
        // start.
        let is_agent = |schema: &str, name: &str| {
            matches!(snapshot.namespace(schema), Ok(Some(Namespace::Project(_))))
                && matches!(snapshot.table(schema, name), Ok(None))
                && matches!(snapshot.view(schema, name), Ok(None))
                && matches!(snapshot.agent(schema, name), Ok(Some(_)))
        };
        let exact = |schema: &str| remote.contains(&schema.to_ascii_lowercase());
        let mut query = self
            .read_only_query(tenant, db, sql, |reference, resolved| match resolved {
                // A native query is text the datasource runs as written: never an agent's.
                Some((schema, table)) if table.starts_with(crate::services::connectors::table::NATIVE) => {
                    Err(refused(format!(
                        "native queries (FROM {schema} (…)) are not for agents; name tables as {schema}.<table>"
                    )))
                }
                Some((schema, name)) if is_agent(schema, name) => Err(refused(format!(
                    "'{schema}.{name}' is an agent, and an agent's SQL cannot ask an agent"
                ))),
                Some((schema, name)) if is_knowledge_base(schema, name) => {
                    match allowed.permits_knowledge_base(schema, name) {
                        true => Ok(()),
                        false => Err(refused(format!(
                            "'{schema}.{name}' is not one of this agent's knowledge bases"
                        ))),
                    }
                }
                Some((schema, table)) if allowed.permits(schema, table, exact(schema)) => Ok(()),
                Some((schema, table)) => Err(refused(format!(
                    "'{schema}.{table}' is not one of this agent's tables"
                ))),
                None => Err(refused(format!(
                    "'{reference}' is not one of this agent's tables"
                ))),
            })
            .await?;
        let mut rows = Vec::new();
        let mut truncated = false;
        while let Some(batch) = query.stream.next().await {
            let batch = batch?;
            let room = row_limit - rows.len();
            if batch.num_rows() > room {
                rows.extend(encode::rows_as_json(&batch.slice(0, room)));
                truncated = true;
                break;
            }
            rows.extend(encode::rows_as_json(&batch));
        }
        Ok(ToolRows {
            column_names: query.column_names,
            column_types: query.column_types,
            rows,
            truncated,
        })
    }

    /// Plans `sql` as one read-only query (a SELECT: no DDL, DML or statements) whose current
    /// database is `db`, passing every table it names to `check` first (the reference as
    /// written, and its (database, table) unless it points outside the catalog).
    pub(crate) async fn read_only_query(
        &self,
        tenant: TenantId,
        db: &str,
        sql: &str,
        check: impl Fn(&str, Option<(&str, &str)>) -> Result<()>,
    ) -> Result<ReadOnlyQuery> {
        let mut commands = self.parse_text(tenant, sql)?;
        let statement = match (commands.pop(), commands.is_empty()) {
            (Some(Command::Sql(statement)), true) => *statement,
            (Some(_), true) => return Err(refused("only SELECT queries may run")),
            _ => return Err(refused("send one SELECT statement at a time")),
        };
        if !matches!(statement, Statement::Query(_)) {
            return Err(refused(
                "only SELECT queries may run; nothing may be changed",
            ));
        }
        let hints = names::hints(&statement);
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let state = self.session(snapshot, db, self.target_partitions)?;
        let statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        for reference in state.resolve_table_references(&statement)? {
            let resolved = db_and_table(&reference, db);
            check(
                &reference.to_string(),
                resolved.as_ref().map(|(d, t)| (d.as_str(), t.as_str())),
            )?;
        }
        let plan = state.statement_to_plan(statement).await?;
        if matches!(
            plan,
            LogicalPlan::Ddl(_)
                | LogicalPlan::Dml(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Copy(_)
        ) {
            return Err(refused(
                "only SELECT queries may run; nothing may be changed",
            ));
        }
        let physical = state.create_physical_plan(&plan).await?;
        let schema = physical.schema();
        let column_names = names::column_names(&schema, hints.as_deref(), names::Purpose::Show);
        let column_types = schema
            .fields()
            .iter()
            .map(|f| crate::catalog::tables::sql_type_name(f.data_type()))
            .collect();
        Ok(ReadOnlyQuery {
            column_names,
            column_types,
            stream: order::execute(physical, state.task_ctx())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Allowed;
    use crate::catalog::agents::split_entry;

    fn allowed(entries: &[&str]) -> Allowed {
        Allowed {
            tables: entries.iter().filter_map(|e| split_entry(e)).collect(),
            knowledge_bases: Vec::new(),
        }
    }

    #[test]
    fn remote_names_compare_as_the_remote_database_compares_them() {
        let grants = allowed(&["pg.orders", "PG.\"Invoices\"", "mindsdb.Sales"]);
        // A datasource's tables: exact, as PostgreSQL folds unquoted names to lower case.
        assert!(grants.permits("pg", "orders", true));
        assert!(
            !grants.permits("pg", "Orders", true),
            "pg.\"Orders\" is another table"
        );
        assert!(grants.permits("pg", "Invoices", true));
        assert!(!grants.permits("pg", "invoices", true));
        // Stored tables: names are case-insensitive here.
        assert!(grants.permits("mindsdb", "SALES", false));
        assert!(grants.permits("MindsDB", "sales", false));
        let all = allowed(&["pg.*"]);
        assert!(all.permits("pg", "Anything", true));
    }
}
