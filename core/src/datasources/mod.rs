//! Datasources: named connections to outside data — a PostgreSQL database (`CREATE DATABASE pg
//! ENGINE = 'postgres', PARAMETERS = {…}`, read and written) or a local directory of CSV and
//! Parquet files (`ENGINE = 'files'`, read-only) — whose tables are queried through them. Owns the
//! redb table `datasources`, keyed by (tenant, lower-cased name). Datasources share one name
//! space with projects: a name is either, never both.

pub(crate) mod directory;
pub(crate) mod postgres;
pub(crate) mod pushdown;
pub(crate) mod table;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::projects::{self, PROJECTS};
use crate::store;
use crate::tenant::TenantId;

pub(crate) const DATASOURCES: TableDefinition<(u64, &str), &str> =
    TableDefinition::new("datasources");

/// Parameters whose values are secrets, masked unless `show_secrets` is asked for.
const SECRET_KEYS: [&str; 3] = ["password", "api_key", "token"];

/// What a masked secret shows instead.
const MASK: &str = "******";

/// A datasource as stored.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Datasource {
    /// Stable id, never reused.
    pub(crate) id: u64,
    /// The name (lower case).
    pub(crate) name: String,
    /// The engine, `postgres`.
    pub(crate) engine: String,
    /// The PARAMETERS as given (checked against the engine when set).
    pub(crate) parameters: Map<String, Value>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub(crate) created_at: String,
}

impl std::fmt::Debug for Datasource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs and error messages.
        f.debug_struct("Datasource")
            .field("name", &self.name)
            .field("engine", &self.engine)
            .field("parameters", &self.connection_data(false))
            .finish()
    }
}

impl Datasource {
    /// The parameters as a JSON object text, secrets masked unless `show_secrets`.
    pub(crate) fn connection_data(&self, show_secrets: bool) -> String {
        let mut shown = self.parameters.clone();
        if !show_secrets {
            for (key, value) in shown.iter_mut() {
                if SECRET_KEYS.contains(&key.as_str()) {
                    *value = Value::String(MASK.into());
                }
            }
        }
        Value::Object(shown).to_string()
    }

    /// How this datasource is reached.
    pub(crate) fn connection(&self) -> Result<Connection> {
        match self.engine.as_str() {
            directory::ENGINE => Ok(Connection::Directory(
                directory::Directory::from_parameters(&self.parameters)?,
            )),
            _ => Ok(Connection::Postgres(postgres::Settings::from_parameters(
                &self.parameters,
            )?)),
        }
    }
}

/// A datasource's engine with its checked settings.
pub(crate) enum Connection {
    Postgres(postgres::Settings),
    Directory(directory::Directory),
}

impl Connection {
    /// The names of the tables it shows, sorted.
    pub(crate) async fn table_names(&self) -> Result<Vec<String>> {
        match self {
            Connection::Postgres(settings) => postgres::table_names(settings).await,
            Connection::Directory(dir) => Ok(dir.tables()?.into_iter().map(|(n, _)| n).collect()),
        }
    }

    /// The table `name`, or a native query's result when `name` starts with
    /// [`table::NATIVE`]; `None` when there is no such table.
    pub(crate) async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        match (self, name.strip_prefix(table::NATIVE)) {
            (Connection::Postgres(settings), Some(sql)) => Ok(Some(Arc::new(
                table::NativeQuery::prepare(settings.clone(), sql).await?,
            ))),
            (Connection::Postgres(settings), None) => {
                Ok(table::RemoteTable::open(settings.clone(), name)
                    .await?
                    .map(|t| Arc::new(t) as Arc<dyn TableProvider>))
            }
            (Connection::Directory(_), Some(_)) => Err(Error::invalid(
                "A 'files' datasource runs no native queries; select from its tables",
            )),
            (Connection::Directory(dir), None) => dir.table(name).await,
        }
    }

    /// The columns of the table `name`, for listings (agents' prompts).
    pub(crate) async fn table_schema(&self, name: &str) -> Result<Option<SchemaRef>> {
        Ok(self.table(name).await?.map(|t| t.schema()))
    }

    /// The PostgreSQL settings for a write to `table`; a `files` datasource is read-only.
    pub(crate) fn writable(&self, table: &str) -> Result<&postgres::Settings> {
        match self {
            Connection::Postgres(settings) => Ok(settings),
            Connection::Directory(_) => Err(Error::invalid(format!(
                "Cannot write '{table}': a 'files' datasource is read-only"
            ))),
        }
    }
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(DATASOURCES)?;
    Ok(())
}

/// Whether `name` (lower case) is a datasource of `tenant`.
pub(crate) fn exists(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<bool> {
    Ok(txn
        .open_table(DATASOURCES)?
        .get((tenant.0, name))?
        .is_some())
}

/// Checks `engine` and `parameters` and connects once, so a datasource that cannot work is
/// refused at CREATE / ALTER with the reason. Returns the engine's canonical name and the
/// parameters to store.
pub(crate) async fn check(
    engine: &str,
    parameters: Map<String, Value>,
) -> Result<(String, Map<String, Value>)> {
    let engine = engine.to_ascii_lowercase();
    match engine.as_str() {
        directory::ENGINE => {
            let stored = directory::Directory::from_parameters(&parameters)?.checked_parameters()?;
            Ok((directory::ENGINE.to_string(), stored))
        }
        postgres::ENGINE | "postgresql" => {
            let settings = postgres::Settings::from_parameters(&parameters)?;
            let client = settings.connect().await?;
            // The schema must exist, or every table would be "not found" later.
            let found = client
                .query_opt(
                    "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                    &[&settings.schema],
                )
                .await
                .map_err(|e| postgres::query_error(&e))?;
            if found.is_none() {
                return Err(Error::invalid(format!(
                    "PostgreSQL database '{}' at {}:{} has no schema '{}'",
                    settings.database, settings.host, settings.port, settings.schema
                )));
            }
            Ok((postgres::ENGINE.to_string(), parameters))
        }
        "mindsdb" => Err(Error::invalid(
            "ENGINE 'mindsdb' makes a project, which takes no PARAMETERS",
        )),
        other => Err(Error::invalid(format!(
            "Unknown database engine '{other}'; this build has 'postgres', 'files' (a local directory) and 'mindsdb' (a project)"
        ))),
    }
}

/// Stores a new datasource whose engine and parameters [`check`] accepted. Returns false when
/// the name was taken and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    engine: &str,
    parameters: Map<String, Value>,
    if_not_exists: bool,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    projects::validate_name("database", &key)?;
    let taken = projects::RESERVED.contains(&key.as_str())
        || projects::get(&txn.open_table(PROJECTS)?, tenant, &key)?.is_some()
        || exists(txn, tenant, &key)?;
    if taken {
        return if if_not_exists {
            Ok(false)
        } else {
            Err(Error::conflict(format!("Database '{key}' already exists")))
        };
    }
    let record = Datasource {
        id: store::next_id(txn, "datasource")?,
        name: key.clone(),
        engine: engine.to_string(),
        parameters,
        created_at: crate::time::now_text(),
    };
    txn.open_table(DATASOURCES)?.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(true)
}

/// The parameters of `source` after `changes` (a null value removes its key).
pub(crate) fn changed_parameters(
    source: &Datasource,
    changes: &Map<String, Value>,
) -> Map<String, Value> {
    let mut parameters = source.parameters.clone();
    for (key, value) in changes {
        if value.is_null() {
            parameters.remove(key);
        } else {
            parameters.insert(key.clone(), value.clone());
        }
    }
    parameters
}

/// Replaces the parameters of an existing datasource (checked by [`check`] first).
pub(crate) fn set_parameters(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    parameters: Map<String, Value>,
) -> Result<()> {
    let key = name.to_ascii_lowercase();
    let mut table = txn.open_table(DATASOURCES)?;
    let mut record = match get(&table, tenant, &key)? {
        Some(record) => record,
        None => {
            return Err(Error::not_found(format!(
                "Datasource '{key}' does not exist"
            )))
        }
    };
    record.parameters = parameters;
    table.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(())
}

/// Removes a datasource; true when it existed. Nothing is stored under it, so nothing else goes.
pub(crate) fn remove(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    let removed = txn
        .open_table(DATASOURCES)?
        .remove((tenant.0, key.as_str()))?
        .is_some();
    Ok(removed)
}

/// Looks a datasource up by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Option<Datasource>> {
    store::get_named(table, tenant, name)
}

/// All datasources of `tenant`, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
) -> Result<Vec<Datasource>> {
    store::list_named(table, tenant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn connection_data_masks_secrets_unless_asked() {
        let source = Datasource {
            id: 1,
            name: "pg".into(),
            engine: "postgres".into(),
            parameters: json!({"host": "127.0.0.1", "password": "s3cret"})
                .as_object()
                .unwrap()
                .clone(),
            created_at: String::new(),
        };
        assert_eq!(
            source.connection_data(false),
            r#"{"host":"127.0.0.1","password":"******"}"#
        );
        assert!(source.connection_data(true).contains("s3cret"));
    }
}
