//! The SQL written for a remote server: DataFusion's unparser in the server's dialect, with
//! two things of ours that make what is sent mean exactly what DataFusion computes.
//!
//! - **Text literals** are written by us, not by sqlparser (whose escaping leaves a quote after
//!   a backslash, and a doubled quote, as they are): PostgreSQL gets `E'…'` with every quote
//!   and backslash escaped, which reads alike under any `standard_conforming_strings`; MySQL
//!   gets `_utf8mb4 X'…'`, hexadecimal, which no `sql_mode` reads differently and whose
//!   collation yields to a column's (coercibility 4).
//! - **Exact text** ([`exact_text`]): DataFusion compares text by its bytes. PostgreSQL's
//!   deterministic collations agree on equality but not on order, so ordering (`<`, BETWEEN,
//!   ORDER BY) is written under `COLLATE "C"`, which is byte (code point) order in a UTF-8
//!   database. MySQL's collations ignore case and trailing spaces even for equality, so every
//!   comparison of text there (`=`, `<`, IN, BETWEEN, LIKE, CASE's operand, GROUP BY and join
//!   keys, ORDER BY) reads `CAST(CONVERT(x USING utf8mb4) AS BINARY)`: the UTF-8 bytes, in
//!   whatever character set the column is. An index on the column does not serve such a
//!   comparison; what is saved is the rows not moved.
//!
//! LIKE over bytes matches `_` to one byte, not one character: a MySQL LIKE is sent only when
//! its pattern is a literal with no `_` and no backslash (whose meaning `sql_mode` changes);
//! `%` over bytes matches what it matches over characters, as UTF-8 never starts a character
//! inside another.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::{InList, ScalarFunction, WindowFunction};
use datafusion::logical_expr::{
    Between, BinaryExpr, ColumnarValue, Expr, ExprSchemable, Like, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, CastKind, Ident, ObjectName, Value, WindowFrameBound,
};
use datafusion::sql::unparser::dialect::{
    CharacterLengthStyle, DateFieldExtractStyle, Dialect as Written, DistinctFromStyle,
    IntervalStyle, MySqlDialect, PostgreSqlDialect,
};
use datafusion::sql::unparser::Unparser;

/// Whose SQL is written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Dialect {
    Postgres,
    MySql,
}

static POSTGRES: Sql = Sql(Dialect::Postgres);
static MYSQL: Sql = Sql(Dialect::MySql);

impl Dialect {
    /// DataFusion's unparser writing this dialect with our literals and exact text.
    pub(crate) fn unparser(self) -> Unparser<'static> {
        Unparser::new(match self {
            Dialect::Postgres => &POSTGRES,
            Dialect::MySql => &MYSQL,
        })
    }
}

/// Whether `data_type` is text.
pub(crate) fn is_text_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// Whether `expr` over `schema` is text ([`exact_text`] has checked every operand's type).
fn is_text(expr: &Expr, schema: &DFSchema) -> bool {
    expr.get_type(schema).is_ok_and(|t| is_text_type(&t))
}

/// The name of the marker function [`exact`] wraps text in; it is only ever written as SQL.
const EXACT: &str = "mindlite_exact_text";

/// The name of the marker function [`raw_sql`] holds its SQL in.
const RAW: &str = "mindlite_raw_sql";

/// A function that is only written into a remote statement, never evaluated here: our
/// markers ([`EXACT`], [`RAW`]) and the server's own functions ([`postgres_div`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Marker {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Marker {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Utf8))
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(DataFusionError::Internal(format!(
            "{} is only written into a remote statement",
            self.name
        )))
    }
}

fn marker(name: &'static str) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::from(Marker {
        name,
        signature: Signature::variadic_any(Volatility::Immutable),
    }))
}

static EXACT_UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| marker(EXACT));
static RAW_UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| marker(RAW));
static DIV_UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| marker("div"));

/// `expr` (text) compared by its bytes wherever it is written.
pub(crate) fn exact(expr: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&EXACT_UDF), vec![expr]))
}

/// A piece of SQL written by us (a subquery's statement), placed in an expression as it is.
pub(crate) fn raw_sql(sql: String) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::clone(&RAW_UDF),
        vec![Expr::Literal(ScalarValue::Utf8(Some(sql)), None)],
    ))
}

/// PostgreSQL's `div(a, b)`: the integer quotient of numerics, truncated toward zero.
pub(crate) fn postgres_div(a: Expr, b: Expr) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&DIV_UDF), vec![a, b]))
}

/// `expr` over `schema` with every comparison of text written to compare as DataFusion does
/// (see the module comment): ordering in both dialects, everything in MySQL's. Sort keys and
/// group keys are the caller's to wrap ([`exact`]).
pub(crate) fn exact_text(expr: Expr, schema: &DFSchema, dialect: Dialect) -> DfResult<Expr> {
    let mysql = dialect == Dialect::MySql;
    // An operand whose type is unknown cannot be written exactly (on MySQL it would compare
    // under the collation): the error keeps the expression here.
    expr.apply(|e| {
        let operands: Vec<&Expr> = match e {
            Expr::BinaryExpr(b) => vec![&b.left, &b.right],
            Expr::Between(b) => vec![&b.expr],
            Expr::InList(list) => vec![&list.expr],
            Expr::Like(like) => vec![&like.expr],
            Expr::Case(case) => case.expr.iter().map(AsRef::as_ref).collect(),
            Expr::WindowFunction(window) => {
                window.params.order_by.iter().map(|s| &s.expr).collect()
            }
            _ => Vec::new(),
        };
        for operand in operands {
            operand.get_type(schema)?;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let wrap = |e: Expr| -> Expr {
        if is_text(&e, schema) {
            exact(e)
        } else {
            e
        }
    };
    Ok(expr
        .transform_up(|e| {
            Ok(match e {
                Expr::BinaryExpr(BinaryExpr { left, op, right })
                    if (matches!(
                        op,
                        Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
                    ) || (mysql
                        && matches!(
                            op,
                            Operator::Eq
                                | Operator::NotEq
                                | Operator::IsDistinctFrom
                                | Operator::IsNotDistinctFrom
                        )))
                        && (is_text(&left, schema) || is_text(&right, schema)) =>
                {
                    Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(wrap(*left)),
                        op,
                        Box::new(wrap(*right)),
                    )))
                }
                Expr::Between(b) if is_text(&b.expr, schema) => {
                    Transformed::yes(Expr::Between(Between::new(
                        Box::new(wrap(*b.expr)),
                        b.negated,
                        Box::new(wrap(*b.low)),
                        Box::new(wrap(*b.high)),
                    )))
                }
                Expr::InList(list) if mysql && is_text(&list.expr, schema) => {
                    Transformed::yes(Expr::InList(InList::new(
                        Box::new(wrap(*list.expr)),
                        list.list.into_iter().map(wrap).collect(),
                        list.negated,
                    )))
                }
                Expr::Like(like) if mysql && is_text(&like.expr, schema) => {
                    Transformed::yes(Expr::Like(Like::new(
                        like.negated,
                        Box::new(wrap(*like.expr)),
                        Box::new(wrap(*like.pattern)),
                        like.escape_char,
                        like.case_insensitive,
                    )))
                }
                Expr::Case(mut case)
                    if mysql && case.expr.as_deref().is_some_and(|e| is_text(e, schema)) =>
                {
                    case.expr = case.expr.map(|e| Box::new(wrap(*e)));
                    case.when_then_expr = case
                        .when_then_expr
                        .into_iter()
                        .map(|(w, t)| (Box::new(wrap(*w)), t))
                        .collect();
                    Transformed::yes(Expr::Case(case))
                }
                Expr::WindowFunction(mut window) => {
                    let WindowFunction { params, .. } = window.as_mut();
                    let text = params.order_by.iter().any(|s| is_text(&s.expr, schema));
                    for sort in &mut params.order_by {
                        sort.expr = wrap(sort.expr.clone());
                    }
                    if text {
                        Transformed::yes(Expr::WindowFunction(window))
                    } else {
                        Transformed::no(Expr::WindowFunction(window))
                    }
                }
                other => Transformed::no(other),
            })
        })?
        .data)
}

/// Whether a MySQL LIKE `pattern` matches over bytes as over characters (see the module
/// comment).
pub(crate) fn mysql_like_pattern(pattern: &Expr) -> bool {
    matches!(
        pattern,
        Expr::Literal(ScalarValue::Utf8(Some(p))
            | ScalarValue::LargeUtf8(Some(p))
            | ScalarValue::Utf8View(Some(p)), _)
            if !p.contains(['_', '\\'])
    )
}

/// The unparser's dialect for one of ours: everything as DataFusion's own dialect writes it,
/// but text literals and [`exact`].
struct Sql(Dialect);

impl Sql {
    fn inner(&self) -> &'static dyn Written {
        static PG: PostgreSqlDialect = PostgreSqlDialect {};
        static MY: MySqlDialect = MySqlDialect {};
        match self.0 {
            Dialect::Postgres => &PG,
            Dialect::MySql => &MY,
        }
    }
}

/// An identifier written as it is: how a piece of SQL we wrote ourselves enters the AST.
fn raw(sql: String) -> ast::Expr {
    ast::Expr::Identifier(Ident {
        value: sql,
        quote_style: None,
        span: datafusion::sql::sqlparser::tokenizer::Span::empty(),
    })
}

/// `text` as a PostgreSQL escape string, `E'…'`: backslashes and quotes escaped, so it reads
/// alike whatever `standard_conforming_strings` says.
pub(crate) fn postgres_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3); // bounded: the literal's own length
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

impl Written for Sql {
    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        self.inner().identifier_quote_style(identifier)
    }
    fn use_array_keyword_for_array_literals(&self) -> bool {
        self.inner().use_array_keyword_for_array_literals()
    }
    fn supports_nulls_first_in_sort(&self) -> bool {
        self.inner().supports_nulls_first_in_sort()
    }
    fn use_timestamp_for_date64(&self) -> bool {
        self.inner().use_timestamp_for_date64()
    }
    fn interval_style(&self) -> IntervalStyle {
        self.inner().interval_style()
    }
    fn float64_ast_dtype(&self) -> ast::DataType {
        self.inner().float64_ast_dtype()
    }
    fn utf8_cast_dtype(&self) -> ast::DataType {
        self.inner().utf8_cast_dtype()
    }
    fn large_utf8_cast_dtype(&self) -> ast::DataType {
        self.inner().large_utf8_cast_dtype()
    }
    fn date_field_extract_style(&self) -> DateFieldExtractStyle {
        self.inner().date_field_extract_style()
    }
    fn distinct_from_style(&self) -> DistinctFromStyle {
        self.inner().distinct_from_style()
    }
    fn character_length_style(&self) -> CharacterLengthStyle {
        self.inner().character_length_style()
    }
    fn int64_cast_dtype(&self) -> ast::DataType {
        self.inner().int64_cast_dtype()
    }
    fn int8_cast_dtype(&self) -> ast::DataType {
        self.inner().int8_cast_dtype()
    }
    fn int32_cast_dtype(&self) -> ast::DataType {
        self.inner().int32_cast_dtype()
    }
    fn timestamp_cast_dtype(&self, unit: &TimeUnit, tz: &Option<Arc<str>>) -> ast::DataType {
        self.inner().timestamp_cast_dtype(unit, tz)
    }
    fn date32_cast_dtype(&self) -> ast::DataType {
        self.inner().date32_cast_dtype()
    }
    fn supports_column_alias_in_table_alias(&self) -> bool {
        self.inner().supports_column_alias_in_table_alias()
    }
    fn requires_derived_table_alias(&self) -> bool {
        self.inner().requires_derived_table_alias()
    }
    fn division_operator(&self) -> BinaryOperator {
        self.inner().division_operator()
    }
    fn scalar_function_to_sql_overrides(
        &self,
        unparser: &Unparser,
        func_name: &str,
        args: &[Expr],
    ) -> DfResult<Option<ast::Expr>> {
        if func_name == RAW {
            let [Expr::Literal(ScalarValue::Utf8(Some(sql)), _)] = args else {
                return Err(DataFusionError::Internal(format!("{RAW} holds its SQL")));
            };
            return Ok(Some(raw(sql.clone())));
        }
        if func_name != EXACT {
            return self
                .inner()
                .scalar_function_to_sql_overrides(unparser, func_name, args);
        }
        let [arg] = args else {
            return Err(DataFusionError::Internal(format!(
                "{EXACT} takes one value"
            )));
        };
        let inner = Box::new(ast::Expr::Nested(Box::new(unparser.expr_to_sql(arg)?)));
        Ok(Some(match self.0 {
            Dialect::Postgres => ast::Expr::Collate {
                expr: inner,
                collation: ObjectName::from(vec![Ident::with_quote('"', "C")]),
            },
            Dialect::MySql => ast::Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(ast::Expr::Convert {
                    is_try: false,
                    expr: inner,
                    data_type: None,
                    charset: Some(ObjectName::from(vec![Ident::new("utf8mb4")])),
                    target_before_value: false,
                    styles: vec![],
                }),
                data_type: ast::DataType::Binary(None),
                array: false,
                format: None,
            },
        }))
    }
    fn higher_order_function_to_sql_overrides(
        &self,
        unparser: &Unparser,
        func_name: &str,
        args: &[Expr],
    ) -> DfResult<Option<ast::Expr>> {
        self.inner()
            .higher_order_function_to_sql_overrides(unparser, func_name, args)
    }
    fn window_func_support_window_frame(
        &self,
        func_name: &str,
        start_bound: &WindowFrameBound,
        end_bound: &WindowFrameBound,
    ) -> bool {
        self.inner()
            .window_func_support_window_frame(func_name, start_bound, end_bound)
    }
    fn full_qualified_col(&self) -> bool {
        self.inner().full_qualified_col()
    }
    fn unnest_as_table_factor(&self) -> bool {
        self.inner().unnest_as_table_factor()
    }
    fn unnest_as_lateral_flatten(&self) -> bool {
        self.inner().unnest_as_lateral_flatten()
    }
    fn col_alias_overrides(&self, alias: &str) -> DfResult<Option<String>> {
        self.inner().col_alias_overrides(alias)
    }
    fn supports_qualify(&self) -> bool {
        self.inner().supports_qualify()
    }
    fn timestamp_with_tz_to_string(&self, dt: chrono::DateTime<Tz>, unit: TimeUnit) -> String {
        self.inner().timestamp_with_tz_to_string(dt, unit)
    }
    fn supports_empty_select_list(&self) -> bool {
        self.inner().supports_empty_select_list()
    }
    fn string_literal_to_sql(&self, text: &str) -> Option<ast::Expr> {
        Some(match self.0 {
            Dialect::Postgres => raw(postgres_literal(text)),
            Dialect::MySql => {
                let hex: String = text.bytes().map(|b| format!("{b:02X}")).collect();
                ast::Expr::Prefixed {
                    prefix: Ident::new("_utf8mb4"),
                    value: Box::new(ast::Expr::value(Value::HexStringLiteral(hex))),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::logical_expr::{col, lit};

    fn schema() -> DFSchema {
        DFSchema::try_from(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
        ]))
        .unwrap()
    }

    fn written(e: Expr, dialect: Dialect) -> String {
        let e = exact_text(e, &schema(), dialect).unwrap();
        dialect.unparser().expr_to_sql(&e).unwrap().to_string()
    }

    #[test]
    fn literals_read_alike_under_any_setting() {
        assert_eq!(postgres_literal(r"a\'b''c"), r"E'a\\''b''''c'");
        assert_eq!(
            written(col("id").eq(lit(1i64)).and(col("name").eq(lit("a'\\"))), Dialect::MySql),
            "((`id` = 1) AND (CAST(CONVERT((`name`) USING utf8mb4) AS BINARY) = CAST(CONVERT((_utf8mb4 X'61275C') USING utf8mb4) AS BINARY)))"
        );
        assert_eq!(
            written(col("name").eq(lit("it's")), Dialect::Postgres),
            r#"("name" = E'it''s')"#
        );
    }

    #[test]
    fn text_order_is_byte_order() {
        assert_eq!(
            written(col("name").lt(lit("m")), Dialect::Postgres),
            r#"(("name") COLLATE "C" < (E'm') COLLATE "C")"#
        );
        assert_eq!(
            written(
                col("name").in_list(vec![lit("A")], false),
                Dialect::Postgres
            ),
            r#""name" IN (E'A')"#
        );
        assert!(
            written(col("name").in_list(vec![lit("A")], true), Dialect::MySql)
                .starts_with("CAST(CONVERT((`name`) USING utf8mb4) AS BINARY) NOT IN")
        );
        assert!(written(col("id").lt(lit(3i64)), Dialect::MySql) == "(`id` < 3)");
    }

    #[test]
    fn mysql_like_only_without_underscores_or_backslashes() {
        assert!(mysql_like_pattern(&lit("%BRASS")));
        assert!(!mysql_like_pattern(&lit("a_c")));
        assert!(!mysql_like_pattern(&lit("50\\%")));
        assert!(!mysql_like_pattern(&col("name")));
    }
}
