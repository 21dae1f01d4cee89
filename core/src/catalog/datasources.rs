//! Datasources: named connections to outside data — a PostgreSQL database (`CREATE DATABASE pg
//! ENGINE = 'postgres', PARAMETERS = {…}`, read and written) or a local directory of CSV and
//! Parquet files (`ENGINE = 'files'`, read-only) — whose tables are queried through them. Owns the
//! rows of the redb table `datasources`, keyed by (tenant, lower-cased name). Datasources share
//! one name space with projects: a name is either, never both. Reaching them is `connectors`.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::namespace;
use crate::catalog::quotas::{self, Slot};
use crate::config::HostedConfig;
use crate::error::{Error, Result};
use crate::store;
use crate::store::schema::DATASOURCES;
use crate::store::Reads;
use crate::tenant::TenantId;

/// Parameters whose values are secrets, masked unless `show_secrets` is asked for.
const SECRET_KEYS: [&str; 3] = ["password", "api_key", "token"];

/// What a masked secret shows instead.
const MASK: &str = "******";

/// `parameters` as a caller may see them: every secret (see [`is_secret`]) masked unless
/// `show_secrets`.
pub(crate) fn shown_parameters(
    parameters: &Map<String, Value>,
    show_secrets: bool,
) -> Map<String, Value> {
    let mut shown = parameters.clone();
    if !show_secrets {
        for (key, value) in shown.iter_mut() {
            if is_secret(key) {
                *value = Value::String(MASK.into());
            }
        }
    }
    shown
}

/// Whether a parameter named `key` holds a secret: `password`, `api_key`, `token`, and their
/// spellings with a prefix or in another case (`openai_api_key`, `PASSWORD`), or any key that
/// says `secret`.
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|secret| key.ends_with(secret)) || key.contains("secret")
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
        Value::Object(shown_parameters(&self.parameters, show_secrets)).to_string()
    }

    /// What a caller may see of it: secrets masked.
    pub(crate) fn info(&self) -> DatasourceInfo {
        let connection_data = match serde_json::from_str(&self.connection_data(false)) {
            Ok(Value::Object(data)) => data,
            _ => Map::new(),
        };
        let modified = if self.modified_at.is_empty() {
            &self.created_at
        } else {
            &self.modified_at
        };
        DatasourceInfo {
            name: self.name.clone(),
            engine: self.engine.clone(),
            description: self.description.clone(),
            connection_data,
            created_at: self.created_at.clone(),
            modified_at: modified.clone(),
        }
    }
}

/// A datasource as callers see it, secrets masked; it serializes in the Minds API's shape
/// (`{"name", "engine", "description", "connection_data", "created_at", "modified_at"}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatasourceInfo {
    /// The name (lower case).
    pub name: String,
    /// The engine (`postgres`, `files`).
    pub engine: String,
    /// What the data is, for people and for minds.
    pub description: Option<String>,
    /// The connection parameters, every secret (`password`, `api_key`, `token`) masked.
    pub connection_data: Map<String, Value>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// Last change, same form.
    pub modified_at: String,
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(DATASOURCES)?;
    Ok(())
}

/// Stores a new datasource whose engine and parameters `connectors::check` accepted, within the
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

/// A datasource to create, as `connectors::check` accepted it.
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

/// Replaces the parameters of an existing datasource (checked by `connectors::check` first).
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
    /// New parameters, already through `connectors::check`.
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

/// All datasources of `tenant`, by name, read in `txn`.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId) -> Result<Vec<Datasource>> {
    list(&txn.reading(DATASOURCES)?, tenant)
}

/// A datasource by name (case-insensitive), read in `txn`.
pub(crate) fn named(txn: &impl Reads, tenant: TenantId, name: &str) -> Result<Option<Datasource>> {
    get(&txn.reading(DATASOURCES)?, tenant, name)
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
