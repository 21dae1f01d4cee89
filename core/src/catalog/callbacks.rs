//! Model-status callbacks (hosted edition): a tenant registers URLs with filters and
//! attempt settings; every model transition into `complete` or `error` writes one delivery per
//! matching callback into the outbox, in the status change's own transaction.
//!
//! Owns the redb tables `callbacks` ((tenant, id) → registration), `callback_outbox` (sequence
//! → pending delivery) and `callback_deliveries` ((tenant, callback id, n) → attempt log).
//!
//! The outbox is this module's too: [`enqueue`] writes it, and the delivery worker
//! (`services::delivery`) reads it through [`for_each_pending`] and [`still_due`] and settles
//! each attempt with [`record_attempt`]; sending is the worker's business, not the catalog's.
//!
//! Filters are compiled when a callback is registered or changed ([`read_filter`], outside any
//! transaction) and kept compiled in memory by pattern text, so a status change's transaction
//! (which holds the writer lock) compiles nothing: it matches with the compiled ones, and a
//! pattern not compiled yet (after a restart) marks the delivery for the worker to filter.

use std::sync::Arc;

use base64::Engine as _;
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::config::CallbacksConfig;
use crate::egress::Egress;
use crate::error::{Error, Result};
use crate::store;
use crate::store::schema::{CALLBACKS, DELIVERY_LOG, OUTBOX};
use crate::tenant::TenantId;
use crate::wire::{http_date, http_date_of_text};

/// Bounds of a registration's `attempt` values.
const MAX_COUNT: u64 = 20;
const MAX_INTERVAL: u64 = 86_400;
const MAX_HTTP_TIMEOUT: u64 = 300;
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
    /// What a listing shows of it.
    pub(crate) fn summary(&self) -> CallbackSummary {
        CallbackSummary {
            id: self.id,
            created_at: http_date(self.created_at as i64),
            url: self.url.clone(),
        }
    }

    /// Every setting, the secret left out.
    pub(crate) fn info(&self) -> CallbackInfo {
        CallbackInfo {
            id: self.id,
            url: self.url.clone(),
            created_at: http_date(self.created_at as i64),
            filter: CallbackFilter {
                model_name: self.model_name.clone(),
                project_name: self.project_name.clone(),
            },
            attempt: CallbackAttempts {
                count: self.count,
                interval: self.interval,
                http_timeout: self.http_timeout,
            },
        }
    }

    /// Its id and signing secret, as registering it answers (the one time the secret is shown).
    pub(crate) fn registered(&self) -> RegisteredCallback {
        RegisteredCallback {
            id: self.id,
            secret: self.secret.clone(),
        }
    }
}

/// A callback as MindsDB lists callbacks: serializes as `{"id", "created_at", "url"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallbackSummary {
    /// Its id, unique per user.
    pub id: u64,
    /// When it was registered, an HTTP-date (`Tue, 25 Nov 2026 10:00:00 GMT`).
    pub created_at: String,
    /// Where its deliveries are POSTed.
    pub url: String,
}

/// A callback with every setting but its secret: serializes as `{"id", "url", "created_at",
/// "filter": {"model_name", "project_name"}, "attempt": {"count", "interval", "http_timeout"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallbackInfo {
    /// Its id, unique per user.
    pub id: u64,
    /// Where its deliveries are POSTed.
    pub url: String,
    /// When it was registered, an HTTP-date.
    pub created_at: String,
    /// Which models' changes it is told of.
    pub filter: CallbackFilter,
    /// How its deliveries are tried.
    pub attempt: CallbackAttempts,
}

/// Which models' status changes a callback is told of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallbackFilter {
    /// A Python-style regex the model's name must match from its start; `None` matches all.
    pub model_name: Option<String>,
    /// The same for the project's name.
    pub project_name: Option<String>,
}

/// How a callback's deliveries are tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallbackAttempts {
    /// Attempts per event at most.
    pub count: u32,
    /// Seconds between attempts.
    pub interval: u32,
    /// Seconds one attempt may take.
    pub http_timeout: u32,
}

/// A callback just registered: serializes as `{"id", "secret"}`; the secret (`whsec_…`)
/// signs its deliveries and is shown only here.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegisteredCallback {
    /// Its id, unique per user.
    pub id: u64,
    /// `whsec_` and the base64 of the signing key.
    pub secret: String,
}

/// A delivery waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pending {
    pub(crate) tenant: u64,
    pub(crate) callback: u64,
    /// `webhook-id`: the same on every attempt.
    pub(crate) event_id: String,
    /// The JSON body, fixed when the event happened.
    pub(crate) body: String,
    /// Attempts made so far.
    pub(crate) attempts: u32,
    /// Unix milliseconds before which no attempt is made.
    pub(crate) next_at: u64,
    /// Unix milliseconds when the event was written.
    enqueued_at: u64,
    /// Whether the callback's filter is still to be checked before the first attempt: it was
    /// not compiled in this process when the event was written (see [`filter_passes`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) recheck: bool,
}

/// One attempt to deliver an event, as the delivery log keeps it and callers see it (it
/// serializes with these field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    /// The event's `webhook-id`: the same on every attempt of one event.
    pub event_id: String,
    /// 1 for the first attempt of an event.
    pub attempt: u32,
    /// When the attempt started, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub at: String,
    /// When the event was written to the outbox, Unix milliseconds.
    pub enqueued_at: u64,
    /// Milliseconds the attempt took.
    pub duration_ms: u64,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    /// Why the attempt failed, if it did.
    pub error: Option<String>,
    /// Whether this attempt delivered the event.
    pub delivered: bool,
}

/// Creates the tables in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(CALLBACKS)?;
    txn.open_table(OUTBOX)?;
    txn.open_table(DELIVERY_LOG)?;
    Ok(())
}

/// Registers a callback from MindsDB's body `{url, filter: {model_name, project_name},
/// attempt: {count, interval, http_timeout}}`, within the plan's `max_callbacks` (`limit`);
/// `filter` is the body's, read (and compiled) by [`read_filter`] before the transaction.
/// Returns it, secret included.
pub(crate) fn register(
    txn: &WriteTransaction,
    tenant: TenantId,
    body: &Map<String, Value>,
    filter: Filter,
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
    let (model_name, project_name) = filter;
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

/// Changes a callback: `url`, and `filter` or `attempt` when given (`filter` is the body's,
/// read by [`read_filter`] before the transaction; `None` when the body has none).
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    id: u64,
    body: &Map<String, Value>,
    filter: Option<Filter>,
    egress: &Egress,
) -> Result<Callback> {
    let mut callback = get(&txn.open_table(CALLBACKS)?, tenant, id)?;
    if body.contains_key("url") {
        callback.url = check_url(body.get("url"), egress)?;
    }
    if let Some(filter) = filter {
        (callback.model_name, callback.project_name) = filter;
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
) -> Result<Vec<DeliveryAttempt>> {
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

/// A callback's filter: its model-name and project-name patterns.
pub(crate) type Filter = (Option<String>, Option<String>);

/// A body's `filter`: its two patterns, each compiled (and kept compiled for the status
/// changes to come). Compiling costs up to milliseconds a pattern: call it outside any
/// transaction, on a blocking thread.
pub(crate) fn read_filter(filter: Option<&Value>) -> Result<Filter> {
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
                compiled(pattern).map_err(|e| {
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

/// Compiled patterns kept at most: beyond, the least recently used are compiled again when
/// next needed (by the delivery worker, outside any transaction).
const COMPILED_PATTERNS: usize = 4096;

/// A compiled pattern, or why it does not compile.
type Compiled = std::result::Result<Arc<regex::Regex>, String>;

/// Compiled filter patterns by text, shared by every engine of the process (a pattern's
/// compiled form does not depend on whose it is). A pattern that does not compile is kept
/// as its error.
static COMPILED: std::sync::LazyLock<parking_lot::Mutex<lru::LruCache<String, Compiled>>> =
    std::sync::LazyLock::new(|| {
        parking_lot::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(COMPILED_PATTERNS).expect("not zero"),
        ))
    });

/// `pattern` compiled, from the cache or compiled now (and kept).
fn compiled(pattern: &str) -> Compiled {
    if let Some(found) = COMPILED.lock().get(pattern) {
        return found.clone();
    }
    let made = compile(pattern).map(Arc::new).map_err(|e| e.to_string());
    COMPILED.lock().put(pattern.to_string(), made.clone());
    made
}

/// `pattern` compiled if it is in the cache; never compiles (what a transaction may call).
fn compiled_already(pattern: &str) -> Option<Compiled> {
    COMPILED.lock().get(pattern).cloned()
}

/// A pattern anchored at the start, as Python's `re.match` applies it. The pattern is first
/// compiled alone, so one that only parses inside the wrapper (`a)|(b`) is refused. Both are
/// bounded by the regex crate's size limits (1 MiB of program, 1 MiB of lazy DFA cache).
fn compile(pattern: &str) -> std::result::Result<regex::Regex, regex::Error> {
    #[cfg(test)]
    tests::COMPILATIONS.with(|n| n.set(n.get() + 1));
    let build = |text: &str| {
        regex::RegexBuilder::new(text)
            .size_limit(1 << 20)
            .dfa_size_limit(1 << 20)
            .build()
    };
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

/// Whether `pattern` matches `text`, by its compiled form if it is kept compiled; `None` when
/// it is not (it is not compiled here: a status change's transaction calls this).
fn matches_compiled(pattern: &Option<String>, text: &str) -> Option<bool> {
    match pattern {
        None => Some(true),
        // A pattern that no longer compiles matches nothing.
        Some(pattern) => compiled_already(pattern).map(|re| re.is_ok_and(|re| re.is_match(text))),
    }
}

/// Whether `callback`'s filter lets through the event of `pending` (the delivery worker's
/// check of deliveries enqueued before their filter was compiled). Compiles what it must:
/// call it outside any transaction, on a blocking thread.
pub(crate) fn filter_passes(callback: &Callback, pending: &Pending) -> bool {
    let event: Value = serde_json::from_str(&pending.body).unwrap_or_default();
    let text = |key: &str| {
        event
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let passes = |pattern: &Option<String>, text: String| match pattern {
        None => true,
        Some(pattern) => compiled(pattern).is_ok_and(|re| re.is_match(&text)),
    };
    passes(&callback.model_name, text("name"))
        && passes(&callback.project_name, text("project_name"))
}

/// Removes outbox row `seq` if it still holds `pending`, without logging an attempt: its
/// callback's filter, checked by the worker, does not let its event through.
pub(crate) fn drop_filtered(txn: &WriteTransaction, seq: u64, pending: &Pending) -> Result<()> {
    let mut outbox = txn.open_table(OUTBOX)?;
    let current: Option<Pending> = match outbox.get(seq)? {
        Some(v) => Some(serde_json::from_str(v.value())?),
        None => None,
    };
    if current.is_some_and(|c| c.event_id == pending.event_id) {
        outbox.remove(seq)?;
    }
    Ok(())
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
    // Each chosen callback, and whether the worker must still check its filter (a pattern not
    // compiled in this process yet: it is not compiled under the writer lock).
    let chosen: Vec<(&Callback, bool)> = callbacks
        .iter()
        .filter_map(|c| {
            let model_ok = matches_compiled(&c.model_name, model.name);
            let project_ok = matches_compiled(&c.project_name, model.project);
            match (model_ok, project_ok) {
                (Some(false), _) | (_, Some(false)) => None,
                (Some(true), Some(true)) => Some((c, false)),
                _ => Some((c, true)),
            }
        })
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
    for (callback, recheck) in chosen {
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
            recheck,
        };
        outbox.insert(seq, serde_json::to_string(&pending)?.as_str())?;
    }
    Ok(())
}

fn random_hex(bytes: usize) -> Result<String> {
    // bounded: callers ask for a fixed number of random bytes
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether outbox row `seq` still holds `pending` unchanged and its callback still exists.
pub(crate) fn still_due(txn: &redb::ReadTransaction, seq: u64, pending: &Pending) -> Result<bool> {
    let current: Option<Pending> = match txn.open_table(OUTBOX)?.get(seq)? {
        Some(v) => Some(serde_json::from_str(v.value())?),
        None => None,
    };
    let callback = txn
        .open_table(CALLBACKS)?
        .get((pending.tenant, pending.callback))?
        .is_some();
    Ok(callback && current.as_ref() == Some(pending))
}

/// Calls `each` with every pending delivery whose callback still exists, in outbox order, with
/// its outbox row and callback.
pub(crate) fn for_each_pending(
    txn: &redb::ReadTransaction,
    mut each: impl FnMut(u64, Pending, Callback) -> Result<()>,
) -> Result<()> {
    let outbox = txn.open_table(OUTBOX)?;
    let callbacks = txn.open_table(CALLBACKS)?;
    for entry in outbox.iter()? {
        let (seq, pending) = entry?;
        let pending: Pending = serde_json::from_str(pending.value())?;
        if let Ok(callback) = get(&callbacks, TenantId(pending.tenant), pending.callback) {
            each(seq.value(), pending, callback)?;
        }
    }
    Ok(())
}

/// What one attempt came to.
pub(crate) struct Outcome {
    pub(crate) started: chrono::DateTime<chrono::Utc>,
    pub(crate) duration_ms: u64,
    pub(crate) status: Option<u16>,
    pub(crate) error: Option<String>,
}

impl Outcome {
    /// An event not sent at all.
    pub(crate) fn refused(reason: String) -> Outcome {
        Outcome {
            started: chrono::Utc::now(),
            duration_ms: 0,
            status: None,
            error: Some(reason),
        }
    }

    pub(crate) fn delivered(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s)) && self.error.is_none()
    }
}

/// Logs an attempt of outbox row `seq` and settles its delivery: gone when delivered or out of
/// attempts (or `give_up`), else due again after the interval. A delivery whose callback was
/// deleted meanwhile is left alone (the delete removed it). Keeps `keep` attempts per callback.
pub(crate) fn record_attempt(
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
    let entry = DeliveryAttempt {
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

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    thread_local! {
        /// Patterns compiled on this thread.
        pub(super) static COMPILATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn compilations() -> u64 {
        COMPILATIONS.with(std::cell::Cell::get)
    }

    fn write<T>(store: &Store, f: impl FnOnce(&WriteTransaction) -> Result<T>) -> T {
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        let out = f(&guard.txn).unwrap();
        guard.commit().unwrap();
        out
    }

    fn callback(id: u64, filter: Filter) -> Callback {
        Callback {
            id,
            url: "http://127.0.0.1:9/hook".into(),
            model_name: filter.0,
            project_name: filter.1,
            count: 1,
            interval: 1,
            http_timeout: 1,
            secret: "whsec_x".into(),
            created_at: 0,
        }
    }

    fn change<'a>(name: &'a str) -> StatusChange<'a> {
        StatusChange {
            project: "proj",
            name,
            version: 1,
            active: true,
            model_id: 1,
            created_at: "2026-11-26 10:00:00.000000",
            old_status: Some("training"),
            new_status: "complete",
        }
    }

    fn pending(store: &Store) -> Vec<(u64, Pending)> {
        let txn = store.read().unwrap();
        let mut out = Vec::new();
        for_each_pending(&txn, |seq, pending, _| {
            out.push((seq, pending));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn filters_compile_when_registered_and_never_in_a_status_change() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let tenant = TenantId(41);
        write(&store, init);
        // A costly pattern (a large counted repetition) compiles once, when it is read.
        let costly = "(?:m[a-z]{1,200}){1,4}|never_41";
        let before = compilations();
        let filter = read_filter(Some(&json!({"model_name": costly}))).unwrap();
        assert!(compilations() > before, "compiled as it was read");
        // An invalid one is refused there, naming the key; one over the size limit too.
        let bad = read_filter(Some(&json!({"model_name": "a)|(b"}))).unwrap_err();
        assert!(bad.message().contains("filter.model_name"), "{bad}");
        let huge = read_filter(Some(&json!({"project_name": "(?:a{1000}){1000}"}))).unwrap_err();
        assert!(huge.message().contains("not a valid regex"), "{huge}");
        let other = read_filter(Some(&json!({"model_name": "other_41.*"}))).unwrap();
        write(&store, |txn| {
            put(txn, tenant, &callback(1, filter.clone()))?;
            put(txn, tenant, &callback(2, other.clone()))
        });
        // The status change's transaction compiles nothing, and matches.
        let before = compilations();
        write(&store, |txn| enqueue(txn, tenant, &change("model_41")));
        assert_eq!(
            compilations(),
            before,
            "nothing compiled inside the transaction"
        );
        let queued = pending(&store);
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert_eq!((queued[0].1.callback, queued[0].1.recheck), (1, false));
    }

    #[test]
    fn a_filter_not_compiled_yet_is_left_to_the_delivery_worker() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let tenant = TenantId(42);
        write(&store, init);
        // As after a restart: stored, never compiled in this process.
        let unseen = (Some("unseen_42_[0-9]+".to_string()), None);
        write(&store, |txn| put(txn, tenant, &callback(7, unseen.clone())));
        let before = compilations();
        write(&store, |txn| enqueue(txn, tenant, &change("other_model")));
        assert_eq!(
            compilations(),
            before,
            "nothing compiled inside the transaction"
        );
        let queued = pending(&store);
        assert_eq!(queued.len(), 1);
        let (seq, first) = &queued[0];
        assert!(first.recheck, "the worker checks the filter");
        // The worker's check, outside any transaction: this event is filtered out…
        assert!(!filter_passes(&callback(7, unseen.clone()), first));
        write(&store, |txn| drop_filtered(txn, *seq, first));
        assert!(pending(&store).is_empty(), "gone without an attempt");
        // …and now compiled, the next status change is matched in its transaction.
        write(&store, |txn| enqueue(txn, tenant, &change("unseen_42_7")));
        let queued = pending(&store);
        assert_eq!(queued.len(), 1);
        assert!(!queued[0].1.recheck && queued[0].1.body.contains("unseen_42_7"));
    }
}
