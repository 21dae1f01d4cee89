//! Which filters of a stored-table scan an index answers: `column = literal`, `column IN
//! (literals)`, `column BETWEEN literal AND literal` and `column <, <=, >, >= literal` (either
//! side), on the first column of an index that holds entries. The table provider tells
//! DataFusion such filters are pushed down inexactly, so DataFusion still applies them to the
//! rows the index finds: an index only narrows which chunks and rows are read.

use std::ops::Bound;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use crate::catalog::constraints::Index;
use crate::catalog::indexes::{first_column, Probe};

/// An index lookup that answers a filter: the index's entries id, its first column's type,
/// and the values to look up.
#[derive(Debug, Clone)]
pub(crate) struct Lookup {
    /// The id the index's entries are kept under.
    pub(crate) entries: u64,
    /// The type of its first column.
    pub(crate) first: DataType,
    /// What to look up.
    pub(crate) probe: Probe,
}

/// The lookup that answers `filter` on a table with `schema` and `indexes`, if one does.
pub(crate) fn lookup_for(filter: &Expr, indexes: &[Index], schema: &Schema) -> Option<Lookup> {
    let (column, probe) = probe_of(filter)?;
    let at = schema.fields().iter().position(|f| f.name() == column)?;
    let index = indexes
        .iter()
        .find(|index| first_column(index, schema) == Some(at))?;
    Some(Lookup {
        entries: index.entries?,
        first: schema.field(at).data_type().clone(),
        probe,
    })
}

/// The lookup that answers the conjunction of `filters` best: the first filter an index
/// answers, narrowed by the others on the same index (`x >= 1 AND x <= 9`, which is also what
/// DataFusion makes of BETWEEN, is one range; a list of points beats any range).
pub(crate) fn best_lookup(filters: &[Expr], indexes: &[Index], schema: &Schema) -> Option<Lookup> {
    let mut lookups = filters
        .iter()
        .filter_map(|f| lookup_for(f, indexes, schema));
    let mut best = lookups.next()?;
    for other in lookups.filter(|l| l.entries == best.entries) {
        best.probe = match (best.probe, other.probe) {
            (Probe::Range(low, high), Probe::Range(other_low, other_high)) => Probe::Range(
                tighter(low, other_low, std::cmp::Ordering::Greater),
                tighter(high, other_high, std::cmp::Ordering::Less),
            ),
            (points @ Probe::Points(_), _) | (_, points @ Probe::Points(_)) => points,
        };
    }
    Some(best)
}

/// Of two bounds on one side of a range, the one that admits less: `wins` is how a value
/// must compare to the other to be the tighter one (Greater for lower bounds).
fn tighter(
    a: Bound<ScalarValue>,
    b: Bound<ScalarValue>,
    wins: std::cmp::Ordering,
) -> Bound<ScalarValue> {
    let value = |bound: &Bound<ScalarValue>| match bound {
        Bound::Included(v) | Bound::Excluded(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    match (value(&a), value(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) => match x.partial_cmp(&y) {
            Some(order) if order == wins => a,
            Some(std::cmp::Ordering::Equal) => match a {
                Bound::Excluded(_) => a,
                _ => b,
            },
            Some(_) => b,
            // Values of different types: either bound is right, the filter is applied again.
            None => a,
        },
    }
}

/// The column `filter` constrains and how, for the shapes an index answers.
fn probe_of(filter: &Expr) -> Option<(&str, Probe)> {
    match filter {
        // DataFusion turns short IN lists into ORs of equalities.
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => match (probe_of(left)?, probe_of(right)?) {
            ((a, Probe::Points(mut left)), (b, Probe::Points(right))) if a == b => {
                left.extend(right);
                Some((a, Probe::Points(left)))
            }
            _ => None,
        },
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, value, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) => (c, v, *op),
                (Expr::Literal(v, _), Expr::Column(c)) => (c, v, op.swap()?),
                _ => return None,
            };
            if value.is_null() {
                return None;
            }
            let value = value.clone();
            let probe = match op {
                Operator::Eq => Probe::Points(vec![value]),
                Operator::Lt => Probe::Range(Bound::Unbounded, Bound::Excluded(value)),
                Operator::LtEq => Probe::Range(Bound::Unbounded, Bound::Included(value)),
                Operator::Gt => Probe::Range(Bound::Excluded(value), Bound::Unbounded),
                Operator::GtEq => Probe::Range(Bound::Included(value), Bound::Unbounded),
                _ => return None,
            };
            Some((column.name.as_str(), probe))
        }
        Expr::InList(list) if !list.negated => {
            let Expr::Column(column) = list.expr.as_ref() else {
                return None;
            };
            let values = list
                .list
                .iter()
                .map(|item| match item {
                    Expr::Literal(v, _) => Some(v.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<ScalarValue>>>()?;
            Some((column.name.as_str(), Probe::Points(values)))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => match (expr.as_ref(), low.as_ref(), high.as_ref()) {
            (Expr::Column(c), Expr::Literal(low, _), Expr::Literal(high, _))
                if !low.is_null() && !high.is_null() =>
            {
                Some((
                    c.name.as_str(),
                    Probe::Range(Bound::Included(low.clone()), Bound::Included(high.clone())),
                ))
            }
            _ => None,
        },
        _ => None,
    }
}
