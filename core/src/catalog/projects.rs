//! Projects: the namespaces that hold tables (and later models and agents). Owns the redb table
//! `projects`, keyed by (tenant, lower-cased name). The default project always exists and cannot
//! be dropped; names are shared with datasources and the built-in namespaces (`namespace`).

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::catalog::namespace::{self, validate_name, RESERVED};
use crate::error::{Error, Result};
use crate::store;
use crate::store::schema::PROJECTS;
use crate::store::Reads;
use crate::tenant::TenantId;

/// A project as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    /// Stable id, never reused.
    pub id: u64,
    /// The project name (lower case).
    pub name: String,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
}

impl Project {
    /// The project as MindsDB's HTTP API shows it: `{"name"}` only (its REST routes list and
    /// get projects by name; the record itself is what the C and Python fronts return).
    pub fn to_wire_json(&self) -> serde_json::Value {
        serde_json::json!({"name": self.name})
    }
}

/// Creates `name` for `tenant`. Returns false when it existed and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    if_not_exists: bool,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    validate_name("project", &key)?;
    if RESERVED.contains(&key.as_str()) {
        return Err(Error::conflict(format!(
            "Database '{key}' already exists (it is built in)"
        )));
    }
    if namespace::taken(txn, tenant, &key)? {
        return if if_not_exists {
            Ok(false)
        } else {
            Err(Error::conflict(format!("Database '{key}' already exists")))
        };
    }
    let mut table = txn.open_table(PROJECTS)?;
    let project = Project {
        id: store::next_tenant_id(txn, tenant, "project")?,
        name: key.clone(),
        created_at: crate::time::now_text(),
    };
    table.insert(
        (tenant.0, key.as_str()),
        serde_json::to_string(&project)?.as_str(),
    )?;
    Ok(true)
}

/// Makes sure the default project exists for `tenant`.
pub(crate) fn ensure_default(
    txn: &WriteTransaction,
    tenant: TenantId,
    default: &str,
) -> Result<()> {
    create(txn, tenant, default, true).map(|_| ())
}

/// Removes the project record (the caller drops its contents in the same transaction).
/// Returns false when it did not exist and `if_exists` was set.
pub(crate) fn remove(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    if_exists: bool,
    default: &str,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    if key == default || RESERVED.contains(&key.as_str()) {
        return Err(Error::invalid(format!(
            "Database '{key}' cannot be dropped"
        )));
    }
    let mut table = txn.open_table(PROJECTS)?;
    let removed = table.remove((tenant.0, key.as_str()))?.is_some();
    if !removed && !if_exists {
        return Err(Error::not_found(format!("Database '{key}' does not exist")));
    }
    Ok(removed)
}

/// Looks a project up by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Option<Project>> {
    store::get_named(table, tenant, name)
}

/// All projects of `tenant`, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
) -> Result<Vec<Project>> {
    store::list_named(table, tenant)
}

/// All projects of `tenant`, by name, read in `txn`.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId) -> Result<Vec<Project>> {
    list(&txn.reading(PROJECTS)?, tenant)
}

/// A project by name (case-insensitive), read in `txn`.
pub(crate) fn named(txn: &impl Reads, tenant: TenantId, name: &str) -> Result<Option<Project>> {
    get(&txn.reading(PROJECTS)?, tenant, name)
}
