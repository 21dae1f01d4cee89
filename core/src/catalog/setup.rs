//! Opening the catalog of a store: every record table made when missing, what a stopped
//! process left behind put right (rows landed ahead of a commit, trainings it was running),
//! the default project made, stored bytes counted when the file predates the count, and the
//! storage limits of the hosted plans set.

use redb::WriteTransaction;

use crate::catalog::{
    agents, auth, callbacks, datasources, jobs, knowledge_bases, minds, ml_engines, models,
    projects, queries, quotas, rules, settings, storage, tables, users, variables, views,
};
use crate::config::HostedConfig;
use crate::error::Result;
use crate::tenant::TenantId;

/// Prepares the catalog in `txn` (the store's first write after it opens), with
/// `default_project` as the local tenant's default project and `hosted`'s plans' limits.
pub(crate) fn open(
    txn: &WriteTransaction,
    hosted: &HostedConfig,
    default_project: &str,
) -> Result<()> {
    let uncounted = storage::init(txn)?;
    tables::init(txn)?;
    // What statements of a stopped process had written ahead of their commit.
    rules::discard_all_landed(txn)?;
    views::init(txn)?;
    knowledge_bases::init(txn)?;
    agents::init(txn)?;
    datasources::init(txn)?;
    ml_engines::init(txn)?;
    variables::init(txn)?;
    settings::init(txn)?;
    queries::init(txn)?;
    queries::fail_interrupted(txn)?;
    jobs::init(txn)?;
    jobs::fail_interrupted(txn)?;
    models::init(txn)?;
    models::fail_interrupted(txn)?;
    auth::init(txn)?;
    users::init(txn)?;
    quotas::init(txn)?;
    minds::init(txn)?;
    callbacks::init(txn)?;
    projects::ensure_default(txn, TenantId::LOCAL, default_project)?;
    if uncounted {
        rules::count_storage(txn)?;
    }
    storage::set_limits(txn, hosted)
}
