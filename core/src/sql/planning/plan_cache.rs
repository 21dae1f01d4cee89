//! Physical plans of read queries, kept for the next time the same text arrives. Parsing,
//! planning and optimizing are most of the cost of a small query, and applications repeat
//! their queries (dashboards, health checks, ORMs). An entry is keyed by everything that
//! shapes the plan (tenant, current database, SQL text, parameter values) and is valid only
//! while nothing has been committed since the read snapshot its table scans hold was taken:
//! any commit empties the cache, which also lets go of those snapshots. Plans whose meaning
//! depends on when they were planned (`now()`, `current_date`, variables) are never kept.
//! DataFusion re-executes a plan after resetting its per-run state (as its recursive queries do).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::sql::catalog::stored_table::StoredTable;

use crate::error::Result;
use crate::sql::request::QueryRequest;
use crate::tenant::TenantId;

/// Requests with more SQL and parameter text than this are planned every time: what is worth
/// keeping is short and repeated, and a cache of large literal-laden plans would hold up to
/// `capacity` request bodies.
const MAX_KEY_BYTES: usize = 16 * 1024;

/// What a query's plan depends on besides the data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PlanKey {
    tenant: TenantId,
    db: String,
    query: String,
    /// The parameters as canonical JSON (sorted names), empty without parameters.
    params: String,
}

impl PlanKey {
    /// The key of `request` run as `tenant` with `db` as its current database; `None` when
    /// the request is too large to be worth keeping.
    pub(crate) fn new(tenant: TenantId, db: &str, request: &QueryRequest) -> Option<Self> {
        // Typed parameters are rare (the in-process fronts' dates and bytes): not worth a key;
        // nor are requests that show secrets, whose system tables differ from everyone else's.
        if request.query.len() > MAX_KEY_BYTES
            || !request.typed_params.is_empty()
            || request.context.show_secrets
        {
            return None;
        }
        let params = if request.params.is_empty() {
            String::new()
        } else {
            let sorted: std::collections::BTreeMap<_, _> = request.params.iter().collect();
            serde_json::to_string(&sorted).ok()?
        };
        if request.query.len() + params.len() > MAX_KEY_BYTES {
            return None;
        }
        Some(PlanKey {
            tenant,
            db: db.to_ascii_lowercase(),
            query: request.query.clone(),
            params,
        })
    }
}

/// A kept plan and the column names it shows.
#[derive(Clone)]
pub(crate) struct CachedPlan {
    plan: Arc<dyn ExecutionPlan>,
    pub(crate) column_names: Vec<String>,
}

impl CachedPlan {
    /// The plan, ready to run again: a fresh copy of every operator's per-run state.
    pub(crate) fn plan(&self) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(reset_plan_states(Arc::clone(&self.plan))?)
    }
}

/// The cache; `capacity` 0 turns it off.
pub(crate) struct PlanCache {
    capacity: usize,
    inner: Mutex<Entries>,
}

struct Entries {
    /// The commit count the entries were planned at.
    generation: u64,
    plans: HashMap<PlanKey, CachedPlan>,
}

impl PlanCache {
    /// A cache of at most `capacity` plans.
    pub(crate) fn new(capacity: usize) -> Self {
        PlanCache {
            capacity,
            inner: Mutex::new(Entries {
                generation: 0,
                plans: HashMap::new(),
            }),
        }
    }

    /// The plan kept for `key`, if it was planned at `generation` (the store's commit count
    /// now).
    pub(crate) fn get(&self, key: &PlanKey, generation: u64) -> Option<CachedPlan> {
        if self.capacity == 0 {
            return None;
        }
        let mut entries = self.inner.lock().ok()?;
        if entries.generation != generation {
            entries.plans.clear();
            entries.generation = generation;
            return None;
        }
        entries.plans.get(key).cloned()
    }

    /// Keeps `plan` for `key`; `generation` is the commit count read before the plan's
    /// snapshot was taken, so a commit that slipped in between makes the entry unusable
    /// rather than stale.
    pub(crate) fn insert(
        &self,
        key: PlanKey,
        generation: u64,
        plan: Arc<dyn ExecutionPlan>,
        column_names: Vec<String>,
    ) {
        if self.capacity == 0 {
            return;
        }
        let Ok(mut entries) = self.inner.lock() else {
            return;
        };
        if entries.generation != generation {
            // Planned before a commit the cache has already seen, or after one it has not:
            // either way not worth keeping.
            return;
        }
        if entries.plans.len() >= self.capacity {
            // Whole-cache eviction keeps this simple and bounded; a workload that cycles
            // through more distinct queries than the capacity plans most of them anyway.
            entries.plans.clear();
        }
        entries.plans.insert(key, CachedPlan { plan, column_names });
    }

    /// Drops every plan (after a commit, so their snapshots go now, not at the next query).
    pub(crate) fn clear(&self) {
        if let Ok(mut entries) = self.inner.lock() {
            entries.plans.clear();
        }
    }
}

/// Whether `plan` means the same whenever it runs: no function the optimizer would fold to
/// the time of planning (`now()`, `current_date`: stable, not immutable), nothing volatile,
/// no variables, and every table read is a stored or system table of the snapshot. Table
/// functions are out because DataFusion folds their arguments (`generate_series(current_date,
/// …)`) before the logical plan exists, where this check cannot see them.
pub(crate) fn is_repeatable(plan: &LogicalPlan) -> bool {
    let mut repeatable = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            repeatable &= source_as_provider(&scan.source)
                .map(|p| p.is::<StoredTable>() || p.is::<MemTable>())
                .unwrap_or(false);
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                let fixed = match e {
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    Expr::ScalarVariable(..) | Expr::Placeholder(_) => false,
                    _ => true,
                };
                repeatable &= fixed;
                Ok(if fixed {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        })?;
        Ok(if repeatable {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    repeatable
}

/// Whether copies of `plan` can run at the same time. A `ScalarSubqueryExec` keeps its
/// subqueries' results in slots that `reset_plan_states` shares between copies (and empties),
/// so two runs of one kept plan would read each other's results or none.
pub(crate) fn is_reentrant(plan: &Arc<dyn ExecutionPlan>) -> bool {
    !plan
        .exists(|node| Ok(node.is::<ScalarSubqueryExec>()))
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
    use datafusion::prelude::SessionContext;

    fn logical(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        futures::executor::block_on(ctx.state().create_logical_plan(sql)).unwrap()
    }

    fn physical() -> Arc<dyn ExecutionPlan> {
        Arc::new(PlaceholderRowExec::new(Arc::new(Schema::empty())))
    }

    fn key(query: &str) -> PlanKey {
        PlanKey::new(TenantId::LOCAL, "mindsdb", &QueryRequest::new(query)).unwrap()
    }

    #[test]
    fn plans_that_depend_on_when_they_run_are_not_repeatable() {
        for sql in [
            "SELECT 1 + 2, upper('a')",
            "SELECT abs(-1) WHERE 1 IN (SELECT 1)",
        ] {
            assert!(is_repeatable(&logical(sql)), "{sql}");
        }
        for sql in [
            "SELECT now()",
            "SELECT current_date",
            "SELECT random()",
            "SELECT 1 WHERE EXISTS (SELECT now())",
            "SELECT 1 + (SELECT to_unixtime(now()))",
            "SELECT * FROM generate_series(1, 3)",
            "SELECT * FROM generate_series(current_date - INTERVAL '6 days', current_date, INTERVAL '1 day')",
        ] {
            assert!(!is_repeatable(&logical(sql)), "{sql}");
        }
    }

    #[test]
    fn plans_with_scalar_subqueries_are_not_shared() {
        let ctx = SessionContext::new();
        let physical = |sql: &str| {
            futures::executor::block_on(async { ctx.sql(sql).await?.create_physical_plan().await })
                .unwrap()
        };
        assert!(is_reentrant(&physical("SELECT 1 + 2")));
        let subquery = physical("SELECT 1 WHERE 2 > (SELECT max(column1) FROM (VALUES (1), (3)))");
        assert!(
            subquery
                .exists(|n| Ok(n.is::<ScalarSubqueryExec>()))
                .unwrap(),
            "the case this guards against: {}",
            datafusion::physical_plan::displayable(subquery.as_ref()).indent(false)
        );
        assert!(!is_reentrant(&subquery));
    }

    #[test]
    fn entries_last_until_the_next_commit() {
        let cache = PlanCache::new(2);
        assert!(cache.get(&key("SELECT 1"), 0).is_none());
        cache.insert(key("SELECT 1"), 0, physical(), vec!["1".into()]);
        let hit = cache.get(&key("SELECT 1"), 0).unwrap();
        assert_eq!(hit.column_names, ["1"]);
        assert!(hit.plan().is_ok());
        // Other text, other database, other parameters: other entries.
        assert!(cache.get(&key("SELECT  1"), 0).is_none());
        let other_db = PlanKey::new(TenantId::LOCAL, "b", &QueryRequest::new("SELECT 1")).unwrap();
        assert!(cache.get(&other_db, 0).is_none());
        let with_param = QueryRequest::new("SELECT 1").with_param("x", 1.into());
        let with_param = PlanKey::new(TenantId::LOCAL, "mindsdb", &with_param).unwrap();
        assert!(cache.get(&with_param, 0).is_none());
        // Large requests are not kept at all.
        let long = QueryRequest::new(format!("SELECT '{}'", "x".repeat(MAX_KEY_BYTES)));
        assert!(PlanKey::new(TenantId::LOCAL, "mindsdb", &long).is_none());
        let big_param =
            QueryRequest::new("SELECT :x").with_param("x", "y".repeat(MAX_KEY_BYTES).into());
        assert!(PlanKey::new(TenantId::LOCAL, "mindsdb", &big_param).is_none());
        // A commit empties it; a plan made before that commit is not kept afterwards.
        assert!(cache.get(&key("SELECT 1"), 1).is_none());
        cache.insert(key("SELECT 1"), 0, physical(), Vec::new());
        assert!(cache.get(&key("SELECT 1"), 1).is_none());
        // Bounded: the entry over capacity starts a new set.
        for n in 0..3 {
            cache.insert(key(&format!("SELECT {n}")), 1, physical(), Vec::new());
        }
        assert!(cache.get(&key("SELECT 0"), 1).is_none());
        assert!(cache.get(&key("SELECT 2"), 1).is_some());
        // Capacity 0 keeps nothing.
        let off = PlanCache::new(0);
        off.insert(key("SELECT 1"), 0, physical(), Vec::new());
        assert!(off.get(&key("SELECT 1"), 0).is_none());
    }
}
