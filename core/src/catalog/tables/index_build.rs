//! Building an index over a table's rows (`CREATE INDEX`, [`IndexBuild`]), and dropping one.

use std::collections::HashSet;

use redb::WriteTransaction;

use crate::catalog::constraints::{column_index, Index};
use crate::catalog::indexes::{self, Indexed, Lookups, UniqueSeen};
use crate::catalog::landing::{self, Landed};
use crate::catalog::namespace::validate_name;
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::spool::Spool;
use crate::store;
use crate::store::schema::{CHUNK_ORDER, TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

use super::read::*;
use super::record::*;

/// An index being made (`CREATE INDEX`). Its entries are encoded from a read snapshot without
/// the writer lock, then land in the file under an id no record names yet, a chunk per step
/// (see `landing`); [`IndexBuild::publish`] then adds the index to the table's record in one
/// short transaction. Chunks the table gained meanwhile are encoded from a newer snapshot and
/// land too; entries of chunks it lost meanwhile are swept away.
pub(crate) struct IndexBuild {
    project: String,
    table: String,
    table_id: u64,
    index: Index,
    /// The index over the table's key columns only (the chunks are read for those).
    indexed: Indexed,
    /// Where the key columns are in the table.
    columns: Vec<usize>,
    /// Encoded entries not landed yet, numbered by chunk id, in chunk order; one spool per
    /// snapshot read.
    staged: Vec<Spool>,
    /// The chunks staged so far.
    done: HashSet<u64>,
    /// The chunks whose entries are in the file.
    landed: HashSet<u64>,
    /// The landing's record, once the first step committed it.
    landing: Option<u64>,
    seen: UniqueSeen,
}

/// What [`IndexBuild::start`] found.
pub(crate) enum IndexStart {
    /// An index of that name exists and `IF NOT EXISTS` was given: nothing to do.
    Exists,
    /// The index to build.
    Build(Box<IndexBuild>),
}

/// What [`IndexBuild::publish`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// The index is the table's.
    Done,
    /// An index of that name was made meanwhile, and `IF NOT EXISTS` was given: nothing was.
    Exists,
    /// The table changed since the last snapshot: land what changed and try again.
    Again,
}

impl IndexBuild {
    /// Checks `index` for the table `project.table` as `txn` (a snapshot) has it: its name new
    /// among the project's indexes (`if_not_exists` makes an existing one a no-op), its
    /// columns the table's.
    pub(crate) fn start(
        txn: &redb::ReadTransaction,
        tenant: TenantId,
        project: &str,
        table: &str,
        index: Index,
        if_not_exists: bool,
    ) -> Result<IndexStart> {
        validate_name("index", &index.name)?;
        let tables = txn.open_table(TABLES)?;
        if find_index(&tables, tenant, project, &index.name)?.is_some() {
            if if_not_exists {
                return Ok(IndexStart::Exists);
            }
            return Err(index_exists(&index.name, project));
        }
        let record = get(&tables, tenant, project, table)?.ok_or_else(|| {
            Error::not_found(format!("Table '{table}' not found in database: {project}"))
        })?;
        let schema = schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
        let columns = index
            .columns
            .iter()
            .map(|column| column_index(&schema, column, &record.name))
            .collect::<Result<Vec<_>>>()?;
        // The key columns alone, in index order: chunks are read for those only.
        let keyed = schema.project(&columns)?;
        let local = Index {
            columns: keyed.fields().iter().map(|f| f.name().clone()).collect(),
            entries: Some(0),
            ..index.clone()
        };
        let indexed = Indexed::of(std::slice::from_ref(&local), &keyed, &record.name)?
            .ok_or_else(|| Error::internal("an index to build holds no entries"))?;
        Ok(IndexStart::Build(Box::new(IndexBuild {
            project: project.to_ascii_lowercase(),
            table: record.name.clone(),
            table_id: record.id,
            index,
            seen: indexed.unique_seen(),
            indexed,
            columns,
            staged: Vec::new(),
            done: HashSet::new(),
            landed: HashSet::new(),
            landing: None,
        })))
    }

    /// Encodes the entries of every chunk of the table in `txn` not encoded yet, in a new
    /// spool; `keep_going` is asked before each chunk (a cancelled statement stops). Returns
    /// false when the table is gone or replaced in `txn`.
    pub(crate) fn stage(
        &mut self,
        txn: &(impl ReadTables + store::Reads),
        tenant: TenantId,
        spool: Spool,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<bool> {
        if record(txn, tenant, &self.project, &self.table)?.is_none_or(|r| r.id != self.table_id) {
            return Ok(false);
        }
        let mut staged = spool;
        for (_, chunk) in txn.chunk_order_of(self.table_id)? {
            if self.done.contains(&chunk) {
                continue;
            }
            keep_going()?;
            let batch = txn.chunk_columns(self.table_id, chunk, self.columns.clone())?;
            let entries = self.indexed.encode(&batch)?;
            self.indexed.check_staged(&entries, None, &mut self.seen)?;
            staged.push(chunk, entries)?;
            self.done.insert(chunk);
            #[cfg(test)]
            indexes::observe::staged(&self.table);
        }
        self.staged.push(staged);
        Ok(true)
    }

    /// The landing's record, once one was committed: what to discard when the build fails.
    pub(crate) fn landing(&self) -> Option<u64> {
        self.landing
    }

    /// The table as `txn` has it, if it is still the one the index is built for.
    fn current(&self, txn: &WriteTransaction, tenant: TenantId) -> Result<TableRecord> {
        get(&txn.open_table(TABLES)?, tenant, &self.project, &self.table)?
            .filter(|r| r.id == self.table_id)
            .ok_or_else(|| {
                Error::conflict(format!(
                    "Table '{}' in database {} was dropped or replaced while its index was built; nothing was written",
                    self.table, self.project
                ))
            })
    }

    /// Lands the staged entries, a chunk per `step`; the first step takes the index's id. The
    /// entries of a chunk the table no longer has are left out.
    pub(crate) fn land(
        &mut self,
        tenant: TenantId,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        if self.landing.is_none() {
            let mut ids = None;
            step(&mut |txn| {
                self.current(txn, tenant)?;
                let entries = store::next_id(txn, "index")?;
                let what = Landed::Entries {
                    tenant: tenant.0,
                    table: self.table_id,
                    index: entries,
                };
                ids = Some((landing::begin(txn, &what)?, entries));
                Ok(())
            })?;
            let (id, entries) = ids.ok_or_else(|| Error::internal("an index landing has no id"))?;
            self.landing = Some(id);
            self.indexed.set_id(entries);
        }
        for spool in std::mem::take(&mut self.staged) {
            spool.drain(|chunk, entries| {
                // A share of the chunk's entries per step; none when the chunk went meanwhile.
                let mut from = 0;
                loop {
                    keep_going()?;
                    let (mut written, mut left) = (false, None);
                    step(&mut |txn| {
                        let record = self.current(txn, tenant)?;
                        let live = chunk_order(&txn.open_table(CHUNK_ORDER)?, record.id)?
                            .iter()
                            .any(|(_, c)| *c == chunk);
                        if live {
                            let lookups = Lookups::Suspects(&self.seen);
                            let part = indexes::Part::step(from);
                            let (added, next) = self.indexed.write_part(
                                txn,
                                chunk,
                                &entries,
                                lookups,
                                &[],
                                part,
                            )?;
                            storage::charge(txn, tenant, Change::added(added))?;
                            left = next;
                        }
                        written = live;
                        Ok(())
                    })?;
                    if written {
                        self.landed.insert(chunk);
                    }
                    match left {
                        Some(next) if written => from = next,
                        _ => break,
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Removes, through `step`s, the landed entries of chunks the table in `txn` (a snapshot)
    /// no longer has (rewritten or deleted meanwhile).
    pub(crate) fn sweep_gone(
        &mut self,
        txn: &impl ReadTables,
        tenant: TenantId,
        step: Step<'_>,
    ) -> Result<()> {
        let live: HashSet<u64> = txn
            .chunk_order_of(self.table_id)?
            .into_iter()
            .map(|(_, chunk)| chunk)
            .collect();
        let gone: HashSet<u64> = self.landed.difference(&live).copied().collect();
        if gone.is_empty() {
            return Ok(());
        }
        let id = self.indexed.ids()[0];
        let mut cursor = None;
        loop {
            let mut next = None;
            step(&mut |txn| {
                let (freed, at) = indexes::sweep(txn, id, cursor.as_ref(), &|c| gone.contains(&c))?;
                storage::charge(txn, tenant, Change::removed(freed))?;
                next = at;
                Ok(())
            })?;
            match next {
                Some(at) => cursor = Some(at),
                None => break,
            }
        }
        self.landed.retain(|chunk| !gone.contains(chunk));
        Ok(())
    }

    /// Adds the index to the table's record inside `txn`: fails if its name was taken
    /// meanwhile (nothing with `if_not_exists`) or the table went. When the table changed
    /// since the entries landed, [`Publish::Again`], unless `last`: then the chunks written
    /// since are encoded here and the entries of chunks gone swept here (a unique index fails
    /// on a duplicate, exactly).
    pub(crate) fn publish(
        &mut self,
        txn: &WriteTransaction,
        tenant: TenantId,
        if_not_exists: bool,
        last: bool,
    ) -> Result<Publish> {
        if find_index(
            &txn.open_table(TABLES)?,
            tenant,
            &self.project,
            &self.index.name,
        )?
        .is_some()
        {
            if if_not_exists {
                return Ok(Publish::Exists);
            }
            return Err(index_exists(&self.index.name, &self.project));
        }
        let mut record = self.current(txn, tenant)?;
        let landing = self
            .landing
            .ok_or_else(|| Error::internal("an index is published before it landed"))?;
        let order = chunk_order(&txn.open_table(CHUNK_ORDER)?, self.table_id)?;
        let live: HashSet<u64> = order.iter().map(|(_, chunk)| *chunk).collect();
        let missing: Vec<u64> = order
            .iter()
            .map(|(_, chunk)| *chunk)
            .filter(|chunk| !self.landed.contains(chunk))
            .collect();
        let gone: HashSet<u64> = self.landed.difference(&live).copied().collect();
        if !last && (!missing.is_empty() || !gone.is_empty()) {
            return Ok(Publish::Again);
        }
        let id = self.indexed.ids()[0];
        let (mut freed, mut added) = (0, 0);
        let mut cursor = None;
        while !gone.is_empty() {
            let (bytes, at) = indexes::sweep(txn, id, cursor.as_ref(), &|c| gone.contains(&c))?;
            freed += bytes;
            match at {
                Some(at) => cursor = Some(at),
                None => break,
            }
        }
        for chunk in missing {
            let batch = txn.chunk_columns(self.table_id, chunk, self.columns.clone())?;
            added += self.indexed.add(txn, chunk, &batch)?;
        }
        storage::charge(txn, tenant, Change::removed(freed))?;
        storage::charge(txn, tenant, Change::added(added))?;
        record.constraints.indexes.push(Index {
            entries: Some(id),
            ..self.index.clone()
        });
        save(txn, tenant, &record)?;
        landing::end(txn, landing)?;
        Ok(Publish::Done)
    }
}

pub(super) fn index_exists(name: &str, project: &str) -> Error {
    Error::conflict(format!(
        "Index '{name}' already exists in database: {project}"
    ))
}

/// Removes the index `name` of the project; `if_exists` makes a missing one a no-op.
pub(crate) fn drop_index(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let Some(mut record) = find_index(&txn.open_table(TABLES)?, tenant, project, name)? else {
        if if_exists {
            return Ok(());
        }
        return Err(Error::not_found(format!(
            "Index '{name}' not found in database: {project}"
        )));
    };
    let backs = record
        .constraints
        .indexes
        .iter()
        .find(|index| index.name.eq_ignore_ascii_case(name))
        .and_then(|index| index.backs.clone());
    if let Some(kind) = backs {
        return Err(Error::invalid(format!(
            "Index '{name}' cannot be dropped: the {kind} constraint of table '{}' needs it",
            record.name
        )));
    }
    let (dropped, kept) = std::mem::take(&mut record.constraints.indexes)
        .into_iter()
        .partition(|index| index.name.eq_ignore_ascii_case(name));
    record.constraints.indexes = kept;
    let entries: Vec<u64> = dropped
        .into_iter()
        .filter_map(|index: Index| index.entries)
        .collect();
    if !entries.is_empty() {
        // The entries are the sweeper's (see `landing`): as many as the rows.
        let dropped = Landed::Dropped {
            tenant: tenant.0,
            table: None,
            indexes: entries,
        };
        landing::begin(txn, &dropped)?;
    }
    save(txn, tenant, &record)
}
