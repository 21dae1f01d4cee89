//! Reading tables in either kind of transaction. A catalog function that only reads takes a
//! [`Reads`] and opens its own tables, so it serves a read snapshot and a write transaction
//! alike and its callers never name the store's tables.

use std::borrow::Borrow;
use std::ops::RangeBounds;

use redb::{
    AccessGuard, Key, Range, ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata,
    StorageError, Table, TableDefinition, TableError, TableStats, Value, WriteTransaction,
};

/// A transaction tables can be read in: a read snapshot or a write transaction.
pub(crate) trait Reads {
    /// The table `definition` names, opened for reading.
    fn reading<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<Opened<'_, K, V>, TableError>;
}

impl Reads for ReadTransaction {
    fn reading<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<Opened<'_, K, V>, TableError> {
        Ok(Opened::Snapshot(self.open_table(definition)?))
    }
}

impl Reads for WriteTransaction {
    fn reading<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<Opened<'_, K, V>, TableError> {
        Ok(Opened::Writing(self.open_table(definition)?))
    }
}

impl<T: Reads + ?Sized> Reads for &T {
    fn reading<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<Opened<'_, K, V>, TableError> {
        (**self).reading(definition)
    }
}

/// A table opened for reading in a [`Reads`] transaction.
pub(crate) enum Opened<'t, K: Key + 'static, V: Value + 'static> {
    /// In a read snapshot.
    Snapshot(ReadOnlyTable<K, V>),
    /// In a write transaction (what it wrote so far included).
    Writing(Table<'t, K, V>),
}

impl<K: Key + 'static, V: Value + 'static> ReadableTableMetadata for Opened<'_, K, V> {
    fn stats(&self) -> Result<TableStats, StorageError> {
        match self {
            Opened::Snapshot(table) => table.stats(),
            Opened::Writing(table) => table.stats(),
        }
    }

    fn len(&self) -> Result<u64, StorageError> {
        match self {
            Opened::Snapshot(table) => table.len(),
            Opened::Writing(table) => table.len(),
        }
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for Opened<'_, K, V> {
    fn get<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'_, V>>, StorageError> {
        match self {
            Opened::Snapshot(table) => table.get(key),
            Opened::Writing(table) => table.get(key),
        }
    }

    fn range<'a, KR>(
        &self,
        range: impl RangeBounds<KR> + 'a,
    ) -> Result<Range<'_, K, V>, StorageError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        match self {
            Opened::Snapshot(table) => table.range(range),
            Opened::Writing(table) => table.range(range),
        }
    }

    fn first(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>, StorageError> {
        match self {
            Opened::Snapshot(table) => table.first(),
            Opened::Writing(table) => table.first(),
        }
    }

    fn last(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>, StorageError> {
        match self {
            Opened::Snapshot(table) => table.last(),
            Opened::Writing(table) => table.last(),
        }
    }
}
