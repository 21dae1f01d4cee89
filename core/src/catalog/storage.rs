//! The bytes each tenant stores, and the plan limit on them (`hosted.plans.<plan>.max_storage_mb`).
//! Owns the redb tables `storage_bytes` (tenant → bytes stored) and `storage_limits` (plan →
//! the most bytes a user on it may store).
//!
//! A tenant's stored bytes are its tables' (uploaded files are tables): their schemas, chunks
//! and index entries, and its knowledge bases': their chunks and their indexes' pages and
//! postings. Every module that changes such bytes charges the difference with [`charge`] in
//! the same write transaction, so the count is exact, costs one row per change rather than a
//! scan, and rolls back with the change (a failed statement, ROLLBACK, ROLLBACK TO). A charge
//! that takes a tenant past its limit fails, and the transaction with it: nothing is written.
//! Shrinking never fails, so a tenant over its limit (its plan was changed) can always delete.
//!
//! What a DROP unlinks stays counted until the sweeper has removed it, step by step: the count
//! is what the file holds, so a tenant cannot store more than its limit by dropping faster
//! than the sweeper removes. A refusal is marked (`Error::for_storage`): a SQL write or an
//! upload so refused while its tenant's leftovers are being swept waits for the sweep (10 s
//! at most) and runs again, once.
//!
//! The catalog's writers see only their transaction, so the limits are kept in the file: the
//! configured plans' limits are written whenever the engine opens ([`set_limits`]). While it
//! opens none applies (what opening moves between formats is never refused), and a plan the
//! configuration no longer has sets none. A file written before the counter existed is
//! counted once, as it is first opened (`rules::count_storage`).

use std::collections::BTreeMap;

use redb::{ReadableTable, TableHandle, WriteTransaction};

use crate::catalog::users;
use crate::config::HostedConfig;
use crate::error::{Error, Result};
use crate::store::schema::{STORAGE_BYTES, STORAGE_LIMITS};
use crate::tenant::TenantId;

/// Creates the tables in a new file and lifts every limit until [`set_limits`] (the engine is
/// opening). Returns whether the file has no counts yet, so they are to be made.
pub(crate) fn init(txn: &WriteTransaction) -> Result<bool> {
    let uncounted = !txn
        .list_tables()?
        .any(|table| table.name() == STORAGE_BYTES.name());
    txn.open_table(STORAGE_BYTES)?;
    txn.open_table(STORAGE_LIMITS)?.retain(|_, _| false)?;
    Ok(uncounted)
}

/// Writes the limit of every configured plan (see the module's documentation).
pub(crate) fn set_limits(txn: &WriteTransaction, hosted: &HostedConfig) -> Result<()> {
    let mut limits = txn.open_table(STORAGE_LIMITS)?;
    limits.retain(|_, _| false)?;
    for (name, plan) in &hosted.plans {
        limits.insert(name.as_str(), mib(plan.max_storage_mb))?;
    }
    Ok(())
}

/// Replaces every tenant's count with `bytes` (a file's first count).
pub(crate) fn set_all(txn: &WriteTransaction, bytes: &BTreeMap<TenantId, u64>) -> Result<()> {
    let mut table = txn.open_table(STORAGE_BYTES)?;
    table.retain(|_, _| false)?;
    for (tenant, bytes) in bytes {
        table.insert(tenant.0, bytes)?;
    }
    Ok(())
}

/// A change of `tenant`'s stored bytes: what was added and what was removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) added: u64,
    pub(crate) removed: u64,
}

impl Change {
    /// `bytes` added.
    pub(crate) fn added(bytes: u64) -> Change {
        Change {
            added: bytes,
            removed: 0,
        }
    }

    /// `bytes` removed.
    pub(crate) fn removed(bytes: u64) -> Change {
        Change {
            added: 0,
            removed: bytes,
        }
    }
}

impl std::ops::Add for Change {
    type Output = Change;

    fn add(self, other: Change) -> Change {
        Change {
            added: self.added.saturating_add(other.added),
            removed: self.removed.saturating_add(other.removed),
        }
    }
}

impl std::ops::AddAssign for Change {
    fn add_assign(&mut self, other: Change) {
        *self = *self + other;
    }
}

/// Counts `change` to `tenant`'s stored bytes in `txn`, the transaction that makes it. Fails
/// with QuotaExceeded, naming the plan key, when the change grows the tenant past its plan's
/// limit (the transaction must then not commit; its caller's error aborts it).
pub(crate) fn charge(txn: &WriteTransaction, tenant: TenantId, change: Change) -> Result<()> {
    if change == Change::default() {
        return Ok(());
    }
    let mut table = txn.open_table(STORAGE_BYTES)?;
    let used = table.get(tenant.0)?.map_or(0, |v| v.value());
    let now = used
        .saturating_add(change.added)
        .saturating_sub(change.removed);
    if change.added > change.removed {
        check(txn, tenant, used, now)?;
    }
    table.insert(tenant.0, now)?;
    Ok(())
}

/// Counts `bytes` added to `tenant`'s stored bytes without checking its limit: a rewrite's
/// chunks landed ahead of its commit, which frees the chunks they replace; the commit checks
/// the net change ([`check_net`]).
pub(crate) fn charge_ahead(txn: &WriteTransaction, tenant: TenantId, bytes: u64) -> Result<()> {
    let mut table = txn.open_table(STORAGE_BYTES)?;
    let used = table.get(tenant.0)?.map_or(0, |v| v.value());
    table.insert(tenant.0, used.saturating_add(bytes))?;
    Ok(())
}

/// What rows that replace a table's whole content (see `tables::renew`) write, against the
/// bytes of the content they replace: those stay counted until the sweeper removes them after
/// the commit, so the limit is checked as if they were gone already, and only once the
/// replacement outgrows them. A replacement that shrinks the table is never refused, as no
/// shrinking is.
#[derive(Debug)]
pub(crate) struct Replacement {
    replaced: u64,
    written: std::cell::Cell<u64>,
}

impl Replacement {
    /// A replacement of content that counts `replaced` bytes.
    pub(crate) fn new(replaced: u64) -> Replacement {
        Replacement {
            replaced,
            written: std::cell::Cell::new(0),
        }
    }

    /// Counts `added` bytes the replacement wrote to `tenant`'s stored bytes in `txn`.
    pub(crate) fn charge(
        &self,
        txn: &WriteTransaction,
        tenant: TenantId,
        added: u64,
    ) -> Result<()> {
        if added == 0 {
            return Ok(());
        }
        self.written.set(self.written.get().saturating_add(added));
        let mut table = txn.open_table(STORAGE_BYTES)?;
        let used = table.get(tenant.0)?.map_or(0, |v| v.value());
        let now = used.saturating_add(added);
        if self.written.get() > self.replaced {
            check(
                txn,
                tenant,
                used.saturating_sub(self.replaced),
                now.saturating_sub(self.replaced),
            )?;
        }
        table.insert(tenant.0, now)?;
        Ok(())
    }
}

/// Whether `tenant` has a storage limit, as the snapshot `txn` has the limits.
pub(crate) fn limited(txn: &redb::ReadTransaction, tenant: TenantId) -> Result<bool> {
    let Some(plan) = users::plan_in(txn, tenant)? else {
        return Ok(false);
    };
    Ok(txn
        .open_table(STORAGE_LIMITS)?
        .get(plan.as_str())?
        .is_some())
}

/// Fails with QuotaExceeded when `tenant`'s stored bytes, less the `freed` bytes about to be
/// removed, exceed its limit: a change whose `added` bytes were counted ahead
/// ([`charge_ahead`]) and that grows the tenant.
pub(crate) fn check_net(
    txn: &WriteTransaction,
    tenant: TenantId,
    added: u64,
    freed: u64,
) -> Result<()> {
    let used = used(txn, tenant)?;
    check(
        txn,
        tenant,
        used.saturating_sub(added),
        used.saturating_sub(freed),
    )
}

/// Fails when `now` bytes exceed `tenant`'s limit (it had `used`).
fn check(txn: &WriteTransaction, tenant: TenantId, used: u64, now: u64) -> Result<()> {
    let Some(plan) = users::plan_of(txn, tenant)? else {
        return Ok(());
    };
    let Some(limit) = txn
        .open_table(STORAGE_LIMITS)?
        .get(plan.as_str())?
        .map(|v| v.value())
    else {
        return Ok(());
    };
    if now <= limit {
        return Ok(());
    }
    let refused = Error::quota_exceeded(
        format!(
            "Quota exceeded: storage (limit {} MiB, used {used} bytes, {} more asked) on plan \
             '{plan}' (hosted.plans.{plan}.max_storage_mb); nothing was written; drop tables, \
             files or knowledge bases to free space",
            limit / MIB,
            now - used
        ),
        None,
    );
    // What earlier DROPs left counts until swept: the statement may fit once it is. Whether
    // any is left is looked at after the transaction, not under the writer lock.
    Err(refused.for_storage())
}

/// The bytes `tenant` stores, as `txn` sees them.
pub(crate) fn used(txn: &impl ReadStorage, tenant: TenantId) -> Result<u64> {
    txn.stored_bytes(tenant)
}

/// Reading the counts, from a read snapshot or a write transaction alike.
pub(crate) trait ReadStorage {
    fn stored_bytes(&self, tenant: TenantId) -> Result<u64>;
}

macro_rules! read_storage {
    ($txn:ty) => {
        impl ReadStorage for $txn {
            fn stored_bytes(&self, tenant: TenantId) -> Result<u64> {
                Ok(self
                    .open_table(STORAGE_BYTES)?
                    .get(tenant.0)?
                    .map_or(0, |v| v.value()))
            }
        }
    };
}

read_storage!(WriteTransaction);
read_storage!(redb::ReadTransaction);

const MIB: u64 = 1024 * 1024;

fn mib(mb: u64) -> u64 {
    mb.saturating_mul(MIB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PlanConfig;
    use crate::error::ErrorKind;

    fn hosted(max_storage_mb: u64) -> HostedConfig {
        let mut hosted = HostedConfig::default();
        hosted.plans.insert(
            "tiny".into(),
            PlanConfig {
                max_storage_mb,
                ..PlanConfig::default()
            },
        );
        hosted.default_plan = "tiny".into();
        hosted
    }

    #[test]
    fn growth_past_the_limit_fails_and_shrinking_never_does() {
        let store = crate::store::Store::open_in_memory(0, 0).unwrap();
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        let txn = &guard.txn;
        users::init(txn).unwrap();
        assert!(init(txn).unwrap(), "a new file has no counts yet");
        let hosted = hosted(1);
        let user = users::create(txn, "ann", None, &hosted, "mindsdb").unwrap();
        let tenant = user.tenant();
        // No limit applies until the limits are set (the engine is opening).
        charge(txn, tenant, Change::added(2 * MIB)).unwrap();
        set_limits(txn, &hosted).unwrap();
        let err = charge(txn, tenant, Change::added(1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
        assert!(
            err.message().contains("hosted.plans.tiny.max_storage_mb")
                && err.message().contains("plan 'tiny'"),
            "{err}"
        );
        assert_eq!(
            used(txn, tenant).unwrap(),
            2 * MIB,
            "a refused charge counts nothing"
        );
        // Over the limit, a change that shrinks passes, even one that adds some back.
        charge(
            txn,
            tenant,
            Change {
                added: 10,
                removed: MIB,
            },
        )
        .unwrap();
        assert_eq!(used(txn, tenant).unwrap(), MIB + 10);
        charge(txn, tenant, Change::removed(20)).unwrap();
        charge(txn, tenant, Change::added(10)).unwrap();
        assert_eq!(used(txn, tenant).unwrap(), MIB);
        // Tenants without a plan (the local one) have no limit.
        charge(txn, TenantId::LOCAL, Change::added(10 * MIB)).unwrap();
        assert_eq!(used(txn, TenantId::LOCAL).unwrap(), 10 * MIB);
    }
}
