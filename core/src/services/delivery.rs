//! Delivering model-status callbacks (hosted edition): one worker on the engine's runtime POSTs
//! each pending delivery of the outbox (`catalog::callbacks` keeps registrations, outbox and
//! log), signed in the Standard Webhooks style, retries on failure, and logs every attempt.
//!
//! At least once: a delivery leaves the outbox only after a 2xx (or its last failed attempt),
//! so one in flight when the process died is sent again on the next start; its `webhook-id`
//! stays the same, so receivers can drop the copy. A tenant's deliveries to one URL go one at a
//! time in outbox order, so a receiver sees them in the order they happened.
//!
//! Shared fairly: a plan caps a user's pending deliveries (events beyond the cap are logged as
//! not queued), each user has at most `max_concurrent_deliveries_per_user` in flight, and free
//! slots go round the users in turn, so one user's slow receivers cannot hold every slot.
//! Deliveries connect under the egress policy.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

use crate::catalog::callbacks::{self, now_ms, Callback, Outcome, Pending};
use crate::config::{CallbacksConfig, HostedConfig};
use crate::egress::{self, Egress, HttpClient};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tenant::TenantId;

/// Bytes of a receiver's answer read at most.
const BODY_CAP: usize = 4096;

/// The delivery worker: one task on the engine's runtime, woken by every commit and by the
/// next retry coming due.
pub(crate) struct Worker {
    /// Weak, so a closed engine's file closes at once: nothing here keeps it open.
    store: std::sync::Weak<Store>,
    client: HttpClient,
    permits: Arc<tokio::sync::Semaphore>,
    /// Deliveries in flight per tenant, each at most `per_user`.
    per_tenant: Arc<parking_lot::Mutex<HashMap<u64, usize>>>,
    per_user: usize,
    /// Where the last round of starts began, so the next begins with the tenant after it.
    turn: Arc<std::sync::atomic::AtomicU64>,
    /// (tenant, URL) pairs with a delivery in flight: the tenant's next one to that URL waits
    /// for it. Keyed by tenant too, so one user's failing receiver never holds up another's.
    busy: Arc<parking_lot::Mutex<HashSet<(u64, String)>>>,
    /// Outbox rows in flight, whatever URL their callback has now (a PUT may change it).
    in_flight: Arc<parking_lot::Mutex<HashSet<u64>>>,
    /// Plans, to stop sending for users whose plan lost callbacks or who were disabled.
    hosted: HostedConfig,
    /// Attempts kept in each callback's log; older ones are dropped as new ones are written.
    log_entries: usize,
}

impl Worker {
    /// The worker for `store`, not yet started.
    pub(crate) fn new(
        store: Arc<Store>,
        config: &CallbacksConfig,
        hosted: &HostedConfig,
        egress: &Egress,
    ) -> Result<Worker> {
        // A receiver names where it is; it does not get to send us elsewhere (no redirects).
        let client =
            egress.http_client(concat!("mindlite-callbacks/", env!("CARGO_PKG_VERSION")))?;
        let worker = Worker {
            store: Arc::downgrade(&store),
            client,
            per_tenant: Arc::new(parking_lot::Mutex::new(HashMap::new())),
            per_user: config.max_concurrent_deliveries_per_user.max(1),
            turn: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            permits: Arc::new(tokio::sync::Semaphore::new(
                config.max_concurrent_deliveries.max(1),
            )),
            busy: Arc::new(parking_lot::Mutex::new(HashSet::new())),
            in_flight: Arc::new(parking_lot::Mutex::new(HashSet::new())),
            hosted: hosted.clone(),
            log_entries: config.log_entries.max(1),
        };
        Ok(worker)
    }

    /// Starts the worker on `handle`'s runtime.
    pub(crate) fn start(self, handle: &tokio::runtime::Handle) {
        crate::memory::spawn_detached(handle, self.run());
    }

    async fn run(self) {
        let Some(committed) = self.store.upgrade().map(|s| s.committed()) else {
            return;
        };
        loop {
            let Some(store) = self.store.upgrade() else {
                return;
            };
            let due = self.start_due(&store).await;
            drop(store);
            let wait = match due {
                Ok(wait) => wait,
                // A read that fails now (the file closing) is tried again shortly.
                Err(_) => Some(Duration::from_secs(1)),
            };
            match wait {
                Some(wait) => {
                    let _ = tokio::time::timeout(wait, committed.notified()).await;
                }
                None => committed.notified().await,
            }
        }
    }

    /// Starts every delivery that is due and whose URL is free; returns how long until the
    /// next one comes due (`None`: nothing waits on time).
    async fn start_due(&self, store: &Arc<Store>) -> Result<Option<Duration>> {
        // Taken before the snapshot: a delivery that finished after this point committed
        // before its lane was freed, so the snapshot below already shows its outcome; one
        // still running is skipped. (Read after the snapshot, a lane freed in between would
        // let the snapshot's stale row be sent again.)
        let (busy, in_flight) = (self.busy.lock().clone(), self.in_flight.lock().clone());
        let txn = store.read()?;
        // The first pending delivery per tenant and URL, in outbox order.
        let mut heads: BTreeMap<(u64, String), (u64, Pending, Callback)> = BTreeMap::new();
        let mut refused = Vec::new();
        // Per tenant: why its events are not sent (if so), its plan's pending cap, and how
        // many of its deliveries were counted so far.
        let mut tenants: HashMap<u64, Standing> = HashMap::new();
        callbacks::for_each_pending(&txn, |seq, pending, callback| {
            let tenant = match tenants.entry(pending.tenant) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(self.standing(&txn, TenantId(pending.tenant))?)
                }
            };
            tenant.2 += 1;
            if in_flight.contains(&seq) {
                // Its lane (under the URL it has now) waits for it, whatever came first.
                heads.insert(
                    (pending.tenant, callback.url.clone()),
                    (seq, pending, callback),
                );
                return Ok(());
            }
            if let Some(reason) = &tenant.0 {
                refused.push((seq, pending, callback, reason.clone()));
                return Ok(());
            }
            if let Some((plan, cap)) = &tenant.1 {
                // The newest beyond the cap are dropped: a full queue takes no more.
                if pending.attempts == 0 && tenant.2 > *cap {
                    tenant.2 -= 1;
                    let reason = format!(
                        "not queued: {cap} deliveries were already pending for this user (max_pending_deliveries of plan '{plan}')"
                    );
                    refused.push((seq, pending, callback, reason));
                    return Ok(());
                }
            }
            heads
                .entry((pending.tenant, callback.url.clone()))
                .or_insert((seq, pending, callback));
            Ok(())
        })?;
        drop(txn);
        if !refused.is_empty() {
            let keep = self.log_entries;
            store
                .write_detached(move |txn| {
                    for (seq, pending, callback, reason) in refused {
                        callbacks::record_attempt(
                            txn,
                            seq,
                            &pending,
                            &callback,
                            Outcome::refused(reason),
                            true,
                            keep,
                        )?;
                    }
                    Ok(())
                })
                .await?;
        }
        let now = now_ms();
        let mut next: Option<u64> = None;
        for (lane, (seq, pending, callback)) in self.in_turns(heads) {
            if busy.contains(&lane) || self.busy.lock().contains(&lane) || in_flight.contains(&seq)
            {
                continue;
            }
            if pending.next_at > now {
                next = Some(next.map_or(pending.next_at, |n| n.min(pending.next_at)));
                continue;
            }
            let tenant = lane.0;
            if self.per_tenant.lock().get(&tenant).copied().unwrap_or(0) >= self.per_user {
                // This user's share is in flight; its finishing delivery wakes us again.
                continue;
            }
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                // All slots taken: a finishing delivery commits, which wakes us again.
                continue;
            };
            self.turn
                .store(tenant, std::sync::atomic::Ordering::Relaxed);
            *self.per_tenant.lock().entry(tenant).or_insert(0) += 1;
            self.busy.lock().insert(lane.clone());
            self.in_flight.lock().insert(seq);
            let committed = store.committed();
            let keep = self.log_entries;
            let (store, client, busy, in_flight, per_tenant) = (
                Arc::downgrade(store),
                self.client.clone(),
                Arc::clone(&self.busy),
                Arc::clone(&self.in_flight),
                Arc::clone(&self.per_tenant),
            );
            crate::memory::spawn_detached(&tokio::runtime::Handle::current(), async move {
                // Still pending as read, and its callback still there? A delete may have
                // landed since the snapshot.
                if still_due(&store, seq, &pending) {
                    if pending.recheck && !filter_passes(&callback, &pending).await {
                        // Written before its filter was compiled here, and the filter turns
                        // it away: it goes without an attempt.
                        if let Some(store) = store.upgrade() {
                            let _ = store
                                .write_detached(move |txn| {
                                    callbacks::drop_filtered(txn, seq, &pending)
                                })
                                .await;
                        }
                    } else {
                        let outcome = attempt(&client, &callback, &pending).await;
                        if let Some(store) = store.upgrade() {
                            // A failed write leaves the delivery due: it is tried again.
                            let _ = record(&store, seq, &pending, &callback, outcome, false, keep)
                                .await;
                        }
                    }
                }
                busy.lock().remove(&lane);
                in_flight.lock().remove(&seq);
                {
                    let mut counts = per_tenant.lock();
                    if let Some(count) = counts.get_mut(&tenant) {
                        *count -= 1;
                        if *count == 0 {
                            counts.remove(&tenant);
                        }
                    }
                }
                drop(permit);
                // The commit above woke the loop while this lane was still busy: wake it
                // again now that the lane (and a slot) is free.
                committed.notify_one();
            });
        }
        Ok(next.map(|at| Duration::from_millis(at.saturating_sub(now_ms()).max(1))))
    }

    /// The lanes' heads in turns: each tenant's first, then each one's second, and so on,
    /// beginning with the tenant after the one that last got a slot, so free slots go round.
    #[allow(clippy::type_complexity)]
    fn in_turns(
        &self,
        heads: BTreeMap<(u64, String), (u64, Pending, Callback)>,
    ) -> Vec<((u64, String), (u64, Pending, Callback))> {
        let mut by_tenant: BTreeMap<u64, Vec<((u64, String), (u64, Pending, Callback))>> =
            BTreeMap::new();
        for (lane, head) in heads {
            by_tenant.entry(lane.0).or_default().push((lane, head));
        }
        let last = self.turn.load(std::sync::atomic::Ordering::Relaxed);
        let mut order: Vec<Vec<_>> = Vec::new();
        let (after, upto): (Vec<_>, Vec<_>) = by_tenant.into_iter().partition(|(t, _)| *t > last);
        for (_, lanes) in after.into_iter().chain(upto) {
            order.push(lanes.into_iter().rev().collect());
        }
        let mut out = Vec::new();
        loop {
            let mut any = false;
            for lanes in order.iter_mut() {
                if let Some(head) = lanes.pop() {
                    out.push(head);
                    any = true;
                }
            }
            if !any {
                return out;
            }
        }
    }

    /// Why `tenant`'s events are not sent at all (disabled, or its plan lost callbacks), if so,
    /// and its plan's cap on pending deliveries.
    fn standing(&self, txn: &redb::ReadTransaction, tenant: TenantId) -> Result<Standing> {
        let refusal = self.refusal(txn, tenant)?;
        let cap = match crate::catalog::users::active(txn, tenant) {
            Ok(Some(user)) => self
                .hosted
                .plans
                .get(&user.plan)
                .map(|plan| (user.plan.clone(), plan.max_pending_deliveries)),
            _ => None,
        };
        Ok((refusal, cap, 0))
    }

    /// Why `tenant`'s events are no longer sent (disabled, or its plan lost callbacks), if so.
    fn refusal(&self, txn: &redb::ReadTransaction, tenant: TenantId) -> Result<Option<String>> {
        let user = match crate::catalog::users::active(txn, tenant) {
            Ok(Some(user)) => user,
            Ok(None) => return Ok(Some("not sent: the owner is not a user".into())),
            Err(e) if e.kind() == crate::ErrorKind::Forbidden => {
                return Ok(Some("not sent: the user is disabled".into()))
            }
            Err(e) => return Err(e),
        };
        let allowed = self
            .hosted
            .plans
            .get(&user.plan)
            .is_some_and(|plan| plan.callbacks);
        Ok(
            (!allowed)
                .then(|| format!("not sent: plan '{}' does not include callbacks", user.plan)),
        )
    }
}

/// A tenant as one pass over the outbox sees it: why its events are not sent (if so), its
/// plan and cap on pending deliveries, and how many of its deliveries were counted so far.
type Standing = (Option<String>, Option<(String, u64)>, u64);

/// Whether `callback`'s filter lets `pending`'s event through, compiled off the async workers.
async fn filter_passes(callback: &Callback, pending: &Pending) -> bool {
    let (callback, pending) = (callback.clone(), pending.clone());
    tokio::task::spawn_blocking(move || callbacks::filter_passes(&callback, &pending))
        .await
        .unwrap_or(true)
}

/// Whether outbox row `seq` still holds `pending` unchanged and its callback still exists.
fn still_due(store: &std::sync::Weak<Store>, seq: u64, pending: &Pending) -> bool {
    let Some(store) = store.upgrade() else {
        return false;
    };
    store
        .read()
        .and_then(|txn| callbacks::still_due(&txn, seq, pending))
        .unwrap_or(false)
}

async fn attempt(client: &HttpClient, callback: &Callback, pending: &Pending) -> Outcome {
    let started = chrono::Utc::now();
    let clock = std::time::Instant::now();
    let timestamp = started.timestamp();
    let sent = async {
        let signature = signature(
            &callback.secret,
            &pending.event_id,
            timestamp,
            &pending.body,
        )
        .map_err(|e| e.to_string())?;
        client
            .post(&callback.url)
            .map_err(|refused| refused.to_string())?
            .header("content-type", "application/json")
            .header("webhook-id", &pending.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(pending.body.clone())
            .send()
            .await
            .map_err(|e| egress::http_reason(&e))
    };
    let limit = Duration::from_secs(u64::from(callback.http_timeout));
    let (status, error) = match tokio::time::timeout(limit, sent).await {
        Ok(Ok(mut response)) => {
            let status = response.status().as_u16();
            // The status decides. A little of the body is read (so the connection can be
            // reused), briefly, and whatever happens there changes nothing.
            let drain = async {
                let mut read = 0;
                while read < BODY_CAP {
                    match response.chunk().await {
                        Ok(Some(chunk)) => read += chunk.len(),
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
            if (200..300).contains(&status) {
                (Some(status), None)
            } else {
                (
                    Some(status),
                    Some(format!("the receiver answered {status}")),
                )
            }
        }
        Ok(Err(error)) => (None, Some(error)),
        Err(_) => (
            None,
            Some(format!("timed out after {} s", callback.http_timeout)),
        ),
    };
    Outcome {
        started,
        duration_ms: clock.elapsed().as_millis() as u64,
        status,
        error,
    }
}

/// Logs an attempt and settles its delivery ([`callbacks::record_attempt`]) in a write of its own.
async fn record(
    store: &Arc<Store>,
    seq: u64,
    pending: &Pending,
    callback: &Callback,
    outcome: Outcome,
    give_up: bool,
    keep: usize,
) -> Result<()> {
    let (pending, callback) = (pending.clone(), callback.clone());
    store
        .write_detached(move |txn| {
            callbacks::record_attempt(txn, seq, &pending, &callback, outcome, give_up, keep)
        })
        .await
}

/// The Standard Webhooks signature header value: `v1,` and the base64 HMAC-SHA256 of
/// `id.timestamp.body` keyed with the secret's bytes.
pub(crate) fn signature(secret: &str, id: &str, timestamp: i64, body: &str) -> Result<String> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .map_err(|e| Error::internal(format!("a stored signing secret is not base64: {e}")))?;
    let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&key)
        .map_err(|e| Error::internal(format!("signing key: {e}")))?;
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let tag = mac.finalize().into_bytes();
    Ok(format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(tag)
    ))
}
