//! Which filters of a query go to the remote database, and their SQL text. A filter is sent
//! only when the remote database would compute exactly what DataFusion computes, so the rows
//! that come back need no second check: comparisons, AND/OR/NOT, `IS [NOT] NULL`, IN lists,
//! BETWEEN and LIKE over columns and literals. Arithmetic stays local, as do columns whose
//! remote comparison differs (see `Kind::compares_alike`). The text is DataFusion's
//! unparser's in the server's dialect, with text literals and text comparisons written by
//! `dialect` so they compare by bytes as DataFusion does (PostgreSQL orders text under
//! `COLLATE "C"`; MySQL compares every text as its UTF-8 bytes).

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column as DfColumn, DFSchema, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

pub(crate) use super::dialect::Dialect;
use super::dialect::{exact_text, mysql_like_pattern};
use super::postgres::{Column, Kind};

/// The SQL condition for `filter` over `columns`, or `None` when it must run locally.
pub(crate) fn remote_filter(filter: &Expr, columns: &[Column], dialect: Dialect) -> Option<String> {
    if !supported(filter, columns, dialect) {
        return None;
    }
    if dialect == Dialect::MySql && has_long_double(filter) {
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
    // bounded: one field per column of the table, which `datasources.max_columns` bounds
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| Field::new(&c.name, c.kind.data_type(), true))
        .collect();
    let schema = DFSchema::try_from(Schema::new(fields)).ok()?;
    let exact = exact_text(bare, &schema, dialect).ok()?;
    let sql = dialect.unparser().expr_to_sql(&exact).ok()?;
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

/// Whether `expr` is a text column or a text literal.
fn is_text(expr: &Expr, columns: &[Column]) -> bool {
    match expr {
        Expr::Column(_) => matches!(
            column_kind(expr, columns),
            Some(Kind::Text | Kind::LooseText)
        ),
        Expr::Literal(v, _) => matches!(
            v,
            ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Utf8View(_)
        ),
        _ => false,
    }
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
        // Written by `dialect`, escaped for the server whatever it holds; but PostgreSQL's text
        // holds no NUL, and would refuse what compares here.
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
            v.as_deref().is_none_or(|t| !t.contains('\0'))
        }
        // NaN and infinities compare differently in PostgreSQL. A real (f32) literal would be
        // written as a decimal that PostgreSQL compares as numeric, not as real.
        ScalarValue::Float64(v) => v.is_none_or(|v| v.is_finite()),
        _ => false,
    }
}

fn supported(expr: &Expr, columns: &[Column], dialect: Dialect) -> bool {
    let ok = |e: &Expr| supported(e, columns, dialect);
    match expr {
        // A name holding a quote would be written with sqlparser's escaping, which leaves a
        // quote after a backslash as it is: compared here.
        Expr::Column(c) => {
            !c.name.contains(['"', '`'])
                && column_kind(expr, columns).is_some_and(|kind| {
                    kind.compares_alike()
                        // MySQL's text is compared by its bytes (`dialect`).
                        || (dialect == Dialect::MySql && kind == Kind::LooseText)
                })
        }
        Expr::Literal(value, _) => literal_ok(value),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            // Arithmetic stays local: PostgreSQL raises on integer overflow where Arrow
            // kernels differ, and literal types (numeric vs double) change results.
            let allowed = matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::And
                    | Operator::Or
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
            );
            // MySQL compares text with a number as numbers (`'1abc' = 1`), where DataFusion
            // casts the text and fails: only text with text goes there.
            let mixed = dialect == Dialect::MySql
                && !matches!(op, Operator::And | Operator::Or)
                && is_text(left, columns) != is_text(right, columns);
            allowed && !mixed && ok(left) && ok(right)
        }
        Expr::Not(e)
        | Expr::IsNull(e)
        | Expr::IsNotNull(e)
        | Expr::IsTrue(e)
        | Expr::IsFalse(e)
        | Expr::IsNotTrue(e)
        | Expr::IsNotFalse(e) => ok(e),
        Expr::Between(b) => ok(&b.expr) && ok(&b.low) && ok(&b.high),
        Expr::InList(list) => {
            ok(&list.expr)
                && list
                    .list
                    .iter()
                    .all(|e| matches!(e, Expr::Literal(v, _) if literal_ok(v) && !v.is_null()))
        }
        Expr::Like(like) => {
            like.escape_char.is_none()
                && (dialect == Dialect::Postgres
                    || (!like.case_insensitive && mysql_like_pattern(&like.pattern)))
                && ok(&like.expr)
                && ok(&like.pattern)
        }
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
            Some(r#"(("id" > 5) AND ("name" = E'a'))"#)
        );
        assert_eq!(
            sql(col("name").in_list(vec![lit("it's")], false)).as_deref(),
            Some(r#""name" IN (E'it''s')"#)
        );
        assert!(sql(col("name").like(lit("a%"))).is_some());
    }

    #[test]
    fn text_is_escaped_for_the_server_and_odd_names_stay_local() {
        let mut cols = columns();
        cols.push(Column {
            name: "odd\\\"name".into(),
            kind: Kind::Int64,
            nullable: true,
            unsigned: false,
        });
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::Postgres);
        // sqlparser would leave a quote after a backslash, and a doubled one, unescaped.
        assert_eq!(
            sql(col("name").eq(lit("x\\' OR true OR '"))).as_deref(),
            Some(r#"("name" = E'x\\'' OR true OR ''')"#)
        );
        assert_eq!(
            sql(col("name").eq(lit("a''b"))).as_deref(),
            Some(r#"("name" = E'a''''b')"#)
        );
        let odd = Expr::Column(DfColumn::new_unqualified("odd\\\"name"));
        assert_eq!(sql(odd.eq(lit(1i64))), None);
        assert!(sql(col("name").eq(lit("back\\slash"))).is_some());
    }

    #[test]
    fn filters_that_could_differ_stay_local() {
        let cols = columns();
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::Postgres);
        // Text order is byte order there too.
        assert_eq!(
            sql(col("name").lt(lit("m"))).as_deref(),
            Some(r#"(("name") COLLATE "C" < (E'm') COLLATE "C")"#)
        );
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
    fn mysql_gets_backticks_and_text_as_bytes() {
        let cols = columns();
        let sql = |e: Expr| remote_filter(&e, &cols, Dialect::MySql);
        assert_eq!(
            sql(col("id").gt(lit(5i64)).and(col("id").lt_eq(lit(9i64)))).as_deref(),
            Some("((`id` > 5) AND (`id` <= 9))")
        );
        // Text compares by its bytes there, and literals are hexadecimal.
        assert_eq!(
            sql(col("name").eq(lit("a\\"))).as_deref(),
            Some("(CAST(CONVERT((`name`) USING utf8mb4) AS BINARY) = CAST(CONVERT((_utf8mb4 X'615C') USING utf8mb4) AS BINARY))")
        );
        assert!(sql(col("name").like(lit("%a%"))).is_some());
        assert_eq!(sql(col("name").like(lit("a_"))), None);
        assert_eq!(sql(col("name").like(lit("a\\%"))), None);
        assert_eq!(sql(col("id").eq(lit("1"))), None);
        assert!(sql(col("id").is_null()).is_some());
        // Doubles past 30 digits would be read as clipped decimals there.
        assert!(sql(col("id").gt(lit(1e20))).is_some());
        assert_eq!(sql(col("id").gt(lit(1e100))), None);
        assert_eq!(sql(col("id").gt(lit(1e-100))), None);
    }
}
