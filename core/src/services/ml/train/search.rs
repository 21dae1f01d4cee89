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
//! Beside the single candidates, the mean of the best two or three of different families (a
//! linear model, boosted trees, the forest) is scored on the same out-of-fold predictions (for
//! classes, the mean of their probabilities): it is chosen when it closes
//! [`ENSEMBLE_MARGIN`] of the best single one's gap to a perfect score, since it costs a fit
//! and a prediction per member.
//!
//! The chosen model's out-of-fold residuals are also what the numeric intervals are calibrated
//! on (split conformal prediction): the 90 % quantile of |residual| is a half-width that covers
//! a new value 90 % of the time, whatever the mixer.

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
/// Past this many features the linear candidates are not tried: each fit solves a system of
/// features × features, whose cost grows with their cube (1,024 hashed-text features took
/// minutes on 200 rows).
const LINEAR_MAX_FEATURES: usize = 512;
/// The coverage of the numeric intervals.
pub(super) const COVERAGE: f64 = 0.9;
/// An ensemble is chosen when it closes at least this share of the gap between the best
/// single candidate's score and a perfect one (1): a gain in the noise is not worth a fit and
/// a prediction per member.
const ENSEMBLE_MARGIN: f64 = 0.05;
/// For classes, an ensemble must also get this many more scored rows right (in the score's
/// units): accuracy moves by whole rows, and one or two rows flipping is chance.
const ENSEMBLE_MIN_ROWS: f64 = 3.0;
/// Classes up to which the candidates' out-of-fold probabilities are kept, for ensembles.
const ENSEMBLE_MAX_CLASSES: usize = 20;

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

/// The candidates for `task` on `rows` development rows of `width` features with `labels`
/// distinct classes among them (classification), simplest first: a tie goes to the simpler.
pub(super) fn specs(task: &Task, rows: usize, width: usize, labels: usize) -> Vec<Spec> {
    let mut specs = Vec::new();
    match task {
        _ if width > LINEAR_MAX_FEATURES => {}
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
    /// Its out-of-fold prediction of each scored row (see [`Search`]'s truth).
    predicted: Vec<f64>,
    /// For classes (up to [`ENSEMBLE_MAX_CLASSES`]), its out-of-fold probabilities of each
    /// class, row-major per scored row; empty otherwise.
    probabilities: Vec<f64>,
    /// Its fit on every development row, when the search scored it on the held-out rows.
    fitted: Option<Mixer>,
}

/// What the search chose: one candidate, or the mean of several.
pub(super) struct Choice {
    pub(super) specs: Vec<Spec>,
    /// The out-of-fold score.
    pub(super) score: Option<f64>,
    /// The out-of-fold prediction of each scored row.
    predicted: Vec<f64>,
    /// Its fit on every development row, when the search kept its candidates' fits.
    fitted: Option<Mixer>,
}

impl Choice {
    /// The name `DESCRIBE … .model` lists it by.
    pub(super) fn name(&self) -> String {
        match self.specs.as_slice() {
            [one] => one.name(),
            many => format!(
                "ensemble (mean of {})",
                many.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// The mixer family (`DESCRIBE`'s `mixer`).
    pub(super) fn family(&self) -> &'static str {
        match self.specs.as_slice() {
            [one] => one.family(),
            _ => "ensemble",
        }
    }

    /// Its stage in the model's text.
    pub(super) fn stage(&self, task: &Task) -> String {
        match self.specs.as_slice() {
            [one] => one.stage(task),
            many => format!(
                "Ensemble, the mean of: {}",
                many.iter()
                    .map(|s| s.stage(task))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }

    /// Its fit on every development row when the search kept it (taken: the caller keeps it).
    pub(super) fn take_fitted(&mut self) -> Option<Mixer> {
        self.fitted.take()
    }

    /// Fits it on `features` and `y`: its one candidate, or each member.
    pub(super) fn fit(
        &self,
        task: &Task,
        features: &Features,
        y: &[f64],
        check: &dyn Fn() -> Result<(), String>,
    ) -> Result<Mixer, String> {
        match self.specs.as_slice() {
            [one] => fit(*one, task, features, y, check),
            many => {
                let members = many
                    .iter()
                    .map(|&spec| {
                        check()?;
                        fit(spec, task, features, y, check)
                    })
                    .collect::<Result<Vec<Mixer>, String>>()?;
                let classes = match task {
                    Task::Regression { .. } => 0,
                    Task::Classification { classes } => classes.len(),
                };
                Ok(Mixer::Ensemble { members, classes })
            }
        }
    }
}

/// The search's result.
pub(super) struct Search {
    pub(super) tried: Vec<Tried>,
    /// The truth of each row scored (development rows out of fold, or the held-out rows).
    truth: Vec<f64>,
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

    /// The best of the winner and the ensembles of the best candidate of each family: an
    /// ensemble when it closes [`ENSEMBLE_MARGIN`] of the winner's gap to a perfect score (for
    /// classes, and gets [`ENSEMBLE_MIN_ROWS`] more rows right). `None` when every fit failed.
    pub(super) fn choice(&self, task: &Task) -> Option<Choice> {
        let winner = self.winner()?;
        let single = Choice {
            specs: vec![winner.spec],
            score: winner.score,
            predicted: winner.predicted.clone(),
            fitted: winner.fitted.clone(),
        };
        // The best candidate of each family, best first.
        let mut heads: Vec<&Tried> = Vec::new();
        for tried in &self.tried {
            let Some(score) = tried.score else { continue };
            match heads
                .iter_mut()
                .find(|head| head.spec.family() == tried.spec.family())
            {
                Some(head) => {
                    if head.score.is_some_and(|best| score > best) {
                        *head = tried;
                    }
                }
                None => heads.push(tried),
            }
        }
        heads.sort_by(|a, b| {
            b.score
                .unwrap_or(f64::MIN)
                .total_cmp(&a.score.unwrap_or(f64::MIN))
        });
        let truth = &self.truth;
        let mut best = single;
        for members in 2..=heads.len().min(3) {
            let members = &heads[..members];
            let Some(predicted) = mean_prediction(task, members) else {
                continue;
            };
            let score = task.score(predicted.clone(), truth);
            let best_score = best.score.unwrap_or(f64::MIN);
            let rows = match task {
                Task::Regression { .. } => 0.0,
                Task::Classification { .. } => ENSEMBLE_MIN_ROWS / truth.len().max(1) as f64,
            };
            let bar = best_score + (ENSEMBLE_MARGIN * (1.0 - best_score).max(0.0)).max(rows);
            if score.is_finite() && score > bar {
                let fitted = members
                    .iter()
                    .map(|m| m.fitted.clone())
                    .collect::<Option<Vec<Mixer>>>()
                    .map(|members| Mixer::Ensemble {
                        members,
                        classes: match task {
                            Task::Regression { .. } => 0,
                            Task::Classification { classes } => classes.len(),
                        },
                    });
                best = Choice {
                    specs: members.iter().map(|m| m.spec).collect(),
                    score: Some(score),
                    predicted,
                    fitted,
                };
            }
        }
        Some(best)
    }

    /// The half-width of a [`COVERAGE`] interval around a numeric prediction: the conformal
    /// quantile of the chosen model's out-of-fold absolute residuals.
    pub(super) fn interval(&self, chosen: &Choice) -> Option<f64> {
        let mut residuals: Vec<f64> = self
            .truth
            .iter()
            .zip(&chosen.predicted)
            .map(|(truth, predicted)| (truth - predicted).abs())
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

/// The mean of `members`' out-of-fold predictions: of the numbers, or of the class
/// probabilities (then the most probable class); `None` when a member kept no probabilities.
fn mean_prediction(task: &Task, members: &[&Tried]) -> Option<Vec<f64>> {
    let count = members.len() as f64;
    match task {
        Task::Regression { .. } => {
            let rows = members.first()?.predicted.len();
            Some(
                (0..rows)
                    .map(|row| members.iter().map(|m| m.predicted[row]).sum::<f64>() / count)
                    .collect(),
            )
        }
        Task::Classification { classes } => {
            let cells = members.first()?.probabilities.len();
            if cells == 0 || members.iter().any(|m| m.probabilities.len() != cells) {
                return None;
            }
            let mean: Vec<f64> = (0..cells)
                .map(|cell| members.iter().map(|m| m.probabilities[cell]).sum::<f64>() / count)
                .collect();
            Some(argmax_rows(&mean, classes.len()))
        }
    }
}

/// Where the search scores its candidates.
pub(super) enum Validation<'a> {
    /// By k-fold cross-validation over the development rows ([`FOLDS`] folds, or one of them
    /// past [`CV_MAX_ROWS`] rows).
    Folds,
    /// Fitted on all the development rows and scored on these rows (the held-out rows, on
    /// data large enough that they score as well as folds would): each candidate's fit is
    /// kept, so the chosen one needs no fit of its own.
    HeldOut {
        features: &'a Features,
        y: &'a [f64],
    },
}

/// Scores every candidate of `specs` fitted on `features` / `y` as `validation` says; `check`
/// is asked between fits (and within the linear fits and the forest's trees).
pub(super) fn search(
    task: &Task,
    specs: &[Spec],
    features: &Features,
    y: &[f64],
    validation: Validation,
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Search, String> {
    let rows = features.rows;
    let rounds = match validation {
        Validation::HeldOut { .. } => 1,
        Validation::Folds if rows <= CV_MAX_ROWS => FOLDS,
        Validation::Folds => 1,
    };
    let folds = FOLDS.min(rows);
    // The rows scored, as (where their features are, their truth): development rows of the
    // folds scored, or the given rows.
    let truth: Vec<f64> = match validation {
        Validation::HeldOut { y: valid_y, .. } => valid_y.to_vec(),
        Validation::Folds => (0..rows)
            .filter(|row| row % folds < rounds)
            .map(|row| y[row])
            .collect(),
    };
    let scored = truth.len();
    // Classes whose probabilities are kept for ensembles (0: none).
    let kept_classes = match task {
        Task::Classification { classes } if classes.len() <= ENSEMBLE_MAX_CLASSES => classes.len(),
        _ => 0,
    };
    let mut tried: Vec<Tried> = Vec::with_capacity(specs.len()); // bounded: a few candidates
    for &spec in specs {
        let cells = scored.saturating_mul(kept_classes);
        let mut probabilities = crate::capacity::vec(cells, "the candidates' probabilities")
            .map_err(|e| e.to_string())?;
        probabilities.resize(cells, f64::NAN); // bounded: the capacity was checked above
        tried.push(Tried {
            spec,
            score: None,
            seconds: 0.0,
            error: None,
            // bounded: one per scored row, as the features hold
            predicted: vec![f64::NAN; scored],
            probabilities,
            fitted: None,
        });
    }
    // Where each development row's prediction goes, when it is scored.
    let mut slot = vec![usize::MAX; rows]; // bounded: one per development row
    if matches!(validation, Validation::Folds) {
        for (position, row) in (0..rows).filter(|row| row % folds < rounds).enumerate() {
            slot[row] = position;
        }
    }
    for fold in 0..rounds {
        // The fold's training and validation features, and where each validation row's
        // prediction goes.
        let (fold_train, fold_valid, y_train, slots);
        let (train, valid) = match validation {
            Validation::HeldOut {
                features: valid, ..
            } => {
                y_train = y.to_vec();
                slots = (0..valid.rows).collect::<Vec<usize>>();
                (features, valid)
            }
            Validation::Folds => {
                let (train_rows, valid_rows): (Vec<usize>, Vec<usize>) =
                    (0..rows).partition(|row| row % folds != fold);
                if train_rows.is_empty() || valid_rows.is_empty() {
                    continue;
                }
                y_train = train_rows.iter().map(|&row| y[row]).collect::<Vec<f64>>();
                slots = valid_rows.iter().map(|&row| slot[row]).collect();
                fold_train = features.select(&train_rows)?;
                fold_valid = features.select(&valid_rows)?;
                (&fold_train, &fold_valid)
            }
        };
        // A fold whose training rows hold one class (a rare class all in the held-out fold)
        // teaches no classifier anything: it is skipped, its rows left unscored.
        if matches!(task, Task::Classification { .. })
            && y_train.iter().all(|&class| Some(&class) == y_train.first())
        {
            continue;
        }
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
                spec => fit(spec, task, train, &y_train, check),
            };
            check()?;
            // With probabilities kept, the class is their most probable one, which is what
            // every classifier predicts.
            let predicted = mixer.and_then(|mixer| {
                let predicted = match kept_classes {
                    0 => mixer.predict(valid).map(|p| (p, Vec::new())),
                    classes => mixer
                        .probabilities(valid, classes)
                        .map(|p| (argmax_rows(&p, classes), p)),
                }?;
                Ok((predicted, mixer))
            });
            candidate.seconds += started.elapsed().as_secs_f64();
            match predicted {
                Ok(((predicted, probabilities), mixer)) => {
                    for (&at, value) in slots.iter().zip(predicted) {
                        if let Some(cell) = candidate.predicted.get_mut(at) {
                            *cell = value;
                        }
                    }
                    for (&at, p) in slots
                        .iter()
                        .zip(probabilities.chunks_exact(kept_classes.max(1)))
                    {
                        let cells = at.checked_mul(kept_classes).and_then(|from| {
                            candidate.probabilities.get_mut(from..from + kept_classes)
                        });
                        if let Some(cells) = cells {
                            cells.copy_from_slice(p);
                        }
                    }
                    if matches!(validation, Validation::HeldOut { .. }) {
                        candidate.fitted = Some(mixer);
                    }
                }
                Err(e) => candidate.error = Some(e),
            }
        }
    }
    // Rows of a skipped fold were predicted by nobody; the rest by every candidate that fitted.
    let kept: Vec<usize> = (0..scored)
        .filter(|&at| {
            tried
                .iter()
                .any(|c| c.error.is_none() && !c.predicted[at].is_nan())
        })
        .collect();
    let truth: Vec<f64> = kept.iter().map(|&at| truth[at]).collect();
    for candidate in &mut tried {
        if candidate.error.is_none() && !kept.is_empty() {
            let predicted: Vec<f64> = kept.iter().map(|&at| candidate.predicted[at]).collect();
            let score = task.score(predicted, &truth);
            candidate.score = score.is_finite().then_some(score);
            if candidate.score.is_none() {
                candidate.error = Some(
                    "its predictions could not be scored: they, or the target's spread, \
                     pass what a 64-bit float holds"
                        .to_owned(),
                );
            }
        }
        candidate.predicted = kept.iter().map(|&at| candidate.predicted[at]).collect();
        if kept_classes > 0 {
            candidate.probabilities = kept
                .iter()
                .flat_map(|&at| &candidate.probabilities[at * kept_classes..][..kept_classes])
                .copied()
                .collect();
        }
    }
    Ok(Search { tried, truth })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tried(
        spec: Spec,
        predicted: Vec<f64>,
        probabilities: Vec<f64>,
        task: &Task,
        y: &[f64],
    ) -> Tried {
        Tried {
            spec,
            score: Some(task.score(predicted.clone(), y)),
            seconds: 0.0,
            error: None,
            predicted,
            probabilities,
            fitted: None,
        }
    }

    /// A two-class classifier's probabilities (P(a), P(b)) for a row of `class`: 0.9 on it
    /// when `sure`, else 0.45 (barely wrong).
    fn lean(sure: bool, class: f64) -> [f64; 2] {
        let right = if sure { 0.9 } else { 0.45 };
        if class == 0.0 {
            [right, 1.0 - right]
        } else {
            [1.0 - right, right]
        }
    }

    /// Two candidates wrong in opposite directions: their mean is exact, and chosen.
    #[test]
    fn an_ensemble_is_chosen_when_its_mean_scores_better() {
        let task = Task::Regression { integer: false };
        let y: Vec<f64> = (0..40).map(f64::from).collect();
        let high: Vec<f64> = y
            .iter()
            .enumerate()
            .map(|(i, v)| v + 1.0 + (i % 3) as f64)
            .collect();
        let low: Vec<f64> = y
            .iter()
            .enumerate()
            .map(|(i, v)| v - 1.0 - (i % 3) as f64)
            .collect();
        let search = Search {
            tried: vec![
                tried(Spec::Ridge(1.0), high, Vec::new(), &task, &y),
                tried(Spec::Boosted, low, Vec::new(), &task, &y),
            ],
            truth: y.clone(),
        };
        let choice = search.choice(&task).expect("a choice");
        assert_eq!(choice.specs, [Spec::Ridge(1.0), Spec::Boosted]);
        assert_eq!(choice.score, Some(1.0));
        assert_eq!(search.interval(&choice), Some(0.0));
        assert!(
            choice.name().starts_with("ensemble (mean of "),
            "{}",
            choice.name()
        );
        assert_eq!(choice.family(), "ensemble");
    }

    /// Two of one family are not an ensemble, and a mean that scores no better is not chosen.
    #[test]
    fn the_single_best_stays_when_an_ensemble_does_not_win() {
        let task = Task::Regression { integer: false };
        let y: Vec<f64> = (0..40).map(f64::from).collect();
        let exact = y.clone();
        let off: Vec<f64> = y.iter().map(|v| v + 3.0).collect();
        let search = Search {
            tried: vec![
                tried(Spec::Ridge(0.0), exact.clone(), Vec::new(), &task, &y),
                tried(Spec::Ridge(1.0), off.clone(), Vec::new(), &task, &y),
                tried(Spec::Boosted, off, Vec::new(), &task, &y),
            ],
            truth: y.clone(),
        };
        let choice = search.choice(&task).expect("a choice");
        assert_eq!(choice.specs, [Spec::Ridge(0.0)]);
    }

    /// For classes the members' probabilities are averaged: two classifiers, each sure where
    /// it is right and unsure where it is wrong, are right everywhere once averaged.
    #[test]
    fn a_class_ensemble_averages_probabilities() {
        let task = Task::Classification {
            classes: vec!["a".into(), "b".into()],
        };
        // Rows alternate a, b. The first is sure and right on rows 0–19, barely wrong on
        // 20–39; the second the other way round.
        let y: Vec<f64> = (0..40).map(|row| f64::from(row % 2)).collect();
        let first: Vec<f64> = (0..40)
            .flat_map(|row| lean(row < 20, y[row as usize]))
            .collect();
        let second: Vec<f64> = (0..40)
            .flat_map(|row| lean(row >= 20, y[row as usize]))
            .collect();
        let argmax = |p: &[f64]| argmax_rows(p, 2);
        let search = Search {
            tried: vec![
                tried(Spec::Logistic(1.0), argmax(&first), first, &task, &y),
                tried(Spec::Forest, argmax(&second), second, &task, &y),
            ],
            truth: y.clone(),
        };
        let choice = search.choice(&task).expect("a choice");
        assert_eq!(choice.specs, [Spec::Logistic(1.0), Spec::Forest]);
        assert_eq!(choice.score, Some(1.0));
    }

    /// One more class row right out of 40 is chance, not a reason for an ensemble.
    #[test]
    fn a_class_ensemble_must_win_by_more_than_a_row_or_two() {
        let task = Task::Classification {
            classes: vec!["a".into(), "b".into()],
        };
        let y: Vec<f64> = (0..40).map(|row| f64::from(row % 2)).collect();
        // The first is wrong on row 0 only, the second on row 1 only.
        let first: Vec<f64> = (0..40).flat_map(|row| lean(row != 0, y[row])).collect();
        let second: Vec<f64> = (0..40).flat_map(|row| lean(row != 1, y[row])).collect();
        let argmax = |p: &[f64]| argmax_rows(p, 2);
        let search = Search {
            tried: vec![
                tried(Spec::Logistic(1.0), argmax(&first), first, &task, &y),
                tried(Spec::Forest, argmax(&second), second, &task, &y),
            ],
            truth: y.clone(),
        };
        let choice = search.choice(&task).expect("a choice");
        assert_eq!(choice.specs, [Spec::Logistic(1.0)]);
    }

    /// Scored on given rows, the candidates are fitted once, on every development row, and
    /// the chosen fit is the one kept.
    #[test]
    fn a_held_out_search_keeps_the_chosen_fit() {
        let task = Task::Regression { integer: false };
        let line = |from: usize, to: usize| Features {
            rows: to - from,
            width: 1,
            values: (from..to).map(|x| x as f64).collect(),
        };
        let truth = |from: usize, to: usize| -> Vec<f64> {
            (from..to).map(|x| 2.0 * x as f64 + 1.0).collect()
        };
        let (dev, test) = (line(0, 30), line(30, 40));
        let (y_dev, y_test) = (truth(0, 30), truth(30, 40));
        let search = search(
            &task,
            &[Spec::Ridge(0.0), Spec::Ridge(100.0)],
            &dev,
            &y_dev,
            Validation::HeldOut {
                features: &test,
                y: &y_test,
            },
            &|| Ok(()),
        )
        .expect("searches");
        let mut choice = search.choice(&task).expect("a choice");
        assert_eq!(choice.specs, [Spec::Ridge(0.0)]);
        assert!(choice.score.is_some_and(|score| score > 0.999_999));
        let mixer = choice.take_fitted().expect("the fit is kept");
        let predicted = mixer.predict(&test).expect("predicts");
        for (got, want) in predicted.iter().zip(&y_test) {
            assert!((got - want).abs() < 1e-6, "{predicted:?}");
        }
    }
}
