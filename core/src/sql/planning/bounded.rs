//! Functions whose output can outgrow their input by a factor the caller chooses —
//! `repeat('x', 500000000)`, `lpad(s, 10^9)`, `range(0, 10^12)` — have their output sized from
//! their arguments before they run, against what the statement may still hold (`capacity`);
//! `levenshtein`, whose time grows with the product of its inputs' lengths, has that product
//! bounded. Each is DataFusion's own function wrapped (every trait method delegated, only
//! `invoke_with_args` checked first), registered under its name in place of the original.
//!
//! A literal too large to copy into every row of a batch is wrapped the same way where it
//! would be copied (a projection, a function's argument): `SELECT '<10 MB>' FROM big` would
//! otherwise make a 64k-row chunk's worth of copies in one allocation. See
//! [`BroadcastLiterals`]. The `||` operator, which is no function, is made one for the same
//! check ([`ConcatOperator`]): `s || s || s` of a 400 MB `s` made a 1.2 GB value unchecked.
//!
//! Every scalar function DataFusion registers is either checked here or listed as bounded by
//! its input (`tests::every_function_is_sized_or_bounded_by_its_input`), so a function added
//! by a DataFusion upgrade must be judged before it can be used.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{ExprSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, LogicalPlan, Operator, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::error::Error;

/// How a checked function's output (or work) is estimated from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Estimate {
    /// `repeat(text, n)`: each text `n` times.
    Repeat,
    /// `lpad`/`rpad(text, n [, fill])`: `n` characters of up to 4 bytes, or the text.
    Pad,
    /// `replace(text, from, to)`: `to` at every character boundary at worst.
    Replace,
    /// `regexp_replace(text, pattern, replacement [, flags])`: the replacement (whose group
    /// references copy matched text) at every position at worst.
    RegexpReplace,
    /// `regexp_match(text, pattern)`: every group of the pattern capturing the whole text.
    RegexpMatch,
    /// `concat(a, b, …)`: every argument in every row.
    Concat,
    /// `concat_ws(sep, a, b, …)`: every argument and a separator between each.
    ConcatWs,
    /// `array_repeat(value, n)`: `n` copies of the value.
    ArrayRepeat,
    /// `array_resize(list, n [, value])`: `n` elements.
    ArrayResize,
    /// `range`/`generate_series(start, stop [, step])` as list functions: their elements.
    Series,
    /// `levenshtein(a, b)`: time, the product of the lengths.
    Levenshtein,
    /// `array_replace[_n|_all](list, from, to [, n])`: `to` for every element at worst.
    ListReplace,
    /// `array_to_string(list, separator [, null_text])`: a separator (or the null text) per
    /// element.
    ListJoin,
    /// `to_char(value, format)`: the format in every row, each specifier a few times longer.
    Format,
    /// `arrow_cast(value, type)` and its kin: every row of the type asked for, whose fixed
    /// width (`FixedSizeBinary(n)`, `FixedSizeList(…, n)`) the caller chooses.
    Cast,
}

/// The functions checked here, by DataFusion's name.
const CHECKED: &[(&str, Estimate)] = &[
    ("repeat", Estimate::Repeat),
    ("lpad", Estimate::Pad),
    ("rpad", Estimate::Pad),
    ("replace", Estimate::Replace),
    ("regexp_replace", Estimate::RegexpReplace),
    ("regexp_match", Estimate::RegexpMatch),
    ("concat", Estimate::Concat),
    ("concat_ws", Estimate::ConcatWs),
    ("array_repeat", Estimate::ArrayRepeat),
    ("array_resize", Estimate::ArrayResize),
    ("range", Estimate::Series),
    ("generate_series", Estimate::Series),
    ("levenshtein", Estimate::Levenshtein),
    ("array_replace", Estimate::ListReplace),
    ("array_replace_n", Estimate::ListReplace),
    ("array_replace_all", Estimate::ListReplace),
    ("array_to_string", Estimate::ListJoin),
    ("to_char", Estimate::Format),
    ("arrow_cast", Estimate::Cast),
    ("arrow_try_cast", Estimate::Cast),
    ("cast_to_type", Estimate::Cast),
    ("try_cast_to_type", Estimate::Cast),
];

/// Character pairs `levenshtein` may compare in one batch: about a second of work.
const LEVENSHTEIN_PAIRS: u64 = 1_000_000_000;

/// Literals up to this size are copied into rows without a check.
const SMALL_LITERAL: usize = 16 * 1024;

/// The widest a row of a fixed-width type (`FixedSizeBinary(n)`, `FixedSizeList(t, n)`) may
/// be: even a NULL of such a type takes its width in every row.
const MAX_FIXED_ROW_BYTES: u64 = 1 << 20;

/// Fails for a type whose every value, NULL included, is wider than [`MAX_FIXED_ROW_BYTES`].
fn check_fixed_width(data_type: &DataType) -> DfResult<()> {
    let width = fixed_row_bytes(data_type);
    if width > MAX_FIXED_ROW_BYTES {
        return Err(Error::invalid(format!(
            "The type {data_type} takes {width} bytes in every row, more than {MAX_FIXED_ROW_BYTES}"
        ))
        .into());
    }
    Ok(())
}

/// The checked versions of the checked functions of `functions` (a session's registry), to
/// register in their place.
pub(crate) fn checked_functions(
    functions: &std::collections::HashMap<String, Arc<ScalarUDF>>,
    max_value: u64,
) -> Vec<Arc<ScalarUDF>> {
    CHECKED
        .iter()
        .filter_map(|(name, estimate)| {
            let inner = functions.get(*name)?;
            Some(Arc::new(ScalarUDF::new_from_impl(Checked {
                inner: Arc::clone(inner.inner()),
                estimate: *estimate,
                max_value,
            })))
        })
        .collect()
}

/// The optimizer rule that checks long literals and `||` (see [`BroadcastLiterals`]); one
/// value `||` makes may take at most `max_value` bytes.
pub(crate) fn broadcast_literals(max_value: u64) -> BroadcastLiterals {
    BroadcastLiterals {
        broadcast: Arc::new(ScalarUDF::new_from_impl(Broadcast::new())),
        concat: Arc::new(ScalarUDF::new_from_impl(Checked {
            inner: Arc::new(ConcatOperator::new()),
            estimate: Estimate::Concat,
            max_value,
        })),
    }
}

/// The rule, run after every optimizer pass and physical optimization, that ends planning
/// when its statement must stop (its deadline, an interrupt, a memory budget): planning a
/// huge statement is work like any other.
#[derive(Debug)]
pub(crate) struct StopCheck;

impl OptimizerRule for StopCheck {
    fn name(&self) -> &str {
        "mindlite_stop_check"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        crate::cancel::check()?;
        Ok(Transformed::no(plan))
    }
}

impl datafusion::physical_optimizer::PhysicalOptimizerRule for StopCheck {
    fn optimize(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _config: &datafusion::common::config::ConfigOptions,
    ) -> DfResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        crate::cancel::check()?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "mindlite_stop_check"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A DataFusion function whose output is sized before it runs.
#[derive(Debug)]
struct Checked {
    inner: Arc<dyn ScalarUDFImpl>,
    estimate: Estimate,
    /// The most bytes one value it makes may take (`query.max_value_mb`).
    max_value: u64,
}

impl PartialEq for Checked {
    fn eq(&self, other: &Self) -> bool {
        self.estimate == other.estimate && self.inner.name() == other.inner.name()
    }
}

impl Eq for Checked {}

impl Hash for Checked {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.estimate.hash(state);
    }
}

impl Checked {
    /// How messages name the function: `repeat()`, or the operator it stands for.
    fn label(&self) -> String {
        match self.inner.name() {
            CONCAT_OPERATOR => "||".to_string(),
            name => format!("{name}()"),
        }
    }
}

/// `value` for each of `rows` rows of a batch.
fn per_row<T: Clone>(value: T, rows: usize) -> Vec<T> {
    // bounded: the rows of a batch in memory
    vec![value; rows]
}

/// The `i`-th argument's byte length in each row (a scalar's in every row).
fn lengths(args: &ScalarFunctionArgs, i: usize) -> Vec<u64> {
    let rows = args.number_rows;
    let Some(arg) = args.args.get(i) else {
        return per_row(0, rows.min(1));
    };
    match arg {
        ColumnarValue::Scalar(value) => per_row(scalar_bytes(value), rows.max(1)),
        ColumnarValue::Array(array) => value_bytes(array),
    }
}

/// What a scalar value's data takes (strings and binaries by their bytes).
pub(crate) fn scalar_bytes(value: &ScalarValue) -> u64 {
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.len() as u64,
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b))
        | ScalarValue::FixedSizeBinary(_, Some(b)) => b.len() as u64,
        other => other.size() as u64,
    }
}

/// Each row's value bytes in `array` (strings and binaries by their length, others by their
/// width).
pub(crate) fn value_bytes(array: &ArrayRef) -> Vec<u64> {
    let length = |n: usize| -> Vec<u64> { (0..array.len()).map(|_| n as u64).collect() };
    match array.data_type() {
        DataType::Utf8 => array
            .as_string::<i32>()
            .iter()
            .map(|s| s.map_or(0, |s| s.len() as u64))
            .collect(),
        DataType::LargeUtf8 => array
            .as_string::<i64>()
            .iter()
            .map(|s| s.map_or(0, |s| s.len() as u64))
            .collect(),
        DataType::Utf8View => array
            .as_string_view()
            .iter()
            .map(|s| s.map_or(0, |s| s.len() as u64))
            .collect(),
        DataType::Binary => array
            .as_binary::<i32>()
            .iter()
            .map(|b| b.map_or(0, |b| b.len() as u64))
            .collect(),
        DataType::LargeBinary => array
            .as_binary::<i64>()
            .iter()
            .map(|b| b.map_or(0, |b| b.len() as u64))
            .collect(),
        DataType::BinaryView => array
            .as_binary_view()
            .iter()
            .map(|b| b.map_or(0, |b| b.len() as u64))
            .collect(),
        other => length(other.primitive_width().unwrap_or(16)),
    }
}

/// The elements of the `i`-th argument, a list, in each row.
fn elements(args: &ScalarFunctionArgs, i: usize) -> Vec<u64> {
    let rows = args.number_rows.max(1);
    let Some(arg) = args.args.get(i) else {
        return per_row(0, rows);
    };
    let Ok(array) = arg.to_array(1) else {
        return per_row(0, rows);
    };
    let counts: Vec<u64> = match array.data_type() {
        DataType::List(_) => array
            .as_list::<i32>()
            .offsets()
            .windows(2)
            .map(|w| (w[1] - w[0]).max(0) as u64)
            .collect(),
        DataType::LargeList(_) => array
            .as_list::<i64>()
            .offsets()
            .windows(2)
            .map(|w| (w[1] - w[0]).max(0) as u64)
            .collect(),
        DataType::FixedSizeList(_, n) => per_row((*n).max(0) as u64, array.len()),
        _ => per_row(0, array.len()),
    };
    match arg {
        ColumnarValue::Scalar(_) => per_row(counts.first().copied().unwrap_or(0), rows),
        ColumnarValue::Array(_) => counts,
    }
}

/// Bytes one row of `data_type` takes at least, whatever its values: what a NULL of it
/// allocates. Fixed widths multiply (a `FixedSizeList` of `FixedSizeBinary`).
pub(crate) fn fixed_row_bytes(data_type: &DataType) -> u64 {
    match data_type {
        DataType::FixedSizeBinary(n) => (*n).max(0) as u64,
        DataType::FixedSizeList(field, n) => {
            ((*n).max(0) as u64).saturating_mul(fixed_row_bytes(field.data_type()).max(1))
        }
        DataType::Struct(fields) => fields
            .iter()
            .map(|f| fixed_row_bytes(f.data_type()))
            .fold(0, u64::saturating_add),
        DataType::Dictionary(_, value) => fixed_row_bytes(value),
        other => other.primitive_width().unwrap_or(8) as u64,
    }
}

/// The `i`-th argument as whole numbers in each row (NULL and what is not a number: 0).
fn counts(args: &ScalarFunctionArgs, i: usize) -> Vec<i64> {
    let rows = args.number_rows.max(1);
    let Some(arg) = args.args.get(i) else {
        return per_row(0, rows);
    };
    let Ok(array) = arg.to_array(1) else {
        return per_row(0, rows);
    };
    let Ok(numbers) = datafusion::arrow::compute::cast(&array, &DataType::Int64) else {
        return per_row(0, rows);
    };
    let numbers = numbers.as_primitive::<Int64Type>();
    match arg {
        ColumnarValue::Scalar(_) => per_row(numbers.iter().next().flatten().unwrap_or(0), rows),
        ColumnarValue::Array(_) => numbers.iter().map(|n| n.unwrap_or(0)).collect(),
    }
}

/// The elements `range`/`generate_series(start, stop [, step])` makes in each row: integers
/// exactly; dates and timestamps through their nanoseconds and the step's shortest length.
fn series_elements(args: &ScalarFunctionArgs) -> Vec<u64> {
    let rows = args.number_rows.max(1);
    if args.args.len() == 1 {
        return counts(args, 0).iter().map(|n| n.unsigned_abs()).collect();
    }
    let numeric = args
        .arg_fields
        .first()
        .is_some_and(|f| f.data_type().is_integer());
    let (start, stop) = match numeric {
        true => (counts(args, 0), counts(args, 1)),
        false => (nanos(args, 0), nanos(args, 1)),
    };
    let step: Vec<i64> = match (args.args.get(2), numeric) {
        (None, true) => per_row(1, rows),
        // A date range without a step steps by a day.
        (None, false) => per_row(86_400_000_000_000, rows),
        (Some(_), true) => counts(args, 2),
        (Some(_), false) => step_nanos(args, 2),
    };
    (0..rows)
        .map(|r| {
            let span = start
                .get(r)
                .copied()
                .unwrap_or(0)
                .abs_diff(stop.get(r).copied().unwrap_or(0));
            let step = step.get(r).copied().unwrap_or(1).unsigned_abs().max(1);
            span / step + 1
        })
        .collect()
}

/// A date or timestamp argument as nanoseconds in each row.
fn nanos(args: &ScalarFunctionArgs, i: usize) -> Vec<i64> {
    let rows = args.number_rows.max(1);
    let converted = args.args.get(i).and_then(|arg| {
        let array = arg.to_array(rows).ok()?;
        let as_time = datafusion::arrow::compute::cast(
            &array,
            &DataType::Timestamp(TimeUnit::Nanosecond, None),
        )
        .ok()?;
        let numbers = datafusion::arrow::compute::cast(&as_time, &DataType::Int64).ok()?;
        Some(
            numbers
                .as_primitive::<Int64Type>()
                .iter()
                .map(|n| n.unwrap_or(0))
                .collect(),
        )
    });
    converted.unwrap_or_else(|| per_row(0, rows))
}

/// An interval step as its shortest length in nanoseconds (a month as 28 days).
fn step_nanos(args: &ScalarFunctionArgs, i: usize) -> Vec<i64> {
    let rows = args.number_rows.max(1);
    let converted = args.args.get(i).and_then(|arg| {
        let array = arg.to_array(rows).ok()?;
        let interval = datafusion::arrow::compute::cast(
            &array,
            &DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano),
        )
        .ok()?;
        let interval =
            interval.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        Some(
            interval
                .iter()
                .map(|v| {
                    v.map_or(1, |v| {
                        let day = 86_400_000_000_000i64;
                        i64::from(v.months)
                            .saturating_mul(28 * day)
                            .saturating_add(i64::from(v.days).saturating_mul(day))
                            .saturating_add(v.nanoseconds)
                    })
                })
                .collect(),
        )
    });
    converted.unwrap_or_else(|| per_row(1, rows))
}

/// Sums, row by row, what `f` makes of two per-row sizes.
type Zip<'a> = dyn Fn(&[u64], &[u64], &dyn Fn(u64, u64) -> u64) -> u64 + 'a;

impl Checked {
    /// Bytes the call would make (or, for `levenshtein`, pairs it would compare).
    /// The bytes the call's result may take, and the largest one value of it may (where a
    /// value's size is known row by row; 0 where it is not).
    fn estimate(&self, args: &ScalarFunctionArgs) -> (u64, u64) {
        let rows = args.number_rows.max(1);
        let sum = |values: Vec<u64>| values.into_iter().fold(0u64, u64::saturating_add);
        let largest = std::cell::Cell::new(0u64);
        let zip = |a: &[u64], b: &[u64], f: &dyn Fn(u64, u64) -> u64| {
            (0..rows).fold(0u64, |total, r| {
                let value = f(
                    a.get(r).copied().unwrap_or(0),
                    b.get(r).copied().unwrap_or(0),
                );
                largest.set(largest.get().max(value));
                total.saturating_add(value)
            })
        };
        let total = self.total(args, rows, &sum, &zip);
        (total, largest.get())
    }

    fn total(
        &self,
        args: &ScalarFunctionArgs,
        rows: usize,
        sum: &dyn Fn(Vec<u64>) -> u64,
        zip: &Zip<'_>,
    ) -> u64 {
        let positive = |n: &[i64]| n.iter().map(|n| (*n).max(0) as u64).collect::<Vec<_>>();
        match self.estimate {
            Estimate::Repeat => zip(&lengths(args, 0), &positive(&counts(args, 1)), &|len, n| {
                len.saturating_mul(n)
            }),
            Estimate::Pad => zip(&lengths(args, 0), &positive(&counts(args, 1)), &|len, n| {
                n.saturating_mul(4).max(len)
            }),
            Estimate::Replace => zip(&lengths(args, 0), &lengths(args, 2), &|len, to| {
                (len + 1).saturating_mul(to + 1)
            }),
            Estimate::RegexpReplace => zip(&lengths(args, 0), &lengths(args, 2), &|len, to| {
                (len + 1).saturating_mul(to + 1).saturating_mul(2)
            }),
            Estimate::RegexpMatch => zip(&lengths(args, 0), &lengths(args, 1), &|len, pattern| {
                // At most one group per byte of the pattern, each as long as the text.
                (len + 8).saturating_mul(pattern + 1)
            }),
            Estimate::Concat => {
                // Row by row, so that one value over the limit is refused as such.
                let mut each = per_row(0u64, rows);
                for i in 0..args.args.len() {
                    for (total, len) in each.iter_mut().zip(lengths(args, i)) {
                        *total = total.saturating_add(len);
                    }
                }
                zip(&each, &[], &|bytes, _| bytes)
            }
            Estimate::ConcatWs => {
                let separators = sum(lengths(args, 0)).saturating_mul(args.args.len() as u64);
                (1..args.args.len())
                    .map(|i| sum(lengths(args, i)))
                    .fold(separators, u64::saturating_add)
            }
            Estimate::ArrayRepeat => {
                zip(&lengths(args, 0), &positive(&counts(args, 1)), &|len, n| {
                    n.saturating_mul(len.max(8))
                })
            }
            Estimate::ArrayResize => sum(positive(&counts(args, 1))).saturating_mul(16),
            Estimate::Series => sum(series_elements(args)).saturating_mul(8),
            Estimate::Levenshtein => zip(&lengths(args, 0), &lengths(args, 1), &|a, b| {
                a.saturating_mul(b)
            }),
            Estimate::ListReplace => zip(&elements(args, 0), &lengths(args, 2), &|n, to| {
                n.saturating_mul(to.max(8))
            }),
            Estimate::ListJoin => {
                let separators: Vec<u64> = (0..rows)
                    .map(|r| {
                        let sep = lengths(args, 1).get(r).copied().unwrap_or(0);
                        let null = lengths(args, 2).get(r).copied().unwrap_or(0);
                        sep + null + 8
                    })
                    .collect();
                zip(&elements(args, 0), &separators, &|n, each| {
                    n.saturating_mul(each)
                })
            }
            Estimate::Format => sum(lengths(args, 1)).saturating_mul(8),
            Estimate::Cast => {
                fixed_row_bytes(args.return_field.data_type()).saturating_mul(rows as u64)
            }
        }
    }
}

#[deny(clippy::missing_trait_methods)]
impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        #[allow(deprecated)]
        self.inner.display_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        self.inner.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[allow(deprecated)]
        self.inner.is_nullable(args, schema)
    }

    fn is_strict(&self) -> bool {
        self.inner.is_strict()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (estimate, largest) = self.estimate(&args);
        if largest > self.max_value && self.estimate != Estimate::Levenshtein {
            // As MySQL bounds a function's result by max_allowed_packet: a value this large
            // would be copied whole by every step that handles it (constant folding copies
            // it several times while planning), each copy outside any check.
            return Err(Error::invalid(format!(
                "{} would make a value of {} MiB, over the limit on one value (query.max_value_mb = {})",
                self.label(),
                largest.div_ceil(1 << 20),
                self.max_value >> 20
            ))
            .into());
        }
        if self.estimate == Estimate::Levenshtein {
            if estimate > LEVENSHTEIN_PAIRS {
                return Err(Error::invalid(format!(
                    "levenshtein() would compare {estimate} pairs of characters in one batch, more than {LEVENSHTEIN_PAIRS}; compare shorter texts"
                ))
                .into());
            }
            return self.inner.invoke_with_args(args);
        }
        // Held while the function makes its result, which takes from it.
        let _held = crate::capacity::hold(estimate, &self.label())?;
        self.inner.invoke_with_args(args)
    }

    fn with_updated_config(
        &self,
        config: &datafusion::common::config::ConfigOptions,
    ) -> Option<ScalarUDF> {
        let updated = self.inner.with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(Checked {
            inner: Arc::clone(updated.inner()),
            estimate: self.estimate,
            max_value: self.max_value,
        }))
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> DfResult<datafusion::logical_expr::preimage::PreimageResult> {
        self.inner.preimage(args, lit_expr, info)
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> DfResult<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn struct_field_mapping(
        &self,
        literal_args: &[Option<ScalarValue>],
    ) -> Option<datafusion::logical_expr::StructFieldMapping> {
        self.inner.struct_field_mapping(literal_args)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> DfResult<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.strictly_order_preserving(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn placement(
        &self,
        args: &[datafusion::logical_expr::ExpressionPlacement],
    ) -> datafusion::logical_expr::ExpressionPlacement {
        self.inner.placement(args)
    }
}

/// The name of [`ConcatOperator`], which no statement can call by name (it is not a word).
const CONCAT_OPERATOR: &str = "mindlite:concat_operator";

/// `a || b` as a function, evaluated by DataFusion's own operator, so that [`Checked`] can
/// size its output first (as it does `concat`'s). [`BroadcastLiterals`] puts it in place of
/// the operator; it is named and typed as the operator is, so plans and results read the same.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ConcatOperator {
    signature: Signature,
}

impl ConcatOperator {
    fn new() -> ConcatOperator {
        ConcatOperator {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ConcatOperator {
    fn name(&self) -> &str {
        CONCAT_OPERATOR
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        match args {
            [left, right] => Ok(format!("{left} || {right}")),
            _ => Ok(CONCAT_OPERATOR.to_string()),
        }
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        match args {
            [left, right] => Ok(format!("{} || {}", left.schema_name(), right.schema_name())),
            _ => Ok(CONCAT_OPERATOR.to_string()),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
        match arg_types {
            [left, right] => {
                BinaryTypeCoercer::new(left, &Operator::StringConcat, right).get_result_type()
            }
            _ => Err(Error::internal("|| takes two operands").into()),
        }
    }

    /// NULL only where an operand may be, as the operator's (plans keep the types and
    /// nullability they had with the operator).
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|field| field.data_type().clone())
            .collect();
        let nullable = args.arg_fields.iter().any(|field| field.is_nullable());
        Ok(Arc::new(datafusion::arrow::datatypes::Field::new(
            self.name(),
            self.return_type(&types)?,
            nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::arrow::record_batch::RecordBatch;
        use datafusion::physical_expr::expressions::{BinaryExpr, Column};
        use datafusion::physical_expr::PhysicalExpr;
        // Two constants make a constant: one row, not one per row.
        let constant = args
            .args
            .iter()
            .all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if constant { 1 } else { args.number_rows };
        let columns = args
            .args
            .iter()
            .map(|arg| arg.to_array(rows))
            .collect::<DfResult<Vec<ArrayRef>>>()?;
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, column)| Field::new(format!("c{i}"), column.data_type().clone(), true))
            .collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let operator = BinaryExpr::new(
            Arc::new(Column::new("c0", 0)),
            Operator::StringConcat,
            Arc::new(Column::new("c1", 1)),
        );
        let value = operator.evaluate(&batch)?;
        if constant {
            let array = value.into_array(1)?;
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &array, 0,
            )?));
        }
        Ok(value)
    }
}

/// The name of [`Broadcast`], which no statement can call by name (it is not a word).
const BROADCAST: &str = "mindlite:checked_literal";

/// A large literal, checked before DataFusion copies it into every row of a batch: its value
/// (unchanged), once `size × rows` is known to fit. Volatile, so the planner never folds it
/// back into the bare literal.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Broadcast {
    signature: Signature,
}

impl Broadcast {
    fn new() -> Broadcast {
        Broadcast {
            signature: Signature::any(1, Volatility::Volatile),
        }
    }
}

impl ScalarUDFImpl for Broadcast {
    fn name(&self) -> &str {
        BROADCAST
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(value) = args.args.into_iter().next() else {
            return Ok(ColumnarValue::Scalar(ScalarValue::Null));
        };
        if let ColumnarValue::Scalar(scalar) = &value {
            let bytes = scalar_bytes(scalar).saturating_mul(args.number_rows as u64);
            crate::capacity::check(bytes, "Copying a long literal into every row")?;
        }
        Ok(value)
    }
}

/// The optimizer rule, run last, that wraps long literals in [`Broadcast`] wherever
/// DataFusion would copy them into each row; not where a kernel takes them as one value
/// (the right side of a comparison, a LIKE pattern, an IN list). It also puts the checked
/// [`ConcatOperator`] in place of every `||`, except in the filters a table scan hands to its
/// source (a datasource gets them as SQL; they are applied again above the scan).
#[derive(Debug)]
pub(crate) struct BroadcastLiterals {
    broadcast: Arc<ScalarUDF>,
    concat: Arc<ScalarUDF>,
}

impl BroadcastLiterals {
    /// Every `a || b` in `expr` as the checked [`ConcatOperator`].
    fn size_concatenations(&self, expr: Expr) -> DfResult<Transformed<Expr>> {
        use datafusion::logical_expr::BinaryExpr;
        expr.transform_up(|e| match e {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::StringConcat,
                right,
            }) => Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(Arc::clone(&self.concat), vec![*left, *right]),
            ))),
            other => Ok(Transformed::no(other)),
        })
    }

    fn wrap(&self, expr: Expr) -> DfResult<Transformed<Expr>> {
        use datafusion::logical_expr::{BinaryExpr, Like};
        expr.transform_down(|e| match e {
            // Compared as one value: left alone, and so are the literals beneath.
            Expr::BinaryExpr(BinaryExpr {
                op:
                    Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom,
                ..
            }) => Ok(Transformed::new(
                e,
                false,
                datafusion::common::tree_node::TreeNodeRecursion::Jump,
            )),
            Expr::Like(Like { .. }) | Expr::SimilarTo(_) | Expr::InList(_) => Ok(Transformed::new(
                e,
                false,
                datafusion::common::tree_node::TreeNodeRecursion::Jump,
            )),
            Expr::Cast(datafusion::logical_expr::Cast { ref field, .. })
            | Expr::TryCast(datafusion::logical_expr::TryCast { ref field, .. }) => {
                check_fixed_width(field.data_type())?;
                Ok(Transformed::no(e))
            }
            Expr::ScalarFunction(ScalarFunction { ref func, .. }) if func.name() == BROADCAST => {
                Ok(Transformed::new(
                    e,
                    false,
                    datafusion::common::tree_node::TreeNodeRecursion::Jump,
                ))
            }
            Expr::Literal(ref value, _) if scalar_bytes(value) as usize > SMALL_LITERAL => {
                Ok(Transformed::new(
                    Expr::ScalarFunction(ScalarFunction::new_udf(
                        Arc::clone(&self.broadcast),
                        vec![e],
                    )),
                    true,
                    datafusion::common::tree_node::TreeNodeRecursion::Jump,
                ))
            }
            other => Ok(Transformed::no(other)),
        })
    }
}

impl OptimizerRule for BroadcastLiterals {
    fn name(&self) -> &str {
        "mindlite_broadcast_literals"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        plan.transform_up(|node| {
            for field in node.schema().fields() {
                check_fixed_width(field.data_type())?;
            }
            // A literal row source (VALUES) is one copy already, not one per row.
            if matches!(node, LogicalPlan::Values(_)) {
                return Ok(Transformed::no(node));
            }
            // A scan's filters go to its source as they are.
            if matches!(node, LogicalPlan::TableScan(_)) {
                return node.map_expressions(|e| self.wrap(e));
            }
            node.map_expressions(|e| {
                self.size_concatenations(e)?
                    .transform_data(|e| self.wrap(e))
            })
        })
    }
}

/// Whether an expression holds a checked literal.
#[cfg(test)]
fn holds_checked_literal(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        if matches!(e, Expr::ScalarFunction(f) if f.func.name() == BROADCAST) {
            found = true;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Engine};

    fn engine() -> Engine {
        Engine::open_in_memory(Config::default()).unwrap()
    }

    fn error_of(engine: &Engine, sql: &str) -> String {
        match engine.sql_blocking(sql) {
            Ok(_) => panic!("{sql} ran"),
            Err(e) => e.message().to_string(),
        }
    }

    #[test]
    fn an_output_sized_by_an_argument_is_refused_before_it_is_made() {
        let engine = engine();
        for sql in [
            "SELECT length(repeat('x', 9000000000000))",
            "SELECT length(lpad('x', 9000000000000))",
            "SELECT cardinality(range(0, 9000000000000))",
            "SELECT cardinality(array_repeat(1, 9000000000000))",
        ] {
            let message = error_of(&engine, sql);
            assert!(
                (message.contains("needs") && message.contains("MiB"))
                    || message.contains("query.max_value_mb"),
                "{sql}: {message}"
            );
        }
        // One value over query.max_value_mb is refused, naming it; one under it is made.
        let mut config = Config::default();
        config.query.max_value_mb = Some(1);
        let small = Engine::open_in_memory(config).unwrap();
        let message = error_of(&small, "SELECT length(repeat('x', 2000000))");
        assert!(message.contains("query.max_value_mb = 1"), "{message}");
        assert!(small
            .sql_blocking("SELECT length(repeat('x', 1000000))")
            .is_ok());
        let rows = engine
            .sql_blocking("SELECT repeat('ab', 3) AS r, lpad('x', 3, '-') AS p, cardinality(range(0, 10)) AS n")
            .unwrap();
        assert_eq!(rows.num_rows(), 1);
    }

    #[test]
    fn the_concatenation_operator_is_sized_and_keeps_its_meaning() {
        let mut config = Config::default();
        config.query.max_value_mb = Some(1);
        let small = Engine::open_in_memory(config).unwrap();
        // Each operand is under the limit on one value; what `||` would make is not.
        for sql in [
            "SELECT length(s || s || s) FROM (SELECT repeat('x', 400000) AS s)",
            "SELECT length(s || s || s) FROM (SELECT repeat('x', 400000) AS s FROM generate_series(1, 3))",
            "SELECT count(*) FROM (SELECT repeat('x', 400000) AS s FROM generate_series(1, 3)) WHERE s || s || s = 'x'",
            "SELECT max(s || s || s) FROM (SELECT repeat('x', 400000) AS s FROM generate_series(1, 3))",
        ] {
            let message = error_of(&small, sql);
            assert!(
                message.contains("||") && message.contains("query.max_value_mb = 1"),
                "{sql}: {message}"
            );
        }
        // Within the limit it is the operator as before: NULL makes NULL, lists concatenate,
        // and the result keeps the operator's name.
        let rows = small
            .sql_blocking(
                "SELECT s || s AS twice, s || NULL IS NULL AS null_stays, \
                 cardinality(make_array(1, 2) || make_array(3)) AS n, 'a' || 1 \
                 FROM (SELECT repeat('x', 200000) AS s FROM generate_series(1, 2))",
            )
            .unwrap();
        assert_eq!(rows.num_rows(), 2);
        let schema = rows.batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            ["twice", "null_stays", "n", "Utf8(\"a\") || Int64(1)"]
        );
        let text = |column: usize| {
            datafusion::arrow::util::display::array_value_to_string(
                rows.batches[0].column(column),
                0,
            )
            .unwrap()
        };
        assert_eq!(text(0).len(), 400_000);
        // Over operands that are never NULL, grouped and counted (the plans' nullability
        // stays the operator's).
        let grouped = small
            .sql_blocking(
                "SELECT s, count(*) AS n, count(DISTINCT s || 'x') AS d FROM \
                 (SELECT 'k' || CAST(value % 2 AS VARCHAR) AS s FROM generate_series(1, 6)) \
                 GROUP BY s ORDER BY s",
            )
            .unwrap();
        let grouped = datafusion::arrow::util::pretty::pretty_format_batches(&grouped.batches)
            .unwrap()
            .to_string();
        assert!(grouped.contains("| k0 | 3 | 1 |"), "{grouped}");
        assert!(grouped.contains("| k1 | 3 | 1 |"), "{grouped}");
        assert_eq!(text(1), "true");
        assert_eq!(text(2), "3");
        assert_eq!(text(3), "a1");
    }

    #[test]
    fn a_type_too_wide_for_every_row_is_refused_when_planned() {
        let engine = engine();
        let message = error_of(
            &engine,
            "SELECT arrow_cast(NULL, 'FixedSizeBinary(2000000000)') FROM generate_series(1, 10)",
        );
        assert!(
            message.contains("bytes in every row") || message.contains("needs"),
            "{message}"
        );
    }

    #[test]
    fn a_quadratic_levenshtein_is_refused_and_a_small_one_runs() {
        let engine = engine();
        let message = error_of(
            &engine,
            "SELECT levenshtein(repeat('a', 100000), repeat('b', 100000))",
        );
        assert!(message.contains("levenshtein"), "{message}");
        engine
            .sql_blocking("SELECT levenshtein('kitten', 'sitting')")
            .unwrap();
    }

    #[test]
    fn long_literals_are_checked_where_they_are_copied_into_rows_only() {
        let long = "x".repeat(SMALL_LITERAL + 1);
        let rule = broadcast_literals(1 << 30);
        let projected = rule
            .wrap(datafusion::prelude::lit(long.clone()))
            .unwrap()
            .data;
        assert!(holds_checked_literal(&projected));
        let compared = rule
            .wrap(datafusion::prelude::col("a").eq(datafusion::prelude::lit(long.clone())))
            .unwrap()
            .data;
        assert!(!holds_checked_literal(&compared));
        let short = rule.wrap(datafusion::prelude::lit("x")).unwrap().data;
        assert!(!holds_checked_literal(&short));
    }

    /// Every scalar function the engine's sessions know is either sized here or listed as
    /// one whose output its input bounds: a function DataFusion adds must be judged first.
    #[test]
    fn every_function_is_sized_or_bounded_by_its_input() {
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build();
        for checked in checked_functions(state.scalar_functions(), 1 << 30) {
            datafusion::execution::FunctionRegistry::register_udf(&mut state, checked).unwrap();
        }
        let mut unjudged: Vec<&String> = state
            .scalar_functions()
            .iter()
            .filter(|(name, udf)| {
                let inner: &dyn std::any::Any = udf.inner().as_ref();
                inner.downcast_ref::<Checked>().is_none()
                    && !BOUNDED_BY_INPUT.contains(&name.as_str())
            })
            .map(|(name, _)| name)
            .collect();
        unjudged.sort();
        assert!(
            unjudged.is_empty(),
            "functions neither sized nor known to be bounded by their input: {unjudged:?}"
        );
    }

    /// Functions whose output is at most a small multiple of their arguments' sizes (or of a
    /// fixed size): a literal argument copied into rows is checked by [`Broadcast`].
    const BOUNDED_BY_INPUT: &[&str] = &[
        // Numbers and times: a fixed width per row.
        "abs",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "cbrt",
        "ceil",
        "cos",
        "cosh",
        "cot",
        "degrees",
        "exp",
        "factorial",
        "floor",
        "gcd",
        "isnan",
        "iszero",
        "lcm",
        "ln",
        "log",
        "log10",
        "log2",
        "nanvl",
        "pi",
        "pow",
        "power",
        "radians",
        "random",
        "rand",
        "round",
        "signum",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "trunc",
        "current_date",
        "current_time",
        "current_timestamp",
        "now",
        "today",
        "date_bin",
        "date_part",
        "datepart",
        "date_trunc",
        "datetrunc",
        "from_unixtime",
        "make_date",
        "make_time",
        "to_date",
        "to_time",
        "to_timestamp",
        "to_timestamp_micros",
        "to_timestamp_millis",
        "to_timestamp_nanos",
        "to_timestamp_seconds",
        "to_unixtime",
        "to_local_time",
        "file_row_index",
        "input_file_name",
        "version",
        "uuid",
        // Hashes: a fixed width.
        "digest",
        "md5",
        "sha224",
        "sha256",
        "sha384",
        "sha512",
        // Text: at most a few times the input (case mapping, hex, base64).
        "ascii",
        "bit_length",
        "btrim",
        "char_length",
        "character_length",
        "chr",
        "contains",
        "ends_with",
        "find_in_set",
        "initcap",
        "instr",
        "left",
        "length",
        "lower",
        "ltrim",
        "octet_length",
        "overlay",
        "position",
        "reverse",
        "right",
        "rtrim",
        "split_part",
        "starts_with",
        "strpos",
        "substr",
        "substr_index",
        "substring",
        "substring_index",
        "to_hex",
        "translate",
        "trim",
        "upper",
        "encode",
        "decode",
        "regexp_count",
        "regexp_instr",
        "regexp_like",
        "string_to_array",
        "string_to_list",
        // Choices among their arguments.
        "coalesce",
        "greatest",
        "least",
        "ifnull",
        "nullif",
        "nvl",
        "nvl2",
        // Structures of their arguments.
        "get_field",
        "named_struct",
        "struct",
        "row",
        "union_extract",
        "union_tag",
        "map",
        "map_entries",
        "map_extract",
        "map_keys",
        "map_values",
        "arrow_typeof",
        "arrow_field",
        "arrow_metadata",
        "with_metadata",
        "element_at",
        // Lists: their inputs' elements, or fewer, or one more.
        "array_add",
        "list_add",
        "array_any_value",
        "list_any_value",
        "array_append",
        "list_append",
        "array_avg",
        "list_avg",
        "array_cat",
        "list_cat",
        "array_compact",
        "list_compact",
        "array_concat",
        "list_concat",
        "array_contains",
        "list_contains",
        "array_dims",
        "list_dims",
        "array_distance",
        "list_distance",
        "array_distinct",
        "list_distinct",
        "array_element",
        "list_element",
        "array_empty",
        "list_empty",
        "empty",
        "array_except",
        "list_except",
        "array_extract",
        "list_extract",
        "array_has",
        "list_has",
        "array_has_all",
        "list_has_all",
        "array_has_any",
        "list_has_any",
        "array_indexof",
        "list_indexof",
        "array_intersect",
        "list_intersect",
        "array_length",
        "list_length",
        "array_max",
        "list_max",
        "array_min",
        "array_ndims",
        "list_ndims",
        "array_normalize",
        "list_normalize",
        "array_pop_back",
        "list_pop_back",
        "array_pop_front",
        "list_pop_front",
        "array_position",
        "list_position",
        "array_positions",
        "list_positions",
        "array_prepend",
        "list_prepend",
        "array_product",
        "list_product",
        "array_push_back",
        "list_push_back",
        "array_push_front",
        "list_push_front",
        "array_remove",
        "list_remove",
        "array_remove_all",
        "list_remove_all",
        "array_remove_n",
        "list_remove_n",
        "array_reverse",
        "list_reverse",
        "array_scale",
        "list_scale",
        "array_slice",
        "list_slice",
        "array_sort",
        "list_sort",
        "array_subtract",
        "list_subtract",
        "array_sum",
        "list_sum",
        "array_union",
        "list_union",
        "arrays_overlap",
        "arrays_zip",
        "list_zip",
        "cardinality",
        "cosine_distance",
        "dot_product",
        "inner_product",
        "flatten",
        "make_array",
        "make_list",
    ];
}
