//! Projects: the namespaces that hold tables (and later models and agents). Owns the redb table
//! `projects`, keyed by (tenant, lower-cased name). The default project always exists and cannot
//! be dropped; `information_schema`, `files` and `log` are reserved built-in namespaces.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store;
use crate::tenant::TenantId;

pub(crate) const PROJECTS: TableDefinition<(u64, &str), &str> = TableDefinition::new("projects");

/// Names of built-in namespaces that no project may take.
pub(crate) const RESERVED: [&str; 3] = ["information_schema", "files", "log"];

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

/// Checks a project (or table) name: letters, digits and underscores, not starting with a digit.
pub(crate) fn validate_name(kind: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Invalid {kind} name '{name}': use 1 to 64 letters, digits or underscores, not starting with a digit"
        )))
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
    let mut table = txn.open_table(PROJECTS)?;
    if table.get((tenant.0, key.as_str()))?.is_some()
        || crate::datasources::exists(txn, tenant, &key)?
    {
        return if if_not_exists {
            Ok(false)
        } else {
            Err(Error::conflict(format!("Database '{key}' already exists")))
        };
    }
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
