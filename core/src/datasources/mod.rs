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
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::{Config, Edition, HostedConfig};
use crate::egress::Egress;
use crate::error::{Error, ErrorKind, Result};
use crate::namespace;
use crate::quotas::{self, Slot};
use crate::store;
use crate::store::schema::DATASOURCES;
use crate::tenant::TenantId;

/// Parameters whose values are secrets, masked unless `show_secrets` is asked for.
const SECRET_KEYS: [&str; 3] = ["password", "api_key", "token"];

/// What a masked secret shows instead.
const MASK: &str = "******";

/// How datasources reach their servers: the engine's egress policy, and what a server may send.
#[derive(Debug, Clone)]
pub(crate) struct Net {
    pub(crate) egress: Egress,
    /// `datasources.max_message_mb`, in bytes.
    pub(crate) max_message_bytes: usize,
    /// `datasources.max_tables`.
    pub(crate) max_tables: usize,
}

impl Net {
    /// The reach `config` describes.
    pub(crate) fn new(config: &Config) -> Result<Net> {
        Ok(Net {
            egress: config.egress()?,
            max_message_bytes: usize::try_from(
                config
                    .datasources
                    .max_message_mb
                    .saturating_mul(1024 * 1024),
            )
            .unwrap_or(usize::MAX),
            max_tables: config.datasources.max_tables,
        })
    }
}

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
    /// Last change, same form (records written before it existed show their creation).
    #[serde(default)]
    pub(crate) modified_at: String,
    /// What the data is, for people and for minds (Minds API `description`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
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

    /// The datasource in the Minds API's shape: `name`, `engine`, `description`,
    /// `connection_data` (secrets masked), `created_at`, `modified_at`.
    pub(crate) fn to_minds_json(&self) -> Value {
        let connection_data: Value =
            serde_json::from_str(&self.connection_data(false)).unwrap_or(Value::Null);
        let modified = if self.modified_at.is_empty() {
            &self.created_at
        } else {
            &self.modified_at
        };
        serde_json::json!({
            "name": self.name,
            "engine": self.engine,
            "description": self.description,
            "connection_data": connection_data,
            "created_at": self.created_at,
            "modified_at": modified,
        })
    }

    /// How this datasource is reached, through `net`.
    pub(crate) fn connection(&self, net: &Net) -> Result<Connection> {
        match self.engine.as_str() {
            directory::ENGINE => Ok(Connection::Directory(
                directory::Directory::from_parameters(&self.parameters)?,
            )),
            _ => Ok(Connection::Postgres(postgres::Settings::from_parameters(
                &self.parameters,
                net,
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

/// Checks `engine` and `parameters` and connects once, so a datasource that cannot work is
/// refused at CREATE / ALTER with the reason. Returns the engine's canonical name and the
/// parameters to store.
pub(crate) async fn check(
    engine: &str,
    parameters: Map<String, Value>,
    edition: Edition,
    net: &Net,
) -> Result<(String, Map<String, Value>)> {
    let engine = engine.to_ascii_lowercase();
    match engine.as_str() {
        // The server's files are not its users' to read.
        directory::ENGINE if edition == Edition::Hosted => Err(Error::new(
            ErrorKind::Forbidden,
            "ENGINE 'files' reads the server's own directories and is not offered in the hosted edition",
        )),
        directory::ENGINE => {
            let stored = directory::Directory::from_parameters(&parameters)?.checked_parameters()?;
            Ok((directory::ENGINE.to_string(), stored))
        }
        postgres::ENGINE | "postgresql" => {
            let settings = postgres::Settings::from_parameters(&parameters, net)?;
            // A socket path reaches the server machine's own databases with its OS user.
            if settings.host.starts_with('/') {
                net.egress.check_unix_socket("PostgreSQL ('host' a path)")?;
            }
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

/// Stores a new datasource whose engine and parameters [`check`] accepted, within the
/// tenant's datasource quota. Returns false when the name was taken and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    new: NewDatasource<'_>,
    if_not_exists: bool,
    hosted: &HostedConfig,
) -> Result<bool> {
    let NewDatasource {
        name,
        engine,
        parameters,
        description,
    } = new;
    let key = name.to_ascii_lowercase();
    namespace::validate_name("database", &key)?;
    if namespace::taken(txn, tenant, &key)? {
        return if if_not_exists {
            Ok(false)
        } else {
            Err(Error::conflict(format!("Database '{key}' already exists")))
        };
    }
    let used = list(&txn.open_table(DATASOURCES)?, tenant)?.len() as u64;
    quotas::check_slot(txn, tenant, hosted, Slot::Datasources, used)?;
    let now = crate::time::now_text();
    let record = Datasource {
        id: store::next_tenant_id(txn, tenant, "datasource")?,
        name: key.clone(),
        engine: engine.to_string(),
        parameters,
        created_at: now.clone(),
        modified_at: now,
        description,
    };
    txn.open_table(DATASOURCES)?.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(true)
}

/// A datasource to create, as [`check`] accepted it.
pub(crate) struct NewDatasource<'a> {
    /// Its name as given.
    pub(crate) name: &'a str,
    /// The canonical engine name.
    pub(crate) engine: &'a str,
    /// The parameters to store.
    pub(crate) parameters: Map<String, Value>,
    /// Minds API `description`.
    pub(crate) description: Option<String>,
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
    record.modified_at = crate::time::now_text();
    table.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(())
}

/// A Minds API change to a datasource: each field given replaces the stored one.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// A new name (renaming it, and pointing the minds that read it there).
    pub(crate) name: Option<String>,
    /// New parameters, already through [`check`].
    pub(crate) parameters: Option<Map<String, Value>>,
    /// A new description.
    pub(crate) description: Option<String>,
}

/// Applies a [`Change`] to datasource `name` and returns the result (minds that read a renamed
/// datasource are `rules::update_datasource`'s).
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    change: Change,
) -> Result<Datasource> {
    let key = name.to_ascii_lowercase();
    let mut record = get(&txn.open_table(DATASOURCES)?, tenant, &key)?
        .ok_or_else(|| Error::not_found(format!("Datasource '{key}' not found")))?;
    if let Some(parameters) = change.parameters {
        record.parameters = parameters;
    }
    if let Some(description) = change.description {
        record.description = Some(description);
    }
    if let Some(new) = change.name.map(|n| n.to_ascii_lowercase()) {
        if new != key {
            namespace::validate_name("database", &new)?;
            if namespace::taken(txn, tenant, &new)? {
                return Err(Error::conflict(format!("Database '{new}' already exists")));
            }
            txn.open_table(DATASOURCES)?
                .remove((tenant.0, key.as_str()))?;
            record.name = new;
        }
    }
    record.modified_at = crate::time::now_text();
    txn.open_table(DATASOURCES)?.insert(
        (tenant.0, record.name.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(record)
}

/// `connection_data` sent back to replace `source`'s parameters: a secret still showing the
/// mask (as GET gave it) keeps its stored value.
pub(crate) fn unmasked(source: &Datasource, mut given: Map<String, Value>) -> Map<String, Value> {
    for (key, value) in given.iter_mut() {
        if SECRET_KEYS.contains(&key.as_str()) && value.as_str() == Some(MASK) {
            if let Some(stored) = source.parameters.get(key) {
                *value = stored.clone();
            }
        }
    }
    given
}

/// Removes a datasource's record; true when it existed. Nothing is stored under it. Whether
/// it may go (no mind reads it) is `rules::remove_datasource`'s to decide.
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
            modified_at: String::new(),
            description: None,
        };
        assert_eq!(
            source.connection_data(false),
            r#"{"host":"127.0.0.1","password":"******"}"#
        );
        assert!(source.connection_data(true).contains("s3cret"));
    }
}
