//! The built-in trainer: infers a kind for every column, encodes the inputs, holds a fifth of
//! the rows out, picks the mixer (ridge or logistic regression over a grid of penalties, a
//! random forest, gradient-boosted trees) by cross-validation on the rest (`search`), reports
//! the winner's accuracy on the held-out rows, and describes the result and every candidate.
//! A fitted [`Predictor`] is plain serde data; it owns everything needed to predict later,
//! including the interval and importances its confidence and explanations come from.

mod boosting;
mod columns;
mod describe;
mod encoders;
mod guard;
mod metrics;
mod mixers;
#[cfg(test)]
mod quality;
mod sampling;
mod search;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Float64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::catalog::models::{CandidateScore, Description};

use columns::*;
use describe::*;
use encoders::*;
pub(crate) use encoders::{civil_from_days, days_from_civil};
use mixers::*;
use sampling::*;

/// Why [`train`] ended early: its `on_phase` or `stopped` said stop.
pub(crate) const STOPPED: &str = "training stopped";
const MIN_TARGET_ROWS: usize = 10;
/// How many inputs an explanation names.
const EXPLAINED_INPUTS: usize = 3;
/// How many of the most important inputs an explanation weighs (each costs a prediction).
const EXPLAINED_COLUMNS: usize = 32;
/// Below this many rows a held-out split is too small to mean anything: the accuracy reported
/// is the search's out-of-fold score.
const SMALL_DATA_ROWS: usize = 50;
/// Up to this many rows the winner is fitted again on every row once it has been scored.
const REFIT_MAX_ROWS: usize = 50_000;
/// The most feature cells a prediction makes at once (8 MiB of them): a batch past it is
/// predicted a slice of rows at a time.
const PREDICT_MAX_CELLS: usize = 1 << 20;

/// The result of [`train`]: the predictor to store and a description to show the user.
pub(crate) struct Trained {
    pub(crate) predictor: Predictor,
    pub(crate) description: Description,
}

/// Everything needed to predict: the target, the fitted encoders and the winning mixer.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct Predictor {
    target: String,
    #[serde(with = "data_type_text")]
    target_type: DataType,
    task: Task,
    inputs: Vec<String>,
    columns: Vec<InputColumn>,
    mixer: Mixer,
    /// For a number: the half-width of the interval that held 90 % of the out-of-fold values
    /// in training (`<target>_min` / `_max`); `None` for classes and older predictors.
    #[serde(default)]
    interval: Option<f64>,
    /// Each input column's importance, in `columns`' order (for `<target>_explain`).
    #[serde(default)]
    importances: Vec<f64>,
}

impl Predictor {
    /// The target column's name and the Arrow type it had in training.
    #[cfg(test)]
    pub(crate) fn target(&self) -> (&str, &DataType) {
        (&self.target, &self.target_type)
    }

    /// Input column names, in training order.
    #[cfg(test)]
    pub(crate) fn inputs(&self) -> &[String] {
        &self.inputs
    }

    /// Predicts one value per row of `batch`, as an array of the target's type.
    ///
    /// Inputs are looked up by name, ignoring case; a missing column or a NULL cell is imputed as in
    /// training, and extra columns are ignored.
    #[cfg(test)]
    pub(crate) fn predict(&self, batch: &RecordBatch) -> Result<ArrayRef, String> {
        let parts = self
            .slices(batch)
            .map(|(slice, _)| {
                let features = self.features(&slice)?;
                let predicted = self.mixer.predict(&features)?;
                self.to_target_array(predicted)
            })
            .collect::<Result<Vec<ArrayRef>, String>>()?;
        concatenated(&parts)
    }

    /// `batch` in slices of rows whose features take at most [`PREDICT_MAX_CELLS`] cells
    /// (zero-copy), each with its first row's position: a wide model (hashed text, many
    /// categories) would otherwise make one matrix of a whole batch's rows × its width.
    fn slices<'a>(
        &self,
        batch: &'a RecordBatch,
    ) -> impl Iterator<Item = (RecordBatch, usize)> + 'a {
        let width: usize = self.columns.iter().map(|c| c.encoder.width()).sum();
        let step = (PREDICT_MAX_CELLS / width.max(1)).max(1);
        let rows = batch.num_rows();
        // One (empty) slice for no rows, so that the answer still has its arrays.
        (0..rows.max(1))
            .step_by(step)
            .map(move |from| (batch.slice(from, step.min(rows - from)), from))
    }

    /// The columns a prediction adds beside the target, in MindsDB's names: `<target>_confidence`
    /// (the interval's coverage for a number, the predicted class's probability for a class),
    /// `<target>_min` and `<target>_max` (the interval; NULL for a class or when there is none)
    /// and `<target>_explain` (JSON).
    pub(crate) fn detail_fields(&self) -> Vec<Field> {
        let bound = match self.task {
            Task::Regression { .. } => self.target_type.clone(),
            Task::Classification { .. } => DataType::Float64,
        };
        vec![
            Field::new(
                format!("{}_confidence", self.target),
                DataType::Float64,
                true,
            ),
            Field::new(format!("{}_min", self.target), bound.clone(), true),
            Field::new(format!("{}_max", self.target), bound, true),
            Field::new(format!("{}_explain", self.target), DataType::Utf8, true),
        ]
    }

    /// The prediction of each row of `batch` (a value of the target's type) and the columns of
    /// [`Predictor::detail_fields`]. The explanation names each row's inputs that moved its
    /// prediction most (its value against the prediction with that input missing, which costs
    /// one more prediction per input column), so it is made only when `explain`; otherwise
    /// that column is NULL.
    pub(crate) fn predict_detailed(
        &self,
        batch: &RecordBatch,
        explain: bool,
    ) -> Result<(ArrayRef, Vec<ArrayRef>), String> {
        self.predict_detailed_from(batch, explain, &[])
    }

    /// As [`Predictor::predict_detailed`], a number's prediction (and its interval) moved by
    /// each row's `offsets` value when there are any: a forecaster's model predicts the change
    /// from the last value, which it adds back.
    pub(crate) fn predict_detailed_from(
        &self,
        batch: &RecordBatch,
        explain: bool,
        offsets: &[f64],
    ) -> Result<(ArrayRef, Vec<ArrayRef>), String> {
        let mut targets = Vec::new();
        let mut details: Vec<Vec<ArrayRef>> = Vec::new();
        for (slice, from) in self.slices(batch) {
            let offsets = offsets.get(from..from + slice.num_rows()).unwrap_or(&[]);
            let (target, detail) = self.predict_slice(&slice, explain, offsets)?;
            targets.push(target);
            details.resize(detail.len(), Vec::new()); // bounded: the detail columns, four
            for (column, array) in details.iter_mut().zip(detail) {
                column.push(array);
            }
        }
        let details = details
            .iter()
            .map(|parts| concatenated(parts))
            .collect::<Result<Vec<ArrayRef>, String>>()?;
        Ok((concatenated(&targets)?, details))
    }

    /// [`Predictor::predict_detailed_from`] for one slice of rows.
    fn predict_slice(
        &self,
        batch: &RecordBatch,
        explain: bool,
        offsets: &[f64],
    ) -> Result<(ArrayRef, Vec<ArrayRef>), String> {
        let features = self.features(batch)?;
        let rows = features.rows;
        let (values, confidence, bounds, probabilities) = match &self.task {
            Task::Regression { .. } => {
                let mut values = self.mixer.predict(&features)?;
                values
                    .iter_mut()
                    .zip(offsets)
                    .for_each(|(value, offset)| *value += offset);
                let confidence: Float64Array = values
                    .iter()
                    .map(|v| {
                        self.interval
                            .filter(|_| v.is_finite())
                            .map(|_| search::COVERAGE)
                    })
                    .collect();
                let bounds = self.interval.map(|half| {
                    let low = values.iter().map(|v| v - half).collect::<Vec<f64>>();
                    let high = values.iter().map(|v| v + half).collect::<Vec<f64>>();
                    (low, high)
                });
                (values, confidence, bounds, None)
            }
            Task::Classification { classes } => {
                let count = classes.len().max(1);
                let p = self.mixer.probabilities(&features, count)?;
                let values = argmax_rows(&p, count);
                let confidence: Float64Array = values
                    .iter()
                    .enumerate()
                    .map(|(row, &class)| p.get(row * count + class as usize).copied())
                    .collect();
                (values, confidence, None, Some(p))
            }
        };
        let bound_arrays = match &bounds {
            Some((low, high)) => (
                self.to_target_array(low.clone())?,
                self.to_target_array(high.clone())?,
            ),
            None => {
                let field = &self.detail_fields()[1];
                (
                    datafusion::arrow::array::new_null_array(field.data_type(), rows),
                    datafusion::arrow::array::new_null_array(field.data_type(), rows),
                )
            }
        };
        let explanations: ArrayRef = if explain {
            // Each explanation names up to EXPLAINED_INPUTS columns (names are as long as the
            // training data made them) beside a few numbers and, for a class, its label: its
            // size is known before any is written.
            let longest = self.columns.iter().map(|c| c.name.len()).max().unwrap_or(0);
            let label = match &self.task {
                Task::Classification { classes } => classes.iter().map(String::len).max(),
                Task::Regression { .. } => None,
            };
            let per_row =
                (EXPLAINED_INPUTS * (longest * 6 + 64) + label.unwrap_or(0) * 6 + 256) as u64;
            crate::capacity::check(
                (rows as u64).saturating_mul(per_row),
                "the predictions' explanations",
            )
            .map_err(|e| e.to_string())?;
            let contributions = self.contributions(&features, &values, probabilities.as_deref())?;
            let target = self.to_target_array(values.clone())?;
            let shown = datafusion::arrow::util::display::ArrayFormatter::try_new(
                target.as_ref(),
                &Default::default(),
            )
            .map_err(|e| e.to_string())?;
            Arc::new(StringArray::from_iter_values((0..rows).map(|row| {
                let predicted = match &self.task {
                    Task::Regression { .. } => serde_json::json!(values[row]),
                    Task::Classification { .. } => serde_json::json!(shown.value(row).to_string()),
                };
                let mut top: Vec<(usize, f64)> = contributions
                    .iter()
                    .map(|(column, by_row)| (*column, by_row[row]))
                    .filter(|(_, c)| *c != 0.0 && c.is_finite())
                    .collect();
                top.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
                top.truncate(EXPLAINED_INPUTS);
                let top: Vec<serde_json::Value> = top
                    .into_iter()
                    .map(|(column, contribution)| {
                        serde_json::json!({"column": self.columns[column].name, "contribution": contribution})
                    })
                    .collect();
                let (low, high) = match &bounds {
                    Some((low, high)) => (serde_json::json!(low[row]), serde_json::json!(high[row])),
                    None => (serde_json::Value::Null, serde_json::Value::Null),
                };
                serde_json::json!({
                    "predicted_value": predicted,
                    "confidence": confidence.is_valid(row).then(|| confidence.value(row)),
                    "anomaly": null,
                    "truth": null,
                    "confidence_lower_bound": low,
                    "confidence_upper_bound": high,
                    "top_inputs": top,
                })
                .to_string()
            })))
        } else {
            Arc::new(StringArray::new_null(rows))
        };
        let target = self.to_target_array(values)?;
        Ok((
            target,
            vec![
                Arc::new(confidence),
                bound_arrays.0,
                bound_arrays.1,
                explanations,
            ],
        ))
    }

    /// For the [`EXPLAINED_COLUMNS`] most important input columns, per row: how much the
    /// prediction (a number, or the predicted class's probability) moves when that column is
    /// missing, i.e. imputed as in training. Each costs a prediction of the rows, so wide
    /// models explain their most important inputs only; the columns' blocks are swapped in
    /// one working copy of the features, not copied per column.
    fn contributions(
        &self,
        features: &Features,
        values: &[f64],
        probabilities: Option<&[f64]>,
    ) -> Result<Vec<(usize, Vec<f64>)>, String> {
        let classes = match &self.task {
            Task::Classification { classes } => classes.len().max(1),
            Task::Regression { .. } => 1,
        };
        let mut ranked: Vec<usize> = (0..self.columns.len())
            .filter(|&column| self.columns[column].encoder.width() > 0)
            .collect();
        let importance = |column: usize| self.importances.get(column).copied().unwrap_or(0.0);
        ranked.sort_by(|&a, &b| importance(b).total_cmp(&importance(a)).then(a.cmp(&b)));
        ranked.truncate(EXPLAINED_COLUMNS);
        let offsets = block_offsets(&self.columns);
        let mut work = features.select(&(0..features.rows).collect::<Vec<_>>())?;
        let mut out = Vec::with_capacity(ranked.len()); // bounded: EXPLAINED_COLUMNS
        for column in ranked {
            let encoder = &self.columns[column].encoder;
            let (offset, width) = (offsets[column], encoder.width());
            let Some(reading) = encoder.reading() else {
                continue;
            };
            // The column's encoding when it is missing, written over its block in every row.
            let mut missing = vec![0.0; width]; // bounded: the column's encoded width
            encoder.write(&Values::missing(reading, 1), &[0], &mut missing, width, 0);
            for row in work.values.chunks_exact_mut(features.width) {
                row[offset..offset + width].copy_from_slice(&missing);
            }
            let moved: Result<Vec<f64>, String> = match probabilities {
                None => self.mixer.predict(&work).map(|without| {
                    without
                        .iter()
                        .zip(values)
                        .map(|(without, with)| with - without)
                        .collect()
                }),
                Some(p) => self.mixer.probabilities(&work, classes).map(|without| {
                    values
                        .iter()
                        .enumerate()
                        .map(|(row, &class)| {
                            let at = row * classes + class as usize;
                            p.get(at).copied().unwrap_or(0.0)
                                - without.get(at).copied().unwrap_or(0.0)
                        })
                        .collect()
                }),
            };
            // The block back as it was, for the next column.
            for (row, original) in work
                .values
                .chunks_exact_mut(features.width)
                .zip(features.values.chunks_exact(features.width))
            {
                row[offset..offset + width].copy_from_slice(&original[offset..offset + width]);
            }
            out.push((column, moved?));
        }
        Ok(out)
    }

    /// The encoded features of `batch`'s rows.
    fn features(&self, batch: &RecordBatch) -> Result<Features, String> {
        let rows = batch.num_rows();
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect();
        let values = self
            .columns
            .iter()
            .map(
                |column| match (column.encoder.reading(), find_column(&names, &column.name)) {
                    (None, _) => Ok(Values::Unread),
                    (Some(reading), Some(index)) => {
                        read(batch.column(index), reading, &column.name)
                    }
                    (Some(reading), None) => Ok(Values::missing(reading, rows)),
                },
            )
            .collect::<Result<Vec<_>, String>>()?;
        let all_rows: Vec<usize> = (0..rows).collect();
        encode(&self.columns, &values, &all_rows)
    }

    fn to_target_array(&self, predicted: Vec<f64>) -> Result<ArrayRef, String> {
        let array: ArrayRef = match &self.task {
            Task::Regression { integer } => {
                Arc::new(Float64Array::from(finish_regression(predicted, *integer)))
            }
            Task::Classification { classes } => Arc::new(StringArray::from_iter_values(
                predicted.iter().map(|&class| class_label(classes, class)),
            )),
        };
        cast(&array, &self.target_type).map_err(|e| {
            format!(
                "cannot convert predictions for '{}' to {}: {e}",
                self.target, self.target_type
            )
        })
    }
}

/// Trains a predictor for `target` from rows given as Arrow record batches (all with the same schema).
///
/// `on_phase` hears `(phase, name)` for phases 1..=[`TRAINING_PHASES`](crate::catalog::models::TRAINING_PHASES) as they start; when it answers
/// false (the version was dropped) training stops there with [`STOPPED`]. Within a phase,
/// `stopped` is asked between steps of bounded work (a tree, a few milliseconds of a linear
/// fit's pass over the rows, a column's importance); when it answers true training stops there,
/// with [`STOPPED`] too, so that a drop or a memory stop ends a long fit within one step (a
/// tree on at most [`FOREST_MAX_ROWS`] rows is the longest, well under a second).
pub(crate) fn train(
    batches: &[RecordBatch],
    target: &str,
    on_phase: &mut dyn FnMut(u32, &str) -> bool,
    stopped: &dyn Fn() -> bool,
) -> Result<Trained, String> {
    let mut phase = |number: u32, name: &str| {
        if on_phase(number, name) {
            Ok(())
        } else {
            Err(STOPPED.to_string())
        }
    };
    let check = || {
        if stopped() {
            Err(STOPPED.to_string())
        } else {
            Ok(())
        }
    };
    phase(1, "Analyzing data")?;
    let table = Table::from_batches(batches)?;
    let names: Vec<&str> = table.names.iter().map(String::as_str).collect();
    let target_index = find_column(&names, target).ok_or_else(|| {
        format!(
            "Column '{target}' to predict is not in the training data; it has: {}",
            names.join(", ")
        )
    })?;
    let target_name = table.names[target_index].clone();
    if table.names.len() < 2 {
        return Err(format!(
            "needs at least one input column besides '{target_name}' to train on"
        ));
    }

    let target_type = table.columns[target_index].data_type().clone();
    let target_reading = Reading::for_type(&target_type)
        .ok_or_else(|| format!("cannot predict column '{target_name}' of type {target_type}"))?;
    let target_values = read(&table.columns[target_index], target_reading, &target_name)?;
    let kept: Vec<usize> = (0..target_values.len())
        .filter(|&row| target_values.is_present(row))
        .collect();
    if kept.len() < MIN_TARGET_ROWS {
        return Err(format!(
            "needs at least {MIN_TARGET_ROWS} rows with a value in '{target_name}'; got {}",
            kept.len()
        ));
    }
    let target_values = target_values.select(&kept);
    let target_kind = ColumnKind::infer(&target_type, &target_values, kept.len());
    let (task, y) = target_task(&target_name, target_kind, &target_type, &target_values)?;

    let mut columns = Vec::new();
    let mut values = Vec::new();
    let mut column_types = BTreeMap::from([(target_name.clone(), target_kind.as_str().to_owned())]);
    for (index, (name, array)) in table.names.iter().zip(&table.columns).enumerate() {
        if index == target_index {
            continue;
        }
        let (kind, column_values) = match Reading::for_type(array.data_type()) {
            Some(reading) => {
                let column_values = read(array, reading, name)?.select(&kept);
                let kind = ColumnKind::infer(array.data_type(), &column_values, kept.len());
                (kind, column_values)
            }
            None => (ColumnKind::Unsupported, Values::Unread),
        };
        column_types.insert(name.clone(), kind.as_str().to_owned());
        columns.push((name.clone(), kind));
        values.push(column_values);
    }

    phase(2, "Encoding")?;
    // Rows in a seeded order: a fifth (from SMALL_DATA_ROWS rows on) is held out to report
    // the accuracy on, the rest are the development rows the search cross-validates on.
    let order = shuffled(kept.len(), SEED);
    let held_out = if kept.len() < SMALL_DATA_ROWS {
        0
    } else {
        kept.len() / 5
    };
    // The encoders are fitted on every row, so that they see every category; those that
    // learn from the target (target means) are cross-fitted below.
    // A number's target means are computed over the target divided by its largest value:
    // the features are ratios (means less the prior, over the deviation), which the unit
    // leaves alone, and sums and squares of values near f64's limits (1e200, 1e-300) would
    // overflow or vanish.
    let unit_y: Vec<f64>;
    let target_view = match &task {
        Task::Regression { .. } => {
            let top = y.iter().fold(0.0_f64, |top, v| top.max(v.abs()));
            let unit = if top.is_finite() && top > 0.0 {
                top
            } else {
                1.0
            };
            unit_y = y.iter().map(|v| v / unit).collect(); // bounded: one per target row
            TargetView {
                y: &unit_y,
                classes: None,
            }
        }
        Task::Classification { classes } => TargetView {
            y: &y,
            classes: Some(classes.len()),
        },
    };
    let text_columns = columns
        .iter()
        .filter(|(_, kind)| *kind == ColumnKind::Text)
        .count();
    let context = FitContext {
        target: target_view,
        text_buckets: text_buckets(kept.len(), text_columns),
    };
    let mut fitted = Vec::with_capacity(columns.len()); // bounded: one per input column
    for ((name, kind), column_values) in columns.into_iter().zip(&values) {
        check()?;
        fitted.push(InputColumn {
            encoder: Encoder::fit(kind, column_values, &order, &context),
            name,
            kind,
        });
    }
    let columns = fitted;
    // Every row's features in the seeded order: the held-out fifth first.
    let mut all = encode_checked(&columns, &values, &order, &check)?;
    check()?;
    cross_fit_target_means(&columns, &values, &order, &context.target, &mut all);
    drop(values);
    let positions: Vec<usize> = (0..all.rows).collect();
    let (test_positions, dev_positions) = positions.split_at(held_out);
    let (test, dev) = (all.select(test_positions)?, all.select(dev_positions)?);
    let y_all: Vec<f64> = order.iter().map(|&row| y[row]).collect();
    let (y_test, y_dev) = y_all.split_at(held_out);
    let (y_test, y_dev) = (y_test.to_vec(), y_dev.to_vec());

    phase(3, "Fitting mixers")?;
    let labels = {
        let mut seen: Vec<u64> = y_dev.iter().map(|&class| class as u64).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    };
    let constant = constant_mixer(&task, &dev, &y_dev, labels, false);
    // `chosen` is what the stored mixer is (a candidate or an ensemble): none when nothing
    // could be learnt, or when no candidate could be fitted (every fold, or the chosen one's
    // own fit, failed on this data), where the constant stands in and DESCRIBE … .model shows
    // why.
    let (mixer, stage, family, search, interval, chosen) = match constant {
        Some((mixer, stage)) => (mixer, stage, "constant", None, None, None),
        None => {
            let specs = search::specs(&task, dev.rows, dev.width, labels);
            // Past REFIT_MAX_ROWS rows the held-out fifth is rows enough to choose on, and
            // the candidates' fits on the development rows are the ones kept: the chosen one
            // is not fitted again (nor refitted on every row below).
            let validation = if kept.len() > REFIT_MAX_ROWS && test.rows > 0 {
                search::Validation::HeldOut {
                    features: &test,
                    y: &y_test,
                }
            } else {
                search::Validation::Folds
            };
            let found = search::search(&task, &specs, &dev, &y_dev, validation, &check)?;
            let fitted = match found.choice(&task) {
                Some(mut choice) => {
                    check()?;
                    let fit = match choice.take_fitted() {
                        Some(mixer) => Ok(mixer),
                        None => choice.fit(&task, &dev, &y_dev, &check),
                    };
                    check()?;
                    fit.ok().map(|mixer| (mixer, choice))
                }
                None => None,
            };
            match fitted {
                Some((mixer, choice)) => {
                    let interval = match task {
                        Task::Regression { .. } => found.interval(&choice),
                        Task::Classification { .. } => None,
                    };
                    let stage = choice.stage(&task);
                    let family = choice.family();
                    (mixer, stage, family, Some(found), interval, Some(choice))
                }
                None => {
                    let (mixer, stage) = constant_mixer(&task, &dev, &y_dev, labels, true)
                        .ok_or_else(|| "could not fit any model".to_owned())?;
                    (mixer, stage, "constant", Some(found), None, None)
                }
            }
        }
    };

    phase(4, "Evaluating")?;
    // The accuracy reported is the held-out rows' (never seen by the search or the fit); with
    // too few rows to hold any out, the search's out-of-fold score.
    let winner_score = chosen.as_ref().and_then(|choice| choice.score);
    let score = if task.is_single_class() {
        1.0
    } else if test.rows > 0 {
        task.score(mixer.predict(&test)?, &y_test)
    } else {
        winner_score.unwrap_or_else(|| {
            mixer
                .predict(&dev)
                .map(|predicted| task.score(predicted, &y_dev))
                .unwrap_or(f64::NEG_INFINITY)
        })
    };
    let (importance_rows, importance_y) = if test.rows > 0 {
        (&test, &y_test)
    } else {
        (&dev, &y_dev)
    };
    let importances = permutation_importances(
        &task,
        &mixer,
        &columns,
        importance_rows,
        importance_y,
        &check,
    )?;
    // The stored mixer learns from the held-out rows too, once they have been scored: up to
    // REFIT_MAX_ROWS rows, where a fifth more rows is worth a second fit.
    // A refit that fails (a class only the held-out rows had, past what a mixer takes)
    // keeps the fit that was scored.
    let mixer = match (&chosen, test.rows) {
        (Some(choice), 1..) if kept.len() <= REFIT_MAX_ROWS => {
            check()?;
            let refit = choice.fit(&task, &all, &y_all, &check);
            check()?;
            refit.unwrap_or(mixer)
        }
        _ => mixer,
    };
    // Scores past f64's range (targets near its limits) are no score; JSON could not keep
    // them either.
    let score = if score.is_finite() { score } else { 0.0 };

    let inputs: Vec<String> = columns.iter().map(|column| column.name.clone()).collect();
    let chosen_specs = chosen.as_ref().map_or(&[][..], |choice| &choice.specs[..]);
    let mut candidates: Vec<CandidateScore> = search
        .map(|found| {
            found
                .tried
                .iter()
                .map(|tried| CandidateScore {
                    name: tried.spec.name(),
                    score: tried.score,
                    seconds: tried.seconds,
                    selected: chosen_specs == [tried.spec],
                    error: tried.error.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    // An ensemble is listed after its members, its time theirs.
    if let Some(choice) = chosen.as_ref().filter(|choice| choice.specs.len() > 1) {
        let seconds = choice
            .specs
            .iter()
            .filter_map(|spec| candidates.iter().find(|c| c.name == spec.name()))
            .map(|c| c.seconds)
            .sum();
        candidates.push(CandidateScore {
            name: choice.name(),
            score: choice.score,
            seconds,
            selected: true,
            error: None,
        });
    }
    let description = Description {
        accuracies: BTreeMap::from([(task.score_name().to_owned(), score)]),
        column_importances: inputs.iter().cloned().zip(importances.clone()).collect(),
        inputs: inputs.clone(),
        outputs: vec![target_name.clone()],
        model: model_text(&columns, &stage),
        mixer: family.to_owned(),
        column_types,
        candidates,
    };
    let predictor = Predictor {
        target: target_name,
        target_type,
        task,
        inputs,
        columns,
        mixer,
        interval,
        importances,
    };
    Ok(Trained {
        predictor,
        description,
    })
}

/// The mixer when there is nothing to learn: no usable input (the target's mean, or its most
/// frequent class) or a single class; when `forced`, the same whatever the inputs (no
/// candidate could be fitted).
fn constant_mixer(
    task: &Task,
    dev: &Features,
    y: &[f64],
    labels: usize,
    forced: bool,
) -> Option<(Mixer, String)> {
    let width = if forced { 0 } else { dev.width };
    match task {
        Task::Regression { .. } if width == 0 => {
            // The mean of the values scaled to their largest, so that huge targets do not
            // overflow the sum.
            let top = y.iter().fold(0.0_f64, |top, v| top.max(v.abs()));
            let scale = if top.is_finite() && top > 0.0 {
                top
            } else {
                1.0
            };
            let mean = y.iter().map(|v| v / scale).sum::<f64>() / y.len().max(1) as f64 * scale;
            Some((
                Mixer::Constant(mean),
                "Constant (mean of the target)".to_owned(),
            ))
        }
        Task::Regression { .. } => None,
        Task::Classification { classes } if classes.len() == 1 => {
            Some((Mixer::Constant(0.0), "Constant (single class)".to_owned()))
        }
        Task::Classification { classes } if width == 0 || labels < 2 => {
            // bounded: one per class, each a label of the rows in memory
            let mut counts = vec![0usize; classes.len()];
            for &class in y {
                if let Some(count) = counts.get_mut(class as usize) {
                    *count += 1;
                }
            }
            let majority = (0..counts.len())
                .max_by_key(|&class| (counts[class], std::cmp::Reverse(class)))
                .unwrap_or(0);
            Some((
                Mixer::Constant(majority as f64),
                "Constant (most frequent class)".to_owned(),
            ))
        }
        Task::Classification { .. } => None,
    }
}

/// One array of `parts` in order (the parts themselves when there is one).
fn concatenated(parts: &[ArrayRef]) -> Result<ArrayRef, String> {
    match parts {
        [one] => Ok(Arc::clone(one)),
        parts => {
            let arrays: Vec<&dyn Array> = parts.iter().map(|part| part.as_ref()).collect();
            datafusion::arrow::compute::concat(&arrays).map_err(|e| e.to_string())
        }
    }
}

/// Arrow's `DataType` has serde only behind a feature; its text form parses back with `FromStr`.
pub(crate) mod data_type_text {
    use datafusion::arrow::datatypes::DataType;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    /// `data_type` as its text.
    pub(crate) fn serialize<S: Serializer>(
        data_type: &DataType,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(data_type)
    }

    /// A data type from its text.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DataType, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|e| D::Error::custom(format!("unknown Arrow type '{text}': {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use datafusion::arrow::array::{
        AsArray, BooleanArray, Date32Array, Float64Array, Int64Array, StringArray,
        TimestampSecondArray,
    };
    use datafusion::arrow::datatypes::Float64Type;
    use smartcore::ensemble::random_forest_classifier::{
        RandomForestClassifier, RandomForestClassifierParameters,
    };
    use smartcore::ensemble::random_forest_regressor::{
        RandomForestRegressor, RandomForestRegressorParameters,
    };
    use smartcore::linear::logistic_regression::LogisticRegression;
    use smartcore::linear::ridge_regression::RidgeRegression;

    use super::*;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).expect("test columns have equal lengths")
    }

    fn noise(rng: &mut SplitMix64) -> f64 {
        (rng.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }

    fn quiet(_: u32, _: &str) -> bool {
        true
    }

    /// y = 3a + 5·[c = "hot"] + small noise, with b irrelevant.
    fn regression_batch(rows: usize) -> RecordBatch {
        let mut rng = SplitMix64(7);
        let a: Vec<f64> = (0..rows).map(|_| noise(&mut rng) * 20.0).collect();
        let b: Vec<f64> = (0..rows).map(|_| noise(&mut rng) * 20.0).collect();
        let c: Vec<&str> = (0..rows)
            .map(|row| ["hot", "cold", "mild"][row % 3])
            .collect();
        let y: Vec<f64> = (0..rows)
            .map(|row| 3.0 * a[row] + if c[row] == "hot" { 5.0 } else { 0.0 } + noise(&mut rng))
            .collect();
        batch(vec![
            ("a", Arc::new(Float64Array::from(a))),
            ("b", Arc::new(Float64Array::from(b))),
            ("c", Arc::new(StringArray::from(c))),
            ("y", Arc::new(Float64Array::from(y))),
        ])
    }

    /// label = "pos" when x > 0, with a noise column.
    fn classification_batch(rows: usize) -> RecordBatch {
        let mut rng = SplitMix64(11);
        let x: Vec<f64> = (0..rows).map(|_| noise(&mut rng)).collect();
        let junk: Vec<f64> = (0..rows).map(|_| noise(&mut rng)).collect();
        let label: Vec<&str> = x
            .iter()
            .map(|&x| if x > 0.0 { "pos" } else { "neg" })
            .collect();
        batch(vec![
            ("x", Arc::new(Float64Array::from(x))),
            ("junk", Arc::new(Float64Array::from(junk))),
            ("label", Arc::new(StringArray::from(label))),
        ])
    }

    fn train_quietly(data: &RecordBatch, target: &str) -> Result<Trained, String> {
        train(std::slice::from_ref(data), target, &mut quiet, &|| false)
    }

    #[test]
    fn regression_scores_high_and_ranks_the_driving_column_first() {
        let trained = train_quietly(&regression_batch(600), "y").expect("trains");
        let description = &trained.description;
        assert!(description.accuracies["r2_score"] > 0.9, "{description:?}");
        assert_eq!(description.column_importances["a"], 1.0, "{description:?}");
        assert!(
            description.column_importances["b"] < 0.05,
            "{description:?}"
        );
        assert!(description.column_importances["c"] > 0.0, "{description:?}");
        assert_eq!(description.inputs, ["a", "b", "c"]);
        assert_eq!(description.outputs, ["y"]);
        assert_eq!(description.column_types["a"], "float");
        assert_eq!(description.column_types["c"], "categorical");
        assert!(description
            .model
            .starts_with("Numeric scaling (a, b) --> One-hot (c) --> "));
        assert!(["random forest", "linear"].contains(&description.mixer.as_str()));
        let (name, data_type) = trained.predictor.target();
        assert_eq!((name, data_type), ("y", &DataType::Float64));
    }

    #[test]
    fn classification_by_sign_scores_high_and_ranks_the_sign_column_first() {
        let trained = train_quietly(&classification_batch(500), "label").expect("trains");
        let description = &trained.description;
        assert!(
            description.accuracies["balanced_accuracy_score"] > 0.9,
            "{description:?}"
        );
        assert_eq!(description.column_importances["x"], 1.0, "{description:?}");
        assert!(
            description.column_importances["junk"] < 0.2,
            "{description:?}"
        );
        assert_eq!(description.column_types["label"], "categorical");

        let probe = batch(vec![(
            "X",
            Arc::new(Float64Array::from(vec![-0.4, 0.4])) as ArrayRef,
        )]);
        let predicted = trained.predictor.predict(&probe).expect("predicts");
        let labels = predicted.as_string::<i32>();
        assert_eq!((labels.value(0), labels.value(1)), ("neg", "pos"));
    }

    #[test]
    fn single_class_target_predicts_that_class() {
        let rows: i32 = 30;
        let data = batch(vec![
            (
                "x",
                Arc::new(Float64Array::from(
                    (0..rows).map(f64::from).collect::<Vec<_>>(),
                )),
            ),
            (
                "label",
                Arc::new(StringArray::from(vec!["only"; rows as usize])),
            ),
        ]);
        let trained = train_quietly(&data, "label").expect("trains");
        assert_eq!(
            trained.description.accuracies["balanced_accuracy_score"],
            1.0
        );
        assert_eq!(trained.description.column_importances["x"], 0.0);
        let predicted = trained.predictor.predict(&data).expect("predicts");
        assert!(predicted
            .as_string::<i32>()
            .iter()
            .all(|label| label == Some("only")));
    }

    #[test]
    fn boolean_target_predicts_booleans() {
        let rows: i32 = 200;
        let x: Vec<f64> = (0..rows).map(|row| f64::from(row) - 100.0).collect();
        let flag: Vec<bool> = x.iter().map(|&x| x > 0.0).collect();
        let data = batch(vec![
            ("x", Arc::new(Float64Array::from(x))),
            ("flag", Arc::new(BooleanArray::from(flag))),
        ]);
        let trained = train_quietly(&data, "flag").expect("trains");
        assert_eq!(trained.description.column_types["flag"], "binary");
        let predicted = trained.predictor.predict(&data).expect("predicts");
        assert_eq!(predicted.data_type(), &DataType::Boolean);
        assert_eq!(predicted.len(), rows as usize);
    }

    #[test]
    fn nonlinear_relation_is_won_by_the_random_forest() {
        let rows = 400;
        let mut rng = SplitMix64(5);
        let a: Vec<f64> = (0..rows).map(|_| noise(&mut rng) * 4.0).collect();
        let y: Vec<f64> = a.iter().map(|a| a.abs() * 10.0).collect();
        let data = batch(vec![
            ("a", Arc::new(Float64Array::from(a))),
            ("y", Arc::new(Float64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        let description = &trained.description;
        assert_eq!(description.mixer, "random forest", "{description:?}");
        assert_eq!(
            description.model,
            "Numeric scaling (a) --> Random forest regressor (50 trees)"
        );
        assert!(description.accuracies["r2_score"] > 0.9, "{description:?}");
    }

    #[test]
    fn target_not_in_the_data_is_an_error_naming_the_columns() {
        let Err(message) = train_quietly(&regression_batch(20), "price") else {
            panic!("training on a missing target must fail");
        };
        assert_eq!(
            message,
            "Column 'price' to predict is not in the training data; it has: a, b, c, y"
        );
    }

    #[test]
    fn target_is_found_ignoring_case() {
        let trained = train_quietly(&regression_batch(20), "Y").expect("trains");
        assert_eq!(trained.predictor.target().0, "y");
    }

    #[test]
    fn too_few_target_rows_is_an_error() {
        let y: Vec<Option<f64>> = (0..20).map(|row| (row % 3 == 0).then_some(1.0)).collect();
        let data = batch(vec![
            ("x", Arc::new(Float64Array::from(vec![1.0; 20]))),
            ("y", Arc::new(Float64Array::from(y))),
        ]);
        let Err(message) = train_quietly(&data, "y") else {
            panic!("training on 7 target values must fail");
        };
        assert_eq!(message, "needs at least 10 rows with a value in 'y'; got 7");
    }

    #[test]
    fn target_without_inputs_is_an_error() {
        let data = batch(vec![(
            "y",
            Arc::new(Float64Array::from(vec![1.0; 20])) as ArrayRef,
        )]);
        let message = train_quietly(&data, "y")
            .err()
            .expect("fails without inputs");
        assert!(message.contains("at least one input column"), "{message}");
    }

    #[test]
    fn free_text_target_is_an_error() {
        let text: Vec<String> = (0..100).map(|row| format!("note number {row}")).collect();
        let data = batch(vec![
            ("x", Arc::new(Float64Array::from(vec![1.0; 100]))),
            ("note", Arc::new(StringArray::from(text))),
        ]);
        let message = train_quietly(&data, "note")
            .err()
            .expect("fails on free text");
        assert_eq!(message, "cannot predict free text column 'note'");
    }

    #[test]
    fn predictor_round_trips_through_json_and_predicts_the_same() {
        let data = regression_batch(300);
        let trained = train_quietly(&data, "y").expect("trains");
        let json = serde_json::to_string(&trained.predictor).expect("serializes");
        let restored: Predictor = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(restored.inputs(), trained.predictor.inputs());
        assert_eq!(restored.target(), trained.predictor.target());
        let before = trained.predictor.predict(&data).expect("predicts");
        let after = restored.predict(&data).expect("predicts");
        let (before, after) = (
            before.as_primitive::<Float64Type>(),
            after.as_primitive::<Float64Type>(),
        );
        for (before, after) in before.values().iter().zip(after.values()) {
            assert!(
                (before - after).abs() <= 1e-9 * before.abs().max(1.0),
                "{before} vs {after}"
            );
        }
    }

    #[test]
    fn classifier_round_trips_through_json() {
        let data = classification_batch(200);
        let trained = train_quietly(&data, "label").expect("trains");
        let json = serde_json::to_string(&trained.predictor).expect("serializes");
        let restored: Predictor = serde_json::from_str(&json).expect("deserializes");
        let before = trained.predictor.predict(&data).expect("predicts");
        let after = restored.predict(&data).expect("predicts");
        assert_eq!(before.as_ref(), after.as_ref());
    }

    #[test]
    fn predict_tolerates_missing_columns_and_nulls() {
        let trained = train_quietly(&regression_batch(200), "y").expect("trains");
        let probe = batch(vec![
            (
                "A",
                Arc::new(Float64Array::from(vec![Some(1.0), None, Some(f64::NAN)])) as ArrayRef,
            ),
            (
                "c",
                Arc::new(StringArray::from(vec![
                    Some("hot"),
                    None,
                    Some("never seen"),
                ])),
            ),
            ("extra", Arc::new(Int64Array::from(vec![1, 2, 3]))),
        ]);
        let predicted = trained.predictor.predict(&probe).expect("predicts");
        assert_eq!(predicted.data_type(), &DataType::Float64);
        assert_eq!(predicted.len(), 3);
        assert_eq!(predicted.null_count(), 0);

        let empty = batch(vec![(
            "a",
            Arc::new(Float64Array::from(Vec::<f64>::new())) as ArrayRef,
        )]);
        assert_eq!(
            trained.predictor.predict(&empty).expect("predicts").len(),
            0
        );
    }

    /// A category never seen in training (or missing) predicts like an average row: trained
    /// where every row is "north", asking about "center" must not move the prediction.
    #[test]
    fn an_unseen_category_predicts_like_an_average_row() {
        let rows = 120;
        let rooms: Vec<f64> = (0..rows).map(|row| f64::from(row % 7)).collect();
        let y: Vec<f64> = rooms.iter().map(|r| 3.0 * r).collect();
        let data = batch(vec![
            ("rooms", Arc::new(Float64Array::from(rooms)) as ArrayRef),
            (
                "area",
                Arc::new(StringArray::from(vec!["north"; rows as usize])),
            ),
            ("price", Arc::new(Float64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "price").expect("trains");
        let probe = batch(vec![
            (
                "rooms",
                Arc::new(Float64Array::from(vec![2.0, 2.0, 2.0])) as ArrayRef,
            ),
            (
                "area",
                Arc::new(StringArray::from(vec![Some("north"), Some("center"), None])),
            ),
        ]);
        let predicted = trained.predictor.predict(&probe).expect("predicts");
        let predicted = predicted.as_any().downcast_ref::<Float64Array>().unwrap();
        for (row, value) in predicted.values().iter().enumerate() {
            assert!((value - 6.0).abs() < 1.0, "row {row}: {value}");
        }
    }

    #[test]
    fn decimal_inputs_are_numeric_and_other_types_are_cast_when_predicting() {
        let rows = 80;
        let amount = datafusion::arrow::array::Decimal128Array::from(
            (0..rows).map(i128::from).collect::<Vec<_>>(),
        )
        .with_precision_and_scale(10, 2)
        .expect("valid decimal type");
        let y: Vec<f64> = (0..rows).map(|row| f64::from(row) / 10.0).collect();
        let data = batch(vec![
            ("amount", Arc::new(amount)),
            ("y", Arc::new(Float64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        assert_eq!(trained.description.column_types["amount"], "float");
        let probe = batch(vec![(
            "amount",
            Arc::new(StringArray::from(vec!["0.5", "not a number"])) as ArrayRef,
        )]);
        let predicted = trained.predictor.predict(&probe).expect("predicts");
        assert_eq!(predicted.len(), 2);
    }

    #[test]
    fn integer_target_predictions_are_integers() {
        let rows = 120;
        let x: Vec<i64> = (0..rows).collect();
        let y: Vec<i64> = x.iter().map(|x| 2 * x + 1).collect();
        let data = batch(vec![
            ("x", Arc::new(Int64Array::from(x))),
            ("y", Arc::new(Int64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        assert_eq!(trained.description.column_types["y"], "integer");
        assert_eq!(trained.description.column_types["x"], "integer");
        let predicted = trained.predictor.predict(&data).expect("predicts");
        assert_eq!(predicted.data_type(), &DataType::Int64);
        let predicted = predicted.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert!(
            (predicted.value(50) - 101).abs() <= 3,
            "{}",
            predicted.value(50)
        );
    }

    #[test]
    fn date_and_timestamp_columns_are_encoded_as_calendar_parts() {
        let rows = 100;
        let days: Vec<i32> = (0..rows).map(|row| 19_000 + row * 3).collect();
        let seconds: Vec<i64> = days
            .iter()
            .map(|&day| i64::from(day) * 86_400 + 3_600)
            .collect();
        let y: Vec<f64> = (0..rows).map(|row| f64::from(row % 7)).collect();
        let data = batch(vec![
            ("day", Arc::new(Date32Array::from(days))),
            ("at", Arc::new(TimestampSecondArray::from(seconds))),
            ("y", Arc::new(Float64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        let description = &trained.description;
        assert_eq!(description.column_types["day"], "date");
        assert_eq!(description.column_types["at"], "timestamp");
        assert!(
            description
                .model
                .contains("Date parts: year, month, day, day of week (day)"),
            "{}",
            description.model
        );
        assert!(
            description
                .model
                .contains("Timestamp parts: year, month, day, day of week, hour (at)"),
            "{}",
            description.model
        );
        assert_eq!(
            trained.predictor.predict(&data).expect("predicts").len(),
            rows as usize
        );
    }

    #[test]
    fn calendar_parts_match_known_dates() {
        // 2024-02-29 was a Thursday; 1969-12-31 23:00 UTC a Wednesday.
        assert_eq!(
            calendar_parts(19_782 * 86_400 + 7_200, true),
            [2024.0, 2.0, 29.0, 4.0, 2.0]
        );
        assert_eq!(
            calendar_parts(-3_600, true),
            [1969.0, 12.0, 31.0, 3.0, 23.0]
        );
    }

    #[test]
    fn nan_infinite_constant_and_empty_inputs_do_not_panic() {
        let rows = 60;
        let weird: Vec<f64> = (0..rows)
            .map(|row| match row % 4 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                _ => f64::from(row),
            })
            .collect();
        let y: Vec<f64> = (0..rows)
            .map(|row| {
                if row % 5 == 0 {
                    f64::NAN
                } else {
                    f64::from(row)
                }
            })
            .collect();
        let data = batch(vec![
            ("weird", Arc::new(Float64Array::from(weird))),
            (
                "constant",
                Arc::new(Float64Array::from(vec![4.0; rows as usize])),
            ),
            (
                "nothing",
                Arc::new(Float64Array::from(vec![None::<f64>; rows as usize])),
            ),
            (
                "no_text",
                Arc::new(StringArray::from(vec![None::<&str>; rows as usize])),
            ),
            ("y", Arc::new(Float64Array::from(y))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        assert_eq!(
            trained.predictor.predict(&data).expect("predicts").len(),
            rows as usize
        );
    }

    #[test]
    fn inputs_with_no_usable_features_fall_back_to_a_constant() {
        let rows = 40;
        let data = batch(vec![
            (
                "note",
                Arc::new(StringArray::from(vec![None::<&str>; rows])),
            ),
            ("y", Arc::new(Float64Array::from(vec![2.5; rows]))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        assert_eq!(trained.description.mixer, "constant");
        assert_eq!(
            trained.description.model,
            "One-hot (note) --> Constant (mean of the target)"
        );
        assert_eq!(trained.description.accuracies["r2_score"], 1.0);
        let predicted = trained.predictor.predict(&data).expect("predicts");
        assert!(predicted
            .as_primitive::<Float64Type>()
            .values()
            .iter()
            .all(|&v| v == 2.5));
    }

    #[test]
    fn rows_from_several_batches_are_combined() {
        let first = regression_batch(100);
        let second = regression_batch(100);
        let trained = train(&[first, second], "y", &mut quiet, &|| false).expect("trains");
        assert!(trained.description.accuracies["r2_score"] > 0.9);
    }

    #[test]
    fn phases_are_reported_in_order() {
        let mut seen = Vec::new();
        train(
            &[regression_batch(60)],
            "y",
            &mut |phase, name| {
                seen.push((phase, name.to_owned()));
                true
            },
            &|| false,
        )
        .expect("trains");
        let phases: Vec<u32> = seen.iter().map(|(phase, _)| *phase).collect();
        assert_eq!(
            phases,
            (1..=crate::catalog::models::TRAINING_PHASES).collect::<Vec<_>>()
        );
        assert_eq!(seen[0].1, "Analyzing data");
    }

    #[test]
    fn training_stops_at_the_phase_told_to_stop() {
        let mut seen = Vec::new();
        let stopped = train(
            &[regression_batch(60)],
            "y",
            &mut |phase, _| {
                seen.push(phase);
                phase < 3
            },
            &|| false,
        );
        assert_eq!(stopped.err().as_deref(), Some(STOPPED));
        assert_eq!(seen, [1, 2, 3], "nothing is fitted after the stop");
    }

    #[test]
    fn training_stops_between_the_steps_of_a_fit() {
        // `stopped` says stop on its fifth look once fitting has begun, inside the forest:
        // training ends with STOPPED without looking again, and no phase after fitting starts.
        let looks = std::cell::Cell::new(0);
        let fitting = std::cell::Cell::new(false);
        let mut phases = Vec::new();
        let stopped = train(
            &[regression_batch(300)],
            "y",
            &mut |phase, _| {
                phases.push(phase);
                fitting.set(phase >= 3);
                true
            },
            &|| {
                looks.set(looks.get() + u32::from(fitting.get()));
                looks.get() >= 5
            },
        );
        assert_eq!(stopped.err().as_deref(), Some(STOPPED));
        // The stopping look, and the one that tells a stop from a failed candidate: a fit
        // that went on would look again before each of its remaining 46 trees.
        assert!(
            looks.get() <= 6,
            "a fit went on after the stop: {} looks",
            looks.get()
        );
        assert_eq!(phases, [1, 2, 3], "a phase started after the stop");
    }

    #[test]
    fn predictors_stored_with_smartcore_mixers_still_predict() {
        // Predictors stored before fits could be stopped hold smartcore's own forest, ridge
        // and logistic models: they must read back and predict as they did.
        let trained = train_quietly(&regression_batch(200), "y").expect("trains");
        let mut predictor = trained.predictor;
        let features = Features {
            rows: 8,
            width: 3,
            values: (0..24).map(|v| f64::from((v * 37) % 11) - 5.0).collect(),
        };
        let x = features.matrix().unwrap();
        let y: Vec<f64> = (0..8).map(f64::from).collect();
        let labels: Vec<u32> = (0..8).map(|row| row % 2).collect();
        let old = [
            Mixer::ForestRegressor(Arc::new(
                RandomForestRegressor::fit(
                    &x,
                    &y,
                    RandomForestRegressorParameters::default().with_n_trees(3),
                )
                .unwrap(),
            )),
            Mixer::Ridge(Arc::new(
                RidgeRegression::fit(&x, &y, Default::default()).unwrap(),
            )),
            Mixer::ForestClassifier(Arc::new(
                RandomForestClassifier::fit(
                    &x,
                    &labels,
                    RandomForestClassifierParameters::default().with_n_trees(3),
                )
                .unwrap(),
            )),
            Mixer::Logistic(Arc::new(
                LogisticRegression::fit(&x, &labels, Default::default()).unwrap(),
            )),
        ];
        for mixer in old {
            let direct = mixer.predict(&features).unwrap();
            predictor.mixer = mixer;
            let stored = serde_json::to_vec(&predictor).unwrap();
            let read: Predictor = serde_json::from_slice(&stored).unwrap();
            assert_eq!(
                read.mixer.predict(&features).unwrap(),
                direct,
                "{}",
                read.mixer.name()
            );
        }
    }

    #[test]
    #[ignore = "timing check: cargo test --release -- --ignored"]
    fn hundred_thousand_rows_train_quickly() {
        let rows = 100_000;
        let mut rng = SplitMix64(3);
        let mut columns: Vec<(String, ArrayRef)> = (0..9)
            .map(|column| {
                let values: Vec<f64> = (0..rows).map(|_| noise(&mut rng) * 10.0).collect();
                (
                    format!("x{column}"),
                    Arc::new(Float64Array::from(values)) as ArrayRef,
                )
            })
            .collect();
        let city: Vec<&str> = (0..rows)
            .map(|row| ["a", "b", "c", "d", "e"][row % 5])
            .collect();
        columns.push(("city".to_owned(), Arc::new(StringArray::from(city))));
        let y: Vec<f64> = (0..rows)
            .map(|row| {
                let x0 = columns[0].1.as_primitive::<Float64Type>().value(row);
                let x1 = columns[1].1.as_primitive::<Float64Type>().value(row);
                2.0 * x0 - x1 + noise(&mut rng)
            })
            .collect();
        columns.push(("y".to_owned(), Arc::new(Float64Array::from(y))));
        let data = RecordBatch::try_from_iter(columns).expect("equal lengths");
        for target in ["y", "city"] {
            let started = Instant::now();
            let trained = train_quietly(&data, target).expect("trains");
            let elapsed = started.elapsed();
            eprintln!(
                "100k rows, target {target}: {elapsed:?}: {:?}",
                trained.description
            );
            assert!(elapsed.as_secs() < 60);
        }
    }
}
