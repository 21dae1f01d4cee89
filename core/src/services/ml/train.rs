//! The built-in trainer: infers a kind for every column, encodes the inputs, fits a random forest and a
//! linear baseline with smartcore, keeps whichever scores better on a held-out split, and describes the
//! result. A fitted [`Predictor`] is plain serde data; it owns everything needed to predict later.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, Float64Array, StringArray,
};
use datafusion::arrow::compute::{can_cast_types, cast, concat};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float64Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use smartcore::ensemble::random_forest_classifier::{
    RandomForestClassifier, RandomForestClassifierParameters,
};
use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::error::Failed;
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::linear::logistic_regression::LogisticRegression;
use smartcore::linear::ridge_regression::RidgeRegression;

use super::linear;
use crate::catalog::models::Description;

/// Why [`train`] ended early: its `on_phase` or `stopped` said stop.
pub(crate) const STOPPED: &str = "training stopped";

const SEED: u64 = 1;
const MIN_TARGET_ROWS: usize = 10;
/// Below this many rows a held-out split is too small to mean anything, so all rows serve both roles.
const SMALL_DATA_ROWS: usize = 50;
const MIN_CATEGORICAL_LIMIT: usize = 20;
const MAX_ONE_HOT_CATEGORIES: usize = 50;
const FOREST_TREES: u16 = 50;
const FOREST_MAX_DEPTH: u16 = 12;
/// The forest is the expensive mixer; a random subsample this large keeps training time bounded.
const FOREST_MAX_ROWS: usize = 20_000;
const IMPORTANCE_MAX_ROWS: usize = 5_000;
const RIDGE_ALPHA: f64 = 1.0;
const LOGISTIC_ALPHA: f64 = 0.01;
/// Logistic regression's cost grows with classes × features × rows; past this the forest alone is fitted.
const LOGISTIC_MAX_CLASSES: usize = 50;
const SECONDS_PER_DAY: i64 = 86_400;

type Matrix = DenseMatrix<f64>;
/// One tree of a forest fitted a tree at a time: a one-tree smartcore forest.
type RegressionTree = RandomForestRegressor<f64, f64, Matrix, Vec<f64>>;
/// As [`RegressionTree`], for classes.
type ClassificationTree = RandomForestClassifier<f64, u32, Matrix, Vec<u32>>;

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
    pub(crate) fn predict(&self, batch: &RecordBatch) -> Result<ArrayRef, String> {
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
        let features = encode(&self.columns, &values, &all_rows);
        let predicted = self.mixer.predict(&features)?;
        self.to_target_array(predicted)
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
    let order = shuffled(kept.len(), SEED);
    let (train_rows, valid_rows) = if kept.len() < SMALL_DATA_ROWS {
        (order.clone(), order)
    } else {
        let valid = kept.len() / 5;
        (order[valid..].to_vec(), order[..valid].to_vec())
    };
    let columns: Vec<InputColumn> = columns
        .into_iter()
        .zip(&values)
        .map(|((name, kind), column_values)| InputColumn {
            encoder: Encoder::fit(kind, column_values, &train_rows),
            name,
            kind,
        })
        .collect();
    let forest_rows = &train_rows[..train_rows.len().min(FOREST_MAX_ROWS)];
    let train_features = encode(&columns, &values, &train_rows);
    let forest_features = encode(&columns, &values, forest_rows);
    let valid_features = encode(&columns, &values, &valid_rows);
    let pick = |rows: &[usize]| -> Vec<f64> { rows.iter().map(|&row| y[row]).collect() };
    let (y_train, y_forest, y_valid) = (pick(&train_rows), pick(forest_rows), pick(&valid_rows));

    phase(3, "Fitting mixers")?;
    let candidates = fit_candidates(
        &task,
        &train_features,
        &forest_features,
        &y_train,
        &y_forest,
        &check,
    )?;

    phase(4, "Evaluating")?;
    let mut best: Option<(Candidate, f64)> = None;
    let mut failures = Vec::new();
    for candidate in candidates {
        check()?;
        match candidate.mixer.predict(&valid_features) {
            Ok(predicted) => {
                let score = task.score(predicted, &y_valid);
                if best
                    .as_ref()
                    .is_none_or(|(_, best_score)| score > *best_score)
                {
                    best = Some((candidate, score));
                }
            }
            Err(message) => failures.push(message),
        }
    }
    let (winner, score) = best.ok_or_else(|| {
        format!(
            "could not evaluate any model for '{target_name}': {}",
            failures.join("; ")
        )
    })?;
    let score = if task.is_single_class() { 1.0 } else { score };
    let importances = permutation_importances(
        &task,
        &winner.mixer,
        &columns,
        &valid_features,
        &y_valid,
        &check,
    )?;

    let inputs: Vec<String> = columns.iter().map(|column| column.name.clone()).collect();
    let description = Description {
        accuracies: BTreeMap::from([(task.score_name().to_owned(), score)]),
        column_importances: inputs.iter().cloned().zip(importances).collect(),
        inputs: inputs.clone(),
        outputs: vec![target_name.clone()],
        model: model_text(&columns, &winner.stage),
        mixer: winner.family.to_owned(),
        column_types,
    };
    let predictor = Predictor {
        target: target_name,
        target_type,
        task,
        inputs,
        columns,
        mixer: winner.mixer,
    };
    Ok(Trained {
        predictor,
        description,
    })
}

/// The training rows, one concatenated array per column.
struct Table {
    names: Vec<String>,
    columns: Vec<ArrayRef>,
}

impl Table {
    fn from_batches(batches: &[RecordBatch]) -> Result<Table, String> {
        let first = batches
            .first()
            .ok_or("no training data: got no record batches")?;
        let schema = first.schema();
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (index, field) in schema.fields().iter().enumerate() {
            let parts = batches
                .iter()
                .map(|batch| {
                    batch
                        .columns()
                        .get(index)
                        .map(|array| array.as_ref())
                        .ok_or_else(|| {
                            format!(
                                "training batches disagree on columns: '{}' is missing",
                                field.name()
                            )
                        })
                })
                .collect::<Result<Vec<&dyn Array>, String>>()?;
            let column = concat(&parts).map_err(|e| {
                format!(
                    "training batches disagree on column '{}': {e}",
                    field.name()
                )
            })?;
            columns.push(column);
        }
        Ok(Table {
            names: schema
                .fields()
                .iter()
                .map(|field| field.name().clone())
                .collect(),
            columns,
        })
    }
}

/// Exact name first, then the first name equal ignoring case.
fn find_column(names: &[&str], wanted: &str) -> Option<usize> {
    names.iter().position(|name| *name == wanted).or_else(|| {
        names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(wanted))
    })
}

/// How a column's cells are read out of Arrow.
#[derive(Clone, Copy, Debug)]
enum Reading {
    Number,
    Flag,
    Label,
    Instant,
}

impl Reading {
    fn for_type(data_type: &DataType) -> Option<Reading> {
        match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal32(_, _)
            | DataType::Decimal64(_, _)
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _) => Some(Reading::Number),
            DataType::Boolean => Some(Reading::Flag),
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => {
                Some(Reading::Instant)
            }
            other if can_cast_types(other, &DataType::Utf8) => Some(Reading::Label),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Reading::Number => "a number",
            Reading::Flag => "a boolean",
            Reading::Label => "text",
            Reading::Instant => "a date or timestamp",
        }
    }
}

/// A column's cells as read for training or prediction; NULL, NaN and infinities become `None`.
enum Values {
    Numbers(Vec<Option<f64>>),
    Flags(Vec<Option<bool>>),
    Labels(Vec<Option<String>>),
    /// Seconds since the Unix epoch, UTC.
    Instants(Vec<Option<i64>>),
    /// Not read because the column is excluded.
    Unread,
}

impl Values {
    fn missing(reading: Reading, rows: usize) -> Values {
        match reading {
            Reading::Number => Values::Numbers(vec![None; rows]),
            Reading::Flag => Values::Flags(vec![None; rows]),
            Reading::Label => Values::Labels(vec![None; rows]),
            Reading::Instant => Values::Instants(vec![None; rows]),
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Numbers(cells) => cells.len(),
            Values::Flags(cells) => cells.len(),
            Values::Labels(cells) => cells.len(),
            Values::Instants(cells) => cells.len(),
            Values::Unread => 0,
        }
    }

    fn is_present(&self, row: usize) -> bool {
        match self {
            Values::Numbers(cells) => cells[row].is_some(),
            Values::Flags(cells) => cells[row].is_some(),
            Values::Labels(cells) => cells[row].is_some(),
            Values::Instants(cells) => cells[row].is_some(),
            Values::Unread => false,
        }
    }

    fn select(&self, rows: &[usize]) -> Values {
        fn pick<T: Clone>(cells: &[T], rows: &[usize]) -> Vec<T> {
            rows.iter().map(|&row| cells[row].clone()).collect()
        }
        match self {
            Values::Numbers(cells) => Values::Numbers(pick(cells, rows)),
            Values::Flags(cells) => Values::Flags(pick(cells, rows)),
            Values::Labels(cells) => Values::Labels(pick(cells, rows)),
            Values::Instants(cells) => Values::Instants(pick(cells, rows)),
            Values::Unread => Values::Unread,
        }
    }
}

fn read(array: &ArrayRef, reading: Reading, name: &str) -> Result<Values, String> {
    let cast_to = |data_type: &DataType| {
        cast(array, data_type).map_err(|e| {
            format!(
                "cannot read column '{name}' of type {} as {}: {e}",
                array.data_type(),
                reading.as_str()
            )
        })
    };
    Ok(match reading {
        Reading::Number => {
            let numbers = cast_to(&DataType::Float64)?;
            Values::Numbers(
                numbers
                    .as_primitive::<Float64Type>()
                    .iter()
                    .map(|cell| cell.filter(|value| value.is_finite()))
                    .collect(),
            )
        }
        Reading::Flag => Values::Flags(cast_to(&DataType::Boolean)?.as_boolean().iter().collect()),
        Reading::Label => Values::Labels(
            cast_to(&DataType::Utf8)?
                .as_string::<i32>()
                .iter()
                .map(|cell| cell.map(str::to_owned))
                .collect(),
        ),
        Reading::Instant => Values::Instants(match array.data_type() {
            DataType::Date32 => array
                .as_primitive::<Date32Type>()
                .iter()
                .map(|days| days.map(|days| i64::from(days) * SECONDS_PER_DAY))
                .collect(),
            DataType::Date64 => epoch_seconds::<Date64Type>(array.as_ref(), 1_000),
            DataType::Timestamp(unit, _) => timestamp_seconds(array.as_ref(), unit),
            _ => {
                let seconds = cast_to(&DataType::Timestamp(TimeUnit::Second, None))?;
                epoch_seconds::<TimestampSecondType>(seconds.as_ref(), 1)
            }
        }),
    })
}

fn timestamp_seconds(array: &dyn Array, unit: &TimeUnit) -> Vec<Option<i64>> {
    match unit {
        TimeUnit::Second => epoch_seconds::<TimestampSecondType>(array, 1),
        TimeUnit::Millisecond => epoch_seconds::<TimestampMillisecondType>(array, 1_000),
        TimeUnit::Microsecond => epoch_seconds::<TimestampMicrosecondType>(array, 1_000_000),
        TimeUnit::Nanosecond => epoch_seconds::<TimestampNanosecondType>(array, 1_000_000_000),
    }
}

fn epoch_seconds<T: ArrowPrimitiveType<Native = i64>>(
    array: &dyn Array,
    per_second: i64,
) -> Vec<Option<i64>> {
    array
        .as_primitive::<T>()
        .iter()
        .map(|ticks| ticks.map(|ticks| ticks.div_euclid(per_second)))
        .collect()
}

/// The kind of a column, as MindsDB names it in `DESCRIBE`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
enum ColumnKind {
    Integer,
    Float,
    Categorical,
    Binary,
    Date,
    Timestamp,
    Text,
    Unsupported,
}

impl ColumnKind {
    fn infer(data_type: &DataType, values: &Values, rows: usize) -> ColumnKind {
        match values {
            Values::Numbers(_) if data_type.is_integer() => ColumnKind::Integer,
            Values::Numbers(_) => ColumnKind::Float,
            Values::Flags(_) => ColumnKind::Binary,
            Values::Instants(_) if matches!(data_type, DataType::Timestamp(_, _)) => {
                ColumnKind::Timestamp
            }
            Values::Instants(_) => ColumnKind::Date,
            Values::Labels(cells) => {
                let distinct: HashSet<&str> = cells.iter().flatten().map(String::as_str).collect();
                if distinct.len() <= MIN_CATEGORICAL_LIMIT.max(rows / 20) {
                    ColumnKind::Categorical
                } else {
                    ColumnKind::Text
                }
            }
            Values::Unread => ColumnKind::Unsupported,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ColumnKind::Integer => "integer",
            ColumnKind::Float => "float",
            ColumnKind::Categorical => "categorical",
            ColumnKind::Binary => "binary",
            ColumnKind::Date => "date",
            ColumnKind::Timestamp => "timestamp",
            ColumnKind::Text => "text",
            ColumnKind::Unsupported => "unsupported",
        }
    }
}

/// What is predicted: a number, or one of the classes seen in training (labels as text).
#[derive(Serialize, Deserialize, Clone, Debug)]
enum Task {
    Regression { integer: bool },
    Classification { classes: Vec<String> },
}

impl Task {
    fn is_single_class(&self) -> bool {
        matches!(self, Task::Classification { classes } if classes.len() == 1)
    }

    fn score_name(&self) -> &'static str {
        match self {
            Task::Regression { .. } => "r2_score",
            Task::Classification { .. } => "balanced_accuracy_score",
        }
    }

    /// Scores predictions against the truth; classes are compared as indices.
    fn score(&self, predicted: Vec<f64>, actual: &[f64]) -> f64 {
        let score = match self {
            Task::Regression { integer } => {
                r2_score(&finish_regression(predicted, *integer), actual)
            }
            Task::Classification { .. } => balanced_accuracy(&predicted, actual),
        };
        if score.is_nan() {
            f64::NEG_INFINITY
        } else {
            score
        }
    }
}

/// Decides regression or classification and returns the target as numbers (class indices for classes).
fn target_task(
    name: &str,
    kind: ColumnKind,
    data_type: &DataType,
    values: &Values,
) -> Result<(Task, Vec<f64>), String> {
    let labels: Vec<String> = match (kind, values) {
        (ColumnKind::Integer | ColumnKind::Float, Values::Numbers(cells)) => {
            let task = Task::Regression {
                integer: kind == ColumnKind::Integer,
            };
            return Ok((task, cells.iter().flatten().copied().collect()));
        }
        (ColumnKind::Binary, Values::Flags(cells)) => cells
            .iter()
            .flatten()
            .map(|flag| flag.to_string())
            .collect(),
        (ColumnKind::Categorical, Values::Labels(cells)) => {
            cells.iter().flatten().cloned().collect()
        }
        (ColumnKind::Text, _) => return Err(format!("cannot predict free text column '{name}'")),
        _ => {
            return Err(format!(
                "cannot predict column '{name}' of type {data_type}"
            ))
        }
    };
    let classes: Vec<String> = labels
        .iter()
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: HashMap<&str, usize> = classes
        .iter()
        .enumerate()
        .map(|(position, class)| (class.as_str(), position))
        .collect();
    let y = labels
        .iter()
        .map(|label| index[label.as_str()] as f64)
        .collect();
    Ok((Task::Classification { classes }, y))
}

fn finish_regression(mut predicted: Vec<f64>, integer: bool) -> Vec<f64> {
    if integer {
        predicted
            .iter_mut()
            .for_each(|value| *value = value.round());
    }
    predicted
}

fn class_label(classes: &[String], class: f64) -> &str {
    let index = (class.max(0.0) as usize).min(classes.len().saturating_sub(1));
    classes.get(index).map_or("", String::as_str)
}

/// One input column with its fitted encoder.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct InputColumn {
    name: String,
    kind: ColumnKind,
    encoder: Encoder,
}

/// Turns a column's cells into model features; fitted on the training split only.
#[derive(Serialize, Deserialize, Clone, Debug)]
enum Encoder {
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
struct Scaler {
    mean: f64,
    std: f64,
}

impl Scaler {
    fn fit(values: impl Iterator<Item = f64>) -> Scaler {
        let (mut count, mut sum, mut sum_sq) = (0.0, 0.0, 0.0);
        for value in values {
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
        let mean = sum / count;
        let std = (sum_sq / count - mean * mean).max(0.0).sqrt();
        // A constant column would divide by zero; leaving it unscaled keeps it harmless.
        let std = if std.is_finite() && std > f64::EPSILON * mean.abs().max(1.0) {
            std
        } else {
            1.0
        };
        Scaler { mean, std }
    }

    fn apply(&self, value: Option<f64>) -> f64 {
        value.map_or(0.0, |value| (value - self.mean) / self.std)
    }
}

impl Encoder {
    fn fit(kind: ColumnKind, values: &Values, rows: &[usize]) -> Encoder {
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

    fn reading(&self) -> Option<Reading> {
        match self {
            Encoder::Scale(_) => Some(Reading::Number),
            Encoder::OneHot { .. } => Some(Reading::Label),
            Encoder::Flag => Some(Reading::Flag),
            Encoder::CalendarParts { .. } => Some(Reading::Instant),
            Encoder::Excluded => None,
        }
    }

    fn width(&self) -> usize {
        match self {
            Encoder::Scale(_) | Encoder::Flag => 1,
            Encoder::OneHot { categories, .. } => categories.len(),
            Encoder::CalendarParts { scalers, .. } => scalers.len(),
            Encoder::Excluded => 0,
        }
    }

    /// Writes this column's features for `rows` into the row-major `out`, at `offset` within each row.
    fn write(
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
fn calendar_parts(seconds: i64, hour: bool) -> Vec<f64> {
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

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
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
struct Features {
    rows: usize,
    width: usize,
    values: Vec<f64>,
}

impl Features {
    fn matrix(&self) -> Result<Matrix, String> {
        DenseMatrix::new(self.rows, self.width, self.values.clone(), false)
            .map_err(|e| format!("cannot build the feature matrix: {e}"))
    }

    fn head(&self, rows: usize) -> Features {
        let rows = rows.min(self.rows);
        Features {
            rows,
            width: self.width,
            values: self.values[..rows * self.width].to_vec(),
        }
    }

    /// A copy with features `offset..offset + len` of row `order[i]` moved to row `i`.
    fn with_block_reordered(&self, offset: usize, len: usize, order: &[usize]) -> Features {
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

fn block_offsets(columns: &[InputColumn]) -> Vec<usize> {
    columns
        .iter()
        .scan(0, |offset, column| {
            let start = *offset;
            *offset += column.encoder.width();
            Some(start)
        })
        .collect()
}

fn encode(columns: &[InputColumn], values: &[Values], rows: &[usize]) -> Features {
    let width = columns.iter().map(|column| column.encoder.width()).sum();
    let mut out = vec![0.0; rows.len() * width];
    for ((column, column_values), offset) in columns.iter().zip(values).zip(block_offsets(columns))
    {
        column
            .encoder
            .write(column_values, rows, &mut out, width, offset);
    }
    Features {
        rows: rows.len(),
        width,
        values: out,
    }
}

/// The fitted model that turns features into a prediction (a class index for classification).
#[derive(Serialize, Deserialize, Clone, Debug)]
enum Mixer {
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
}

impl Mixer {
    fn name(&self) -> &'static str {
        match self {
            Mixer::ForestRegressor(_) => "random forest regressor",
            Mixer::Ridge(_) => "ridge regression",
            Mixer::ForestClassifier(_) => "random forest classifier",
            Mixer::Logistic(_) | Mixer::LinearClassifier(_) => "logistic regression",
            Mixer::Constant(_) => "constant",
            Mixer::RegressionTrees(_) => "random forest regressor",
            Mixer::ClassificationTrees(_) => "random forest classifier",
            Mixer::LinearRegression(_) => "ridge regression",
        }
    }

    fn predict(&self, features: &Features) -> Result<Vec<f64>, String> {
        let what = || format!("predicting with the {}", self.name());
        let as_numbers = |classes: Vec<u32>| classes.into_iter().map(f64::from).collect();
        match self {
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
        }
    }
}

/// smartcore asserts on some inputs instead of returning `Err`; user data must never panic the engine.
/// (Our own linear fits do not panic, but the line search of smartcore's L-BFGS they use does
/// when it cannot converge.)
fn guarded<T, E: std::fmt::Display>(
    what: &str,
    run: impl FnOnce() -> Result<T, E>,
) -> Result<T, String> {
    match panic::catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} failed on this data")),
    }
}

/// A fitted mixer with the words used to describe it.
struct Candidate {
    mixer: Mixer,
    family: &'static str,
    stage: String,
}

fn fit_candidates(
    task: &Task,
    train: &Features,
    forest: &Features,
    y_train: &[f64],
    y_forest: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Vec<Candidate>, String> {
    let constant = |value: f64, stage: &str| {
        Ok(vec![Candidate {
            mixer: Mixer::Constant(value),
            family: "constant",
            stage: stage.to_owned(),
        }])
    };
    let mut fits: Vec<Result<Candidate, String>> = Vec::new();
    match task {
        Task::Regression { .. } => {
            if train.width == 0 {
                let mean = y_train.iter().sum::<f64>() / y_train.len() as f64;
                return constant(mean, "Constant (mean of the target)");
            }
            let x = forest.matrix()?;
            let y = y_forest.to_vec();
            fits.push(
                fit_trees(check, "fitting the random forest regressor", |seed| {
                    let params = RandomForestRegressorParameters::default()
                        .with_n_trees(1)
                        .with_max_depth(FOREST_MAX_DEPTH)
                        .with_seed(seed);
                    RandomForestRegressor::fit(&x, &y, params)
                })
                .map(|trees| Candidate {
                    mixer: Mixer::RegressionTrees(Arc::new(trees)),
                    family: "random forest",
                    stage: format!("Random forest regressor ({FOREST_TREES} trees)"),
                }),
            );
            drop(x);
            check()?;
            fits.push(
                linear::Ridge::fit(&train.values, train.width, y_train, RIDGE_ALPHA, check)
                    .map(|model| Candidate {
                        mixer: Mixer::LinearRegression(model),
                        family: "linear",
                        stage: "Ridge regression".to_owned(),
                    })
                    .map_err(|e| format!("fitting the ridge regression failed: {e}")),
            );
        }
        Task::Classification { classes } => {
            if classes.len() == 1 {
                return constant(0.0, "Constant (single class)");
            }
            let mut counts = vec![0usize; classes.len()];
            for &class in y_train {
                counts[class as usize] += 1;
            }
            let seen = counts.iter().filter(|&&count| count > 0).count();
            if train.width == 0 || seen < 2 {
                let majority = (0..counts.len())
                    .max_by_key(|&class| (counts[class], std::cmp::Reverse(class)))
                    .unwrap_or(0);
                return constant(majority as f64, "Constant (most frequent class)");
            }
            let x = forest.matrix()?;
            let y: Vec<u32> = y_forest.iter().map(|&class| class as u32).collect();
            fits.push(
                fit_trees(check, "fitting the random forest classifier", |seed| {
                    let params = RandomForestClassifierParameters::default()
                        .with_n_trees(1)
                        .with_max_depth(FOREST_MAX_DEPTH)
                        .with_seed(seed);
                    RandomForestClassifier::fit(&x, &y, params)
                })
                .map(|trees| Candidate {
                    mixer: Mixer::ClassificationTrees(Arc::new(trees)),
                    family: "random forest",
                    stage: format!("Random forest classifier ({FOREST_TREES} trees)"),
                }),
            );
            drop(x);
            check()?;
            if seen <= LOGISTIC_MAX_CLASSES {
                let y: Vec<u32> = y_train.iter().map(|&class| class as u32).collect();
                fits.push(
                    guarded("fitting the logistic regression", || {
                        linear::Logistic::fit(&train.values, train.width, &y, LOGISTIC_ALPHA, check)
                    })
                    .map(|model| Candidate {
                        mixer: Mixer::LinearClassifier(model),
                        family: "linear",
                        stage: "Logistic regression".to_owned(),
                    }),
                );
            }
        }
    }
    // A fit that failed because it was stopped is a stop, not a failed candidate.
    check()?;
    let (fitted, failed): (Vec<_>, Vec<_>) = fits.into_iter().partition(Result::is_ok);
    if fitted.is_empty() {
        let reasons: Vec<String> = failed.into_iter().filter_map(Result::err).collect();
        return Err(format!("could not fit any model: {}", reasons.join("; ")));
    }
    Ok(fitted.into_iter().filter_map(Result::ok).collect())
}

/// Fits the forest's [`FOREST_TREES`] trees one at a time (tree `n` with seed `SEED + n`),
/// asking `check` before each: a tree on at most [`FOREST_MAX_ROWS`] rows is the longest
/// step a stop waits for.
fn fit_trees<M>(
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
fn permutation_importances(
    task: &Task,
    mixer: &Mixer,
    columns: &[InputColumn],
    valid: &Features,
    y_valid: &[f64],
    check: &dyn Fn() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    if matches!(mixer, Mixer::Constant(_)) {
        return Ok(vec![0.0; columns.len()]);
    }
    let sample = valid.head(IMPORTANCE_MAX_ROWS);
    let y = &y_valid[..sample.rows];
    let base = task.score(mixer.predict(&sample)?, y);
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

fn r2_score(predicted: &[f64], actual: &[f64]) -> f64 {
    let mean = actual.iter().sum::<f64>() / actual.len() as f64;
    let total: f64 = actual.iter().map(|value| (value - mean).powi(2)).sum();
    let residual: f64 = predicted
        .iter()
        .zip(actual)
        .map(|(guess, value)| (value - guess).powi(2))
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
fn balanced_accuracy(predicted: &[f64], actual: &[f64]) -> f64 {
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

fn model_text(columns: &[InputColumn], mixer_stage: &str) -> String {
    let names = |keep: &dyn Fn(&InputColumn) -> bool| -> Vec<&str> {
        columns
            .iter()
            .filter(|column| keep(column))
            .map(|column| column.name.as_str())
            .collect()
    };
    let excluded = |kind: ColumnKind| {
        move |column: &InputColumn| {
            column.kind == kind && matches!(column.encoder, Encoder::Excluded)
        }
    };
    let stages = [
        (
            "Numeric scaling (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::Scale(_))),
        ),
        (
            "One-hot (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::OneHot { .. })),
        ),
        (
            "Binary (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::Flag)),
        ),
        (
            "Date parts: year, month, day, day of week (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::CalendarParts { hour: false, .. })),
        ),
        (
            "Timestamp parts: year, month, day, day of week, hour (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::CalendarParts { hour: true, .. })),
        ),
        (
            "excluded (free text): ",
            "",
            names(&excluded(ColumnKind::Text)),
        ),
        (
            "excluded (unsupported type): ",
            "",
            names(&excluded(ColumnKind::Unsupported)),
        ),
    ];
    stages
        .into_iter()
        .filter(|(_, _, names)| !names.is_empty())
        .map(|(before, after, names)| format!("{before}{}{after}", names.join(", ")))
        .chain(std::iter::once(mixer_stage.to_owned()))
        .collect::<Vec<_>>()
        .join(" --> ")
}

/// SplitMix64: a tiny deterministic generator for the split and the permutations.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A Fisher–Yates shuffle of `0..len`.
fn shuffled(len: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix64(seed);
    let mut order: Vec<usize> = (0..len).collect();
    for i in (1..len).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
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

/// Arrow's `DataType` has serde only behind a feature; its text form parses back with `FromStr`.
mod data_type_text {
    use datafusion::arrow::datatypes::DataType;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        data_type: &DataType,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_str(data_type)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
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
        BooleanArray, Date32Array, Float64Array, Int64Array, StringArray, TimestampSecondArray,
    };

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
        let text: Vec<String> = (0..rows).map(|row| format!("free text {row}")).collect();
        let data = batch(vec![
            ("note", Arc::new(StringArray::from(text))),
            ("y", Arc::new(Float64Array::from(vec![2.5; rows]))),
        ]);
        let trained = train_quietly(&data, "y").expect("trains");
        assert_eq!(trained.description.mixer, "constant");
        assert_eq!(
            trained.description.model,
            "excluded (free text): note --> Constant (mean of the target)"
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
        // `stopped` says stop on its fifth look, inside the forest: training ends with STOPPED
        // without looking again, and no phase after fitting starts.
        let looks = std::cell::Cell::new(0);
        let mut phases = Vec::new();
        let stopped = train(
            &[regression_batch(300)],
            "y",
            &mut |phase, _| {
                phases.push(phase);
                true
            },
            &|| {
                looks.set(looks.get() + 1);
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
