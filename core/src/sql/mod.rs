//! The relational engine: a request's statements, parsed (MindsDB's database statements on
//! tokens, the rest by sqlparser), planned by DataFusion against the tenant's catalog at one
//! read snapshot, and run. Results stream as Arrow record batches;
//! [`encode`](crate::sql::encode) turns them into MindsDB's wire formats.
//!
//! The root holds [`SqlRunner`](crate::sql::SqlRunner), which runs a request's statements
//! (`run`: the request and the database statements; `execute`: one SQL statement; `ddl`:
//! views and the names DDL takes; `client`: what MySQL clients send on connect;
//! `transaction`, `load`, `uploads`), and the [`Extension`](crate::sql::Extension)
//! trait through which features plug in. The sub-folders know neither: `parse/` reads statements, `catalog/` is DataFusion's view
//! of a tenant at one snapshot, `planning/` the sessions, plan cache and our rules, `write/`
//! the write path; `request` and `encode` are what is asked and answered.
//!
//! How features plug in: the engine knows stored tables, views, datasources and the database
//! statements (projects, datasources, `SHOW`, `USE`); MindsDB's AI objects (models, knowledge
//! bases, agents: `crate::ai`) come in through [`Extension`](crate::sql::Extension), as DuckDB's parser extensions and
//! DataFusion's table providers, analyzer rules and extension planners let a feature in. The
//! engine is handed its extensions when it is made and asks them, in the order given, at each
//! point; nothing in `sql` names a feature.

pub(crate) mod catalog;
mod client;
mod ddl;
pub mod encode;
pub(crate) mod execute;
pub(crate) mod load;
pub(crate) mod parse;
pub(crate) mod planning;
pub(crate) mod request;
mod run;
pub(crate) mod transaction;
pub(crate) mod uploads;
mod variables;
pub(crate) mod write;

pub use self::request::{
    LoadMode, Outcome, Positional, PositionalValue, QueryContext, QueryRequest, QueryResult,
    ResultContext, TableResult, TypedParam,
};

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::DmlStatement;
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_planner::ExtensionPlanner;
use datafusion::sql::sqlparser::ast::Insert;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use tokio::runtime::Handle;

use self::catalog::features::FeatureTables;
use self::planning::plan_cache::PlanCache;
use self::planning::session::{Plugins, Sessions};
use self::write::job::{Staged, WriteJob};
use crate::error::{Error, Result};
use crate::services::Services;
use crate::tenant::TenantId;

/// Runs SQL for the engine.
pub(crate) struct SqlRunner {
    /// What the engine shares: the store, the configuration, the clients, admission and the
    /// planning pool.
    pub(crate) services: Arc<Services>,
    sessions: Arc<Sessions>,
    /// The features plugged into the engine (see [`Extension`]), in the order they are asked.
    pub(crate) extensions: Extensions,
    plans: PlanCache,
    default_project: String,
    pub(crate) target_partitions: usize,
}

impl SqlRunner {
    /// The SQL engine over `services`, with `extensions` plugged in. It is shared: a feature's
    /// operator that runs SQL itself while it executes (an agent asked in a query) finds it
    /// in its session as a [`RunnerHandle`].
    pub(crate) fn new(services: Arc<Services>, extensions: Extensions) -> Result<Arc<Self>> {
        let config = &services.config;
        let target_partitions = match config.query.target_partitions {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            n => n,
        };
        let memory = usize::try_from(config.memory_limit_bytes()).unwrap_or(usize::MAX);
        // Operators that outgrow the pool spill to files in the OS temp directory, within
        // `query.max_spill_mb` for all statements together (writes stage there too).
        let disk =
            DiskManagerBuilder::default().with_max_temp_directory_size(config.max_spill_bytes());
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(memory)))
            .with_disk_manager_builder(disk)
            .build_arc()?;
        let connector = services.connector();
        let net = services.net.clone();
        Ok(Arc::new_cyclic(|runner| SqlRunner {
            sessions: Arc::new(Sessions::new(
                runtime,
                config.query.batch_size.max(1),
                connector,
                net,
                &config.hosted,
                config.max_value_bytes(),
                Plugins {
                    tables: extensions
                        .iter()
                        .map(|e| Arc::clone(e) as Arc<dyn FeatureTables>)
                        .collect(),
                    analyzer_rules: extensions.iter().flat_map(|e| e.analyzer_rules()).collect(),
                    planners: extensions.iter().flat_map(|e| e.planners()).collect(),
                    configure: Box::new({
                        let handle = Arc::new(RunnerHandle(std::sync::Weak::clone(runner)));
                        move |config| config.with_extension(handle)
                    }),
                },
            )),
            extensions,
            plans: PlanCache::new(config.query.plan_cache_entries),
            default_project: config.query.default_project.to_ascii_lowercase(),
            target_partitions,
            services: Arc::clone(&services),
        }))
    }

    /// The default project's name.
    pub(crate) fn default_project(&self) -> &str {
        &self.default_project
    }

    /// The context a request starts in: its database, or the default project.
    pub(crate) fn request_context(&self, request: &QueryRequest) -> ResultContext {
        ResultContext {
            show_secrets: request.context.show_secrets,
            db: request
                .context
                .db
                .clone()
                .unwrap_or_else(|| self.default_project.clone()),
        }
    }
}

/// A one-batch table of text columns (SHOW results).
pub(crate) fn text_table(columns: Vec<(&str, Vec<Option<String>>)>) -> Result<Outcome> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, _)| Field::new(*name, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, values)| Arc::new(StringArray::from(values.clone())) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    let column_names = columns.iter().map(|(name, _)| name.to_string()).collect();
    let stream = MemoryStream::try_new(vec![batch], schema, None)?;
    Ok(Outcome::Table(TableResult {
        column_names,
        stream: Box::pin(stream),
    }))
}

/// The runner, as a session's operators reach it (a `SessionConfig` extension): weakly, so
/// the sessions the runner keeps do not keep it alive.
#[derive(Debug)]
pub(crate) struct RunnerHandle(std::sync::Weak<SqlRunner>);

impl RunnerHandle {
    /// The runner, unless the engine is closing.
    pub(crate) fn runner(&self) -> Result<Arc<SqlRunner>> {
        self.0
            .upgrade()
            .ok_or_else(|| Error::invalid("The engine is closing"))
    }
}

/// A feature's write job: what it stages inside the engine's write (see `write::job::WriteJob`).
pub(crate) type FeatureWrite = Box<dyn FnOnce(&WriteJob, &Handle) -> Result<Staged<u64>> + Send>;

/// The extensions an engine was made with, in the order it asks them.
pub(crate) type Extensions = Arc<[Arc<dyn Extension>]>;

/// A statement of a request as the runner runs it, a feature's boxed.
pub(crate) type Command = parse::Command<Box<dyn FeatureStatement>>;

/// The statement one of `extensions` claims `words` to be, asking them in order (the
/// parser's [`parse::Claim`]).
pub(crate) fn claim(
    extensions: &[Arc<dyn Extension>],
    words: &[&Token],
) -> Result<Option<Box<dyn FeatureStatement>>> {
    for extension in extensions {
        if let Some(statement) = extension.statement(words)? {
            return Ok(Some(statement));
        }
    }
    Ok(None)
}

/// A feature plugged into the relational engine: its tables in the catalog
/// ([`FeatureTables`]), its statements, writes, rules and planners. Every method but
/// [`Extension::statement`] has a default that adds nothing.
pub(crate) trait Extension: FeatureTables {
    /// The statement `words` (one statement's tokens, spaces left out) spell when it is one
    /// of this feature's, claimed by its leading words (`CREATE MODEL …`); `None` when it is
    /// not, and the next extension, then the engine's own parser, reads it. An error is the
    /// statement's: it was this feature's, and wrong.
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>>;

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
