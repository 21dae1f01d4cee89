//! MindsDB's variables: `SET @name = value` keeps a value under a name for the tenant, and
//! `@name` in the values of later statements (`PARAMETERS = {"password": @pg_pw}`) reads it
//! back (see `sql::parse::variables`), so a secret need not be written into every statement.
//! As in MindsDB they outlive the session: they are kept in the file. Owns the rows of the
//! redb table `variables`, keyed by (tenant, lower-cased name), each value as JSON.

use redb::{ReadableTable, WriteTransaction};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::store::schema::VARIABLES;
use crate::store::Reads;
use crate::tenant::TenantId;

/// How many variables one tenant may keep: enough for the secrets of many datasources, few
/// enough that a loop of `SET @x1 …` cannot fill the file (they are outside the stored-bytes
/// quota: at most 1.6 MiB a tenant).
pub(crate) const MAX_VARIABLES: usize = 100;

/// How long a variable's value may be, as JSON text.
pub(crate) const MAX_VALUE_BYTES: usize = 16 * 1024;

/// How long a variable's name may be.
const MAX_NAME_BYTES: usize = 128;

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(VARIABLES)?;
    Ok(())
}

/// Keeps `value` as variable `name` of `tenant`, replacing the one it had; NULL forgets it.
pub(crate) fn set(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    value: &Value,
) -> Result<()> {
    let key = name.to_ascii_lowercase();
    if value.is_null() {
        txn.open_table(VARIABLES)?
            .remove((tenant.0, key.as_str()))?;
        return Ok(());
    }
    if key.is_empty() || key.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format!(
            "A variable's name takes 1 to {MAX_NAME_BYTES} bytes; '@{name}' does not"
        )));
    }
    let text = value.to_string();
    if text.len() > MAX_VALUE_BYTES {
        return Err(Error::invalid(format!(
            "The value of @{key} is {} bytes; a variable holds at most {MAX_VALUE_BYTES}",
            text.len()
        )));
    }
    let mut table = txn.open_table(VARIABLES)?;
    if table.get((tenant.0, key.as_str()))?.is_none() {
        let held = table.range((tenant.0, "")..(tenant.0 + 1, ""))?.count();
        if held >= MAX_VARIABLES {
            return Err(Error::invalid(format!(
                "There are {held} variables already, the most one user keeps \
                 ({MAX_VARIABLES}); set one of them instead"
            )));
        }
    }
    table.insert((tenant.0, key.as_str()), text.as_str())?;
    Ok(())
}

/// The value of variable `name` of `tenant` (matched in any case), if it was set.
pub(crate) fn get(txn: &impl Reads, tenant: TenantId, name: &str) -> Result<Option<Value>> {
    let key = name.to_ascii_lowercase();
    match txn.reading(VARIABLES)?.get((tenant.0, key.as_str()))? {
        Some(text) => Ok(Some(serde_json::from_str(text.value())?)),
        None => Ok(None),
    }
}
