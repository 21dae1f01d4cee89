//! A stored table as DataFusion reads it ([`StoredTable`]): scans that decode chunks lazily,
//! partition by partition, narrowed by the table's indexes (see `index_scan`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{Constraints, Statistics};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;

use super::index_scan;
use super::snapshot::Snapshot;
use crate::catalog::indexes;
use crate::catalog::tables::ReadTables;
use crate::catalog::tables::{self, TableRecord};
use crate::error::Result;
use crate::store::Store;
/// A stored table at the snapshot's version.
#[derive(Debug)]
pub(crate) struct StoredTable {
    pub(super) snapshot: Arc<Snapshot>,
    pub(crate) record: TableRecord,
    pub(super) schema: SchemaRef,
    /// Its primary and unique keys, as DataFusion's planner uses them.
    pub(super) constraints: Constraints,
    /// Column name (lower case) → its DEFAULT, planned.
    pub(super) defaults: HashMap<String, Expr>,
}

#[async_trait]
impl TableProvider for StoredTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(&column.to_ascii_lowercase())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Inexact: the rows an index finds are filtered again.
        Ok(filters
            .iter()
            .map(|filter| match self.lookup_for(filter) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let chunks = Arc::new(tables::Chunks::open(&self.snapshot.txn)?);
        let mut numbers: Vec<u64> = self
            .snapshot
            .txn
            .chunk_order_of(self.record.id)?
            .into_iter()
            .map(|(_, chunk)| chunk)
            .collect();
        // An index lookup, when the filters allow one, picks the chunks and rows read.
        let mut rows = None;
        let lookup =
            index_scan::best_lookup(filters, &self.record.constraints.indexes, &self.schema);
        if let Some(lookup) = lookup {
            if let Some(found) = indexes::lookup_in(
                &self.snapshot.txn,
                lookup.entries,
                &lookup.first,
                &lookup.probe,
            )? {
                numbers.retain(|chunk| found.contains_key(chunk));
                rows = Some(Arc::new(found));
            }
        }
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        let config = state.config();
        let parts = config.target_partitions().clamp(1, numbers.len().max(1));
        let per_part = numbers.len().div_ceil(parts).max(1);
        let mut partitions: Vec<Arc<dyn PartitionStream>> = numbers
            .chunks(per_part)
            .map(|group| {
                Arc::new(ChunkPartition {
                    store: Arc::clone(&self.snapshot.store),
                    chunks: Arc::clone(&chunks),
                    table_id: self.record.id,
                    numbers: group.to_vec(),
                    rows: rows.clone(),
                    projection: projection.cloned(),
                    schema: Arc::clone(&projected),
                    batch_size: config.batch_size(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        if partitions.is_empty() {
            partitions.push(Arc::new(ChunkPartition {
                store: Arc::clone(&self.snapshot.store),
                chunks,
                table_id: self.record.id,
                numbers: Vec::new(),
                rows: None,
                projection: projection.cloned(),
                schema: Arc::clone(&projected),
                batch_size: config.batch_size(),
            }));
        }
        Ok(Arc::new(StreamingTableExec::try_new(
            projected,
            partitions,
            None,
            [],
            false,
            limit,
        )?))
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = Precision::Exact(self.record.row_count as usize);
        Some(stats)
    }
}

impl StoredTable {
    /// The table `record` (of `schema`) as a plain scan, without its keys and defaults.
    pub(crate) fn plain(snapshot: Arc<Snapshot>, record: TableRecord, schema: SchemaRef) -> Self {
        StoredTable {
            snapshot,
            record,
            schema,
            constraints: Constraints::new_unverified(Vec::new()),
            defaults: HashMap::new(),
        }
    }

    /// The index lookup that answers `filter`, if one of the table's indexes does.
    fn lookup_for(&self, filter: &Expr) -> Option<index_scan::Lookup> {
        index_scan::lookup_for(filter, &self.record.constraints.indexes, &self.schema)
    }
}

/// A contiguous run of a table's chunks, read in order.
struct ChunkPartition {
    store: Arc<Store>,
    chunks: Arc<tables::Chunks>,
    table_id: u64,
    numbers: Vec<u64>,
    /// Only these rows of each chunk, when an index found them.
    rows: Option<Arc<indexes::Found>>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    batch_size: usize,
}

impl fmt::Debug for ChunkPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkPartition")
            .field("table_id", &self.table_id)
            .field("chunks", &self.numbers.len())
            .finish()
    }
}

impl ChunkPartition {
    fn load(&self, number: u64) -> Result<RecordBatch> {
        let key = (self.table_id, number);
        let cache = &self.store.chunk_cache;
        let full = match cache.get(key) {
            Some(batch) => batch,
            // Cached whole, so any later projection finds it.
            None if cache.admit(key) => {
                let batch = self.decode(number, None)?;
                cache.insert(key, batch.clone());
                batch
            }
            None => return self.decode(number, self.projection.clone()),
        };
        Ok(match &self.projection {
            Some(p) => full.project(p)?,
            None => full,
        })
    }

    /// The chunk's rows this partition reads: all, or those an index found.
    fn load_rows(&self, number: u64) -> Result<RecordBatch> {
        let batch = self.load(number)?;
        let Some(rows) = self.rows.as_ref().and_then(|found| found.get(&number)) else {
            return Ok(batch);
        };
        let indices = UInt32Array::from(rows.clone());
        Ok(datafusion::arrow::compute::take_record_batch(
            &batch, &indices,
        )?)
    }

    fn decode(&self, number: u64, projection: Option<Vec<usize>>) -> Result<RecordBatch> {
        self.chunks.decode(self.table_id, number, projection)
    }
}

impl PartitionStream for ChunkPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let this = ChunkPartition {
            store: Arc::clone(&self.store),
            chunks: Arc::clone(&self.chunks),
            table_id: self.table_id,
            numbers: self.numbers.clone(),
            rows: self.rows.clone(),
            projection: self.projection.clone(),
            schema: Arc::clone(&self.schema),
            batch_size: self.batch_size.max(1),
        };
        let schema = Arc::clone(&self.schema);
        let numbers = self.numbers.clone();
        // Each chunk is decoded only when the consumer asks for its first slice.
        let stream = futures::stream::iter(numbers).flat_map(move |number| {
            let slices: Vec<DfResult<RecordBatch>> = match this.load_rows(number) {
                Err(e) => vec![Err(DataFusionError::from(e))],
                Ok(batch) => {
                    let rows = batch.num_rows();
                    (0..rows)
                        .step_by(this.batch_size)
                        .map(|start| Ok(batch.slice(start, this.batch_size.min(rows - start))))
                        .collect()
                }
            };
            futures::stream::iter(slices)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, stream))
    }
}
