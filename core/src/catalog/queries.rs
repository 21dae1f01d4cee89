//! Resumable queries (MindsDB's `information_schema.queries`): an insert into a knowledge base
//! made in batches (`INSERT INTO kb SELECT … USING batch_size = n, track_column = c`) keeps
//! here how far it came, batch by batch, so it can be cancelled (`SELECT query_cancel(id)`,
//! which removes its record: the insert stops before its next batch) and resumed after an
//! error or a stop (`SELECT query_resume(id)`). Owns the rows of the redb table `queries`,
//! keyed by (tenant, id); the latest [`KEPT`] of each tenant are kept.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::store::schema::QUERIES;
use crate::store::{self, Reads};
use crate::tenant::TenantId;

/// Records kept per tenant: older finished ones go as new ones come.
pub(crate) const KEPT: usize = 1000;

/// Longest SQL text a record keeps (a longer statement is refused before it starts).
pub(crate) const MAX_SQL_BYTES: usize = 256 * 1024;

/// Longest error text a record keeps, in characters.
const MAX_ERROR_CHARS: usize = 2048;

/// One resumable query as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct QueryRecord {
    /// Its number among the tenant's, from 1.
    pub(crate) id: u64,
    /// The statement as given.
    pub(crate) sql: String,
    /// The database it ran in.
    pub(crate) database: String,
    /// Its USING settings.
    pub(crate) parameters: Map<String, Value>,
    /// How far it came: the tracked column's greatest value done, as a SQL literal.
    pub(crate) last: Option<String>,
    /// Source rows done.
    pub(crate) processed_rows: u64,
    /// Batches that failed and were skipped (`error = 'skip'`).
    pub(crate) skipped_batches: u64,
    /// The last error, if any (it stopped on it, or skipped past it).
    pub(crate) error: Option<String>,
    /// `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub(crate) started_at: String,
    /// When it last wrote its progress.
    pub(crate) updated_at: String,
    /// When it ended: done, failed or stopped. `None` while it runs (or after a crash, until
    /// the store opens again and marks it interrupted).
    pub(crate) finished_at: Option<String>,
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(QUERIES)?;
    Ok(())
}

/// Records a new resumable query and returns it; drops the tenant's oldest finished records
/// beyond [`KEPT`].
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    sql: &str,
    database: &str,
    parameters: Map<String, Value>,
) -> Result<QueryRecord> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Error::invalid(format!(
            "A resumable statement may be {MAX_SQL_BYTES} bytes long; this one is {}",
            sql.len()
        )));
    }
    let id = store::next_id(txn, &format!("queries/{}", tenant.0))?;
    let now = crate::time::now_text();
    let record = QueryRecord {
        id,
        sql: sql.to_string(),
        database: database.to_string(),
        parameters,
        last: None,
        processed_rows: 0,
        skipped_batches: 0,
        error: None,
        started_at: now.clone(),
        updated_at: now,
        finished_at: None,
    };
    let mut table = txn.open_table(QUERIES)?;
    let finished: Vec<u64> = {
        let mut finished = Vec::new();
        for entry in table.range((tenant.0, 0)..(tenant.0 + 1, 0))? {
            let (key, value) = entry?;
            let old: QueryRecord = serde_json::from_str(value.value())?;
            if old.finished_at.is_some() {
                finished.push(key.value().1);
            }
        }
        finished
    };
    let held = table.range((tenant.0, 0)..(tenant.0 + 1, 0))?.count();
    let over = (held + 1).saturating_sub(KEPT);
    for old in finished.into_iter().take(over) {
        table.remove((tenant.0, old))?;
    }
    table.insert((tenant.0, id), serde_json::to_string(&record)?.as_str())?;
    Ok(record)
}

/// Query `id` of `tenant`, if it is kept.
pub(crate) fn get(txn: &impl Reads, tenant: TenantId, id: u64) -> Result<Option<QueryRecord>> {
    match txn.reading(QUERIES)?.get((tenant.0, id))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// Every kept query of `tenant`, oldest first.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId) -> Result<Vec<QueryRecord>> {
    let table = txn.reading(QUERIES)?;
    let mut out = Vec::new();
    for entry in table.range((tenant.0, 0)..(tenant.0 + 1, 0))? {
        out.push(serde_json::from_str(entry?.1.value())?);
    }
    Ok(out)
}

/// Changes query `id` with `change`; `false` when it is gone (cancelled), which stops it.
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    id: u64,
    change: impl FnOnce(&mut QueryRecord),
) -> Result<bool> {
    let mut table = txn.open_table(QUERIES)?;
    let Some(mut record) = table
        .get((tenant.0, id))?
        .map(|v| serde_json::from_str::<QueryRecord>(v.value()))
        .transpose()?
    else {
        return Ok(false);
    };
    change(&mut record);
    record.updated_at = crate::time::now_text();
    if let Some(error) = &mut record.error {
        *error = crate::egress::excerpt(error, MAX_ERROR_CHARS);
    }
    table.insert((tenant.0, id), serde_json::to_string(&record)?.as_str())?;
    Ok(true)
}

/// Removes query `id` (MindsDB's `query_cancel`); `false` when there was none.
pub(crate) fn remove(txn: &WriteTransaction, tenant: TenantId, id: u64) -> Result<bool> {
    Ok(txn.open_table(QUERIES)?.remove((tenant.0, id))?.is_some())
}

/// Marks the queries a stopped process left running as interrupted, so they show as
/// resumable (run as the store opens).
pub(crate) fn fail_interrupted(txn: &WriteTransaction) -> Result<()> {
    let mut table = txn.open_table(QUERIES)?;
    let mut open = Vec::new();
    for entry in table.iter()? {
        let (key, value) = entry?;
        let record: QueryRecord = serde_json::from_str(value.value())?;
        if record.finished_at.is_none() {
            open.push((key.value(), record));
        }
    }
    for (key, mut record) in open {
        record.finished_at = Some(crate::time::now_text());
        record.error = Some(format!(
            "Interrupted: the engine stopped while it ran; SELECT query_resume({}) goes on \
             from where it stopped",
            record.id
        ));
        table.insert(key, serde_json::to_string(&record)?.as_str())?;
    }
    Ok(())
}
