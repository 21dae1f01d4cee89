//! Model-status callbacks (hosted edition): a tenant registers URLs with filters and
//! attempt settings; every model transition into `complete` or `error` writes one delivery per
//! matching callback into the outbox, in the status change's own transaction; a worker POSTs
//! each, signed in the Standard Webhooks style, retries on failure, and logs every attempt.
//!
//! Owns the redb tables `callbacks` ((tenant, id) → registration), `callback_outbox` (sequence
//! → pending delivery) and `callback_deliveries` ((tenant, callback id, n) → attempt log).
//!
//! At least once: a delivery leaves the outbox only after a 2xx (or its last failed attempt),
//! so one in flight when the process died is sent again on the next start; its `webhook-id`
//! stays the same, so receivers can drop the copy. A tenant's deliveries to one URL go one at a
//! time in outbox order, so a receiver sees them in the order they happened.
//!
//! Shared fairly: a plan caps a user's callbacks and pending deliveries (events beyond the
//! cap are logged as not queued), each user has at most `max_concurrent_deliveries_per_user`
//! in flight, and free slots go round the users in turn, so one user's slow receivers cannot
//! hold every slot. Deliveries connect under the egress policy.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::Sha256;

use crate::config::{CallbacksConfig, HostedConfig};
use crate::egress::{self, Egress, HttpClient};
use crate::error::{Error, Result};
use crate::store::schema::{CALLBACKS, DELIVERY_LOG, OUTBOX};
use crate::store::{self, Store};
use crate::tenant::TenantId;

/// Bounds of a registration's `attempt` values.
const MAX_COUNT: u64 = 20;
const MAX_INTERVAL: u64 = 86_400;
const MAX_HTTP_TIMEOUT: u64 = 300;
/// Bytes of a receiver's answer read (and kept in the log) at most.
const BODY_CAP: usize = 4096;
/// Bytes of a URL accepted.
const MAX_URL: usize = 2048;

/// A registered callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Callback {
    pub(crate) id: u64,
    pub(crate) url: String,
    /// Python-style regex the model's name must match from its start; `None` matches all.
    pub(crate) model_name: Option<String>,
    /// The same for the project's name.
    pub(crate) project_name: Option<String>,
    pub(crate) count: u32,
    pub(crate) interval: u32,
    pub(crate) http_timeout: u32,
    /// `whsec_` and the base64 of the signing key.
    pub(crate) secret: String,
    /// Unix seconds.
    pub(crate) created_at: u64,
}

impl Callback {
    /// `{"id", "created_at", "url"}` with an HTTP-date, as MindsDB lists callbacks.
    pub(crate) fn to_list_json(&self) -> Value {
        json!({"id": self.id, "created_at": http_date(self.created_at as i64), "url": self.url})
    }

    /// Every setting, the secret left out.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "url": self.url,
            "created_at": http_date(self.created_at as i64),
            "filter": {"model_name": self.model_name, "project_name": self.project_name},
            "attempt": {"count": self.count, "interval": self.interval, "http_timeout": self.http_timeout},
        })
    }
}

/// A delivery waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    tenant: u64,
    callback: u64,
    /// `webhook-id`: the same on every attempt.
    event_id: String,
    /// The JSON body, fixed when the event happened.
    body: String,
    /// Attempts made so far.
    attempts: u32,
    /// Unix milliseconds before which no attempt is made.
    next_at: u64,
    /// Unix milliseconds when the event was written.
    enqueued_at: u64,
}

/// One attempt, as the delivery log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Attempt {
    pub(crate) event_id: String,
    /// 1 for the first attempt of an event.
    pub(crate) attempt: u32,
    /// When the attempt started, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub(crate) at: String,
    /// When the event was written to the outbox, Unix milliseconds.
    pub(crate) enqueued_at: u64,
    /// Milliseconds the attempt took.
    pub(crate) duration_ms: u64,
    /// The receiver's HTTP status, if it answered.
    pub(crate) status: Option<u16>,
    /// Why the attempt failed, if it did.
    pub(crate) error: Option<String>,
    /// Whether this attempt delivered the event.
    pub(crate) delivered: bool,
}

/// Creates the tables in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(CALLBACKS)?;
    txn.open_table(OUTBOX)?;
    txn.open_table(DELIVERY_LOG)?;
    Ok(())
}

/// Registers a callback from MindsDB's body `{url, filter: {model_name, project_name},
/// attempt: {count, interval, http_timeout}}`, within the plan's `max_callbacks` (`limit`).
/// Returns it, secret included.
pub(crate) fn register(
    txn: &WriteTransaction,
    tenant: TenantId,
    body: &Map<String, Value>,
    defaults: &CallbacksConfig,
    egress: &Egress,
    limit: Option<(&str, u64)>,
) -> Result<Callback> {
    let url = check_url(body.get("url"), egress)?;
    if let Some((plan, limit)) = limit {
        let used = txn
            .open_table(CALLBACKS)?
            .range((tenant.0, 0)..=(tenant.0, u64::MAX))?
            .count() as u64;
        if used >= limit {
            return Err(Error::quota_exceeded(
                format!(
                    "Quota exceeded: callbacks (limit {limit}, used {used}) on plan '{plan}'; delete one to register another"
                ),
                None,
            ));
        }
    }
    let (model_name, project_name) = read_filter(body.get("filter"))?;
    let attempt = body.get("attempt").unwrap_or(&Value::Null);
    if !attempt.is_null() && !attempt.is_object() {
        return Err(Error::invalid(
            "'attempt' must be an object like {\"count\": 3, \"interval\": 10, \"http_timeout\": 5}",
        ));
    }
    let mut key = [0u8; 24];
    getrandom::fill(&mut key)
        .map_err(|e| Error::internal(format!("no randomness for a signing secret: {e}")))?;
    let callback = Callback {
        id: store::next_tenant_id(txn, tenant, "callback")?,
        url,
        model_name,
        project_name,
        count: bounded(attempt, "count", defaults.count, MAX_COUNT)?,
        interval: bounded(attempt, "interval", defaults.interval_secs, MAX_INTERVAL)?,
        http_timeout: bounded(
            attempt,
            "http_timeout",
            defaults.http_timeout_secs,
            MAX_HTTP_TIMEOUT,
        )?,
        secret: format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        ),
        created_at: crate::time::now_unix(),
    };
    put(txn, tenant, &callback)?;
    Ok(callback)
}

/// Changes a callback: `url`, and `filter` or `attempt` when given.
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    id: u64,
    body: &Map<String, Value>,
    egress: &Egress,
) -> Result<Callback> {
    let mut callback = get(&txn.open_table(CALLBACKS)?, tenant, id)?;
    if body.contains_key("url") {
        callback.url = check_url(body.get("url"), egress)?;
    }
    if let Some(filter) = body.get("filter") {
        (callback.model_name, callback.project_name) = read_filter(Some(filter))?;
    }
    if let Some(attempt) = body.get("attempt").filter(|a| !a.is_null()) {
        if !attempt.is_object() {
            return Err(Error::invalid("'attempt' must be an object"));
        }
        callback.count = bounded(attempt, "count", callback.count, MAX_COUNT)?;
        callback.interval = bounded(attempt, "interval", callback.interval, MAX_INTERVAL)?;
        callback.http_timeout = bounded(
            attempt,
            "http_timeout",
            callback.http_timeout,
            MAX_HTTP_TIMEOUT,
        )?;
    }
    put(txn, tenant, &callback)?;
    Ok(callback)
}

/// Deletes a callback with its pending deliveries (never sent after this) and its log.
pub(crate) fn delete(txn: &WriteTransaction, tenant: TenantId, id: u64) -> Result<()> {
    if txn.open_table(CALLBACKS)?.remove((tenant.0, id))?.is_none() {
        return Err(missing(id));
    }
    let mut outbox = txn.open_table(OUTBOX)?;
    let mut gone = Vec::new();
    for entry in outbox.iter()? {
        let (seq, pending) = entry?;
        let pending: Pending = serde_json::from_str(pending.value())?;
        if pending.tenant == tenant.0 && pending.callback == id {
            gone.push(seq.value());
        }
    }
    for seq in gone {
        outbox.remove(seq)?;
    }
    let mut log = txn.open_table(DELIVERY_LOG)?;
    let keys: Vec<(u64, u64, u64)> = log
        .range((tenant.0, id, 0)..=(tenant.0, id, u64::MAX))?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<std::result::Result<_, _>>()?;
    for key in keys {
        log.remove(key)?;
    }
    Ok(())
}

/// The tenant's callbacks, by id.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, u64), &'static str>,
    tenant: TenantId,
) -> Result<Vec<Callback>> {
    let mut out = Vec::new();
    for entry in table.range((tenant.0, 0)..=(tenant.0, u64::MAX))? {
        out.push(serde_json::from_str(entry?.1.value())?);
    }
    Ok(out)
}

/// One callback; NotFound for an unknown id, and for another tenant's.
pub(crate) fn get(
    table: &impl ReadableTable<(u64, u64), &'static str>,
    tenant: TenantId,
    id: u64,
) -> Result<Callback> {
    match table.get((tenant.0, id))? {
        Some(record) => Ok(serde_json::from_str(record.value())?),
        None => Err(missing(id)),
    }
}

/// The attempts made for a callback, oldest first.
pub(crate) fn attempts(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    id: u64,
) -> Result<Vec<Attempt>> {
    get(&txn.open_table(CALLBACKS)?, tenant, id)?;
    let log = txn.open_table(DELIVERY_LOG)?;
    let mut out = Vec::new();
    for entry in log.range((tenant.0, id, 0)..=(tenant.0, id, u64::MAX))? {
        out.push(serde_json::from_str(entry?.1.value())?);
    }
    Ok(out)
}

/// Read-side access to the registrations, for the engine's listing.
pub(crate) fn table(
    txn: &redb::ReadTransaction,
) -> Result<redb::ReadOnlyTable<(u64, u64), &'static str>> {
    Ok(txn.open_table(CALLBACKS)?)
}

fn put(txn: &WriteTransaction, tenant: TenantId, callback: &Callback) -> Result<()> {
    txn.open_table(CALLBACKS)?.insert(
        (tenant.0, callback.id),
        serde_json::to_string(callback)?.as_str(),
    )?;
    Ok(())
}

fn missing(id: u64) -> Error {
    Error::not_found(format!("Callback {id} not found"))
}

/// A callback URL: http or https with a host, and no address the egress policy refuses
/// (names are checked again at every delivery, as they resolve then).
fn check_url(url: Option<&Value>, egress: &Egress) -> Result<String> {
    let text = match url {
        Some(Value::String(text)) if !text.is_empty() => text,
        _ => return Err(Error::invalid("'url' is required: an http or https URL")),
    };
    if text.len() > MAX_URL {
        return Err(Error::invalid(format!(
            "'url' is longer than {MAX_URL} bytes"
        )));
    }
    let parsed = reqwest::Url::parse(text)
        .map_err(|e| Error::invalid(format!("'url' is not a URL ({e}): {text}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::invalid(format!(
            "'url' must use http or https, not '{}': {text}",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(format!("'url' has no host: {text}")));
    }
    egress
        .check_url_text(text)
        .map_err(|e| Error::new(e.kind(), format!("'url' was {}", e.message())))?;
    Ok(text.clone())
}

/// `filter`'s two patterns, each checked to compile.
fn read_filter(filter: Option<&Value>) -> Result<(Option<String>, Option<String>)> {
    let filter = match filter {
        None | Some(Value::Null) => return Ok((None, None)),
        Some(Value::Object(filter)) => filter,
        Some(_) => {
            return Err(Error::invalid(
                "'filter' must be an object like {\"model_name\": \"regex\", \"project_name\": \"regex\"}",
            ))
        }
    };
    if let Some(other) = filter
        .keys()
        .find(|k| !matches!(k.as_str(), "model_name" | "project_name"))
    {
        return Err(Error::invalid(format!(
            "'filter.{other}' is not a filter; use model_name and project_name"
        )));
    }
    let pattern = |key: &str| -> Result<Option<String>> {
        match filter.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(pattern)) => {
                compile(pattern).map_err(|e| {
                    Error::invalid(format!("'filter.{key}' is not a valid regex: {e}"))
                })?;
                Ok(Some(pattern.clone()))
            }
            Some(_) => Err(Error::invalid(format!(
                "'filter.{key}' must be a regex (a string)"
            ))),
        }
    };
    Ok((pattern("model_name")?, pattern("project_name")?))
}

/// A pattern anchored at the start, as Python's `re.match` applies it. The pattern is first
/// compiled alone, so one that only parses inside the wrapper (`a)|(b`) is refused.
fn compile(pattern: &str) -> std::result::Result<regex::Regex, regex::Error> {
    let build = |text: &str| regex::RegexBuilder::new(text).size_limit(1 << 20).build();
    build(pattern)?;
    build(&format!("^(?:{pattern})"))
}

/// An `attempt` value: a whole number from 1 to `max`, or `default` when absent.
fn bounded(attempt: &Value, key: &str, default: u32, max: u64) -> Result<u32> {
    match attempt.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => match value.as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(n as u32),
            _ => Err(Error::invalid(format!(
                "'attempt.{key}' must be a whole number from 1 to {max}, got {value}"
            ))),
        },
    }
}

fn matches(pattern: &Option<String>, text: &str) -> bool {
    match pattern {
        None => true,
        // Patterns compiled at registration; one that no longer compiles matches nothing.
        Some(pattern) => compile(pattern).is_ok_and(|re| re.is_match(text)),
    }
}

/// A model version's status change, as callbacks see it: the `models` module describes its
/// changes this way, so this module needs nothing of its records.
pub(crate) struct StatusChange<'a> {
    pub(crate) project: &'a str,
    pub(crate) name: &'a str,
    pub(crate) version: u32,
    pub(crate) active: bool,
    pub(crate) model_id: u64,
    /// When the version was created, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub(crate) created_at: &'a str,
    pub(crate) old_status: Option<&'a str>,
    pub(crate) new_status: &'a str,
}

/// The statuses whose changes are delivered: the ends of training.
const DELIVERED: [&str; 2] = ["complete", "error"];

/// Writes one delivery per matching callback of `tenant` for `change`, when its new status is
/// `complete` or `error`. Runs in the status change's transaction, so the change and its
/// deliveries land together or not at all.
pub(crate) fn enqueue(
    txn: &WriteTransaction,
    tenant: TenantId,
    model: &StatusChange,
) -> Result<()> {
    if !DELIVERED.contains(&model.new_status) {
        return Ok(());
    }
    let callbacks = list(&txn.open_table(CALLBACKS)?, tenant)?;
    let chosen: Vec<&Callback> = callbacks
        .iter()
        .filter(|c| matches(&c.model_name, model.name) && matches(&c.project_name, model.project))
        .collect();
    if chosen.is_empty() {
        return Ok(());
    }
    let now = chrono::Utc::now();
    let body = json!({
        "name": model.name,
        "version": model.version,
        "active": model.active,
        "predictor_id": model.model_id,
        "project_name": model.project,
        "predictor_created_at": http_date_of_text(model.created_at),
        "old_status": model.old_status,
        "new_status": model.new_status,
        "changed_at": http_date(now.timestamp()),
    })
    .to_string();
    let mut outbox = txn.open_table(OUTBOX)?;
    for callback in chosen {
        let seq = store::next_id(txn, "callback_delivery")?;
        // Numbered per tenant: a receiver learns nothing of other tenants' events from gaps.
        let number = store::next_tenant_id(txn, tenant, "callback_event")?;
        let pending = Pending {
            tenant: tenant.0,
            callback: callback.id,
            event_id: format!("msg_{number:012}_{}", random_hex(8)?),
            body: body.clone(),
            attempts: 0,
            next_at: 0,
            enqueued_at: now.timestamp_millis().max(0) as u64,
        };
        outbox.insert(seq, serde_json::to_string(&pending)?.as_str())?;
    }
    Ok(())
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// `Day, DD Mon YYYY HH:MM:SS GMT`.
pub(crate) fn http_date(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// MindsDB's stored time text as an HTTP-date (the text itself if it does not parse).
fn http_date_of_text(text: &str) -> String {
    match chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f") {
        Ok(time) => http_date(time.and_utc().timestamp()),
        Err(_) => text.to_string(),
    }
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
        handle.spawn(self.run());
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
        let outbox = txn.open_table(OUTBOX)?;
        let callbacks = txn.open_table(CALLBACKS)?;
        // The first pending delivery per tenant and URL, in outbox order.
        let mut heads: BTreeMap<(u64, String), (u64, Pending, Callback)> = BTreeMap::new();
        let mut refused = Vec::new();
        // Per tenant: why its events are not sent (if so), its plan's pending cap, and how
        // many of its deliveries were counted so far.
        let mut tenants: HashMap<u64, Standing> = HashMap::new();
        for entry in outbox.iter()? {
            let (seq, pending) = entry?;
            let seq = seq.value();
            let pending: Pending = serde_json::from_str(pending.value())?;
            let Ok(callback) = get(&callbacks, TenantId(pending.tenant), pending.callback) else {
                continue;
            };
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
                continue;
            }
            if let Some(reason) = &tenant.0 {
                refused.push((seq, pending, callback, reason.clone()));
                continue;
            }
            if let Some((plan, cap)) = &tenant.1 {
                // The newest beyond the cap are dropped: a full queue takes no more.
                if pending.attempts == 0 && tenant.2 > *cap {
                    tenant.2 -= 1;
                    let reason = format!(
                        "not queued: {cap} deliveries were already pending for this user (max_pending_deliveries of plan '{plan}')"
                    );
                    refused.push((seq, pending, callback, reason));
                    continue;
                }
            }
            heads
                .entry((pending.tenant, callback.url.clone()))
                .or_insert((seq, pending, callback));
        }
        drop((outbox, callbacks, txn));
        if !refused.is_empty() {
            let keep = self.log_entries;
            store
                .write(move |txn| {
                    for (seq, pending, callback, reason) in refused {
                        record_in(
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
            tokio::spawn(async move {
                // Still pending as read, and its callback still there? A delete may have
                // landed since the snapshot.
                if still_due(&store, seq, &pending) {
                    let outcome = attempt(&client, &callback, &pending).await;
                    if let Some(store) = store.upgrade() {
                        // A failed write leaves the delivery due: it is tried again.
                        let _ =
                            record(&store, seq, &pending, &callback, outcome, false, keep).await;
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
        let cap = match crate::users::active(txn, tenant) {
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
        let user = match crate::users::active(txn, tenant) {
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

/// Whether outbox row `seq` still holds `pending` unchanged and its callback still exists.
fn still_due(store: &std::sync::Weak<Store>, seq: u64, pending: &Pending) -> bool {
    let Some(store) = store.upgrade() else {
        return false;
    };
    let check = || -> Result<bool> {
        let txn = store.read()?;
        let current: Option<Pending> = match txn.open_table(OUTBOX)?.get(seq)? {
            Some(v) => Some(serde_json::from_str(v.value())?),
            None => None,
        };
        let callback = txn
            .open_table(CALLBACKS)?
            .get((pending.tenant, pending.callback))?
            .is_some();
        Ok(callback && current.as_ref() == Some(pending))
    };
    check().unwrap_or(false)
}

/// What one attempt came to.
struct Outcome {
    started: chrono::DateTime<chrono::Utc>,
    duration_ms: u64,
    status: Option<u16>,
    error: Option<String>,
}

impl Outcome {
    /// An event not sent at all.
    fn refused(reason: String) -> Outcome {
        Outcome {
            started: chrono::Utc::now(),
            duration_ms: 0,
            status: None,
            error: Some(reason),
        }
    }

    fn delivered(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s)) && self.error.is_none()
    }
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

/// Logs an attempt and settles its delivery: gone when delivered or out of attempts, else due
/// again after the interval. A delivery whose callback was deleted meanwhile is left alone
/// (the delete removed it).
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
        .write(move |txn| record_in(txn, seq, &pending, &callback, outcome, give_up, keep))
        .await
}

/// [`record`] inside `txn`.
fn record_in(
    txn: &WriteTransaction,
    seq: u64,
    pending: &Pending,
    callback: &Callback,
    outcome: Outcome,
    give_up: bool,
    keep: usize,
) -> Result<()> {
    let mut outbox = txn.open_table(OUTBOX)?;
    let current: Option<Pending> = match outbox.get(seq)? {
        Some(v) => Some(serde_json::from_str(v.value())?),
        None => None,
    };
    let Some(mut current) = current.filter(|c| c.event_id == pending.event_id) else {
        return Ok(());
    };
    current.attempts += 1;
    let delivered = outcome.delivered();
    let entry = Attempt {
        event_id: current.event_id.clone(),
        attempt: current.attempts,
        at: outcome.started.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
        enqueued_at: current.enqueued_at,
        duration_ms: outcome.duration_ms,
        status: outcome.status,
        error: outcome.error.clone(),
        delivered,
    };
    let n = store::next_id(txn, "callback_attempt")?;
    let mut log = txn.open_table(DELIVERY_LOG)?;
    log.insert(
        (current.tenant, current.callback, n),
        serde_json::to_string(&entry)?.as_str(),
    )?;
    trim_log(&mut log, current.tenant, current.callback, keep)?;
    if delivered || give_up || current.attempts >= callback.count {
        outbox.remove(seq)?;
    } else {
        current.next_at = now_ms() + u64::from(callback.interval) * 1000;
        outbox.insert(seq, serde_json::to_string(&current)?.as_str())?;
    }
    Ok(())
}

/// Drops a callback's oldest logged attempts beyond `keep`, so a long-lived callback's log
/// stays bounded (a busy one writes an entry per attempt for as long as it exists).
fn trim_log(
    log: &mut redb::Table<(u64, u64, u64), &'static str>,
    tenant: u64,
    callback: u64,
    keep: usize,
) -> Result<()> {
    let range = (tenant, callback, 0)..=(tenant, callback, u64::MAX);
    let logged = log.range(range.clone())?.count();
    if logged <= keep {
        return Ok(());
    }
    let oldest: Vec<(u64, u64, u64)> = log
        .range(range)?
        .take(logged - keep)
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<std::result::Result<_, _>>()?;
    for key in oldest {
        log.remove(key)?;
    }
    Ok(())
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}
