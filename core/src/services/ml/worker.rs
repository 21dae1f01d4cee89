//! The background worker that trains one model version: `generating` → `training` (reading
//! the rows of the training query, then fitting on a blocking thread, each phase recorded) →
//! `complete` with its predictor, or `error` with the reason. An LLM model has nothing to fit:
//! it goes through the same statuses with its checked settings. Every status change is one
//! transaction with its callbacks' deliveries (`models::set_status`).

use std::sync::Arc;
use std::time::Instant;

use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;

use super::train;
use crate::admission::Ticket;
use crate::catalog::models::openai;
use crate::catalog::models::{self, ModelStatus, ModelVersion};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tenant::TenantId;

/// The most rows one training reads: they are held in memory, outside the query memory pool.
const MAX_TRAINING_ROWS: usize = 2_000_000;

/// What training a version takes.
pub(crate) enum Job {
    /// Fit the built-in engine on these rows.
    Train(SendableRecordBatchStream),
    /// Record an LLM model; `default_model` names the configured model in its description.
    Prompt { default_model: String },
}

/// Trains `model` in the background on the current runtime, holding `ticket` (the user's
/// place among its trainings) until it ends. The caller has already recorded the version as
/// `generating`.
pub(crate) fn spawn(
    store: Arc<Store>,
    tenant: TenantId,
    model: ModelVersion,
    job: Job,
    ticket: Option<Ticket>,
) {
    // Training outlives the statement that started it.
    crate::memory::spawn_detached(&tokio::runtime::Handle::current(), async move {
        let _ticket = ticket;
        let done = match job {
            Job::Train(rows) => run(&store, tenant, &model, rows).await,
            Job::Prompt { default_model } => prompt(&store, tenant, &model, &default_model).await,
        };
        if let Err(e) = done {
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
    });
}

async fn run(
    store: &Arc<Store>,
    tenant: TenantId,
    model: &ModelVersion,
    mut rows: SendableRecordBatchStream,
) -> Result<()> {
    let started = Instant::now();
    if !phase(store, tenant, model, 0, "Reading the training data").await? {
        return Ok(());
    }
    let schema = rows.schema();
    let mut batches = Vec::new();
    let mut count = 0;
    while let Some(batch) = rows.next().await {
        let batch = batch?;
        count += batch.num_rows();
        if count > MAX_TRAINING_ROWS {
            return Err(Error::invalid(format!(
                "the training query returns more than {MAX_TRAINING_ROWS} rows, which the built-in engine holds in memory; add a LIMIT or sample the rows"
            )));
        }
        batches.push(batch);
    }
    drop(rows);
    let (target, for_training) = (model.predict.clone(), model.clone());
    let (store_for_phases, handle) = (Arc::clone(store), tokio::runtime::Handle::current());
    let trained = crate::memory::spawn_blocking(move || {
        let mut on_phase = |number: u32, name: &str| {
            // A version that is gone (dropped) stops training at the next phase; so does a
            // store that cannot record progress (the engine is closing), since it could not
            // record the result either: the version is then set to error when next opened.
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
        train::train(&batches, &target, &mut on_phase)
    })
    .await
    .map_err(|e| Error::internal(format!("training stopped: {e}")))?
    .map_err(Error::invalid)?;
    let seconds = started.elapsed().as_secs_f64();
    let model = model.clone();
    store
        .write_detached(move |txn| {
            let train::Trained {
                predictor,
                description,
            } = trained;
            models::complete(
                txn,
                tenant,
                &model,
                Some(&serde_json::to_vec(&predictor)?),
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
