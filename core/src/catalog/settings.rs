//! The server's settings changed at run time (`PUT /api/config`, as MindsDB's editor changes
//! them): the local edition's login, the default LLM and the default embedding model. What is
//! kept here wins over the config file until it is reset, and survives a restart. Owns the
//! rows of the redb table `settings`: a setting's name → its value as JSON. Which names there
//! are and what their values mean is `services::settings`'s.

use redb::{ReadableTable, WriteTransaction};
use serde_json::Value;

use crate::error::Result;
use crate::store::schema::SETTINGS;
use crate::store::Reads;

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(SETTINGS)?;
    Ok(())
}

/// The value kept for setting `name`, if any.
pub(crate) fn get(txn: &impl Reads, name: &str) -> Result<Option<Value>> {
    match txn.reading(SETTINGS)?.get(name)? {
        Some(text) => Ok(Some(serde_json::from_str(text.value())?)),
        None => Ok(None),
    }
}

/// Keeps `value` for setting `name`; `None` forgets it (the config file's applies again).
pub(crate) fn put(txn: &WriteTransaction, name: &str, value: Option<&Value>) -> Result<()> {
    let mut table = txn.open_table(SETTINGS)?;
    match value {
        Some(value) => {
            table.insert(name, value.to_string().as_str())?;
        }
        None => {
            table.remove(name)?;
        }
    }
    Ok(())
}
