//! The job scheduler: it wakes every `jobs.poll_interval_ms`, reads the jobs due (of every
//! tenant) and starts a run of each that is not running already: one run of a job at a time.
//! A run acts as the job's owner in the job's project, each statement as a request of that user
//! would — under the statement deadline, admission and the user's memory share — and records
//! itself in the job's history (start, end, error, the statements as run). A statement's rows
//! are counted, never kept.
//!
//! It holds the engine's SQL runner only while a statement runs (a weak reference otherwise),
//! and looks for jobs under a lock the closing engine takes, so a dropped engine closes its
//! file; a run cut off so is marked interrupted when the file next opens, and the job runs again
//! then.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::{Condvar, Mutex};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{last, statements};
use crate::cancel::{Control, Interrupts};
use crate::catalog::jobs::{self, Due, Finished, Job};
use crate::error::{Error, ErrorKind, Result};
use crate::sql::{Outcome, QueryRequest, SqlRunner};
use crate::tenant::TenantId;

/// The running scheduler, to stop it when the engine closes.
pub(crate) struct Scheduler {
    shared: Arc<Shared>,
}

/// What the scheduler's tasks and the closing engine share.
#[derive(Default)]
struct Shared {
    /// Held while the scheduler reads the store; true once the engine is closing.
    closing: Mutex<bool>,
    /// Cancelled when the engine closes: every run in progress stops at once.
    stop: CancellationToken,
    /// Runs in progress (each may hold the runner); the closing engine waits for none.
    running: Mutex<usize>,
    ended: Condvar,
}

/// One run in progress, counted while it lives.
struct Running<'a>(&'a Shared);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock();
        *running -= 1;
        self.0.ended.notify_all();
    }
}

impl Shared {
    /// A run may start: the engine is not closing.
    fn enter(&self) -> Option<Running<'_>> {
        let closed = self.closing.lock();
        if *closed {
            return None;
        }
        *self.running.lock() += 1;
        drop(closed);
        Some(Running(self))
    }
}

/// How long a closing engine waits for its cancelled runs to let go of it.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

impl Scheduler {
    /// Starts the scheduler of the SQL runner `sql` on the runtime behind `handle`.
    pub(crate) fn start(sql: &Arc<SqlRunner>, handle: &tokio::runtime::Handle) -> Scheduler {
        let poll = Duration::from_millis(sql.services.config.jobs.poll_interval_ms.max(10));
        let shared: Arc<Shared> = Arc::default();
        let looking = Arc::clone(&shared);
        // Looking for jobs needs only the store, never held between looks.
        let store = Arc::downgrade(&sql.services.store);
        let weak = Arc::downgrade(sql);
        let spawner = handle.clone();
        let running: Arc<Mutex<HashSet<(TenantId, u64)>>> = Arc::default();
        crate::memory::spawn_detached(handle, async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(poll) => {}
                    () = looking.stop.cancelled() => return,
                }
                let due = {
                    let closed = looking.closing.lock();
                    if *closed {
                        return;
                    }
                    let Some(store) = store.upgrade() else { return };
                    let now = crate::time::now_unix();
                    let due = store.read().and_then(|txn| jobs::due(&txn, now));
                    drop(store);
                    drop(closed);
                    due
                };
                // A file that cannot be read now is read again at the next wake-up.
                for due in due.unwrap_or_default() {
                    let key = (due.tenant, due.id);
                    if !running.lock().insert(key) {
                        continue;
                    }
                    let (weak, running) = (Weak::clone(&weak), Arc::clone(&running));
                    let shared = Arc::clone(&looking);
                    crate::memory::spawn_detached(&spawner, async move {
                        if let Some(_counted) = shared.enter() {
                            // A closing engine stops the run where it is: its record stays
                            // open, and the next open marks it interrupted.
                            tokio::select! {
                                () = run(&weak, due) => {}
                                () = shared.stop.cancelled() => {}
                            }
                        }
                        running.lock().remove(&key);
                    });
                }
            }
        });
        Scheduler { shared }
    }

    /// Lets no look for jobs or run begin, stops the runs in progress, and waits (a few
    /// seconds at most) until they have let go of the engine, so that its file closes with
    /// it.
    pub(crate) fn stop(&self) {
        *self.shared.closing.lock() = true;
        self.shared.stop.cancel();
        let mut running = self.shared.running.lock();
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        while *running > 0 {
            if self
                .shared
                .ended
                .wait_until(&mut running, deadline)
                .timed_out()
            {
                break;
            }
        }
    }
}

/// One run of the job `due` names: its condition, then its statements, recorded in its
/// history.
async fn run(weak: &Weak<SqlRunner>, due: Due) {
    let (now, tenant) = (crate::time::now_unix(), due.tenant);
    let started = write(weak, move |txn| jobs::start_run(txn, &due, now)).await;
    let Ok(Some((run_number, job))) = started else {
        return;
    };
    let mut ran = Vec::new();
    let mut lasts = Map::new();
    let mut outcome = Ok(());
    let times = Times::of(&job, now);
    // The condition's last statement must return rows for the job's statements to run.
    let mut go = true;
    if let Some(condition) = &job.if_query {
        match statements_of(weak, tenant, &job, &times, condition, &mut ran, &mut lasts).await {
            Ok(rows) => go = rows > 0,
            Err(e) => {
                outcome = Err(e);
                go = false;
            }
        }
    }
    if go {
        let query = &job.query;
        if let Err(e) = statements_of(weak, tenant, &job, &times, query, &mut ran, &mut lasts).await
        {
            outcome = Err(e);
        }
    }
    let finished = Finished {
        error: outcome.err().map(|e| e.message().to_string()),
        query: ran.join("; "),
        lasts,
    };
    let done = crate::time::now_unix();
    // A failure to record is left for the next open (the run is then marked interrupted).
    let _ = write(weak, move |txn| {
        jobs::finish_run(txn, tenant, &job, run_number, finished, done)
    })
    .await;
}

/// Runs `change` in a write transaction of the store, while the engine is open.
async fn write<T, F>(weak: &Weak<SqlRunner>, change: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&redb::WriteTransaction) -> Result<T> + Send + 'static,
{
    let store = weak
        .upgrade()
        .map(|sql| Arc::clone(&sql.services.store))
        .ok_or_else(closed)?;
    store.write(change).await
}

fn closed() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "The engine closed while the job ran",
    )
}

/// MindsDB's job template variables, as the text each stands for in a run's statements:
/// `{{START_DATETIME}}` and `{{START_DATE}}` (this run's start), `{{PREVIOUS_START_DATETIME}}`
/// (the previous run's start less a minute, as MindsDB gives it; the job's creation before the
/// first run). UTC, `YYYY-MM-DD HH:MM:SS`. The values are the engine's own timestamps, so
/// putting them into the text cannot change a statement's shape.
struct Times {
    start: String,
    start_date: String,
    previous: String,
}

impl Times {
    fn of(job: &Job, now: u64) -> Times {
        let text = |seconds: u64| {
            let mut text = crate::time::unix_text(seconds);
            text.truncate("YYYY-MM-DD HH:MM:SS".len());
            text
        };
        let start = text(now);
        let previous = match job.last_started_at {
            Some(at) => text(at.saturating_sub(60)),
            None => job
                .created_at
                .get(.."YYYY-MM-DD HH:MM:SS".len())
                .unwrap_or(&job.created_at)
                .to_string(),
        };
        Times {
            start_date: start[.."YYYY-MM-DD".len()].to_string(),
            start,
            previous,
        }
    }

    /// `statement` with the variables it names filled in.
    fn fill(&self, statement: &str) -> String {
        if !statement.contains("{{") {
            return statement.to_string();
        }
        statement
            .replace("{{PREVIOUS_START_DATETIME}}", &self.previous)
            .replace("{{START_DATETIME}}", &self.start)
            .replace("{{START_DATE}}", &self.start_date)
    }
}

/// Runs the statements of `text` in order, template variables and `LAST` filled in; stops at
/// the first error. Returns the rows the last one returned; `ran` gets each statement as run,
/// `lasts` the values to keep.
async fn statements_of(
    weak: &Weak<SqlRunner>,
    tenant: TenantId,
    job: &Job,
    times: &Times,
    text: &str,
    ran: &mut Vec<String>,
    lasts: &mut Map<String, Value>,
) -> Result<usize> {
    let mut rows = 0;
    for statement in statements::split(&times.fill(text))? {
        let mut highs = HashMap::new();
        for use_ in last::uses(&statement)? {
            let (_, first) = execute(weak, tenant, job, &use_.max_query).await?;
            highs.insert(use_.key, first);
        }
        let (filled, keep) = last::fill(&statement, &job.lasts, &highs)?;
        lasts.extend(keep);
        let result = execute(weak, tenant, job, &filled).await;
        ran.push(filled);
        rows = result?.0;
    }
    Ok(rows)
}

/// Runs one statement in the job's project as its owner: its rows counted, and the first value
/// of the first row as a SQL literal (for `LAST`'s queries), nothing else kept.
async fn execute(
    weak: &Weak<SqlRunner>,
    tenant: TenantId,
    job: &Job,
    sql: &str,
) -> Result<(usize, Option<String>)> {
    let runner = weak.upgrade().ok_or_else(closed)?;
    let services = &runner.services;
    let (_ticket, tenant_memory) = services.admit_statement(tenant)?;
    let control = Control::new(services.config.statement_limit(None), &Interrupts::new())
        .with_memory(services.config.statement_memory_bytes(), tenant_memory);
    let request = QueryRequest::on_behalf(sql, &job.project);
    control
        .run(async {
            match runner.run(tenant, &request).await.outcome {
                Outcome::Error(e) => Err(e),
                Outcome::Ok { .. } => Ok((0, None)),
                Outcome::Table(mut table) => {
                    let (mut rows, mut first) = (0, None);
                    while let Some(batch) = table.stream.next().await {
                        let batch = batch?;
                        if rows == 0 && batch.num_rows() > 0 && batch.num_columns() > 0 {
                            first = last::literal(batch.column(0).as_ref())?;
                        }
                        rows += batch.num_rows();
                    }
                    Ok((rows, first))
                }
            }
        })
        .await
}
