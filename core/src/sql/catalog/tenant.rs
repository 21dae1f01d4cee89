//! DataFusion's catalog of one tenant at one snapshot ([`TenantCatalog`]) and its schemas:
//! a project's (stored tables, views planned when read, the features' objects), a
//! datasource's (its tables through the connector) and `information_schema`; and the catalog
//! list a session resolves names in.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::common::{Constraint, Constraints, DFSchema};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};

use super::features::Features;
use super::information_schema::{InformationSchema, LogSchema};
use super::snapshot::{Namespace, Snapshot, CATALOG};
use super::stored_table::StoredTable;
use crate::catalog::datasources::Datasource;
use crate::catalog::namespace::{sheet_table, sheets_db, FILES_DB, MAX_SHEETS};
use crate::catalog::tables::ReadTables;
use crate::catalog::views::View;
use crate::error::{Error, Result};
use crate::services::connectors::table::NATIVE;
/// The catalog DataFusion resolves `db.table` names in.
#[derive(Debug, Clone)]
pub(crate) struct TenantCatalog {
    pub(crate) snapshot: Arc<Snapshot>,
    /// How datasources named in the query are reached.
    pub(crate) net: crate::services::connectors::Net,
    /// The features' tables: names that are no stored table or view are theirs.
    pub(crate) features: Features,
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
                features: Arc::clone(&self.features),
            })),
            Namespace::Log => Some(Arc::new(LogSchema(InformationSchema {
                snapshot,
                features: Arc::clone(&self.features),
            }))),
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
        // A table it lacks is explained, in its own words, when planning fails (see
        // `SqlRunner::explain_plan_error`): a CREATE TABLE's new name is no error.
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

/// A PostgreSQL datasource as a catalog of its schemas, for three-part names
/// (`pg.schema.table`): each schema reads as the datasource does, with that schema.
#[derive(Debug)]
struct DatasourceSchemas {
    source: Datasource,
    net: crate::services::connectors::Net,
}

impl CatalogProvider for DatasourceSchemas {
    fn schema_names(&self) -> Vec<String> {
        // Listing needs the network; the datasource lists its schemas itself.
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let mut source = self.source.clone();
        source
            .parameters
            .insert("schema".into(), serde_json::Value::String(name.to_string()));
        Some(Arc::new(DatasourceSchema {
            source,
            net: self.net.clone(),
        }))
    }
}

/// A project's tables and views and the features' objects in it (see `features`), or the
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
        let state = planning_state(&self.catalog.expressions, inner, &view.project);
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
            for feature in self.catalog.features.iter() {
                if let Some(table) = feature.table(&self.snapshot, &self.project, name)? {
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
                .features
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

/// A state of its own for planning stored SQL (a view's query) in `catalog`, with `db` as the
/// current database, while the state of the statement that reads it is busy.
pub(crate) fn planning_state(
    base: &SessionState,
    catalog: TenantCatalog,
    db: &str,
) -> SessionState {
    let mut state = base.clone();
    state.config_mut().options_mut().catalog.default_schema = db.to_ascii_lowercase();
    state.register_catalog_list(Arc::new(Catalogs(Some(Arc::new(catalog)))));
    state
}

/// The one catalog a request sees (none while a state is idle).
#[derive(Debug)]
pub(crate) struct Catalogs(pub(crate) Option<Arc<TenantCatalog>>);

impl CatalogProviderList for Catalogs {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        // Nothing in the engine registers catalogs; names resolve in the tenant's snapshot.
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        match self.0 {
            Some(_) => vec![CATALOG.to_string()],
            None => Vec::new(),
        }
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let catalog = self.0.as_ref()?;
        if name == CATALOG {
            return Some(Arc::clone(catalog) as _);
        }
        // `pg.schema.table`: a PostgreSQL datasource's other schemas, as MindsDB reads
        // three-part names.
        match catalog.snapshot.namespace(name).ok()?? {
            // `files.book.sheet`: a sheet of an uploaded workbook of several.
            Namespace::Files => Some(Arc::new(Workbooks {
                snapshot: Arc::clone(&catalog.snapshot),
            })),
            Namespace::Datasource(source)
                if source.engine == crate::services::connectors::postgres::ENGINE =>
            {
                Some(Arc::new(DatasourceSchemas {
                    source,
                    net: catalog.net.clone(),
                }))
            }
            _ => None,
        }
    }
}

/// The uploaded workbooks of several sheets as a catalog: `files.book.sheet` is a schema per
/// workbook and a table per sheet.
#[derive(Debug)]
struct Workbooks {
    snapshot: Arc<Snapshot>,
}

impl CatalogProvider for Workbooks {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(Workbook {
            snapshot: Arc::clone(&self.snapshot),
            file: name.to_string(),
        }))
    }
}

/// One uploaded workbook's sheets, by name.
#[derive(Debug)]
struct Workbook {
    snapshot: Arc<Snapshot>,
    file: String,
}

impl Workbook {
    /// The sheets' names, in the workbook's order, as the file's own table lists them; `None`
    /// when the file holds one sheet or none (an error names which, when `why`).
    fn sheets(&self, why: bool) -> Result<Option<Vec<String>>> {
        let Some(listing) = self.snapshot.table(FILES_DB, &self.file)? else {
            return match why {
                true => Err(Error::not_found(format!(
                    "Table '{}' not found in database: {FILES_DB}",
                    self.file
                ))),
                false => Ok(None),
            };
        };
        if self.snapshot.tables(&sheets_db(&self.file))?.is_empty() {
            return match why {
                true => Err(Error::not_found(format!(
                    "File '{}' is not a workbook of several sheets: read it as files.{}",
                    self.file, self.file
                ))),
                false => Ok(None),
            };
        }
        let txn = &self.snapshot.txn;
        let mut names = Vec::new();
        // The listing could have been written to since: only a workbook's worth is read.
        for (_, chunk) in txn.chunk_order_of(listing.id)? {
            if names.len() >= MAX_SHEETS {
                break;
            }
            let batch = txn.chunk(listing.id, chunk)?;
            let column = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
            names.extend(
                column
                    .as_string::<i32>()
                    .iter()
                    .map(|n| n.unwrap_or_default().to_string()),
            );
        }
        names.truncate(MAX_SHEETS);
        Ok(Some(names))
    }
}

#[async_trait]
impl SchemaProvider for Workbook {
    fn table_names(&self) -> Vec<String> {
        self.sheets(false).ok().flatten().unwrap_or_default()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(sheets) = self.sheets(true)? else {
            return Ok(None);
        };
        // Names match whatever their case, as unquoted SQL names are lower-cased.
        let wanted = name.to_lowercase();
        let Some(position) = sheets.iter().position(|s| s.to_lowercase() == wanted) else {
            return Err(Error::not_found(format!(
                "Sheet '{name}' not found in file '{}'; its sheets: {}",
                self.file,
                sheets.join(", ")
            ))
            .into());
        };
        let db = sheets_db(&self.file);
        let record = self
            .snapshot
            .table(&db, &sheet_table(position + 1))?
            .ok_or_else(|| {
                Error::invalid(format!(
                    "Sheet '{}' of file '{}' is empty: it holds no value",
                    sheets[position], self.file
                ))
            })?;
        let schema = self.snapshot.table_schema(record.id)?;
        Ok(Some(Arc::new(StoredTable::plain(
            Arc::clone(&self.snapshot),
            record,
            schema,
        ))))
    }

    fn table_exist(&self, name: &str) -> bool {
        let wanted = name.to_lowercase();
        self.table_names()
            .iter()
            .any(|s| s.to_lowercase() == wanted)
    }
}
