//! The linear mixers, fitted in steps that a stop can reach: ridge regression (least squares
//! with an L2 penalty, the intercept unpenalised) and logistic regression (binary, or
//! multinomial over softmax, with an L2 penalty).
//!
//! smartcore fits these in one call whose length grows with rows × features² (ridge) or with
//! iterations × rows × features × classes (logistic), and nothing can stop a call once it has
//! begun: a DROP MODEL, or a training over its memory budget, waited for it, minutes on wide
//! data, while the training's CPU ran on. Here every pass over the rows looks at `check` about
//! every [`STEP_WORK`] multiply-adds, and a stopped fit ends there with `check`'s error.
//!
//! Both take the features row-major (`x[row * width + feature]`), already scaled.

use serde::{Deserialize, Serialize};
use smartcore::optimization::first_order::lbfgs::LBFGS;
use smartcore::optimization::first_order::FirstOrderOptimizer;
use smartcore::optimization::line_search::Backtracking;
use smartcore::optimization::FunctionOrder;

use crate::capacity;

/// The most multiply-adds done between two looks at `check` (a few milliseconds of one core).
const STEP_WORK: usize = 1 << 22;

/// Rows of `width` features (times `per_feature` multiply-adds each) that fit one step.
fn rows_per_step(width: usize, per_feature: usize) -> usize {
    (STEP_WORK / width.max(1).saturating_mul(per_feature.max(1))).max(1)
}

/// Ridge regression: `intercept + weights · x`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Ridge {
    weights: Vec<f64>,
    intercept: f64,
}

impl Ridge {
    /// Minimises Σ (y − intercept − w·x)² + alpha·|w|² over `rows` rows of `width` features
    /// (the normal equations of the centred data, solved by Cholesky); fails with `check`'s
    /// error when it says stop, and names what failed otherwise.
    pub(super) fn fit(
        x: &[f64],
        width: usize,
        y: &[f64],
        alpha: f64,
        check: &dyn Fn() -> Result<(), String>,
    ) -> Result<Ridge, String> {
        Ridge::fit_path(x, width, y, &[alpha], check)?
            .pop()
            .ok_or_else(|| "ridge regression fitted nothing".to_owned())?
    }

    /// One fit per penalty in `alphas`, sharing the one pass over the rows that builds the
    /// feature-by-feature matrix (the costly part): choosing the penalty by cross-validation
    /// costs a solve per penalty, not a pass. A penalty of 0 is ordinary least squares; where
    /// that has no unique solution (a constant or repeated feature) a penalty of 1e-12 of
    /// the matrix's mean diagonal picks the smallest weights, so exact data still fits exactly.
    /// The outer error is `check`'s or a bad shape; each inner one names why that penalty failed.
    pub(super) fn fit_path(
        x: &[f64],
        width: usize,
        y: &[f64],
        alphas: &[f64],
        check: &dyn Fn() -> Result<(), String>,
    ) -> Result<Vec<Result<Ridge, String>>, String> {
        let rows = y.len();
        shaped(x, width, rows, "ridge regression")?;
        if !all_finite(y) {
            return Err("ridge regression needs finite targets".to_owned());
        }
        let mut means = vec![0.0; width]; // bounded: one per feature, as each row holds
        for row in x.chunks_exact(width) {
            means
                .iter_mut()
                .zip(row)
                .for_each(|(mean, value)| *mean += value);
        }
        means.iter_mut().for_each(|mean| *mean /= rows as f64);
        let y_mean = y.iter().sum::<f64>() / rows as f64;

        // The width × width Gram matrix: its size is the square of what the rows hold, so it
        // is checked against the training's budget before it is taken (twice: each penalty
        // factors a copy).
        let cells = width
            .checked_mul(width)
            .ok_or("the ridge regression's feature matrix is too large")?;
        capacity::check(
            (cells as u64).saturating_mul(16),
            "the ridge regression's feature-by-feature matrix",
        )
        .map_err(|e| e.message().to_owned())?;
        let mut gram = vec![0.0; cells]; // bounded: checked just above
        let mut moment = vec![0.0; width]; // bounded: one per feature
        let mut centred = vec![0.0; width]; // bounded: one per feature
        let step = rows_per_step(width, width.div_ceil(2));
        for (rows_x, rows_y) in x.chunks(step * width).zip(y.chunks(step)) {
            check()?;
            for (row, &target) in rows_x.chunks_exact(width).zip(rows_y) {
                centred
                    .iter_mut()
                    .zip(row.iter().zip(&means))
                    .for_each(|(c, (value, mean))| *c = value - mean);
                let dy = target - y_mean;
                for i in 0..width {
                    let ci = centred[i];
                    if ci == 0.0 {
                        continue;
                    }
                    moment[i] += ci * dy;
                    gram[i * width + i..(i + 1) * width]
                        .iter_mut()
                        .zip(&centred[i..])
                        .for_each(|(cell, cj)| *cell += ci * cj);
                }
            }
        }
        for i in 0..width {
            for j in i + 1..width {
                gram[j * width + i] = gram[i * width + j];
            }
        }
        let trace: f64 = (0..width).map(|i| gram[i * width + i]).sum();
        let floor = (trace / width as f64).max(f64::MIN_POSITIVE) * 1e-12;
        let mut fits = Vec::with_capacity(alphas.len()); // bounded: the caller's few penalties
        let mut factor = vec![0.0; cells]; // bounded: checked above
        for &alpha in alphas {
            factor.copy_from_slice(&gram);
            let penalty = alpha.max(floor);
            for i in 0..width {
                factor[i * width + i] += penalty;
            }
            let fit = cholesky_solve(&mut factor, width, &moment, check)?.and_then(|weights| {
                let intercept =
                    y_mean - weights.iter().zip(&means).map(|(w, m)| w * m).sum::<f64>();
                // Sums that overflowed (targets near f64's limits) leave infinities, which a
                // stored predictor could not even be read back with.
                if !intercept.is_finite() || !all_finite(&weights) {
                    return Err(
                        "ridge regression did not give finite weights on this data".to_owned()
                    );
                }
                Ok(Ridge { weights, intercept })
            });
            fits.push(fit);
        }
        Ok(fits)
    }

    /// One prediction per row of `x` (row-major, the fitted width).
    pub(super) fn predict(&self, x: &[f64]) -> Vec<f64> {
        let width = self.weights.len().max(1);
        x.chunks_exact(width)
            .map(|row| self.intercept + dot(&self.weights, row))
            .collect()
    }
}

/// Solves `a · w = b` for the symmetric positive definite `a` (row-major `n × n`,
/// overwritten by its Cholesky factor), checking `check` once per column: the outer error is
/// `check`'s, the inner one says the equations have no unique solution.
fn cholesky_solve(
    a: &mut [f64],
    n: usize,
    b: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Result<Vec<f64>, String>, String> {
    // a = L·Lᵀ, L kept in the lower triangle: row i's first j cells are L[i][..j], and the
    // cells below the diagonal not yet reached still hold a's (mirrored) values.
    for j in 0..n {
        check()?;
        let row_j = j * n;
        let diagonal = a[row_j + j] - dot(&a[row_j..row_j + j], &a[row_j..row_j + j]);
        if diagonal <= 0.0 || !diagonal.is_finite() {
            return Ok(Err(
                "the ridge regression's equations have no unique solution".to_owned(),
            ));
        }
        let pivot = diagonal.sqrt();
        a[row_j + j] = pivot;
        for i in j + 1..n {
            let row_i = i * n;
            let known = dot(&a[row_i..row_i + j], &a[row_j..row_j + j]);
            a[row_i + j] = (a[row_i + j] - known) / pivot;
        }
    }
    // L·z = b, then Lᵀ·w = z.
    let mut z = vec![0.0; n]; // bounded: one per feature
    for i in 0..n {
        z[i] = (b[i] - dot(&a[i * n..i * n + i], &z[..i])) / a[i * n + i];
    }
    let mut w = vec![0.0; n]; // bounded: one per feature
    for i in (0..n).rev() {
        let later: f64 = (i + 1..n).map(|k| a[k * n + i] * w[k]).sum();
        w[i] = (z[i] - later) / a[i * n + i];
    }
    Ok(Ok(w))
}

/// Fails unless `x` holds `rows` rows of `width` finite features (at least one of each).
/// A non-finite feature would make every sum NaN: ridge would store weights no stored
/// predictor can be read back with, and L-BFGS would run all its iterations for nothing.
fn shaped(x: &[f64], width: usize, rows: usize, what: &str) -> Result<(), String> {
    if rows == 0 || width == 0 || rows.checked_mul(width) != Some(x.len()) {
        return Err(format!("{what} needs rows and features"));
    }
    if !all_finite(x) {
        return Err(format!("{what} needs finite features"));
    }
    Ok(())
}

fn all_finite(values: &[f64]) -> bool {
    values.iter().all(|value| value.is_finite())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Logistic regression over the labels seen in training: one weight row (and intercept) for
/// two labels, one per label otherwise.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Logistic {
    /// The labels (class indices of the task) in training, ascending.
    labels: Vec<u32>,
    width: usize,
    /// Per weight row: `width` weights, then the intercept.
    weights: Vec<f64>,
}

impl Logistic {
    /// Minimises the negative log-likelihood plus `alpha / 2 · |w|²` (intercepts unpenalised)
    /// with smartcore's L-BFGS; each evaluation over the rows looks at `check` in steps, and a
    /// stop ends the optimisation at once (the objective then reads as converged) and the fit
    /// with `check`'s error.
    pub(super) fn fit(
        x: &[f64],
        width: usize,
        y: &[u32],
        alpha: f64,
        check: &dyn Fn() -> Result<(), String>,
    ) -> Result<Logistic, String> {
        shaped(x, width, y.len(), "logistic regression")?;
        let mut labels = y.to_vec();
        labels.sort_unstable();
        labels.dedup();
        if labels.len() < 2 {
            return Err("logistic regression needs two classes".to_owned());
        }
        let index: Vec<usize> = y
            .iter()
            .map(|label| labels.binary_search(label).unwrap_or(0))
            .collect();
        // Two labels: one row of weights, P(second) = sigmoid(z); more: one row per label.
        let k = if labels.len() == 2 { 1 } else { labels.len() };
        let stride = width + 1;
        let objective = Objective {
            x,
            width,
            index: &index,
            k,
            alpha,
            step: rows_per_step(width, k),
            check,
            stopped: std::cell::RefCell::new(None),
        };
        let f = |w: &Vec<f64>| objective.value(w);
        let df = |g: &mut Vec<f64>, w: &Vec<f64>| objective.gradient(g, w);
        let search: Backtracking<f64> = Backtracking {
            order: FunctionOrder::THIRD,
            ..Default::default()
        };
        let start = vec![0.0; k * stride]; // bounded: weights per feature and class
        let result = LBFGS::default().optimize(&f, &df, &start, &search);
        if let Some(stop) = objective.stopped.into_inner() {
            return Err(stop);
        }
        if result.x.iter().any(|w| !w.is_finite()) {
            return Err("logistic regression did not converge on this data".to_owned());
        }
        Ok(Logistic {
            labels,
            width,
            weights: result.x,
        })
    }

    /// Each row's probability of each of `classes` class indices (row-major, `classes` per
    /// row); a class not seen in training has probability 0.
    pub(super) fn probabilities(&self, x: &[f64], classes: usize) -> Vec<f64> {
        let width = self.width.max(1);
        let stride = self.width + 1;
        let rows = x.len() / width;
        let mut out = vec![0.0; rows * classes]; // bounded: one per class of each row held
        let mut z = vec![0.0; self.labels.len()]; // bounded: one per label
        for (row, values) in x.chunks_exact(width).enumerate() {
            let score = |class: usize| {
                let w = &self.weights[class * stride..(class + 1) * stride];
                dot(&w[..self.width], values) + w[self.width]
            };
            if self.labels.len() == 2 {
                let p = 1.0 / (1.0 + (-score(0)).exp());
                z[0] = 1.0 - p;
                z[1] = p;
            } else {
                z.iter_mut()
                    .enumerate()
                    .for_each(|(class, cell)| *cell = score(class));
                let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                z.iter_mut().for_each(|cell| *cell = (*cell - top).exp());
                let sum: f64 = z.iter().sum();
                z.iter_mut().for_each(|cell| *cell /= sum);
            }
            for (label, p) in self.labels.iter().zip(&z) {
                if let Some(cell) = out.get_mut(row * classes + *label as usize) {
                    *cell = *p;
                }
            }
        }
        out
    }

    /// The most likely label per row of `x` (row-major, the fitted width).
    pub(super) fn predict(&self, x: &[f64]) -> Vec<u32> {
        let width = self.width.max(1);
        let stride = self.width + 1;
        x.chunks_exact(width)
            .map(|row| {
                let score = |class: usize| {
                    let w = &self.weights[class * stride..(class + 1) * stride];
                    dot(&w[..self.width], row) + w[self.width]
                };
                if self.labels.len() == 2 {
                    self.labels[usize::from(score(0) > 0.0)]
                } else {
                    let best = (0..self.labels.len()).map(score).enumerate().fold(
                        (0, f64::NEG_INFINITY),
                        |best, (class, z)| {
                            if z > best.1 {
                                (class, z)
                            } else {
                                best
                            }
                        },
                    );
                    self.labels[best.0]
                }
            })
            .collect()
    }
}

/// The logistic loss over the rows, evaluated in steps between looks at `check`.
struct Objective<'a> {
    x: &'a [f64],
    width: usize,
    /// Each row's label, as an index into the labels.
    index: &'a [usize],
    /// Weight rows: 1 for two labels (sigmoid), else one per label (softmax).
    k: usize,
    alpha: f64,
    step: usize,
    check: &'a dyn Fn() -> Result<(), String>,
    /// Set when `check` said stop: from then on the loss reads −∞ and its gradient zero, which
    /// the line search gets past in a few dozen cheap evaluations (it halves its step while
    /// the loss is not finite) and L-BFGS takes as converged.
    stopped: std::cell::RefCell<Option<String>>,
}

impl Objective<'_> {
    /// False (and the first stop recorded) when `check` says stop.
    fn go_on(&self) -> bool {
        match (self.check)() {
            Ok(()) if self.stopped.borrow().is_none() => true,
            Ok(()) => false,
            Err(stop) => {
                self.stopped.borrow_mut().get_or_insert(stop);
                false
            }
        }
    }

    /// Each row's scores (`k` of them) into `z`, then `visit(row, label, z)`; false if stopped.
    fn each_row(&self, w: &[f64], mut visit: impl FnMut(usize, usize, &mut [f64])) -> bool {
        let stride = self.width + 1;
        let mut z = vec![0.0; self.k]; // bounded: one per class
        for (chunk, first) in self
            .x
            .chunks(self.step * self.width)
            .zip((0..).step_by(self.step))
        {
            if !self.go_on() {
                return false;
            }
            for (offset, row) in chunk.chunks_exact(self.width).enumerate() {
                for (class, score) in z.iter_mut().enumerate() {
                    let weights = &w[class * stride..(class + 1) * stride];
                    *score = dot(&weights[..self.width], row) + weights[self.width];
                }
                let at = first + offset;
                visit(at, self.index[at], &mut z);
            }
        }
        true
    }

    fn penalty(&self, w: &[f64]) -> f64 {
        let stride = self.width + 1;
        w.chunks(stride)
            .map(|row| dot(&row[..self.width], &row[..self.width]))
            .sum::<f64>()
            * self.alpha
            / 2.0
    }

    fn value(&self, w: &[f64]) -> f64 {
        let mut loss = 0.0;
        let finished = self.each_row(w, |_, label, z| {
            loss += if self.k == 1 {
                // log(1 + e^z) − y·z, computed without overflow.
                let z = z[0];
                z.max(0.0) + (-z.abs()).exp().ln_1p() - if label == 1 { z } else { 0.0 }
            } else {
                let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = z.iter().map(|score| (score - top).exp()).sum();
                top + sum.ln() - z[label]
            };
        });
        if finished {
            loss + self.penalty(w)
        } else {
            f64::NEG_INFINITY
        }
    }

    fn gradient(&self, g: &mut [f64], w: &[f64]) {
        g.iter_mut().for_each(|cell| *cell = 0.0);
        let stride = self.width + 1;
        let (x, width, k) = (self.x, self.width, self.k);
        let finished = self.each_row(w, |at, label, z| {
            let row = &x[at * width..(at + 1) * width];
            if k == 1 {
                let p = 1.0 / (1.0 + (-z[0]).exp());
                z[0] = p - if label == 1 { 1.0 } else { 0.0 };
            } else {
                let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                z.iter_mut().for_each(|score| *score = (*score - top).exp());
                let sum: f64 = z.iter().sum();
                z.iter_mut().for_each(|score| *score /= sum);
                z[label] -= 1.0;
            }
            for (class, &error) in z.iter().enumerate() {
                let cells = &mut g[class * stride..(class + 1) * stride];
                cells[..width]
                    .iter_mut()
                    .zip(row)
                    .for_each(|(cell, value)| *cell += error * value);
                cells[width] += error;
            }
        });
        if !finished {
            g.iter_mut().for_each(|cell| *cell = 0.0);
            return;
        }
        for (cells, weights) in g.chunks_mut(stride).zip(w.chunks(stride)) {
            cells[..width]
                .iter_mut()
                .zip(&weights[..width])
                .for_each(|(cell, weight)| *cell += self.alpha * weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn never() -> Result<(), String> {
        Ok(())
    }

    /// Rows of `width` features from a fixed sequence.
    fn features(rows: usize, width: usize) -> Vec<f64> {
        let mut state = 12345u64;
        (0..rows * width)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
            })
            .collect()
    }

    #[test]
    fn ridge_without_penalty_recovers_an_exact_line_with_its_intercept() {
        // y = 3·a − 2·b + 7, exactly: least squares must give it back, intercept included
        // (smartcore's unnormalised ridge had no intercept at all).
        let x = features(200, 2);
        let y: Vec<f64> = x.chunks(2).map(|r| 3.0 * r[0] - 2.0 * r[1] + 7.0).collect();
        let ridge = Ridge::fit(&x, 2, &y, 0.0, &never).unwrap();
        assert!((ridge.weights[0] - 3.0).abs() < 1e-9, "{ridge:?}");
        assert!((ridge.weights[1] + 2.0).abs() < 1e-9, "{ridge:?}");
        assert!((ridge.intercept - 7.0).abs() < 1e-9, "{ridge:?}");
        let predicted = ridge.predict(&[0.0, 0.0, 1.0, 1.0]);
        assert!((predicted[0] - 7.0).abs() < 1e-9 && (predicted[1] - 8.0).abs() < 1e-9);
    }

    #[test]
    fn ridge_penalty_shrinks_the_weights_as_the_closed_form_says() {
        // One centred feature: w = Σxy / (Σx² + alpha).
        let x = [-1.0, 1.0, -1.0, 1.0];
        let y = [-2.0, 2.0, -2.0, 2.0];
        let ridge = Ridge::fit(&x, 1, &y, 4.0, &never).unwrap();
        assert!((ridge.weights[0] - 8.0 / 8.0).abs() < 1e-12, "{ridge:?}");
        assert!(ridge.intercept.abs() < 1e-12);
    }

    #[test]
    fn logistic_separates_two_and_three_labels() {
        let x = features(400, 2);
        let two: Vec<u32> = x
            .chunks(2)
            .map(|r| u32::from(r[0] + r[1] > 0.0) * 3)
            .collect();
        let fitted = Logistic::fit(&x, 2, &two, 0.01, &never).unwrap();
        let right = fitted
            .predict(&x)
            .iter()
            .zip(&two)
            .filter(|(a, b)| a == b)
            .count();
        assert!(right >= 390, "{right} of 400");
        let three: Vec<u32> = x
            .chunks(2)
            .map(|r| {
                if r[0] > 0.7 {
                    2
                } else if r[0] < -0.7 {
                    0
                } else {
                    1
                }
            })
            .collect();
        let fitted = Logistic::fit(&x, 2, &three, 0.01, &never).unwrap();
        let right = fitted
            .predict(&x)
            .iter()
            .zip(&three)
            .filter(|(a, b)| a == b)
            .count();
        assert!(right >= 370, "{right} of 400");
    }

    #[test]
    fn bad_shapes_and_non_finite_values_are_errors_that_say_so() {
        let nan = [1.0, f64::NAN, 2.0, 3.0];
        let err = Ridge::fit(&nan, 2, &[1.0, 2.0], 1.0, &never).unwrap_err();
        assert_eq!(err, "ridge regression needs finite features");
        let err = Ridge::fit(&[1.0, 2.0], 1, &[1.0, f64::INFINITY], 1.0, &never).unwrap_err();
        assert_eq!(err, "ridge regression needs finite targets");
        let err = Logistic::fit(&nan, 2, &[0, 1], 0.01, &never).unwrap_err();
        assert_eq!(err, "logistic regression needs finite features");
        let err = Logistic::fit(&[1.0, 2.0, 3.0], 2, &[0, 1], 0.01, &never).unwrap_err();
        assert_eq!(err, "logistic regression needs rows and features");
        let err = Ridge::fit(&[], 0, &[1.0], 1.0, &never).unwrap_err();
        assert_eq!(err, "ridge regression needs rows and features");
    }

    #[test]
    fn a_stop_ends_each_fit_within_a_step() {
        // Rows enough for many steps; `check` says stop from its third look on. Each fit must
        // end with that error, having looked no more than a few times after it: ridge not at
        // all, logistic regression once per evaluation of its loss (each of which is now one
        // look), a few dozen while the line search halves its step, where L-BFGS without the
        // stop would go on for its 1,000 iterations.
        let width = 64;
        let rows = rows_per_step(width, width) * 8;
        let x = features(rows, width);
        let looks = Cell::new(0);
        let check = || {
            looks.set(looks.get() + 1);
            if looks.get() >= 3 {
                Err("stop".to_owned())
            } else {
                Ok(())
            }
        };
        let y: Vec<f64> = x.chunks(width).map(|r| r[0]).collect();
        assert_eq!(Ridge::fit(&x, width, &y, 1.0, &check).unwrap_err(), "stop");
        assert_eq!(looks.get(), 3, "ridge looked again after the stop");
        looks.set(0);
        let labels: Vec<u32> = x.chunks(width).map(|r| u32::from(r[0] > 0.0)).collect();
        assert_eq!(
            Logistic::fit(&x, width, &labels, 0.01, &check).unwrap_err(),
            "stop"
        );
        assert!(
            looks.get() <= 3 + 64,
            "logistic regression went on: {} looks",
            looks.get()
        );
    }
}
