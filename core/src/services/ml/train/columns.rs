//! The training data read into Arrow arrays, each column's kind (numeric, categorical, text,
//! dates…) inferred, and the task the target makes (regression or classification).

use std::collections::{HashMap, HashSet};

use datafusion::arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray};
use datafusion::arrow::compute::{can_cast_types, cast, concat};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float64Type, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use super::metrics::*;

pub(super) const MIN_CATEGORICAL_LIMIT: usize = 20;
pub(super) const SECONDS_PER_DAY: i64 = 86_400;

/// The training rows, one concatenated array per column.
pub(super) struct Table {
    pub(super) names: Vec<String>,
    pub(super) columns: Vec<ArrayRef>,
}

impl Table {
    pub(super) fn from_batches(batches: &[RecordBatch]) -> Result<Table, String> {
        let first = batches
            .first()
            .ok_or("no training data: got no record batches")?;
        let schema = first.schema();
        // bounded: one per column of a batch already in memory
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
pub(super) fn find_column(names: &[&str], wanted: &str) -> Option<usize> {
    names.iter().position(|name| *name == wanted).or_else(|| {
        names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(wanted))
    })
}

/// How a column's cells are read out of Arrow.
#[derive(Clone, Copy, Debug)]
pub(super) enum Reading {
    Number,
    Flag,
    Label,
    Instant,
}

impl Reading {
    pub(super) fn for_type(data_type: &DataType) -> Option<Reading> {
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

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Reading::Number => "a number",
            Reading::Flag => "a boolean",
            Reading::Label => "text",
            Reading::Instant => "a date or timestamp",
        }
    }
}

/// A column's cells as read for training or prediction; NULL, NaN and infinities become `None`.
pub(super) enum Values {
    Numbers(Vec<Option<f64>>),
    Flags(Vec<Option<bool>>),
    Labels(Vec<Option<String>>),
    /// Seconds since the Unix epoch, UTC.
    Instants(Vec<Option<i64>>),
    /// Not read because the column is excluded.
    Unread,
}

impl Values {
    /// A column the batch being predicted lacks: `rows` NULLs, imputed as in training.
    pub(super) fn missing(reading: Reading, rows: usize) -> Values {
        fn nulls<T: Clone>(rows: usize) -> Vec<Option<T>> {
            // bounded: one per row of the batch being predicted, already in memory
            vec![None; rows]
        }
        match reading {
            Reading::Number => Values::Numbers(nulls(rows)),
            Reading::Flag => Values::Flags(nulls(rows)),
            Reading::Label => Values::Labels(nulls(rows)),
            Reading::Instant => Values::Instants(nulls(rows)),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Values::Numbers(cells) => cells.len(),
            Values::Flags(cells) => cells.len(),
            Values::Labels(cells) => cells.len(),
            Values::Instants(cells) => cells.len(),
            Values::Unread => 0,
        }
    }

    pub(super) fn is_present(&self, row: usize) -> bool {
        match self {
            Values::Numbers(cells) => cells[row].is_some(),
            Values::Flags(cells) => cells[row].is_some(),
            Values::Labels(cells) => cells[row].is_some(),
            Values::Instants(cells) => cells[row].is_some(),
            Values::Unread => false,
        }
    }

    pub(super) fn select(&self, rows: &[usize]) -> Values {
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

pub(super) fn read(array: &ArrayRef, reading: Reading, name: &str) -> Result<Values, String> {
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

pub(super) fn timestamp_seconds(array: &dyn Array, unit: &TimeUnit) -> Vec<Option<i64>> {
    match unit {
        TimeUnit::Second => epoch_seconds::<TimestampSecondType>(array, 1),
        TimeUnit::Millisecond => epoch_seconds::<TimestampMillisecondType>(array, 1_000),
        TimeUnit::Microsecond => epoch_seconds::<TimestampMicrosecondType>(array, 1_000_000),
        TimeUnit::Nanosecond => epoch_seconds::<TimestampNanosecondType>(array, 1_000_000_000),
    }
}

pub(super) fn epoch_seconds<T: ArrowPrimitiveType<Native = i64>>(
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
pub(super) enum ColumnKind {
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
    pub(super) fn infer(data_type: &DataType, values: &Values, rows: usize) -> ColumnKind {
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

    pub(super) fn as_str(self) -> &'static str {
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
pub(super) enum Task {
    Regression { integer: bool },
    Classification { classes: Vec<String> },
}

impl Task {
    pub(super) fn is_single_class(&self) -> bool {
        matches!(self, Task::Classification { classes } if classes.len() == 1)
    }

    pub(super) fn score_name(&self) -> &'static str {
        match self {
            Task::Regression { .. } => "r2_score",
            Task::Classification { .. } => "balanced_accuracy_score",
        }
    }

    /// Scores predictions against the truth; classes are compared as indices.
    pub(super) fn score(&self, predicted: Vec<f64>, actual: &[f64]) -> f64 {
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
pub(super) fn target_task(
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

pub(super) fn finish_regression(mut predicted: Vec<f64>, integer: bool) -> Vec<f64> {
    if integer {
        predicted
            .iter_mut()
            .for_each(|value| *value = value.round());
    }
    predicted
}

pub(super) fn class_label(classes: &[String], class: f64) -> &str {
    let index = (class.max(0.0) as usize).min(classes.len().saturating_sub(1));
    classes.get(index).map_or("", String::as_str)
}
