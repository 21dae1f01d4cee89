//! Databases, their tables and projects' views through the facade, as MindsDB's REST routes
//! read and change them (`/api/databases[/{db}[/tables[/{t}]]]`, `/api/projects/{p}/views`,
//! `/api/tree`), and the integrations a database or model can name (`/api/handlers`).
//!
//! What a route changes with SQL (a table from a SELECT, a view) runs as the one statement a
//! user could send to `/api/sql/query` instead, built here with the names quoted, so it meets
//! the same deadline, admission, quotas and rules; nothing here bypasses them.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::catalog::datasources::{self, Datasource};
use crate::catalog::namespace::{FILES_DB, SYSTEM_DB};
use crate::catalog::projects::{self, Project};
use crate::catalog::views::{self, View};
use crate::error::{Error, Result, Subject};
use crate::sql::catalog::features::ProjectObject;
use crate::sql::{Outcome, QueryRequest};

use super::{require_project, Engine};

/// A database as MindsDB's `/api/databases` and `/api/tree` show it: a system database, a
/// project, or a datasource (MindsDB's "data" integration).
#[derive(Debug, Clone, PartialEq)]
pub struct Database {
    /// Its name (lower case).
    pub name: String,
    /// `system`, `project` or `data`.
    pub kind: &'static str,
    /// The project's or datasource's id; `None` for a system database.
    pub id: Option<u64>,
    /// The datasource's engine (`postgres`, `files`); `None` for the others.
    pub engine: Option<String>,
    /// Whether it can be deleted: not a system database, not the default project.
    pub deletable: bool,
    /// A datasource's parameters, secrets masked.
    pub connection_data: Option<Map<String, Value>>,
}

impl Database {
    /// The record MindsDB's `/api/databases` routes answer.
    pub fn to_wire_json(&self) -> Value {
        let mut record = json!({
            "name": self.name,
            "type": self.kind,
            "id": self.id,
            "engine": self.engine,
            "visible": true,
            "deletable": self.deletable,
        });
        if let Some(data) = &self.connection_data {
            record["class_type"] = json!("sql");
            record["permanent"] = json!(!self.deletable);
            record["connection_data"] = Value::Object(data.clone());
        }
        record
    }

    /// The node MindsDB's `/api/tree` lists for it.
    pub fn tree_json(&self) -> Value {
        json!({
            "name": self.name,
            "class": "db",
            "type": self.kind,
            "engine": self.engine,
            "deletable": self.deletable,
            "visible": true,
        })
    }

    fn project(project: &Project, default_project: &str) -> Database {
        Database {
            name: project.name.clone(),
            kind: "project",
            id: Some(project.id),
            engine: None,
            deletable: !project.name.eq_ignore_ascii_case(default_project),
            connection_data: None,
        }
    }

    fn datasource(source: &Datasource) -> Database {
        let info = source.info();
        Database {
            name: info.name,
            kind: "data",
            id: Some(source.id),
            engine: Some(info.engine),
            deletable: true,
            connection_data: Some(info.connection_data),
        }
    }

    fn system(name: &str, engine: Option<&str>) -> Database {
        Database {
            name: name.to_string(),
            kind: if engine.is_some() { "data" } else { "system" },
            id: None,
            engine: engine.map(str::to_string),
            deletable: false,
            connection_data: engine.map(|_| Map::new()),
        }
    }
}

/// One name a database lists among its tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseTable {
    /// Its name.
    pub name: String,
    /// What it is, as `SHOW FULL TABLES` says it: `BASE TABLE`, `VIEW`, `MODEL`, `AGENT`,
    /// `KNOWLEDGE BASE`, `SYSTEM VIEW`.
    pub kind: String,
    /// A model's engine.
    pub engine: Option<String>,
    /// Whether it is one of a project's own objects, which the tree offers to delete (never
    /// the `models` listing, nor a datasource's or the system database's tables).
    pub deletable: bool,
}

/// One column of a table, as [`Engine::table_columns`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// Its name.
    pub name: String,
    /// Its SQL type, as `information_schema.columns` names it (`BIGINT`, `VARCHAR`, …).
    pub data_type: String,
}

impl DatabaseTable {
    /// The record MindsDB's `/api/databases/{db}/tables` routes answer: `{"name", "type"}`,
    /// the type `data` for a stored table and the kind in lower case otherwise.
    pub fn to_wire_json(&self) -> Value {
        let kind = match self.kind.as_str() {
            "BASE TABLE" => "data".to_string(),
            other => other.to_ascii_lowercase(),
        };
        json!({"name": self.name, "type": kind})
    }

    /// The node MindsDB's `/api/tree/{db}` lists for it.
    pub fn tree_json(&self) -> Value {
        let kind = match self.kind.as_str() {
            "BASE TABLE" => "table".to_string(),
            "SYSTEM VIEW" => "system view".to_string(),
            other => other.to_ascii_lowercase().replace(' ', "_"),
        };
        json!({
            "name": self.name,
            "schema": null,
            "class": "table",
            "type": kind,
            "engine": self.engine,
            "deletable": self.deletable,
        })
    }

    fn of(object: ProjectObject, in_project: bool) -> DatabaseTable {
        let deletable = in_project
            && matches!(
                object.kind,
                "BASE TABLE" | "VIEW" | "MODEL" | "AGENT" | "KNOWLEDGE BASE"
            )
            && !object.name.eq_ignore_ascii_case("models");
        DatabaseTable {
            name: object.name,
            kind: object.kind.to_string(),
            engine: object.engine,
            deletable,
        }
    }
}

impl Engine {
    /// Every database: the system database, the projects, the uploaded files and the
    /// datasources, in that order.
    pub fn list_databases(&self) -> Result<Vec<Database>> {
        let txn = self.inner.services.store.read()?;
        let default = self.inner.sql.default_project();
        let mut out = vec![
            Database::system(SYSTEM_DB, None),
            Database::system(crate::catalog::namespace::LOG_DB, None),
        ];
        for project in projects::all(&txn, self.tenant)? {
            out.push(Database::project(&project, default));
        }
        out.push(Database::system(FILES_DB, Some("files")));
        for source in datasources::all(&txn, self.tenant)? {
            out.push(Database::datasource(&source));
        }
        Ok(out)
    }

    /// One database by name (case-insensitive); NotFound naming it.
    pub fn get_database(&self, name: &str) -> Result<Database> {
        let found = self.list_databases()?;
        found
            .into_iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| database_missing(name))
    }

    /// Creates datasource `name` of `engine` with `parameters`, after connecting to it once
    /// (a datasource that cannot work is refused here, whatever MindsDB's `check_connection`
    /// said); Conflict when any database has the name.
    pub async fn create_database(
        &self,
        name: &str,
        engine: &str,
        parameters: Map<String, Value>,
    ) -> Result<Database> {
        if self.get_database(name).is_ok() {
            return Err(Error::conflict(format!(
                "Database with name {} already exists.",
                name.to_ascii_lowercase()
            ))
            .about(Subject::Database));
        }
        let created = self
            .add_datasource(name.to_string(), engine.to_string(), None, parameters)
            .await?
            .ok_or_else(|| database_missing(name))?;
        Ok(Database::datasource(&created))
    }

    /// Replaces a datasource's parameters (a secret sent back masked keeps its value) after
    /// a connection check.
    pub async fn update_database(
        &self,
        name: &str,
        parameters: Map<String, Value>,
    ) -> Result<Database> {
        let database = self.get_database(name)?;
        if database.kind != "data" || database.id.is_none() {
            return Err(Error::invalid(format!(
                "Database '{}' is a {}: only a datasource's parameters can be changed",
                database.name,
                if database.kind == "project" {
                    "project"
                } else {
                    "system database"
                },
            )));
        }
        self.update_datasource(name, json!({"connection_data": parameters}))
            .await?;
        self.get_database(name)
    }

    /// Deletes a project (with everything in it) or a datasource; the system databases, the
    /// uploaded files and the default project cannot be deleted.
    pub async fn delete_database(&self, name: &str) -> Result<()> {
        let database = self.get_database(name)?;
        if !database.deletable {
            return Err(Error::invalid(format!(
                "Cannot delete database {}: it is a system database or the default project",
                database.name
            )));
        }
        self.inner
            .sql
            .drop_database(self.tenant, &database.name, false)
            .await
    }

    /// Whether a datasource of `engine` with `parameters` would work: connects once and
    /// stores nothing.
    pub async fn check_database(&self, engine: &str, parameters: Map<String, Value>) -> Result<()> {
        let edition = self.inner.services.config.edition;
        crate::services::connectors::check(engine, parameters, edition, &self.inner.services.net)
            .await
            .map(|_| ())
    }

    /// What database `db` lists as its tables (a project's tables, views, models, agents and
    /// knowledge bases; a datasource's tables), by name.
    pub async fn list_database_tables(&self, db: &str) -> Result<Vec<DatabaseTable>> {
        let database = self.get_database(db)?;
        let in_project = database.kind == "project";
        let (inner, tenant, name) = (Arc::clone(&self.inner), self.tenant, database.name);
        let (control, _ticket) = self.statement_control()?;
        let objects = crate::memory::spawn_on(&self.inner.handle, async move {
            control
                .run(async { inner.sql.database_objects(tenant, &name).await })
                .await
        })
        .await
        .map_err(|e| Error::internal(format!("table listing failed: {e}")))??;
        Ok(objects
            .into_iter()
            .map(|o| DatabaseTable::of(o, in_project))
            .collect())
    }

    /// One table of `db` by name; NotFound naming it.
    pub async fn get_database_table(&self, db: &str, name: &str) -> Result<DatabaseTable> {
        let tables = self.list_database_tables(db).await?;
        tables
            .into_iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| table_missing(name))
    }

    /// The columns of `table` in database `db`, by name and SQL type, as `SELECT *` of it
    /// gives them: a stored table's, a view's, a datasource's table's (asked of the datasource)
    /// or a knowledge base's. Nothing is read; an unknown database or table is the error the
    /// query would be.
    pub async fn table_columns(&self, db: &str, table: &str) -> Result<Vec<TableColumn>> {
        let quoted = |s: &str| format!("`{}`", s.replace('`', "``"));
        let request = QueryRequest {
            query: format!("SELECT * FROM {}.{} LIMIT 0", quoted(db), quoted(table)),
            one_statement: true,
            autocommit: true,
            ..Default::default()
        };
        match self.query(request).await.outcome {
            Outcome::Table(result) => {
                let schema = result.stream.schema();
                Ok(result
                    .column_names
                    .into_iter()
                    .zip(schema.fields().iter())
                    .map(|(name, field)| TableColumn {
                        name,
                        data_type: crate::catalog::tables::sql_type_name(field.data_type()),
                    })
                    .collect())
            }
            Outcome::Error(error) => Err(error),
            Outcome::Ok { .. } => Err(Error::internal(format!(
                "SELECT * FROM {db}.{table} gave no rows to describe"
            ))),
        }
    }

    /// Makes table `name` of `db` from the rows of `select` (a datasource's or a project's
    /// stored table), replacing one of that name when `replace`; Conflict when it exists
    /// and `replace` is false.
    pub async fn create_database_table(
        &self,
        db: &str,
        name: &str,
        select: &str,
        replace: bool,
    ) -> Result<DatabaseTable> {
        let database = self.get_database(db)?;
        if database.kind == "system" {
            return Err(Error::invalid(format!(
                "Database '{}' is a system database: it takes no tables",
                database.name
            )));
        }
        let existing = self.list_database_tables(&database.name).await?;
        if let Some(taken) = existing.iter().find(|t| t.name.eq_ignore_ascii_case(name)) {
            if !replace || taken.kind != "BASE TABLE" {
                return Err(Error::conflict(format!(
                    "Table with name {} already exists",
                    taken.name
                ))
                .about(Subject::Table));
            }
        }
        let verb = if replace {
            "CREATE OR REPLACE TABLE"
        } else {
            "CREATE TABLE"
        };
        let target = qualified(&database.name, name);
        self.run_one(format!("{verb} {target} AS {select}")).await?;
        self.get_database_table(&database.name, name).await
    }

    /// Drops table `name` of `db`: a project's stored table or a datasource's table. A
    /// project's other objects have their own routes (models, views, agents, knowledge bases).
    pub async fn drop_database_table(&self, db: &str, name: &str) -> Result<()> {
        let table = self.get_database_table(db, name).await?;
        let database = self.get_database(db)?;
        let listing = database.kind == "project" && !table.deletable;
        if table.kind != "BASE TABLE" || listing {
            return Err(Error::invalid(format!(
                "'{}' in database '{db}' is a {}, not a table: delete it through its own route",
                table.name,
                table.kind.to_ascii_lowercase()
            )));
        }
        let target = qualified(&database.name, &table.name);
        self.run_one(format!("DROP TABLE {target}")).await
    }

    /// The views of `project`, by name.
    pub fn list_views(&self, project: &str) -> Result<Vec<View>> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        views::in_project(&txn, self.tenant, project)
    }

    /// One view of `project` by name; NotFound naming it.
    pub fn get_view(&self, project: &str, name: &str) -> Result<View> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        views::named(&txn, self.tenant, project, name)?.ok_or_else(|| {
            Error::not_found(format!("View with name {name} does not exist")).about(Subject::View)
        })
    }

    /// Stores view `name` of `project` over `query` (planned now, so one that does not plan
    /// is refused); `replace` changes the query of an existing one. Conflict when it exists
    /// and `replace` is false.
    pub async fn create_view(
        &self,
        project: &str,
        name: &str,
        query: &str,
        replace: bool,
    ) -> Result<View> {
        self.list_views(project)?;
        if !replace && self.get_view(project, name).is_ok() {
            return Err(
                Error::conflict(format!("View with name {name} already exists."))
                    .about(Subject::View),
            );
        }
        let verb = if replace {
            "CREATE OR REPLACE VIEW"
        } else {
            "CREATE VIEW"
        };
        let target = qualified(project, name);
        self.run_one(format!("{verb} {target} AS {query}")).await?;
        self.get_view(project, name)
    }

    /// Deletes view `name` of `project`.
    pub async fn delete_view(&self, project: &str, name: &str) -> Result<()> {
        let view = self.get_view(project, name)?;
        let tenant = self.tenant;
        self.inner
            .services
            .store
            .write(move |txn| views::drop_view(txn, tenant, &view.project, &view.name, false))
            .await
    }

    /// The integrations this build has, as MindsDB's `GET /api/handlers` lists them
    /// (`{"name", "type", "title", "description", "version", "connection_args", "import"}`).
    pub fn list_handlers(&self) -> Vec<Value> {
        let all = crate::services::handlers::all();
        all.iter().map(|h| h.to_wire_json()).collect()
    }

    /// One integration's record by name; NotFound naming it.
    pub fn get_handler(&self, name: &str) -> Result<Value> {
        crate::services::handlers::named(name)
            .map(|h| h.to_wire_json())
            .ok_or_else(|| Error::not_found(format!("Handler '{name}' not found")))
    }

    /// Runs `sql` as MindsDB's HTTP API runs a request: one statement, committed on its own.
    async fn run_one(&self, sql: String) -> Result<()> {
        let request = QueryRequest {
            one_statement: true,
            autocommit: true,
            ..QueryRequest::new(sql)
        };
        self.query(request).await.collect().await.map(|_| ())
    }
}

/// `db`.`name` with both parts quoted, so any name is read as a name.
fn qualified(db: &str, name: &str) -> String {
    let quote = |part: &str| format!("`{}`", part.replace('`', "``"));
    format!("{}.{}", quote(db), quote(name))
}

fn database_missing(name: &str) -> Error {
    Error::not_found(format!("Database with name {name} does not exist.")).about(Subject::Database)
}

fn table_missing(name: &str) -> Error {
    Error::not_found(format!("Table with name {name} not found")).about(Subject::Table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_name_cannot_end_its_quotes() {
        assert_eq!(qualified("p", "a`b"), "`p`.`a``b`");
        assert_eq!(qualified("P", "x; drop"), "`P`.`x; drop`");
    }

    #[test]
    fn tables_are_shown_in_the_shapes_of_each_route() {
        let model = DatabaseTable::of(
            ProjectObject {
                name: "m".into(),
                kind: "MODEL",
                engine: Some("builtin".into()),
            },
            true,
        );
        assert_eq!(model.to_wire_json(), json!({"name": "m", "type": "model"}));
        assert_eq!(model.tree_json()["type"], "model");
        assert_eq!(model.tree_json()["engine"], "builtin");
        let kb = DatabaseTable::of(ProjectObject::new("kb", "KNOWLEDGE BASE"), true);
        assert_eq!(kb.to_wire_json()["type"], "knowledge base");
        assert_eq!(kb.tree_json()["type"], "knowledge_base");
        let listing = DatabaseTable::of(ProjectObject::new("models", "BASE TABLE"), true);
        assert_eq!(listing.to_wire_json()["type"], "data");
        assert!(!listing.deletable);
        let remote = DatabaseTable::of(ProjectObject::new("t", "BASE TABLE"), false);
        assert_eq!(remote.tree_json()["type"], "table");
        assert!(!remote.deletable);
    }
}
