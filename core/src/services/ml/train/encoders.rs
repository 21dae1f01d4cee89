//! How each input column becomes features: the fitted encoders (scaling, one-hot, calendar
//! parts, hashing) and the matrix of features they make.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use smartcore::linalg::basic::matrix::DenseMatrix;

use super::columns::*;

pub(super) const MAX_ONE_HOT_CATEGORIES: usize = 50;
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
    pub(super) fn fit(kind: ColumnKind, values: &Values, rows: &[usize]) -> Encoder {
        match (kind, values) {
            (ColumnKind::Integer | ColumnKind::Float, Values::Numbers(cells)) => {
                Encoder::Scale(Scaler::fit(rows.iter().filter_map(|&row| cells[row])))
            }
            (ColumnKind::Binary, Values::Flags(_)) => Encoder::Flag,
            (ColumnKind::Categorical, Values::Labels(cells)) => {
                let mut counts: HashMap<&str, usize> = HashMap::new();
                for label in rows.iter().filter_map(|&row| cells[row].as_deref()) {
                    *counts.entry(label).or_default() += 1;
                }
                let mut by_frequency: Vec<(&str, usize)> = counts.into_iter().collect();
                by_frequency.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
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

    pub(super) fn reading(&self) -> Option<Reading> {
        match self {
            Encoder::Scale(_) => Some(Reading::Number),
            Encoder::OneHot { .. } => Some(Reading::Label),
            Encoder::Flag => Some(Reading::Flag),
            Encoder::CalendarParts { .. } => Some(Reading::Instant),
            Encoder::Excluded => None,
        }
    }

    pub(super) fn width(&self) -> usize {
        match self {
            Encoder::Scale(_) | Encoder::Flag => 1,
            Encoder::OneHot { categories, .. } => categories.len(),
            Encoder::CalendarParts { scalers, .. } => scalers.len(),
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
                let index: HashMap<&str, usize> = categories
                    .iter()
                    .enumerate()
                    .map(|(position, category)| (category.as_str(), position))
                    .collect();
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
            // Missing values encode as zeros, which is what every encoder imputes after scaling.
            _ => {}
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
    let width: usize = columns.iter().map(|column| column.encoder.width()).sum();
    let cells = rows.len().saturating_mul(width);
    let mut out: Vec<f64> =
        crate::capacity::vec(cells, "The training features").map_err(|e| e.to_string())?;
    // bounded: the capacity was checked just above
    out.resize(cells, 0.0);
    for ((column, column_values), offset) in columns.iter().zip(values).zip(block_offsets(columns))
    {
        column
            .encoder
            .write(column_values, rows, &mut out, width, offset);
    }
    Ok(Features {
        rows: rows.len(),
        width,
        values: out,
    })
}
