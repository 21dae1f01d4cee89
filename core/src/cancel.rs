//! How statements stop before they finish: at their deadline (`query.statement_timeout_secs`,
//! or less if the request asks), when the handle that started them is interrupted
//! ([`Engine::interrupt`](crate::Engine::interrupt), what C's `mindlite_interrupt` and Python's
//! `Connection.interrupt()` call), or when their caller stops waiting (the future or the result
//! stream is dropped, which drops the plan and its tasks). A stopped statement's result ends
//! with an error that says which; a write stopped before its commit writes nothing.

use std::future::Future;
use std::pin::Pin;
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

/// The interrupt switch of one handle and its clones.
#[derive(Debug, Clone)]
pub(crate) struct Interrupts(std::sync::Arc<watch::Sender<u64>>);

impl Interrupts {
    pub(crate) fn new() -> Interrupts {
        Interrupts(std::sync::Arc::new(watch::channel(0).0))
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

/// What stops one statement: its deadline (if any) and its handle's interrupts.
#[derive(Debug, Clone)]
pub(crate) struct Control {
    deadline: Option<(Instant, Duration)>,
    interrupts: Interrupts,
    /// The interrupts there had been when the statement started: a later one stops it.
    generation: u64,
}

impl Control {
    /// A statement allowed `limit` (the configured one, or a request's smaller one), stopped
    /// by `interrupts`.
    pub(crate) fn new(limit: Option<Duration>, interrupts: &Interrupts) -> Control {
        Control {
            deadline: limit.map(|limit| (Instant::now() + limit, limit)),
            interrupts: interrupts.clone(),
            generation: interrupts.generation(),
        }
    }

    /// Completes with the reason when the statement must stop.
    fn stopped(&self) -> Pin<Box<dyn Future<Output = Error> + Send>> {
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
                _ = expired => timed_out(deadline.map(|(_, limit)| limit).unwrap_or_default()),
                _ = interrupted => interrupted_error(),
            }
        })
    }

    /// Runs `work` until it finishes or the statement must stop; stopping drops `work`.
    pub(crate) async fn run<T>(
        &self,
        work: impl Future<Output = crate::error::Result<T>>,
    ) -> crate::error::Result<T> {
        let stopped = self.stopped();
        tokio::select! {
            done = work => done,
            reason = stopped => Err(reason),
        }
    }

    /// `stream` that ends with the reason when the statement must stop, holding `ticket` (the
    /// statement's place among its user's running ones) until it ends or is dropped.
    pub(crate) fn guard(
        &self,
        stream: SendableRecordBatchStream,
        ticket: Option<Ticket>,
    ) -> SendableRecordBatchStream {
        let schema = stream.schema();
        Box::pin(RecordBatchStreamAdapter::new(
            schema,
            Guarded {
                inner: Some(stream),
                stopped: self.stopped(),
                ticket,
            },
        ))
    }
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
    inner: Option<SendableRecordBatchStream>,
    stopped: Pin<Box<dyn Future<Output = Error> + Send>>,
    ticket: Option<Ticket>,
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
        if let Poll::Ready(reason) = self.stopped.poll_unpin(cx) {
            self.inner = None;
            self.ticket = None;
            return Poll::Ready(Some(Err(datafusion::error::DataFusionError::External(
                Box::new(reason),
            ))));
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
