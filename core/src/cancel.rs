//! How statements stop before they finish: at their deadline (`query.statement_timeout_secs`,
//! or less if the request asks), when the handle that started them is interrupted
//! ([`Engine::interrupt`](crate::Engine::interrupt), what C's `mindlite_interrupt` and Python's
//! `Connection.interrupt()` call), when they go over a memory budget (their own, their user's,
//! or the process's; see `memory`), or when their caller stops waiting (the future or the result
//! stream is dropped, which drops the plan and its tasks and closes the statement's account, so
//! blocking work still running for it stops at its next [`check`]). A stopped statement's result
//! ends with an error that says which; a write stopped before its commit writes nothing, and
//! a commit under way finishes before the statement can be stopped, so what is reported is what
//! happened.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::admission::Ticket;
use crate::error::{Error, ErrorKind};
use crate::memory::{self, Account, InScope, Stop, Tag};

/// The interrupt switch of one handle and its clones.
#[derive(Debug, Clone)]
pub(crate) struct Interrupts(Arc<watch::Sender<u64>>);

impl Interrupts {
    pub(crate) fn new() -> Interrupts {
        Interrupts(Arc::new(watch::channel(0).0))
    }

    /// Stops every statement started through this handle that is still running.
    pub(crate) fn interrupt(&self) {
        self.0.send_modify(|generation| *generation += 1);
    }

    /// How many interrupts there have been.
    fn generation(&self) -> u64 {
        *self.0.borrow()
    }

    /// Completes once there has been an interrupt since `generation`.
    fn signal(&self, generation: u64) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.0.subscribe();
        async move {
            if receiver.wait_for(|now| *now != generation).await.is_err() {
                // The handle is gone: nobody can interrupt any more.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// What stops one statement: its deadline (if any), its handle's interrupts, and its memory
/// account (which also carries the stop to blocking work, see [`check`]).
#[derive(Debug, Clone)]
pub(crate) struct Control {
    deadline: Option<(Instant, Duration)>,
    interrupts: Interrupts,
    /// The interrupts there had been when the statement started: a later one stops it.
    generation: u64,
    /// The statement's account; `None` only when every account slot is taken.
    account: Option<Arc<Account>>,
}

impl Control {
    /// A statement allowed `limit` (the configured one, or a request's smaller one), stopped
    /// by `interrupts`, with an account of its own without a memory limit (see
    /// [`Control::with_memory`]).
    pub(crate) fn new(limit: Option<Duration>, interrupts: &Interrupts) -> Control {
        Control {
            deadline: limit.map(|limit| (Instant::now() + limit, limit)),
            interrupts: interrupts.clone(),
            generation: interrupts.generation(),
            account: Account::open(None, None).map(Arc::new),
        }
    }

    /// This control with a memory budget: at most `limit` bytes for the statement, counted
    /// also toward `parent` (its user's account).
    pub(crate) fn with_memory(
        mut self,
        limit: Option<u64>,
        parent: Option<Arc<Account>>,
    ) -> Control {
        self.account = Account::open(limit, parent).map(Arc::new);
        self
    }

    /// What the statement's allocations carry.
    pub(crate) fn tag(&self) -> Tag {
        self.account.as_ref().map_or(Tag::NONE, |a| a.tag())
    }

    /// Completes with the reason when the deadline passes or the handle is interrupted.
    fn stopped(&self) -> Pin<Box<dyn Future<Output = (Stop, Error)> + Send>> {
        let interrupted = self.interrupts.signal(self.generation);
        let deadline = self.deadline;
        Box::pin(async move {
            let expired = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = expired => (
                    Stop::Deadline,
                    timed_out(deadline.map(|(_, limit)| limit).unwrap_or_default()),
                ),
                _ = interrupted => (Stop::Interrupted, interrupted_error()),
            }
        })
    }

    /// The error for the reason the account was stopped with, if it was.
    fn account_stop(&self) -> Option<Error> {
        let account = self.account.as_ref()?;
        account
            .stopped()
            .map(|stop| stop_error(stop, Some(account)))
    }

    /// Runs `work` for the statement (its account current around every poll, and in the tasks
    /// it spawns) until it finishes or the statement must stop; stopping drops `work`, unless
    /// a commit is under way, which is waited for.
    pub(crate) async fn run<T>(
        &self,
        work: impl Future<Output = crate::error::Result<T>>,
    ) -> crate::error::Result<T> {
        let stopped = self.stopped();
        let work = Checked {
            inner: InScope::new(self.tag(), Box::pin(work)),
            control: self,
        };
        tokio::pin!(work);
        tokio::select! {
            done = &mut work => done,
            (stop, reason) = stopped => match &self.account {
                Some(account) if !account.stop(stop) => match self.account_stop() {
                    // Stopped already (a memory budget): that is the reason.
                    Some(earlier) => Err(earlier),
                    // Committing: what it commits is what happened.
                    None => work.await,
                },
                _ => Err(reason),
            },
        }
    }

    /// `stream` that ends with the reason when the statement must stop, polled for its
    /// account, holding `ticket` (the statement's place among its user's running ones) until
    /// it ends or is dropped.
    pub(crate) fn guard(
        &self,
        stream: SendableRecordBatchStream,
        ticket: Option<Ticket>,
    ) -> SendableRecordBatchStream {
        let schema = stream.schema();
        Box::pin(RecordBatchStreamAdapter::new(
            schema,
            Guarded {
                inner: Some(InScope::new(self.tag(), stream)),
                stopped: self.stopped(),
                control: self.clone(),
                ticket,
            },
        ))
    }
}

/// A statement's future that ends with the stop's error as soon as its account is stopped
/// (over a memory budget, say) after one of its polls.
struct Checked<'c, F> {
    inner: F,
    control: &'c Control,
}

impl<F: Future<Output = crate::error::Result<T>> + Unpin, T> Future for Checked<'_, F> {
    type Output = crate::error::Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.inner.poll_unpin(cx);
        if polled.is_pending() {
            if let Some(error) = self.control.account_stop() {
                return Poll::Ready(Err(error));
            }
        }
        polled
    }
}

/// Fails when the work on this thread must stop: the check that blocking work (writes,
/// training, chunking, decoding, index builds) makes in its loops.
pub(crate) fn check() -> crate::error::Result<()> {
    match memory::current_stop() {
        Some(stop) => Err(stop_error(stop, None)),
        None => Ok(()),
    }
}

/// Begins a commit for the work on this thread: fails (and nothing may be committed) when
/// its statement was stopped; otherwise the statement cannot be stopped until the returned
/// guard is dropped, after the commit.
pub(crate) fn begin_commit() -> crate::error::Result<Committing> {
    let tag = memory::current();
    match memory::begin_commit(tag) {
        Ok(()) => Ok(Committing { tag }),
        Err(Stop::Cancelled) => Err(cancelled()),
        Err(stop) => Err(stop_error(stop, None)),
    }
}

/// A commit under way, see [`begin_commit`].
pub(crate) struct Committing {
    tag: Tag,
}

impl Drop for Committing {
    fn drop(&mut self) {
        memory::end_commit(self.tag);
    }
}

/// What a statement stopped for `stop` is told; `account` gives the limit to name.
fn stop_error(stop: Stop, account: Option<&Account>) -> Error {
    let mib = |bytes: Option<u64>| bytes.map_or(String::new(), |b| format!(" = {} MiB", b >> 20));
    let own_limit = account.and_then(Account::limit);
    match stop {
        Stop::Deadline => Error::new(
            ErrorKind::Unavailable,
            "The statement was stopped at its time limit (query.statement_timeout_secs, or the request's 'timeout')",
        ),
        Stop::Interrupted => interrupted_error(),
        Stop::Cancelled => cancelled(),
        Stop::OverLimit => Error::invalid(format!(
            "The statement needed more memory than one statement may use (the limit query.statement_memory_mb{}); it was stopped and wrote nothing",
            mib(own_limit)
        )),
        Stop::ParentOverLimit => Error::quota_exceeded(
            "This user's statements together needed more memory than the plan allows (the plan's limit max_memory_mb); the statement was stopped and wrote nothing",
            Some(1),
        ),
        Stop::ProcessCeiling => Error::new(
            ErrorKind::Unavailable,
            format!(
                "The server is low on memory (the limit query.process_memory_mb{}); the statement was stopped and wrote nothing, try again shortly",
                mib(memory::ceiling())
            ),
        ),
    }
}

/// The error of a write whose statement was cancelled before it committed.
pub(crate) fn cancelled() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "The statement was cancelled before it committed; nothing was written",
    )
}

fn timed_out(limit: Duration) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "The statement was stopped after running {} s, its time limit (query.statement_timeout_secs, or the request's 'timeout')",
            limit.as_secs_f64()
        ),
    )
}

fn interrupted_error() -> Error {
    Error::new(ErrorKind::Unavailable, "The statement was interrupted")
}

/// A result stream that stops early when its statement must.
struct Guarded {
    /// `None` once ended: the plan (and its tasks) is dropped as soon as the result is over.
    inner: Option<InScope<SendableRecordBatchStream>>,
    stopped: Pin<Box<dyn Future<Output = (Stop, Error)> + Send>>,
    /// Keeps the statement's account open while the result is read.
    control: Control,
    ticket: Option<Ticket>,
}

impl Guarded {
    fn end(&mut self, error: Error) -> Poll<Option<datafusion::error::Result<RecordBatch>>> {
        self.inner = None;
        self.ticket = None;
        Poll::Ready(Some(Err(datafusion::error::DataFusionError::External(
            Box::new(error),
        ))))
    }
}

impl Stream for Guarded {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = polled {
            self.inner = None;
            self.ticket = None;
            return Poll::Ready(None);
        }
        if let Some(error) = self.control.account_stop() {
            return self.end(error);
        }
        if let Poll::Ready((stop, reason)) = self.stopped.poll_unpin(cx) {
            let error = match &self.control.account {
                Some(account) if !account.stop(stop) => {
                    self.control.account_stop().unwrap_or(reason)
                }
                _ => reason,
            };
            return self.end(error);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use std::sync::Arc;

    fn endless() -> SendableRecordBatchStream {
        let schema = Arc::new(Schema::empty());
        let batches = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((Ok(RecordBatch::new_empty(Arc::new(Schema::empty()))), ()))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }

    #[tokio::test]
    async fn a_result_stops_at_its_deadline() {
        let control = Control::new(Some(Duration::from_millis(50)), &Interrupts::new());
        let mut stream = control.guard(endless(), None);
        let mut rows = 0;
        let failure = loop {
            match stream.next().await {
                Some(Ok(_)) => rows += 1,
                Some(Err(e)) => break e,
                None => panic!("the endless stream ended"),
            }
        };
        assert!(rows > 0);
        assert!(failure.to_string().contains("time limit"), "{failure}");
        assert!(stream.next().await.is_none(), "nothing after the stop");
    }

    #[tokio::test]
    async fn an_interrupt_stops_what_runs_now_and_not_what_starts_later() {
        let interrupts = Interrupts::new();
        let control = Control::new(None, &interrupts);
        let running = tokio::spawn({
            let control = control.clone();
            async move {
                control
                    .run(async {
                        std::future::pending::<()>().await;
                        Ok(())
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        interrupts.interrupt();
        let err = running.await.unwrap().unwrap_err();
        assert!(err.message().contains("interrupted"), "{err}");
        let later = Control::new(None, &interrupts);
        assert_eq!(later.run(async { Ok(5) }).await.unwrap(), 5);
    }
}
