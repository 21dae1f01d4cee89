//! Forecasting: MindsDB's time-series models (`PREDICT y ORDER BY d [GROUP BY g…] WINDOW w
//! [HORIZON h]`).
//!
//! Each group's rows, in `d` order, are a series. A forecast of the value `k` steps after an
//! origin row (k = 1..h) reads the origin's last `w` values (`y_lag_1` is the origin's own),
//! the group's values, the step `k` and the time being forecast (`d` of that row, whose
//! calendar parts carry seasonality): one tabular model for every step (the direct strategy),
//! trained by the built-in trainer on every (origin, step) pair the series hold, so its
//! candidate search, intervals and explanations carry over.
//!
//! Asked about rows (the history), the forecaster answers each row with its one-step forecast
//! from the rows before it, then adds `h` rows per group after its last one, their `d` stepped
//! by the series' interval (the most common gap between rows; whole months when the gaps are
//! calendar months, quarters or years). Each answer also carries its group's last `d` (the
//! model's `latest` column), so `WHERE t.d > LATEST` keeps exactly the future rows.
//!
//! The accuracy reported is a rolling-origin backtest: a model trained on each series but its
//! last 3·h rows forecasts h steps from each of the 3 origins that follow, reading the
//! history up to each origin, as a user's forecast would.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{cast, cast_with_options, concat_batches, take, CastOptions};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use serde::{Deserialize, Serialize};

use crate::capacity;
use crate::catalog::models::{Description, SeriesOptions};

use super::train::{civil_from_days, days_from_civil, train, Predictor, Trained};

/// The most (origin, step) examples a training takes: past it, origins are skipped evenly.
const MAX_EXAMPLES: usize = 1_000_000;
/// Origins of the backtest per series.
const BACKTEST_ORIGINS: usize = 3;

/// How far apart a series' rows are.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
enum Step {
    /// A fixed gap, in the order column's ticks (days, milliseconds, … or units).
    Ticks(i64),
    /// Whole calendar months (1, 3 or 12), the day of the month kept (within the month).
    Months(i32),
    /// Whole calendar months from one month's last day to another's.
    MonthEnds(i32),
}

/// A trained forecaster: the series' shape and the tabular model every forecast is made by.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct Forecaster {
    shape: Shape,
    inner: Predictor,
}

/// The series' clauses, the target, and how the order column is read and stepped.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Shape {
    options: SeriesOptions,
    target: String,
    /// The order column's type in training (what `latest` and forecast rows are given as).
    #[serde(with = "super::train::data_type_text")]
    order_type: DataType,
    /// The target's type in training (forecasts are given as it).
    #[serde(with = "super::train::data_type_text")]
    target_type: DataType,
    /// The type it is computed in: a date, a timestamp, or Int64.
    #[serde(with = "super::train::data_type_text")]
    read_type: DataType,
    step: Step,
}

/// One row a forecast answers: an input row (its one-step forecast), or a future row of the
/// group whose last input row is `last`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answer {
    /// The input row answered, or `None` for a future row.
    pub(crate) input: Option<usize>,
    /// The input row the group's values (and, for a future row, its order) come from.
    pub(crate) last: Option<usize>,
    /// The order value, in ticks of the read type (a future row's is computed).
    pub(crate) ticks: Option<i64>,
}

/// A forecast over some rows: the rows answered, in output order, their predictions (the
/// target's type) and detail columns (the trainer's, then `latest`).
pub(crate) struct Forecast {
    pub(crate) answers: Vec<Answer>,
    pub(crate) target: ArrayRef,
    pub(crate) details: Vec<ArrayRef>,
    /// Each answer's order value as the order column's type: the input's own for input rows.
    pub(crate) order: ArrayRef,
}

/// One forecast to make: from the values before an origin, `step` rows ahead, at `ticks`.
struct Query {
    /// The input row whose group values are used.
    group_row: usize,
    step: usize,
    ticks: i64,
    /// The value at the origin: the model predicts the change from it.
    base: f64,
}

/// One input split into series.
struct Series {
    /// Per group, its rows (input row indices) in order; rows without an order value are in
    /// none.
    groups: Vec<Vec<usize>>,
    /// Each input row's order value, in ticks.
    ticks: Vec<Option<i64>>,
    /// Each input row's target value, forward-filled within its group (a group's leading
    /// missing values take its first known one); `None` in a group with none known.
    values: Vec<Option<f64>>,
    /// Whether the row's own target value was known (before filling).
    known: Vec<bool>,
}

impl Forecaster {
    /// The columns a forecast adds beside the target: the trainer's (confidence, interval,
    /// explanation), then `latest`, the group's last order value.
    pub(crate) fn detail_fields(&self) -> Vec<Field> {
        let mut fields = self.inner.detail_fields();
        // The interval in the target's type (the model inside predicts changes, as Float64).
        for bound in fields.iter_mut().skip(1).take(2) {
            *bound = bound.clone().with_data_type(self.shape.target_type.clone());
        }
        fields.push(Field::new(LATEST, self.shape.order_type.clone(), true));
        fields
    }

    /// The series' clauses.
    pub(crate) fn options(&self) -> &SeriesOptions {
        &self.shape.options
    }

    /// Answers `batch` (rows with the model's training columns, by name): each row with its
    /// one-step forecast from the rows before it in its group (NULL for a group's first row),
    /// grouped and in order, then `horizon` future rows per group; a row without an order
    /// value is answered NULL, after the rest. The answers' size (rows × window) is checked
    /// against the statement's memory first.
    pub(crate) fn forecast(&self, batch: &RecordBatch, explain: bool) -> Result<Forecast, String> {
        let shape = &self.shape;
        let columns = Columns::find(batch, &shape.options, &shape.target)?;
        let series = split(batch, &columns, &shape.read_type, &shape.options)?;
        let horizon = shape.options.horizon;
        let future = series.groups.len().saturating_mul(horizon);
        let rows = batch.num_rows().saturating_add(future);
        // Per answer: its window of lags, the features they encode to and the columns the
        // answer takes, several times over as they are built (measured about 6× the lags).
        capacity::check(
            (rows as u64)
                .saturating_mul(shape.options.window as u64 + 32)
                .saturating_mul(48),
            "the forecast's rows",
        )
        .map_err(|e| e.to_string())?;
        let mut answers = Vec::with_capacity(rows); // bounded: checked just above
        let mut queries = Vec::with_capacity(rows); // bounded: checked just above
        let mut lags = Vec::new();
        // For each answer, the query it takes its prediction from.
        let mut asked: Vec<Option<u32>> = Vec::with_capacity(rows); // bounded: as above
        for group in &series.groups {
            for (position, &row) in group.iter().enumerate() {
                answers.push(Answer {
                    input: Some(row),
                    last: group.last().copied(),
                    ticks: series.ticks[row],
                });
                let base = match position {
                    0 => None,
                    _ => shape.history(&series, group, position - 1, &mut lags),
                };
                asked.push(base.map(|_| queries.len() as u32));
                if let Some(base) = base {
                    queries.push(Query {
                        group_row: row,
                        step: 1,
                        ticks: series.ticks[row].unwrap_or_default(),
                        base,
                    });
                }
            }
            let Some(&last) = group.last() else { continue };
            let last_ticks = series.ticks[last].unwrap_or_default();
            for step in 1..=horizon {
                let ticks = shape.advance(last_ticks, step);
                answers.push(Answer {
                    input: None,
                    last: Some(last),
                    ticks,
                });
                // Every step reads the same history, written once per query.
                let base = match ticks {
                    Some(_) => shape.history(&series, group, group.len() - 1, &mut lags),
                    None => None,
                };
                asked.push(base.map(|_| queries.len() as u32));
                if let Some(base) = base {
                    queries.push(Query {
                        group_row: last,
                        step,
                        ticks: ticks.unwrap_or_default(),
                        base,
                    });
                }
            }
        }
        let grouped: std::collections::HashSet<usize> =
            series.groups.iter().flatten().copied().collect();
        for row in (0..batch.num_rows()).filter(|row| !grouped.contains(row)) {
            answers.push(Answer {
                input: Some(row),
                last: None,
                ticks: None,
            });
            asked.push(None);
        }
        let features = shape.features(batch, &columns, &queries, &lags, None)?;
        let bases: Vec<f64> = queries.iter().map(|q| q.base).collect();
        let (predicted, mut details) = self
            .inner
            .predict_detailed_from(&features, explain, &bases)?;
        // The model's numbers are Float64; a whole-number target gets whole numbers (its
        // interval too), rounded rather than cut by the cast to its type.
        let whole = |array: &ArrayRef| -> Result<ArrayRef, String> {
            if !shape.target_type.is_integer() {
                return Ok(Arc::clone(array));
            }
            let numbers = cast(array, &DataType::Float64).map_err(|e| e.to_string())?;
            let rounded: Float64Array = numbers
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                .iter()
                .map(|v| v.map(f64::round))
                .collect();
            Ok(Arc::new(rounded))
        };
        let predicted = whole(&predicted)?;
        for bound in details.iter_mut().skip(1).take(2) {
            *bound = whole(bound)?;
        }
        let indices: UInt32Array = asked.into_iter().collect();
        let take_all = |array: &ArrayRef| take(array.as_ref(), &indices, None);
        let target = take_all(&predicted).map_err(|e| e.to_string())?;
        let mut details = details
            .iter()
            .map(take_all)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let latest: Int64Array = answers
            .iter()
            .map(|answer| answer.last.and_then(|row| series.ticks[row]))
            .collect();
        details.push(shape.order_array(&latest)?);
        let ticks: Int64Array = answers.iter().map(|answer| answer.ticks).collect();
        let order = shape.order_array(&ticks)?;
        Ok(Forecast {
            answers,
            target,
            details,
            order,
        })
    }
}

impl Shape {
    /// Writes the window of values ending at `group[origin]` (most recent first) to `lags`;
    /// `None` (nothing written) when the group has no known value.
    fn history(
        &self,
        series: &Series,
        group: &[usize],
        origin: usize,
        lags: &mut Vec<f64>,
    ) -> Option<f64> {
        let first = series.values[group[0]]?;
        let value = |back: usize| {
            origin
                .checked_sub(back)
                .and_then(|at| series.values[group[at]])
                .unwrap_or(first)
        };
        // The origin's own value as it is (the level), the ones before it as changes from
        // it: a series shifted in level is the same series to the model.
        let base = value(0);
        lags.push(base);
        for back in 1..self.options.window {
            lags.push(value(back) - base);
        }
        Some(base)
    }

    /// `ticks` moved `steps` steps on; `None` past the type's range.
    fn advance(&self, ticks: i64, steps: usize) -> Option<i64> {
        advance(&self.read_type, self.step, ticks, steps)
    }

    /// Ticks (of the read type) as the order column's type.
    fn order_array(&self, ticks: &Int64Array) -> Result<ArrayRef, String> {
        ticks_array(ticks, &self.read_type, &self.order_type)
    }

    /// The tabular model's input rows for `queries` (`lags` holding `window` values per
    /// query), with the target (each query's change from its base) when training.
    fn features(
        &self,
        batch: &RecordBatch,
        columns: &Columns,
        queries: &[Query],
        lags: &[f64],
        target: Option<&[f64]>,
    ) -> Result<RecordBatch, String> {
        features(
            &self.options,
            &self.target,
            &self.read_type,
            batch,
            columns,
            queries,
            lags,
            target,
        )
    }
}

/// Where the series' columns are in a batch.
struct Columns {
    order: usize,
    groups: Vec<usize>,
    target: Option<usize>,
}

impl Columns {
    fn find(batch: &RecordBatch, options: &SeriesOptions, target: &str) -> Result<Columns, String> {
        let schema = batch.schema();
        let find = |name: &str| {
            schema
                .fields()
                .iter()
                .position(|f| f.name() == name)
                .or_else(|| {
                    schema
                        .fields()
                        .iter()
                        .position(|f| f.name().eq_ignore_ascii_case(name))
                })
        };
        let named = |name: &str, clause: &str| {
            find(name).ok_or_else(|| {
                format!("the {clause} column '{name}' is not in the rows forecast from")
            })
        };
        Ok(Columns {
            order: named(&options.order, "ORDER BY")?,
            groups: options
                .groups
                .iter()
                .map(|group| named(group, "GROUP BY"))
                .collect::<Result<_, _>>()?,
            target: find(target),
        })
    }
}

/// Splits `batch` into series: rows grouped by the group columns' values and ordered by the
/// order column (read as `read_type`, in ticks).
fn split(
    batch: &RecordBatch,
    columns: &Columns,
    read_type: &DataType,
    options: &SeriesOptions,
) -> Result<Series, String> {
    let rows = batch.num_rows();
    let ticks = read_ticks(batch.column(columns.order), read_type, &options.order)?;
    let mut order: Vec<usize> = (0..rows).filter(|&row| ticks[row].is_some()).collect();
    let keys = if columns.groups.is_empty() {
        None
    } else {
        let arrays: Vec<ArrayRef> = columns
            .groups
            .iter()
            .map(|&at| Arc::clone(batch.column(at)))
            .collect();
        let fields = arrays
            .iter()
            .map(|a| SortField::new(a.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(|e| e.to_string())?;
        Some(
            converter
                .convert_columns(&arrays)
                .map_err(|e| e.to_string())?,
        )
    };
    match &keys {
        Some(keys) => order.sort_by(|&a, &b| {
            keys.row(a)
                .cmp(&keys.row(b))
                .then(ticks[a].cmp(&ticks[b]))
                .then(a.cmp(&b))
        }),
        None => order.sort_by_key(|&row| (ticks[row], row)),
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for row in order {
        let same = match (&keys, groups.last()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(keys), Some(group)) => keys.row(group[0]) == keys.row(row),
        };
        match groups.last_mut() {
            Some(group) if same => group.push(row),
            _ => groups.push(vec![row]),
        }
    }
    let raw: Vec<Option<f64>> = match columns.target {
        Some(at) => {
            let numbers = cast(batch.column(at), &DataType::Float64).map_err(|e| e.to_string())?;
            numbers
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                .iter()
                .map(|v| v.filter(|v| v.is_finite()))
                .collect()
        }
        None => vec![None; rows], // bounded: one per row of the batch held
    };
    let known: Vec<bool> = raw.iter().map(Option::is_some).collect();
    let mut values = vec![None; rows]; // bounded: one per row of the batch held
    for group in &groups {
        let first = group.iter().find_map(|&row| raw[row]);
        let mut last = first;
        for &row in group {
            if raw[row].is_some() {
                last = raw[row];
            }
            values[row] = last;
        }
    }
    Ok(Series {
        groups,
        ticks,
        values,
        known,
    })
}

/// The order column's values in ticks of `read_type`; NULL (or text that is no date) is
/// `None`.
fn read_ticks(
    array: &ArrayRef,
    read_type: &DataType,
    name: &str,
) -> Result<Vec<Option<i64>>, String> {
    let safe = CastOptions::default();
    let typed = cast_with_options(array, read_type, &safe)
        .map_err(|e| format!("ORDER BY column '{name}' cannot be read as {read_type}: {e}"))?;
    let ticks = cast(&typed, &DataType::Int64)
        .map_err(|e| format!("ORDER BY column '{name}' has no ticks: {e}"))?;
    Ok(ticks.as_primitive::<Int64Type>().iter().collect())
}

/// Ticks of `read_type` as an array of `order_type`.
fn ticks_array(
    ticks: &Int64Array,
    read_type: &DataType,
    order_type: &DataType,
) -> Result<ArrayRef, String> {
    let typed = cast(ticks, read_type).map_err(|e| e.to_string())?;
    cast(&typed, order_type).map_err(|e| e.to_string())
}

/// How many ticks of `read_type` make a day; `None` for plain numbers.
fn ticks_per_day(read_type: &DataType) -> Option<i64> {
    match read_type {
        DataType::Date32 => Some(1),
        DataType::Date64 => Some(86_400_000),
        DataType::Timestamp(TimeUnit::Second, _) => Some(86_400),
        DataType::Timestamp(TimeUnit::Millisecond, _) => Some(86_400_000),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(86_400_000_000),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some(86_400_000_000_000),
        _ => None,
    }
}

fn advance(read_type: &DataType, step: Step, ticks: i64, steps: usize) -> Option<i64> {
    let steps = i64::try_from(steps).ok()?;
    match step {
        Step::Ticks(gap) => ticks.checked_add(gap.checked_mul(steps)?),
        Step::Months(months) | Step::MonthEnds(months) => {
            let per_day = ticks_per_day(read_type)?;
            let (days, rest) = (ticks.div_euclid(per_day), ticks.rem_euclid(per_day));
            let (year, month, day) = civil_from_days(days);
            let total = year
                .checked_mul(12)?
                .checked_add(i64::from(month) - 1)?
                .checked_add(i64::from(months).checked_mul(steps)?)?;
            let (year, month) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
            let length = days_in_month(year, month);
            let day = match step {
                Step::MonthEnds(_) => length,
                _ => day.min(length),
            };
            let days = days_from_civil(year, month, day);
            days.checked_mul(per_day)?.checked_add(rest)
        }
    }
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let next = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (days_from_civil(next.0, next.1, 1) - days_from_civil(year, month, 1)) as u32
}

/// The type an order column of `data_type` is computed in, given its values.
fn read_type(array: &ArrayRef, name: &str) -> Result<DataType, String> {
    let data_type = array.data_type();
    match data_type {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => Ok(data_type.clone()),
        t if t.is_integer() => Ok(DataType::Int64),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            // Dates written as text: a timestamp if any has a time of day, else a date.
            let strict = CastOptions {
                safe: false,
                ..Default::default()
            };
            let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
            let parsed = cast_with_options(array, &micros, &strict).map_err(|e| {
                format!("ORDER BY column '{name}' must hold dates, timestamps or numbers: {e}")
            })?;
            let ticks = cast(&parsed, &DataType::Int64).map_err(|e| e.to_string())?;
            let whole_days = ticks
                .as_primitive::<Int64Type>()
                .iter()
                .flatten()
                .all(|t| t.rem_euclid(86_400_000_000) == 0);
            Ok(if whole_days { DataType::Date32 } else { micros })
        }
        other => Err(format!(
            "ORDER BY column '{name}' must be a date, a timestamp or a whole number; it is {other}"
        )),
    }
}

/// The most common gap between consecutive rows of the series: whole months when the gaps
/// are calendar months, quarters or years.
fn infer_step(series: &Series, read_type: &DataType, name: &str) -> Result<Step, String> {
    let mut gaps: HashMap<i64, usize> = HashMap::new();
    let mut total = 0;
    for group in &series.groups {
        for pair in group.windows(2) {
            if let (Some(a), Some(b)) = (series.ticks[pair[0]], series.ticks[pair[1]]) {
                // Gaps past i64's range (order values at both of its ends) are not steps.
                if let Some(gap) = b.checked_sub(a).filter(|gap| *gap > 0) {
                    *gaps.entry(gap).or_default() += 1;
                    total += 1;
                }
            }
        }
    }
    let Some((&gap, _)) = gaps
        .iter()
        .max_by_key(|(gap, count)| (**count, std::cmp::Reverse(**gap)))
    else {
        return Err(format!(
            "a series needs two rows with different '{name}' values to learn how far apart its rows are"
        ));
    };
    if let Some(per_day) = ticks_per_day(read_type) {
        for (months, low, high) in [(1, 28, 31), (3, 89, 92), (12, 365, 366)] {
            let within: usize = gaps
                .iter()
                .filter(|(gap, _)| (low * per_day..=high * per_day).contains(*gap))
                .map(|(_, count)| count)
                .sum();
            if within * 10 >= total * 9 {
                // Rows on their months' last days (nine in ten) stay on them: a series of
                // month ends past a 29 February goes on to 31 March, not 29 March.
                let rows = series
                    .groups
                    .iter()
                    .flatten()
                    .filter_map(|&row| series.ticks[row]);
                let (mut ends, mut all) = (0usize, 0usize);
                for ticks in rows {
                    let (year, month, day) = civil_from_days(ticks.div_euclid(per_day));
                    all += 1;
                    ends += usize::from(day == days_in_month(year, month));
                }
                return Ok(if ends * 10 >= all * 9 {
                    Step::MonthEnds(months)
                } else {
                    Step::Months(months)
                });
            }
        }
    }
    Ok(Step::Ticks(gap))
}

#[allow(clippy::too_many_arguments)]
fn features(
    options: &SeriesOptions,
    target: &str,
    read_type: &DataType,
    batch: &RecordBatch,
    columns: &Columns,
    queries: &[Query],
    lags: &[f64],
    changes: Option<&[f64]>,
) -> Result<RecordBatch, String> {
    let window = options.window;
    let group_rows: UInt32Array = queries.iter().map(|q| Some(q.group_row as u32)).collect();
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let schema = batch.schema();
    for &at in &columns.groups {
        // A group's value is copied into every forecast of the group: its text counts each time.
        capacity::check_taken(
            batch.column(at).as_ref(),
            queries.iter().map(|q| Some(q.group_row)),
            "the forecasts' group values",
        )
        .map_err(|e| e.to_string())?;
        fields.push(schema.field(at).clone().with_nullable(true));
        arrays.push(take(batch.column(at).as_ref(), &group_rows, None).map_err(|e| e.to_string())?);
    }
    let ticks: Int64Array = queries.iter().map(|q| Some(q.ticks)).collect();
    fields.push(Field::new(&options.order, read_type.clone(), true));
    arrays.push(cast(&ticks, read_type).map_err(|e| e.to_string())?);
    for back in 0..window {
        fields.push(Field::new(
            lag_name(target, back + 1),
            DataType::Float64,
            true,
        ));
        arrays.push(Arc::new(Float64Array::from_iter_values(
            (0..queries.len()).map(|q| lags[q * window + back]),
        )));
    }
    fields.push(Field::new(STEP, DataType::Int64, true));
    arrays.push(Arc::new(Int64Array::from_iter_values(
        queries.iter().map(|q| q.step as i64),
    )));
    if let Some(changes) = changes {
        fields.push(Field::new(target, DataType::Float64, true));
        arrays.push(Arc::new(Float64Array::from(changes.to_vec())));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| e.to_string())
}

/// The feature of the value `back` rows before the one forecast (1 is the origin's).
fn lag_name(target: &str, back: usize) -> String {
    format!("{target}_lag_{back}")
}

/// The feature of how many steps ahead a forecast is.
const STEP: &str = "horizon_step";

/// The column with each group's last order value (`WHERE t.d > LATEST`).
const LATEST: &str = "latest";

/// Trains a forecaster for `target` from `batches` (all with the same schema), as
/// [`train`] trains a tabular model: `on_phase` and `stopped` are the final training's.
pub(crate) fn train_series(
    batches: &[RecordBatch],
    target: &str,
    options: &SeriesOptions,
    on_phase: &mut dyn FnMut(u32, &str) -> bool,
    stopped: &dyn Fn() -> bool,
) -> Result<(Forecaster, Description), String> {
    let first = batches
        .first()
        .ok_or("no training data: got no record batches")?;
    let batch = concat_batches(&first.schema(), batches).map_err(|e| e.to_string())?;
    let columns = Columns::find(&batch, options, target)?;
    let target_at = columns
        .target
        .ok_or_else(|| format!("Column '{target}' to predict is not in the training data"))?;
    let target_name = batch.schema().field(target_at).name().clone();
    let target_type = batch.column(target_at).data_type().clone();
    if !target_type.is_numeric() {
        return Err(format!(
            "a time-series model forecasts numbers; '{target_name}' is {target_type}"
        ));
    }
    for name in (1..=options.window)
        .map(|back| lag_name(&target_name, back))
        .chain([STEP.to_owned()])
    {
        if batch
            .schema()
            .fields()
            .iter()
            .any(|f| f.name().eq_ignore_ascii_case(&name))
        {
            return Err(format!(
                "the training data has a column '{name}', a name the forecaster gives a feature; rename it"
            ));
        }
    }
    if batch
        .schema()
        .fields()
        .iter()
        .any(|f| f.name().eq_ignore_ascii_case(LATEST))
    {
        return Err(format!(
            "the training data has a column '{LATEST}', the name of the column a time-series model adds (each group's last '{}'); rename it",
            options.order
        ));
    }
    let order_type = batch.column(columns.order).data_type().clone();
    let read_type = read_type(batch.column(columns.order), &options.order)?;
    let series = split(&batch, &columns, &read_type, options)?;
    let step = infer_step(&series, &read_type, &options.order)?;
    let base = Shape {
        options: options.clone(),
        target: target_name.clone(),
        target_type: target_type.clone(),
        order_type,
        read_type,
        step,
    };

    // The backtest: trained on each series but its last BACKTEST_ORIGINS·h rows, scored on
    // the h rows after each of the origins that follow.
    let horizon = options.horizon;
    // As many origins as each series holds, up to BACKTEST_ORIGINS: a series of at least
    // h + 2 rows has one (a cutoff of 0 means none).
    let cutoffs: Vec<usize> = series
        .groups
        .iter()
        .map(|group| {
            let origins = (group.len().saturating_sub(2) / horizon).min(BACKTEST_ORIGINS);
            group.len().saturating_sub(origins * horizon + 1) * usize::from(origins > 0)
        })
        .collect();
    // The backtest's training is a whole training of its own: the model's phase says so, and
    // a drop seen there stops it.
    if !on_phase(0, "Backtesting on each series' last rows") {
        return Err(super::train::STOPPED.to_owned());
    }
    let backtest = examples(&base, &batch, &columns, &series, Some(&cutoffs))
        .and_then(|(features, _)| {
            train(
                std::slice::from_ref(&features),
                &target_name,
                &mut |_, _| !stopped(),
                stopped,
            )
            .map(|trained| trained.predictor)
        })
        .ok()
        .map(|inner| {
            let tester = Forecaster {
                shape: base.clone(),
                inner,
            };
            backtest_score(&tester, &batch, &columns, &series, &cutoffs)
        })
        .transpose()?
        .flatten();
    if stopped() {
        return Err(super::train::STOPPED.to_owned());
    }

    let (features, count) = examples(&base, &batch, &columns, &series, None)?;
    let Trained {
        predictor,
        mut description,
    } = train(
        std::slice::from_ref(&features),
        &target_name,
        on_phase,
        stopped,
    )?;
    drop(features);
    let every = match step {
        Step::Ticks(gap) => format!("{gap} {}", unit_name(&base.read_type)),
        Step::Months(1) => "1 month".to_owned(),
        Step::Months(n) => format!("{n} months"),
        Step::MonthEnds(1) => "1 month (month ends)".to_owned(),
        Step::MonthEnds(n) => format!("{n} months (month ends)"),
    };
    let groups = if options.groups.is_empty() {
        String::new()
    } else {
        format!(", group by {}", options.groups.join(", "))
    };
    description.model = format!(
        "Time series: order by {}{groups}, window {}, horizon {}, every {every} ({count} forecasts to learn from) --> {}",
        options.order, options.window, horizon, description.model
    );
    if let Some(score) = backtest {
        description.accuracies.insert("r2_score".to_owned(), score);
    }
    Ok((
        Forecaster {
            shape: base,
            inner: predictor,
        },
        description,
    ))
}

fn unit_name(read_type: &DataType) -> &'static str {
    match read_type {
        DataType::Date32 => "day(s)",
        DataType::Date64 | DataType::Timestamp(TimeUnit::Millisecond, _) => "millisecond(s)",
        DataType::Timestamp(TimeUnit::Second, _) => "second(s)",
        DataType::Timestamp(TimeUnit::Microsecond, _) => "microsecond(s)",
        DataType::Timestamp(TimeUnit::Nanosecond, _) => "nanosecond(s)",
        _ => "unit(s)",
    }
}

/// Every (origin, step) example of the series whose forecast row is known (and, with
/// `cutoffs`, at or before its group's cutoff), as the tabular model's training rows, and
/// how many there are. Past [`MAX_EXAMPLES`], origins are taken at an even stride.
fn examples(
    forecaster: &Shape,
    batch: &RecordBatch,
    columns: &Columns,
    series: &Series,
    cutoffs: Option<&[usize]>,
) -> Result<(RecordBatch, usize), String> {
    let horizon = forecaster.options.horizon;
    let end = |index: usize| match cutoffs {
        Some(cutoffs) => cutoffs[index] + 1,
        None => series.groups[index].len(),
    };
    let possible: usize = (0..series.groups.len())
        .map(|index| end(index).saturating_sub(1).saturating_mul(horizon))
        .fold(0, usize::saturating_add);
    let stride = possible.div_ceil(MAX_EXAMPLES).max(1);
    let room = possible.div_ceil(stride);
    capacity::check(
        (room as u64)
            .saturating_mul(forecaster.options.window as u64 + 8)
            .saturating_mul(8),
        "the forecaster's training examples",
    )
    .map_err(|e| e.to_string())?;
    let mut queries = Vec::with_capacity(room); // bounded: checked just above
    let mut targets = Vec::with_capacity(room); // bounded: checked just above
    let mut lags = Vec::new();
    let mut origin_count = 0usize;
    for (index, group) in series.groups.iter().enumerate() {
        let end = end(index).min(group.len());
        for origin in 0..end.saturating_sub(1) {
            origin_count += 1;
            if !origin_count.is_multiple_of(stride) {
                continue;
            }
            for step in 1..=horizon {
                let at = origin + step;
                if at >= end || !series.known[group[at]] {
                    continue;
                }
                let Some(ticks) = series.ticks[group[at]] else {
                    continue;
                };
                let (Some(base), Some(value)) = (
                    forecaster.history(series, group, origin, &mut lags),
                    series.values[group[at]],
                ) else {
                    continue;
                };
                queries.push(Query {
                    group_row: group[origin],
                    step,
                    ticks,
                    base,
                });
                targets.push(value - base);
            }
        }
    }
    let count = queries.len();
    let features = forecaster.features(batch, columns, &queries, &lags, Some(&targets))?;
    Ok((features, count))
}

/// The r² of the forecasts from each backtest origin (each group's cutoff and the h-row
/// origins after it), reading the actual history up to the origin; `None` when no group is
/// long enough to test.
fn backtest_score(
    tester: &Forecaster,
    batch: &RecordBatch,
    columns: &Columns,
    series: &Series,
    cutoffs: &[usize],
) -> Result<Option<f64>, String> {
    let shape = &tester.shape;
    let horizon = shape.options.horizon;
    let mut queries = Vec::new();
    let mut lags = Vec::new();
    let mut truth = Vec::new();
    for (group, &cutoff) in series.groups.iter().zip(cutoffs) {
        if cutoff == 0 {
            continue;
        }
        let origins = (group.len() - 1 - cutoff) / horizon;
        for round in 0..origins {
            let origin = cutoff + round * horizon;
            for step in 1..=horizon {
                let at = origin + step;
                let (Some(&row), true) = (group.get(at), origin < group.len()) else {
                    continue;
                };
                let (Some(ticks), Some(value), true) =
                    (series.ticks[row], series.values[row], series.known[row])
                else {
                    continue;
                };
                let Some(base) = shape.history(series, group, origin, &mut lags) else {
                    continue;
                };
                queries.push(Query {
                    group_row: group[origin],
                    step,
                    ticks,
                    base,
                });
                truth.push(value);
            }
        }
    }
    if truth.len() < 2 {
        return Ok(None);
    }
    let features = shape.features(batch, columns, &queries, &lags, None)?;
    let bases: Vec<f64> = queries.iter().map(|q| q.base).collect();
    let (predicted, _) = tester
        .inner
        .predict_detailed_from(&features, false, &bases)?;
    let predicted = cast(&predicted, &DataType::Float64).map_err(|e| e.to_string())?;
    let predicted = predicted.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
    let mean = truth.iter().sum::<f64>() / truth.len() as f64;
    let total: f64 = truth.iter().map(|v| (v - mean).powi(2)).sum();
    let residual: f64 = truth
        .iter()
        .zip(predicted.iter())
        .map(|(v, p)| (v - p.unwrap_or(mean)).powi(2))
        .sum();
    Ok(Some(if total > 0.0 {
        1.0 - residual / total
    } else if residual == 0.0 {
        1.0
    } else {
        0.0
    }))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Date32Array, StringArray};
    use datafusion::arrow::datatypes::{Date32Type, Float64Type};

    use super::*;

    /// Two stores' daily sales over `days` days from 2024-01-01: a level per store, a weekly
    /// season and a slow trend; exact, so forecasts can be checked against the formula.
    fn sales(days: i32) -> RecordBatch {
        let start = days_from_civil(2024, 1, 1) as i32;
        let mut d = Vec::new();
        let mut store = Vec::new();
        let mut amount = Vec::new();
        for (name, level) in [("north", 100.0), ("south", 40.0)] {
            for day in 0..days {
                d.push(start + day);
                store.push(name);
                amount.push(truth(level, day));
            }
        }
        RecordBatch::try_from_iter([
            ("d", Arc::new(Date32Array::from(d)) as ArrayRef),
            ("store", Arc::new(StringArray::from(store))),
            ("amount", Arc::new(Float64Array::from(amount))),
        ])
        .unwrap()
    }

    fn truth(level: f64, day: i32) -> f64 {
        let weekly = [0.0, 5.0, 8.0, 6.0, 2.0, -9.0, -12.0][(day % 7) as usize];
        level + weekly + 0.05 * f64::from(day)
    }

    fn options(window: usize, horizon: usize) -> SeriesOptions {
        SeriesOptions {
            order: "d".into(),
            groups: vec!["store".into()],
            window,
            horizon,
        }
    }

    #[test]
    fn a_seasonal_series_per_group_is_forecast_step_by_step_after_its_last_day() {
        let history = sales(140);
        let (forecaster, description) = train_series(
            std::slice::from_ref(&history),
            "amount",
            &options(14, 7),
            &mut |_, _| true,
            &|| false,
        )
        .expect("trains");
        assert_eq!(forecaster.shape.step, Step::Ticks(1));
        assert!(
            description.accuracies["r2_score"] > 0.95,
            "backtest: {description:?}"
        );
        assert!(
            description.model.starts_with(
                "Time series: order by d, group by store, window 14, horizon 7, every 1 day(s)"
            ),
            "{}",
            description.model
        );
        let forecast = forecaster.forecast(&history, false).expect("forecasts");
        assert_eq!(forecast.answers.len(), 280 + 14);
        let future: Vec<usize> = (0..forecast.answers.len())
            .filter(|&i| forecast.answers[i].input.is_none())
            .collect();
        assert_eq!(future.len(), 14);
        let dates = forecast.order.as_primitive::<Date32Type>();
        let predicted = forecast.target.as_primitive::<Float64Type>();
        let latest = forecast
            .details
            .last()
            .unwrap()
            .as_primitive::<Date32Type>();
        let start = days_from_civil(2024, 1, 1) as i32;
        for (n, &at) in future.iter().enumerate() {
            let step = (n % 7) as i32 + 1;
            let day = 139 + step;
            assert_eq!(dates.value(at), start + day, "answer {at}");
            assert_eq!(latest.value(at), start + 139);
            let level = if n < 7 { 100.0 } else { 40.0 };
            let want = truth(level, day);
            assert!(
                (predicted.value(at) - want).abs() < 3.0,
                "day {day}: {} for {want}",
                predicted.value(at)
            );
        }
        // Each input row is answered from the rows before it; a group's first row is not.
        let first = forecast
            .answers
            .iter()
            .position(|a| a.input == Some(0))
            .unwrap();
        assert!(predicted.is_null(first));
        assert_eq!(predicted.null_count(), 2);
    }

    #[test]
    fn monthly_rows_step_by_calendar_months() {
        // The last day of each month, 2021-01 to 2023-12: gaps of 28 to 31 days.
        let days: Vec<i32> = (0..36)
            .map(|m| {
                let (year, month) = (2021 + i64::from(m / 12), (m % 12) as u32 + 1);
                days_from_civil(year, month, days_in_month(year, month)) as i32
            })
            .collect();
        let values: Vec<f64> = (0..36).map(|m| 10.0 + f64::from(m % 12)).collect();
        let batch = RecordBatch::try_from_iter([
            ("d", Arc::new(Date32Array::from(days)) as ArrayRef),
            ("y", Arc::new(Float64Array::from(values))),
        ])
        .unwrap();
        let options = SeriesOptions {
            order: "d".into(),
            groups: Vec::new(),
            window: 3,
            horizon: 2,
        };
        let (forecaster, _) = train_series(
            std::slice::from_ref(&batch),
            "y",
            &options,
            &mut |_, _| true,
            &|| false,
        )
        .unwrap();
        assert_eq!(forecaster.shape.step, Step::MonthEnds(1));
        let forecast = forecaster.forecast(&batch, false).unwrap();
        let dates = forecast.order.as_primitive::<Date32Type>();
        let n = forecast.answers.len();
        // The last row is 2023-12-31: then 2024-01-31 and 2024-02-29 (a leap year).
        assert_eq!(dates.value(n - 2), days_from_civil(2024, 1, 31) as i32);
        assert_eq!(dates.value(n - 1), days_from_civil(2024, 2, 29) as i32);
        // From a month end on the 29th (February), month ends go on: 31 March, 30 April.
        let feb = days_from_civil(2024, 2, 29);
        let read = DataType::Date32;
        assert_eq!(
            advance(&read, Step::MonthEnds(1), feb, 1),
            Some(days_from_civil(2024, 3, 31))
        );
        assert_eq!(
            advance(&read, Step::MonthEnds(1), feb, 2),
            Some(days_from_civil(2024, 4, 30))
        );
        assert_eq!(
            advance(&read, Step::Months(1), days_from_civil(2024, 1, 30), 1),
            Some(days_from_civil(2024, 2, 29))
        );
    }

    #[test]
    fn bad_series_are_errors_that_say_why() {
        let text = RecordBatch::try_from_iter([
            ("d", Arc::new(Date32Array::from(vec![1, 2, 3])) as ArrayRef),
            ("store", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
            ("amount", Arc::new(StringArray::from(vec!["x", "y", "z"]))),
        ])
        .unwrap();
        let message = train_series(&[text], "amount", &options(2, 1), &mut |_, _| true, &|| {
            false
        })
        .unwrap_err();
        assert!(message.contains("forecasts numbers"), "{message}");
        let lonely = RecordBatch::try_from_iter([
            ("d", Arc::new(Date32Array::from(vec![1, 2, 3])) as ArrayRef),
            ("store", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
            ("amount", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
        ])
        .unwrap();
        let message = train_series(
            &[lonely],
            "amount",
            &options(2, 1),
            &mut |_, _| true,
            &|| false,
        )
        .unwrap_err();
        assert!(message.contains("two rows"), "{message}");
        let missing = sales(20);
        let mut no_order = options(2, 1);
        no_order.order = "day".into();
        let message =
            train_series(&[missing], "amount", &no_order, &mut |_, _| true, &|| false).unwrap_err();
        assert!(message.contains("ORDER BY column 'day'"), "{message}");
    }

    #[test]
    fn stored_forecasters_read_back_and_forecast_the_same() {
        let history = sales(60);
        let (forecaster, _) = train_series(
            std::slice::from_ref(&history),
            "amount",
            &options(7, 3),
            &mut |_, _| true,
            &|| false,
        )
        .unwrap();
        let bytes = super::super::stored_forecaster(&forecaster).unwrap();
        let text: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let read: Forecaster = serde_json::from_value(text["series"].clone()).unwrap();
        let (a, b) = (
            forecaster.forecast(&history, false).unwrap(),
            read.forecast(&history, false).unwrap(),
        );
        assert_eq!(a.target.as_ref(), b.target.as_ref());
    }
}
