//! The names of a tenant's databases ("namespaces"): projects and datasources share one set of
//! names, beside the built-in `information_schema` and `files`. What a name may look like, which
//! names are built in, and whether a name is taken are decided here, so projects, datasources,
//! agents and SQL agree.

use redb::{ReadableTable, WriteTransaction};

use crate::error::{Error, Result};
use crate::store::schema::{DATASOURCES, PROJECTS};
use crate::tenant::TenantId;

/// The built-in system namespace, read-only.
pub(crate) const SYSTEM_DB: &str = "information_schema";
/// The built-in data namespace for uploaded files.
pub(crate) const FILES_DB: &str = "files";
/// MindsDB's built-in log namespace, read-only: the runs of the user's jobs.
pub(crate) const LOG_DB: &str = "log";
/// The database holding the sheets of the uploaded workbook `file` (of several sheets), as
/// tables `sheet_1`, `sheet_2`, … in the workbook's order; no project can be named so, and
/// neither SQL's two-part names nor `SHOW TABLES` reach it (`files.book.sheet` does, by the
/// sheet's name). The file's own table lists the sheets.
pub(crate) fn sheets_db(file: &str) -> String {
    format!("{FILES_DB}/{}", file.to_ascii_lowercase())
}

/// Sheets one uploaded workbook may hold: each becomes a table.
pub(crate) const MAX_SHEETS: usize = 1024;

/// The table of `sheets_db` holding the sheet at `position` (from 1).
pub(crate) fn sheet_table(position: usize) -> String {
    format!("sheet_{position}")
}

/// Names of built-in namespaces that no project or datasource may take.
pub(crate) const RESERVED: [&str; 3] = [SYSTEM_DB, FILES_DB, LOG_DB];
/// The tables of `log` (MindsDB's `llm_log` is not kept here: LLM calls are not logged).
pub(crate) const LOG_TABLES: [&str; 1] = ["jobs_history"];
/// The tables of `information_schema`.
pub(crate) const INFO_TABLES: [&str; 12] = [
    "databases",
    "tables",
    "columns",
    "agents",
    "models",
    "knowledge_bases",
    "knowledge_base_inserts",
    "ml_engines",
    "handlers",
    "jobs",
    "jobs_history",
    "queries",
];

/// Checks a name of an object (project, table, model, agent, file, …): 1 to 64 letters, digits
/// and underscores, not starting with a digit. `kind` names the object in the error.
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

/// Whether `name` (lower case) is built in or names a project or datasource of `tenant`.
pub(crate) fn taken(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<bool> {
    Ok(RESERVED.contains(&name)
        || txn.open_table(PROJECTS)?.get((tenant.0, name))?.is_some()
        || is_datasource(txn, tenant, name)?)
}

/// Whether `name` (lower case) is a datasource of `tenant`.
pub(crate) fn is_datasource(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<bool> {
    Ok(txn
        .open_table(DATASOURCES)?
        .get((tenant.0, name))?
        .is_some())
}
