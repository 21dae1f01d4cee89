//! The entries of secondary indexes (`CREATE [UNIQUE] INDEX`): one redb key per indexed row,
//! `(index id, key, chunk id, row in chunk)`, in the `index_entries` table. The key is the row's
//! indexed values in Arrow's row format, whose bytes sort as the values do and whose columns
//! are concatenated, so one column's encoding is a prefix of every composite key that starts
//! with it: a lookup on the first column is one key range.
//!
//! The `tables` module keeps entries in step with the chunks inside the transaction that
//! writes them (a chunk's entries go when the chunk goes and come with its successor), so an
//! index is never behind its table. A unique index is checked as its entries go in: a second
//! entry with the same key (no NULL in it) is a violation. Rows whose first indexed value is
//! NULL get no entry: no lookup ever finds them (`=`, `IN` and ranges never match NULL).
//!
//! Arrow's row format may change between arrow majors; an upgrade that changes it must rebuild
//! the entries (they are derived data: drop and create the index).

use std::collections::BTreeMap;
use std::ops::Bound;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use redb::{ReadableTable, WriteTransaction};

use crate::catalog::constraints::{column_index, Index};
use crate::error::{Error, ErrorKind, Result};
use crate::store::schema::INDEX_ENTRIES;

/// Creates this module's redb table in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(INDEX_ENTRIES)?;
    Ok(())
}

/// Whether lookups on values of `data_type` can use an index: exact types whose equality is
/// their bytes' (floats are not: `0.0 = -0.0`, and NaN).
pub(crate) fn indexable(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
        )
}

/// One index's definition, ready to encode keys of a table's rows.
struct Def {
    id: u64,
    /// How its key is named in a violation: `UNIQUE INDEX i`, or the key it backs.
    declared: String,
    unique: bool,
    columns: Vec<usize>,
    names: Vec<String>,
    converter: RowConverter,
}

/// The indexes of one table that hold entries, ready to maintain them.
pub(crate) struct Indexed {
    defs: Vec<Def>,
    table: String,
}

impl Indexed {
    /// The indexes among `indexes` (of the table `table` with `schema`) that hold entries;
    /// `None` when none does.
    pub(crate) fn of(indexes: &[Index], schema: &Schema, table: &str) -> Result<Option<Indexed>> {
        let mut defs = Vec::new();
        for index in indexes {
            let Some(id) = index.entries else { continue };
            defs.push(def(index, id, schema, table)?);
        }
        Ok((!defs.is_empty()).then(|| Indexed {
            defs,
            table: table.to_string(),
        }))
    }

    /// Adds the entries of `batch`, the rows of chunk `chunk` (in the table's schema),
    /// failing on a duplicate key of a unique index. Returns the bytes they take.
    pub(crate) fn add(
        &self,
        txn: &WriteTransaction,
        chunk: u64,
        batch: &RecordBatch,
    ) -> Result<u64> {
        let mut entries = txn.open_table(INDEX_ENTRIES)?;
        let mut bytes = 0;
        for def in &self.defs {
            let keyed = key_columns(def, batch);
            let keys = def.converter.convert_columns(&keyed)?;
            for row in in_key_order(&keys, &keyed[0]) {
                let key = keys.row(row);
                let key = key.as_ref();
                if def.unique && !keyed.iter().any(|c| c.is_null(row)) {
                    let first = entries
                        .range((def.id, key, 0u64, 0u32)..=(def.id, key, u64::MAX, u32::MAX))?
                        .next()
                        .transpose()?;
                    if first.is_some() {
                        return Err(duplicate(def, &keyed, row, &self.table));
                    }
                }
                entries.insert((def.id, key, chunk, row as u32), ())?;
                bytes += entry_bytes(key.len());
            }
        }
        Ok(bytes)
    }

    /// Removes the entries of `batch`, the rows of chunk `chunk`, which is going away.
    /// Returns the bytes they took.
    pub(crate) fn remove(
        &self,
        txn: &WriteTransaction,
        chunk: u64,
        batch: &RecordBatch,
    ) -> Result<u64> {
        let mut entries = txn.open_table(INDEX_ENTRIES)?;
        let mut bytes = 0;
        for def in &self.defs {
            let keyed = key_columns(def, batch);
            let keys = def.converter.convert_columns(&keyed)?;
            for row in in_key_order(&keys, &keyed[0]) {
                let key = keys.row(row);
                if entries
                    .remove((def.id, key.as_ref(), chunk, row as u32))?
                    .is_some()
                {
                    bytes += entry_bytes(key.as_ref().len());
                }
            }
        }
        Ok(bytes)
    }
}

/// The bytes an entry whose key is `key_len` bytes long is counted as (see `storage`): its
/// key, index id, chunk id and row.
fn entry_bytes(key_len: usize) -> u64 {
    key_len as u64 + 20
}

/// The rows with a first indexed value, in key order: entries written in order touch each
/// B-tree page once rather than once per row (half the time of a 10M-row CREATE INDEX).
fn in_key_order(keys: &Rows, first: &ArrayRef) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..keys.num_rows())
        .filter(|&row| !first.is_null(row))
        .collect();
    rows.sort_unstable_by(|&a, &b| keys.row(a).cmp(&keys.row(b)));
    rows
}

fn def(index: &Index, id: u64, schema: &Schema, table: &str) -> Result<Def> {
    let columns = index
        .columns
        .iter()
        .map(|name| column_index(schema, name, table))
        .collect::<Result<Vec<_>>>()?;
    let fields = columns
        .iter()
        .map(|&i| SortField::new(schema.field(i).data_type().clone()))
        .collect();
    Ok(Def {
        id,
        declared: match &index.backs {
            Some(kind) => kind.clone(),
            None => format!("UNIQUE INDEX {}", index.name),
        },
        unique: index.unique,
        names: index.columns.clone(),
        columns,
        converter: RowConverter::new(fields)?,
    })
}

fn key_columns(def: &Def, batch: &RecordBatch) -> Vec<ArrayRef> {
    def.columns
        .iter()
        .map(|&i| std::sync::Arc::clone(batch.column(i)))
        .collect()
}

fn duplicate(def: &Def, keyed: &[ArrayRef], row: usize, table: &str) -> Error {
    let value = keyed
        .iter()
        .map(|column| {
            datafusion::arrow::util::display::array_value_to_string(column, row).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(", ");
    Error::new(
        ErrorKind::ConstraintViolation,
        format!(
            "Duplicate key ({value}) violates the {} constraint on ({}) of table '{table}'",
            def.declared,
            def.names.join(", ")
        ),
    )
}

/// Removes every entry of the index `id`. Returns the bytes they took.
pub(crate) fn drop_entries(txn: &WriteTransaction, id: u64) -> Result<u64> {
    let empty: &[u8] = &[];
    let mut bytes = 0;
    txn.open_table(INDEX_ENTRIES)?.retain_in(
        (id, empty, 0u64, 0u32)..(id + 1, empty, 0u64, 0u32),
        |(_, key, _, _), _| {
            bytes += entry_bytes(key.len());
            false
        },
    )?;
    Ok(bytes)
}

/// The bytes of every index's entries, by index id (a file's first count, see `storage`).
pub(crate) fn stored_bytes(txn: &WriteTransaction) -> Result<BTreeMap<u64, u64>> {
    let mut bytes = BTreeMap::new();
    for entry in txn.open_table(INDEX_ENTRIES)?.iter()? {
        let (key, _) = entry?;
        let (index, key, _, _) = key.value();
        *bytes.entry(index).or_insert(0) += entry_bytes(key.len());
    }
    Ok(bytes)
}

/// A set of values of an index's first column to look up: points (`=`, `IN`) or one range.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    /// Any of these values.
    Points(Vec<ScalarValue>),
    /// Values between the bounds.
    Range(Bound<ScalarValue>, Bound<ScalarValue>),
}

/// The rows an index lookup found: chunk id → its rows (ascending).
pub(crate) type Found = BTreeMap<u64, Vec<u32>>;

/// Looks `probe` up in the index `id` whose first column is of type `first`, in `entries` (a
/// snapshot's table). `None` when a probe value does not convert to the column's type exactly
/// (the caller then scans).
pub(crate) fn lookup(
    entries: &impl ReadableTable<(u64, &'static [u8], u64, u32), ()>,
    id: u64,
    first: &DataType,
    probe: &Probe,
) -> Result<Option<Found>> {
    let converter = RowConverter::new(vec![SortField::new(first.clone())])?;
    let encode = |value: &ScalarValue| -> Result<Option<Vec<u8>>> {
        let Some(value) = exact_cast(value, first) else {
            return Ok(None);
        };
        if value.is_null() {
            return Ok(None);
        }
        let rows = converter.convert_columns(&[value.to_array()?])?;
        Ok(Some(rows.row(0).as_ref().to_vec()))
    };
    // Each range as (start, end): bytes of the key, or None for the index's first / past its last.
    type KeyRange = (Option<Vec<u8>>, Option<Vec<u8>>);
    let mut ranges: Vec<KeyRange> = Vec::new();
    match probe {
        Probe::Points(values) => {
            for value in values {
                // NULL in an IN list matches nothing; a value of another type cannot be used.
                if value.is_null() {
                    continue;
                }
                let Some(key) = encode(value)? else {
                    return Ok(None);
                };
                let end = successor(&key);
                ranges.push((Some(key), end));
            }
        }
        Probe::Range(low, high) => {
            let start = match low {
                Bound::Unbounded => None,
                Bound::Included(v) | Bound::Excluded(v) => {
                    let Some(key) = encode(v)? else {
                        return Ok(None);
                    };
                    match low {
                        Bound::Included(_) => Some(key),
                        _ => match successor(&key) {
                            Some(next) => Some(next),
                            None => return Ok(Some(Found::new())),
                        },
                    }
                }
            };
            let end = match high {
                Bound::Unbounded => None,
                Bound::Included(v) | Bound::Excluded(v) => {
                    let Some(key) = encode(v)? else {
                        return Ok(None);
                    };
                    match high {
                        Bound::Excluded(_) => Some(key),
                        _ => successor(&key),
                    }
                }
            };
            ranges.push((start, end));
        }
    }
    let mut found = Found::new();
    let empty: &[u8] = &[];
    for (start, end) in &ranges {
        let from = (id, start.as_deref().unwrap_or(empty), 0u64, 0u32);
        let to = match end {
            Some(end) => (id, end.as_slice(), 0u64, 0u32),
            None => (id + 1, empty, 0u64, 0u32),
        };
        if from >= to {
            continue;
        }
        for entry in entries.range(from..to)? {
            let (key, _) = entry?;
            let (_, _, chunk, row) = key.value();
            found.entry(chunk).or_default().push(row);
        }
    }
    for rows in found.values_mut() {
        rows.sort_unstable();
        rows.dedup();
    }
    Ok(Some(found))
}

/// `value` as a value of `to`, if it converts without change (so looking it up finds exactly
/// the rows equal to it).
fn exact_cast(value: &ScalarValue, to: &DataType) -> Option<ScalarValue> {
    if &value.data_type() == to {
        return Some(value.clone());
    }
    let cast = value.cast_to(to).ok()?;
    let back = cast.cast_to(&value.data_type()).ok()?;
    (back == *value).then_some(cast)
}

/// The smallest byte string greater than every string that starts with `key`; `None` when
/// there is none (all bytes 0xFF).
fn successor(key: &[u8]) -> Option<Vec<u8>> {
    let mut next = key.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

/// Whether `index` holds entries a lookup on a column of `schema` can use: its first
/// column's position, when so.
pub(crate) fn first_column(index: &Index, schema: &Schema) -> Option<usize> {
    index.entries?;
    let first = index.columns.first()?;
    let at = schema
        .fields()
        .iter()
        .position(|f| f.name().eq_ignore_ascii_case(first))?;
    indexable(schema.field(at).data_type()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successors_bound_every_extension_of_a_key() {
        assert_eq!(successor(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(successor(&[1, 255]), Some(vec![2]));
        assert_eq!(successor(&[255, 255]), None);
    }

    #[test]
    fn probe_values_convert_only_when_nothing_is_lost() {
        let int = ScalarValue::Int64(Some(7));
        assert_eq!(
            exact_cast(&int, &DataType::Int32),
            Some(ScalarValue::Int32(Some(7)))
        );
        assert_eq!(
            exact_cast(&ScalarValue::Float64(Some(1.5)), &DataType::Int64),
            None
        );
        assert_eq!(
            exact_cast(&ScalarValue::Int64(Some(1 << 40)), &DataType::Int32),
            None
        );
    }
}
