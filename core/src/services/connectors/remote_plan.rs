//! Whole sub-plans sent to a PostgreSQL or MySQL datasource as one statement. When a part of a
//! query reads only tables of one server (same host, port, database, role, password and schema),
//! an optimizer rule ([`PushDownPlans`]) replaces that part with a [`RemoteQuery`] node
//! holding the SQL that computes it there — inner, outer, semi (EXISTS) and anti joins,
//! aggregates with GROUP BY and HAVING, ORDER BY with LIMIT/OFFSET, DISTINCT, UNION, window
//! functions and the joins DataFusion makes of subqueries — and the node's operator reads
//! only the rows that part returns.
//!
//! **The SQL** is written by [`Writer`]: one SELECT per plan node over its inputs as derived
//! tables, every column named by position, so nothing depends on names (DataFusion's, the
//! user's, or two tables' equal ones). DataFusion's unparser writes the expressions; its
//! whole-plan writer was tried first and is not used: the query generator of
//! `core/tests/federation.rs` and an attack found it writing a LEFT JOIN's kept-side filter
//! into the ON clause, an aggregate's values before its keys, a sort's fetch (LIMIT + OFFSET)
//! as the LIMIT, semi joins without select lists, and names of derived tables it made itself
//! that the columns above did not follow — each a silently wrong answer or an error, and
//! worth reporting upstream. Text literals become placeholders whose values are bound, never
//! spliced into the text (MySQL's reads are not prepared: there they are hexadecimal).
//! `dialect` holds the unparser's dialects.
//!
//! A part is sent only when PostgreSQL computes exactly what DataFusion would, so what comes
//! back needs no second look; everything else stays local, above the part that was sent:
//! - **Functions and operators** from a short list whose PostgreSQL meaning is DataFusion's
//!   (comparisons, AND/OR/NOT, `IS [NOT] NULL`, IN, BETWEEN, LIKE, CASE, `+ - *` on numbers,
//!   `/` on integers and doubles, `%` on integers, `coalesce`, `nullif`, `abs`,
//!   `character_length`, `substr` from position 1 on, the year, month or day of a date or
//!   timestamp; `count`, `sum`, `min`, `max`, `avg` and `row_number`, `rank`, `dense_rank`).
//!   Our own functions (models, knowledge-base conditions), and every other, stay local.
//! - **Text in byte order**: a remote collation may sort differently from DataFusion's byte
//!   order, so ORDER BY, `<`, BETWEEN and window orderings over text are written under
//!   `COLLATE "C"` (`dialect::exact_text`); `min`/`max` over text stay local. Equality, GROUP
//!   BY and joins on text are sent as they are, except on columns under a non-deterministic
//!   collation (`Kind::LooseText`: `'a' = 'A'` there), which stay local.
//! - **Columns compared alike** only (`Kind::compares_alike`): a table with `char(n)`, `json`,
//!   `uuid`, unbounded `numeric` or types read as text is read by its own scan, as before.
//! - **Casts** that cannot round differently: widening numbers, dates to timestamps, numbers
//!   to text.
//! - **`NOT IN`**: its anti join treats a NULL on the right as "no rows", which NOT EXISTS
//!   does not; it stays local.
//! - **Results** of types read back exactly: each output column is cast in the statement to
//!   the PostgreSQL type of the Arrow type DataFusion planned for it (so `sum(bigint)`, which
//!   PostgreSQL makes `numeric`, comes back `bigint` as DataFusion computes it).
//!
//! MySQL computes more differently (see [`engine_sendable`]): no division, `%`, `avg`, FILTER,
//! FULL joins, windows or unsigned columns go there; its collations call `'a'`, `'A'` and
//! `'a '` equal, so every comparison of text there — conditions, LIKE, IN, CASE, join keys,
//! ORDER BY — compares the text's UTF-8 bytes, and a text GROUP BY key is grouped by its
//! bytes too (`dialect`); DISTINCT rows of text, `count(DISTINCT text)`, `nullif` of text and
//! LIKE patterns with `_` or a backslash stay local. As MySQL keeps no order of a derived
//! table, a part sent there ends at its outermost sort, written as the statement's own ORDER
//! BY with NULL ordering spelled out (`(x IS NULL) ASC, x`). A semi or anti join over a
//! table's rows goes there as `key [NOT] IN (SELECT …)`, which its optimizer turns into a
//! semi join, rather than as EXISTS, which it runs once per row (see [`as_membership`]).
//!
//! One difference is kept on purpose: where DataFusion's integer arithmetic wraps and its
//! doubles overflow to infinity, PostgreSQL raises `bigint out of range` (passed through):
//! an error, never a different number.
//!
//! A part that is only a table's scan (with its projection, filters and limit) keeps the
//! scan's own statement (`table::RemoteTable`). `EXPLAIN` shows each statement and its
//! bound values in the `PostgresScan` line. A datasource with `"push_down": false` sends
//! neither.
//!
//! `datafusion-federation` (0.5.8, for DataFusion 55) was read as the alternative: it finds
//! the same largest parts, but sends every expression in them (our functions included, with
//! no veto per expression) and writes them with the unparser's whole-plan writer above.
//! Upstream, DataFusion could let a table source say which expressions its system computes
//! alike.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{
    Column as DfColumn, DFSchema, DFSchemaRef, NullEquality, ScalarValue, TableReference,
};
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr::{
    AggregateFunction, Placeholder, WindowFunction, WindowFunctionDefinition,
};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    BinaryExpr, Cast, Distinct, Expr, ExprSchemable, Extension, FetchType, Join, JoinType,
    LogicalPlan, Operator, SkipType, SortExpr, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use datafusion::sql::unparser::Unparser;

use super::dialect::{
    exact, exact_text, is_text_type, mysql_like_pattern, postgres_div, raw_sql, Dialect,
};
use super::postgres::Kind;
use super::remote::Remote;
use super::table::{RemoteScanExec, RemoteTable};

/// Placeholders a statement may bind: the protocol counts them in 16 bits.
const MAX_PARAMS: usize = 65_535;

/// Bytes a written statement may have. Each join lists the columns of both sides, so the
/// text grows with the square of the tables joined (a 100-table join wrote 586 KB); past
/// this the part is split into smaller ones.
const MAX_STATEMENT: usize = 256 * 1024;

/// Replaces each largest part of a plan that one PostgreSQL server can compute with a
/// [`RemoteQuery`].
#[derive(Debug)]
pub(crate) struct PushDownPlans;

impl OptimizerRule for PushDownPlans {
    fn name(&self) -> &str {
        "mindlite_push_down_plans"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        if !plan.exists(|p| Ok(remote_scan(p).is_some()))? {
            return Ok(Transformed::no(plan));
        }
        let (plan, changed, whole) = visit(plan)?;
        if let Some(server) = whole {
            let (plan, sent) = send_or_split(plan, &server)?;
            return Ok(if sent {
                Transformed::yes(plan)
            } else {
                Transformed::no(plan)
            });
        }
        Ok(if changed {
            Transformed::yes(plan)
        } else {
            Transformed::no(plan)
        })
    }
}

/// A server that can compute a part: one of its tables' server, and its key.
#[derive(Clone)]
struct Server {
    key: String,
    remote: Remote,
}

/// The server of `plan` when it is a scan of a remote table that can take part in a sent
/// statement.
fn remote_scan(plan: &LogicalPlan) -> Option<Server> {
    let LogicalPlan::TableScan(scan) = plan else {
        return None;
    };
    let provider = source_as_provider(&scan.source).ok()?;
    let table = provider.downcast_ref::<RemoteTable>()?;
    let remote = table.remote();
    if !remote.push_down() {
        return None;
    }
    let read = match &scan.projection {
        Some(p) => p.iter().map(|&i| &table.columns()[i]).collect::<Vec<_>>(),
        None => table.columns().iter().collect(),
    };
    let mysql = matches!(remote, Remote::MySql(_));
    // MySQL's text takes part: every comparison of it is written over its bytes (`dialect`).
    if !read
        .iter()
        .all(|c| (c.kind.compares_alike() || (mysql && c.kind == Kind::LooseText)) && !c.unsigned)
    {
        return None;
    }
    Some(Server {
        key: remote.server_key(),
        remote: remote.clone(),
    })
}

/// Walks `plan` bottom-up. Returns the plan (with its sendable parts replaced when it is not
/// sendable whole), whether it changed, and its server when the whole plan can be sent.
fn visit(plan: LogicalPlan) -> DfResult<(LogicalPlan, bool, Option<Server>)> {
    crate::cancel::check()?;
    if let Some(server) = remote_scan(&plan) {
        return Ok((plan, false, Some(server)));
    }
    let inputs: Vec<LogicalPlan> = plan.inputs().into_iter().cloned().collect();
    if inputs.is_empty() {
        return Ok((plan, false, None));
    }
    // bounded: one per input of a plan node
    let mut children = Vec::with_capacity(inputs.len());
    for input in inputs {
        children.push(visit(input)?);
    }
    let first = children[0].2.as_ref().map(|s| s.key.clone());
    let same = first.is_some()
        && children
            .iter()
            .all(|(_, _, s)| s.as_ref().map(|s| &s.key) == first.as_ref());
    let engine_ok = match &children[0].2 {
        Some(server) if same => engine_sendable(&plan, server)?,
        _ => false,
    };
    if same
        && engine_ok
        && node_sendable(&plan)?
        && first
            .as_deref()
            .is_some_and(|key| subqueries_sendable(&plan, key).unwrap_or(false))
    {
        let server = children.swap_remove(0).2;
        return Ok((plan, false, server));
    }
    let mut changed = false;
    // bounded: one per input of a plan node
    let mut inputs = Vec::with_capacity(children.len());
    for (child, child_changed, server) in children {
        changed |= child_changed;
        match &server {
            Some(server) => {
                let (child, sent) = send_or_split(child, server)?;
                changed |= sent;
                inputs.push(child);
            }
            None => inputs.push(child),
        }
    }
    if !changed {
        return Ok((plan, false, None));
    }
    let exprs = plan.expressions();
    Ok((plan.with_new_exprs(exprs, inputs)?, true, None))
}

/// Whether every subquery in `plan`'s expressions is a scalar one that reads no column of the
/// query around it and can be sent whole to the server `key`: it is then written inside the
/// statement. (EXISTS and IN subqueries are joins by now.)
fn subqueries_sendable(plan: &LogicalPlan, key: &str) -> DfResult<bool> {
    let mut ok = true;
    for expr in plan.expressions() {
        expr.apply(|e| {
            match e {
                Expr::ScalarSubquery(sub) => {
                    let (_, changed, server) = visit(sub.subquery.as_ref().clone())?;
                    ok &= sub.outer_ref_columns.is_empty()
                        && !changed
                        && server.is_some_and(|s| s.key == key);
                }
                Expr::Exists(_) | Expr::InSubquery(_) | Expr::OuterReferenceColumn(..) => {
                    ok = false
                }
                _ => {}
            }
            Ok(if ok {
                TreeNodeRecursion::Continue
            } else {
                TreeNodeRecursion::Stop
            })
        })?;
    }
    Ok(ok)
}

/// `plan` (sendable whole to `server`) as a [`RemoteQuery`] when it can be written so, else
/// its inputs each so, recursively; and whether anything is sent.
fn send_or_split(plan: LogicalPlan, server: &Server) -> DfResult<(LogicalPlan, bool)> {
    if let Some(remote) = into_remote(&plan, server)? {
        return Ok((remote, true));
    }
    let inputs: Vec<LogicalPlan> = plan.inputs().into_iter().cloned().collect();
    if inputs.is_empty() {
        return Ok((plan, false));
    }
    let mut sent = false;
    // bounded: one per input of a plan node
    let mut split = Vec::with_capacity(inputs.len());
    for input in inputs {
        let (input, input_sent) = send_or_split(input, server)?;
        sent |= input_sent;
        split.push(input);
    }
    if !sent {
        return Ok((plan, false));
    }
    let exprs = plan.expressions();
    Ok((plan.with_new_exprs(exprs, split)?, true))
}

/// Whether a node whose inputs are all sendable to one server can be sent with them.
fn node_sendable(plan: &LogicalPlan) -> DfResult<bool> {
    let input_schema = || Arc::clone(plan.inputs()[0].schema());
    Ok(match plan {
        LogicalPlan::Projection(p) => p.expr.iter().all(|e| sendable(e, p.input.schema())),
        LogicalPlan::Filter(f) => sendable(&f.predicate, f.input.schema()),
        LogicalPlan::SubqueryAlias(_) | LogicalPlan::Union(_) => true,
        LogicalPlan::Distinct(Distinct::All(_)) => true,
        LogicalPlan::Limit(limit) => {
            matches!(limit.get_skip_type()?, SkipType::Literal(_))
                && matches!(limit.get_fetch_type()?, FetchType::Literal(_))
        }
        LogicalPlan::Sort(sort) => {
            let schema = input_schema();
            sort.expr.iter().all(|s| sendable(&s.expr, &schema))
        }
        LogicalPlan::Aggregate(agg) => {
            let schema = agg.input.schema();
            agg.group_expr
                .iter()
                .all(|e| !matches!(e, Expr::GroupingSet(_)) && sendable(e, schema))
                && agg.aggr_expr.iter().all(|e| aggregate_sendable(e, schema))
        }
        // Windows over windows stay here: the unparser names the inner one's results by
        // their plan text.
        LogicalPlan::Window(window)
            if window
                .input
                .exists(|p| Ok(matches!(p, LogicalPlan::Window(_))))? =>
        {
            false
        }
        LogicalPlan::Window(window) => {
            let schema = window.input.schema();
            window
                .window_expr
                .iter()
                .all(|e| window_sendable(e, schema))
        }
        LogicalPlan::Join(join) => {
            let kind_ok = matches!(
                join.join_type,
                JoinType::Inner
                    | JoinType::Left
                    | JoinType::Right
                    | JoinType::Full
                    | JoinType::LeftSemi
                    | JoinType::LeftAnti
            );
            // `NOT IN`'s anti join stays here: its NULLs mean "no rows", not NOT EXISTS's
            // "keep".
            // Keys that match NULLs (INTERSECT, EXCEPT) would be written as `=`.
            let both = join.left.schema().join(join.right.schema())?;
            // PostgreSQL runs a FULL JOIN only with an equality to merge or hash on.
            let full_ok = join.join_type != JoinType::Full || !join.on.is_empty();
            kind_ok
                && full_ok
                && !join.null_aware
                && join.null_equality == NullEquality::NullEqualsNothing
                && join
                    .on
                    .iter()
                    .all(|(l, r)| sendable(l, &both) && sendable(r, &both))
                && join.filter.as_ref().is_none_or(|f| sendable(f, &both))
        }
        _ => false,
    })
}

/// Whether a node that PostgreSQL would compute as DataFusion does (`node_sendable`) is also
/// computed alike by `server`'s engine. MySQL differs in more: it has no FULL JOIN and no
/// `NULLS FIRST/LAST` in window orderings (windows stay here), it divides integers into
/// decimals and gives NULL for `% 0`, it averages into decimals of four places, it has no
/// aggregate FILTER, and it compares text under its collation: text is compared by its bytes
/// (`dialect`), and what cannot be so written (DISTINCT rows of text, `count(DISTINCT text)`,
/// `nullif`, min/max of text, LIKE with `_` or a backslash) stays here.
fn engine_sendable(plan: &LogicalPlan, server: &Server) -> DfResult<bool> {
    if let Remote::Postgres(_) = server.remote {
        return Ok(true);
    }
    if matches!(plan, LogicalPlan::Distinct(_))
        && plan
            .schema()
            .fields()
            .iter()
            .any(|f| is_text_type(f.data_type()))
    {
        return Ok(false);
    }
    let schema = match plan {
        LogicalPlan::Join(join) => Arc::new(join.left.schema().join(join.right.schema())?),
        LogicalPlan::Window(_) => return Ok(false),
        other => match other.inputs().first() {
            Some(input) => Arc::clone(input.schema()),
            None => return Ok(false),
        },
    };
    if let LogicalPlan::Join(join) = plan {
        if join.join_type == JoinType::Full {
            return Ok(false);
        }
    }
    // Nor does it keep a derived table's order: what keeps its input's order (a projection,
    // a filter, a LIMIT) over a sort runs here, on the sorted rows the part returns.
    if matches!(
        plan,
        LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Limit(_)
    ) && matches!(plan.inputs().first(), Some(LogicalPlan::Sort(_)))
    {
        return Ok(false);
    }
    Ok(plan.expressions().iter().all(|e| {
        !e.exists(|e| {
            Ok(match e {
                // A double is written as a plain decimal, which MySQL reads as DECIMAL: past
                // about 30 digits it is clipped (1e100 becomes 1e65, 1e-100 zero).
                Expr::Literal(ScalarValue::Float64(Some(v)), _) => v.to_string().len() > 30,
                Expr::Literal(ScalarValue::Float32(Some(_)), _) => true,
                Expr::BinaryExpr(b) => {
                    matches!(b.op, Operator::Divide | Operator::Modulo)
                        // Dates are numbers there (20240131 - 20231231): no date arithmetic.
                        || [&b.left, &b.right].iter().any(|side| {
                            matches!(
                                type_of(side, &schema),
                                Some(
                                    DataType::Date32
                                        | DataType::Date64
                                        | DataType::Timestamp(..)
                                        | DataType::Interval(_)
                                        | DataType::Duration(_)
                                ) | None
                            )
                        }) && !matches!(
                            b.op,
                            Operator::Eq
                                | Operator::NotEq
                                | Operator::Lt
                                | Operator::LtEq
                                | Operator::Gt
                                | Operator::GtEq
                                | Operator::And
                                | Operator::Or
                                | Operator::IsDistinctFrom
                                | Operator::IsNotDistinctFrom
                        )
                }
                // A cast to a narrow type is clamped there (CAST(… AS DECIMAL(5,0)) gives
                // 99999), or refused (SMALLINT): only widening to 64-bit integers and doubles.
                Expr::Cast(cast) => {
                    !matches!(cast.field.data_type(), DataType::Int64 | DataType::Float64)
                }
                Expr::TryCast(_) => true,

                Expr::Like(like) => !mysql_like_pattern(&like.pattern),
                Expr::SimilarTo(_) => true,
                // Text from two columns of different collations is an error there
                // ("Illegal mix of collations"): what merges text values stays here.
                Expr::ScalarFunction(f) => {
                    matches!(f.func.name(), "nullif" | "coalesce")
                        && f.args.iter().any(|a| is_text(a, &schema))
                }
                Expr::Case(_) => is_text(e, &schema),
                Expr::AggregateFunction(a) => {
                    a.func.name() == "avg"
                        || a.params.filter.is_some()
                        || (a.params.distinct && a.params.args.iter().any(|a| is_text(a, &schema)))
                }
                _ => false,
            })
        })
        .unwrap_or(true)
    }))
}

/// Whether MySQL is sent the semi or anti join `join` as `key [NOT] IN (SELECT …)` rather
/// than `[NOT] EXISTS`: MariaDB evaluates a merged derived table's conditions in the order
/// written, its own last, so an EXISTS over the rows of a filtered table runs for every row
/// before the filter (TPC-H Q4: 2.2 s, as IN 0.67 s), while IN over a table's rows becomes
/// one of its semi-join strategies. Not over an aggregate or a join, where IN's strategies
/// lose (Q18: 41 s against 8.9). One key; for NOT IN, neither side may be NULL (NOT IN
/// drops a row a NULL is in, NOT EXISTS keeps it). No LIMIT on the right: MySQL refuses
/// one in an IN subquery.
fn as_membership(join: &Join) -> bool {
    fn rows_of_a_table(plan: &LogicalPlan) -> bool {
        match plan {
            LogicalPlan::TableScan(scan) => scan.fetch.is_none(),
            LogicalPlan::Filter(_) | LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
                plan.inputs().into_iter().all(rows_of_a_table)
            }
            _ => false,
        }
    }
    let [(left, right)] = join.on.as_slice() else {
        return false;
    };
    let never_null = || {
        matches!(left.nullable(join.left.schema()), Ok(false))
            && matches!(right.nullable(join.right.schema()), Ok(false))
    };
    rows_of_a_table(&join.right)
        && match join.join_type {
            JoinType::LeftSemi => true,
            JoinType::LeftAnti => never_null(),
            _ => false,
        }
}

fn is_text(expr: &Expr, schema: &DFSchema) -> bool {
    matches!(
        expr.get_type(schema),
        Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) | Err(_)
    )
}

fn is_double(expr: &Expr, schema: &DFSchema) -> bool {
    matches!(
        expr.get_type(schema),
        Ok(DataType::Float64 | DataType::Float32) | Err(_)
    )
}

fn type_of(expr: &Expr, schema: &DFSchema) -> Option<DataType> {
    expr.get_type(schema).ok()
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn literal_sendable(value: &ScalarValue) -> bool {
    match value {
        ScalarValue::Null
        | ScalarValue::Boolean(_)
        | ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::Date32(_)
        | ScalarValue::Decimal128(_, _, _) => true,
        // PostgreSQL's text holds no NUL: it would refuse what compares here.
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
            v.as_deref().is_none_or(|t| !t.contains('\0'))
        }
        // NaN and infinities compare differently in PostgreSQL.
        ScalarValue::Float64(v) => v.is_none_or(|v| v.is_finite()),
        ScalarValue::TimestampMicrosecond(_, None) => true,
        _ => false,
    }
}

/// Whether PostgreSQL casts `from` to `to` as DataFusion does (no rounding that differs).
fn cast_sendable(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (a, b) if a == b => true,
        (a, Int16 | Int32 | Int64 | Float64) if is_integer(a) => true,
        (a, Decimal128(_, s)) if is_integer(a) => *s >= 0,
        (a, Utf8 | LargeUtf8 | Utf8View) if is_integer(a) => true,
        (Float64, Float64) => true,
        (Decimal128(_, s1), Decimal128(_, s2)) => s2 >= s1,
        (Decimal128(..), Float64) => true,
        (Date32, Timestamp(TimeUnit::Microsecond | TimeUnit::Nanosecond, None)) => true,
        (Timestamp(_, None), Timestamp(_, None)) => true,
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        _ => false,
    }
}

/// Whether `expr` (over `schema`) means the same in PostgreSQL.
fn sendable(expr: &Expr, schema: &DFSchema) -> bool {
    let ok = |e: &Expr| sendable(e, schema);
    match expr {
        Expr::Alias(a) => ok(&a.expr),
        Expr::Column(_) => true,
        Expr::Literal(value, _) => literal_sendable(value),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let result = type_of(expr, schema);
            let allowed = match op {
                Operator::Eq
                | Operator::NotEq
                | Operator::And
                | Operator::Or
                | Operator::IsDistinctFrom
                | Operator::IsNotDistinctFrom => true,
                // Text is ordered by its bytes there too (`dialect::exact_text`).
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => true,
                Operator::Plus | Operator::Minus | Operator::Multiply => matches!(
                    result,
                    Some(
                        DataType::Int16
                            | DataType::Int32
                            | DataType::Int64
                            | DataType::Float64
                            | DataType::Decimal128(..)
                    )
                ),
                // Decimal division rounds differently; integer and double division agree.
                Operator::Divide => matches!(
                    result,
                    Some(DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Float64)
                ),
                // PostgreSQL has no `%` of doubles.
                Operator::Modulo => matches!(
                    result,
                    Some(DataType::Int16 | DataType::Int32 | DataType::Int64)
                ),
                _ => false,
            };
            allowed && ok(left) && ok(right)
        }
        Expr::Not(e)
        | Expr::IsNull(e)
        | Expr::IsNotNull(e)
        | Expr::IsTrue(e)
        | Expr::IsFalse(e)
        | Expr::IsUnknown(e)
        | Expr::IsNotTrue(e)
        | Expr::IsNotFalse(e)
        | Expr::IsNotUnknown(e) => ok(e),
        // Its plan is checked with the node's (`subqueries_sendable`).
        Expr::ScalarSubquery(_) => true,
        Expr::Negative(e) => {
            matches!(
                type_of(e, schema),
                Some(
                    DataType::Int16
                        | DataType::Int32
                        | DataType::Int64
                        | DataType::Float64
                        | DataType::Decimal128(..)
                )
            ) && ok(e)
        }
        Expr::Between(b) => ok(&b.expr) && ok(&b.low) && ok(&b.high),
        Expr::InList(list) => ok(&list.expr) && list.list.iter().all(ok),
        Expr::Like(like) => {
            !like.case_insensitive
                && like.escape_char.is_none()
                && ok(&like.expr)
                && ok(&like.pattern)
        }
        Expr::Case(case) => {
            case.expr.as_deref().is_none_or(ok)
                && case.when_then_expr.iter().all(|(w, t)| ok(w) && ok(t))
                && case.else_expr.as_deref().is_none_or(ok)
        }
        Expr::Cast(Cast { expr: inner, field }) => {
            type_of(inner, schema).is_some_and(|from| cast_sendable(&from, field.data_type()))
                && ok(inner)
        }
        Expr::ScalarFunction(f) => {
            let args_ok = f.args.iter().all(ok);
            args_ok
                && match f.func.name() {
                    "coalesce" | "nullif" => true,
                    "abs" => f.args.iter().all(|a| {
                        matches!(
                            type_of(a, schema),
                            Some(
                                DataType::Int16
                                    | DataType::Int32
                                    | DataType::Int64
                                    | DataType::Float64
                                    | DataType::Decimal128(..)
                            )
                        )
                    }),
                    "character_length" => true,
                    // Characters from a position on, counted alike from position 1 with a
                    // length that is not negative (before it, each counts its own way).
                    "substr" => {
                        let whole = |a: &Expr, least: i64| {
                            matches!(a, Expr::Literal(ScalarValue::Int64(Some(v)), _)
                                if (least..=i64::from(i32::MAX)).contains(v))
                        };
                        matches!(
                            f.args.first().and_then(|a| type_of(a, schema)),
                            Some(DataType::Utf8)
                        ) && f.args.get(1).is_some_and(|a| whole(a, 1))
                            && f.args.get(2).is_none_or(|a| whole(a, 0))
                            && f.args.len() <= 3
                    }
                    // A date's year, month or day: whole numbers alike (finer parts and
                    // epochs differ in fractions and types).
                    "date_part" => {
                        matches!(
                            f.args.first(),
                            Some(Expr::Literal(ScalarValue::Utf8(Some(part)), _))
                                if ["year", "month", "day"].contains(&part.to_ascii_lowercase().as_str())
                        ) && matches!(
                            f.args.get(1).and_then(|a| type_of(a, schema)),
                            Some(DataType::Date32 | DataType::Timestamp(_, None))
                        )
                    }
                    _ => false,
                }
        }
        _ => false,
    }
}

/// Whether an aggregate (maybe aliased) means the same in PostgreSQL.
fn aggregate_sendable(expr: &Expr, schema: &DFSchema) -> bool {
    match expr {
        Expr::Alias(a) => aggregate_sendable(&a.expr, schema),
        Expr::AggregateFunction(AggregateFunction { func, params }) => {
            if !params.order_by.is_empty() || params.null_treatment.is_some() {
                return false;
            }
            let args_ok = params.args.iter().all(|a| sendable(a, schema))
                && params.filter.as_deref().is_none_or(|f| sendable(f, schema));
            args_ok
                && (aggregate_name_sendable(func.name(), &params.args, schema)
                    || decimal_avg_scale(expr, schema).is_some())
        }
        _ => false,
    }
}

/// The scale of DataFusion's mean when `expr` is a plain `avg` of decimals: DataFusion
/// truncates it at that scale (the sum scaled up, divided by the count as integers), which
/// [`Writer`] writes as `div(sum(x) * 10^scale, count(x)) * 10^-scale`, exact in PostgreSQL.
fn decimal_avg_scale(expr: &Expr, schema: &DFSchema) -> Option<i8> {
    let expr = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
        return None;
    };
    if func.name() != "avg"
        || params.distinct
        || params.filter.is_some()
        || !params.order_by.is_empty()
        || params.args.len() != 1
    {
        return None;
    }
    let Ok(DataType::Decimal128(_, input_scale)) = params.args[0].get_type(schema) else {
        return None;
    };
    let Ok(DataType::Decimal128(_, scale)) = expr.get_type(schema) else {
        return None;
    };
    (input_scale >= 0 && scale >= input_scale && scale <= 30).then_some(scale)
}

/// `avg(x)` of decimals as DataFusion computes it (see [`decimal_avg_scale`]), in PostgreSQL.
fn avg_as_division(expr: &Expr, scale: i8) -> Expr {
    let inner = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let Expr::AggregateFunction(AggregateFunction { params, .. }) = inner else {
        return expr.clone();
    };
    let x = params.args[0].clone();
    let power = Expr::Literal(
        ScalarValue::Decimal128(Some(10i128.pow(u32::from(scale.unsigned_abs()))), 38, 0),
        None,
    );
    let sum = datafusion::functions_aggregate::expr_fn::sum(x.clone());
    let count = datafusion::functions_aggregate::expr_fn::count(x);
    // Times 10^-s, not divided by 10^s: PostgreSQL keeps some 16 digits of a quotient, while
    // a product of numerics is exact.
    let unit = Expr::Literal(ScalarValue::Decimal128(Some(1), 38, scale), None);
    postgres_div(sum * power, count) * unit
}

/// Whether the aggregate `name` over `args` computes alike.
fn aggregate_name_sendable(name: &str, args: &[Expr], schema: &DFSchema) -> bool {
    let arg = || args.first().and_then(|a| type_of(a, schema));
    match name {
        "count" => true,
        "sum" => matches!(
            arg(),
            Some(t) if is_integer(&t) || matches!(t, DataType::Float64 | DataType::Decimal128(..))
        ),
        // The mean of decimals rounds differently; of integers and doubles it is a double.
        "avg" => matches!(arg(), Some(t) if is_integer(&t) || t == DataType::Float64),
        "min" | "max" => matches!(
            arg(),
            // Not of doubles: PostgreSQL ranks NaN above infinity and -0 with 0, which
            // DataFusion's min and max do not.
            Some(t) if is_integer(&t) || matches!(
                t,
                DataType::Decimal128(..) | DataType::Date32 | DataType::Timestamp(_, None)
            )
        ),
        _ => false,
    }
}

/// Whether a window function (maybe aliased) means the same in PostgreSQL.
fn window_sendable(expr: &Expr, schema: &DFSchema) -> bool {
    match expr {
        Expr::Alias(a) => window_sendable(&a.expr, schema),
        Expr::WindowFunction(window) => {
            let WindowFunction { fun, params } = window.as_ref();
            if params.null_treatment.is_some() || params.filter.is_some() || params.distinct {
                return false;
            }
            let parts_ok = params.args.iter().all(|a| sendable(a, schema))
                // Partitions of doubles: PostgreSQL puts -0 with 0, DataFusion apart.
                && params
                    .partition_by
                    .iter()
                    .all(|e| sendable(e, schema) && !is_double(e, schema))
                && params
                    .order_by
                    .iter()
                    .all(|s| sendable(&s.expr, schema));
            parts_ok
                && match fun {
                    WindowFunctionDefinition::AggregateUDF(f) => {
                        aggregate_name_sendable(f.name(), &params.args, schema)
                    }
                    WindowFunctionDefinition::WindowUDF(f) => {
                        matches!(f.name(), "row_number" | "rank" | "dense_rank")
                    }
                }
        }
        _ => false,
    }
}

/// Whether sending `plan` saves anything over its scans' own statements: it holds a node
/// other than scans, projections and aliases.
fn worth_sending(plan: &LogicalPlan) -> bool {
    plan.exists(|p| {
        Ok(!matches!(
            p,
            LogicalPlan::TableScan(_) | LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_)
        ))
    })
    .unwrap_or(false)
}

/// `plan` (sendable whole to `server`) as a [`RemoteQuery`], or `None` when it is not worth
/// sending or cannot be written as SQL (it then runs as before).
fn into_remote(plan: &LogicalPlan, server: &Server) -> DfResult<Option<LogicalPlan>> {
    if !worth_sending(plan) {
        return Ok(None);
    }
    let Some(kinds) = plan
        .schema()
        .fields()
        .iter()
        .map(|f| Kind::for_result(f.data_type()))
        .collect::<Option<Vec<Kind>>>()
    else {
        return Ok(None);
    };
    let mysql = matches!(server.remote, Remote::MySql(_));
    if mysql && !fits_mysql(plan)? {
        return Ok(None);
    }
    let dialect = if mysql {
        Dialect::MySql
    } else {
        Dialect::Postgres
    };
    let mut writer = Writer {
        unparser: dialect.unparser(),
        dialect,
        remote: &server.remote,
        params: Vec::new(),
        aliases: 0,
    };
    // MySQL keeps no order of a derived table: a part that ends in a sort is written as its
    // input, ordered by the outermost SELECT.
    let (body, order) = match plan {
        LogicalPlan::Sort(sort) if mysql => (sort.input.as_ref(), Some(sort)),
        other => (other, None),
    };
    let inner = match writer.select(body) {
        Ok(sql) => sql,
        Err(_) => return Ok(None),
    };
    let order = match order {
        None => String::new(),
        Some(sort) => {
            let Ok(keys) = writer.order_by(&sort.expr, ("q", sort.input.schema())) else {
                return Ok(None);
            };
            match sort.fetch {
                Some(fetch) => format!(" ORDER BY {keys} LIMIT {fetch}"),
                None => format!(" ORDER BY {keys}"),
            }
        }
    };
    // MySQL reads are not prepared: nothing may be bound (its text literals are written
    // out, in hexadecimal).
    if writer.params.len() > MAX_PARAMS || (mysql && !writer.params.is_empty()) {
        return Ok(None);
    }
    // Each result column cast to the type DataFusion planned for it, so it is read as that
    // type (PostgreSQL's `sum(int8)` is `numeric`). MySQL's text results are parsed into the
    // planned types as they are read.
    let columns: Vec<String> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| match mysql {
            true => format!("q.c{i}"),
            false => format!("CAST(q.c{i} AS {})", kind.type_name()),
        })
        .collect();
    let sql = format!("SELECT {} FROM ({inner}) AS q{order}", columns.join(", "));
    Ok(Some(LogicalPlan::Extension(Extension {
        node: Arc::new(RemoteQuery {
            remote: server.remote.clone(),
            key: server.key.clone(),
            sql,
            params: Arc::from(writer.params),
            kinds,
            schema: Arc::clone(plan.schema()),
        }),
    })))
}

/// Tables a statement sent to MySQL may join: its optimizer's memory doubles with each
/// table joined through derived tables (20 tables took 1.9 GB of MariaDB's, 30 more than 24 GB).
const MYSQL_MAX_TABLES: usize = 10;

/// Plan levels a statement sent to MySQL may nest: each is a derived table, and MySQL refuses
/// a statement nested 64 deep (`Too high level of nesting for select`).
const MYSQL_MAX_DEPTH: usize = 24;

/// Whether `plan` is small enough to send to MySQL as one statement; larger parts are split.
fn fits_mysql(plan: &LogicalPlan) -> DfResult<bool> {
    // A scalar subquery's SELECTs nest inside the node's.
    fn depth(plan: &LogicalPlan) -> usize {
        let mut deepest = plan.inputs().iter().map(|p| depth(p)).max().unwrap_or(0);
        for expr in plan.expressions() {
            let _ = expr.apply(|e| {
                if let Expr::ScalarSubquery(sub) = e {
                    deepest = deepest.max(depth(&sub.subquery));
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        1 + deepest
    }
    let mut tables = 0;
    plan.apply_with_subqueries(|p| {
        tables += usize::from(matches!(p, LogicalPlan::TableScan(_)));
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(tables <= MYSQL_MAX_TABLES && depth(plan) <= MYSQL_MAX_DEPTH)
}

/// Writes a sendable plan as SQL, one SELECT per node over its inputs as derived tables
/// `t1`, `t2`, …, each result column named by position (`c0`, `c1`, …). DataFusion's
/// unparser writes the expressions; its whole-plan writer is not used: it merges nodes into
/// one SELECT by rules that lose names and move conditions (a LEFT JOIN's kept-side filter
/// into its ON, an aggregate's keys after its values, a sort's fetch over a LIMIT's, the
/// select lists of semi joins). PostgreSQL flattens the derived tables when it plans.
struct Writer<'a> {
    unparser: Unparser<'static>,
    dialect: Dialect,
    /// Whose SQL is written (quoting, NULL ordering, LIMIT forms).
    remote: &'a Remote,
    /// Text values, bound as `$1`, `$2`, … in order.
    params: Vec<Option<String>>,
    aliases: usize,
}

impl Writer<'_> {
    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("t{}", self.aliases)
    }

    /// `expr` over inputs whose columns are `sides` (each: its alias and schema, in order),
    /// as SQL: columns become `tN.cI`, text values placeholders.
    fn expr(&mut self, expr: &Expr, sides: &[(&str, &DFSchema)]) -> DfResult<String> {
        let expr = match sides {
            [(_, schema)] => exact_text(expr.clone(), schema, self.dialect)?,
            [(_, left), (_, right)] => exact_text(expr.clone(), &left.join(right)?, self.dialect)?,
            _ => {
                return Err(DataFusionError::Plan(
                    "an expression over one or two inputs".into(),
                ))
            }
        };
        self.write(&expr, |c| {
            for (alias, schema) in sides {
                if let Some(i) = schema.maybe_index_of_column(c) {
                    return Ok(DfColumn::new(
                        Some(TableReference::bare(*alias)),
                        format!("c{i}"),
                    ));
                }
            }
            Err(DataFusionError::Plan(format!(
                "column {c} is not an input's"
            )))
        })
    }

    /// `expr` as SQL with each column as `column` names it and each text value bound as a
    /// placeholder. An alias names a result column, which the writer names by position, so
    /// aliases are dropped.
    fn write(
        &mut self,
        expr: &Expr,
        column: impl Fn(&DfColumn) -> DfResult<DfColumn>,
    ) -> DfResult<String> {
        let params = &mut self.params;
        // MySQL's reads are not prepared: its text is written out (`dialect`).
        let bind_text = self.dialect == Dialect::Postgres;
        // substr's positions as plain integers: PostgreSQL has no substr(text, bigint, …).
        let expr = expr
            .clone()
            .transform_down(|e| match e {
                Expr::ScalarFunction(mut f) if f.func.name() == "substr" => {
                    for arg in f.args.iter_mut().skip(1) {
                        if let Expr::Literal(ScalarValue::Int64(Some(v)), _) = arg {
                            let v = i32::try_from(*v).map_err(|_| {
                                DataFusionError::Plan("a substr position past i32".into())
                            })?;
                            *arg = Expr::Literal(ScalarValue::Int32(Some(v)), None);
                        }
                    }
                    Ok(Transformed::yes(Expr::ScalarFunction(f)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        let rewritten = expr
            .transform_up(|e| match e {
                Expr::Column(c) => Ok(Transformed::yes(Expr::Column(column(&c)?))),
                Expr::Literal(
                    ScalarValue::Utf8(Some(text))
                    | ScalarValue::LargeUtf8(Some(text))
                    | ScalarValue::Utf8View(Some(text)),
                    _,
                ) if bind_text => {
                    params.push(Some(text));
                    let slot = Expr::Placeholder(Placeholder::new_with_field(
                        format!("${}", params.len()),
                        None,
                    ));
                    Ok(Transformed::yes(Expr::Cast(Cast::new(
                        Box::new(slot),
                        DataType::Utf8,
                    ))))
                }
                // PostgreSQL reads `0.1` as numeric (exact) and `2000000000` as a 32-bit
                // integer: a number is written with its type, as DataFusion computes with it.
                Expr::Literal(
                    value @ (ScalarValue::Float64(Some(_)) | ScalarValue::Int64(Some(_))),
                    _,
                ) => {
                    let data_type = value.data_type();
                    Ok(Transformed::yes(Expr::Cast(Cast::new(
                        Box::new(Expr::Literal(value, None)),
                        data_type,
                    ))))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        // Each scalar subquery (sendable whole: `subqueries_sendable`) as its own SELECT.
        let rewritten = rewritten
            .transform_up(|e| match e {
                Expr::ScalarSubquery(sub) => {
                    let inner = self.select(&sub.subquery)?;
                    let alias = self.alias();
                    Ok(Transformed::yes(raw_sql(format!(
                        "(SELECT {alias}.c0 FROM ({inner}) AS {alias})"
                    ))))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        Ok(self
            .unparser
            .expr_to_sql(&rewritten.unalias_nested().data)?
            .to_string())
    }

    /// The sort keys of `sorts` over the input `side`.
    fn order_by(&mut self, sorts: &[SortExpr], side: (&str, &DFSchema)) -> DfResult<String> {
        let mysql = matches!(self.remote, Remote::MySql(_));
        let keys = sorts
            .iter()
            .map(|s| {
                // Text in byte order, as DataFusion sorts it.
                let key = match s.expr.get_type(side.1) {
                    Ok(t) if is_text_type(&t) => self.expr(&exact(s.expr.clone()), &[side])?,
                    _ => self.expr(&s.expr, &[side])?,
                };
                let direction = if s.asc { "ASC" } else { "DESC" };
                Ok(match (mysql, s.nulls_first) {
                    // MySQL has no NULLS FIRST/LAST (it puts NULLs first when ascending):
                    // a key of whether it is NULL goes before.
                    (true, true) => format!("({key} IS NULL) DESC, {key} {direction}"),
                    (true, false) => format!("({key} IS NULL) ASC, {key} {direction}"),
                    (false, true) => format!("{key} {direction} NULLS FIRST"),
                    (false, false) => format!("{key} {direction} NULLS LAST"),
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        Ok(keys.join(", "))
    }

    /// A select list of `columns`: PostgreSQL takes an empty one (rows without columns, for
    /// `count(*)`), MySQL needs an item, which no one above reads (columns go by position).
    fn select_list(&self, columns: &[String]) -> String {
        match (columns.is_empty(), self.remote) {
            (true, Remote::MySql(_)) => "1 AS c_".to_string(),
            _ => columns.join(", "),
        }
    }

    /// `plan` as a SELECT whose columns are `c0`, `c1`, … in its schema's order; an error as
    /// soon as the text passes [`MAX_STATEMENT`], so a part too large to send costs no more
    /// than that to find out, at each level its parent tries.
    fn select(&mut self, plan: &LogicalPlan) -> DfResult<String> {
        crate::cancel::check()?;
        let sql = self.select_node(plan)?;
        if sql.len() > MAX_STATEMENT {
            return Err(DataFusionError::Plan(format!(
                "a statement of more than {MAX_STATEMENT} bytes"
            )));
        }
        Ok(sql)
    }

    fn select_node(&mut self, plan: &LogicalPlan) -> DfResult<String> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                let provider = source_as_provider(&scan.source)?;
                let table = provider
                    .downcast_ref::<RemoteTable>()
                    .ok_or_else(|| DataFusionError::Plan("not a remote table".into()))?;
                let alias = self.alias();
                let all = provider.schema();
                let indices: Vec<usize> = match &scan.projection {
                    Some(p) => p.clone(),
                    None => (0..all.fields().len()).collect(),
                };
                let columns: Vec<String> = indices
                    .iter()
                    .enumerate()
                    .map(|(i, &at)| {
                        format!(
                            "{alias}.{} AS c{i}",
                            self.remote.quote(all.field(at).name())
                        )
                    })
                    .collect();
                // The scan's filters name the table's columns; here they are its columns by
                // position in the whole table.
                let whole = DFSchema::try_from_qualified_schema(scan.table_name.clone(), &all)?;
                let mut sql = format!(
                    "SELECT {} FROM {} AS {alias}",
                    self.select_list(&columns),
                    table.remote().qualified(table.name())
                );
                if !scan.filters.is_empty() {
                    let conditions = scan
                        .filters
                        .iter()
                        .map(|f| self.scan_condition(f, &alias, &whole))
                        .collect::<DfResult<Vec<_>>>()?;
                    sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
                }
                if let Some(fetch) = scan.fetch {
                    sql.push_str(&format!(" LIMIT {fetch}"));
                }
                Ok(sql)
            }
            LogicalPlan::SubqueryAlias(a) => self.select(&a.input),
            LogicalPlan::Projection(p) => {
                let input = self.select(&p.input)?;
                let alias = self.alias();
                let schema = p.input.schema();
                let columns = p
                    .expr
                    .iter()
                    .enumerate()
                    .map(|(i, e)| Ok(format!("{} AS c{i}", self.expr(e, &[(&alias, schema)])?)))
                    .collect::<DfResult<Vec<_>>>()?;
                Ok(format!(
                    "SELECT {} FROM ({input}) AS {alias}",
                    self.select_list(&columns)
                ))
            }
            LogicalPlan::Filter(f) => {
                let input = self.select(&f.input)?;
                let alias = self.alias();
                let condition = self.expr(&f.predicate, &[(&alias, f.input.schema())])?;
                Ok(format!(
                    "SELECT * FROM ({input}) AS {alias} WHERE {condition}"
                ))
            }
            LogicalPlan::Sort(sort) => {
                let input = self.select(&sort.input)?;
                let alias = self.alias();
                let keys = self.order_by(&sort.expr, (&alias, sort.input.schema()))?;
                let mut sql = format!("SELECT * FROM ({input}) AS {alias} ORDER BY {keys}");
                if let Some(fetch) = sort.fetch {
                    sql.push_str(&format!(" LIMIT {fetch}"));
                }
                Ok(sql)
            }
            LogicalPlan::Limit(limit) => {
                let input = self.select(&limit.input)?;
                let alias = self.alias();
                let mut sql = format!("SELECT * FROM ({input}) AS {alias}");
                if let FetchType::Literal(Some(fetch)) = limit.get_fetch_type()? {
                    sql.push_str(&format!(" LIMIT {fetch}"));
                }
                if let SkipType::Literal(skip) = limit.get_skip_type()? {
                    if skip > 0 {
                        // MySQL takes an OFFSET only after a LIMIT.
                        if matches!(self.remote, Remote::MySql(_))
                            && !matches!(limit.get_fetch_type()?, FetchType::Literal(Some(_)))
                        {
                            sql.push_str(&format!(" LIMIT {}", u64::MAX));
                        }
                        sql.push_str(&format!(" OFFSET {skip}"));
                    }
                }
                Ok(sql)
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let inner = self.select(input)?;
                let alias = self.alias();
                Ok(format!("SELECT DISTINCT * FROM ({inner}) AS {alias}"))
            }
            LogicalPlan::Union(union) => {
                let parts = union
                    .inputs
                    .iter()
                    .map(|i| Ok(format!("({})", self.select(i)?)))
                    .collect::<DfResult<Vec<_>>>()?;
                Ok(parts.join(" UNION ALL "))
            }
            LogicalPlan::Aggregate(agg) => {
                let input = self.select(&agg.input)?;
                let alias = self.alias();
                let schema = agg.input.schema();
                let side = [(alias.as_str(), schema.as_ref())];
                let groups = agg
                    .group_expr
                    .iter()
                    .map(|e| self.expr(e, &side))
                    .collect::<DfResult<Vec<_>>>()?;
                // MySQL groups text under its collation ('a' with 'A '): each text key is
                // grouped by its bytes too, which splits such groups, and is still a key
                // the select list may name.
                let mut grouped_by = groups.clone();
                if self.dialect == Dialect::MySql {
                    for e in &agg.group_expr {
                        if e.get_type(schema).is_ok_and(|t| is_text_type(&t)) {
                            grouped_by.push(self.expr(&exact(e.clone()), &side)?);
                        }
                    }
                }
                let values = agg
                    .aggr_expr
                    .iter()
                    .map(|e| match decimal_avg_scale(e, schema) {
                        Some(scale) => self.expr(&avg_as_division(e, scale), &side),
                        None => self.expr(e, &side),
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                let columns: Vec<String> = groups
                    .iter()
                    .chain(&values)
                    .enumerate()
                    .map(|(i, e)| format!("{e} AS c{i}"))
                    .collect();
                let mut sql = format!(
                    "SELECT {} FROM ({input}) AS {alias}",
                    self.select_list(&columns)
                );
                if !grouped_by.is_empty() {
                    sql.push_str(&format!(" GROUP BY {}", grouped_by.join(", ")));
                }
                Ok(sql)
            }
            LogicalPlan::Window(window) => {
                let input = self.select(&window.input)?;
                let alias = self.alias();
                let schema = window.input.schema();
                let width = schema.fields().len();
                let mut columns: Vec<String> = (0..width)
                    .map(|i| format!("{alias}.c{i} AS c{i}"))
                    .collect();
                for (j, e) in window.window_expr.iter().enumerate() {
                    let sql = self.expr(e, &[(&alias, schema)])?;
                    columns.push(format!("{sql} AS c{}", width + j));
                }
                Ok(format!(
                    "SELECT {} FROM ({input}) AS {alias}",
                    columns.join(", ")
                ))
            }
            LogicalPlan::Join(join) => self.join(join),
            other => Err(DataFusionError::Plan(format!(
                "{} is not written as SQL",
                other.display()
            ))),
        }
    }

    /// A scan's filter over the whole table's columns (`whole`), as a condition on `alias`'s
    /// columns by their names in the table.
    fn scan_condition(&mut self, filter: &Expr, alias: &str, whole: &DFSchema) -> DfResult<String> {
        let filter = exact_text(filter.clone(), whole, self.dialect)?;
        self.write(&filter, |c| {
            let i = whole.index_of_column(c)?;
            Ok(DfColumn::new(
                Some(TableReference::bare(alias)),
                whole.field(i).name(),
            ))
        })
    }

    fn join(&mut self, join: &Join) -> DfResult<String> {
        let left = self.select(&join.left)?;
        let l = self.alias();
        let right = self.select(&join.right)?;
        let r = self.alias();
        let sides = [
            (l.as_str(), join.left.schema().as_ref()),
            (r.as_str(), join.right.schema().as_ref()),
        ];
        let both = join.left.schema().join(join.right.schema())?;
        let mysql = self.dialect == Dialect::MySql;
        let keys = join
            .on
            .iter()
            .map(|(a, b)| {
                // MySQL's text keys are compared by their bytes.
                let (a, b) = match a.get_type(&both) {
                    Ok(t) if mysql && is_text_type(&t) => (exact(a.clone()), exact(b.clone())),
                    _ => (a.clone(), b.clone()),
                };
                Ok((self.expr(&a, &sides)?, self.expr(&b, &sides)?))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let filter = match &join.filter {
            Some(filter) => Some(self.expr(filter, &sides)?),
            None => None,
        };
        let conditions: Vec<String> = keys
            .iter()
            .map(|(a, b)| format!("{a} = {b}"))
            .chain(filter.clone())
            .collect();
        let on = if conditions.is_empty() {
            "TRUE".to_string()
        } else {
            conditions.join(" AND ")
        };
        let left_width = join.left.schema().fields().len();
        let kind = match join.join_type {
            JoinType::LeftSemi | JoinType::LeftAnti => {
                let anti = join.join_type == JoinType::LeftAnti;
                let not = if anti { "NOT " } else { "" };
                if let ([(key, right_key)], true) = (keys.as_slice(), mysql && as_membership(join))
                {
                    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
                    return Ok(format!(
                        "SELECT * FROM ({left}) AS {l} WHERE {key} {not}IN (SELECT {right_key} FROM ({right}) AS {r}{filter})"
                    ));
                }
                return Ok(format!(
                    "SELECT * FROM ({left}) AS {l} WHERE {not}EXISTS (SELECT 1 FROM ({right}) AS {r} WHERE {on})"
                ));
            }
            JoinType::Inner => "INNER JOIN",
            JoinType::Left => "LEFT JOIN",
            JoinType::Right => "RIGHT JOIN",
            JoinType::Full => "FULL JOIN",
            other => {
                return Err(DataFusionError::Plan(format!(
                    "a {other} join is not written as SQL"
                )))
            }
        };
        let columns: Vec<String> = (0..left_width)
            .map(|i| format!("{l}.c{i} AS c{i}"))
            .chain(
                (0..join.right.schema().fields().len())
                    .map(|i| format!("{r}.c{i} AS c{}", left_width + i)),
            )
            .collect();
        Ok(format!(
            "SELECT {} FROM ({left}) AS {l} {kind} ({right}) AS {r} ON {on}",
            self.select_list(&columns)
        ))
    }
}

/// A part of a plan computed by a remote server: its statement, bound values, and how each
/// result column is read.
pub(crate) struct RemoteQuery {
    remote: Remote,
    /// The server's key (`Settings::server_key`), for equality.
    key: String,
    sql: String,
    params: Arc<[Option<String>]>,
    kinds: Vec<Kind>,
    schema: DFSchemaRef,
}

impl fmt::Debug for RemoteQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the key: it holds the password.
        f.debug_struct("RemoteQuery")
            .field("remote", &self.remote)
            .field("sql", &self.sql)
            .finish()
    }
}

impl PartialEq for RemoteQuery {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.sql == other.sql
            && self.params == other.params
            && self.schema == other.schema
    }
}

impl Eq for RemoteQuery {}

impl Hash for RemoteQuery {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
        self.sql.hash(state);
        self.params.hash(state);
    }
}

impl PartialOrd for RemoteQuery {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some((&self.key, &self.sql, &self.params).cmp(&(&other.key, &other.sql, &other.params)))
    }
}

impl UserDefinedLogicalNodeCore for RemoteQuery {
    fn name(&self) -> &str {
        match self.remote {
            Remote::Postgres(_) => "PostgresQuery",
            Remote::MySql(_) => "MySqlQuery",
        }
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{}: {} sql={}",
            UserDefinedLogicalNodeCore::name(self),
            self.remote.describe().1,
            self.sql
        )
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(format!(
                "{} has no inputs",
                UserDefinedLogicalNodeCore::name(self)
            )));
        }
        Ok(RemoteQuery {
            remote: self.remote.clone(),
            key: self.key.clone(),
            sql: self.sql.clone(),
            params: Arc::clone(&self.params),
            kinds: self.kinds.clone(),
            schema: Arc::clone(&self.schema),
        })
    }
}

/// Plans a [`RemoteQuery`] into the scan that reads its statement's rows.
#[derive(Debug)]
pub(crate) struct RemoteQueryPlanner;

#[async_trait]
impl ExtensionPlanner for RemoteQueryPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        _physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(query) = node.as_any().downcast_ref::<RemoteQuery>() else {
            return Ok(None);
        };
        let output = Arc::new(query.schema.as_arrow().clone());
        // Read as the kinds say (nullable: PostgreSQL does not say), then cast to the plan's
        // types where they differ (counts and ranks).
        let read = Arc::new(Schema::new(
            output
                .fields()
                .iter()
                .zip(&query.kinds)
                .map(|(f, kind)| Field::new(f.name(), kind.data_type(), true))
                .collect::<Vec<_>>(),
        ));
        Ok(Some(Arc::new(
            RemoteScanExec::new(
                query.remote.clone(),
                query.sql.clone(),
                Arc::clone(&query.params),
                read,
                query.kinds.clone(),
                None,
            )
            .cast_to(output),
        )))
    }
}
