//! The pool of threads that runs CPU-heavy synchronous work — parsing, planning and
//! optimizing statements — off the async workers, which serve every connection and every
//! statement's streams: a statement that takes seconds to plan holds one of these threads,
//! never a worker. Jobs are taken fairly between tenants: each tenant's jobs queue behind its
//! own, tenants take turns, and no user of the hosted edition runs on more than half the
//! threads at once, so another user's short job finds a thread at once even when one user's
//! plans take seconds each. (The local edition's one tenant may use them all.) A job runs for the account of
//! the code that asked for it (its statement's memory and stop, see `memory`), and checks
//! the statement's stop where it can ([`crate::cancel::check`]); a job whose caller stopped
//! waiting before it started is dropped unrun.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};
use crate::memory;
use crate::tenant::TenantId;

type Job = Box<dyn FnOnce() + Send>;

/// The pool (cheap to clone).
#[derive(Clone)]
pub(crate) struct Compute {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Compute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compute")
            .field("threads", &self.shared.threads)
            .finish()
    }
}

struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    threads: usize,
    /// Jobs one tenant may run at once while others wait.
    share: usize,
}

#[derive(Default)]
struct State {
    /// Waiting jobs, per tenant, oldest first.
    queues: HashMap<u64, VecDeque<Job>>,
    /// Tenants with waiting jobs, in the order they get their next turn.
    turns: VecDeque<u64>,
    /// Jobs running, per tenant.
    running: HashMap<u64, usize>,
    /// Set when the engine closes: threads exit once the queues are empty.
    closing: bool,
}

impl Compute {
    /// A pool of `threads` threads (at least 2).
    pub(crate) fn new(threads: usize) -> Result<Compute> {
        let threads = threads.max(2);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            threads,
            share: threads.div_ceil(2),
        });
        for n in 0..threads {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("mindlite-cpu-{n}"))
                // Parsing and planning walk statements recursively (up to 1,000 levels of
                // nesting, each of which can take tens of KiB in a debug build) and drop the
                // trees of refused ones; the stack is reserved address space, touched only as
                // deep as a statement goes.
                .stack_size(64 << 20)
                .spawn(move || shared.work())
                .map_err(|e| Error::internal(format!("cannot start a planning thread: {e}")))?;
        }
        Ok(Compute { shared })
    }

    /// Runs `work` on the pool for `tenant`, for the current thread's account, and gives its
    /// output. Dropping the returned future before the job started removes it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        tenant: TenantId,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let tag = memory::current();
        let job: Job = Box::new(move || {
            if sender.is_closed() {
                return;
            }
            let _entered = memory::enter(tag);
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = sender.send(done);
        });
        self.shared.push(tenant, job);
        match receiver.await {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(panic)) => Err(Error::internal(format!(
                "planning failed: {}",
                crate::error::panic_message(&*panic)
            ))),
            Err(_) => Err(Error::internal("the planning pool stopped")),
        }
    }

    /// [`Compute::run`] for async work that computes more than it waits (planning, which
    /// resolves tables through async calls): driven to completion on a pool thread with
    /// `handle`'s runtime for what it awaits.
    pub(crate) async fn run_async<F>(
        &self,
        tenant: TenantId,
        handle: tokio::runtime::Handle,
        work: F,
    ) -> Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.run(tenant, move || handle.block_on(work)).await
    }

    /// Lets the threads end once the queued jobs are done.
    pub(crate) fn close(&self) {
        if let Ok(mut state) = self.shared.state.lock() {
            state.closing = true;
        }
        self.shared.ready.notify_all();
    }
}

impl Shared {
    fn push(&self, tenant: TenantId, job: Job) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let queue = state.queues.entry(tenant.0).or_default();
        queue.push_back(job);
        if queue.len() == 1 {
            state.turns.push_back(tenant.0);
        }
        drop(state);
        self.ready.notify_one();
    }

    /// A pool thread: takes the next job in turn and runs it, until the pool closes.
    fn work(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (tenant, job) = match self.next(&mut state) {
                Some(next) => next,
                None if state.closing && state.queues.is_empty() => return,
                None => {
                    state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
            };
            *state.running.entry(tenant).or_insert(0) += 1;
            drop(state);
            job();
            state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = state.running.get_mut(&tenant) {
                *count -= 1;
                if *count == 0 {
                    state.running.remove(&tenant);
                }
            }
            // A tenant held at its share may run again.
            self.ready.notify_one();
        }
    }

    /// The job of the first tenant in turn that is under its share. A share holds even when
    /// one user alone is waiting: another may come at any moment, and must find a thread then,
    /// not when a long job ends.
    fn next(&self, state: &mut State) -> Option<(u64, Job)> {
        let position = state.turns.iter().position(|tenant| {
            *tenant == TenantId::LOCAL.0
                || state.running.get(tenant).copied().unwrap_or(0) < self.share
        })?;
        let tenant = state.turns.remove(position)?;
        let queue = state.queues.get_mut(&tenant)?;
        let job = queue.pop_front()?;
        if queue.is_empty() {
            state.queues.remove(&tenant);
        } else {
            state.turns.push_back(tenant);
        }
        Some((tenant, job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenants_long_jobs_do_not_hold_up_another_tenants_short_one() {
        let pool = Compute::new(4).unwrap();
        let release = Arc::new(AtomicBool::new(false));
        // Mallory fills the queue with jobs that run until released.
        let mut long = Vec::new();
        for _ in 0..8 {
            let release = Arc::clone(&release);
            let pool = pool.clone();
            long.push(tokio::spawn(async move {
                pool.run(TenantId(1), move || {
                    while !release.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Alice is served by a thread mallory may not take: at most half of them are hers.
        let started = Instant::now();
        assert_eq!(pool.run(TenantId(2), || 42).await.unwrap(), 42);
        assert!(started.elapsed() < Duration::from_secs(5));
        release.store(true, Ordering::Relaxed);
        for job in long {
            job.await.unwrap().unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_local_tenant_uses_every_thread_and_a_panic_is_an_error() {
        let pool = Compute::new(2).unwrap();
        let both = Arc::new(std::sync::Barrier::new(2));
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                let (pool, both) = (pool.clone(), Arc::clone(&both));
                tokio::spawn(async move { pool.run(TenantId::LOCAL, move || both.wait()).await })
            })
            .collect();
        for job in jobs {
            job.await.unwrap().unwrap();
        }
        let err = pool.run(TenantId(1), || panic!("a bug")).await.unwrap_err();
        assert!(err.message().contains("a bug"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_runs_for_its_callers_account() {
        let pool = Compute::new(2).unwrap();
        let account = memory::Account::open(None, None).unwrap();
        let tag = account.tag();
        let seen = memory::InScope::new(tag, Box::pin(pool.run(TenantId(1), memory::current)))
            .await
            .unwrap();
        assert_eq!(seen, tag);
    }
}
