//! Remote tables as DataFusion sees them: [`RemoteTable`] (a table of a datasource, with
//! projections, filters and limits pushed down), [`NativeQuery`] (`SELECT … FROM pg (raw SQL)`,
//! run as written), the scan operator both plan into, and writes (`INSERT INTO pg.t …`,
//! `CREATE TABLE pg.t (SELECT …)`), each one remote transaction.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;
use tokio_postgres::types::ToSql;

use super::postgres::{query_error, quote, Column, Kind, TextParam};
use super::remote::Remote;
use super::{mysql, postgres};
use crate::error::{Error, Result};

/// Marks a table name that is really a native query's text: `FROM pg (SELECT …)` reaches the
/// datasource's schema as the table `pg."\u{1}SELECT …"` (a name no real table has).
pub(crate) const NATIVE: char = '\u{1}';

/// A table of a datasource.
#[derive(Debug)]
pub(crate) struct RemoteTable {
    remote: Remote,
    table: String,
    columns: Vec<Column>,
    schema: SchemaRef,
}

impl RemoteTable {
    /// The datasource's server.
    pub(crate) fn remote(&self) -> &Remote {
        &self.remote
    }

    /// The table's name in the datasource's schema.
    pub(crate) fn name(&self) -> &str {
        &self.table
    }

    /// Its columns, as read.
    pub(crate) fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The table `name` of the datasource, or `None` when the remote schema has no such table.
    pub(crate) async fn open(remote: Remote, name: &str) -> Result<Option<RemoteTable>> {
        let Some(columns) = remote.table_columns(name).await? else {
            return Ok(None);
        };
        Ok(Some(RemoteTable {
            schema: postgres::schema_of(&columns),
            remote,
            table: name.to_string(),
            columns,
        }))
    }
}

#[async_trait]
impl TableProvider for RemoteTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.remote.push_down() && self.remote.filter(f, &self.columns).is_some() {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.columns.len()).collect(),
        };
        let columns: Vec<&Column> = indices.iter().map(|&i| &self.columns[i]).collect();
        // An empty select list is valid PostgreSQL (rows without columns, for count(*));
        // MySQL needs one item.
        let mut select: Vec<String> = columns.iter().map(|c| self.remote.select_item(c)).collect();
        if select.is_empty() && matches!(self.remote, Remote::MySql(_)) {
            select.push("1".to_string());
        }
        let mut sql = format!(
            "SELECT {} FROM {}",
            select.join(", "),
            self.remote.qualified(&self.table)
        );
        // bounded: one per condition of the parsed statement
        let mut conditions = Vec::with_capacity(filters.len());
        for filter in filters {
            // Only filters accepted as exact arrive here, and each of those renders.
            let condition = self.remote.filter(filter, &self.columns).ok_or_else(|| {
                DataFusionError::Internal(format!("filter {filter} cannot be sent"))
            })?;
            conditions.push(condition);
        }
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        if let (Some(n), true) = (limit, self.remote.push_down()) {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        let schema = Arc::new(self.schema.project(&indices)?);
        // MySQL's stand-in column for an empty select list is read and dropped.
        let (read_schema, kinds, projection) = match (columns.is_empty(), &self.remote) {
            (true, Remote::MySql(_)) => (
                Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
                    datafusion::arrow::datatypes::Field::new("one", DataType::Int64, true),
                ])),
                vec![Kind::Int64],
                Some(Vec::new()),
            ),
            _ => (schema, columns.iter().map(|c| c.kind).collect(), None),
        };
        Ok(Arc::new(RemoteScanExec::new(
            self.remote.clone(),
            sql,
            Arc::from([]),
            read_schema,
            kinds,
            projection,
        )))
    }
}

/// A native query: raw SQL text in the datasource's dialect whose result is a table.
#[derive(Debug)]
pub(crate) struct NativeQuery {
    remote: Remote,
    sql: String,
    kinds: Vec<Kind>,
    schema: SchemaRef,
}

impl NativeQuery {
    /// Describes `sql` on the server (nothing runs yet) to learn its columns.
    pub(crate) async fn prepare(remote: Remote, sql: &str) -> Result<NativeQuery> {
        let columns = remote.query_columns(sql).await?;
        Ok(NativeQuery {
            schema: postgres::schema_of(&columns),
            kinds: columns.iter().map(|c| c.kind).collect(),
            remote,
            sql: sql.to_string(),
        })
    }
}

#[async_trait]
impl TableProvider for NativeQuery {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // The text runs as written; columns the query does not need are dropped after reading.
        Ok(Arc::new(RemoteScanExec::new(
            self.remote.clone(),
            self.sql.clone(),
            Arc::from([]),
            Arc::clone(&self.schema),
            self.kinds.clone(),
            projection.cloned(),
        )))
    }
}

/// Reads the rows of one remote statement, as one partition.
#[derive(Debug)]
pub(crate) struct RemoteScanExec {
    remote: Remote,
    sql: String,
    /// Values for the statement's `$1`, `$2`, … placeholders, as text.
    params: Arc<[Option<String>]>,
    /// The statement's columns, before `projection`.
    read_schema: SchemaRef,
    kinds: Vec<Kind>,
    projection: Option<Vec<usize>>,
    /// The types the rows are cast to after reading, when they differ from how they are read.
    output: Option<SchemaRef>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl RemoteScanExec {
    /// Reads the rows of `sql` with `params`; `read_schema` and `kinds` say how its columns
    /// are read, and `projection` which are kept.
    pub(crate) fn new(
        remote: Remote,
        sql: String,
        params: Arc<[Option<String>]>,
        read_schema: SchemaRef,
        kinds: Vec<Kind>,
        projection: Option<Vec<usize>>,
    ) -> Self {
        let schema = match &projection {
            Some(p) => Arc::new(
                read_schema
                    .project(p)
                    .expect("projection of its own schema"),
            ),
            None => Arc::clone(&read_schema),
        };
        RemoteScanExec {
            remote,
            sql,
            params,
            read_schema,
            kinds,
            projection,
            output: None,
            properties: Arc::new(Self::properties_of(schema)),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    fn properties_of(schema: SchemaRef) -> PlanProperties {
        PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
    }

    /// The same scan with its rows cast to `output` (as many columns, types Arrow casts to).
    pub(crate) fn cast_to(mut self, output: SchemaRef) -> Self {
        self.properties = Arc::new(Self::properties_of(Arc::clone(&output)));
        self.output = Some(output);
        self
    }
}

impl DisplayAs for RemoteScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let (name, place) = self.remote.describe();
        write!(f, "{name}: {place} sql={}", self.sql)?;
        if !self.params.is_empty() {
            // Shown as SQL literals would be, so the line reads as what the server runs.
            let shown: Vec<String> = self
                .params
                .iter()
                .map(|p| match p {
                    Some(text) => format!("'{}'", text.replace('\'', "''")),
                    None => "NULL".to_string(),
                })
                .collect();
            write!(f, " params=[{}]", shown.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for RemoteScanExec {
    fn name(&self) -> &str {
        self.remote.describe().0
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(format!(
                "{} has no inputs",
                self.remote.describe().0
            )))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let rows_read = MetricBuilder::new(&self.metrics).output_rows(partition);
        let projection = self.projection.clone();
        let output = self.output.clone();
        let batches = self
            .remote
            .read_rows(
                self.sql.clone(),
                Arc::clone(&self.params),
                Arc::clone(&self.read_schema),
                self.kinds.clone(),
                context.session_config().batch_size(),
            )
            .map(move |batch| {
                let batch = batch?;
                rows_read.add(batch.num_rows());
                let batch = match &projection {
                    Some(p) => batch.project(p)?,
                    None => batch,
                };
                Ok(match &output {
                    Some(output) => cast_batch(batch, output)?,
                    None => batch,
                })
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// `batch` with each column cast to `output`'s type for it.
fn cast_batch(
    batch: datafusion::arrow::array::RecordBatch,
    output: &SchemaRef,
) -> DfResult<datafusion::arrow::array::RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(output.fields())
        .map(
            |(column, field)| match column.data_type() == field.data_type() {
                true => Ok(Arc::clone(column)),
                false => cast(column, field.data_type()),
            },
        )
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(datafusion::arrow::array::RecordBatch::try_new_with_options(
        Arc::clone(output),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// Parameters per INSERT statement are capped by the protocol's 65,535.
const MAX_PARAMS: usize = 65_535;
/// Rows per INSERT statement.
const ROWS_PER_INSERT: usize = 1_000;

/// Inserts every batch of `data` into `table` on `client` (inside the caller's transaction),
/// columns by name from `schema`; returns the rows written.
async fn insert_batches(
    client: &tokio_postgres::Transaction<'_>,
    table: &str,
    schema: &SchemaRef,
    mut data: SendableRecordBatchStream,
) -> Result<u64> {
    let names: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
    let head = format!("INSERT INTO {table} ({}) VALUES ", names.join(", "));
    let mut full = None;
    let mut written = 0u64;
    while let Some(batch) = data.next().await {
        let batch = batch?;
        let texts: Vec<StringArray> = batch
            .columns()
            .iter()
            .map(|c| text_column(c.as_ref()))
            .collect::<Result<_>>()?;
        written += insert_texts(client, &mut full, (&head, ""), &texts, query_error).await?;
    }
    Ok(written)
}

/// Runs `head VALUES (…), (…) tail` on `client` for the rows of `texts` (one column each,
/// as text PostgreSQL parses), as many rows a statement as the protocol takes; `full` keeps
/// the prepared statement of a full one across calls. Returns the rows written.
pub(crate) async fn insert_texts<C: tokio_postgres::GenericClient + Sync>(
    client: &C,
    full: &mut Option<tokio_postgres::Statement>,
    (head, tail): (&str, &str),
    texts: &[StringArray],
    error: impl Fn(&tokio_postgres::Error) -> Error,
) -> Result<u64> {
    let width = texts.len().max(1);
    let per_statement = ROWS_PER_INSERT.min(MAX_PARAMS / width).max(1);
    let statement_for = |rows: usize| {
        let mut sql = head.to_string();
        for r in 0..rows {
            if r > 0 {
                sql.push_str(", ");
            }
            let slots: Vec<String> = (0..width)
                .map(|c| format!("${}", r * width + c + 1))
                .collect();
            sql.push('(');
            sql.push_str(&slots.join(", "));
            sql.push(')');
        }
        sql.push_str(tail);
        sql
    };
    let total = texts.first().map_or(0, |t| t.len());
    let mut written = 0u64;
    let mut start = 0;
    while start < total {
        let rows = per_statement.min(total - start);
        let statement = if rows == per_statement {
            match full {
                Some(s) => s.clone(),
                None => full
                    .insert(
                        client
                            .prepare(&statement_for(rows))
                            .await
                            .map_err(|e| error(&e))?,
                    )
                    .clone(),
            }
        } else {
            client
                .prepare(&statement_for(rows))
                .await
                .map_err(|e| error(&e))?
        };
        // bounded: one per cell of a batch in memory
        let mut params: Vec<TextParam> = Vec::with_capacity(rows * width);
        for r in start..start + rows {
            for column in texts {
                params.push(TextParam(if column.is_null(r) {
                    None
                } else {
                    Some(column.value(r))
                }));
            }
        }
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        written += client
            .execute(&statement, &refs)
            .await
            .map_err(|e| error(&e))?;
        start += rows;
    }
    Ok(written)
}

/// A column as text PostgreSQL parses: booleans `true`/`false`, times in ISO form, bytes in
/// bytea's hex form (`\x0102`).
pub(crate) fn text_column(array: &dyn Array) -> Result<StringArray> {
    if matches!(
        array.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    ) {
        let bytes = cast(array, &DataType::Binary)?;
        let bytes = bytes
            .as_any()
            .downcast_ref::<datafusion::arrow::array::BinaryArray>()
            .expect("a cast to Binary gives a BinaryArray");
        return Ok(bytes
            .iter()
            .map(|v| {
                v.map(|v| {
                    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                    format!("\\x{hex}")
                })
            })
            .collect());
    }
    let text = cast(array, &DataType::Utf8)?;
    Ok(text
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("a cast to Utf8 gives a StringArray")
        .clone())
}

/// `INSERT INTO pg.t [(columns)] …`: the rows of `data` into `table`, in one remote
/// transaction. Only the columns the statement named are sent (all when it named none), so
/// PostgreSQL's defaults apply to the others. Returns the rows written.
pub(crate) async fn insert(
    remote: &Remote,
    table: &str,
    columns: Option<Vec<String>>,
    data: SendableRecordBatchStream,
) -> Result<u64> {
    let schema = data.schema();
    let indices: Vec<usize> = match &columns {
        None => (0..schema.fields().len()).collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                schema
                    .fields()
                    .iter()
                    .position(|f| f.name().eq_ignore_ascii_case(n))
                    .ok_or_else(|| {
                        Error::invalid(format!("Column '{n}' is not in table '{table}'"))
                    })
            })
            .collect::<Result<_>>()?,
    };
    let projected = Arc::new(schema.project(&indices)?);
    let data: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
        Arc::clone(&projected),
        data.map(move |batch| Ok(batch?.project(&indices)?)),
    ));
    let settings = match remote {
        Remote::Postgres(settings) => settings,
        Remote::MySql(settings) => return mysql::insert(settings, table, data).await,
    };
    let mut client = settings.connect_for_writes().await?;
    let txn = client.transaction().await.map_err(|e| query_error(&e))?;
    let written = insert_batches(&txn, &settings.qualified(table), &projected, data).await?;
    txn.commit().await.map_err(|e| query_error(&e))?;
    Ok(written)
}

/// The PostgreSQL column type for an Arrow type, for `CREATE TABLE pg.t (SELECT …)`.
pub(crate) fn remote_type(data_type: &DataType) -> Result<String> {
    Ok(match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric(20, 0)".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p}, {s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => "text".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Timestamp(
            TimeUnit::Second | TimeUnit::Millisecond | TimeUnit::Microsecond | TimeUnit::Nanosecond,
            None,
        ) => "timestamp".into(),
        DataType::Timestamp(_, Some(_)) => "timestamptz".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        other => {
            return Err(Error::invalid(format!(
                "A column of type {other} cannot be stored in PostgreSQL by mindlite"
            )))
        }
    })
}

/// Drops `table` of the datasource's schema (`DROP TABLE pg.t`); the datasource's own error
/// when it does not exist, unless `if_exists`.
pub(crate) async fn drop_table(remote: &Remote, table: &str, if_exists: bool) -> Result<()> {
    let settings = match remote {
        Remote::Postgres(settings) => settings,
        Remote::MySql(settings) => return mysql::drop_table(settings, table, if_exists).await,
    };
    let qualified = settings.qualified(table);
    let client = settings.connect_for_writes().await?;
    let statement = match if_exists {
        true => format!("DROP TABLE IF EXISTS {qualified}"),
        false => format!("DROP TABLE {qualified}"),
    };
    client
        .batch_execute(&statement)
        .await
        .map_err(|e| query_error(&e))
}

/// How `CREATE TABLE pg.t …` treats an existing table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Existing {
    Fail,
    Keep,
    Replace,
}

/// `CREATE [OR REPLACE] TABLE pg.t [IF NOT EXISTS] (SELECT …)`: makes the remote table with
/// the query's columns and fills it, in one remote transaction (so a failure leaves nothing).
/// Returns the rows written, `None` when the table existed and was kept.
pub(crate) async fn create_table(
    remote: &Remote,
    table: &str,
    existing: Existing,
    data: SendableRecordBatchStream,
) -> Result<Option<u64>> {
    let settings = match remote {
        Remote::Postgres(settings) => settings,
        Remote::MySql(settings) => {
            let exists = mysql::table_columns(settings, table).await?.is_some();
            match (exists, existing) {
                (true, Existing::Keep) => return Ok(None),
                (true, Existing::Fail) => {
                    return Err(Error::conflict(format!(
                        "Table '{table}' already exists in MySQL database '{}'",
                        settings.database
                    )))
                }
                _ => {
                    return mysql::create_table(settings, table, exists, data)
                        .await
                        .map(Some)
                }
            }
        }
    };
    let schema = data.schema();
    // bounded: one per column of the table
    let mut definitions = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        definitions.push(format!(
            "{} {}",
            quote(field.name()),
            remote_type(field.data_type())?
        ));
    }
    let qualified = settings.qualified(table);
    let mut client = settings.connect_for_writes().await?;
    let txn = client.transaction().await.map_err(|e| query_error(&e))?;
    let exists = txn
        .query_opt(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2",
            &[&settings.schema, &table],
        )
        .await
        .map_err(|e| query_error(&e))?
        .is_some();
    if exists {
        match existing {
            Existing::Keep => return Ok(None),
            Existing::Fail => {
                return Err(Error::conflict(format!(
                    "Table '{table}' already exists in PostgreSQL schema '{}'",
                    settings.schema
                )))
            }
            Existing::Replace => {}
        }
    }
    // Filled under a new name and swapped in at the end: the query may read the table it
    // replaces (on another connection), which a DROP first would block forever.
    let building = format!("{table}__mindlite_{}", std::process::id());
    let building_qualified = settings.qualified(&building);
    txn.batch_execute(&format!(
        "CREATE TABLE {building_qualified} ({})",
        definitions.join(", ")
    ))
    .await
    .map_err(|e| query_error(&e))?;
    let written = insert_batches(&txn, &building_qualified, &schema, data).await?;
    if exists {
        txn.batch_execute(&format!("DROP TABLE {qualified}"))
            .await
            .map_err(|e| query_error(&e))?;
    }
    txn.batch_execute(&format!(
        "ALTER TABLE {building_qualified} RENAME TO {}",
        quote(table)
    ))
    .await
    .map_err(|e| query_error(&e))?;
    txn.commit().await.map_err(|e| query_error(&e))?;
    Ok(Some(written))
}
