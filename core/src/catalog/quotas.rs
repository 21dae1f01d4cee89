//! Plan-tier quotas: minds and datasources a user may have at once, and questions
//! and LLM-model provider calls per window (stored bytes are `storage`'s). Each check runs inside the write transaction of
//! the action it guards (or of the reservation), and redb has one writer at a time, so
//! concurrent requests can never overrun a limit. Owns the redb tables `quota_questions` and
//! `quota_model_calls`.
//!
//! Counted quotas read the catalog itself (minds, datasources), so deleting an object frees
//! its slot with nothing to keep in step. Questions are counted in a fixed window that starts
//! with the first question after the previous window ended.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};
use serde::Serialize;

use crate::catalog::users;
use crate::config::{HostedConfig, PlanConfig};
use crate::error::{Error, Result};
use crate::store::schema::{MODEL_CALLS, QUESTIONS};
use crate::store::Store;
use crate::tenant::TenantId;

/// A counted quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Minds at once.
    Minds,
    /// Datasources at once.
    Datasources,
}

impl Slot {
    fn name(self) -> &'static str {
        match self {
            Slot::Minds => "minds",
            Slot::Datasources => "datasources",
        }
    }

    fn limit(self, plan: &PlanConfig) -> u64 {
        match self {
            Slot::Minds => plan.max_minds,
            Slot::Datasources => plan.max_datasources,
        }
    }
}

/// Creates the table in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(QUESTIONS)?;
    txn.open_table(MODEL_CALLS)?;
    Ok(())
}

/// The tier of `tenant`, `None` for tenants without one (the local tenant: no quotas).
fn plan<'a>(
    txn: &WriteTransaction,
    tenant: TenantId,
    hosted: &'a HostedConfig,
) -> Result<Option<(String, &'a PlanConfig)>> {
    let Some(name) = users::plan_of(txn, tenant)? else {
        return Ok(None);
    };
    let plan = hosted.plans.get(&name).ok_or_else(|| {
        Error::internal(format!(
            "plan '{name}' is no longer in the configuration; change the user's plan"
        ))
    })?;
    Ok(Some((name, plan)))
}

/// Fails with [`ErrorKind::QuotaExceeded`](crate::ErrorKind) when `tenant`, which has `used`
/// objects of the kind, may not have one more. Call it in the transaction that adds the object.
pub(crate) fn check_slot(
    txn: &WriteTransaction,
    tenant: TenantId,
    hosted: &HostedConfig,
    slot: Slot,
    used: u64,
) -> Result<()> {
    let Some((plan_name, plan)) = plan(txn, tenant, hosted)? else {
        return Ok(());
    };
    let limit = slot.limit(plan);
    if used >= limit {
        return Err(slot_full(slot, &plan_name, limit, used));
    }
    Ok(())
}

/// The error for a counted quota that is full.
pub(crate) fn slot_full(slot: Slot, plan: &str, limit: u64, used: u64) -> Error {
    Error::quota_exceeded(
        format!(
            "Quota exceeded: {} (limit {limit}, used {used}) on plan '{plan}'; \
             delete one to free a slot",
            slot.name()
        ),
        None,
    )
}

/// A question counted against its window, to be given back if the question fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    tenant: TenantId,
    window_start: u64,
}

/// Counts one question for `tenant` at `now` (Unix seconds), or fails with QuotaExceeded and
/// the seconds until the window resets. `None` for tenants without quotas.
pub(crate) fn take_question(
    txn: &WriteTransaction,
    tenant: TenantId,
    hosted: &HostedConfig,
    now: u64,
) -> Result<Option<Reservation>> {
    let Some((plan_name, plan)) = plan(txn, tenant, hosted)? else {
        return Ok(None);
    };
    let mut table = txn.open_table(QUESTIONS)?;
    let (start, used) = current_window(&table, tenant, plan, now)?;
    let limit = plan.questions_per_window;
    if used >= limit {
        let retry = (start + plan.window_secs).saturating_sub(now).max(1);
        return Err(Error::quota_exceeded(
            format!(
                "Quota exceeded: questions (limit {limit} per {} s, used {used}) on plan \
                 '{plan_name}'; the window resets in {retry} s",
                plan.window_secs
            ),
            Some(retry),
        ));
    }
    table.insert(tenant.0, (start, used + 1))?;
    Ok(Some(Reservation {
        tenant,
        window_start: start,
    }))
}

/// Counts `calls` provider calls of LLM-backed models for `tenant` at `now`, all or none:
/// QuotaExceeded (with the seconds until the window resets) when they do not all fit.
pub(crate) fn take_model_calls(
    txn: &WriteTransaction,
    tenant: TenantId,
    hosted: &HostedConfig,
    calls: u64,
    now: u64,
) -> Result<()> {
    let Some((plan_name, plan)) = plan(txn, tenant, hosted)? else {
        return Ok(());
    };
    let mut table = txn.open_table(MODEL_CALLS)?;
    let (start, used) = current_window(&table, tenant, plan, now)?;
    let limit = plan.model_calls_per_window;
    if used.saturating_add(calls) > limit {
        let retry = (start + plan.window_secs).saturating_sub(now).max(1);
        return Err(Error::quota_exceeded(
            format!(
                "Quota exceeded: model_calls (limit {limit} per {} s, used {used}, {calls} more asked) on plan \
                 '{plan_name}'; LLM-backed models call their provider once per row, knowledge bases once per embedding request and reranked chunk; the window resets in {retry} s",
                plan.window_secs
            ),
            Some(retry),
        ));
    }
    table.insert(tenant.0, (start, used + calls))?;
    Ok(())
}

/// Meters the provider calls made for users (LLM-backed models, knowledge bases' embedding
/// and reranking), for every tenant of one engine.
#[derive(Clone)]
pub(crate) struct ModelCalls {
    store: Arc<Store>,
    hosted: HostedConfig,
}

impl std::fmt::Debug for ModelCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCalls").finish_non_exhaustive()
    }
}

impl ModelCalls {
    pub(crate) fn new(store: &Arc<Store>, hosted: &HostedConfig) -> ModelCalls {
        ModelCalls {
            store: Arc::clone(store),
            hosted: hosted.clone(),
        }
    }

    /// Counts `calls` for `tenant` before they are made (nothing for a tenant without a plan).
    pub(crate) async fn take(&self, tenant: TenantId, calls: u64) -> Result<()> {
        if tenant == TenantId::LOCAL || calls == 0 {
            return Ok(());
        }
        let hosted = self.hosted.clone();
        self.store
            .write(move |txn| {
                take_model_calls(txn, tenant, &hosted, calls, crate::time::now_unix())
            })
            .await
    }
}

/// A question counted against its tenant's quota. It stays counted once a provider was
/// called for it, however it ends (answered, failed, stopped by its deadline or an interrupt,
/// or abandoned by its caller, which drops it): the operator has paid for that call. One that
/// ends before any call is given back.
pub(crate) struct Question {
    store: Arc<Store>,
    reservation: Option<Reservation>,
    /// Provider calls made for it, counted by whoever answers it.
    calls: Arc<AtomicU64>,
}

impl Question {
    /// Counts a question for `tenant` in its own write transaction, before it is asked.
    pub(crate) async fn take(
        store: &Arc<Store>,
        hosted: &HostedConfig,
        tenant: TenantId,
    ) -> Result<Question> {
        let reservation = if tenant == TenantId::LOCAL {
            None
        } else {
            let hosted = hosted.clone();
            store
                .write(move |txn| take_question(txn, tenant, &hosted, crate::time::now_unix()))
                .await?
        };
        Ok(Question {
            store: Arc::clone(store),
            reservation,
            calls: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The counter of provider calls made for this question: a call counts from the moment
    /// its request is sent (see `llm::chat`).
    pub(crate) fn calls(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.calls)
    }

    /// Whether a provider was called for it.
    fn called(&self) -> bool {
        self.calls.load(Ordering::SeqCst) > 0
    }

    /// The question was answered: it stays counted.
    pub(crate) fn answered(mut self) {
        self.reservation = None;
    }

    /// The answer failed: the question is given back before this returns, unless a provider
    /// was called for it.
    pub(crate) async fn give_back(mut self) {
        if self.called() {
            self.reservation = None;
        }
        if let Some(reservation) = self.reservation.take() {
            // A refund that cannot be written leaves the question counted: the safe side.
            let _ = self.store.write(move |txn| refund(txn, reservation)).await;
        }
    }
}

impl Drop for Question {
    fn drop(&mut self) {
        if self.called() {
            return;
        }
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let store = Arc::clone(&self.store);
        // A refund that cannot be written (no runtime, a failed write) leaves the question
        // counted: the safe side.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            // Not the question's statement's: that one is ending, and could not commit.
            crate::memory::spawn_detached(&handle, async move {
                let _ = store.write(move |txn| refund(txn, reservation)).await;
            });
        }
    }
}

/// Gives back a question that failed, unless its window has since been replaced.
pub(crate) fn refund(txn: &WriteTransaction, reservation: Reservation) -> Result<()> {
    let mut table = txn.open_table(QUESTIONS)?;
    let current = table.get(reservation.tenant.0)?.map(|v| v.value());
    if let Some((start, used)) = current {
        if start == reservation.window_start && used > 0 {
            table.insert(reservation.tenant.0, (start, used - 1))?;
        }
    }
    Ok(())
}

/// The window in force at `now` and the questions asked in it: a fresh one when the last
/// has ended (or none was started).
fn current_window(
    table: &impl ReadableTable<u64, (u64, u64)>,
    tenant: TenantId,
    plan: &PlanConfig,
    now: u64,
) -> Result<(u64, u64)> {
    Ok(match table.get(tenant.0)?.map(|v| v.value()) {
        Some((start, used)) if now < start.saturating_add(plan.window_secs) => (start, used),
        _ => (now, 0),
    })
}

/// A user's limits and usage: MindsDB's `MindLimitsConfig` as `GET /limits/` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// The plan tier.
    pub plan: String,
    /// Minds at once.
    pub minds: Usage,
    /// Datasources at once.
    pub datasources: Usage,
    /// Questions in the current window.
    pub questions: WindowUsage,
    /// Provider calls LLM-backed models made in the current window (one per row predicted).
    pub model_calls: WindowUsage,
    /// Whether the tier may register model-status callbacks.
    pub callbacks: bool,
    /// Bytes stored: tables, uploaded files and knowledge bases (`max_storage_mb`, in bytes).
    pub storage_bytes: Usage,
}

/// A counted quota's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The most allowed.
    pub limit: u64,
    /// In use now.
    pub used: u64,
    /// `limit - used`, never below 0.
    pub remaining: u64,
}

/// A windowed quota's figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowUsage {
    /// The most allowed per window.
    pub limit: u64,
    /// Used in the current window.
    pub used: u64,
    /// `limit - used`, never below 0.
    pub remaining: u64,
    /// The window's length in seconds.
    pub window_secs: u64,
    /// When the current window ends (`YYYY-MM-DD HH:MM:SS.ffffff` UTC); `None` when no window
    /// is running (the next question starts one).
    pub resets_at: Option<String>,
}

impl Usage {
    fn new(limit: u64, used: u64) -> Usage {
        Usage {
            limit,
            used,
            remaining: limit.saturating_sub(used),
        }
    }
}

/// The limits and usage of the user that is `tenant`, who has `minds` minds and
/// `datasources` datasources; NotFound for a tenant that is not a user.
pub(crate) fn limits(
    txn: &ReadTransaction,
    tenant: TenantId,
    hosted: &HostedConfig,
    (minds, datasources): (u64, u64),
    now: u64,
) -> Result<Limits> {
    let user = users::active(txn, tenant)?.ok_or_else(|| {
        Error::not_found("Limits apply to users of the hosted edition; this caller is none")
    })?;
    let plan = hosted
        .plans
        .get(&user.plan)
        .ok_or_else(|| Error::internal(format!("plan '{}' is not configured", user.plan)))?;
    let window = |table: TableDefinition<u64, (u64, u64)>, limit: u64| -> Result<WindowUsage> {
        let stored = txn.open_table(table)?.get(tenant.0)?.map(|v| v.value());
        let (used, resets_at) = match stored {
            Some((start, used)) if now < start.saturating_add(plan.window_secs) => {
                (used, Some(crate::time::unix_text(start + plan.window_secs)))
            }
            _ => (0, None),
        };
        let usage = Usage::new(limit, used);
        Ok(WindowUsage {
            limit: usage.limit,
            used: usage.used,
            remaining: usage.remaining,
            window_secs: plan.window_secs,
            resets_at,
        })
    };
    Ok(Limits {
        questions: window(QUESTIONS, plan.questions_per_window)?,
        model_calls: window(MODEL_CALLS, plan.model_calls_per_window)?,
        plan: user.plan,
        minds: Usage::new(plan.max_minds, minds),
        datasources: Usage::new(plan.max_datasources, datasources),
        callbacks: plan.callbacks,
        storage_bytes: Usage::new(
            plan.max_storage_mb.saturating_mul(1024 * 1024),
            crate::catalog::storage::used(txn, tenant)?,
        ),
    })
}
