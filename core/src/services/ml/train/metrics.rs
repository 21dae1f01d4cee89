//! The scores that pick the winning mixer and are reported: r² for numbers, balanced accuracy
//! for classes.

use std::collections::BTreeMap;

/// r², computed on values scaled to the largest truth, so that targets near f64's limits do
/// not overflow the sums of squares (r² does not change with the scale).
pub(super) fn r2_score(predicted: &[f64], actual: &[f64]) -> f64 {
    let top = actual.iter().fold(0.0_f64, |top, v| top.max(v.abs()));
    let scale = if top.is_finite() && top > 0.0 {
        top
    } else {
        1.0
    };
    let mean = actual.iter().map(|v| v / scale).sum::<f64>() / actual.len() as f64;
    let total: f64 = actual
        .iter()
        .map(|value| (value / scale - mean).powi(2))
        .sum();
    let residual: f64 = predicted
        .iter()
        .zip(actual)
        .map(|(guess, value)| (value / scale - guess / scale).powi(2))
        .sum();
    if total == 0.0 {
        if residual == 0.0 {
            1.0
        } else {
            0.0
        }
    } else {
        1.0 - residual / total
    }
}

/// Mean recall over the classes present in `actual`.
pub(super) fn balanced_accuracy(predicted: &[f64], actual: &[f64]) -> f64 {
    let mut per_class: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (guess, value) in predicted.iter().zip(actual) {
        let (hits, count) = per_class.entry(*value as u64).or_default();
        *count += 1;
        if guess == value {
            *hits += 1;
        }
    }
    let recalls: Vec<f64> = per_class
        .values()
        .map(|&(hits, count)| hits as f64 / count as f64)
        .collect();
    recalls.iter().sum::<f64>() / recalls.len() as f64
}
