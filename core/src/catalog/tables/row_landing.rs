//! Staged rows landed ahead of their commit, a step at a time, so the writer lock is held only
//! for short steps ([`RowLanding`]).

use datafusion::arrow::datatypes::Schema;
use redb::WriteTransaction;

use crate::catalog::constraints::Constraints;
use crate::catalog::indexes::{self, Indexed, Lookups};
use crate::catalog::landing::{self, Landed};
use crate::catalog::storage::{self, Change};
use crate::error::{Error, Result};
use crate::store::schema::{CHUNKS, CHUNK_ORDER, TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

use super::codec::*;
use super::record::*;
use super::staged::*;
use super::writer::*;

/// Rows appended to a table with indexes that land ahead of their statement's commit (see
/// `landing`): each full staged chunk goes into the file with its index entries in a step of
/// its own, then [`RowLanding::publish`] adds them to the table's chunk order in one
/// transaction, with the rows that make no full chunk.
pub(crate) struct RowLanding {
    tenant: TenantId,
    project: String,
    name: String,
    table: u64,
    /// The entry ids of the table's indexes as the rows were staged.
    pub(super) ids: Vec<u64>,
    /// Its record in the file, once a step has committed one.
    pub(super) id: Option<u64>,
    rows: u64,
    /// The staged rows that make no full chunk, written when publishing.
    pending: Option<ChunkBuffer>,
    /// The bytes landed so far (chunks and entries).
    pub(super) landed_bytes: u64,
    /// Set when the rows are to become the table's whole content (see
    /// [`RowLanding::renewing`]).
    renewing: Option<Renewing>,
    /// Set when they replace content still counted (see `storage::Replacement`).
    replacing: Option<storage::Replacement>,
}

/// Where [`RowLanding::land_fresh`] lands: the tenant, project and (provisional) record of
/// the table, how it renews it, and the content the rows replace.
pub(super) type Fresh<'a> = (
    TenantId,
    &'a str,
    &'a TableRecord,
    Renewing,
    Option<storage::Replacement>,
);

/// What a landing of rows that renew a table (see [`RowLanding::renewing`]) keeps beside
/// the new ids it lands under.
pub(super) struct Renewing {
    /// The table's id as read, and its indexes' entry ids: the table the rows replace the
    /// rows of, as long as it has them; `None` for a table the statement creates.
    read: Option<(u64, Vec<u64>)>,
    /// The table's chunk order as read, when the rows were computed from its rows (a DELETE
    /// or UPDATE with a subquery) or are charged against its content's bytes (see
    /// `storage::Replacement`): a step finding it changed stops the landing.
    base: Option<Vec<(u64, u64)>>,
    /// The id of the next chunk landed (the renewed table's chunk ids start at 0).
    next_chunk: u64,
}

/// What landing a rewrite's chunk needs beside the chunk: the table's chunk order as the
/// rewrite read it (a step finding it changed stops the landing) and the chunks it replaces
/// (whose keys it may take again).
pub(super) struct Rewriting<'a> {
    pub(super) base: &'a [(u64, u64)],
    pub(super) replaced: &'a [u64],
}

pub(super) fn changed_while_written(name: &str, project: &str) -> Error {
    Error::conflict(format!(
        "Table '{name}' in database {project} was dropped, replaced or given other indexes while the rows were written; nothing was written"
    ))
}

impl RowLanding {
    /// A landing, not yet recorded, into `record`'s table of `project` (as read) of `rows`
    /// rows, with `pending` rows to write when publishing.
    pub(super) fn new(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        rows: u64,
        pending: Option<ChunkBuffer>,
    ) -> RowLanding {
        RowLanding {
            tenant,
            project: project.to_ascii_lowercase(),
            name: record.name.clone(),
            table: record.id,
            ids: entry_ids(record),
            id: None,
            rows,
            pending,
            landed_bytes: 0,
            renewing: None,
            replacing: None,
        }
    }

    /// Lands `staged`, rows that become the whole content of `record`'s table (of
    /// `project`, as read), through `step`: under a table id and index entry ids of their
    /// own, taken with the schema by a first step (a [`Landed::Renewal`]), so that nothing
    /// reads them and their unique keys meet only each other. [`RowLanding::publish_renewal`]
    /// then renews the table with them. On an error, what landed is the caller's to discard
    /// ([`RowLanding::id`]).
    pub(crate) fn renewing(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        (replaced, base): (u64, Option<Vec<(u64, u64)>>),
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let renewing = Renewing {
            read: Some((record.id, entry_ids(record))),
            base,
            next_chunk: 0,
        };
        let replacing = Some(storage::Replacement::new(replaced));
        let fresh = (tenant, project, record, renewing, replacing);
        RowLanding::land_fresh(fresh, staged, step, keep_going)
    }

    /// Lands `staged`, the rows of the table `name` of `project` that the statement creates
    /// with `constraints` (and their key indexes), as [`RowLanding::renewing`] does;
    /// [`RowLanding::publish_created`] then creates the table with them.
    pub(crate) fn creating(
        tenant: TenantId,
        project: &str,
        name: &str,
        constraints: &Constraints,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        // What the record will be, but for its id, index names and entry ids.
        let record = TableRecord {
            id: 0,
            name: name.to_string(),
            project: project.to_ascii_lowercase(),
            created_at: String::new(),
            row_count: 0,
            next_chunk: 0,
            next_position: 0,
            tail: None,
            constraints: Constraints {
                indexes: key_indexes(name, constraints),
                ..constraints.clone()
            },
        };
        let renewing = Renewing {
            read: None,
            base: None,
            next_chunk: 0,
        };
        let fresh = (tenant, project, &record, renewing, None);
        RowLanding::land_fresh(fresh, staged, step, keep_going)
    }

    /// Lands `staged` (rows of `record`'s table of `project`, for `tenant`) under a new table
    /// id and entry ids, taken with the schema by a first step, as `renewing` says; the rows
    /// are charged against `replacing` when set.
    fn land_fresh(
        (tenant, project, record, renewing, replacing): Fresh<'_>,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let StagedRows {
            chunks,
            pending,
            rows,
            keys,
            schema,
            ..
        } = staged;
        let schema = &schema;
        let mut landing = RowLanding::new(tenant, project, record, rows, Some(pending));
        (landing.renewing, landing.replacing) = (Some(renewing), replacing);
        if keys.is_none() {
            return (
                landing,
                Err(Error::internal("rows to land have no index entries")),
            );
        }
        let mut begun = None;
        let first = step(&mut |txn| {
            landing.check_target(txn)?;
            let (table, ids) = new_ids(txn, record)?;
            let encoded = encode_batches(schema, &[])?;
            txn.open_table(TABLE_SCHEMAS)?
                .insert(table, encoded.as_slice())?;
            let replacing = landing.replacing.as_ref();
            charge_written(txn, tenant, replacing, encoded.len() as u64)?;
            let what = Landed::Renewal {
                tenant: tenant.0,
                table,
                indexes: ids.clone(),
            };
            begun = Some((table, ids, landing::begin(txn, &what)?));
            Ok(())
        });
        let landed = first.and_then(|()| {
            let (table, ids, id) = begun.ok_or_else(|| Error::internal("no landing begun"))?;
            (landing.table, landing.ids, landing.id) = (table, ids, Some(id));
            let indexed = emptied(record.clone(), table, &landing.ids);
            let indexed = Indexed::of(&indexed.constraints.indexes, schema, &record.name)?
                .ok_or_else(|| Error::internal("rows to land have no index entries"))?;
            chunks.drain(|chunk_rows, staged| {
                let (bytes, entries) = split_staged(&staged)?;
                let chunk = (chunk_rows, bytes, entries);
                landing.land_one(&indexed, chunk, None, &mut *step, keep_going)?;
                Ok(())
            })
        });
        (landing, landed)
    }

    /// Lands `staged`, rows appended to `record`'s table (of `project`, as read), through
    /// `step`. On an error, what landed is the caller's to discard ([`RowLanding::id`]).
    pub(crate) fn land(
        tenant: TenantId,
        project: &str,
        record: &TableRecord,
        staged: StagedRows,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> (RowLanding, Result<()>) {
        let StagedRows {
            chunks,
            pending,
            rows,
            keys,
            ..
        } = staged;
        let mut landing = RowLanding::new(tenant, project, record, rows, Some(pending));
        let Some(keys) = keys else {
            return (
                landing,
                Err(Error::internal("rows to land have no index entries")),
            );
        };
        let landed = chunks.drain(|chunk_rows, staged| {
            let (bytes, entries) = split_staged(&staged)?;
            let chunk = (chunk_rows, bytes, entries);
            landing.land_one(&keys.indexed, chunk, None, &mut *step, keep_going)?;
            Ok(())
        });
        (landing, landed)
    }

    /// Lands one staged chunk (its rows, its encoded rows and its encoded entries): the chunk
    /// with its first entries, then the rest of its entries, a share per step. The entries of
    /// the chunks `replaced` (those a rewrite replaces) take no key. Returns the chunk's id, or
    /// `None` when a rewrite's key is taken while another statement lands rows in the table:
    /// the key may be that statement's, unpublished, so the rewrite is overtaken, not refused.
    pub(super) fn land_one(
        &mut self,
        indexed: &Indexed,
        (rows, bytes, entries): (u64, &[u8], &[u8]),
        rewriting: Option<&Rewriting<'_>>,
        step: Step<'_>,
        keep_going: &dyn Fn() -> Result<()>,
    ) -> Result<Option<u64>> {
        let replaced = rewriting.map_or(&[][..], |r| r.replaced);
        let (mut chunk, mut from) = (None, 0);
        loop {
            keep_going()?;
            let (mut done, mut overtaken) = ((None, 0, 0, None), false);
            let stepped = step(&mut |txn| {
                // A rewrite whose table changed since it was read (or whose indexes did) will
                // not apply: it stops landing and runs again.
                if let Some(rewriting) = rewriting {
                    let current = self.current(txn).ok();
                    let order = txn.open_table(CHUNK_ORDER)?;
                    if current.is_none() || chunk_order(&order, self.table)? != rewriting.base {
                        overtaken = true;
                        return Err(Error::conflict("the rewrite was overtaken"));
                    }
                }
                let (begun, id, mut added) = match chunk {
                    Some(id) => (None, id, 0),
                    None => {
                        let (begun, id) = self.land_chunk(txn, rows, bytes, rewriting.is_none())?;
                        (begun, id, bytes.len() as u64)
                    }
                };
                let part = indexes::Part::step(from);
                let written = self.land_entries(txn, indexed, id, entries, replaced, part);
                let (entries_added, next) = match written {
                    Err(e)
                        if rewriting.is_some()
                            && e.kind() == crate::ErrorKind::ConstraintViolation
                            && landing::touches_other(
                                txn,
                                self.table,
                                begun.or(self.id),
                                false,
                            )? =>
                    {
                        overtaken = true;
                        return Err(e);
                    }
                    written => written?,
                };
                match rewriting {
                    Some(_) => storage::charge_ahead(txn, self.tenant, entries_added)?,
                    None => {
                        charge_written(txn, self.tenant, self.replacing.as_ref(), entries_added)?
                    }
                }
                added += entries_added;
                done = (begun, id, added, next);
                Ok(())
            });
            if overtaken {
                return Ok(None);
            }
            stepped?;
            let (begun, id, added, next) = done;
            if begun.is_some() {
                self.id = begun;
            }
            if let Some(renewing) = &mut self.renewing {
                renewing.next_chunk = renewing.next_chunk.max(id + 1);
            }
            self.landed_bytes += added;
            chunk = Some(id);
            #[cfg(test)]
            indexes::observe::landed(&self.name);
            match next {
                Some(next) => from = next,
                None => return Ok(Some(id)),
            }
        }
    }

    /// The landing's record, once one was committed: what to discard when the statement fails.
    pub(crate) fn id(&self) -> Option<u64> {
        self.id
    }

    /// The table as `txn` has it, if it is still the one (and has the indexes) the rows were
    /// staged for.
    fn current(&self, txn: &WriteTransaction) -> Result<TableRecord> {
        let record = get(
            &txn.open_table(TABLES)?,
            self.tenant,
            &self.project,
            &self.name,
        )?;
        let (table, ids) = match &self.renewing {
            Some(Renewing {
                read: Some((table, ids)),
                ..
            }) => (*table, ids),
            Some(Renewing { read: None, .. }) => {
                return Err(Error::internal("a table being created has no record yet"))
            }
            None => (self.table, &self.ids),
        };
        record
            .filter(|r| r.id == table && entry_ids(r) == *ids)
            .ok_or_else(|| changed_while_written(&self.name, &self.project))
    }

    /// Fails when the table the rows go into is no longer the one they were staged for (see
    /// [`RowLanding::current`]); a table the statement creates is checked as it is created.
    fn check_target(&self, txn: &WriteTransaction) -> Result<()> {
        match &self.renewing {
            Some(Renewing { read: None, .. }) => Ok(()),
            Some(Renewing {
                read: Some((table, _)),
                base: Some(base),
                ..
            }) => {
                self.current(txn)?;
                if chunk_order(&txn.open_table(CHUNK_ORDER)?, *table)? != *base {
                    return Err(Error::conflict(format!(
                        "Table '{}' in database {} changed while the rows that replace its rows were computed from it; nothing was written",
                        self.name, self.project
                    )));
                }
                Ok(())
            }
            _ => self.current(txn).map(drop),
        }
    }

    /// Writes one staged chunk's rows, taking its chunk id (and recording the landing at the
    /// first chunk). Returns the landing's id when this step recorded it, and the chunk id.
    fn land_chunk(
        &self,
        txn: &WriteTransaction,
        rows: u64,
        bytes: &[u8],
        checked: bool,
    ) -> Result<(Option<u64>, u64)> {
        let chunk = match &self.renewing {
            // The renewed table's chunk ids are the landing's own.
            Some(renewing) => {
                self.check_target(txn)?;
                renewing.next_chunk
            }
            None => {
                let mut record = self.current(txn)?;
                // The chunk id is taken: nothing else writes a chunk under it.
                record.next_chunk += 1;
                save(txn, self.tenant, &record)?;
                record.next_chunk - 1
            }
        };
        let (id, begun) = match self.id {
            Some(id) => (id, None),
            None => {
                let what = Landed::Rows {
                    tenant: self.tenant.0,
                    table: self.table,
                    indexes: self.ids.clone(),
                    rewrite: !checked,
                };
                let id = landing::begin(txn, &what)?;
                (id, Some(id))
            }
        };
        txn.open_table(CHUNKS)?.insert((self.table, chunk), bytes)?;
        match checked {
            true => charge_written(
                txn,
                self.tenant,
                self.replacing.as_ref(),
                bytes.len() as u64,
            )?,
            false => storage::charge_ahead(txn, self.tenant, bytes.len() as u64)?,
        }
        landing::add_chunk(txn, id, chunk, rows)?;
        Ok((begun, chunk))
    }

    /// Writes the entries numbered `part` of a landed chunk (every unique key looked up: the
    /// file may hold keys no snapshot saw; those of the chunks `replaced` do not count).
    /// Returns their bytes and how many the chunk has.
    fn land_entries(
        &self,
        txn: &WriteTransaction,
        indexed: &Indexed,
        chunk: u64,
        entries: &[u8],
        replaced: &[u64],
        part: indexes::Part,
    ) -> Result<(u64, Option<usize>)> {
        self.check_target(txn)?;
        indexed.write_part(txn, chunk, entries, Lookups::All, replaced, part)
    }

    /// Publishes the landed chunks in `txn`: appends them to the table's chunk order (after a
    /// small last chunk merged with nothing, as an append keeps row order), then the rows
    /// that make no full chunk. Returns the rows inserted.
    pub(crate) fn publish(&mut self, txn: &WriteTransaction) -> Result<u64> {
        let record = self.current(txn)?;
        let mut writer = TableWriter::append(txn, self.tenant, record)?;
        if let Some(all) = writer.pending.rest()? {
            writer.write_chunk(&all)?;
        }
        if let Some(id) = self.id {
            while let Some((chunk, rows)) = landing::first_chunk(txn, id)? {
                txn.open_table(CHUNK_ORDER)?
                    .insert((self.table, writer.record.next_position), chunk)?;
                writer.record.next_position += 1;
                writer.record.row_count += rows;
                landing::remove_chunk(txn, id, chunk)?;
            }
            landing::end(txn, id)?;
        }
        if let Some(rest) = self
            .pending
            .take()
            .map(|mut p| p.rest())
            .transpose()?
            .flatten()
        {
            writer.push(rest)?;
        }
        writer.finish()?;
        Ok(self.rows)
    }
}

impl RowLanding {
    /// Publishes the rows landed by [`RowLanding::renewing`] in `txn`: the table, still as
    /// read, gets the landing's table id and entry ids, the landed chunks in order, then the
    /// rows that make no full chunk; its old content is the sweeper's, as a DROP's. The work
    /// grows with the chunks, not the rows. Returns the rows written.
    pub(crate) fn publish_renewal(&mut self, txn: &WriteTransaction) -> Result<u64> {
        let current = self.current(txn)?;
        let next_chunk = match &self.renewing {
            Some(renewing) => renewing.next_chunk,
            None => return Err(Error::internal("rows appended are not a renewal")),
        };
        let schema = unlink_content(txn, self.tenant, &current)?;
        storage::charge(txn, self.tenant, Change::removed(schema.len() as u64))?;
        let record = emptied(current, self.table, &self.ids);
        self.adopt(txn, record, next_chunk)
    }

    /// Publishes the rows landed by [`RowLanding::creating`] in `txn`: creates the table
    /// (its name must be free, its project there) with `constraints`, the landing's table id
    /// and entry ids, the landed chunks in order, then the rows that make no full chunk.
    /// Returns the rows written.
    pub(crate) fn publish_created(
        &mut self,
        txn: &WriteTransaction,
        schema: &Schema,
        constraints: Constraints,
    ) -> Result<u64> {
        let next_chunk = match &self.renewing {
            Some(Renewing {
                read: None,
                next_chunk,
                ..
            }) => *next_chunk,
            _ => return Err(Error::internal("the rows landed are not a new table's")),
        };
        let landed = Some((self.table, self.ids.as_slice()));
        let (project, name) = (self.project.clone(), self.name.clone());
        let record = create_with(
            txn,
            self.tenant,
            &project,
            &name,
            schema,
            constraints,
            landed,
        )?;
        self.adopt(txn, record, next_chunk)
    }

    /// Makes `record` (empty, under the landing's ids) hold the landed chunks, in order, then
    /// the rows that make no full chunk; `next_chunk` is the first chunk id not landed.
    fn adopt(
        &mut self,
        txn: &WriteTransaction,
        mut record: TableRecord,
        next_chunk: u64,
    ) -> Result<u64> {
        record.next_chunk = next_chunk;
        if let Some(id) = self.id {
            let mut order = txn.open_table(CHUNK_ORDER)?;
            while let Some((chunk, rows)) = landing::first_chunk(txn, id)? {
                order.insert((self.table, record.next_position), chunk)?;
                record.next_position += 1;
                record.row_count += rows;
                landing::remove_chunk(txn, id, chunk)?;
            }
            landing::end(txn, id)?;
        }
        save(txn, self.tenant, &record)?;
        let mut writer = TableWriter::append(txn, self.tenant, record)?;
        writer.replacing = self.replacing.take();
        if let Some(rest) = self
            .pending
            .take()
            .map(|mut p| p.rest())
            .transpose()?
            .flatten()
        {
            writer.push(rest)?;
        }
        writer.finish()?;
        Ok(self.rows)
    }
}
