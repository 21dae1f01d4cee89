//! One tenant's catalog at one read snapshot: its databases (projects, datasources,
//! `information_schema`, `files`) and their tables, views and objects, read in one read
//! transaction. One snapshot per statement keeps every table of a query consistent; DataFusion's
//! providers over it are `tenant` (the catalog and its schemas), `stored_table` and
//! `information_schema`.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use redb::ReadTransaction;

use crate::catalog::agents::{self, Agent};
use crate::catalog::datasources::{self, Datasource};
use crate::catalog::knowledge_bases::{self, KnowledgeBase};
use crate::catalog::models::{self, ModelVersion};
use crate::catalog::namespace::{FILES_DB, LOG_DB, SYSTEM_DB};
use crate::catalog::projects::{self, Project};
use crate::catalog::tables::ReadTables;
use crate::catalog::tables::{self, TableRecord};
use crate::catalog::views::{self, View};
use crate::error::Result;
use crate::store::Store;
use crate::tenant::TenantId;

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
    /// MindsDB's `log` database.
    Log,
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
        projects::all(&self.txn, self.tenant)
    }

    pub(crate) fn namespace(&self, name: &str) -> Result<Option<Namespace>> {
        let lower = name.to_ascii_lowercase();
        Ok(match lower.as_str() {
            SYSTEM_DB => Some(Namespace::System),
            LOG_DB => Some(Namespace::Log),
            FILES_DB => Some(Namespace::Files),
            _ => match projects::named(&self.txn, self.tenant, &lower)? {
                Some(project) => Some(Namespace::Project(project)),
                None => self.datasource(&lower)?.map(Namespace::Datasource),
            },
        })
    }

    /// One datasource by name.
    pub(crate) fn datasource(&self, name: &str) -> Result<Option<Datasource>> {
        datasources::named(&self.txn, self.tenant, name)
    }

    /// Every datasource, by name.
    pub(crate) fn datasources(&self) -> Result<Vec<Datasource>> {
        datasources::all(&self.txn, self.tenant)
    }

    /// The databases that hold stored tables: every project, then `files`.
    pub(super) fn table_databases(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.projects()?.into_iter().map(|p| p.name).collect();
        names.push(FILES_DB.to_string());
        Ok(names)
    }

    pub(crate) fn tables(&self, project: &str) -> Result<Vec<TableRecord>> {
        tables::records(&self.txn, self.tenant, project)
    }

    pub(crate) fn table(&self, project: &str, name: &str) -> Result<Option<TableRecord>> {
        tables::record(&self.txn, self.tenant, project, name)
    }

    /// The views of a project, by name.
    pub(crate) fn views(&self, project: &str) -> Result<Vec<View>> {
        views::in_project(&self.txn, self.tenant, project)
    }

    /// One view by project and name.
    pub(crate) fn view(&self, project: &str, name: &str) -> Result<Option<View>> {
        views::named(&self.txn, self.tenant, project, name)
    }

    /// The knowledge bases of a project, by name.
    pub(crate) fn knowledge_bases(&self, project: &str) -> Result<Vec<KnowledgeBase>> {
        knowledge_bases::in_project(&self.txn, self.tenant, project)
    }

    /// One knowledge base by project and name.
    pub(crate) fn knowledge_base(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<KnowledgeBase>> {
        knowledge_bases::named(&self.txn, self.tenant, project, name)
    }

    /// The agents of one project, or of all when `project` is `None`.
    pub(crate) fn agents(&self, project: Option<&str>) -> Result<Vec<Agent>> {
        agents::all(&self.txn, self.tenant, project)
    }

    /// The tenant's ML engines, by name.
    pub(crate) fn ml_engines(&self) -> Result<Vec<crate::catalog::ml_engines::MlEngine>> {
        crate::catalog::ml_engines::all(&self.txn, self.tenant)
    }

    /// The tenant's jobs (of `project` when given).
    pub(crate) fn jobs(&self, project: Option<&str>) -> Result<Vec<crate::catalog::jobs::Job>> {
        crate::catalog::jobs::all(&self.txn, self.tenant, project)
    }

    /// The latest `limit` runs of the tenant's jobs, oldest first.
    pub(crate) fn job_history(&self, limit: usize) -> Result<Vec<crate::catalog::jobs::JobRun>> {
        crate::catalog::jobs::history(&self.txn, self.tenant, None, limit)
    }

    /// One agent by project and name.
    pub(crate) fn agent(&self, project: &str, name: &str) -> Result<Option<Agent>> {
        agents::named(&self.txn, self.tenant, project, name)
    }

    /// The versions of every model of one project, or of all when `project` is `None`.
    pub(crate) fn models(&self, project: Option<&str>) -> Result<Vec<ModelVersion>> {
        models::all(&self.txn, self.tenant, project)
    }

    /// One model's version, or its active version when `version` is `None`.
    pub(crate) fn model(
        &self,
        project: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<ModelVersion>> {
        models::named(&self.txn, self.tenant, project, name, version)
    }

    pub(crate) fn table_schema(&self, id: u64) -> Result<SchemaRef> {
        self.txn.schema_of(id)
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
        let mut out = vec![
            row(SYSTEM_DB.to_string(), "system", None),
            row(LOG_DB.to_string(), "system", None),
        ];
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
