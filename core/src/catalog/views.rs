//! Views: a named query of a project, kept as SQL text and planned again each time a statement
//! names it (so it always reads the current rows and definitions of what it selects from).
//! Owns the redb table `views`. Views share the names of a project's tables: the caller checks
//! that a new view's name is no table's (and a new table's no view's).

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::catalog::namespace::validate_name;
use crate::error::{Error, Result};
use crate::store::schema::VIEWS;
use crate::store::{self, Reads};
use crate::tenant::TenantId;

/// A view's catalog record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct View {
    /// The name as created.
    pub name: String,
    /// The project it lives in (lower case); names in its query resolve there first.
    pub project: String,
    /// Its query, as SQL text.
    pub query: String,
    /// Names given to its columns (`CREATE VIEW v (a, b) AS …`); empty to keep the query's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
}

impl View {
    /// The record MindsDB's `/api/projects/{p}/views` routes answer: `{"id", "name",
    /// "query"}` (views have no id here: `null`).
    pub fn to_wire_json(&self) -> serde_json::Value {
        serde_json::json!({"id": null, "name": self.name, "query": self.query})
    }
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(VIEWS)?;
    Ok(())
}

/// One view by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<View>> {
    store::get_in_project(table, tenant, project, name)
}

/// Every view of a project, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<View>> {
    store::list_in_project(table, tenant, project)
}

/// Every view of a project, by name, read in `txn`.
pub(crate) fn in_project(txn: &impl Reads, tenant: TenantId, project: &str) -> Result<Vec<View>> {
    list(&txn.reading(VIEWS)?, tenant, project)
}

/// A view of a project by name (case-insensitive), read in `txn`.
pub(crate) fn named(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<View>> {
    get(&txn.reading(VIEWS)?, tenant, project, name)
}

/// Stores `view`: a new one, or in place of the one of that name when `or_replace`; with
/// `if_not_exists` an existing view is kept as it is.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    view: View,
    or_replace: bool,
    if_not_exists: bool,
) -> Result<()> {
    validate_name("view", &view.name)?;
    let key = view.name.to_ascii_lowercase();
    let mut views = txn.open_table(VIEWS)?;
    let exists = views
        .get((tenant.0, view.project.as_str(), key.as_str()))?
        .is_some();
    if exists && if_not_exists {
        return Ok(());
    }
    if exists && !or_replace {
        return Err(Error::conflict(format!(
            "View '{}' already exists in database: {}",
            view.name, view.project
        )));
    }
    views.insert(
        (tenant.0, view.project.as_str(), key.as_str()),
        serde_json::to_string(&view)?.as_str(),
    )?;
    Ok(())
}

/// Removes the view `name`; `if_exists` makes a missing one a no-op.
pub(crate) fn drop_view(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let removed = txn
        .open_table(VIEWS)?
        .remove((tenant.0, project.as_str(), key.as_str()))?
        .is_some();
    if !removed && !if_exists {
        return Err(Error::not_found(format!(
            "View '{name}' not found in database: {project}"
        )));
    }
    Ok(())
}

/// Drops every view of a project (when the project itself is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let project = project.to_ascii_lowercase();
    txn.open_table(VIEWS)?.retain_in(
        (tenant.0, project.as_str(), "")..(tenant.0, project.as_str(), "\u{10FFFF}"),
        |_, _| false,
    )?;
    Ok(())
}
