//! Subqueries DataFusion's own rules leave in a plan, turned into joins: a correlated scalar
//! subquery whose correlation is any comparison (`(SELECT count(*) FROM t AS x WHERE x.c >
//! t.c)`), and EXISTS or IN in a select list or in a condition DataFusion cannot split. Without
//! this such plans fail ("Physical plan does not support logical expression ScalarSubquery").
//!
//! The method is the "domain" unnesting of Neumann and Kemper (Unnesting Arbitrary Queries,
//! BTW 2015) for a subquery of the shape `[Projection] [Aggregate] [Filter] R`, where only the
//! Filter refers to the outer query and R does not:
//!
//! ```text
//!  D = SELECT DISTINCT <outer columns the subquery uses> FROM outer
//!  Q = SELECT D.*, <value> FROM D LEFT JOIN (SELECT *, true AS mark FROM R) ON <filter over D>
//!      GROUP BY D.*
//!  outer LEFT JOIN Q ON outer columns IS NOT DISTINCT FROM D's
//! ```
//!
//! Each outer row meets exactly one row of Q. Aggregates see only joined rows (their arguments
//! become `CASE WHEN mark IS NOT NULL THEN arg END`), so `count(*)` of no rows is 0 and `sum` of
//! no rows NULL, as for the subquery itself. EXISTS is `count(mark) > 0`; `x IN (SELECT y …)`
//! keeps SQL's three values: true if some `y = x`, else NULL if some `y` or `x` is NULL, else
//! false. The outer query is read twice (for D and for the join); the subquery once per
//! distinct correlation value, not once per row.
//!
//! Upstream: DataFusion's `ScalarSubqueryToJoin` decorrelates only equality correlations below
//! an aggregate; this general form (or its planned successor, the dependent-join rewrite) would
//! fit there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, NullEquality, Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, Exists, InSubquery};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    lit, when, Aggregate, Expr, Filter, JoinType, LogicalPlan, LogicalPlanBuilder, Projection,
    Subquery,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

/// The optimizer rule (runs after DataFusion's own subquery rules).
#[derive(Debug, Default)]
pub(crate) struct UnnestSubqueries;

/// Numbers the columns and aliases each rewrite adds, so two never clash.
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl OptimizerRule for UnnestSubqueries {
    fn name(&self) -> &str {
        "mindlite_unnest_subqueries"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        match plan {
            LogicalPlan::Projection(projection) => rewrite_projection(projection),
            LogicalPlan::Filter(filter) => rewrite_filter(filter),
            other => Ok(Transformed::no(other)),
        }
    }
}

/// A subquery expression this rule can turn into a join.
enum Kind {
    Scalar,
    Exists { negated: bool },
    In { expr: Expr, negated: bool },
}

/// The subquery expressions in `exprs` (outermost first, each once).
fn subqueries(exprs: &[&Expr]) -> Vec<Expr> {
    let mut found = Vec::new();
    for expr in exprs {
        let _ = expr.apply(|e| {
            if matches!(
                e,
                Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
            ) {
                if !found.contains(e) {
                    found.push(e.clone());
                }
                return Ok(TreeNodeRecursion::Jump);
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    found
}

fn kind_of(expr: &Expr) -> Option<(&Subquery, Kind)> {
    match expr {
        Expr::ScalarSubquery(subquery) => Some((subquery, Kind::Scalar)),
        Expr::Exists(Exists { subquery, negated }) => {
            Some((subquery, Kind::Exists { negated: *negated }))
        }
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) => Some((
            subquery,
            Kind::In {
                expr: expr.as_ref().clone(),
                negated: *negated,
            },
        )),
        _ => None,
    }
}

/// Per unnested subquery expression, the expression that replaces it.
type Replacements = Vec<(Expr, Expr)>;

/// Joins `input` with every subquery of `exprs` that can be unnested; returns the new input
/// and the replacements.
fn unnest_all(input: &LogicalPlan, exprs: &[&Expr]) -> Result<Option<(LogicalPlan, Replacements)>> {
    let mut plan = input.clone();
    let mut replaced = Vec::new();
    for found in subqueries(exprs) {
        let Some((subquery, kind)) = kind_of(&found) else {
            continue;
        };
        if let Some((joined, value)) = unnest(&plan, subquery, kind)? {
            plan = joined;
            replaced.push((found, value));
        }
    }
    Ok((!replaced.is_empty()).then_some((plan, replaced)))
}

/// `expr` with each unnested subquery replaced.
fn replace(expr: Expr, replaced: &[(Expr, Expr)]) -> Result<Expr> {
    expr.transform_down(|e| match replaced.iter().find(|(old, _)| *old == e) {
        Some((_, new)) => Ok(Transformed::new(new.clone(), true, TreeNodeRecursion::Jump)),
        None => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

fn rewrite_projection(projection: Projection) -> Result<Transformed<LogicalPlan>> {
    let exprs: Vec<&Expr> = projection.expr.iter().collect();
    let Some((input, replaced)) = unnest_all(&projection.input, &exprs)? else {
        return Ok(Transformed::no(LogicalPlan::Projection(projection)));
    };
    // Names stay as they were, so the plan above still finds its columns.
    let names = NamePreserver::new_for_projection();
    let exprs = projection
        .expr
        .into_iter()
        .map(|e| {
            let saved = names.save(&e);
            Ok(saved.restore(replace(e, &replaced)?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(exprs, Arc::new(input))?,
    )))
}

fn rewrite_filter(filter: Filter) -> Result<Transformed<LogicalPlan>> {
    let Some((input, replaced)) = unnest_all(&filter.input, &[&filter.predicate])? else {
        return Ok(Transformed::no(LogicalPlan::Filter(filter)));
    };
    let columns: Vec<Expr> = filter
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let plan = LogicalPlanBuilder::from(input)
        .filter(replace(filter.predicate, &replaced)?)?
        .project(columns)?
        .build()?;
    Ok(Transformed::yes(plan))
}

/// The parts of a subquery of the shape this rule unnests.
struct Shape {
    /// The Projection's one expression (none for EXISTS without one).
    value: Option<Expr>,
    /// The Aggregate without GROUP BY, if any.
    aggregate: Option<Aggregate>,
    /// The correlated conditions (with outer references) and the Filter's others.
    correlated: Vec<Expr>,
    /// The rows filtered: R with the uncorrelated conditions.
    rows: LogicalPlan,
}

fn shape(plan: &LogicalPlan) -> Result<Option<Shape>> {
    let mut plan = plan;
    let mut value = None;
    if let LogicalPlan::Projection(projection) = plan {
        if projection.expr.len() != 1 || projection.expr[0].contains_outer() {
            return Ok(None);
        }
        value = Some(projection.expr[0].clone());
        plan = &projection.input;
    }
    if value.is_none() && plan.schema().fields().len() == 1 {
        // The optimizer may have removed a projection of the one column.
        value = Some(Expr::Column(Column::from(plan.schema().qualified_field(0))));
    }
    let mut aggregate = None;
    if let LogicalPlan::Aggregate(agg) = plan {
        if !agg.group_expr.is_empty() || agg.aggr_expr.iter().any(Expr::contains_outer) {
            return Ok(None);
        }
        aggregate = Some(agg.clone());
        plan = &agg.input;
    }
    // DataFusion pushes the filter below a table's alias (`FROM t AS x`): aliases between
    // are peeled off here and put back over the uncorrelated rows.
    let mut aliases = Vec::new();
    while let LogicalPlan::SubqueryAlias(alias) = plan {
        aliases.push(alias);
        plan = &alias.input;
    }
    let (mut correlated, mut rows) = match plan {
        LogicalPlan::Filter(filter) => {
            let (outer, inner): (Vec<&Expr>, Vec<&Expr>) = split_conjunction(&filter.predicate)
                .into_iter()
                .partition(|e| e.contains_outer());
            let mut rows = LogicalPlanBuilder::from(filter.input.as_ref().clone());
            if let Some(inner) = inner.into_iter().cloned().reduce(Expr::and) {
                rows = rows.filter(inner)?;
            }
            (
                outer.into_iter().cloned().collect::<Vec<_>>(),
                rows.build()?,
            )
        }
        other => (Vec::new(), other.clone()),
    };
    for alias in aliases.into_iter().rev() {
        // The correlated conditions name the columns below the alias: name them through it.
        let below = Arc::clone(rows.schema());
        rows = LogicalPlanBuilder::from(rows)
            .alias(alias.alias.clone())?
            .build()?;
        let above = Arc::clone(rows.schema());
        correlated = correlated
            .into_iter()
            .map(|e| {
                e.transform(|e| match e {
                    Expr::Column(column) => match below.index_of_column(&column) {
                        Ok(i) => Ok(Transformed::yes(Expr::Column(Column::from(
                            above.qualified_field(i),
                        )))),
                        Err(_) => Ok(Transformed::no(Expr::Column(column))),
                    },
                    other => Ok(Transformed::no(other)),
                })
                .map(|t| t.data)
            })
            .collect::<Result<_>>()?;
    }
    // Outer references anywhere else (deeper, or nested subqueries) are not this shape.
    let mut deeper = false;
    rows.apply_with_subqueries(|node| {
        if node.expressions().iter().any(Expr::contains_outer) {
            deeper = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if deeper {
        return Ok(None);
    }
    Ok(Some(Shape {
        value,
        aggregate,
        correlated,
        rows,
    }))
}

/// The outer columns `exprs` refer to.
fn outer_columns(exprs: &[Expr]) -> Vec<Column> {
    let mut columns = Vec::new();
    for expr in exprs {
        let _ = expr.apply(|e| {
            if let Expr::OuterReferenceColumn(_, column) = e {
                if !columns.contains(column) {
                    columns.push(column.clone());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    columns
}

/// `input` joined with the unnested `subquery`, and the expression for the subquery's value
/// over the result; `None` when the subquery is not of a shape handled here.
fn unnest(
    input: &LogicalPlan,
    subquery: &Subquery,
    kind: Kind,
) -> Result<Option<(LogicalPlan, Expr)>> {
    let Some(shape) = shape(&subquery.subquery)? else {
        return Ok(None);
    };
    match (&kind, &shape.aggregate, &shape.value) {
        // A scalar subquery without an aggregate may give several rows per outer row.
        (Kind::Scalar, None, _) | (Kind::Scalar, _, None) | (Kind::In { .. }, _, None) => {
            return Ok(None)
        }
        (Kind::Exists { .. } | Kind::In { .. }, Some(_), _) => return Ok(None),
        _ => {}
    }
    let outer = outer_columns(&shape.correlated);
    if outer.iter().any(|c| !input.schema().has_column(c)) {
        // A reference to a query further out: not unnested here.
        return Ok(None);
    }
    if outer.is_empty() && matches!(kind, Kind::Scalar) {
        // Uncorrelated: DataFusion runs it (this rule is not needed).
        return Ok(None);
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let domain_name = |i: usize| format!("__mindlite_d{n}_{i}");
    let mark = format!("__mindlite_mark{n}");
    let value_name = format!("__mindlite_v{n}");
    let q_alias = format!("__mindlite_sq{n}");

    // The outer input, with the IN's left side as a column of its own.
    let (outer_plan, probe) = match &kind {
        Kind::In { expr, .. } => {
            let probe = format!("__mindlite_x{n}");
            let mut columns: Vec<Expr> = input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            columns.push(expr.clone().alias(probe.as_str()));
            let plan = LogicalPlanBuilder::from(input.clone())
                .project(columns)?
                .build()?;
            (plan, Some(Column::from_name(probe)))
        }
        _ => (input.clone(), None),
    };
    let mut keys: Vec<Column> = outer.clone();
    keys.extend(probe.clone());
    // D: the distinct correlation values (one constant row when there are none).
    let mut domain_exprs: Vec<Expr> = keys
        .iter()
        .enumerate()
        .map(|(i, c)| Expr::Column(c.clone()).alias(domain_name(i)))
        .collect();
    if domain_exprs.is_empty() {
        domain_exprs.push(lit(true).alias(domain_name(0)));
    }
    let domain_columns: Vec<Expr> = (0..domain_exprs.len())
        .map(|i| Expr::Column(Column::from_name(domain_name(i))))
        .collect();
    let domain = LogicalPlanBuilder::from(outer_plan.clone())
        .project(domain_exprs)?
        .distinct()?
        .build()?;
    // R with its mark, joined to D on the correlated conditions.
    let mut marked: Vec<Expr> = shape
        .rows
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    marked.push(lit(true).alias(mark.as_str()));
    let rows = LogicalPlanBuilder::from(shape.rows.clone())
        .project(marked)?
        .build()?;
    let on: Vec<Expr> = shape
        .correlated
        .iter()
        .map(|e| {
            e.clone()
                .transform(|e| match e {
                    Expr::OuterReferenceColumn(_, column) => {
                        let i = outer.iter().position(|c| *c == column).unwrap_or(0);
                        Ok(Transformed::yes(Expr::Column(Column::from_name(
                            domain_name(i),
                        ))))
                    }
                    other => Ok(Transformed::no(other)),
                })
                .map(|t| t.data)
        })
        .collect::<Result<_>>()?;
    let on = if on.is_empty() { vec![lit(true)] } else { on };
    let joined = LogicalPlanBuilder::from(domain)
        .join_on(rows, JoinType::Left, on)?
        .build()?;
    let matched = Expr::Column(Column::from_name(mark.as_str())).is_not_null();
    let count_of = |condition: Expr| -> Result<Expr> {
        Ok(datafusion::functions_aggregate::count::count(
            when(condition, lit(1i64)).end()?,
        ))
    };
    // The subquery's value per domain row.
    let (aggregates, value): (Vec<Expr>, Expr) = match (&kind, shape.aggregate) {
        (Kind::Scalar, Some(aggregate)) => {
            let fields = aggregate
                .schema
                .fields()
                .iter()
                .skip(aggregate.group_expr.len());
            let aggregates = aggregate
                .aggr_expr
                .iter()
                .zip(fields)
                .map(|(e, field)| Ok(only_matched(e.clone(), &matched)?.alias(field.name())))
                .collect::<Result<Vec<_>>>()?;
            (aggregates, shape.value.expect("checked above").unalias())
        }
        (Kind::Exists { negated }, _) => {
            let count = count_of(matched.clone())?.alias(format!("__mindlite_c{n}"));
            let found = Expr::Column(Column::from_name(format!("__mindlite_c{n}")));
            let value = if *negated {
                found.eq(lit(0i64))
            } else {
                found.gt(lit(0i64))
            };
            (vec![count], value)
        }
        (Kind::In { negated, .. }, _) => {
            let y = shape.value.expect("checked above").unalias();
            let x = domain_columns
                .last()
                .expect("the probe is a domain column")
                .clone();
            let hits = count_of(matched.clone().and(y.clone().eq(x.clone())))?
                .alias(format!("__mindlite_h{n}"));
            let nulls = count_of(matched.clone().and(y.is_null().or(x.is_null())))?
                .alias(format!("__mindlite_u{n}"));
            let hit = Expr::Column(Column::from_name(format!("__mindlite_h{n}"))).gt(lit(0i64));
            let unknown = Expr::Column(Column::from_name(format!("__mindlite_u{n}"))).gt(lit(0i64));
            let value = when(hit, lit(true))
                .when(unknown, lit(ScalarValue::Boolean(None)))
                .otherwise(lit(false))?;
            let value = if *negated { !value } else { value };
            (vec![hits, nulls], value)
        }
        (Kind::Scalar, None) => return Ok(None),
    };
    let mut q_columns = domain_columns.clone();
    q_columns.push(value.alias(value_name.as_str()));
    let q = LogicalPlanBuilder::from(joined)
        .aggregate(domain_columns.clone(), aggregates)?
        .project(q_columns)?
        .alias(q_alias.as_str())?
        .build()?;
    // Every outer row meets its one row of Q (NULLs equal, as DISTINCT grouped them).
    let right_keys: Vec<Column> = (0..keys.len())
        .map(|i| Column::new(Some(q_alias.as_str()), domain_name(i)))
        .collect();
    let plan = if keys.is_empty() {
        LogicalPlanBuilder::from(outer_plan)
            .cross_join(q)?
            .build()?
    } else {
        LogicalPlanBuilder::from(outer_plan)
            .join_detailed(
                q,
                JoinType::Left,
                (keys, right_keys),
                None,
                NullEquality::NullEqualsNull,
            )?
            .build()?
    };
    Ok(Some((
        plan,
        Expr::Column(Column::new(Some(q_alias.as_str()), value_name)),
    )))
}

/// An aggregate call that sees only rows where `matched` holds: each argument becomes `CASE
/// WHEN matched THEN arg END` (aggregates skip NULLs), and `count(*)` counts matched rows.
fn only_matched(expr: Expr, matched: &Expr) -> Result<Expr> {
    expr.transform_down(|e| match e {
        Expr::AggregateFunction(mut call) => {
            call.params.args = call
                .params
                .args
                .into_iter()
                .map(|arg| when(matched.clone(), arg).end())
                .collect::<Result<_>>()?;
            Ok(Transformed::new(
                Expr::AggregateFunction(AggregateFunction { ..call }),
                true,
                TreeNodeRecursion::Jump,
            ))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}
