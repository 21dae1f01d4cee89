//! Who may start what, now: a user's plan caps the statements it has running and the models it
//! has training at once (the local tenant has no cap) and the memory they hold together (the
//! user's memory account, the parent of its statements' accounts), and callers without
//! credentials are rate-limited by a key the front chooses (the HTTP server uses the client's
//! address). Counts live in memory: they describe work in flight in this process, which a
//! restart ends.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::HostedConfig;
use crate::error::{Error, Result};
use crate::memory::Account;
use crate::tenant::TenantId;

/// What a user has running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Work {
    /// A statement, from its start until its result is read or dropped.
    Statement,
    /// A model version training.
    Training,
}

impl Work {
    fn describe(self) -> &'static str {
        match self {
            Work::Statement => "statements running at once (max_running_statements)",
            Work::Training => "models training at once (max_running_trainings)",
        }
    }
}

/// The engine's admission state.
#[derive(Debug)]
pub(crate) struct Admission {
    hosted: HostedConfig,
    running: Mutex<HashMap<(u64, Work), u64>>,
    /// Each user's memory account, open while any of its statements holds it.
    memory: Mutex<HashMap<u64, Weak<Account>>>,
    unauthenticated: RateLimiter,
}

/// A place taken by one piece of work; dropping it gives the place back.
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    key: (u64, Work),
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut running = self.admission.running.lock();
        if let Some(count) = running.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                running.remove(&self.key);
            }
        }
    }
}

impl Admission {
    pub(crate) fn new(hosted: &HostedConfig, unauthenticated_per_minute: u32) -> Admission {
        Admission {
            hosted: hosted.clone(),
            running: Mutex::new(HashMap::new()),
            memory: Mutex::new(HashMap::new()),
            unauthenticated: RateLimiter::new(unauthenticated_per_minute),
        }
    }

    /// Takes a place for `work` by `tenant`, whose plan is `plan` (`None`: no plan, no cap).
    /// Over the plan's cap it is [`ErrorKind::QuotaExceeded`](crate::ErrorKind), naming it.
    pub(crate) fn admit(
        self: &Arc<Self>,
        tenant: TenantId,
        plan: Option<&str>,
        work: Work,
    ) -> Result<Ticket> {
        let limit = plan.and_then(|name| {
            let plan = self.hosted.plans.get(name)?;
            Some(match work {
                Work::Statement => plan.max_running_statements,
                Work::Training => plan.max_running_trainings,
            })
        });
        let key = (tenant.0, work);
        let mut running = self.running.lock();
        let count = running.entry(key).or_insert(0);
        if let (Some(limit), Some(plan)) = (limit, plan) {
            if *count >= limit {
                let used = *count;
                if used == 0 {
                    running.remove(&key);
                }
                return Err(Error::quota_exceeded(
                    format!(
                        "Limit reached: {} (limit {limit}, running {used}) on plan '{plan}'; wait for one to finish",
                        work.describe()
                    ),
                    Some(1),
                ));
            }
        }
        *count += 1;
        Ok(Ticket {
            admission: Arc::clone(self),
            key,
        })
    }

    /// The account `tenant`'s statements share, limited by its plan's `max_memory_mb` (0: no
    /// limit); `None` without a plan (the local tenant). It is also the unit of the threads'
    /// sharing (`memory::set_share`), so every user with a plan has one, capped or not.
    pub(crate) fn tenant_memory(
        &self,
        tenant: TenantId,
        plan: Option<&str>,
    ) -> Option<Arc<Account>> {
        let limit = self.hosted.plans.get(plan?)?.max_memory_mb;
        let mut accounts = self.memory.lock();
        if let Some(account) = accounts.get(&tenant.0).and_then(Weak::upgrade) {
            return Some(account);
        }
        accounts.retain(|_, account| account.strong_count() > 0);
        let limit = (limit > 0).then(|| limit.saturating_mul(1 << 20));
        let account = Arc::new(Account::open(limit, None)?);
        accounts.insert(tenant.0, Arc::downgrade(&account));
        Some(account)
    }

    /// Counts a request without valid credentials from `client`; over
    /// `http.unauthenticated_per_minute` it is QuotaExceeded with the seconds to wait.
    pub(crate) fn throttle_unauthenticated(&self, client: &str) -> Result<()> {
        self.unauthenticated.take(client).map_err(|wait| {
            Error::quota_exceeded(
                format!(
                    "Too many requests without valid credentials from this address (http.unauthenticated_per_minute = {}); try again in {wait} s",
                    self.unauthenticated.per_minute
                ),
                Some(wait),
            )
        })
    }
}

/// Token buckets by key: each holds up to `per_minute` requests and refills at that rate.
#[derive(Debug)]
struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// Keys remembered at most; beyond it, buckets that are full again are forgotten first.
const MAX_KEYS: usize = 100_000;

impl RateLimiter {
    fn new(per_minute: u32) -> RateLimiter {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request for `key`; `Err(seconds)` to wait when its bucket is empty.
    fn take(&self, key: &str) -> std::result::Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_minute);
        let rate = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            let full = |(tokens, at): &(f64, Instant)| {
                tokens + now.duration_since(*at).as_secs_f64() * rate >= capacity
            };
            buckets.retain(|_, bucket| !full(bucket));
            if buckets.len() >= MAX_KEYS {
                // Every remembered client is still throttled: a new one waits its turn too.
                return Err(1);
            }
        }
        let (tokens, at) = buckets.entry(key.to_string()).or_insert((capacity, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(capacity);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            let wait = Duration::from_secs_f64((1.0 - *tokens) / rate);
            Err(wait.as_secs().max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_plan_caps_work_running_at_once_and_places_come_back() {
        let admission = Arc::new(Admission::new(&HostedConfig::default(), 60));
        let user = TenantId(7);
        // The default free plan: 4 statements, 1 training.
        let held: Vec<Ticket> = (0..4)
            .map(|_| {
                admission
                    .admit(user, Some("free"), Work::Statement)
                    .unwrap()
            })
            .collect();
        let err = admission
            .admit(user, Some("free"), Work::Statement)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
        assert!(err.message().contains("max_running_statements"), "{err}");
        assert!(err.message().contains("limit 4"), "{err}");
        // Another user, and another kind of work, are not affected.
        admission
            .admit(TenantId(8), Some("free"), Work::Statement)
            .unwrap();
        let training = admission.admit(user, Some("free"), Work::Training).unwrap();
        assert!(admission.admit(user, Some("free"), Work::Training).is_err());
        drop(training);
        admission.admit(user, Some("free"), Work::Training).unwrap();
        drop(held);
        admission
            .admit(user, Some("free"), Work::Statement)
            .unwrap();
        // No plan, no cap.
        let local: Vec<Ticket> = (0..100)
            .map(|_| {
                admission
                    .admit(TenantId::LOCAL, None, Work::Statement)
                    .unwrap()
            })
            .collect();
        assert_eq!(local.len(), 100);
    }

    #[test]
    fn unauthenticated_requests_are_limited_per_key() {
        let admission = Admission::new(&HostedConfig::default(), 3);
        for _ in 0..3 {
            admission.throttle_unauthenticated("10.0.0.1").unwrap();
        }
        let err = admission.throttle_unauthenticated("10.0.0.1").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
        assert!(err.retry_after().is_some_and(|s| s >= 1), "{err:?}");
        admission.throttle_unauthenticated("10.0.0.2").unwrap();
        let off = Admission::new(&HostedConfig::default(), 0);
        for _ in 0..1000 {
            off.throttle_unauthenticated("x").unwrap();
        }
    }
}
