//! The background worker that trains one model version: `generating` → `training` (reading
//! the rows of the training query, then fitting on a blocking thread, each phase recorded) →
//! `complete` with its predictor, or `error` with the reason. An LLM model has nothing to fit:
//! it goes through the same statuses with its checked settings. Every status change is one
//! transaction with its callbacks' deliveries (`models::set_status`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{forecast, train};
use crate::admission::Ticket;
use crate::catalog::models::openai;
use crate::catalog::models::{self, ModelStatus, ModelVersion};
use crate::error::{Error, ErrorKind, Result};
use crate::running::Registration;
use crate::store::Store;
use crate::tenant::TenantId;

/// The most rows one training reads: they are held in memory, charged to the training's
/// account (statement budget, user's share) as they are read.
const MAX_TRAINING_ROWS: usize = 2_000_000;

/// What training a version takes.
pub(crate) enum Job {
    /// Fit the built-in engine on these rows.
    Train(SendableRecordBatchStream),
    /// Record an LLM model; `default_model` names the configured model in its description.
    Prompt { default_model: String },
}

/// How a training may be stopped: by dropping its model (the registration's token), and its
/// training query and then its fit each by the statement deadline
/// (`query.statement_timeout_secs`), counted from when the query starts to be read and from
/// when the fit starts.
pub(crate) struct Stops {
    /// The training's place among the work of its model, cancelled by DROP MODEL (or DROP
    /// PROJECT): registered in the transaction that recorded the version.
    pub(crate) running: Registration,
    /// How long reading the training query's rows may take, and then how long the fit may.
    pub(crate) read_limit: Option<Duration>,
    /// The training's memory account (`query.statement_memory_mb`, within its user's
    /// `max_memory_mb`): over it, reading or fitting stops and the version is set to error.
    pub(crate) memory: Arc<crate::memory::Account>,
}

/// Trains `model` in the background on the current runtime, holding `ticket` (the user's
/// place among its trainings) until it ends. The caller has already recorded the version as
/// `generating`. Dropping the model stops it at once: the ticket is given back by the drop
/// itself, the training query is dropped, and nothing more is written (a fit in progress on
/// its blocking thread stops at its next step: a tree, or milliseconds of a linear fit).
pub(crate) fn spawn(
    store: Arc<Store>,
    tenant: TenantId,
    model: ModelVersion,
    job: Job,
    ticket: Option<Ticket>,
    stops: Stops,
) {
    let Stops {
        running,
        read_limit,
        memory,
    } = stops;
    running.hold(ticket);
    // Training outlives the statement that started it (so it is spawned detached from the
    // statement's account) and has its own account, within the statement budget and the
    // user's share, that reading and fitting are charged to; the status it ends in is written
    // outside that account, since a stopped account commits nothing.
    let tag = memory.tag();
    crate::memory::spawn_detached(&tokio::runtime::Handle::current(), async move {
        let stop = running.token().clone();
        let work = crate::memory::InScope::new(
            tag,
            Box::pin(async {
                match job {
                    Job::Train(rows) => run(&store, tenant, &model, rows, read_limit, &stop).await,
                    Job::Prompt { default_model } => {
                        prompt(&store, tenant, &model, &default_model).await
                    }
                }
            }),
        );
        let done = tokio::select! {
            biased;
            // Dropped: the work (its query, its wait for the fit) goes now.
            () = stop.cancelled() => return,
            done = work => done,
        };
        drop(memory);
        if let Err(e) = done {
            if stop.is_cancelled() {
                return;
            }
            let message = e.message().to_string();
            // If even this fails the store is failing; the version stays `training` and is
            // set to `error` when the engine next opens.
            let _ = store
                .write_detached(move |txn| {
                    models::set_status(txn, tenant, &model, ModelStatus::Error, |m| {
                        m.error = Some(message)
                    })
                })
                .await;
        }
        // Ended: the user's place is given back.
        drop(running);
    });
}

async fn run(
    store: &Arc<Store>,
    tenant: TenantId,
    model: &ModelVersion,
    mut rows: SendableRecordBatchStream,
    read_limit: Option<Duration>,
    stop: &CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    if !phase(store, tenant, model, 0, "Reading the training data").await? {
        return Ok(());
    }
    let schema = rows.schema();
    let mut batches = Vec::new();
    let read = async {
        let mut count = 0;
        while let Some(batch) = rows.next().await {
            let batch = batch?;
            // Over the training's memory budget (or the process's): stop here.
            crate::cancel::check()?;
            count += batch.num_rows();
            if count > MAX_TRAINING_ROWS {
                return Err(Error::invalid(format!(
                    "the training query returns more than {MAX_TRAINING_ROWS} rows, which the built-in engine holds in memory; add a LIMIT or sample the rows"
                )));
            }
            batches.push(batch);
        }
        Ok(())
    };
    match read_limit {
        None => read.await?,
        Some(limit) => tokio::time::timeout(limit, read).await.map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the training query was stopped after running {} s, the time limit of a statement (query.statement_timeout_secs)",
                    limit.as_secs_f64()
                ),
            )
        })??,
    }
    drop(rows);
    let (target, for_training) = (model.predict.clone(), model.clone());
    let (store_for_phases, handle) = (Arc::clone(store), tokio::runtime::Handle::current());
    let stop = stop.clone();
    // The fit has a statement's time too (the reading above had its own): past it, it stops
    // at its next step as a drop would, and the error says why.
    let fit_deadline = read_limit.map(|limit| Instant::now() + limit);
    let past_deadline = move || fit_deadline.is_some_and(|deadline| Instant::now() >= deadline);
    // Fits are capped by the plan's `max_running_trainings`, not the blocking share.
    let trained = crate::memory::spawn_blocking_unshared(move || {
        let mut on_phase = |number: u32, name: &str| {
            // A version that is gone (dropped) stops training at the next phase; so does a
            // store that cannot record progress (the engine is closing), since it could not
            // record the result either: the version is then set to error when next opened.
            // So does a training over its memory budget.
            if stop.is_cancelled() || crate::cancel::check().is_err() || past_deadline() {
                return false;
            }
            handle
                .block_on(phase(
                    &store_for_phases,
                    tenant,
                    &for_training,
                    number,
                    name,
                ))
                .unwrap_or(false)
        };
        // Between a fit's steps (a tree, a few milliseconds of a pass over the rows), the
        // same stops without a write: a drop ends a long fit there, not at its next phase.
        let stopped = || stop.is_cancelled() || crate::cancel::check().is_err() || past_deadline();
        // ORDER BY … WINDOW makes a forecaster; anything else a tabular predictor. Either
        // is stored as its JSON (`fitted` reads it back).
        let series = models::SeriesOptions::from_using(&for_training.using)
            .map_err(|e| e.message().to_owned())?;
        match series {
            Some(options) => {
                forecast::train_series(&batches, &target, &options, &mut on_phase, &stopped)
                    .and_then(|(forecaster, description)| {
                        super::stored_forecaster(&forecaster).map(|bytes| (bytes, description))
                    })
            }
            None => train::train(&batches, &target, &mut on_phase, &stopped).and_then(
                |train::Trained {
                     predictor,
                     description,
                 }| {
                    super::stored_predictor(&predictor).map(|bytes| (bytes, description))
                },
            ),
        }
    })
    .await
    .map_err(|e| Error::internal(format!("training stopped: {e}")));
    // Stopped for its memory or its time: say so, rather than that a phase stopped it.
    crate::cancel::check()?;
    if let (Some(limit), true) = (read_limit, past_deadline()) {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "the training was stopped after fitting for {} s, the time limit of a statement (query.statement_timeout_secs)",
                limit.as_secs_f64()
            ),
        ));
    }
    let trained = trained?.map_err(Error::invalid)?;
    let seconds = started.elapsed().as_secs_f64();
    let model = model.clone();
    store
        .write_detached(move |txn| {
            let (predictor, description) = trained;
            models::complete(
                txn,
                tenant,
                &model,
                Some(&predictor),
                description,
                &schema,
                seconds,
            )
        })
        .await?;
    Ok(())
}

/// Completes an LLM model: its columns are the template's slots and the target.
async fn prompt(
    store: &Arc<Store>,
    tenant: TenantId,
    model: &ModelVersion,
    default_model: &str,
) -> Result<()> {
    let started = Instant::now();
    if !phase(store, tenant, model, 0, "Checking the prompt template").await? {
        return Ok(());
    }
    let prompted = openai::check(&model.using)?;
    let schema = prompted.schema(&model.predict)?;
    let description = prompted.description(&model.predict, default_model);
    let seconds = started.elapsed().as_secs_f64();
    let model = model.clone();
    store
        .write_detached(move |txn| {
            models::complete(txn, tenant, &model, None, description, &schema, seconds)
        })
        .await?;
    Ok(())
}

/// Records that training reached phase `number`; false when the version is gone (dropped).
async fn phase(
    store: &Arc<Store>,
    tenant: TenantId,
    model: &ModelVersion,
    number: u32,
    name: &str,
) -> Result<bool> {
    let (model, name) = (model.clone(), name.to_string());
    let updated = store
        .write_detached(move |txn| {
            models::set_status(txn, tenant, &model, ModelStatus::Training, |m| {
                m.current_phase = number;
                m.phase_name = name;
            })
        })
        .await?;
    Ok(updated.is_some())
}
