//! Conditions on a knowledge base's content kept as written until its scan reads them.
//!
//! To SQL, `content = 'a' AND content NOT LIKE 'b'` is just `content = 'a'`, and DataFusion's
//! optimizer simplifies it so; to a knowledge base it is a search for `a` that leaves out
//! what `b` finds (see `query`). An analyzer rule (`table::ContentConditions`; analyzer rules
//! run before the optimizer) puts each `=`, `!=`, `LIKE`, `NOT LIKE`, `IN` and `NOT IN` on a knowledge
//! base's `content` or `chunk_content` in a filter into a [`ContentCondition`] call, which
//! the optimizer cannot see into, so the scan receives the conditions as the user wrote them.
//! A call evaluated on rows (a condition left above a join, joined by OR with another table's
//! columns) is an error naming the condition: compared with the chunks' text it would answer
//! wrongly, and silently.
//!
//! Upstream, a table provider could instead ask to receive its filters before simplification;
//! DataFusion has no such hook.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue, TableReference};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::error::Error;

use super::search::{CHUNK_CONTENT, CONTENT, MAX_QUESTIONS};

/// The comparison a [`ContentCondition`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ContentOp {
    Eq,
    NotEq,
    Like,
    NotLike,
}

impl ContentOp {
    /// How SQL writes it.
    fn sql(self) -> &'static str {
        match self {
            ContentOp::Eq => "=",
            ContentOp::NotEq => "!=",
            ContentOp::Like => "LIKE",
            ContentOp::NotLike => "NOT LIKE",
        }
    }

    /// The function's name (its display in EXPLAIN).
    fn name(self) -> &'static str {
        match self {
            ContentOp::Eq => "kb_content_eq",
            ContentOp::NotEq => "kb_content_not_eq",
            ContentOp::Like => "kb_content_like",
            ContentOp::NotLike => "kb_content_not_like",
        }
    }
}

/// `content <op> 'value'` on a knowledge base, opaque to the optimizer: called with the
/// column and the value (shown in EXPLAIN; the condition holds its own copy, which it reads).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ContentCondition {
    pub(crate) op: ContentOp,
    pub(crate) value: String,
    signature: Signature,
}

impl ContentCondition {
    fn call(column: Expr, op: ContentOp, value: String) -> Expr {
        let condition = ContentCondition {
            op,
            signature: Signature::any(2, Volatility::Immutable),
            value,
        };
        let shown = Expr::Literal(ScalarValue::Utf8(Some(condition.value.clone())), None);
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::new_from_impl(condition)),
            vec![column, shown],
        ))
    }

    /// The comparison it stands for, on `column`.
    pub(crate) fn comparison(&self, column: Expr) -> Expr {
        let value = Expr::Literal(ScalarValue::Utf8(Some(self.value.clone())), None);
        match self.op {
            ContentOp::Eq => column.eq(value),
            ContentOp::NotEq => column.not_eq(value),
            ContentOp::Like => column.like(value),
            ContentOp::NotLike => column.not_like(value),
        }
    }

    /// The condition `expr` is a call of, and the column it is called on, if it is one.
    pub(crate) fn of(expr: &Expr) -> Option<(&ContentCondition, &Expr)> {
        match expr {
            Expr::ScalarFunction(f) => Some((
                f.func.inner().downcast_ref::<ContentCondition>()?,
                f.args.first()?,
            )),
            _ => None,
        }
    }
}

impl ScalarUDFImpl for ContentCondition {
    fn name(&self) -> &str {
        self.op.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // Reached only when the condition stayed above the knowledge base's scan: comparing
        // chunk text with the question would answer wrongly and silently.
        Err(Error::invalid(format!(
            "The search condition content {} '{}' cannot be answered by its knowledge base: \
             it is joined by OR with conditions on other tables, or compared after a join. \
             Search in a subquery, as in SELECT … FROM (SELECT * FROM kb WHERE content = '…') AS k JOIN …",
            self.op.sql(),
            self.value.chars().take(200).collect::<String>()
        ))
        .into())
    }
}

/// `predicate` with its conditions on those knowledge bases' content marked.
pub(crate) fn mark(predicate: Expr, relations: &[TableReference]) -> DfResult<Transformed<Expr>> {
    let is_content = |expr: &Expr| match expr {
        Expr::Column(Column {
            relation: Some(relation),
            name,
            ..
        }) => (name == CONTENT || name == CHUNK_CONTENT) && relations.contains(relation),
        _ => false,
    };
    let text = |expr: &Expr| match expr {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s.clone()),
        _ => None,
    };
    predicate.transform_down(|expr| {
        let marked = match &expr {
            Expr::BinaryExpr(binary) if matches!(binary.op, Operator::Eq | Operator::NotEq) => {
                let op = match binary.op {
                    Operator::Eq => ContentOp::Eq,
                    _ => ContentOp::NotEq,
                };
                match (binary.left.as_ref(), binary.right.as_ref()) {
                    (column, value) | (value, column) if is_content(column) => {
                        text(value).map(|value| ContentCondition::call(column.clone(), op, value))
                    }
                    _ => None,
                }
            }
            Expr::Like(like)
                if like.escape_char.is_none()
                    && !like.case_insensitive
                    && is_content(&like.expr) =>
            {
                let op = match like.negated {
                    false => ContentOp::Like,
                    true => ContentOp::NotLike,
                };
                text(&like.pattern)
                    .map(|value| ContentCondition::call(*like.expr.clone(), op, value))
            }
            Expr::InList(list) if is_content(&list.expr) => {
                // A longer list is refused when the scan reads it (see `query`); marked, it
                // would only be a deeper expression to walk.
                let values = list
                    .list
                    .iter()
                    .map(text)
                    .collect::<Option<Vec<_>>>()
                    .filter(|values| values.len() <= MAX_QUESTIONS);
                values.and_then(|values| {
                    let (op, join): (_, fn(Expr, Expr) -> Expr) = match list.negated {
                        false => (ContentOp::Eq, Expr::or),
                        true => (ContentOp::NotEq, Expr::and),
                    };
                    values
                        .into_iter()
                        .map(|value| ContentCondition::call(*list.expr.clone(), op, value))
                        .reduce(join)
                })
            }
            _ => None,
        };
        Ok(match marked {
            Some(marked) => Transformed::new(marked, true, TreeNodeRecursion::Jump),
            None => Transformed::no(expr),
        })
    })
}
