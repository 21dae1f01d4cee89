//! DataFusion's view of one tenant's catalog at one read snapshot: projects, `information_schema`
//! and `files` as schemas, stored tables as [`StoredTable`] providers whose scans decode chunks
//! lazily, partition by partition. One snapshot per statement keeps every table of a query consistent.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::Statistics;
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use redb::{ReadOnlyTable, ReadTransaction};

use crate::error::{Error, Result};
use crate::projects::{self, Project, PROJECTS};
use crate::store::Store;
use crate::tables::{self, TableRecord, CHUNKS, TABLES, TABLE_SCHEMAS};
use crate::tenant::TenantId;

/// Field metadata key holding the column name to show when it differs from the (lower-case)
/// name SQL resolves, as for `information_schema`'s upper-case columns.
pub(crate) const DISPLAY_NAME: &str = "mindlite.display_name";

/// The name DataFusion knows the catalog by.
pub(crate) const CATALOG: &str = "mindlite";

/// The built-in namespace kinds, in the order `SHOW DATABASES` lists them.
pub(crate) const SYSTEM_DB: &str = "information_schema";
/// The built-in data namespace for uploaded files.
pub(crate) const FILES_DB: &str = "files";

/// One tenant's catalog at one read snapshot.
pub(crate) struct Snapshot {
    pub(crate) tenant: TenantId,
    pub(crate) txn: ReadTransaction,
    pub(crate) store: Arc<Store>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// What a database name refers to.
pub(crate) enum Namespace {
    System,
    Files,
    Project(Project),
}

impl Snapshot {
    pub(crate) fn new(store: Arc<Store>, tenant: TenantId) -> Result<Arc<Self>> {
        Ok(Arc::new(Snapshot {
            tenant,
            txn: store.read()?,
            store,
        }))
    }

    pub(crate) fn projects(&self) -> Result<Vec<Project>> {
        projects::list(&self.txn.open_table(PROJECTS)?, self.tenant)
    }

    pub(crate) fn namespace(&self, name: &str) -> Result<Option<Namespace>> {
        let lower = name.to_ascii_lowercase();
        Ok(match lower.as_str() {
            SYSTEM_DB => Some(Namespace::System),
            FILES_DB => Some(Namespace::Files),
            _ => projects::get(&self.txn.open_table(PROJECTS)?, self.tenant, &lower)?
                .map(Namespace::Project),
        })
    }

    pub(crate) fn tables(&self, project: &str) -> Result<Vec<TableRecord>> {
        tables::list(&self.txn.open_table(TABLES)?, self.tenant, project)
    }

    pub(crate) fn table(&self, project: &str, name: &str) -> Result<Option<TableRecord>> {
        tables::get(&self.txn.open_table(TABLES)?, self.tenant, project, name)
    }

    pub(crate) fn table_schema(&self, id: u64) -> Result<SchemaRef> {
        tables::schema(&self.txn.open_table(TABLE_SCHEMAS)?, id)
    }

    /// The rows of `SHOW DATABASES` / `information_schema.databases`: (name, type, engine).
    pub(crate) fn databases(&self) -> Result<Vec<(String, &'static str, Option<&'static str>)>> {
        let mut out = vec![(SYSTEM_DB.to_string(), "system", None)];
        for project in self.projects()? {
            out.push((project.name, "project", Some("mindsdb")));
        }
        out.push((FILES_DB.to_string(), "data", Some("files")));
        Ok(out)
    }
}

/// The catalog DataFusion resolves `db.table` names in.
#[derive(Debug)]
pub(crate) struct TenantCatalog {
    pub(crate) snapshot: Arc<Snapshot>,
}

impl CatalogProvider for TenantCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.snapshot
            .databases()
            .map(|dbs| dbs.into_iter().map(|(name, _, _)| name).collect())
            .unwrap_or_default()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let snapshot = Arc::clone(&self.snapshot);
        match snapshot.namespace(name).ok()?? {
            Namespace::System => Some(Arc::new(InformationSchema { snapshot })),
            Namespace::Files => Some(Arc::new(FilesSchema)),
            Namespace::Project(project) => Some(Arc::new(ProjectSchema {
                snapshot,
                project: project.name,
            })),
        }
    }
}

/// A project's tables.
#[derive(Debug)]
struct ProjectSchema {
    snapshot: Arc<Snapshot>,
    project: String,
}

#[async_trait]
impl SchemaProvider for ProjectSchema {
    fn table_names(&self) -> Vec<String> {
        self.snapshot
            .tables(&self.project)
            .map(|ts| ts.into_iter().map(|t| t.name).collect())
            .unwrap_or_default()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(record) = self.snapshot.table(&self.project, name)? else {
            return Ok(None);
        };
        let schema = self.snapshot.table_schema(record.id)?;
        Ok(Some(Arc::new(StoredTable {
            snapshot: Arc::clone(&self.snapshot),
            record,
            schema,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        matches!(self.snapshot.table(&self.project, name), Ok(Some(_)))
    }
}

/// The `files` namespace. Uploaded files land here once the datasources issue adds uploads.
#[derive(Debug)]
struct FilesSchema;

#[async_trait]
impl SchemaProvider for FilesSchema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, _name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(None)
    }

    fn table_exist(&self, _name: &str) -> bool {
        false
    }
}

/// A stored table at the snapshot's version.
#[derive(Debug)]
pub(crate) struct StoredTable {
    snapshot: Arc<Snapshot>,
    pub(crate) record: TableRecord,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for StoredTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let chunks = Arc::new(self.snapshot.txn.open_table(CHUNKS).map_err(Error::from)?);
        let numbers = tables::chunk_numbers(&*chunks, self.record.id)?;
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

/// A contiguous run of a table's chunks, read in order.
struct ChunkPartition {
    store: Arc<Store>,
    chunks: Arc<ReadOnlyTable<(u64, u64), &'static [u8]>>,
    table_id: u64,
    numbers: Vec<u64>,
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
        if cache.enabled() {
            let full = match cache.get(key) {
                Some(batch) => batch,
                None => {
                    let batch = self.decode(number, None)?;
                    cache.insert(key, batch.clone());
                    batch
                }
            };
            return Ok(match &self.projection {
                Some(p) => full.project(p)?,
                None => full,
            });
        }
        self.decode(number, self.projection.clone())
    }

    fn decode(&self, number: u64, projection: Option<Vec<usize>>) -> Result<RecordBatch> {
        let bytes = self.chunks.get((self.table_id, number))?.ok_or_else(|| {
            Error::internal(format!(
                "chunk {number} of table id {} is missing",
                self.table_id
            ))
        })?;
        tables::decode_chunk(bytes.value(), projection)
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
            projection: self.projection.clone(),
            schema: Arc::clone(&self.schema),
            batch_size: self.batch_size.max(1),
        };
        let schema = Arc::clone(&self.schema);
        let numbers = self.numbers.clone();
        // Each chunk is decoded only when the consumer asks for its first slice.
        let stream = futures::stream::iter(numbers).flat_map(move |number| {
            let slices: Vec<DfResult<RecordBatch>> = match this.load(number) {
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

/// `information_schema`: `databases`, `tables` and `columns`, built from the snapshot.
#[derive(Debug)]
struct InformationSchema {
    snapshot: Arc<Snapshot>,
}

const INFO_TABLES: [&str; 3] = ["databases", "tables", "columns"];

fn info_field(display: &str, data_type: DataType) -> Field {
    Field::new(display.to_ascii_lowercase(), data_type, true).with_metadata(HashMap::from([(
        DISPLAY_NAME.to_string(),
        display.to_string(),
    )]))
}

fn utf8(values: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

impl InformationSchema {
    fn build(&self, name: &str) -> Result<Option<RecordBatch>> {
        let snap = &self.snapshot;
        let batch = match name {
            "databases" => {
                let dbs = snap.databases()?;
                let schema = Schema::new(vec![
                    info_field("NAME", DataType::Utf8),
                    info_field("TYPE", DataType::Utf8),
                    info_field("ENGINE", DataType::Utf8),
                    info_field("CONNECTION_DATA", DataType::Utf8),
                ]);
                RecordBatch::try_new(
                    Arc::new(schema),
                    vec![
                        utf8(dbs.iter().map(|d| Some(d.0.clone())).collect()),
                        utf8(dbs.iter().map(|d| Some(d.1.to_string())).collect()),
                        utf8(dbs.iter().map(|d| d.2.map(str::to_string)).collect()),
                        utf8(dbs.iter().map(|_| Some("{}".to_string())).collect()),
                    ],
                )?
            }
            "tables" => {
                let mut rows: Vec<(String, String, &str, Option<u64>, Option<String>)> =
                    INFO_TABLES
                        .iter()
                        .map(|t| {
                            (
                                SYSTEM_DB.to_string(),
                                t.to_string(),
                                "SYSTEM VIEW",
                                None,
                                None,
                            )
                        })
                        .collect();
                for project in snap.projects()? {
                    for table in snap.tables(&project.name)? {
                        rows.push((
                            project.name.clone(),
                            table.name,
                            "BASE TABLE",
                            Some(table.row_count),
                            Some(table.created_at),
                        ));
                    }
                }
                let schema = Schema::new(vec![
                    info_field("TABLE_CATALOG", DataType::Utf8),
                    info_field("TABLE_SCHEMA", DataType::Utf8),
                    info_field("TABLE_NAME", DataType::Utf8),
                    info_field("TABLE_TYPE", DataType::Utf8),
                    info_field("TABLE_ROWS", DataType::UInt64),
                    info_field("CREATE_TIME", DataType::Utf8),
                ]);
                RecordBatch::try_new(
                    Arc::new(schema),
                    vec![
                        utf8(rows.iter().map(|_| Some("def".to_string())).collect()),
                        utf8(rows.iter().map(|r| Some(r.0.clone())).collect()),
                        utf8(rows.iter().map(|r| Some(r.1.clone())).collect()),
                        utf8(rows.iter().map(|r| Some(r.2.to_string())).collect()),
                        Arc::new(UInt64Array::from(
                            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                        )),
                        utf8(rows.iter().map(|r| r.4.clone()).collect()),
                    ],
                )?
            }
            "columns" => {
                let mut rows: Vec<(String, String, String, u64, bool, String)> = Vec::new();
                for project in snap.projects()? {
                    for table in snap.tables(&project.name)? {
                        let schema = snap.table_schema(table.id)?;
                        for (i, field) in schema.fields().iter().enumerate() {
                            rows.push((
                                project.name.clone(),
                                table.name.clone(),
                                field.name().clone(),
                                i as u64 + 1,
                                field.is_nullable(),
                                sql_type_name(field.data_type()),
                            ));
                        }
                    }
                }
                let schema = Schema::new(vec![
                    info_field("TABLE_CATALOG", DataType::Utf8),
                    info_field("TABLE_SCHEMA", DataType::Utf8),
                    info_field("TABLE_NAME", DataType::Utf8),
                    info_field("COLUMN_NAME", DataType::Utf8),
                    info_field("ORDINAL_POSITION", DataType::UInt64),
                    info_field("COLUMN_DEFAULT", DataType::Utf8),
                    info_field("IS_NULLABLE", DataType::Utf8),
                    info_field("DATA_TYPE", DataType::Utf8),
                ]);
                RecordBatch::try_new(
                    Arc::new(schema),
                    vec![
                        utf8(rows.iter().map(|_| Some("def".to_string())).collect()),
                        utf8(rows.iter().map(|r| Some(r.0.clone())).collect()),
                        utf8(rows.iter().map(|r| Some(r.1.clone())).collect()),
                        utf8(rows.iter().map(|r| Some(r.2.clone())).collect()),
                        Arc::new(UInt64Array::from(
                            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                        )),
                        utf8(rows.iter().map(|_| None).collect()),
                        utf8(
                            rows.iter()
                                .map(|r| Some(if r.4 { "YES" } else { "NO" }.to_string()))
                                .collect(),
                        ),
                        utf8(rows.iter().map(|r| Some(r.5.clone())).collect()),
                    ],
                )?
            }
            _ => return Ok(None),
        };
        Ok(Some(batch))
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        INFO_TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(batch) = self.build(&name.to_ascii_lowercase())? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        INFO_TABLES.contains(&name.to_ascii_lowercase().as_str())
    }
}

/// The SQL name of an Arrow type, as `information_schema.columns.DATA_TYPE` shows it.
pub(crate) fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INTEGER UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("DECIMAL({p},{s})"),
        other => other.to_string(),
    }
}
