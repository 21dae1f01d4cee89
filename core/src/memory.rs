//! The engine's side of memory accounting (the allocator and the accounts are the
//! `mindlite-memory` crate, built optimised in every profile): carrying the current account into
//! the tasks and threads the engine starts ([`spawn`], [`spawn_on`], [`spawn_detached`],
//! [`spawn_blocking`]) and into those DataFusion starts for a plan
//! ([`propagate_into_datafusion`]). Every task the engine spawns goes through here, so no work
//! escapes its statement's account.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;

pub(crate) use mindlite_memory::{
    begin_commit, blocking_place, ceiling, current, current_stop, end_commit, enter, give_up_place,
    hold, installed, live_bytes, remaining, reserve, retain, set_ceiling, set_share, urgent,
    without_place, Account, InScope, Reservation, Stop, Tag, Urgent,
};

/// `tokio::spawn` for the current thread's account: the task works for it too. Every task
/// the engine spawns goes through here (or [`spawn_blocking`]), so no work escapes its account.
pub(crate) fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn_on(&tokio::runtime::Handle::current(), future)
}

/// [`spawn`] on the runtime behind `handle`.
pub(crate) fn spawn_on<F>(
    handle: &tokio::runtime::Handle,
    future: F,
) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tag = current();
    // Work a request starts outside its statements (an agent's answer, a model's creation)
    // counts for the request but takes no place in its user's share of the threads, as the
    // request's own polls do not: a statement inside it that holds the writer lock must not
    // wait behind a place taken for the request.
    if tag.is_some() && REQUEST.with(Cell::get) == tag {
        return handle.spawn(Counted {
            tag,
            inner: Box::pin(future),
        });
    }
    handle.spawn(InScope::new(tag, Box::pin(future)))
}

/// A task that works for no statement (background work with a life of its own: deliveries,
/// refunds, training with its own account), on the runtime behind `handle`.
pub(crate) fn spawn_detached<F>(
    handle: &tokio::runtime::Handle,
    future: F,
) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle.spawn(InScope::new(Tag::NONE, Box::pin(future)))
}

/// `tokio::task::spawn_blocking` for the current thread's account, within its user's share
/// of the blocking threads (`mindlite_memory::blocking_place`: a hosted user's statements
/// compute on at most as many blocking threads at once as they may poll on; past it, work
/// waits holding no thread). The place is the job's while it computes: every wait inside for
/// what other work of its user could need a place for (a stream of its plan, a lock, its
/// embedding model) goes through [`wait`], and the store's writer lock gives the place up
/// before waiting (`WriteLock::take`). Work that waits for more than that, or that has a cap
/// of its own, goes through [`spawn_blocking_unshared`]. Starts when awaited; once started,
/// the work runs to its end (checking its statement's stop) even if the caller stops waiting.
pub(crate) async fn spawn_blocking<F, T>(work: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let tag = current();
    let place = blocking_place(tag).await;
    blocking_as(tag, move || {
        let _holding = hold(place);
        work()
    })
    .await
}

/// [`spawn_blocking`] outside the user's share of the blocking threads, for work that has a
/// cap of its own or that holds the store's writer lock already: trainings' fits (the plan's
/// `max_running_trainings`; inside the share, a user's fits would hold its places for
/// minutes), commits under the lock, and writes that hold it from their start (every other
/// writer waits for them, so they must not also wait for their user's places).
pub(crate) async fn spawn_blocking_unshared<F, T>(work: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    blocking_as(current(), work).await
}

/// `future`'s output, waited for on this blocking thread without the thread's place in its
/// user's share (see [`spawn_blocking`]): what it waits for may need one.
pub(crate) fn wait<F: Future>(handle: &tokio::runtime::Handle, future: F) -> F::Output {
    without_place(|| handle.block_on(future))
}

/// `work` on a blocking thread for the account `tag` names.
async fn blocking_as<F, T>(tag: Tag, work: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // The statement may end before its job (stopped, or its caller gone, while the job runs
    // on to its next check): the job keeps the account open, so what it holds and makes still
    // counts toward the statement's user rather than toward no one.
    let retained = retain(tag);
    tokio::task::spawn_blocking(move || {
        let _retained = retained;
        let _entered = enter(tag);
        work()
    })
    .await
}

/// What a front allocates for one request of a user, from its body to its response: the
/// body's bytes, what is parsed and decoded from it before a statement starts (a knowledge
/// base's rows, a model's input), the encoded answer. It counts toward the user's plan
/// (`max_memory_mb`) with its statements, within `query.statement_memory_mb` of its own, so
/// that what a request makes outside its statements is inside a budget too (a document sent
/// to a knowledge base is copied several times over before its statement opens). A front
/// asks [`RequestMemory::admit`] before it reads a body and before it handles the request;
/// past that, a request over its account makes its user's statements stop, and runs on.
/// Get one from [`crate::Engine::request_memory`].
#[derive(Debug)]
pub struct RequestMemory {
    account: Option<Arc<Account>>,
    /// The smallest limit over the request, in bytes, and its name: more than this it can
    /// never hold, however little its user's other work holds.
    most: (u64, &'static str),
}

impl RequestMemory {
    /// An account of at most `limit` bytes under `parent`; none when neither limits it.
    pub(crate) fn open(limit: Option<u64>, parent: Option<Arc<Account>>) -> RequestMemory {
        let plan = parent.as_ref().and_then(|p| p.limit()).unwrap_or(u64::MAX);
        let own = limit.unwrap_or(u64::MAX);
        let most = if own < plan {
            (own, "query.statement_memory_mb")
        } else {
            (plan, "the plan's max_memory_mb")
        };
        let account = match (limit, &parent) {
            (None, None) => None,
            _ => Account::open(limit, parent).map(Arc::new),
        };
        RequestMemory { account, most }
    }

    /// `future`, with what it allocates counted for the request (statements it starts count
    /// for themselves, under the same user).
    pub fn run<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        Counted {
            tag: self.account.as_ref().map_or(Tag::NONE, |a| a.tag()),
            inner: Box::pin(future),
        }
    }

    /// Whether the request may take `bytes` more (its body, before it is read; 0 before it
    /// is handled), or the error to answer with, naming the limit: a body larger than the
    /// request may ever hold is invalid (400); one larger than what its user's plan, or its
    /// own limit, has left now, or any request once its user's work holds all of the plan
    /// or its own account was stopped while the body was read, is over a quota for now (429);
    /// the process over its ceiling is unavailable for now (503). Without an account nothing
    /// is refused. The statements a request starts are stopped at their own checks; this
    /// refuses, before anything is made of it, what the user has no room for.
    pub fn admit(&self, bytes: u64) -> crate::error::Result<()> {
        use crate::error::{Error, ErrorKind};
        let Some(account) = &self.account else {
            return Ok(());
        };
        let (most, most_key) = self.most;
        if bytes > most {
            return Err(Error::invalid(format!(
                "The request's body of {} MiB is larger than its user may ever hold (the limit {most_key} = {} MiB); it was refused unread",
                bytes.div_ceil(1 << 20),
                most >> 20
            )));
        }
        let stop = account.stopped();
        if stop == Some(Stop::ProcessCeiling) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "The server is low on memory (the limit query.process_memory_mb); the request was refused before it was handled, try again shortly",
            ));
        }
        let remaining = account.remaining();
        // Nothing left is refused too: the user's work holds all it may.
        if stop.is_none() && remaining > 0 && bytes <= remaining {
            return Ok(());
        }
        let own_left = account
            .limit()
            .map_or(u64::MAX, |limit| limit.saturating_sub(account.used()));
        let key = if own_left <= remaining && stop != Some(Stop::ParentOverLimit) {
            "query.statement_memory_mb"
        } else {
            "the plan's max_memory_mb"
        };
        let message = if bytes == 0 {
            format!("The user's work holds all the memory it may (the limit {key}); the request was refused before it was handled, try again when that work has ended")
        } else {
            format!(
                "The request's body needs {} MiB, more than its user may hold now ({} MiB left under the limit {key}); it was refused unread, try again when the user's other work has ended",
                bytes.div_ceil(1 << 20),
                remaining >> 20
            )
        };
        Err(Error::quota_exceeded(message, Some(1)))
    }

    /// Bytes the request holds now (0 without an account).
    pub fn used(&self) -> u64 {
        self.account.as_ref().map_or(0, |a| a.used())
    }
}

/// A future whose polls allocate for an account. Unlike [`InScope`] it takes no place in the
/// user's share of the threads: the statements inside take theirs, and one that holds the
/// writer lock must not wait behind its own request's place.
struct Counted<F> {
    tag: Tag,
    inner: std::pin::Pin<Box<F>>,
}

thread_local! {
    /// The request account whose work a [`Counted`] is polling on this thread (`Tag::NONE`:
    /// none), so that tasks it spawns are counted the same way.
    static REQUEST: Cell<Tag> = const { Cell::new(Tag::NONE) };
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        /// Restores the request polled around this one, however the poll ends.
        struct Restore(Tag);
        impl Drop for Restore {
            fn drop(&mut self) {
                REQUEST.with(|request| request.set(self.0));
            }
        }
        let _entered = enter(self.tag);
        let _restore = Restore(REQUEST.with(|request| request.replace(self.tag)));
        self.inner.as_mut().poll(cx)
    }
}

/// Carries the current account into the tasks DataFusion spawns for a plan (repartitions,
/// spills, parallel file reads), through its `JoinSetTracer` hook. Idempotent; if another
/// tracer was installed first, DataFusion's tasks run without accounts.
pub(crate) fn propagate_into_datafusion() {
    use datafusion::common::runtime::{set_join_set_tracer, JoinSetTracer};
    use futures::future::BoxFuture;
    use std::any::Any;

    struct Propagate;

    impl JoinSetTracer for Propagate {
        fn trace_future(
            &self,
            fut: BoxFuture<'static, Box<dyn Any + Send>>,
        ) -> BoxFuture<'static, Box<dyn Any + Send>> {
            Box::pin(InScope::new(current(), fut))
        }

        fn trace_block(
            &self,
            f: Box<dyn FnOnce() -> Box<dyn Any + Send> + Send>,
        ) -> Box<dyn FnOnce() -> Box<dyn Any + Send> + Send> {
            let tag = current();
            Box::new(move || {
                let _entered = enter(tag);
                f()
            })
        }
    }

    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = set_join_set_tracer(&Propagate);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_and_blocking_work_carry_the_account() {
        let account = Account::open(None, None).unwrap();
        let tag = account.tag();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let seen = runtime.block_on(InScope::new(
            tag,
            Box::pin(async {
                let task = spawn(async { current() }).await.unwrap();
                let blocking = spawn_blocking(current).await.unwrap();
                (task, blocking)
            }),
        ));
        assert_eq!(seen, (tag, tag));
        assert_eq!(current(), Tag::NONE, "the scope ends with the poll");
    }

    #[test]
    fn what_a_request_makes_outside_its_statements_counts_toward_its_users_plan() {
        let mut config = crate::Config {
            edition: crate::Edition::Hosted,
            ..crate::Config::default()
        };
        config.hosted.default_plan = "free".into();
        let engine = crate::Engine::open_in_memory(config).unwrap();
        engine.block_on(engine.create_user("bob", None)).unwrap();
        let key = engine.block_on(engine.create_api_key("bob")).unwrap().key;
        let bob = engine.as_user(&key).unwrap();
        let memory = bob.request_memory();
        let user = bob
            .inner
            .services
            .tenant_memory(bob.tenant)
            .unwrap()
            .unwrap();
        let before = user.used();
        let body = bob.block_on(memory.run(async { vec![7u8; 8 << 20] }));
        assert!(memory.used() >= 8 << 20, "the request holds its body");
        assert!(user.used() >= before + (8 << 20), "and so does its user");
        drop(body);
        assert!(memory.used() < 1 << 20);
        assert_eq!(current(), Tag::NONE, "the scope ends with the poll");
        // A task the request starts outside a statement counts for it too.
        let seen = bob.block_on(memory.run(async { spawn(async { current() }).await.unwrap() }));
        assert_eq!(seen, bob.block_on(memory.run(async { current() })));
        assert!(seen.is_some());

        // The local user has no plan: a request counts only under a statement limit.
        let local = crate::Engine::open_in_memory(crate::Config::default()).unwrap();
        let unlimited = local.request_memory();
        let body = local.block_on(unlimited.run(async { vec![7u8; 8 << 20] }));
        assert_eq!(unlimited.used(), 0);
        drop(body);
    }

    #[test]
    fn a_body_its_user_has_no_room_for_is_refused_before_it_is_read() {
        let config = crate::Config {
            edition: crate::Edition::Hosted,
            ..crate::Config::default()
        };
        let engine = crate::Engine::open_in_memory(config).unwrap();
        engine.block_on(engine.create_user("bob", None)).unwrap();
        let key = engine.block_on(engine.create_api_key("bob")).unwrap().key;
        let bob = engine.as_user(&key).unwrap();
        // The free plan holds 256 MiB: a larger body can never fit.
        let memory = bob.request_memory();
        memory.admit(8 << 20).unwrap();
        let error = memory.admit(300 << 20).unwrap_err();
        assert_eq!(error.kind(), crate::error::ErrorKind::InvalidInput);
        assert!(error.message().contains("body of 300 MiB"), "{error}");
        assert!(
            error
                .message()
                .contains("the plan's max_memory_mb = 256 MiB"),
            "{error}"
        );
        // Another request of the user's holds 200 MiB: less is left for this one, for now.
        let other = bob.request_memory();
        let held = bob.block_on(other.run(async { vec![7u8; 200 << 20] }));
        memory.admit(40 << 20).unwrap();
        let error = memory.admit(100 << 20).unwrap_err();
        assert_eq!(error.kind(), crate::error::ErrorKind::QuotaExceeded);
        assert!(error.message().contains("needs 100 MiB"), "{error}");
        assert!(error.message().contains("MiB left"), "{error}");
        // And once the user's work is over the plan, even a request without a body is refused.
        let more = bob.block_on(other.run(async { vec![7u8; 100 << 20] }));
        let error = memory.admit(0).unwrap_err();
        assert_eq!(error.kind(), crate::error::ErrorKind::QuotaExceeded);
        assert!(error.message().contains("holds all the memory"), "{error}");
        assert!(
            error.message().contains("the plan's max_memory_mb"),
            "{error}"
        );
        drop((held, more));
        memory.admit(0).unwrap();
    }
}
