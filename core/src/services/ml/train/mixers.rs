//! The fitted models that map features to the target (a random forest fitted tree by tree, ridge
//! and logistic regression), how the candidates are fitted, and the columns' importances.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smartcore::ensemble::random_forest_classifier::RandomForestClassifier;
use smartcore::ensemble::random_forest_regressor::RandomForestRegressor;
use smartcore::error::Failed;
use smartcore::linear::logistic_regression::LogisticRegression;
use smartcore::linear::ridge_regression::RidgeRegression;

use crate::services::ml::linear;

use super::boosting::Boosted;
use super::columns::*;
use super::encoders::*;
use super::guard::guarded;
use super::sampling::*;

pub(super) const FOREST_TREES: u16 = 50;
pub(super) const FOREST_MAX_DEPTH: u16 = 12;
/// The forest is the expensive mixer; a random subsample this large keeps training time bounded.
pub(super) const FOREST_MAX_ROWS: usize = 20_000;
pub(super) const IMPORTANCE_MAX_ROWS: usize = 5_000;
/// Logistic regression's cost grows with classes × features × rows; past this the forest alone is fitted.
pub(super) const LOGISTIC_MAX_CLASSES: usize = 50;
/// One tree of a forest fitted a tree at a time: a one-tree smartcore forest.
pub(super) type RegressionTree = RandomForestRegressor<f64, f64, Matrix, Vec<f64>>;
/// As [`RegressionTree`], for classes.
pub(super) type ClassificationTree = RandomForestClassifier<f64, u32, Matrix, Vec<u32>>;

/// The fitted model that turns features into a prediction (a class index for classification).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) enum Mixer {
    ForestRegressor(
        #[serde(with = "shared")] Arc<RandomForestRegressor<f64, f64, Matrix, Vec<f64>>>,
    ),
    Ridge(#[serde(with = "shared")] Arc<RidgeRegression<f64, f64, Matrix, Vec<f64>>>),
    ForestClassifier(
        #[serde(with = "shared")] Arc<RandomForestClassifier<f64, u32, Matrix, Vec<u32>>>,
    ),
    Logistic(#[serde(with = "shared")] Arc<LogisticRegression<f64, u32, Matrix, Vec<u32>>>),
    /// The same value (or class index) for every row.
    Constant(f64),
    // The variants above are read from predictors stored before fits could be stopped; new
    // fits make the ones below.
    /// A random forest fitted a tree at a time, each tree a one-tree smartcore forest (its own
    /// bootstrap sample and seed, as within smartcore's forest), so that a stop is seen
    /// between trees; the prediction is the trees' mean.
    RegressionTrees(#[serde(with = "shared")] Arc<Vec<RegressionTree>>),
    /// As `RegressionTrees`; the prediction is the trees' vote, a tie going to the lowest class.
    ClassificationTrees(#[serde(with = "shared")] Arc<Vec<ClassificationTree>>),
    /// Ridge regression with an intercept (`linear`).
    LinearRegression(linear::Ridge),
    /// Logistic regression (`linear`).
    LinearClassifier(linear::Logistic),
    /// Gradient-boosted trees (`boosting`).
    Boosted(Boosted),
    /// The mean of its members' predictions (numbers) or class probabilities (classes), over
    /// `classes` classes.
    Ensemble {
        members: Vec<Mixer>,
        classes: usize,
    },
}

impl Mixer {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Mixer::ForestRegressor(_) => "random forest regressor",
            Mixer::Ridge(_) => "ridge regression",
            Mixer::ForestClassifier(_) => "random forest classifier",
            Mixer::Logistic(_) | Mixer::LinearClassifier(_) => "logistic regression",
            Mixer::Constant(_) => "constant",
            Mixer::RegressionTrees(_) => "random forest regressor",
            Mixer::ClassificationTrees(_) => "random forest classifier",
            Mixer::LinearRegression(_) => "ridge regression",
            Mixer::Boosted(_) => "boosted trees",
            Mixer::Ensemble { .. } => "ensemble",
        }
    }

    pub(super) fn predict(&self, features: &Features) -> Result<Vec<f64>, String> {
        let what = || format!("predicting with the {}", self.name());
        let as_numbers = |classes: Vec<u32>| classes.into_iter().map(f64::from).collect();
        match self {
            // bounded: one per row of the features, which hold at least as many values
            Mixer::Constant(value) => Ok(vec![*value; features.rows]),
            _ if features.rows == 0 => Ok(Vec::new()),
            Mixer::ForestRegressor(model) => {
                let x = features.matrix()?;
                guarded(&what(), || model.predict(&x))
            }
            Mixer::Ridge(model) => {
                let x = features.matrix()?;
                guarded(&what(), || model.predict(&x))
            }
            Mixer::ForestClassifier(model) => {
                let x = features.matrix()?;
                guarded(&what(), || model.predict(&x)).map(as_numbers)
            }
            Mixer::Logistic(model) => {
                let x = features.matrix()?;
                guarded(&what(), || model.predict(&x)).map(as_numbers)
            }
            Mixer::RegressionTrees(trees) => {
                let x = features.matrix()?;
                let mut sums = vec![0.0; features.rows]; // bounded: one per row held
                for tree in trees.iter() {
                    let predicted = guarded(&what(), || tree.predict(&x))?;
                    sums.iter_mut()
                        .zip(predicted)
                        .for_each(|(sum, p)| *sum += p);
                }
                let count = trees.len().max(1) as f64;
                Ok(sums.into_iter().map(|sum| sum / count).collect())
            }
            Mixer::ClassificationTrees(trees) => {
                let x = features.matrix()?;
                let mut votes = Vec::with_capacity(trees.len()); // bounded: the forest's trees
                for tree in trees.iter() {
                    votes.push(guarded(&what(), || tree.predict(&x))?);
                }
                // Each row's class is the one most trees voted for, the lowest on a tie (as
                // smartcore's forest, whose classes are ascending, picks the first maximum).
                let mut row_votes = Vec::with_capacity(votes.len()); // bounded: one per tree
                Ok((0..features.rows)
                    .map(|row| {
                        row_votes.clear();
                        row_votes.extend(votes.iter().map(|tree| tree[row]));
                        row_votes.sort_unstable();
                        let (mut best, mut most) = (0, 0);
                        for run in row_votes.chunk_by(|a, b| a == b) {
                            if run.len() > most {
                                (best, most) = (run[0], run.len());
                            }
                        }
                        f64::from(best)
                    })
                    .collect())
            }
            Mixer::LinearRegression(model) => Ok(model.predict(&features.values)),
            Mixer::LinearClassifier(model) => Ok(as_numbers(model.predict(&features.values))),
            Mixer::Boosted(model) if model.is_regression() => model.predict_values(features),
            Mixer::Boosted(model) => {
                let classes = model.classes_bound();
                let p = model.probabilities(features, classes)?;
                Ok(argmax_rows(&p, classes))
            }
            Mixer::Ensemble {
                members,
                classes: 0,
            } => {
                let mut sums = vec![0.0; features.rows]; // bounded: one per row held
                for member in members {
                    let predicted = member.predict(features)?;
                    sums.iter_mut()
                        .zip(predicted)
                        .for_each(|(sum, p)| *sum += p);
                }
                let count = members.len().max(1) as f64;
                Ok(sums.into_iter().map(|sum| sum / count).collect())
            }
            Mixer::Ensemble { classes, .. } => {
                let p = self.probabilities(features, *classes)?;
                Ok(argmax_rows(&p, *classes))
            }
        }
    }

    /// Each row's probability of each of the task's `classes` class indices (row-major,
    /// `classes` per row): the forest's share of votes, logistic regression's and the boosted
    /// trees' probabilities; a mixer without them (a constant, the stored smartcore models)
    /// gives its predicted class probability 1.
    pub(super) fn probabilities(
        &self,
        features: &Features,
        classes: usize,
    ) -> Result<Vec<f64>, String> {
        let cells = features.rows.saturating_mul(classes);
        let mut out: Vec<f64> =
            crate::capacity::vec(cells, "the class probabilities").map_err(|e| e.to_string())?;
        match self {
            Mixer::LinearClassifier(model) => {
                return Ok(model.probabilities(&features.values, classes))
            }
            Mixer::Boosted(model) => return model.probabilities(features, classes),
            Mixer::Ensemble { members, .. } if !members.is_empty() => {
                out.resize(cells, 0.0); // bounded: the capacity was checked above
                for member in members {
                    let p = member.probabilities(features, classes)?;
                    out.iter_mut().zip(p).for_each(|(sum, p)| *sum += p);
                }
                let count = members.len() as f64;
                out.iter_mut().for_each(|cell| *cell /= count);
            }
            Mixer::ClassificationTrees(trees) if features.rows > 0 => {
                out.resize(cells, 0.0); // bounded: the capacity was checked above
                let x = features.matrix()?;
                for tree in trees.iter() {
                    let voted = guarded("predicting with the random forest classifier", || {
                        tree.predict(&x)
                    })?;
                    for (row, class) in voted.into_iter().enumerate() {
                        if let Some(cell) = out.get_mut(row * classes + class as usize) {
                            *cell += 1.0;
                        }
                    }
                }
                // Votes counted whole and divided once: fractions summed tree by tree could
                // pass 1 (50 × 0.02 = 1.0000000000000004).
                let count = trees.len().max(1) as f64;
                out.iter_mut().for_each(|cell| *cell /= count);
            }
            _ => {
                out.resize(cells, 0.0); // bounded: the capacity was checked above
                for (row, class) in self.predict(features)?.into_iter().enumerate() {
                    if let Some(cell) = out.get_mut(row * classes + class as usize) {
                        *cell = 1.0;
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The most probable class index of each row of row-major probabilities, the lowest on a tie.
pub(super) fn argmax_rows(probabilities: &[f64], classes: usize) -> Vec<f64> {
    probabilities
        .chunks_exact(classes.max(1))
        .map(|row| {
            let mut best = 0;
            for (class, p) in row.iter().enumerate() {
                if *p > row[best] {
                    best = class;
                }
            }
            best as f64
        })
        .collect()
}

/// Fits the forest's [`FOREST_TREES`] trees one at a time (tree `n` with seed `SEED + n`),
/// asking `check` before each: a tree on at most [`FOREST_MAX_ROWS`] rows is the longest
/// step a stop waits for.
pub(super) fn fit_trees<M>(
    check: &dyn Fn() -> Result<(), String>,
    what: &str,
    fit_one: impl Fn(u64) -> Result<M, Failed>,
) -> Result<Vec<M>, String> {
    let mut trees = Vec::with_capacity(usize::from(FOREST_TREES)); // bounded: a constant
    for tree in 0..u64::from(FOREST_TREES) {
        check()?;
        trees.push(guarded(what, || fit_one(SEED + tree))?);
    }
    Ok(trees)
}

/// How much the validation score drops when a column's values are shuffled, scaled so the top is 1.0.
pub(super) fn permutation_importances(
    task: &Task,
    mixer: &Mixer,
    columns: &[InputColumn],
    valid: &Features,
    y_valid: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    if matches!(mixer, Mixer::Constant(_)) {
        // bounded: one per input column, at most query.max_columns
        return Ok(vec![0.0; columns.len()]);
    }
    let sample = valid.head(IMPORTANCE_MAX_ROWS);
    let y = &y_valid[..sample.rows];
    let base = task.score(mixer.predict(&sample)?, y);
    // bounded: one per input column, at most query.max_columns
    let mut drops = Vec::with_capacity(columns.len());
    for (index, (column, offset)) in columns.iter().zip(block_offsets(columns)).enumerate() {
        check()?;
        let width = column.encoder.width();
        if width == 0 {
            drops.push(0.0);
            continue;
        }
        let order = shuffled(sample.rows, SEED + 1 + index as u64);
        let permuted = sample.with_block_reordered(offset, width, &order);
        let score = task.score(mixer.predict(&permuted)?, y);
        let drop = base - score;
        drops.push(if drop.is_finite() { drop.max(0.0) } else { 0.0 });
    }
    let top = drops.iter().copied().fold(0.0, f64::max);
    if top > 0.0 {
        drops.iter_mut().for_each(|drop| *drop /= top);
    }
    Ok(drops)
}

/// Serde for the shared (cheaply cloned) fitted models: the model itself is what gets stored.
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        value: &Arc<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.as_ref().serialize(serializer)
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<T>, D::Error> {
        T::deserialize(deserializer).map(Arc::new)
    }
}
