//! Reading a table's schema and chunks in any transaction ([`ReadTables`]).

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, WriteTransaction};

use crate::error::{Error, Result};
use crate::store::schema::{CHUNKS, CHUNK_ORDER, TABLE_SCHEMAS};

use super::codec::*;
use super::record::*;

/// Reading a table's schema and chunks, from a read snapshot or a write transaction alike.
pub(crate) trait ReadTables {
    fn schema_of(&self, id: u64) -> Result<SchemaRef>;
    fn chunk_order_of(&self, id: u64) -> Result<Vec<(u64, u64)>>;
    fn chunk(&self, id: u64, chunk: u64) -> Result<RecordBatch>;
    /// Only the `projection` columns of a chunk (decoding nothing else).
    fn chunk_columns(&self, id: u64, chunk: u64, projection: Vec<usize>) -> Result<RecordBatch>;
}

macro_rules! read_tables {
    ($txn:ty) => {
        impl ReadTables for $txn {
            fn schema_of(&self, id: u64) -> Result<SchemaRef> {
                schema(&self.open_table(TABLE_SCHEMAS)?, id)
            }

            fn chunk_order_of(&self, id: u64) -> Result<Vec<(u64, u64)>> {
                chunk_order(&self.open_table(CHUNK_ORDER)?, id)
            }

            fn chunk(&self, id: u64, chunk: u64) -> Result<RecordBatch> {
                let chunks = self.open_table(CHUNKS)?;
                let bytes = chunks.get((id, chunk))?.ok_or_else(|| {
                    Error::internal(format!("chunk {chunk} of table id {id} is missing"))
                })?;
                decode_chunk(bytes.value(), None)
            }

            fn chunk_columns(
                &self,
                id: u64,
                chunk: u64,
                projection: Vec<usize>,
            ) -> Result<RecordBatch> {
                let chunks = self.open_table(CHUNKS)?;
                let bytes = chunks.get((id, chunk))?.ok_or_else(|| {
                    Error::internal(format!("chunk {chunk} of table id {id} is missing"))
                })?;
                decode_chunk(bytes.value(), Some(projection))
            }
        }
    };
}

read_tables!(WriteTransaction);
read_tables!(ReadTransaction);

/// Every table's chunks, open for reading in one read snapshot: a scan holds it for as long as
/// its partitions decode chunks, without keeping the snapshot's transaction borrowed.
#[derive(Debug)]
pub(crate) struct Chunks(ReadOnlyTable<(u64, u64), &'static [u8]>);

impl Chunks {
    /// The chunks as `txn` sees them.
    pub(crate) fn open(txn: &ReadTransaction) -> Result<Chunks> {
        Ok(Chunks(txn.open_table(CHUNKS)?))
    }

    /// Chunk `chunk` of table `id`, decoded: every column, or only the `projection` ones.
    pub(crate) fn decode(
        &self,
        id: u64,
        chunk: u64,
        projection: Option<Vec<usize>>,
    ) -> Result<RecordBatch> {
        let bytes = self
            .0
            .get((id, chunk))?
            .ok_or_else(|| Error::internal(format!("chunk {chunk} of table id {id} is missing")))?;
        decode_chunk(bytes.value(), projection)
    }
}
