//! The candidate search: every mixer worth trying for the task (ridge and logistic regression
//! over a grid of penalties, a random forest, gradient-boosted trees) is fitted and scored by
//! k-fold cross-validation on the development rows, and the best out-of-fold score wins.
//!
//! Why k folds: one small validation split decides by chance (a forest kept on one lucky 20 %
//! of 300 rows, a ridge penalty that shrinks an exact line). Every development row is scored
//! once by a mixer that did not see it, so the choice rests on all of them. Past
//! [`CV_MAX_ROWS`] development rows one fold of five is held out instead: the score is stable
//! there and five fits of each candidate would cost five times the time.
//!
//! The winner's out-of-fold residuals are also what the numeric intervals are calibrated on
//! (split conformal prediction): the 90 % quantile of |residual| is a half-width that covers a
//! new value 90 % of the time, whatever the mixer.

use std::time::Instant;

use crate::services::ml::linear;

use super::boosting::{Boosted, BOOSTED_MAX_CLASSES};
use super::columns::*;
use super::encoders::*;
use super::guard::guarded;
use super::mixers::*;

/// Folds of the cross-validation.
const FOLDS: usize = 5;
/// Past this many development rows, one fold is held out rather than all five in turn.
pub(super) const CV_MAX_ROWS: usize = 20_000;
/// The ridge penalties tried; 0 is ordinary least squares, exact on exact data.
const RIDGE_ALPHAS: [f64; 6] = [0.0, 0.01, 0.1, 1.0, 10.0, 100.0];
/// The logistic penalties tried (1 is scikit-learn's default, C = 1).
const LOGISTIC_ALPHAS: [f64; 4] = [0.01, 0.1, 1.0, 10.0];
/// The coverage of the numeric intervals.
pub(super) const COVERAGE: f64 = 0.9;

/// One configuration of a mixer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Spec {
    Ridge(f64),
    Logistic(f64),
    Forest,
    Boosted,
}

impl Spec {
    /// The name `DESCRIBE … .model` lists it by.
    pub(super) fn name(self) -> String {
        match self {
            Spec::Ridge(alpha) => format!("ridge regression (alpha = {alpha})"),
            Spec::Logistic(alpha) => format!("logistic regression (alpha = {alpha})"),
            Spec::Forest => "random forest".to_owned(),
            Spec::Boosted => "gradient-boosted trees".to_owned(),
        }
    }

    /// The mixer family (`DESCRIBE`'s `mixer`).
    pub(super) fn family(self) -> &'static str {
        match self {
            Spec::Ridge(_) | Spec::Logistic(_) => "linear",
            Spec::Forest => "random forest",
            Spec::Boosted => "boosted trees",
        }
    }

    /// Its stage in the model's text.
    pub(super) fn stage(self, task: &Task) -> String {
        let regression = matches!(task, Task::Regression { .. });
        match self {
            Spec::Ridge(alpha) => format!("Ridge regression (alpha = {alpha})"),
            Spec::Logistic(alpha) => format!("Logistic regression (alpha = {alpha})"),
            Spec::Forest if regression => {
                format!("Random forest regressor ({FOREST_TREES} trees)")
            }
            Spec::Forest => format!("Random forest classifier ({FOREST_TREES} trees)"),
            Spec::Boosted => "Gradient-boosted trees (100 rounds, depth 5)".to_owned(),
        }
    }
}

/// The candidates for `task` on `rows` development rows with `labels` distinct classes
/// among them (classification), simplest first: a tie goes to the simpler.
pub(super) fn specs(task: &Task, rows: usize, labels: usize) -> Vec<Spec> {
    let mut specs = Vec::new();
    match task {
        Task::Regression { .. } => specs.extend(RIDGE_ALPHAS.map(Spec::Ridge)),
        Task::Classification { .. } => {
            if labels <= LOGISTIC_MAX_CLASSES {
                specs.extend(LOGISTIC_ALPHAS.map(Spec::Logistic));
            }
        }
    }
    let classes_fit = matches!(task, Task::Regression { .. }) || labels <= BOOSTED_MAX_CLASSES;
    if classes_fit {
        specs.push(Spec::Boosted);
    }
    // Past one fold's worth of rows, boosting is both the better and the cheaper of the trees.
    if rows <= CV_MAX_ROWS || !classes_fit {
        specs.push(Spec::Forest);
    }
    specs
}

/// Fits one candidate on `features` and `y` (numbers, or class indices).
pub(super) fn fit(
    spec: Spec,
    task: &Task,
    features: &Features,
    y: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Mixer, String> {
    match (spec, task) {
        (Spec::Ridge(alpha), _) => {
            linear::Ridge::fit(&features.values, features.width, y, alpha, check)
                .map(Mixer::LinearRegression)
        }
        (Spec::Logistic(alpha), _) => {
            let y: Vec<u32> = y.iter().map(|&class| class as u32).collect();
            guarded("fitting the logistic regression", || {
                linear::Logistic::fit(&features.values, features.width, &y, alpha, check)
            })
            .map(Mixer::LinearClassifier)
        }
        (Spec::Forest, Task::Regression { .. }) => fit_forest_regressor(features, y, check),
        (Spec::Forest, Task::Classification { .. }) => fit_forest_classifier(features, y, check),
        (Spec::Boosted, Task::Regression { .. }) => {
            Boosted::fit_regression(features, y).map(Mixer::Boosted)
        }
        (Spec::Boosted, Task::Classification { .. }) => {
            Boosted::fit_classes(features, y, check).map(Mixer::Boosted)
        }
    }
}

/// One candidate's cross-validation.
pub(super) struct Tried {
    pub(super) spec: Spec,
    /// The out-of-fold score; `None` when a fit failed.
    pub(super) score: Option<f64>,
    /// Seconds spent fitting and scoring it, all folds.
    pub(super) seconds: f64,
    /// Why it failed, if it did.
    pub(super) error: Option<String>,
    /// Its out-of-fold prediction of each scored row (see [`Search::scored`]).
    predicted: Vec<f64>,
}

/// The search's result.
pub(super) struct Search {
    pub(super) tried: Vec<Tried>,
    /// The development rows that were scored out of fold (all of them, or one fold's).
    pub(super) scored: Vec<usize>,
}

impl Search {
    /// The best-scoring candidate (the simplest on a tie); `None` when every fit failed.
    pub(super) fn winner(&self) -> Option<&Tried> {
        let mut best: Option<&Tried> = None;
        for tried in &self.tried {
            if let Some(score) = tried.score {
                if best.is_none_or(|b| b.score.is_some_and(|s| score > s)) {
                    best = Some(tried);
                }
            }
        }
        best
    }

    /// The half-width of a [`COVERAGE`] interval around a numeric prediction: the conformal
    /// quantile of the winner's out-of-fold absolute residuals.
    pub(super) fn interval(&self, winner: &Tried, y: &[f64]) -> Option<f64> {
        let mut residuals: Vec<f64> = self
            .scored
            .iter()
            .zip(&winner.predicted)
            .map(|(&row, predicted)| (y[row] - predicted).abs())
            .filter(|residual| residual.is_finite())
            .collect();
        if residuals.is_empty() {
            return None;
        }
        residuals.sort_by(f64::total_cmp);
        let n = residuals.len();
        // The ⌈(n + 1)·coverage⌉-th smallest, the finite-sample correction of split conformal.
        let rank = ((n as f64 + 1.0) * COVERAGE).ceil() as usize;
        Some(residuals[rank.clamp(1, n) - 1])
    }
}

/// Cross-validates every candidate of `specs` on `features` / `y`; `check` is asked between
/// fits (and within the linear fits and the forest's trees).
pub(super) fn search(
    task: &Task,
    specs: &[Spec],
    features: &Features,
    y: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Search, String> {
    let rows = features.rows;
    let rounds = if rows <= CV_MAX_ROWS { FOLDS } else { 1 };
    let folds = FOLDS.min(rows);
    let scored: Vec<usize> = (0..rows).filter(|row| row % folds < rounds).collect();
    let mut tried: Vec<Tried> = specs
        .iter()
        .map(|&spec| Tried {
            spec,
            score: None,
            seconds: 0.0,
            error: None,
            // bounded: one per development row, as the features hold
            predicted: vec![f64::NAN; scored.len()],
        })
        .collect();
    // Where each scored row's prediction goes.
    let mut slot = vec![usize::MAX; rows]; // bounded: one per development row
    for (position, &row) in scored.iter().enumerate() {
        slot[row] = position;
    }
    for fold in 0..rounds {
        let (train_rows, valid_rows): (Vec<usize>, Vec<usize>) =
            (0..rows).partition(|row| row % folds != fold);
        if train_rows.is_empty() || valid_rows.is_empty() {
            continue;
        }
        // A fold whose training rows hold one class (a rare class all in the held-out fold)
        // teaches no classifier anything: it is skipped, its rows left unscored.
        if matches!(task, Task::Classification { .. }) {
            let first = y[train_rows[0]];
            if train_rows.iter().all(|&row| y[row] == first) {
                continue;
            }
        }
        let train = features.select(&train_rows)?;
        let valid = features.select(&valid_rows)?;
        let y_train: Vec<f64> = train_rows.iter().map(|&row| y[row]).collect();
        // All ridge penalties share one pass over the rows.
        let alphas: Vec<f64> = specs
            .iter()
            .filter_map(|spec| match spec {
                Spec::Ridge(alpha) => Some(*alpha),
                _ => None,
            })
            .collect();
        let started = Instant::now();
        let mut ridges = if alphas.is_empty() {
            Vec::new()
        } else {
            // Its outer error is a stop (passed on) or data it cannot take (every penalty
            // failed; the other candidates may still fit).
            match linear::Ridge::fit_path(&train.values, train.width, &y_train, &alphas, check) {
                Ok(fits) => fits,
                Err(e) => {
                    check()?;
                    alphas.iter().map(|_| Err(e.clone())).collect()
                }
            }
        }
        .into_iter();
        let ridge_seconds = started.elapsed().as_secs_f64() / alphas.len().max(1) as f64;
        for candidate in tried.iter_mut() {
            check()?;
            if candidate.error.is_some() {
                continue;
            }
            let started = Instant::now();
            let mixer = match candidate.spec {
                Spec::Ridge(_) => {
                    candidate.seconds += ridge_seconds;
                    ridges
                        .next()
                        .unwrap_or_else(|| Err("no ridge fit".to_owned()))
                        .map(Mixer::LinearRegression)
                }
                spec => fit(spec, task, &train, &y_train, check),
            };
            check()?;
            let predicted = mixer.and_then(|mixer| mixer.predict(&valid));
            candidate.seconds += started.elapsed().as_secs_f64();
            match predicted {
                Ok(predicted) => {
                    for (&row, value) in valid_rows.iter().zip(predicted) {
                        if let Some(cell) = candidate.predicted.get_mut(slot[row]) {
                            *cell = value;
                        }
                    }
                }
                Err(e) => candidate.error = Some(e),
            }
        }
    }
    // Rows of a skipped fold were predicted by nobody; the rest by every candidate that fitted.
    let kept: Vec<usize> = (0..scored.len())
        .filter(|&at| {
            tried
                .iter()
                .any(|c| c.error.is_none() && !c.predicted[at].is_nan())
        })
        .collect();
    let truth: Vec<f64> = kept.iter().map(|&at| y[scored[at]]).collect();
    for candidate in &mut tried {
        if candidate.error.is_none() && !kept.is_empty() {
            let predicted: Vec<f64> = kept.iter().map(|&at| candidate.predicted[at]).collect();
            let score = task.score(predicted, &truth);
            candidate.score = score.is_finite().then_some(score);
        }
        candidate.predicted = kept.iter().map(|&at| candidate.predicted[at]).collect();
    }
    let scored = kept.iter().map(|&at| scored[at]).collect();
    Ok(Search { tried, scored })
}

fn fit_forest_regressor(
    features: &Features,
    y: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Mixer, String> {
    use smartcore::ensemble::random_forest_regressor::{
        RandomForestRegressor, RandomForestRegressorParameters,
    };
    let sample = features.head(FOREST_MAX_ROWS);
    let x = sample.matrix()?;
    let y = y[..sample.rows].to_vec();
    fit_trees(check, "fitting the random forest regressor", |seed| {
        let params = RandomForestRegressorParameters::default()
            .with_n_trees(1)
            .with_max_depth(FOREST_MAX_DEPTH)
            .with_seed(seed);
        RandomForestRegressor::fit(&x, &y, params)
    })
    .map(|trees| Mixer::RegressionTrees(std::sync::Arc::new(trees)))
}

fn fit_forest_classifier(
    features: &Features,
    y: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Mixer, String> {
    use smartcore::ensemble::random_forest_classifier::{
        RandomForestClassifier, RandomForestClassifierParameters,
    };
    let sample = features.head(FOREST_MAX_ROWS);
    let x = sample.matrix()?;
    let y: Vec<u32> = y[..sample.rows].iter().map(|&class| class as u32).collect();
    fit_trees(check, "fitting the random forest classifier", |seed| {
        let params = RandomForestClassifierParameters::default()
            .with_n_trees(1)
            .with_max_depth(FOREST_MAX_DEPTH)
            .with_seed(seed);
        RandomForestClassifier::fit(&x, &y, params)
    })
    .map(|trees| Mixer::ClassificationTrees(std::sync::Arc::new(trees)))
}
