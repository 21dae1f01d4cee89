//! Which filters of a query go to the remote database, and their SQL text. A filter is sent
//! only when the remote database would compute exactly what DataFusion computes, so the rows
//! that come back need no second check: comparisons, AND/OR/NOT, `IS [NOT] NULL`, IN lists,
//! BETWEEN and LIKE over columns and literals. Ordering comparisons of text stay local (a remote
//! collation may sort differently from DataFusion's byte order), as do arithmetic and columns
//! whose remote comparison differs (see `Kind::compares_alike`). The text is DataFusion's
//! unparser's, in the server's dialect. MySQL compares text under a collation (case and
//! trailing spaces ignored by default) and reads backslashes in string literals unless its
//! `sql_mode` says otherwise, so no condition with text is sent to it.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column as DfColumn, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::sql::unparser::dialect::{MySqlDialect, PostgreSqlDialect};
use datafusion::sql::unparser::Unparser;

use super::postgres::{Column, Kind};

/// Whose SQL a condition is written in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Dialect {
    Postgres,
    MySql,
}

/// The SQL condition for `filter` over `columns`, or `None` when it must run locally.
pub(crate) fn remote_filter(filter: &Expr, columns: &[Column], dialect: Dialect) -> Option<String> {
    if !supported(filter, columns) {
        return None;
    }
    if dialect == Dialect::MySql && (has_text(filter, columns) || has_long_double(filter)) {
        return None;
    }
    // Columns unqualified: the remote statement reads one table under its own name.
    let bare = filter
        .clone()
        .transform(|e| {
            Ok(match e {
                Expr::Column(c) => {
                    Transformed::yes(Expr::Column(DfColumn::new_unqualified(c.name)))
                }
                other => Transformed::no(other),
            })
        })
        .ok()?
        .data;
    let sql = match dialect {
        Dialect::Postgres => Unparser::new(&PostgreSqlDialect {}).expr_to_sql(&bare),
        Dialect::MySql => Unparser::new(&MySqlDialect {}).expr_to_sql(&bare),
    }
    .ok()?;
    Some(sql.to_string())
}

fn column_kind(expr: &Expr, columns: &[Column]) -> Option<Kind> {
    match expr {
        Expr::Column(c) => columns
            .iter()
            .find(|col| col.name == c.name)
            .map(|col| col.kind),
        _ => None,
    }
}

/// Whether `expr` holds text: a text column or a text literal anywhere in it.
fn has_text(expr: &Expr, columns: &[Column]) -> bool {
    expr.exists(|e| {
        Ok(match e {
            Expr::Column(_) => {
                matches!(column_kind(e, columns), Some(Kind::Text | Kind::LooseText))
            }
            Expr::Literal(v, _) => matches!(
                v,
                ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Utf8View(_)
            ),
            _ => false,
        })
    })
    .unwrap_or(true)
}

/// Whether `expr` holds a double the unparser writes in more than 30 characters: MySQL reads
/// it as DECIMAL, clipped past 65 digits (1e100 becomes 1e65, 1e-100 zero).
fn has_long_double(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(e, Expr::Literal(ScalarValue::Float64(Some(v)), _) if v.to_string().len() > 30))
    })
    .unwrap_or(true)
}

fn literal_ok(value: &ScalarValue) -> bool {
    match value {
        ScalarValue::Null
        | ScalarValue::Boolean(_)
        | ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::Date32(_)
        | ScalarValue::Decimal128(_, _, _) => true,
        // The unparser writes text inline with sqlparser's escaping, which leaves a quote
        // after a backslash, and a doubled quote, as they are: the server would read another
        // value (or, from `\'`, the rest as SQL). Such text is compared here.
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => v
            .as_deref()
            .is_none_or(|text| !text.contains("''") && !text.contains("\\'")),
        // NaN and infinities compare differently in PostgreSQL. A real (f32) literal would be
        // written as a decimal that PostgreSQL compares as numeric, not as real.
        ScalarValue::Float64(v) => v.is_none_or(|v| v.is_finite()),
        _ => false,
    }
}

fn supported(expr: &Expr, columns: &[Column]) -> bool {
    let ok = |e: &Expr| supported(e, columns);
    match expr {
        // A name holding a quote would be written with sqlparser's escaping (see
        // `literal_ok`): compared here.
        Expr::Column(c) => {
            !c.name.contains(['"', '`'])
                && column_kind(expr, columns).is_some_and(Kind::compares_alike)
        }
        Expr::Literal(value, _) => literal_ok(value),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let allowed = match op {
                Operator::Eq | Operator::NotEq | Operator::And | Operator::Or => true,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => {
                    !has_text(left, columns) && !has_text(right, columns)
                }
                // Arithmetic stays local: PostgreSQL raises on integer overflow where Arrow
                // kernels differ, and literal types (numeric vs double) change results.
                _ => false,
            };
            allowed && ok(left) && ok(right)
        }
        Expr::Not(e)
        | Expr::IsNull(e)
        | Expr::IsNotNull(e)
        | Expr::IsTrue(e)
        | Expr::IsFalse(e)
        | Expr::IsNotTrue(e)
        | Expr::IsNotFalse(e) => ok(e),
        Expr::Between(b) => !has_text(&b.expr, columns) && ok(&b.expr) && ok(&b.low) && ok(&b.high),
        Expr::InList(list) => {
            ok(&list.expr)
                && list
                    .list
                    .iter()
                    .all(|e| matches!(e, Expr::Literal(v, _) if literal_ok(v) && !v.is_null()))
        }
        Expr::Like(like) => like.escape_char.is_none() && ok(&like.expr) && ok(&like.pattern),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    fn columns() -> Vec<Column> {
        let c = |name: &str, kind| Column {
            name: name.into(),
            kind,
            nullable: true,
            unsigned: false,
        };
        vec![
            c("id", Kind::Int64),
            c("name", Kind::Text),
            c("span", Kind::AsText),
            c("code", Kind::Bpchar),
            c("n", Kind::Numeric),
        ]
    }

    #[test]
    fn comparable_filters_become_sql() {
        let cols = columns();
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::Postgres);
        assert_eq!(
            sql(col("id").gt(lit(5i64)).and(col("name").eq(lit("a")))).as_deref(),
            Some(r#"(("id" > 5) AND ("name" = 'a'))"#)
        );
        assert_eq!(
            sql(col("name").in_list(vec![lit("it's")], false)).as_deref(),
            Some(r#""name" IN ('it''s')"#)
        );
        assert!(sql(col("name").like(lit("a%"))).is_some());
    }

    #[test]
    fn text_the_unparser_would_escape_wrongly_stays_local() {
        let mut cols = columns();
        cols.push(Column {
            name: "odd\\\"name".into(),
            kind: Kind::Int64,
            nullable: true,
            unsigned: false,
        });
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::Postgres);
        // sqlparser leaves a quote after a backslash, and a doubled one, unescaped.
        assert_eq!(sql(col("name").eq(lit("x\\' OR true OR '"))), None);
        assert_eq!(sql(col("name").eq(lit("a''b"))), None);
        let odd = Expr::Column(DfColumn::new_unqualified("odd\\\"name"));
        assert_eq!(sql(odd.eq(lit(1i64))), None);
        assert!(sql(col("name").eq(lit("back\\slash"))).is_some());
    }

    #[test]
    fn filters_that_could_differ_stay_local() {
        let cols = columns();
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::Postgres);
        // Text order depends on the remote collation.
        assert_eq!(sql(col("name").lt(lit("m"))), None);
        // A column read as text is not the remote type.
        assert_eq!(sql(col("span").eq(lit("1 day"))), None);
        assert_eq!(sql(col("id").gt(lit(f64::NAN))), None);
        assert_eq!(sql(col("missing").eq(lit(1))), None);
        // char(n) ignores padding remotely; unbounded numerics are read as doubles.
        assert_eq!(sql(col("code").eq(lit("ab"))), None);
        assert_eq!(sql(col("n").eq(lit(1.0))), None);
        // Overflow raises remotely.
        assert_eq!(sql((col("id") * col("id")).gt(lit(0i64))), None);
    }

    #[test]
    fn mysql_gets_backticks_and_no_text() {
        let cols = columns();
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::MySql);
        assert_eq!(
            sql(col("id").gt(lit(5i64)).and(col("id").lt_eq(lit(9i64)))).as_deref(),
            Some("((`id` > 5) AND (`id` <= 9))")
        );
        // Text compares under a collation there, and literals read backslashes.
        assert_eq!(sql(col("name").eq(lit("a"))), None);
        assert_eq!(sql(col("id").eq(lit("1"))), None);
        assert!(sql(col("id").is_null()).is_some());
        // Doubles past 30 digits would be read as clipped decimals there.
        assert!(sql(col("id").gt(lit(1e20))).is_some());
        assert_eq!(sql(col("id").gt(lit(1e100))), None);
        assert_eq!(sql(col("id").gt(lit(1e-100))), None);
    }
}
