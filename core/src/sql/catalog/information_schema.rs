//! `information_schema`: `databases`, `tables`, `columns`, `handlers` (the integrations this
//! build has) and the features' system tables, built from the snapshot when read.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::features::{Features, SystemRows};
use super::names::DISPLAY_NAME;
use super::snapshot::Snapshot;
use crate::catalog::namespace::{INFO_TABLES, LOG_TABLES, SYSTEM_DB};
use crate::catalog::tables::sql_type_name;
use crate::error::Result;
use serde_json::Value;

/// `information_schema`: `databases`, `tables` and `columns`, built from the snapshot.
#[derive(Debug)]
pub(crate) struct InformationSchema {
    pub(super) snapshot: Arc<Snapshot>,
    /// The features' tables, which build the system tables about their objects.
    pub(super) features: Features,
}

/// MindsDB's `log` database: `jobs_history`, the runs of every job of the user, as
/// `information_schema.jobs_history` has them.
#[derive(Debug)]
pub(crate) struct LogSchema(pub(crate) InformationSchema);

#[async_trait]
impl SchemaProvider for LogSchema {
    fn table_names(&self) -> Vec<String> {
        LOG_TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if !self.table_exist(name) {
            return Ok(None);
        }
        self.0.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        LOG_TABLES.contains(&name.to_ascii_lowercase().as_str())
    }
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
            "handlers" => {
                let handlers = crate::services::handlers::all();
                let args: Vec<String> = handlers
                    .iter()
                    .map(|h| Value::Object(h.connection_args()).to_string())
                    .collect();
                // bounded: the five integrations compiled into this build
                let imported = BooleanArray::from(vec![true; handlers.len()]);
                SystemTable::default()
                    .text("NAME", handlers.iter().map(|h| Some(h.name)))
                    .text("TYPE", handlers.iter().map(|h| Some(h.kind)))
                    .text("TITLE", handlers.iter().map(|h| Some(h.title)))
                    .text("DESCRIPTION", handlers.iter().map(|h| Some(h.description)))
                    .text(
                        "VERSION",
                        handlers.iter().map(|_| Some(env!("CARGO_PKG_VERSION"))),
                    )
                    .text("CONNECTION_ARGS", args.iter().map(|a| Some(a.as_str())))
                    .column("IMPORT_SUCCESS", Arc::new(imported))
                    .text("IMPORT_ERROR", handlers.iter().map(|_| None))
                    .build()?
            }
            _ => {
                for feature in self.features.iter() {
                    if let Some(rows) = feature.system_table(snap, name)? {
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
