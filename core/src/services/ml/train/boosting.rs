//! Gradient-boosted trees (forust-ml's histogram GBDT) as a mixer: one booster for a number or
//! for two classes, one per class (one against the rest) for more.
//!
//! The settings are scikit-learn's `HistGradientBoosting` defaults where forust has them
//! (learning rate 0.1, 100 rounds, 256 bins) with depth-wise trees of depth 5, which measured
//! as accurate as its 31-leaf trees and faster. A fit runs on the calling thread (forust's
//! `parallel` off): the training's memory account sees every allocation, and a training takes
//! one core, as the forest does. A fit is one call that nothing can stop midway, so its rows
//! are capped ([`BOOSTED_MAX_ROWS`], about a second of one core) and a stop waits for it.

use std::sync::Arc;

use forust_ml::objective::ObjectiveType;
use forust_ml::{GradientBooster, Matrix};
use serde::{Deserialize, Serialize};

use super::encoders::Features;
use super::guard::guarded;
use crate::capacity;

/// Boosting rounds per booster.
const ROUNDS: usize = 100;
const LEARNING_RATE: f32 = 0.1;
const MAX_DEPTH: usize = 5;
const BINS: u16 = 256;
/// More rows than this are sampled down (the training rows are shuffled, so the first ones
/// are a random sample): one fit stays within about a second of one core.
pub(super) const BOOSTED_MAX_ROWS: usize = 200_000;
/// One booster per class past two: beyond this many classes boosting is not tried.
pub(super) const BOOSTED_MAX_CLASSES: usize = 20;

/// Fitted boosters and how their margins become a prediction.
#[derive(Serialize, Deserialize, Clone)]
pub(super) struct Boosted {
    #[serde(with = "boosters")]
    boosters: Arc<Vec<GradientBooster>>,
    /// For classification, the class index each booster scores (one booster of two classes
    /// scores the second; the first is its complement); empty for regression.
    labels: Vec<u32>,
}

impl std::fmt::Debug for Boosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boosted")
            .field("boosters", &self.boosters.len())
            .field("labels", &self.labels)
            .finish()
    }
}

impl Boosted {
    /// Boosted trees for a number: squared loss.
    pub(super) fn fit_regression(features: &Features, y: &[f64]) -> Result<Boosted, String> {
        let rows = features.rows.min(BOOSTED_MAX_ROWS);
        let data = column_major(features, rows)?;
        let booster = fit_one(
            &data,
            rows,
            features.width,
            &y[..rows],
            ObjectiveType::SquaredLoss,
        )?;
        Ok(Boosted {
            boosters: Arc::new(vec![booster]),
            labels: Vec::new(),
        })
    }

    /// Boosted trees for class indices `y`: log loss for two labels, one booster per label
    /// against the rest for more.
    pub(super) fn fit_classes(
        features: &Features,
        y: &[f64],
        check: &dyn Fn() -> Result<(), String>,
    ) -> Result<Boosted, String> {
        let rows = features.rows.min(BOOSTED_MAX_ROWS);
        let y = &y[..rows];
        let mut labels: Vec<u32> = y.iter().map(|&class| class as u32).collect();
        labels.sort_unstable();
        labels.dedup();
        if labels.len() < 2 || labels.len() > BOOSTED_MAX_CLASSES {
            return Err(format!(
                "boosted trees take 2 to {BOOSTED_MAX_CLASSES} classes; got {}",
                labels.len()
            ));
        }
        let data = column_major(features, rows)?;
        let scored: Vec<u32> = if labels.len() == 2 {
            vec![labels[1]]
        } else {
            labels.clone()
        };
        // bounded: at most BOOSTED_MAX_CLASSES
        let mut boosters = Vec::with_capacity(scored.len());
        for &label in &scored {
            check()?;
            let is_label: Vec<f64> = y
                .iter()
                .map(|&class| f64::from(u8::from(class as u32 == label)))
                .collect();
            boosters.push(fit_one(
                &data,
                rows,
                features.width,
                &is_label,
                ObjectiveType::LogLoss,
            )?);
        }
        Ok(Boosted {
            boosters: Arc::new(boosters),
            labels,
        })
    }

    /// Whether these boosters predict a number.
    pub(super) fn is_regression(&self) -> bool {
        self.labels.is_empty()
    }

    /// One more than the highest class index these boosters score.
    pub(super) fn classes_bound(&self) -> usize {
        self.labels
            .iter()
            .max()
            .map_or(0, |&label| label as usize + 1)
    }

    /// One number per row (regression).
    pub(super) fn predict_values(&self, features: &Features) -> Result<Vec<f64>, String> {
        let data = column_major(features, features.rows)?;
        let matrix = Matrix::new(&data, features.rows, features.width);
        let booster = self.boosters.first().ok_or("no booster was fitted")?;
        guarded("predicting with the boosted trees", || {
            Ok::<_, String>(booster.predict(&matrix, false))
        })
    }

    /// Each row's probability of each of `classes` class indices (row-major).
    pub(super) fn probabilities(
        &self,
        features: &Features,
        classes: usize,
    ) -> Result<Vec<f64>, String> {
        let rows = features.rows;
        let data = column_major(features, rows)?;
        let matrix = Matrix::new(&data, rows, features.width);
        let margins = self
            .boosters
            .iter()
            .map(|booster| {
                guarded("predicting with the boosted trees", || {
                    Ok::<_, String>(booster.predict(&matrix, false))
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let cells = rows.saturating_mul(classes);
        let mut out: Vec<f64> =
            capacity::vec(cells, "the class probabilities").map_err(|e| e.to_string())?;
        out.resize(cells, 0.0); // bounded: the capacity was checked just above
        let sigmoid = |margin: f64| 1.0 / (1.0 + (-margin).exp());
        let at = |row: usize, label: u32| row * classes + label as usize;
        for row in 0..rows {
            if let [first, second] = self.labels[..] {
                let p = sigmoid(margins[0][row]);
                if let (Some(_), Some(_)) = (out.get(at(row, first)), out.get(at(row, second))) {
                    out[at(row, first)] = 1.0 - p;
                    out[at(row, second)] = p;
                }
                continue;
            }
            // One against the rest: each label's own probability, normalised to sum to 1.
            let total: f64 = margins.iter().map(|m| sigmoid(m[row])).sum();
            for (label, scores) in self.labels.iter().zip(&margins) {
                if let Some(cell) = out.get_mut(at(row, *label)) {
                    *cell = sigmoid(scores[row]) / total.max(f64::MIN_POSITIVE);
                }
            }
        }
        Ok(out)
    }
}

/// The first `rows` rows of `features`, column by column (forust's layout), its size checked
/// against the training's memory first.
fn column_major(features: &Features, rows: usize) -> Result<Vec<f64>, String> {
    let width = features.width;
    let cells = rows.saturating_mul(width);
    let mut data: Vec<f64> =
        capacity::vec(cells, "the boosted trees' features").map_err(|e| e.to_string())?;
    for column in 0..width {
        data.extend((0..rows).map(|row| features.values[row * width + column]));
    }
    Ok(data)
}

fn fit_one(
    data: &[f64],
    rows: usize,
    width: usize,
    y: &[f64],
    objective: ObjectiveType,
) -> Result<GradientBooster, String> {
    // forust's own copies: a bin index per cell, a gradient and hessian per row, and the
    // histograms of a level's nodes (bins × features × 3 sums); checked before it starts.
    let nodes = 1u64 << (MAX_DEPTH + 1);
    let bytes = (rows as u64)
        .saturating_mul(width as u64)
        .saturating_mul(2)
        .saturating_add((rows as u64).saturating_mul(24))
        .saturating_add(
            u64::from(BINS)
                .saturating_mul(width as u64)
                .saturating_mul(12)
                .saturating_mul(nodes),
        );
    capacity::check(bytes, "the boosted trees' histograms").map_err(|e| e.to_string())?;
    let matrix = Matrix::new(data, rows, width);
    let weights = vec![1.0; rows]; // bounded: one per row of the features held
    let mut booster = GradientBooster::default()
        .set_objective_type(objective)
        .set_iterations(ROUNDS)
        .set_learning_rate(LEARNING_RATE)
        .set_max_depth(MAX_DEPTH)
        .set_nbins(BINS)
        .set_parallel(false)
        .set_initialize_base_score(true)
        .set_seed(super::sampling::SEED);
    guarded("fitting the boosted trees", || {
        booster.fit(&matrix, y, &weights, None)
    })?;
    Ok(booster)
}

/// Serde for the shared boosters (forust's booster is not `Clone`).
mod boosters {
    use std::sync::Arc;

    use forust_ml::GradientBooster;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Arc<Vec<GradientBooster>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.as_ref().serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<Vec<GradientBooster>>, D::Error> {
        Vec::<GradientBooster>::deserialize(deserializer).map(Arc::new)
    }
}
