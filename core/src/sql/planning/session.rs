//! DataFusion sessions, reused. Building a `SessionState` registers every built-in function
//! again (hundreds of map inserts), which was a fifth of the CPU time of a small query; so one
//! state is built when the engine opens and requests borrow clones of it from a pool. A
//! borrowed state is pointed at the request's read snapshot, current database and partition
//! count, and forgets the snapshot when it goes back, so no read transaction outlives its
//! request. A borrowed state executes in its tenant's task context, whose spills count against
//! the tenant's share of the temporary space (`spill_shares`).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{FunctionRegistry, SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::var_provider::VarType;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use datafusion::prelude::SessionConfig;

use super::spill_shares::SpillShares;
use crate::catalog::users;
use crate::error::Result;
use crate::services::connectors::remote_plan;
use crate::services::llm::Connector;
use crate::sql::catalog::features::Features;
use crate::sql::catalog::snapshot::{Snapshot, CATALOG};
use crate::sql::catalog::tenant::{planning_state, Catalogs, TenantCatalog};
use crate::tenant::TenantId;

/// Idle states kept for reuse; more concurrent requests than this build extra clones that
/// are dropped afterwards.
const MAX_IDLE: usize = 16;

/// What the features add to every session: their tables, analyzer rules and planners.
pub(crate) struct Plugins {
    /// Their tables, asked for names that are no stored table or view.
    pub(crate) tables: Features,
    /// Rules that rewrite every statement's logical plan before it is optimized.
    pub(crate) analyzer_rules: Vec<Arc<dyn AnalyzerRule + Send + Sync>>,
    /// Planners of their own logical plan nodes into operators.
    pub(crate) planners: Vec<Arc<dyn ExtensionPlanner + Send + Sync>>,
    /// What the runner adds to every session's configuration (a handle on itself, for
    /// operators that run SQL while they execute).
    pub(crate) configure: Box<dyn FnOnce(SessionConfig) -> SessionConfig + Send>,
}

/// The pool of session states.
pub(crate) struct Sessions {
    base: SessionState,
    /// A state of its own for planning stored expressions (column defaults) while a
    /// request's state is busy planning the statement that uses them.
    expressions: Arc<SessionState>,
    /// How datasources are reached, handed to every request's catalog.
    net: crate::services::connectors::Net,
    /// The features' tables, handed to every request's catalog.
    features: Features,
    idle: Mutex<Vec<SessionState>>,
    /// Each tenant's task context (the shared one's copy with the tenant's disk manager): its
    /// settings (batch size, memory pool) are the engine's, and building one per query would
    /// copy all function maps again.
    spill: SpillShares,
}

impl Sessions {
    /// A pool whose states run with `batch_size` on `runtime`; LLM models call through
    /// `connector`, which the states carry as a config extension; datasources through `net`;
    /// a function's one value may be at most `max_value` bytes (`query.max_value_mb`).
    pub(crate) fn new(
        runtime: Arc<RuntimeEnv>,
        batch_size: usize,
        connector: Connector,
        net: crate::services::connectors::Net,
        hosted: &crate::config::HostedConfig,
        max_value: u64,
        plugins: Plugins,
    ) -> Self {
        let mut config = (plugins.configure)(SessionConfig::new())
            .with_extension(Arc::new(connector))
            .with_batch_size(batch_size)
            .with_information_schema(false)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(CATALOG, "");
        config.options_mut().sql_parser.enable_ident_normalization = true;
        let mut planners = plugins.planners;
        planners.push(Arc::new(remote_plan::RemoteQueryPlanner));
        let mut base = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_catalog_list(Arc::new(Catalogs(None)))
            .with_query_planner(Arc::new(Planner(planners)))
            .with_optimizer_rule(Arc::new(super::unnest::UnnestSubqueries))
            .with_optimizer_rule(Arc::new(super::bounded::broadcast_literals(max_value)))
            .with_optimizer_rule(Arc::new(super::bounded::StopCheck))
            // Last: the parts it sends are written after filters and limits moved down.
            .with_optimizer_rule(Arc::new(remote_plan::PushDownPlans))
            .with_physical_optimizer_rule(Arc::new(super::sort_keys::SortKeysAsColumns))
            .with_physical_optimizer_rule(Arc::new(super::view_groups::ViewGroups))
            .with_physical_optimizer_rule(Arc::new(super::join_stop::JoinStopCheck))
            .with_physical_optimizer_rule(Arc::new(super::bounded::StopCheck))
            .build();
        base.execution_props_mut().add_var_provider(
            VarType::System,
            Arc::new(super::system_variables::SystemVariables),
        );
        for function in super::client_functions::functions() {
            base.register_udf(function)
                .expect("registering a function only replaces it in a map");
        }
        for rule in plugins.analyzer_rules {
            base.add_analyzer_rule(rule);
        }
        for checked in super::bounded::checked_functions(base.scalar_functions(), max_value) {
            base.register_udf(checked)
                .expect("registering a function only replaces it in a map");
        }
        for rewrite in [
            Arc::new(super::coerce::BooleanText) as Arc<dyn FunctionRewrite + Send + Sync>,
            Arc::new(super::coerce::DivisionByZero),
        ] {
            base.register_function_rewrite(rewrite)
                .expect("registering a rewrite only adds it to a list");
        }
        Sessions {
            spill: SpillShares::new(base.task_ctx(), hosted),
            expressions: Arc::new(base.clone()),
            idle: Mutex::new(Vec::new()),
            base,
            net,
            features: plugins.tables,
        }
    }

    /// A state that resolves names in `snapshot`, with `db` as the current database, planning
    /// for `partitions` partitions; `now()` is the time of this call. It executes in the
    /// snapshot's tenant's task context.
    pub(crate) fn take(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        db: &str,
        partitions: usize,
    ) -> Result<Session> {
        let tenant = snapshot.tenant;
        let task_ctx = self.task_ctx_of(tenant, || users::plan_in(&snapshot.txn, tenant))?;
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut state = idle.unwrap_or_else(|| self.base.clone());
        let options = state.config_mut().options_mut();
        options.execution.target_partitions = partitions.max(1);
        options.catalog.default_schema = db.to_ascii_lowercase();
        state.register_catalog_list(Arc::new(Catalogs(Some(Arc::new(TenantCatalog {
            snapshot,
            net: self.net.clone(),
            features: Arc::clone(&self.features),
            expressions: Arc::clone(&self.expressions),
            reading: Arc::default(),
        })))));
        state.mark_start_execution();
        Ok(Session {
            state: Some(state),
            pool: Arc::clone(self),
            task_ctx,
        })
    }

    /// A state for planning the query of the view `view` (project, lower-case name) in
    /// `snapshot`, in the view's project: a view it reads that reads it back fails.
    pub(crate) fn for_view(&self, snapshot: Arc<Snapshot>, view: (String, String)) -> SessionState {
        let project = view.0.clone();
        let catalog = TenantCatalog {
            snapshot,
            net: self.net.clone(),
            features: Arc::clone(&self.features),
            expressions: Arc::clone(&self.expressions),
            reading: Arc::new(vec![view]),
        };
        planning_state(&self.expressions, catalog, &project)
    }

    /// The context `tenant`'s executions run in (`plan` reads the tenant's plan).
    pub(crate) fn task_ctx_of(
        &self,
        tenant: TenantId,
        plan: impl FnOnce() -> Result<Option<String>>,
    ) -> Result<Arc<TaskContext>> {
        self.spill.task_ctx(tenant, plan)
    }
}

/// A borrowed state; it returns to the pool when dropped.
pub(crate) struct Session {
    state: Option<SessionState>,
    pool: Arc<Sessions>,
    /// Its tenant's task context.
    task_ctx: Arc<TaskContext>,
}

impl Session {
    /// The tenant's task context (it shadows `SessionState::task_ctx`, which would copy every
    /// function map, and whose runtime has the shared disk manager, not the tenant's).
    pub(crate) fn task_ctx(&self) -> Arc<TaskContext> {
        Arc::clone(&self.task_ctx)
    }

    /// Where the tenant's temporary files go (a write's staged rows), within its share.
    pub(crate) fn disk_manager(&self) -> Arc<DiskManager> {
        Arc::clone(&self.task_ctx.runtime_env().disk_manager)
    }
}

impl Deref for Session {
    type Target = SessionState;

    fn deref(&self) -> &SessionState {
        self.state
            .as_ref()
            .expect("a session holds its state until dropped")
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut SessionState {
        self.state
            .as_mut()
            .expect("a session holds its state until dropped")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(mut state) = self.state.take() else {
            return;
        };
        // Releases the snapshot (and with it the read transaction) now, not at the next take.
        state.register_catalog_list(Arc::new(Catalogs(None)));
        if let Ok(mut idle) = self.pool.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(state);
            }
        }
    }
}

/// Plans logical plans into operators, the features' own nodes by their planners.
struct Planner(Vec<Arc<dyn ExtensionPlanner + Send + Sync>>);

impl fmt::Debug for Planner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Planner({} extension planners)", self.0.len())
    }
}

#[async_trait]
impl QueryPlanner for Planner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(self.0.clone())
            .create_physical_plan(logical_plan, session)
            .await
    }
}

/// The LLM connector a session carries (set where the session is made, above).
pub(crate) fn connector(config: &SessionConfig) -> datafusion::error::Result<Arc<Connector>> {
    config.get_extension::<Connector>().ok_or_else(|| {
        datafusion::error::DataFusionError::Internal(
            "the session carries no LLM connector".to_string(),
        )
    })
}
