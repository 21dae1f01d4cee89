//! Expression rewrites run before type coercion, where DataFusion's behaviour differs from what
//! users of MindsDB, DuckDB and SQLite expect.
//!
//! MindsDB compares booleans with text (`SELECT * FROM models WHERE ACTIVE = '1'`, what its SDK
//! sends). DataFusion has no coercion between Boolean and Utf8, so [`BooleanText`] turns a
//! text literal compared with a boolean into a boolean literal.
//!
//! Division and remainder by zero are NULL in DuckDB and SQLite, where DataFusion fails the
//! whole query; [`DivisionByZero`] makes the divisor NULL when it is zero.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, ExprSchema, Result, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator};

/// `boolean = 'text'` (and `<>`, either way round) → `boolean = <bool>`.
#[derive(Debug)]
pub(crate) struct BooleanText;

impl FunctionRewrite for BooleanText {
    fn name(&self) -> &str {
        "mindsdb_boolean_text"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _: &ConfigOptions,
    ) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
            return Ok(Transformed::no(expr));
        };
        if !matches!(op, Operator::Eq | Operator::NotEq) {
            return Ok(Transformed::no(expr));
        }
        let is_boolean =
            |e: &Expr| matches!(e.get_type(schema as &dyn ExprSchema), Ok(DataType::Boolean));
        let (left, right) = match (truth(left), truth(right)) {
            (None, Some(value)) if is_boolean(left) => (left.as_ref().clone(), boolean(value)),
            (Some(value), None) if is_boolean(right) => (boolean(value), right.as_ref().clone()),
            _ => return Ok(Transformed::no(expr)),
        };
        Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(left),
            *op,
            Box::new(right),
        ))))
    }
}

/// `a / b` and `a % b` → `a / nullif(b, 0)`: NULL where `b` is zero.
#[derive(Debug)]
pub(crate) struct DivisionByZero;

impl FunctionRewrite for DivisionByZero {
    fn name(&self) -> &str {
        "mindlite_division_by_zero_is_null"
    }

    fn rewrite(&self, expr: Expr, _: &DFSchema, _: &ConfigOptions) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
            return Ok(Transformed::no(expr));
        };
        let guarded = |e: &Expr| match e {
            // A literal divisor other than zero needs no guard (and keeps folding).
            Expr::Literal(value, _) => !value.is_null() && !is_zero(value),
            Expr::ScalarFunction(f) => f.func.name() == "nullif",
            _ => false,
        };
        if !matches!(op, Operator::Divide | Operator::Modulo) || guarded(&right) {
            return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                left,
                op,
                right,
            })));
        }
        let right = datafusion::functions::core::expr_fn::nullif(
            *right,
            Expr::Literal(ScalarValue::Int64(Some(0)), None),
        );
        Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
            left,
            op,
            Box::new(right),
        ))))
    }
}

/// Whether a numeric literal is zero.
fn is_zero(value: &ScalarValue) -> bool {
    value
        .to_string()
        .parse::<f64>()
        .is_ok_and(|number| number == 0.0)
}

fn boolean(value: bool) -> Expr {
    Expr::Literal(ScalarValue::Boolean(Some(value)), None)
}

/// The truth value a text literal spells, as MySQL and Python read them.
fn truth(expr: &Expr) -> Option<bool> {
    let Expr::Literal(
        ScalarValue::Utf8(Some(text))
        | ScalarValue::Utf8View(Some(text))
        | ScalarValue::LargeUtf8(Some(text)),
        _,
    ) = expr
    else {
        return None;
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "t" | "yes" | "y" | "on" => Some(true),
        "0" | "false" | "f" | "no" | "n" | "off" => Some(false),
        _ => None,
    }
}
