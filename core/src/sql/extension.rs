//! How features plug into the relational engine. The engine knows stored tables, views,
//! datasources and the database statements (projects, datasources, `SHOW`, `USE`); MindsDB's
//! AI objects (models, knowledge bases, agents: `crate::ai`) come in through [`Extension`], as
//! DuckDB's parser extensions and DataFusion's table providers, analyzer rules and extension
//! planners let a feature in. The engine is handed its extensions when it is made and asks
//! them, in the order given, at each point below; nothing in `sql` names a feature.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::logical_expr::DmlStatement;
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_planner::ExtensionPlanner;
use datafusion::sql::sqlparser::ast::{Insert, Statement};
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use tokio::runtime::Handle;

use super::dml::{Staged, WriteJob};
use super::request::{Outcome, ResultContext};
use super::snapshot::Snapshot;
use super::SqlRunner;
use crate::error::{Error, Result};
use crate::tenant::TenantId;

/// A feature's write job: what it stages inside the engine's write (see `dml::WriteJob`).
pub(crate) type FeatureWrite = Box<dyn FnOnce(&WriteJob, &Handle) -> Result<Staged<u64>> + Send>;

/// The extensions an engine was made with, in the order it asks them.
pub(crate) type Extensions = Arc<[Arc<dyn Extension>]>;

/// A feature plugged into the relational engine. Every method but [`Extension::statement`]
/// has a default that adds nothing.
pub(crate) trait Extension: fmt::Debug + Send + Sync {
    /// The statement `words` (one statement's tokens, spaces left out) spell when it is one
    /// of this feature's, claimed by its leading words (`CREATE MODEL …`); `None` when it is
    /// not, and the next extension, then the engine's own parser, reads it. An error is the
    /// statement's: it was this feature's, and wrong.
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>>;

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

    /// Whether `name` in `project` is one of this feature's tables (as [`Extension::table`]
    /// would find), without making it.
    fn has_table(&self, _snapshot: &Snapshot, _project: &str, _name: &str) -> bool {
        false
    }

    /// `information_schema.<name>` (lower case) when this feature shows it; the tables
    /// `information_schema` lists are `catalog::namespace::INFO_TABLES`.
    fn system_table(&self, _snapshot: &Snapshot, _name: &str) -> Result<Option<SystemRows>> {
        Ok(None)
    }

    /// Answers what it can of `statement` before it is planned (an agent asked in a SELECT
    /// becomes a table of its answer); whether it changed the statement, whose plan is then
    /// never kept for later.
    fn rewrite<'a>(
        &'a self,
        _runner: &'a SqlRunner,
        _tenant: TenantId,
        _db: &'a str,
        _statement: &'a mut Statement,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
    }

    /// Runs `insert` when its target is one of this feature's objects (a knowledge base): the
    /// rows it wrote; `None` when the target is not.
    fn insert<'a>(
        &'a self,
        _runner: &'a SqlRunner,
        _tenant: TenantId,
        _context: &'a ResultContext,
        _insert: &'a Insert,
    ) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether the planned write `statement` (DELETE, UPDATE, INSERT) targets one of this
    /// feature's tables, which then writes it ([`Extension::write`]).
    fn claims_write(&self, _statement: &DmlStatement) -> bool {
        false
    }

    /// The write of a statement [`Extension::claims_write`] claimed, run as the engine's
    /// stored-table writes are: its rows computed before the writer lock is taken.
    fn write(&self, statement: DmlStatement) -> Result<FeatureWrite> {
        Err(Error::internal(format!(
            "{self:?} writes no table, yet was handed {}",
            statement.table_name
        )))
    }

    /// Rules that rewrite every statement's logical plan before it is optimized.
    fn analyzer_rules(&self) -> Vec<Arc<dyn AnalyzerRule + Send + Sync>> {
        Vec::new()
    }

    /// Planners of the feature's own logical plan nodes into operators.
    fn planners(&self) -> Vec<Arc<dyn ExtensionPlanner + Send + Sync>> {
        Vec::new()
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

/// A statement an [`Extension`] read, which the feature runs itself.
pub(crate) trait FeatureStatement: AnyStatement + fmt::Debug + Send + Sync {
    /// Runs the statement for `tenant` in `context`.
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>>;
}

/// What every statement type answers by itself (a blanket implementation): itself as `Any`,
/// so a feature (or a test) can take back a statement it parsed, and equality.
pub(crate) trait AnyStatement: Any {
    /// The statement as `Any`.
    fn as_any(&self) -> &dyn Any;

    /// The statement as `Any`, owned.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;

    /// Whether `other` is the same statement.
    fn same_as(&self, other: &dyn FeatureStatement) -> bool;
}

impl<T: PartialEq + Any> AnyStatement for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }

    fn same_as(&self, other: &dyn FeatureStatement) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
}

/// Statements compare as the commands holding them do (the parser's tests compare commands).
impl PartialEq for dyn FeatureStatement {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}
