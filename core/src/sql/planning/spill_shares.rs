//! Each tenant's share of the temporary space (`hosted.plans.<plan>.max_spill_mb`, see
//! `spill`), and the DataFusion task contexts whose spills count against it: a tenant's
//! statements execute in a context whose runtime has the tenant's disk manager, and its writes
//! stage their rows through the same one.
//!
//! A tenant has one share while anything of it is alive (a running plan, a spool, a file), so
//! its statements together never hold more than it; the contexts are rebuilt from the shared
//! one when needed and a few are kept, least recently used out first. The local tenant (and
//! the hosted operator) has no plan: its statements run in the shared context, within the
//! whole budget only.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::TaskContext;
use parking_lot::Mutex;

use crate::config::HostedConfig;
use crate::error::Result;
use crate::spill::{SpillShare, SpillSpace};
use crate::tenant::TenantId;

/// Task contexts kept for tenants that ran statements lately.
const CONTEXTS: usize = 64;

/// The shares of one engine's tenants.
pub(crate) struct SpillShares {
    space: SpillSpace,
    /// The shared context, whose functions, settings and memory pool every tenant's copies.
    shared: Arc<TaskContext>,
    /// `max_spill_mb` of each plan, in bytes.
    plans: BTreeMap<String, u64>,
    shares: Mutex<HashMap<TenantId, Arc<SpillShare>>>,
    contexts: Mutex<lru::LruCache<TenantId, Arc<TaskContext>>>,
}

impl SpillShares {
    /// Shares of the temporary space `shared`'s runtime writes into, under the plans of
    /// `hosted`.
    pub(crate) fn new(shared: Arc<TaskContext>, hosted: &HostedConfig) -> SpillShares {
        let plans = hosted
            .plans
            .iter()
            .map(|(name, plan)| (name.clone(), plan.max_spill_mb.saturating_mul(1024 * 1024)))
            .collect();
        SpillShares {
            space: SpillSpace::new(Arc::clone(&shared.runtime_env().disk_manager)),
            shared,
            plans,
            shares: Mutex::new(HashMap::new()),
            contexts: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(CONTEXTS).expect("not zero"),
            )),
        }
    }

    /// The context `tenant`'s statements execute in, its share's limit set from its plan
    /// (`plan` reads it; called for tenants other than the local one only).
    pub(crate) fn task_ctx(
        &self,
        tenant: TenantId,
        plan: impl FnOnce() -> Result<Option<String>>,
    ) -> Result<Arc<TaskContext>> {
        if tenant == TenantId::LOCAL {
            return Ok(Arc::clone(&self.shared));
        }
        let limit = plan()?.and_then(|plan| {
            let bytes = *self.plans.get(&plan)?;
            Some((bytes, format!("hosted.plans.{plan}.max_spill_mb")))
        });
        let share = self.share(tenant);
        share.set_limit(limit);
        if let Some(context) = self.contexts.lock().get(&tenant) {
            return Ok(Arc::clone(context));
        }
        let shared = &self.shared;
        let mut runtime = RuntimeEnvBuilder::from_runtime_env(&shared.runtime_env());
        runtime.disk_manager = Some(self.space.disk_for(&share)?);
        let context = Arc::new(TaskContext::new(
            shared.task_id(),
            shared.session_id(),
            shared.session_config().clone(),
            shared.scalar_functions().clone(),
            shared.higher_order_functions().clone(),
            shared.aggregate_functions().clone(),
            shared.window_functions().clone(),
            runtime.build_arc()?,
        ));
        self.contexts.lock().put(tenant, Arc::clone(&context));
        Ok(context)
    }

    /// `tenant`'s share: the one alive, or a new one. Shares nothing refers to any more are
    /// forgotten as others come (they hold no bytes: every file refers to its share).
    fn share(&self, tenant: TenantId) -> Arc<SpillShare> {
        let mut shares = self.shares.lock();
        if let Some(share) = shares.get(&tenant) {
            return Arc::clone(share);
        }
        if shares.len() >= 4 * CONTEXTS {
            shares.retain(|_, share| Arc::strong_count(share) > 1);
        }
        let share = Arc::new(SpillShare::default());
        shares.insert(tenant, Arc::clone(&share));
        share
    }
}
