//! DataFusion's view of one tenant's catalog at one read snapshot: projects, `information_schema`
//! and `files` as schemas, stored tables as [`StoredTable`] providers whose scans decode chunks
//! lazily, partition by partition. One snapshot per statement keeps every table of a query consistent.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{Constraint, Constraints, DFSchema, Statistics};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use redb::{ReadOnlyTable, ReadTransaction};

use super::extension::{Extensions, SystemRows};
use super::index_scan;
use crate::catalog::agents::{self, Agent};
use crate::catalog::datasources::{self, Datasource};
use crate::catalog::indexes;
use crate::catalog::knowledge_bases::{self, KnowledgeBase};
use crate::catalog::models::{self, ModelVersion};
use crate::catalog::namespace::{FILES_DB, INFO_TABLES, SYSTEM_DB};
use crate::catalog::projects::{self, Project};
use crate::catalog::tables::{self, sql_type_name, TableRecord};
use crate::catalog::views::{self, View};
use crate::error::{Error, Result};
use crate::services::connectors::table::NATIVE;
use crate::store::schema::{
    AGENTS, CHUNKS, CHUNK_ORDER, DATASOURCES, INDEX_ENTRIES, KNOWLEDGE_BASES, MODELS, PROJECTS,
    TABLES, TABLE_SCHEMAS, VIEWS,
};
use crate::store::Store;
use crate::tenant::TenantId;

/// Field metadata key holding the column name to show when it differs from the (lower-case)
/// name SQL resolves, as for `information_schema`'s upper-case columns.
pub(crate) const DISPLAY_NAME: &str = "mindlite.display_name";

/// The name DataFusion knows the catalog by.
pub(crate) const CATALOG: &str = "mindlite";

/// One tenant's catalog at one read snapshot.
pub(crate) struct Snapshot {
    pub(crate) tenant: TenantId,
    pub(crate) txn: ReadTransaction,
    pub(crate) store: Arc<Store>,
    /// Whether `information_schema.databases` shows datasource secrets (the request's
    /// `context.show_secrets`).
    pub(crate) show_secrets: bool,
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
    Datasource(Datasource),
}

/// A row of `SHOW DATABASES` / `information_schema.databases`.
pub(crate) struct DatabaseRow {
    pub(crate) name: String,
    /// `system`, `project` or `data`.
    pub(crate) kind: &'static str,
    pub(crate) engine: Option<String>,
    /// The parameters as JSON text, secrets masked unless asked for (`{}` when none).
    pub(crate) connection_data: String,
}

impl Snapshot {
    pub(crate) fn new(store: Arc<Store>, tenant: TenantId) -> Result<Arc<Self>> {
        Self::showing_secrets(store, tenant, false)
    }

    /// A snapshot whose system tables show secrets when `show_secrets` is set.
    pub(crate) fn showing_secrets(
        store: Arc<Store>,
        tenant: TenantId,
        show_secrets: bool,
    ) -> Result<Arc<Self>> {
        Ok(Arc::new(Snapshot {
            tenant,
            txn: store.read()?,
            store,
            show_secrets,
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
            _ => match projects::get(&self.txn.open_table(PROJECTS)?, self.tenant, &lower)? {
                Some(project) => Some(Namespace::Project(project)),
                None => self.datasource(&lower)?.map(Namespace::Datasource),
            },
        })
    }

    /// One datasource by name.
    pub(crate) fn datasource(&self, name: &str) -> Result<Option<Datasource>> {
        datasources::get(&self.txn.open_table(DATASOURCES)?, self.tenant, name)
    }

    /// Every datasource, by name.
    pub(crate) fn datasources(&self) -> Result<Vec<Datasource>> {
        datasources::list(&self.txn.open_table(DATASOURCES)?, self.tenant)
    }

    /// The databases that hold stored tables: every project, then `files`.
    fn table_databases(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.projects()?.into_iter().map(|p| p.name).collect();
        names.push(FILES_DB.to_string());
        Ok(names)
    }

    pub(crate) fn tables(&self, project: &str) -> Result<Vec<TableRecord>> {
        tables::list(&self.txn.open_table(TABLES)?, self.tenant, project)
    }

    pub(crate) fn table(&self, project: &str, name: &str) -> Result<Option<TableRecord>> {
        tables::get(&self.txn.open_table(TABLES)?, self.tenant, project, name)
    }

    /// The views of a project, by name.
    pub(crate) fn views(&self, project: &str) -> Result<Vec<View>> {
        views::list(&self.txn.open_table(VIEWS)?, self.tenant, project)
    }

    /// One view by project and name.
    pub(crate) fn view(&self, project: &str, name: &str) -> Result<Option<View>> {
        views::get(&self.txn.open_table(VIEWS)?, self.tenant, project, name)
    }

    /// The knowledge bases of a project, by name.
    pub(crate) fn knowledge_bases(&self, project: &str) -> Result<Vec<KnowledgeBase>> {
        knowledge_bases::list(&self.txn.open_table(KNOWLEDGE_BASES)?, self.tenant, project)
    }

    /// One knowledge base by project and name.
    pub(crate) fn knowledge_base(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<KnowledgeBase>> {
        knowledge_bases::get(
            &self.txn.open_table(KNOWLEDGE_BASES)?,
            self.tenant,
            project,
            name,
        )
    }

    /// The agents of one project, or of all when `project` is `None`.
    pub(crate) fn agents(&self, project: Option<&str>) -> Result<Vec<Agent>> {
        agents::list(&self.txn.open_table(AGENTS)?, self.tenant, project)
    }

    /// One agent by project and name.
    pub(crate) fn agent(&self, project: &str, name: &str) -> Result<Option<Agent>> {
        agents::get_in(&self.txn.open_table(AGENTS)?, self.tenant, project, name)
    }

    /// The versions of every model of one project, or of all when `project` is `None`.
    pub(crate) fn models(&self, project: Option<&str>) -> Result<Vec<ModelVersion>> {
        models::list(&self.txn.open_table(MODELS)?, self.tenant, project)
    }

    /// One model's version, or its active version when `version` is `None`.
    pub(crate) fn model(
        &self,
        project: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<ModelVersion>> {
        models::find(
            &self.txn.open_table(MODELS)?,
            self.tenant,
            project,
            name,
            version,
        )
    }

    pub(crate) fn table_schema(&self, id: u64) -> Result<SchemaRef> {
        tables::schema(&self.txn.open_table(TABLE_SCHEMAS)?, id)
    }

    /// The rows of `SHOW DATABASES` / `information_schema.databases`: the system database,
    /// projects, `files`, then datasources.
    pub(crate) fn databases(&self, show_secrets: bool) -> Result<Vec<DatabaseRow>> {
        let row = |name: String, kind, engine: Option<&str>| DatabaseRow {
            name,
            kind,
            engine: engine.map(str::to_string),
            connection_data: "{}".to_string(),
        };
        let mut out = vec![row(SYSTEM_DB.to_string(), "system", None)];
        for project in self.projects()? {
            out.push(row(project.name, "project", Some("mindsdb")));
        }
        out.push(row(FILES_DB.to_string(), "data", Some("files")));
        for source in self.datasources()? {
            out.push(DatabaseRow {
                connection_data: source.connection_data(show_secrets),
                name: source.name,
                kind: "data",
                engine: Some(source.engine),
            });
        }
        Ok(out)
    }
}

/// The (database, table) a table reference names when the current database is `db`; `None`
/// for a reference into another catalog.
pub(crate) fn db_and_table(
    reference: &datafusion::common::TableReference,
    db: &str,
) -> Option<(String, String)> {
    use datafusion::common::TableReference;
    match reference {
        TableReference::Bare { table } => Some((db.to_string(), table.to_string())),
        TableReference::Partial { schema, table } => Some((schema.to_string(), table.to_string())),
        TableReference::Full {
            catalog,
            schema,
            table,
        } if catalog.as_ref() == CATALOG => Some((schema.to_string(), table.to_string())),
        TableReference::Full { .. } => None,
    }
}

/// The catalog DataFusion resolves `db.table` names in.
#[derive(Debug, Clone)]
pub(crate) struct TenantCatalog {
    pub(crate) snapshot: Arc<Snapshot>,
    /// How datasources named in the query are reached.
    pub(crate) net: crate::services::connectors::Net,
    /// The features plugged in: names that are no stored table or view are theirs.
    pub(crate) extensions: Extensions,
    /// Plans stored SQL (column defaults, views' queries) into DataFusion's plans.
    pub(crate) expressions: Arc<SessionState>,
    /// The views whose queries are being planned, outermost first, as (project, lower-case
    /// name): a view's query is planned in a catalog that adds it, so a view that reaches
    /// itself fails instead of recursing forever.
    pub(crate) reading: Arc<Vec<(String, String)>>,
}

/// Views may nest this deep.
const MAX_VIEW_DEPTH: usize = 32;

impl CatalogProvider for TenantCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.snapshot
            .databases(false)
            .map(|dbs| dbs.into_iter().map(|db| db.name).collect())
            .unwrap_or_default()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let snapshot = Arc::clone(&self.snapshot);
        match snapshot.namespace(name).ok()?? {
            Namespace::System => Some(Arc::new(InformationSchema {
                snapshot,
                extensions: Arc::clone(&self.extensions),
            })),
            // Each uploaded file is a stored table kept under the name `files`.
            Namespace::Files => Some(Arc::new(ProjectSchema {
                snapshot,
                project: FILES_DB.to_string(),
                catalog: self.clone(),
            })),
            Namespace::Project(project) => Some(Arc::new(ProjectSchema {
                snapshot,
                project: project.name,
                catalog: self.clone(),
            })),
            Namespace::Datasource(source) => Some(Arc::new(DatasourceSchema {
                source,
                net: self.net.clone(),
            })),
        }
    }
}

/// A datasource's tables, looked up on the remote database when a query names them, and its
/// native queries (table names that start with [`NATIVE`]; see `parse`).
#[derive(Debug)]
struct DatasourceSchema {
    source: Datasource,
    net: crate::services::connectors::Net,
}

#[async_trait]
impl SchemaProvider for DatasourceSchema {
    fn table_names(&self) -> Vec<String> {
        // Listing needs the network; SHOW TABLES FROM asks the datasource itself.
        Vec::new()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(
            crate::services::connectors::Connection::of(&self.source, &self.net)?
                .table(name)
                .await?,
        )
    }

    fn table_exist(&self, _name: &str) -> bool {
        // Only consulted when creating tables, which a datasource does through its own path.
        false
    }
}

/// A project's tables and views and the features' objects in it (see `extension`), or the
/// `files` database's tables.
#[derive(Debug)]
struct ProjectSchema {
    snapshot: Arc<Snapshot>,
    project: String,
    /// The catalog it is part of (views' queries are planned in it).
    catalog: TenantCatalog,
}

impl ProjectSchema {
    /// A view, its query planned now against this snapshot, with its project as the current
    /// database (names in it resolve where the view lives, whoever reads it).
    async fn view_table(&self, view: View) -> Result<Arc<dyn TableProvider>> {
        let key = (view.project.clone(), view.name.to_ascii_lowercase());
        if self.catalog.reading.contains(&key) {
            return Err(Error::invalid(format!(
                "View '{}' selects from itself, directly or through other views",
                view.name
            )));
        }
        if self.catalog.reading.len() >= MAX_VIEW_DEPTH {
            return Err(Error::invalid(format!(
                "View '{}' nests views more than {MAX_VIEW_DEPTH} deep",
                view.name
            )));
        }
        let mut reading = self.catalog.reading.as_ref().clone();
        reading.push(key);
        let inner = TenantCatalog {
            reading: Arc::new(reading),
            ..self.catalog.clone()
        };
        let state = super::session::planning_state(&self.catalog.expressions, inner, &view.project);
        let plan = plan_view_query(&state, &view.query).await.map_err(|e| {
            let e = Error::from(e);
            // A view read through others names the innermost one that failed.
            match e.message().starts_with("View '") {
                true => e,
                false => Error::invalid(format!(
                    "View '{}' cannot be read: {}",
                    view.name,
                    e.message()
                )),
            }
        })?;
        let plan = rename_columns(plan, &view.columns, &view.name)?;
        Ok(Arc::new(datafusion::datasource::ViewTable::new(
            plan,
            Some(view.query),
        )))
    }
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
        if let Some(query) = name.strip_prefix(NATIVE) {
            // `FROM project (SELECT …)`, as mindsdb_sdk writes a query it moves between
            // databases: the query, run in this project as a view of its own would be.
            let view = View {
                name: format!("{} (…)", self.project),
                project: self.project.clone(),
                query: query.to_string(),
                columns: Vec::new(),
                created_at: String::new(),
            };
            return Ok(Some(self.view_table(view).await?));
        }
        let Some(record) = self.snapshot.table(&self.project, name)? else {
            if let Some(view) = self.snapshot.view(&self.project, name)? {
                return Ok(Some(self.view_table(view).await?));
            }
            for extension in self.catalog.extensions.iter() {
                if let Some(table) = extension.table(&self.snapshot, &self.project, name)? {
                    return Ok(Some(table));
                }
            }
            return Ok(None);
        };
        let schema = self.snapshot.table_schema(record.id)?;
        let column = |name: &String| schema.fields().iter().position(|f| f.name() == name);
        let keys = |columns: &[String]| columns.iter().filter_map(column).collect::<Vec<_>>();
        let declared = &record.constraints;
        // The keys DataFusion knows of: GROUP BY a primary key then allows the other columns.
        let mut constraints = Vec::new();
        if !declared.primary_key.is_empty() {
            constraints.push(Constraint::PrimaryKey(keys(&declared.primary_key)));
        }
        for unique in &declared.unique {
            constraints.push(Constraint::Unique(keys(unique)));
        }
        let mut defaults = HashMap::new();
        for (name, text) in &declared.defaults {
            let expr = self
                .catalog
                .expressions
                .create_logical_expr(text, &DFSchema::empty())
                .map_err(|e| {
                    Error::invalid(format!(
                        "DEFAULT {text} of column '{name}' cannot be planned: {e}"
                    ))
                })?;
            defaults.insert(name.clone(), expr);
        }
        Ok(Some(Arc::new(StoredTable {
            snapshot: Arc::clone(&self.snapshot),
            record,
            schema,
            constraints: Constraints::new_unverified(constraints),
            defaults,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        matches!(self.snapshot.table(&self.project, name), Ok(Some(_)))
            || matches!(self.snapshot.view(&self.project, name), Ok(Some(_)))
            || self
                .catalog
                .extensions
                .iter()
                .any(|e| e.has_table(&self.snapshot, &self.project, name))
    }
}

/// A view's query planned in `state`, its unaliased expressions named as written.
async fn plan_view_query(state: &SessionState, query: &str) -> DfResult<LogicalPlan> {
    let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
    let mut statements = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, query)
        .map_err(|e| DataFusionError::Plan(e.to_string()))?;
    let (Some(mut statement), None) = (statements.pop(), statements.pop()) else {
        return Err(DataFusionError::Plan("a view holds one query".to_string()));
    };
    super::names::name_columns_as_written(&mut statement);
    state
        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
            statement,
        )))
        .await
}

/// `plan` with its output columns named `columns` (none: as they are); `view` names the view
/// in messages.
pub(crate) fn rename_columns(
    plan: LogicalPlan,
    columns: &[String],
    view: &str,
) -> Result<LogicalPlan> {
    if columns.is_empty() {
        return Ok(plan);
    }
    let fields = plan.schema().fields().len();
    if fields != columns.len() {
        return Err(Error::invalid(format!(
            "View '{view}' names {} columns but its query has {fields}",
            columns.len()
        )));
    }
    let exprs: Vec<Expr> = plan
        .schema()
        .iter()
        .zip(columns)
        .map(|(column, name)| {
            Expr::Column(datafusion::common::Column::from(column)).alias(name.as_str())
        })
        .collect();
    Ok(datafusion::logical_expr::LogicalPlanBuilder::from(plan)
        .project(exprs)?
        .build()?)
}

/// A stored table at the snapshot's version.
#[derive(Debug)]
pub(crate) struct StoredTable {
    snapshot: Arc<Snapshot>,
    pub(crate) record: TableRecord,
    schema: SchemaRef,
    /// Its primary and unique keys, as DataFusion's planner uses them.
    constraints: Constraints,
    /// Column name (lower case) → its DEFAULT, planned.
    defaults: HashMap<String, Expr>,
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
        let chunks = Arc::new(self.snapshot.txn.open_table(CHUNKS).map_err(Error::from)?);
        let order = self
            .snapshot
            .txn
            .open_table(CHUNK_ORDER)
            .map_err(Error::from)?;
        let mut numbers: Vec<u64> = tables::chunk_order(&order, self.record.id)?
            .into_iter()
            .map(|(_, chunk)| chunk)
            .collect();
        // An index lookup, when the filters allow one, picks the chunks and rows read.
        let mut rows = None;
        let lookup =
            index_scan::best_lookup(filters, &self.record.constraints.indexes, &self.schema);
        if let Some(lookup) = lookup {
            let entries = self
                .snapshot
                .txn
                .open_table(INDEX_ENTRIES)
                .map_err(Error::from)?;
            if let Some(found) =
                indexes::lookup(&entries, lookup.entries, &lookup.first, &lookup.probe)?
            {
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
    chunks: Arc<ReadOnlyTable<(u64, u64), &'static [u8]>>,
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

/// `information_schema`: `databases`, `tables` and `columns`, built from the snapshot.
#[derive(Debug)]
struct InformationSchema {
    snapshot: Arc<Snapshot>,
    /// The features plugged in, which build the system tables about their objects.
    extensions: Extensions,
}

/// A system table read at planning like the others, but of a different type, so a plan that
/// reads it is never kept for later (the plan cache keeps plans until the next commit).
#[derive(Debug)]
struct LiveTable(MemTable);

#[async_trait]
impl TableProvider for LiveTable {
    fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    fn table_type(&self) -> TableType {
        self.0.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.0.scan(state, projection, filters, limit).await
    }
}

/// A built table as a provider.
pub(crate) fn system_table(batch: RecordBatch) -> DfResult<Arc<dyn TableProvider>> {
    Ok(Arc::new(MemTable::try_new(
        batch.schema(),
        vec![vec![batch]],
    )?))
}

/// The column names to show for `schema` (display names where fields carry them).
pub(crate) fn display_names(schema: &Schema) -> Vec<String> {
    schema
        .fields()
        .iter()
        .map(|f| super::names::field_name(f))
        .collect()
}

/// Builds a system table column by column; columns are lower-case for SQL and keep their
/// upper-case display names (MindsDB's) in field metadata.
#[derive(Default)]
pub(crate) struct SystemTable {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl SystemTable {
    /// Adds a column shown as `display`, named in lower case for SQL.
    pub(crate) fn column(mut self, display: &str, array: ArrayRef) -> Self {
        let field = Field::new(
            display.to_ascii_lowercase(),
            array.data_type().clone(),
            true,
        )
        .with_metadata(HashMap::from([(
            DISPLAY_NAME.to_string(),
            display.to_string(),
        )]));
        self.fields.push(field);
        self.arrays.push(array);
        self
    }

    pub(crate) fn text<'a>(
        self,
        display: &str,
        values: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Self {
        self.column(
            display,
            Arc::new(values.into_iter().collect::<StringArray>()),
        )
    }

    pub(crate) fn number(
        self,
        display: &str,
        values: impl IntoIterator<Item = Option<u64>>,
    ) -> Self {
        self.column(
            display,
            Arc::new(values.into_iter().collect::<UInt64Array>()),
        )
    }

    /// Adds a text column from owned values.
    pub(crate) fn owned_text(self, display: &str, values: Vec<Option<String>>) -> Self {
        self.column(
            display,
            Arc::new(values.into_iter().collect::<StringArray>()),
        )
    }

    /// The table, as one batch.
    pub(crate) fn build(self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(self.fields)),
            self.arrays,
        )?)
    }
}

/// A row of `information_schema.tables`.
struct TableRow {
    schema: String,
    name: String,
    kind: &'static str,
    rows: Option<u64>,
    created_at: Option<String>,
}

/// A row of `information_schema.columns`.
struct ColumnRow {
    schema: String,
    table: String,
    column: String,
    position: u64,
    nullable: bool,
    data_type: String,
}

impl InformationSchema {
    fn build(&self, name: &str) -> Result<Option<SystemRows>> {
        let snap = &self.snapshot;
        let batch = match name {
            "databases" => {
                let dbs = snap.databases(snap.show_secrets)?;
                SystemTable::default()
                    .text("NAME", dbs.iter().map(|d| Some(d.name.as_str())))
                    .text("TYPE", dbs.iter().map(|d| Some(d.kind)))
                    .text("ENGINE", dbs.iter().map(|d| d.engine.as_deref()))
                    .text(
                        "CONNECTION_DATA",
                        dbs.iter().map(|d| Some(d.connection_data.as_str())),
                    )
                    .build()?
            }
            "tables" => {
                let mut rows: Vec<TableRow> = INFO_TABLES
                    .iter()
                    .map(|t| TableRow {
                        schema: SYSTEM_DB.to_string(),
                        name: t.to_string(),
                        kind: "SYSTEM VIEW",
                        rows: None,
                        created_at: None,
                    })
                    .collect();
                for db in snap.table_databases()? {
                    for table in snap.tables(&db)? {
                        rows.push(TableRow {
                            schema: db.clone(),
                            name: table.name,
                            kind: "BASE TABLE",
                            rows: Some(table.row_count),
                            created_at: Some(table.created_at),
                        });
                    }
                    for view in snap.views(&db)? {
                        rows.push(TableRow {
                            schema: db.clone(),
                            name: view.name,
                            kind: "VIEW",
                            rows: None,
                            created_at: Some(view.created_at),
                        });
                    }
                }
                SystemTable::default()
                    .text("TABLE_CATALOG", rows.iter().map(|_| Some("def")))
                    .text("TABLE_SCHEMA", rows.iter().map(|r| Some(r.schema.as_str())))
                    .text("TABLE_NAME", rows.iter().map(|r| Some(r.name.as_str())))
                    .text("TABLE_TYPE", rows.iter().map(|r| Some(r.kind)))
                    .number("TABLE_ROWS", rows.iter().map(|r| r.rows))
                    .text("CREATE_TIME", rows.iter().map(|r| r.created_at.as_deref()))
                    .build()?
            }
            "columns" => {
                let mut rows = Vec::new();
                for db in snap.table_databases()? {
                    for table in snap.tables(&db)? {
                        let schema = snap.table_schema(table.id)?;
                        for (i, field) in schema.fields().iter().enumerate() {
                            rows.push(ColumnRow {
                                schema: db.clone(),
                                table: table.name.clone(),
                                column: field.name().clone(),
                                position: i as u64 + 1,
                                nullable: field.is_nullable(),
                                data_type: sql_type_name(field.data_type()),
                            });
                        }
                    }
                }
                SystemTable::default()
                    .text("TABLE_CATALOG", rows.iter().map(|_| Some("def")))
                    .text("TABLE_SCHEMA", rows.iter().map(|r| Some(r.schema.as_str())))
                    .text("TABLE_NAME", rows.iter().map(|r| Some(r.table.as_str())))
                    .text("COLUMN_NAME", rows.iter().map(|r| Some(r.column.as_str())))
                    .number("ORDINAL_POSITION", rows.iter().map(|r| Some(r.position)))
                    .text("COLUMN_DEFAULT", rows.iter().map(|_| None))
                    .text(
                        "IS_NULLABLE",
                        rows.iter()
                            .map(|r| Some(if r.nullable { "YES" } else { "NO" })),
                    )
                    .text("DATA_TYPE", rows.iter().map(|r| Some(r.data_type.as_str())))
                    .build()?
            }
            _ => {
                for extension in self.extensions.iter() {
                    if let Some(rows) = extension.system_table(snap, name)? {
                        return Ok(Some(rows));
                    }
                }
                return Ok(None);
            }
        };
        Ok(Some(SystemRows { batch, live: false }))
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        INFO_TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let name = name.to_ascii_lowercase();
        let Some(SystemRows { batch, live }) = self.build(&name)? else {
            return Ok(None);
        };
        if live {
            let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
            return Ok(Some(Arc::new(LiveTable(table))));
        }
        Ok(Some(system_table(batch)?))
    }

    fn table_exist(&self, name: &str) -> bool {
        INFO_TABLES.contains(&name.to_ascii_lowercase().as_str())
    }
}
