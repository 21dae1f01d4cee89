//! What a stored table declares about its rows: a primary key, UNIQUE column sets, CHECK
//! expressions, column defaults, and its indexes. Kept in the table's record (the `tables` module
//! keeps it); keys are checked there, inside the write transaction that
//! changes the rows, so a statement that would break one stores nothing. CHECK expressions and
//! defaults are SQL text, planned where statements are (they need the function library).

use std::collections::{BTreeMap, HashSet};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use serde::{Deserialize, Serialize};

use crate::capacity;
use crate::error::{Error, ErrorKind, Result};

/// A table's declared constraints and indexes; empty for a table without any.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Constraints {
    /// The primary key's columns (none when the table has no primary key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub primary_key: Vec<String>,
    /// Column sets declared UNIQUE.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unique: Vec<Vec<String>>,
    /// CHECK expressions as SQL text; a row passes unless one is false.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// Column name (lower case) → its DEFAULT expression as SQL text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defaults: BTreeMap<String, String>,
    /// Indexes made by CREATE INDEX.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<Index>,
}

/// An index made by `CREATE [UNIQUE] INDEX name ON table (columns)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// Its name, unique among the indexes of a project.
    pub name: String,
    /// The indexed columns, in order.
    pub columns: Vec<String>,
    /// Whether the indexed values must be unique.
    pub unique: bool,
    /// The id its entries are kept under (see `indexes`); absent for indexes recorded before
    /// indexes held entries, which lookups do not use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
    /// The key it was made for (`PRIMARY KEY` or `UNIQUE`), when the table's declaration made
    /// it rather than CREATE INDEX: it checks that key, and goes only with the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backs: Option<String>,
}

/// How a primary key is declared, in messages and in the index that backs it.
pub(crate) const PRIMARY_KEY: &str = "PRIMARY KEY";
/// How a UNIQUE column set is declared.
pub(crate) const UNIQUE: &str = "UNIQUE";

/// What an INSERT does with a row whose key a stored row (or an earlier row of the same
/// statement) already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The statement fails and stores nothing (plain INSERT).
    Fail,
    /// The row is skipped (`ON CONFLICT DO NOTHING`, `INSERT OR IGNORE`).
    Nothing,
    /// The stored rows it conflicts with are deleted first (`INSERT OR REPLACE`,
    /// `REPLACE INTO`); two new rows with one key fail the statement, as in DuckDB.
    Replace,
}

impl Constraints {
    /// Whether the key `kind` on `columns` has an index with entries that checks it.
    fn backed(&self, kind: &str, columns: &[String]) -> bool {
        self.indexes.iter().any(|index| {
            index.backs.as_deref() == Some(kind)
                && index.columns == columns
                && index.entries.is_some()
        })
    }
}

/// A set of columns whose values no two rows may share.
pub struct UniqueKey<'c> {
    /// How the key was declared, for messages: `PRIMARY KEY`, `UNIQUE`, `UNIQUE INDEX i`.
    pub declared: String,
    /// Its columns.
    pub columns: &'c [String],
    /// Whether its index entries check it as they go in (a unique index that holds entries),
    /// so the rows need not be read to check it.
    pub checked_by_entries: bool,
}

impl Constraints {
    /// Whether the table declares nothing.
    pub fn is_empty(&self) -> bool {
        self == &Constraints::default()
    }

    /// Every key whose values must be unique: the primary key, UNIQUE sets, unique indexes.
    pub fn unique_keys(&self) -> Vec<UniqueKey<'_>> {
        let mut keys = Vec::new();
        if !self.primary_key.is_empty() {
            keys.push(UniqueKey {
                declared: PRIMARY_KEY.into(),
                columns: &self.primary_key,
                checked_by_entries: self.backed(PRIMARY_KEY, &self.primary_key),
            });
        }
        for columns in &self.unique {
            keys.push(UniqueKey {
                declared: UNIQUE.into(),
                columns,
                checked_by_entries: self.backed(UNIQUE, columns),
            });
        }
        for index in self
            .indexes
            .iter()
            .filter(|i| i.unique && i.backs.is_none())
        {
            keys.push(UniqueKey {
                declared: format!("UNIQUE INDEX {}", index.name),
                columns: &index.columns,
                checked_by_entries: index.entries.is_some(),
            });
        }
        keys
    }
}

/// The values of one unique key seen so far in a table's rows; a second row with the same
/// non-NULL values is a violation (rows with a NULL in the key never conflict, as in SQL).
pub(crate) struct KeySet {
    declared: String,
    columns: Vec<usize>,
    names: Vec<String>,
    converter: RowConverter,
    seen: HashSet<OwnedRow>,
}

impl KeySet {
    /// An empty set for `key` over rows of `schema`.
    pub(crate) fn new(key: &UniqueKey<'_>, schema: &SchemaRef, table: &str) -> Result<KeySet> {
        let columns = key
            .columns
            .iter()
            .map(|name| column_index(schema, name, table))
            .collect::<Result<Vec<_>>>()?;
        let fields = columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Ok(KeySet {
            declared: key.declared.clone(),
            names: key.columns.to_vec(),
            columns,
            converter: RowConverter::new(fields)?,
            seen: HashSet::new(),
        })
    }

    /// The keys of `batch`'s rows (rows of the table's schema); `None` for a row with a NULL
    /// in the key, which conflicts with no other.
    pub(crate) fn keys(&self, batch: &RecordBatch) -> Result<Vec<Option<OwnedRow>>> {
        let keyed = self.key_columns(batch);
        let rows = self.converter.convert_columns(&keyed)?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(row, key)| {
                (!keyed.iter().any(|column| column.is_null(row))).then(|| key.owned())
            })
            .collect())
    }

    /// Whether a row had `key` already.
    pub(crate) fn contains(&self, key: &Option<OwnedRow>) -> bool {
        key.as_ref().is_some_and(|key| self.seen.contains(key))
    }

    /// Makes room for `n` more keys, or fails naming the memory limit they would pass (see
    /// `capacity::grow_set`): call it before inserting a batch's keys.
    pub(crate) fn make_room(&mut self, n: usize) -> Result<()> {
        let (declared, names) = (&self.declared, &self.names);
        capacity::grow_set(&mut self.seen, n, || key_set_name(declared, names))
    }

    /// Notes `key` as taken.
    pub(crate) fn insert(&mut self, key: Option<OwnedRow>) {
        if let Some(key) = key {
            self.seen.insert(key);
        }
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<datafusion::arrow::array::ArrayRef> {
        self.columns
            .iter()
            .map(|&i| std::sync::Arc::clone(batch.column(i)))
            .collect()
    }

    /// Adds the keys of `batch` (rows of the table's schema); fails on the first key already
    /// seen, naming the constraint and the value.
    pub(crate) fn add(&mut self, batch: &RecordBatch, table: &str) -> Result<()> {
        self.make_room(batch.num_rows())?;
        for (row, key) in self.keys(batch)?.into_iter().enumerate() {
            if !self.contains(&key) {
                self.insert(key);
                continue;
            }
            let value = self
                .key_columns(batch)
                .iter()
                .map(|column| {
                    datafusion::arrow::util::display::array_value_to_string(column, row)
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Error::new(
                ErrorKind::ConstraintViolation,
                format!(
                    "Duplicate key ({value}) violates the {} constraint on ({}) of table '{table}'",
                    self.declared,
                    self.names.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// How a refusal names the set of a key's values: `the keys of the PRIMARY KEY (id)`.
pub(crate) fn key_set_name(declared: &str, columns: &[String]) -> String {
    format!("the keys of the {declared} ({})", columns.join(", "))
}

/// The position of the column `name` in `schema` (names compare case-insensitively).
pub(crate) fn column_index(schema: &Schema, name: &str, table: &str) -> Result<usize> {
    schema
        .fields()
        .iter()
        .position(|f| f.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::invalid(format!("Column '{name}' does not exist in table '{table}'")))
}
