//! Rules that span several kinds of catalog object, in one place: each runs inside the caller's
//! write transaction, so everything it changes lands together or not at all. The record modules
//! (`projects`, `datasources`, `minds`, `tables`, `views`, `agents`, `models`) each keep their own rows
//! and know nothing of one another; what one object's change means for the others is here.

use redb::WriteTransaction;

use crate::catalog::datasources::{self, Change, Datasource};
use crate::catalog::landing::{self, Landed};
use crate::catalog::{
    agents, jobs, kb_index, knowledge_bases, minds, models, projects, storage, tables, views,
};
use crate::error::{Error, Result};
use crate::store::schema::{KNOWLEDGE_BASES, PROJECTS, TABLES, VIEWS};
use crate::tenant::TenantId;

/// `DROP DATABASE` / `DROP PROJECT name`: a datasource goes with its record alone (nothing is
/// stored under it); a project goes with its tables, views, knowledge bases, agents and models. The default project and
/// the built-in namespaces cannot be dropped; a missing name is an error unless `if_exists`.
/// Returns the PostgreSQL tables its knowledge bases leave (see `knowledge_bases::drop_all`).
pub(crate) fn drop_database(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    if_exists: bool,
    default_project: &str,
) -> Result<Vec<String>> {
    if remove_datasource(txn, tenant, name)? {
        return Ok(Vec::new());
    }
    for kb in knowledge_bases::list(&txn.open_table(KNOWLEDGE_BASES)?, tenant, name)? {
        minds::check_knowledge_base_unused(txn, tenant, name, &kb.name)?;
    }
    if projects::remove(txn, tenant, name, if_exists, default_project)? {
        tables::drop_all(txn, tenant, name)?;
        views::drop_all(txn, tenant, name)?;
        let owned = knowledge_bases::drop_all(txn, tenant, name)?;
        agents::drop_all(txn, tenant, name)?;
        models::drop_all(txn, tenant, name)?;
        jobs::drop_all(txn, tenant, name)?;
        return Ok(owned);
    }
    Ok(Vec::new())
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
    chunks: Option<&datafusion::arrow::datatypes::Schema>,
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
    // Checked again here: the datasource may have gone since the caller looked.
    if let (None, Some(database)) = (
        &exists,
        kb.storage.as_ref().and_then(|s| s.database.as_deref()),
    ) {
        if datasources::named(txn, tenant, database)?.is_none() {
            return Err(Error::not_found(format!(
                "Knowledge base '{}' keeps its chunks in datasource '{database}', which does not exist",
                kb.name
            )));
        }
    }
    knowledge_bases::create(txn, tenant, kb, if_not_exists, egress, chunks)
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

/// Removes a datasource; true when it existed. One a mind reads or a knowledge base keeps
/// its chunks in is refused with Conflict.
pub(crate) fn remove_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
) -> Result<bool> {
    let key = name.to_ascii_lowercase();
    minds::check_unused(txn, tenant, &key)?;
    if datasources::named(txn, tenant, &key)?.is_some() {
        knowledge_bases::check_storage_unused(txn, tenant, &key)?;
    }
    datasources::remove(txn, tenant, &key)
}

/// Applies a Minds API change to a datasource; a rename points the minds that read it and
/// the knowledge bases kept in it at the new name.
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
        knowledge_bases::rename_storage(txn, tenant, &old, &updated.name)?;
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

/// One step of removing what the landing `id` left (see `landing`): a statement's data that
/// never committed, or what a DROP unlinked. Returns true once nothing of it is left.
fn discard_landed_step(txn: &WriteTransaction, id: u64) -> Result<bool> {
    match landing::get(txn, id)? {
        Some(Landed::Search { tenant, table }) => {
            let done = kb_index::sweep_step(txn, TenantId(tenant), table)?;
            if done {
                landing::end(txn, id)?;
            }
            Ok(done)
        }
        _ => tables::discard_landed_step(txn, id),
    }
}

/// One step of the sweeper's work on the landing `id`, only while it is what a DROP left: an id
/// seen in an earlier snapshot may since name another landing (a ROLLBACK hands ids out
/// again). Returns true once nothing of it is left.
pub(crate) fn sweep_dropped_step(txn: &WriteTransaction, id: u64) -> Result<bool> {
    match landing::get(txn, id)? {
        Some(Landed::Dropped { .. } | Landed::Search { .. }) => discard_landed_step(txn, id),
        _ => Ok(true),
    }
}

/// Discards what statements of a stopped process had landed, when the file is opened. What
/// DROPs left (and what a discarded renewal becomes, see `tables::discard_landed_step`) stays
/// the sweeper's, which removes it in steps once the engine runs: in the opening transaction
/// it would take as long, and hold as many changed pages in memory, as its rows.
pub(crate) fn discard_all_landed(txn: &WriteTransaction) -> Result<()> {
    for id in landing::all(txn)? {
        loop {
            match landing::get(txn, id)? {
                None | Some(Landed::Dropped { .. } | Landed::Search { .. }) => break,
                // An index that was being made: nothing names its entries, so they are a
                // dropped index's.
                Some(Landed::Entries { tenant, index, .. }) => {
                    let dropped = Landed::Dropped {
                        tenant,
                        table: None,
                        indexes: vec![index],
                    };
                    landing::set(txn, id, &dropped)?;
                }
                Some(_) => {
                    discard_landed_step(txn, id)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::kb_index::IndexWriter;
    use crate::store::schema::{KB_INDEXES, KB_LINKS, KB_POSTINGS, KB_VECTORS, LANDINGS};
    use crate::store::Store;
    use mindlite_vectors::hnsw::Params;
    use redb::ReadableTableMetadata;

    /// What the file holds of chunk table `table`'s search indexes: its record, link pages,
    /// vector parts, posting blocks; then the landings and the tenant's stored bytes.
    fn held(store: &Store, table: u64) -> [u64; 6] {
        let txn = store.read().unwrap();
        let count = |n: usize| n as u64;
        [
            u64::from(
                txn.open_table(KB_INDEXES)
                    .unwrap()
                    .get(table)
                    .unwrap()
                    .is_some(),
            ),
            count(
                txn.open_table(KB_LINKS)
                    .unwrap()
                    .range((table, 0)..=(table, u32::MAX))
                    .unwrap()
                    .count(),
            ),
            count(
                txn.open_table(KB_VECTORS)
                    .unwrap()
                    .range((table, 0, 0)..=(table, u32::MAX, u32::MAX))
                    .unwrap()
                    .count(),
            ),
            count(
                txn.open_table(KB_POSTINGS)
                    .unwrap()
                    .range((table, "", 0)..(table, "\u{10FFFF}", u32::MAX))
                    .unwrap()
                    .count(),
            ),
            txn.open_table(LANDINGS).unwrap().len().unwrap(),
            storage::used(&txn, TenantId::LOCAL).unwrap(),
        ]
    }

    #[test]
    fn a_dropped_knowledge_bases_search_indexes_are_unlinked_then_swept_in_steps() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let table = 7;
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        storage::init(&guard.txn).unwrap();
        kb_index::init(&guard.txn).unwrap();
        landing::init(&guard.txn).unwrap();
        let nodes = 3_000u32;
        let vectors: Vec<Vec<f32>> = (0..nodes)
            .map(|n| {
                let x = n as f32;
                vec![x.sin(), x.cos(), (x * 0.37).sin(), 1.0]
            })
            .collect();
        // A word of its own per chunk: thousands of posting blocks, more than a step takes.
        let texts: Vec<String> = (0..nodes)
            .map(|n| format!("only{n} shared group{}", n % 40))
            .collect();
        let mut writer = IndexWriter::new(
            None,
            Params {
                dimensions: 4,
                m: 4,
                ef_construction: 16,
            },
        );
        writer.add(0, &vectors, &texts).unwrap();
        writer.save(&guard.txn, TenantId::LOCAL, table).unwrap();
        guard.commit().unwrap();
        let [record, links, parts, blocks, landings, stored] = held(&store, table);
        assert_eq!((record, landings), (1, 0));
        assert!(
            links > 0 && parts > 0 && blocks > 3_000,
            "{links} {parts} {blocks}"
        );
        assert!(stored > 0);

        // The drop removes the record alone and leaves the rest to the sweeper.
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        kb_index::drop_index(&guard.txn, TenantId::LOCAL, table).unwrap();
        guard.commit().unwrap();
        let after_drop = held(&store, table);
        assert_eq!(after_drop[..5], [0, links, parts, blocks, 1]);
        assert!(after_drop[5] < stored);

        let id = landing::dropped(&store.read().unwrap()).unwrap();
        assert_eq!(id.len(), 1);
        let mut steps = 0;
        let mut last = after_drop[5];
        loop {
            let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
            let done = sweep_dropped_step(&guard.txn, id[0]).unwrap();
            guard.commit().unwrap();
            steps += 1;
            let now = held(&store, table)[5];
            assert!(now <= last, "a step gives bytes back, never takes them");
            last = now;
            if done {
                break;
            }
            assert!(steps < 1_000, "the sweep ends");
        }
        assert!(steps > 3, "swept in steps, not at once: {steps}");
        assert_eq!(held(&store, table), [0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn an_index_a_stopped_process_was_making_is_a_dropped_ones_when_the_file_opens() {
        use crate::store::schema::INDEX_ENTRIES;
        let store = Store::open_in_memory(0, 0).unwrap();
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        storage::init(&guard.txn).unwrap();
        landing::init(&guard.txn).unwrap();
        let making = Landed::Entries {
            tenant: 0,
            table: 1,
            index: 9,
        };
        let id = landing::begin(&guard.txn, &making).unwrap();
        {
            let mut entries = guard.txn.open_table(INDEX_ENTRIES).unwrap();
            for row in 0..10_000u32 {
                let key = row.to_be_bytes();
                entries.insert((9, &key[..], 0, row), ()).unwrap();
            }
        }
        // The open only relabels it, whatever its size; the sweeper removes it in steps.
        discard_all_landed(&guard.txn).unwrap();
        let dropped = Landed::Dropped {
            tenant: 0,
            table: None,
            indexes: vec![9],
        };
        assert_eq!(landing::get(&guard.txn, id).unwrap(), Some(dropped));
        let mut steps = 0;
        while !sweep_dropped_step(&guard.txn, id).unwrap() {
            steps += 1;
        }
        assert!(steps > 1, "{steps}");
        assert_eq!(
            guard.txn.open_table(INDEX_ENTRIES).unwrap().len().unwrap(),
            0
        );
        assert_eq!(landing::get(&guard.txn, id).unwrap(), None);
    }

    #[test]
    fn what_a_stopped_process_left_of_a_dropped_index_is_the_sweepers_when_the_file_opens() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        storage::init(&guard.txn).unwrap();
        kb_index::init(&guard.txn).unwrap();
        landing::init(&guard.txn).unwrap();
        let mut writer = IndexWriter::new(
            None,
            Params {
                dimensions: 2,
                m: 4,
                ef_construction: 8,
            },
        );
        let texts: Vec<String> = (0..2_000).map(|n| format!("word{n}")).collect();
        let vectors: Vec<Vec<f32>> = (0..2_000).map(|n| vec![n as f32, 1.0]).collect();
        writer.add(0, &vectors, &texts).unwrap();
        writer.save(&guard.txn, TenantId::LOCAL, 3).unwrap();
        kb_index::drop_index(&guard.txn, TenantId::LOCAL, 3).unwrap();
        // Opening leaves it to the sweeper, which starts with the engine.
        discard_all_landed(&guard.txn).unwrap();
        assert_eq!(landing::all(&guard.txn).unwrap().len(), 1);
        for id in landing::all(&guard.txn).unwrap() {
            while !sweep_dropped_step(&guard.txn, id).unwrap() {}
        }
        guard.commit().unwrap();
        assert_eq!(held(&store, 3), [0, 0, 0, 0, 0, 0]);
    }
}
