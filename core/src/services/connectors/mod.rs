//! Connectors: how the engine reaches a datasource's data — a SQL server (`remote`): PostgreSQL
//! (`postgres`, whole sub-plans sent by `remote_plan`) or MySQL/MariaDB (`mysql`), with
//! filters, projections and limits pushed down by `pushdown`, their tables and native queries
//! as DataFusion tables in `table` — or a local directory of CSV and Parquet files
//! (`directory`). Every connection goes through the egress policy (`Net`). The datasource
//! records themselves are `datasources`'s.

pub(crate) mod dialect;
pub(crate) mod directory;
mod dsn;
pub(crate) mod mysql;
mod net;
pub(crate) mod postgres;
pub(crate) mod pushdown;
pub(crate) mod remote;
pub(crate) mod remote_plan;
pub(crate) mod table;

pub(crate) use self::net::Net;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use serde_json::{Map, Value};

use self::remote::Remote;
use crate::catalog::datasources::Datasource;
use crate::config::Edition;
use crate::error::{Error, ErrorKind, Result};

/// A datasource's engine with its checked settings.
pub(crate) enum Connection {
    /// A SQL server: PostgreSQL, MySQL or MariaDB.
    Server(Remote),
    Directory(directory::Directory),
}

impl Connection {
    /// How `source` is reached, through `net`.
    pub(crate) fn of(source: &Datasource, net: &Net) -> Result<Connection> {
        match source.engine.as_str() {
            directory::ENGINE => Ok(Connection::Directory(
                directory::Directory::from_parameters(&source.parameters)?,
            )),
            mysql::ENGINE | mysql::MARIADB => Ok(Connection::Server(Remote::MySql(
                mysql::Settings::from_parameters(&source.parameters, net)?,
            ))),
            _ => Ok(Connection::Server(Remote::Postgres(
                postgres::Settings::from_parameters(&source.parameters, net)?,
            ))),
        }
    }

    /// The names of the tables it shows, sorted.
    pub(crate) async fn table_names(&self) -> Result<Vec<String>> {
        match self {
            Connection::Server(Remote::Postgres(settings)) => postgres::table_names(settings).await,
            Connection::Server(Remote::MySql(settings)) => mysql::table_names(settings).await,
            Connection::Directory(dir) => Ok(dir.tables()?.into_iter().map(|(n, _)| n).collect()),
        }
    }

    /// The table `name`, or a native query's result when `name` starts with
    /// [`table::NATIVE`]; `None` when there is no such table.
    pub(crate) async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        match (self, name.strip_prefix(table::NATIVE)) {
            (Connection::Server(remote), Some(sql)) => Ok(Some(Arc::new(
                table::NativeQuery::prepare(remote.clone(), sql).await?,
            ))),
            (Connection::Server(remote), None) => {
                Ok(table::RemoteTable::open(remote.clone(), name)
                    .await?
                    .map(|t| Arc::new(t) as Arc<dyn TableProvider>))
            }
            (Connection::Directory(_), Some(_)) => Err(Error::invalid(
                "A 'files' datasource runs no native queries; select from its tables",
            )),
            (Connection::Directory(dir), None) => dir.table(name).await,
        }
    }

    /// Why `source`'s table `name` cannot be read, in the datasource's own words when it has
    /// any: PostgreSQL's error for reading it (`relation "public.x" does not exist`).
    pub(crate) async fn missing_table(&self, source: &str, name: &str) -> Error {
        let own = match self {
            Connection::Server(Remote::Postgres(settings)) => {
                postgres::read_error(settings, name).await
            }
            Connection::Server(Remote::MySql(settings)) => mysql::read_error(settings, name).await,
            Connection::Directory(_) => None,
        };
        own.unwrap_or_else(|| {
            Error::not_found(format!("Table '{name}' not found in datasource '{source}'"))
        })
    }

    /// The columns of the table `name`, for listings (agents' prompts).
    pub(crate) async fn table_schema(&self, name: &str) -> Result<Option<SchemaRef>> {
        Ok(self.table(name).await?.map(|t| t.schema()))
    }

    /// The server a write to `table` goes to; a `files` datasource is read-only.
    pub(crate) fn writable(&self, table: &str) -> Result<&Remote> {
        match self {
            Connection::Server(remote) => Ok(remote),
            Connection::Directory(_) => Err(Error::invalid(format!(
                "Cannot write '{table}': a 'files' datasource is read-only"
            ))),
        }
    }
}

/// Checks `engine` and `parameters` and connects once, so a datasource that cannot work is
/// refused at CREATE / ALTER with the reason. Returns the engine's canonical name and the
/// parameters to store.
pub(crate) async fn check(
    engine: &str,
    parameters: Map<String, Value>,
    edition: Edition,
    net: &Net,
) -> Result<(String, Map<String, Value>)> {
    let engine = engine.to_ascii_lowercase();
    match engine.as_str() {
        // The server's files are not its users' to read.
        directory::ENGINE if edition == Edition::Hosted => Err(Error::new(
            ErrorKind::Forbidden,
            "ENGINE 'files' reads the server's own directories and is not offered in the hosted edition",
        )),
        directory::ENGINE => {
            let stored = directory::Directory::from_parameters(&parameters)?.checked_parameters()?;
            Ok((directory::ENGINE.to_string(), stored))
        }
        postgres::ENGINE | "postgresql" => {
            let settings = postgres::Settings::from_parameters(&parameters, net)?;
            // A socket path reaches the server machine's own databases with its OS user.
            if settings.host.starts_with('/') {
                net.egress.check_unix_socket("PostgreSQL ('host' a path)")?;
            }
            let client = settings.connect().await?;
            // The schema must exist, or every table would be "not found" later.
            let found = client
                .query_opt(
                    "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                    &[&settings.schema],
                )
                .await
                .map_err(|e| postgres::query_error(&e))?;
            if found.is_none() {
                return Err(Error::invalid(format!(
                    "PostgreSQL database '{}' at {}:{} has no schema '{}'",
                    settings.database, settings.host, settings.port, settings.schema
                )));
            }
            Ok((postgres::ENGINE.to_string(), parameters))
        }
        mysql::ENGINE | mysql::MARIADB => {
            let settings = mysql::Settings::from_parameters(&parameters, net)?;
            // Logging in checks the host, the account and the database at once.
            settings.connect().await?;
            Ok((engine, parameters))
        }
        "mindsdb" => Err(Error::invalid(
            "ENGINE 'mindsdb' makes a project, which takes no PARAMETERS",
        )),
        other => Err(Error::invalid(format!(
            "Unknown database engine '{other}'; this build has 'postgres', 'mysql', 'mariadb', 'files' (a local directory) and 'mindsdb' (a project)"
        ))),
    }
}
