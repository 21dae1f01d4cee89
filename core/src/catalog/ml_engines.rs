//! ML engines: named settings of a model handler (`CREATE ML_ENGINE oa FROM openai USING
//! api_key = '…'`), which a model names as its engine (`USING engine = 'oa'`) to train with
//! that handler and those settings. Owns the rows of the redb table `ml_engines`, keyed by
//! (tenant, lower-cased name). The handlers themselves are built in (see
//! [`models::ENGINES`](crate::catalog::models)); their own names always name them, so an ML
//! engine cannot take one.

use redb::WriteTransaction;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::datasources::shown_parameters;
use crate::catalog::models;
use crate::catalog::namespace::validate_name;
use crate::error::{Error, Result, Subject};
use crate::store::schema::ML_ENGINES;
use crate::store::{self, Reads};
use crate::tenant::TenantId;

/// An ML engine as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MlEngine {
    /// Its name (lower case).
    pub(crate) name: String,
    /// The handler it sets up (`openai`, `builtin`, `lightwood`).
    pub(crate) handler: String,
    /// The settings every model of this engine starts from (its own `USING` wins).
    pub(crate) parameters: Map<String, Value>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub(crate) created_at: String,
}

impl MlEngine {
    /// `information_schema.ml_engines`'s row: name, handler, and the parameters as a JSON
    /// object text, secrets masked unless `show_secrets`.
    pub(crate) fn system_row(&self, show_secrets: bool) -> [String; 3] {
        let shown = shown_parameters(&self.parameters, show_secrets);
        [
            self.name.clone(),
            self.handler.clone(),
            Value::Object(shown).to_string(),
        ]
    }
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(ML_ENGINES)?;
    Ok(())
}

/// Stores ML engine `name` of `handler` with `parameters`. Returns false when it existed and
/// `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    handler: &str,
    parameters: Map<String, Value>,
    if_not_exists: bool,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    validate_name("ML engine", &key)?;
    let handler = handler.to_ascii_lowercase();
    if !models::ENGINES.contains(&handler.as_str()) {
        return Err(Error::not_found(format!(
            "There is no engine '{handler}'; this build has: {}",
            models::ENGINES.join(", ")
        ))
        .about(Subject::MlHandler));
    }
    if models::ENGINES.contains(&key.as_str()) {
        return Err(Error::conflict(format!(
            "'{key}' is a built-in ML engine; choose another name"
        )));
    }
    let mut table = txn.open_table(ML_ENGINES)?;
    if store::get_named::<MlEngine>(&table, tenant, &key)?.is_some() {
        return match if_not_exists {
            true => Ok(false),
            false => Err(Error::conflict(format!("ML engine '{key}' already exists"))),
        };
    }
    let record = MlEngine {
        name: key.clone(),
        handler,
        parameters,
        created_at: crate::time::now_text(),
    };
    table.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&record)?.as_str(),
    )?;
    Ok(true)
}

/// Removes ML engine `name`; `if_exists` makes a missing one a no-op. The models made with it
/// keep working: each copied its settings when it was created.
pub(crate) fn drop(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let key = name.to_ascii_lowercase();
    if models::ENGINES.contains(&key.as_str()) {
        return Err(Error::invalid(format!(
            "'{key}' is a built-in ML engine and cannot be dropped"
        )));
    }
    let removed = txn
        .open_table(ML_ENGINES)?
        .remove((tenant.0, key.as_str()))?
        .is_some();
    if !removed && !if_exists {
        return Err(Error::not_found(format!(
            "ML engine '{key}' does not exist"
        )));
    }
    Ok(())
}

/// Every ML engine of `tenant`, by name.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId) -> Result<Vec<MlEngine>> {
    store::list_named(&txn.reading(ML_ENGINES)?, tenant)
}

/// `using` with the engine it names resolved: when `engine` names an ML engine of `tenant`,
/// its handler becomes the engine and its parameters fill in what `using` does not set. A
/// built-in engine's name, or none, leaves `using` as it is.
pub(crate) fn resolve(
    txn: &impl Reads,
    tenant: TenantId,
    using: Map<String, Value>,
) -> Result<Map<String, Value>> {
    let Some(Value::String(name)) = using.get("engine") else {
        return Ok(using);
    };
    if models::ENGINES.contains(&name.to_ascii_lowercase().as_str()) {
        return Ok(using);
    }
    let table = txn.reading(ML_ENGINES)?;
    let Some(engine) = store::get_named::<MlEngine>(&table, tenant, name)? else {
        return Ok(using);
    };
    let mut resolved = engine.parameters;
    resolved.extend(using);
    resolved.insert("engine".into(), Value::String(engine.handler));
    Ok(resolved)
}
