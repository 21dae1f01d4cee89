//! How each input column becomes features: the fitted encoders (scaling, one-hot or target
//! means for categories by their number, calendar parts, hashed words for free text) and the
//! matrix of features they make.
//!
//! Categories: a few (up to [`ONE_HOT_MAX_DISTINCT`]) get one feature each; more get the
//! target's smoothed mean among their rows (one feature, or one per class), which carries what
//! a category says about the target in one column however many categories there are. A
//! category's mean is learnt from the target, so the training rows' features are cross-fitted
//! ([`cross_fit_target_means`]): each row's value comes from the rows of the other folds, never
//! from its own target, or the search would score a model that had seen the answers.
//!
//! Free text: word unigrams and bigrams hashed into a fixed number of signed buckets, each row's
//! vector scaled to unit length (the hashing trick): no vocabulary to store, any text encodes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use smartcore::linalg::basic::matrix::DenseMatrix;

use super::columns::*;

/// A one-hot encoder keeps at most this many categories, the most frequent (when the target
/// has too many classes for target means).
pub(super) const MAX_ONE_HOT_CATEGORIES: usize = 50;
/// Categorical columns with at most this many categories are one-hot encoded; more get target
/// means.
pub(super) const ONE_HOT_MAX_DISTINCT: usize = 16;
/// A target-mean encoder keeps the means of at most this many categories (and
/// [`TARGET_CATEGORY_BYTES`] of their text), the most frequent; the rest, as unseen ones, get
/// the prior.
pub(super) const MAX_TARGET_CATEGORIES: usize = 10_000;
/// The text a target-mean encoder keeps, all its categories together: it is stored with the
/// model and read by every prediction, so long labels keep fewer categories.
const TARGET_CATEGORY_BYTES: usize = 1 << 20;
/// Target means are one feature per class: past this many classes a column is one-hot.
pub(super) const MAX_TARGET_CLASSES: usize = 8;
/// A category's mean is shrunk towards the prior as if it had `m` more rows at the prior,
/// where `m` is the variance of the target within categories over its variance overall (the
/// empirical-Bayes weight, pooled over categories): where categories decide the target, a
/// few rows of one are believed; where they say little, many are needed. `m` is kept within
/// these bounds.
const SMOOTHING_BOUNDS: (f64, f64) = (1e-3, 1e3);
/// The folds of the target means' cross-fitting.
const TARGET_FOLDS: usize = 5;
/// The features all free-text columns may take together, in cells (rows × buckets), and the
/// least and most buckets of one column: more buckets collide less, and cost memory per row.
const TEXT_FEATURE_CELLS: usize = 8_000_000;
const TEXT_MIN_BUCKETS: usize = 8;
const TEXT_MAX_BUCKETS: usize = 256;
/// The features all free-text columns may take together, whatever the rows: the linear
/// candidates' cost grows with the cube of the features.
const TEXT_MAX_FEATURES: usize = 512;
/// Free text averaging fewer words than this is an identifier or a label with many values
/// (codes, names), better summarised by its target means than by its words.
const TEXT_MIN_MEAN_WORDS: f64 = 2.0;
pub(super) type Matrix = DenseMatrix<f64>;

/// One input column with its fitted encoder.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct InputColumn {
    pub(super) name: String,
    pub(super) kind: ColumnKind,
    pub(super) encoder: Encoder,
}

/// Turns a column's cells into model features; fitted on the training split only.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) enum Encoder {
    /// Standard scaling; a missing value becomes the mean.
    Scale(Scaler),
    /// One feature per category; an unknown or missing value gets each category's share of
    /// the training rows (the features' means, as a missing number gets its mean), so that it
    /// predicts like an average row rather than like a row of no category at all.
    OneHot {
        categories: Vec<String>,
        /// Per category, the fraction of training rows that had it (empty in predictors
        /// stored before it was kept: their unknown values stay all zeros).
        #[serde(default)]
        shares: Vec<f64>,
    },
    /// 0 or 1; missing is 0.5.
    Flag,
    /// Scaled calendar parts: year, month, day, day of week, and hour when `hour`.
    CalendarParts {
        hour: bool,
        scalers: Vec<Scaler>,
    },
    Excluded,
    /// Per category, the target's smoothed mean among its rows, less the prior and over the
    /// target's scale (`outputs` values: the number, the second class's share of a two-class
    /// target, or each class's share); an unknown or missing category is 0, the prior.
    TargetMean {
        categories: Vec<String>,
        outputs: usize,
        /// Row-major, `outputs` per category.
        values: Vec<f64>,
        /// The prior (every row's mean), the scale and the smoothing of each output, for
        /// cross-fitting.
        prior: Vec<f64>,
        scale: Vec<f64>,
        smoothing: Vec<f64>,
    },
    /// Words and word pairs hashed into `buckets` signed features, unit length per row.
    HashedWords {
        buckets: usize,
    },
}

/// What the encoders that learn from the target see of it: every row's target (a number, or a
/// class index) and how many classes it has (none for a number).
pub(super) struct TargetView<'a> {
    pub(super) y: &'a [f64],
    pub(super) classes: Option<usize>,
}

impl TargetView<'_> {
    /// The outputs of a target-mean encoder; none when the classes are too many.
    fn outputs(&self) -> Option<usize> {
        match self.classes {
            None | Some(0..=2) => Some(1),
            Some(classes) if classes <= MAX_TARGET_CLASSES => Some(classes),
            Some(_) => None,
        }
    }

    /// Adds row `row`'s contribution to each output to `sums`.
    fn add(&self, row: usize, sums: &mut [f64]) {
        let y = self.y[row];
        match (self.classes, sums.len()) {
            (None, _) => sums[0] += y,
            (Some(_), 1) => sums[0] += f64::from(u8::from(y == 1.0)),
            (Some(_), _) => {
                if let Some(sum) = sums.get_mut(y as usize) {
                    *sum += 1.0;
                }
            }
        }
    }
}

/// What an encoder is fitted with beside its column: the target, and the buckets a free-text
/// column gets.
pub(super) struct FitContext<'a> {
    pub(super) target: TargetView<'a>,
    pub(super) text_buckets: usize,
}

/// The buckets each of `text_columns` free-text columns gets over `rows` rows: a power of two
/// within [`TEXT_MIN_BUCKETS`]..=[`TEXT_MAX_BUCKETS`], together at most about
/// [`TEXT_FEATURE_CELLS`] cells and [`TEXT_MAX_FEATURES`] features (unless the columns are so
/// many that the least each gets passes that).
pub(super) fn text_buckets(rows: usize, text_columns: usize) -> usize {
    let columns = text_columns.max(1);
    let per_column =
        (TEXT_FEATURE_CELLS / rows.max(1).saturating_mul(columns)).min(TEXT_MAX_FEATURES / columns);
    let mut buckets = TEXT_MIN_BUCKETS;
    while buckets * 2 <= per_column.min(TEXT_MAX_BUCKETS) {
        buckets *= 2;
    }
    buckets
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug)]
pub(super) struct Scaler {
    pub(super) mean: f64,
    pub(super) std: f64,
}

impl Scaler {
    pub(super) fn fit(values: impl Iterator<Item = f64> + Clone) -> Scaler {
        // Sums of values scaled to the largest: values near f64's limits (1e308) would
        // overflow their squares, and a non-finite feature fails every fit.
        let top = values.clone().fold(0.0_f64, |top, v| top.max(v.abs()));
        let scale = if top.is_finite() && top > 0.0 {
            top
        } else {
            1.0
        };
        let (mut count, mut sum, mut sum_sq) = (0.0, 0.0, 0.0);
        for value in values {
            let value = value / scale;
            count += 1.0;
            sum += value;
            sum_sq += value * value;
        }
        if count == 0.0 {
            return Scaler {
                mean: 0.0,
                std: 1.0,
            };
        }
        let mean = sum / count * scale;
        let std = ((sum_sq / count - (sum / count).powi(2)).max(0.0).sqrt() * scale).min(f64::MAX);
        // A constant column would divide by zero; leaving it unscaled keeps it harmless.
        let std = if std.is_finite() && std > f64::EPSILON * mean.abs().max(1.0) {
            std
        } else {
            1.0
        };
        Scaler { mean, std }
    }

    pub(super) fn apply(&self, value: Option<f64>) -> f64 {
        // Divided first: the difference of two values near f64's limits could overflow.
        let scaled = value.map_or(0.0, |value| value / self.std - self.mean / self.std);
        if scaled.is_finite() {
            scaled
        } else {
            0.0
        }
    }
}

impl Encoder {
    pub(super) fn fit(
        kind: ColumnKind,
        values: &Values,
        rows: &[usize],
        context: &FitContext,
    ) -> Encoder {
        match (kind, values) {
            (ColumnKind::Categorical, Values::Labels(cells))
                if distinct_beyond(cells, rows, ONE_HOT_MAX_DISTINCT) =>
            {
                Encoder::fit_target_means(cells, rows, &context.target)
                    .unwrap_or_else(|| Encoder::fit_one_hot(cells, rows))
            }
            (ColumnKind::Text, Values::Labels(cells)) => {
                if mean_words(cells, rows) >= TEXT_MIN_MEAN_WORDS {
                    Encoder::HashedWords {
                        buckets: context.text_buckets,
                    }
                } else {
                    Encoder::fit_target_means(cells, rows, &context.target)
                        .unwrap_or(Encoder::Excluded)
                }
            }
            (ColumnKind::Integer | ColumnKind::Float, Values::Numbers(cells)) => {
                Encoder::Scale(Scaler::fit(rows.iter().filter_map(|&row| cells[row])))
            }
            (ColumnKind::Binary, Values::Flags(_)) => Encoder::Flag,
            (ColumnKind::Categorical, Values::Labels(cells)) => Encoder::fit_one_hot(cells, rows),
            (ColumnKind::Date | ColumnKind::Timestamp, Values::Instants(cells)) => {
                let hour = kind == ColumnKind::Timestamp;
                let parts: Vec<Vec<f64>> = rows
                    .iter()
                    .filter_map(|&row| cells[row])
                    .map(|seconds| calendar_parts(seconds, hour))
                    .collect();
                let width = if hour { 5 } else { 4 };
                let scalers = (0..width)
                    .map(|part| Scaler::fit(parts.iter().map(|row| row[part])))
                    .collect();
                Encoder::CalendarParts { hour, scalers }
            }
            _ => Encoder::Excluded,
        }
    }

    fn fit_one_hot(cells: &[Option<String>], rows: &[usize]) -> Encoder {
        let mut by_frequency = by_frequency(cells, rows);
        by_frequency.truncate(MAX_ONE_HOT_CATEGORIES);
        let total = rows.len().max(1) as f64;
        Encoder::OneHot {
            shares: by_frequency
                .iter()
                .map(|(_, count)| *count as f64 / total)
                .collect(),
            categories: by_frequency
                .into_iter()
                .map(|(label, _)| label.to_owned())
                .collect(),
        }
    }

    /// Target means of the most frequent [`MAX_TARGET_CATEGORIES`] categories of `rows`; none
    /// when the target has too many classes for them.
    fn fit_target_means(
        cells: &[Option<String>],
        rows: &[usize],
        target: &TargetView,
    ) -> Option<Encoder> {
        let outputs = target.outputs()?;
        let mut kept = by_frequency(cells, rows);
        kept.truncate(MAX_TARGET_CATEGORIES);
        let mut bytes = 0usize;
        let within = kept
            .iter()
            .take_while(|(label, _)| {
                bytes += label.len();
                bytes <= TARGET_CATEGORY_BYTES
            })
            .count();
        kept.truncate(within);
        let index: HashMap<&str, usize> = kept
            .iter()
            .enumerate()
            .map(|(position, (label, _))| (*label, position))
            .collect();
        // bounded: outputs (at most MAX_TARGET_CLASSES) per kept category
        let mut sums = vec![0.0; kept.len() * outputs];
        // Per output: the sum over every row, and the sum of squares over every row and over
        // the kept categories' rows (a class's share is 0 or 1, its own square).
        let mut totals = vec![0.0; outputs]; // bounded: at most MAX_TARGET_CLASSES
        let mut squares = vec![0.0; outputs]; // bounded: at most MAX_TARGET_CLASSES
        let mut kept_squares = vec![0.0; outputs]; // bounded: at most MAX_TARGET_CLASSES
        let mut one = vec![0.0; outputs]; // bounded: at most MAX_TARGET_CLASSES
        let mut kept_rows: f64 = 0.0;
        for &row in rows {
            one.fill(0.0);
            target.add(row, &mut one);
            let in_kept = cells[row].as_deref().and_then(|label| index.get(label));
            for (output, value) in one.iter().enumerate() {
                totals[output] += value;
                squares[output] += value * value;
                if in_kept.is_some() {
                    kept_squares[output] += value * value;
                }
            }
            if let Some(&at) = in_kept {
                kept_rows += 1.0;
                target.add(row, &mut sums[at * outputs..][..outputs]);
            }
        }
        let count = rows.len().max(1) as f64;
        let prior: Vec<f64> = totals.iter().map(|total| total / count).collect();
        let variance: Vec<f64> = (0..outputs)
            .map(|output| (squares[output] / count - prior[output].powi(2)).max(0.0))
            .collect();
        // A number's means are in its units: over its standard deviation they are comparable
        // to the scaled features. Shares are already in 0..1.
        let scale = match target.classes {
            None => {
                let std = variance[0].sqrt();
                vec![if std.is_finite() && std > 0.0 {
                    std
                } else {
                    1.0
                }]
            }
            Some(_) => vec![1.0; outputs], // bounded: at most MAX_TARGET_CLASSES
        };
        let smoothing = (0..outputs)
            .map(|output| {
                // Σ (t − mean of t's category)² = Σ t² − Σ_c sum_c² / n_c.
                let between: f64 = kept
                    .iter()
                    .enumerate()
                    .map(|(position, (_, n))| sums[position * outputs + output].powi(2) / *n as f64)
                    .sum();
                let within = (kept_squares[output] - between).max(0.0) / kept_rows.max(1.0);
                let m = within / variance[output];
                if m.is_finite() {
                    m.clamp(SMOOTHING_BOUNDS.0, SMOOTHING_BOUNDS.1)
                } else {
                    SMOOTHING_BOUNDS.1
                }
            })
            .collect::<Vec<f64>>();
        let values = kept
            .iter()
            .enumerate()
            .flat_map(|(position, (_, rows_of))| {
                let sums = &sums[position * outputs..][..outputs];
                let (prior, scale, smoothing) = (&prior, &scale, &smoothing);
                (0..outputs).map(move |output| {
                    let sum = sums[output];
                    smoothed(
                        sum,
                        *rows_of as f64,
                        prior[output],
                        scale[output],
                        smoothing[output],
                    )
                })
            })
            .collect();
        Some(Encoder::TargetMean {
            categories: kept
                .into_iter()
                .map(|(label, _)| label.to_owned())
                .collect(),
            outputs,
            values,
            prior,
            scale,
            smoothing,
        })
    }

    pub(super) fn reading(&self) -> Option<Reading> {
        match self {
            Encoder::Scale(_) => Some(Reading::Number),
            Encoder::OneHot { .. } => Some(Reading::Label),
            Encoder::Flag => Some(Reading::Flag),
            Encoder::CalendarParts { .. } => Some(Reading::Instant),
            Encoder::TargetMean { .. } | Encoder::HashedWords { .. } => Some(Reading::Label),
            Encoder::Excluded => None,
        }
    }

    pub(super) fn width(&self) -> usize {
        match self {
            Encoder::Scale(_) | Encoder::Flag => 1,
            Encoder::OneHot { categories, .. } => categories.len(),
            Encoder::CalendarParts { scalers, .. } => scalers.len(),
            Encoder::TargetMean { outputs, .. } => *outputs,
            Encoder::HashedWords { buckets } => *buckets,
            Encoder::Excluded => 0,
        }
    }

    /// Writes this column's features for `rows` into the row-major `out`, at `offset` within each row.
    pub(super) fn write(
        &self,
        values: &Values,
        rows: &[usize],
        out: &mut [f64],
        stride: usize,
        offset: usize,
    ) {
        let cells = rows
            .iter()
            .enumerate()
            .map(|(position, &row)| (position * stride + offset, row));
        match (self, values) {
            (Encoder::Scale(scaler), Values::Numbers(cells_in)) => {
                cells.for_each(|(at, row)| out[at] = scaler.apply(cells_in[row]));
            }
            (Encoder::Flag, Values::Flags(cells_in)) => {
                cells.for_each(|(at, row)| {
                    out[at] = cells_in[row].map_or(0.5, |flag| if flag { 1.0 } else { 0.0 });
                });
            }
            (Encoder::OneHot { categories, shares }, Values::Labels(cells_in)) => {
                let index = category_index(categories);
                cells.for_each(|(at, row)| {
                    match cells_in[row].as_deref().and_then(|label| index.get(label)) {
                        Some(&position) => out[at + position] = 1.0,
                        None => {
                            for (position, share) in shares.iter().enumerate() {
                                out[at + position] = *share;
                            }
                        }
                    }
                });
            }
            (Encoder::CalendarParts { hour, scalers }, Values::Instants(cells_in)) => {
                for (at, row) in cells {
                    let Some(seconds) = cells_in[row] else {
                        continue;
                    };
                    let parts = calendar_parts(seconds, *hour);
                    for (part, (value, scaler)) in parts.into_iter().zip(scalers).enumerate() {
                        out[at + part] = scaler.apply(Some(value));
                    }
                }
            }
            (
                Encoder::TargetMean {
                    categories,
                    outputs,
                    values,
                    ..
                },
                Values::Labels(cells_in),
            ) => {
                let index = category_index(categories);
                for (at, row) in cells {
                    if let Some(&position) = cells_in[row].as_deref().and_then(|l| index.get(l)) {
                        out[at..][..*outputs]
                            .copy_from_slice(&values[position * outputs..][..*outputs]);
                    }
                }
            }
            (Encoder::HashedWords { buckets }, Values::Labels(cells_in)) => {
                for (at, row) in cells {
                    if let Some(text) = cells_in[row].as_deref() {
                        hash_words(text, &mut out[at..][..*buckets]);
                    }
                }
            }
            // Missing values encode as zeros, which is what every encoder imputes after scaling.
            _ => {}
        }
    }
}

/// A category's smoothed mean: `sum` over `count` rows shrunk towards `prior` by `smoothing`
/// rows, less the prior, over `scale`.
fn smoothed(sum: f64, count: f64, prior: f64, scale: f64, smoothing: f64) -> f64 {
    let mean = (sum + smoothing * prior) / (count + smoothing);
    let value = (mean - prior) / scale;
    if value.is_finite() {
        value
    } else {
        0.0
    }
}

fn category_index(categories: &[String]) -> HashMap<&str, usize> {
    categories
        .iter()
        .enumerate()
        .map(|(position, category)| (category.as_str(), position))
        .collect()
}

/// The distinct labels of `rows` with their counts, the most frequent first (ties by label).
fn by_frequency<'a>(cells: &'a [Option<String>], rows: &[usize]) -> Vec<(&'a str, usize)> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for label in rows.iter().filter_map(|&row| cells[row].as_deref()) {
        *counts.entry(label).or_default() += 1;
    }
    let mut by_frequency: Vec<(&str, usize)> = counts.into_iter().collect();
    by_frequency.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_frequency
}

/// Whether `rows` hold more than `limit` distinct labels.
fn distinct_beyond(cells: &[Option<String>], rows: &[usize], limit: usize) -> bool {
    let mut seen = std::collections::HashSet::new();
    rows.iter()
        .filter_map(|&row| cells[row].as_deref())
        .any(|label| seen.insert(label) && seen.len() > limit)
}

/// The mean number of words of the present cells of `rows`.
fn mean_words(cells: &[Option<String>], rows: &[usize]) -> f64 {
    let (mut cells_seen, mut words) = (0usize, 0usize);
    for text in rows.iter().filter_map(|&row| cells[row].as_deref()) {
        cells_seen += 1;
        words += text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty())
            .count();
    }
    words as f64 / cells_seen.max(1) as f64
}

/// Adds `text`'s words and word pairs (lower-cased, split at anything not a letter or digit)
/// to `out`'s buckets, each with the sign its hash gives (so that collisions cancel on
/// average rather than add up), then scales `out` to unit length.
pub(super) fn hash_words(text: &str, out: &mut [f64]) {
    let buckets = out.len() as u64;
    if buckets == 0 {
        return;
    }
    let mut add = |hash: u64| {
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        out[(hash % buckets) as usize] += sign;
    };
    let mut previous: Option<u64> = None;
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        // FNV-1a over the lower-cased characters: stable across runs and builds, unlike
        // the standard library's seeded hasher, so a stored model hashes as it was trained.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for c in word.chars().flat_map(char::to_lowercase) {
            let mut bytes = [0; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        let hash = mix(hash);
        add(hash);
        if let Some(before) = previous {
            add(mix(before.rotate_left(17) ^ hash));
        }
        previous = Some(hash);
    }
    let length = out.iter().map(|v| v * v).sum::<f64>().sqrt();
    if length > 0.0 {
        out.iter_mut().for_each(|v| *v /= length);
    }
}

/// SplitMix64's finaliser: spreads a hash's bits, so that `% buckets` and the sign bit are
/// independent of each other.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Replaces the target-mean features of the training rows in `features` (the rows of `order`,
/// in that order) by cross-fitted ones: the rows are dealt into [`TARGET_FOLDS`] folds, and a
/// row's value is its category's smoothed mean among the other folds' rows. A row's own
/// target never reaches its features, so the search's scores are honest; the stored encoder
/// (every row's mean) is what predictions use.
pub(super) fn cross_fit_target_means(
    columns: &[InputColumn],
    values: &[Values],
    order: &[usize],
    target: &TargetView,
    features: &mut Features,
) {
    let width = features.width;
    for ((column, column_values), offset) in columns.iter().zip(values).zip(block_offsets(columns))
    {
        let (
            Encoder::TargetMean {
                categories,
                outputs,
                prior,
                scale,
                smoothing,
                ..
            },
            Values::Labels(cells),
        ) = (&column.encoder, column_values)
        else {
            continue;
        };
        let outputs = *outputs;
        let index = category_index(categories);
        let category_of = |row: usize| cells[row].as_deref().and_then(|l| index.get(l).copied());
        // Per category and fold: the sum of each output, and the rows.
        let slots = categories.len() * TARGET_FOLDS;
        let mut sums = vec![0.0; slots * outputs]; // bounded: kept categories × folds × outputs
        let mut counts = vec![0.0; slots]; // bounded: kept categories × folds
        for (position, &row) in order.iter().enumerate() {
            if let Some(category) = category_of(row) {
                let slot = category * TARGET_FOLDS + position % TARGET_FOLDS;
                counts[slot] += 1.0;
                target.add(row, &mut sums[slot * outputs..][..outputs]);
            }
        }
        for (position, &row) in order.iter().enumerate() {
            let cell = &mut features.values[position * width + offset..][..outputs];
            let Some(category) = category_of(row) else {
                cell.fill(0.0);
                continue;
            };
            let fold = position % TARGET_FOLDS;
            let slots = category * TARGET_FOLDS..(category + 1) * TARGET_FOLDS;
            let own = category * TARGET_FOLDS + fold;
            let others = counts[slots.clone()].iter().sum::<f64>() - counts[own];
            for (output, value) in cell.iter_mut().enumerate() {
                let total: f64 = slots
                    .clone()
                    .map(|slot| sums[slot * outputs + output])
                    .sum();
                let sum = total - sums[own * outputs + output];
                *value = smoothed(sum, others, prior[output], scale[output], smoothing[output]);
            }
        }
    }
}

/// Year, month, day, day of week (0 = Sunday) and, when `hour`, the UTC hour.
pub(super) fn calendar_parts(seconds: i64, hour: bool) -> Vec<f64> {
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let mut parts = vec![
        year as f64,
        f64::from(month),
        f64::from(day),
        (days + 4).rem_euclid(7) as f64,
    ];
    if hour {
        parts.push((seconds.rem_euclid(SECONDS_PER_DAY) / 3_600) as f64);
    }
    parts
}

/// Days since 1970-01-01 of a civil date: Howard Hinnant's days-from-civil algorithm
/// (proleptic Gregorian calendar), the inverse of [`civil_from_days`].
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted_month + 2) / 5 + 1) as u32;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A row-major feature matrix.
pub(super) struct Features {
    pub(super) rows: usize,
    pub(super) width: usize,
    pub(super) values: Vec<f64>,
}

impl Features {
    pub(super) fn matrix(&self) -> Result<Matrix, String> {
        DenseMatrix::new(self.rows, self.width, self.values.clone(), false)
            .map_err(|e| format!("cannot build the feature matrix: {e}"))
    }

    /// The rows at `rows` (positions), in that order; the copy's size is checked against the
    /// training's memory first.
    pub(super) fn select(&self, rows: &[usize]) -> Result<Features, String> {
        let cells = rows.len().saturating_mul(self.width);
        let mut values: Vec<f64> =
            crate::capacity::vec(cells, "the training features").map_err(|e| e.to_string())?;
        for &row in rows {
            values.extend_from_slice(&self.values[row * self.width..(row + 1) * self.width]);
        }
        Ok(Features {
            rows: rows.len(),
            width: self.width,
            values,
        })
    }

    pub(super) fn head(&self, rows: usize) -> Features {
        let rows = rows.min(self.rows);
        Features {
            rows,
            width: self.width,
            values: self.values[..rows * self.width].to_vec(),
        }
    }

    /// A copy with features `offset..offset + len` of row `order[i]` moved to row `i`.
    pub(super) fn with_block_reordered(
        &self,
        offset: usize,
        len: usize,
        order: &[usize],
    ) -> Features {
        let mut values = self.values.clone();
        for (to, &from) in order.iter().enumerate() {
            let source = from * self.width + offset;
            values[to * self.width + offset..][..len]
                .copy_from_slice(&self.values[source..][..len]);
        }
        Features {
            rows: self.rows,
            width: self.width,
            values,
        }
    }
}

pub(super) fn block_offsets(columns: &[InputColumn]) -> Vec<usize> {
    columns
        .iter()
        .scan(0, |offset, column| {
            let start = *offset;
            *offset += column.encoder.width();
            Some(start)
        })
        .collect()
}

/// The features of `rows`: a row-major matrix of every column's encoded block. Its size is
/// rows × the encoders' width (one-hot columns are as wide as their categories), so it is
/// checked against the statement's memory before it is made.
pub(super) fn encode(
    columns: &[InputColumn],
    values: &[Values],
    rows: &[usize],
) -> Result<Features, String> {
    encode_checked(columns, values, rows, &|| Ok(()))
}

/// Rows a column is encoded in at a time, `check` asked between them, and the rows of free
/// text (megabytes a cell take seconds per few thousand rows).
const ENCODE_ROWS: usize = 4_096;
const ENCODE_TEXT_ROWS: usize = 16;

/// As [`encode`], asking `check` between columns and every [`ENCODE_ROWS`] rows
/// ([`ENCODE_TEXT_ROWS`] of free text), so that a stop is seen within a long encoding.
pub(super) fn encode_checked(
    columns: &[InputColumn],
    values: &[Values],
    rows: &[usize],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Features, String> {
    let width: usize = columns.iter().map(|column| column.encoder.width()).sum();
    let cells = rows.len().saturating_mul(width);
    let mut out: Vec<f64> =
        crate::capacity::vec(cells, "The training features").map_err(|e| e.to_string())?;
    // bounded: the capacity was checked just above
    out.resize(cells, 0.0);
    for ((column, column_values), offset) in columns.iter().zip(values).zip(block_offsets(columns))
    {
        // Free text is hashed a few rows at a time: a cell may hold megabytes.
        let step = match column.encoder {
            Encoder::HashedWords { .. } => ENCODE_TEXT_ROWS,
            _ => ENCODE_ROWS,
        };
        for (chunk, chunk_rows) in rows.chunks(step).enumerate() {
            check()?;
            let out = &mut out[chunk * step * width..];
            column
                .encoder
                .write(column_values, chunk_rows, out, width, offset);
        }
    }
    Ok(Features {
        rows: rows.len(),
        width,
        values: out,
    })
}
