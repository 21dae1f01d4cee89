//! Rules that span several kinds of catalog object, in one place: each runs inside the caller's
//! write transaction, so everything it changes lands together or not at all. The record modules
//! (`projects`, `datasources`, `minds`, `tables`, `views`, `agents`, `models`) each keep their own rows
//! and know nothing of one another; what one object's change means for the others is here.

use redb::WriteTransaction;

use crate::catalog::datasources::{self, Change, Datasource};
use crate::catalog::{
    agents, kb_index, knowledge_bases, minds, models, projects, storage, tables, views,
};
use crate::error::{Error, Result};
use crate::store::schema::{KNOWLEDGE_BASES, PROJECTS, TABLES, VIEWS};
use crate::tenant::TenantId;

/// `DROP DATABASE` / `DROP PROJECT name`: a datasource goes with its record alone (nothing is
/// stored under it); a project goes with its tables, views, knowledge bases, agents and models. The default project and
/// the built-in namespaces cannot be dropped; a missing name is an error unless `if_exists`.
pub(crate) fn drop_database(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    if_exists: bool,
    default_project: &str,
) -> Result<()> {
    if remove_datasource(txn, tenant, name)? {
        return Ok(());
    }
    for kb in knowledge_bases::list(&txn.open_table(KNOWLEDGE_BASES)?, tenant, name)? {
        minds::check_knowledge_base_unused(txn, tenant, name, &kb.name)?;
    }
    if projects::remove(txn, tenant, name, if_exists, default_project)? {
        tables::drop_all(txn, tenant, name)?;
        views::drop_all(txn, tenant, name)?;
        knowledge_bases::drop_all(txn, tenant, name)?;
        agents::drop_all(txn, tenant, name)?;
        models::drop_all(txn, tenant, name)?;
    }
    Ok(())
}

/// Stores a view (see [`views::create`]); a table of its name in its project is a conflict,
/// as tables and views share names.
pub(crate) fn create_view(
    txn: &WriteTransaction,
    tenant: TenantId,
    view: views::View,
    or_replace: bool,
    if_not_exists: bool,
) -> Result<()> {
    name_is_no_table(txn, tenant, &view.project, &view.name)?;
    views::create(txn, tenant, view, or_replace, if_not_exists)
}

/// Stores a knowledge base (see [`knowledge_bases::create`]): its project must exist, and no
/// table or view of the project may have its name.
pub(crate) fn create_knowledge_base(
    txn: &WriteTransaction,
    tenant: TenantId,
    kb: knowledge_bases::KnowledgeBase,
    if_not_exists: bool,
    egress: &crate::egress::Egress,
) -> Result<()> {
    if projects::get(&txn.open_table(PROJECTS)?, tenant, &kb.project)?.is_none() {
        return Err(Error::not_found(format!(
            "Project '{}' not found",
            kb.project
        )));
    }
    let exists = knowledge_bases::get(
        &txn.open_table(KNOWLEDGE_BASES)?,
        tenant,
        &kb.project,
        &kb.name,
    )?;
    if exists.is_none() {
        name_is_no_table(txn, tenant, &kb.project, &kb.name)?;
        name_is_no_view(txn, tenant, &kb.project, &kb.name)?;
    }
    knowledge_bases::create(txn, tenant, kb, if_not_exists, egress)
}

/// `DROP KNOWLEDGE_BASE` (see [`knowledge_bases::drop_kb`]): one a mind searches stays.
pub(crate) fn drop_knowledge_base(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    minds::check_knowledge_base_unused(txn, tenant, project, name)?;
    knowledge_bases::drop_kb(txn, tenant, project, name, if_exists)
}

/// Fails when `project` has a table or a knowledge base called `name`.
fn name_is_no_table(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<()> {
    name_is_no_knowledge_base(txn, tenant, project, name)?;
    if tables::get(&txn.open_table(TABLES)?, tenant, project, name)?.is_some() {
        return Err(Error::conflict(format!(
            "Table '{name}' already exists in database: {project}"
        )));
    }
    Ok(())
}

/// Fails when `project` has a knowledge base called `name`.
fn name_is_no_knowledge_base(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<()> {
    if knowledge_bases::get(&txn.open_table(KNOWLEDGE_BASES)?, tenant, project, name)?.is_some() {
        return Err(Error::conflict(format!(
            "Knowledge base '{name}' already exists in project: {project}"
        )));
    }
    Ok(())
}

/// Fails when `project` has a view or a knowledge base called `name` (a new table cannot take it).
pub(crate) fn name_is_no_view(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<()> {
    name_is_no_knowledge_base(txn, tenant, project, name)?;
    if views::get(&txn.open_table(VIEWS)?, tenant, project, name)?.is_some() {
        return Err(Error::conflict(format!(
            "View '{name}' already exists in database: {project}"
        )));
    }
    Ok(())
}

/// Removes a datasource; true when it existed. One a mind reads is refused with Conflict.
pub(crate) fn remove_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    minds::check_unused(txn, tenant, &key)?;
    datasources::remove(txn, tenant, &key)
}

/// Applies a Minds API change to a datasource; a rename points the minds that read it at the
/// new name.
pub(crate) fn update_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    change: Change,
) -> Result<Datasource> {
    let old = name.to_ascii_lowercase();
    let updated = datasources::update(txn, tenant, &old, change)?;
    if updated.name != old {
        minds::rename_datasource(txn, tenant, &old, &updated.name)?;
    }
    Ok(updated)
}

/// Counts the bytes every tenant stores (see `storage`), from its tables and its knowledge
/// bases' indexes: once, when a file written before the counts existed is first opened.
pub(crate) fn count_storage(txn: &WriteTransaction) -> Result<()> {
    let owners = tables::owners(txn)?;
    let mut bytes = tables::stored_bytes(txn)?;
    for (table, indexes) in kb_index::stored_bytes(txn)? {
        if let Some(tenant) = owners.get(&table) {
            *bytes.entry(*tenant).or_insert(0) += indexes;
        }
    }
    storage::set_all(txn, &bytes)
}
