//! The tables a feature adds to the catalog: its objects as tables where a name is no stored
//! table or view (a model, a knowledge base), and the `information_schema` tables it shows.
//! The runner hands each feature to the catalog as this trait (see `crate::sql::Extension`,
//! which extends it), so the catalog knows no feature and no runner.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;

use super::snapshot::Snapshot;
use crate::error::Result;

/// The features' tables, in the order the catalog asks them.
pub(crate) type Features = Arc<[Arc<dyn FeatureTables>]>;

/// A feature's tables. Every method has a default that adds none.
pub(crate) trait FeatureTables: fmt::Debug + Send + Sync {
    /// The table `name` in `project` resolves to when it names none of the project's stored
    /// tables or views: one of this feature's objects (a model, a knowledge base) as a table.
    fn table(
        &self,
        _snapshot: &Arc<Snapshot>,
        _project: &str,
        _name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(None)
    }

    /// Whether `name` in `project` is one of this feature's tables (as [`FeatureTables::table`]
    /// would find), without making it.
    fn has_table(&self, _snapshot: &Snapshot, _project: &str, _name: &str) -> bool {
        false
    }

    /// `information_schema.<name>` (lower case) when this feature shows it; the tables
    /// `information_schema` lists are `catalog::namespace::INFO_TABLES`.
    fn system_table(&self, _snapshot: &Snapshot, _name: &str) -> Result<Option<SystemRows>> {
        Ok(None)
    }

    /// This feature's objects in `project` that read as tables, as `SHOW TABLES` and the REST
    /// listings show them.
    fn objects(&self, _snapshot: &Snapshot, _project: &str) -> Result<Vec<ProjectObject>> {
        Ok(Vec::new())
    }
}

/// One name a database lists among its tables: a stored table or view, or a feature's object
/// (a model, an agent, a knowledge base) that reads as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProjectObject {
    /// Its name as stored.
    pub(crate) name: String,
    /// What it is, as MindsDB's `TABLE_TYPE` says it: `BASE TABLE`, `VIEW`, `MODEL`, `AGENT`,
    /// `KNOWLEDGE BASE` or `SYSTEM VIEW`.
    pub(crate) kind: &'static str,
    /// The engine behind it, for a model.
    pub(crate) engine: Option<String>,
}

impl ProjectObject {
    /// An object of `kind` with no engine.
    pub(crate) fn new(name: impl Into<String>, kind: &'static str) -> ProjectObject {
        ProjectObject {
            name: name.into(),
            kind,
            engine: None,
        }
    }
}

/// A system table's rows, as a feature builds them.
pub(crate) struct SystemRows {
    /// The rows.
    pub(crate) batch: RecordBatch,
    /// Whether they change without a commit (inserts in progress): a plan that reads them is
    /// then never kept for later (the plan cache keeps plans until the next commit).
    pub(crate) live: bool,
}
