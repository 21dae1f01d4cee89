//! Result column names as MindsDB shows them: an alias as written, a column by its stored name
//! (or its display name, for `information_schema`'s upper-case columns), and any other
//! expression by its SQL text (`SELECT 1` gives the column `1`, not DataFusion's `Int64(1)`).

use datafusion::arrow::datatypes::Schema;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, UnaryOperator, Value,
};

/// Field metadata key holding the column name to show when it differs from the (lower-case)
/// name SQL resolves, as for `information_schema`'s upper-case columns.
pub(crate) const DISPLAY_NAME: &str = "mindlite.display_name";

/// How one select item names its output column(s).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NameHint {
    /// An alias: shown as written; stored as SQL resolves it (the field name).
    Alias(String),
    /// An expression without alias: its SQL text.
    Written(String),
    /// Use the field's name (or display name).
    Field,
    /// A `*`: any number of fields, each by its name.
    Wildcard,
}

/// The naming hints of a statement's outermost select list, when it has one.
pub(crate) fn hints(statement: &Statement) -> Option<Vec<NameHint>> {
    match statement {
        Statement::Query(query) => query_hints(query),
        Statement::CreateTable(create) => create.query.as_deref().and_then(query_hints),
        _ => None,
    }
}

fn query_hints(query: &Query) -> Option<Vec<NameHint>> {
    set_expr_hints(&query.body)
}

fn set_expr_hints(body: &SetExpr) -> Option<Vec<NameHint>> {
    match body {
        SetExpr::Select(select) => Some(select.projection.iter().map(item_hint).collect()),
        SetExpr::Query(query) => query_hints(query),
        SetExpr::SetOperation { left, .. } => set_expr_hints(left),
        _ => None,
    }
}

fn item_hint(item: &SelectItem) -> NameHint {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => NameHint::Alias(alias.value.clone()),
        SelectItem::UnnamedExpr(Expr::Identifier(_) | Expr::CompoundIdentifier(_)) => {
            NameHint::Field
        }
        SelectItem::UnnamedExpr(expr) => NameHint::Written(written(expr)),
        SelectItem::ExprWithAliases { .. } => NameHint::Field,
        SelectItem::QualifiedWildcard(..) | SelectItem::Wildcard(_) => NameHint::Wildcard,
    }
}

/// Gives the outermost select list's items that would share an output name with an earlier
/// one an alias of their own, as DuckDB and SQLite allow `SELECT a, a` and `SELECT 1 AS c,
/// 2 AS c` where DataFusion refuses duplicate names; `hints` keep showing the names as
/// written. Only a query's result is renamed: a table made from a query needs distinct names.
pub(crate) fn distinct_output_names(statement: &mut Statement, hints: &mut Option<Vec<NameHint>>) {
    match statement {
        Statement::Query(query) => distinct_query_names(query, hints),
        // An INSERT's rows go in by position: their names only have to plan.
        Statement::Insert(insert) => {
            if let Some(source) = insert.source.as_mut() {
                distinct_query_names(source, &mut None);
            }
        }
        _ => {}
    }
}

fn distinct_query_names(query: &mut Query, hints: &mut Option<Vec<NameHint>>) {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    // The next suffix to try for each name: finding a free one never starts over at 2, so
    // 30,000 copies of one name take 30,000 steps, not 450 million.
    let mut next: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (position, item) in select.projection.iter_mut().enumerate() {
        let Some(key) = output_key(item) else {
            continue;
        };
        if seen.insert(key.clone()) {
            continue;
        }
        let counter = next.entry(key.clone()).or_insert(2);
        let unique = loop {
            let name = format!("{key}:{counter}");
            *counter += 1;
            if !seen.contains(&name) {
                break name;
            }
        };
        seen.insert(unique.clone());
        let (expr, shown) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), alias.value.clone()),
            SelectItem::UnnamedExpr(expr) => {
                let shown = match &*expr {
                    Expr::Identifier(ident) => ident.value.clone(),
                    Expr::CompoundIdentifier(parts) => {
                        parts.last().map(|p| p.value.clone()).unwrap_or_default()
                    }
                    other => written(other),
                };
                (expr.clone(), shown)
            }
            _ => continue,
        };
        *item = SelectItem::ExprWithAlias {
            expr,
            alias: Ident::with_quote('"', unique),
        };
        if let Some(hint) = hints.as_mut().and_then(|hints| hints.get_mut(position)) {
            *hint = NameHint::Written(shown);
        }
    }
}

/// Gives each unaliased expression of a view's (outermost) select list its SQL text as alias,
/// so the view's columns are named as MindsDB shows a result's (`a + 1`, not DataFusion's
/// `t.a + Int64(1)`), for whoever reads the view.
pub(crate) fn name_columns_as_written(statement: &mut Statement) {
    let Statement::Query(query) = statement else {
        return;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(expr) = item {
            if !matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                let alias = Ident::with_quote('"', written(expr));
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias,
                };
            }
        }
    }
}

/// The name DataFusion gives a select item's column, as far as two items can share it: an
/// alias, a column's name, or an expression's text without the signs and parentheses
/// DataFusion drops. `None` for a wildcard.
fn output_key(item: &SelectItem) -> Option<String> {
    let expr = match item {
        SelectItem::ExprWithAlias { alias, .. } => return Some(alias.value.to_ascii_lowercase()),
        SelectItem::UnnamedExpr(expr) => expr,
        _ => return None,
    };
    let mut expr = expr;
    loop {
        match expr {
            Expr::Nested(inner) => expr = inner,
            Expr::UnaryOp {
                op: UnaryOperator::Plus,
                expr: inner,
            } => expr = inner,
            _ => break,
        }
    }
    // DataFusion names every subquery `(<subquery>)`, whatever it selects.
    let mut subquery = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(expr, |e| {
        if matches!(
            e,
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. }
        ) {
            subquery = true;
            return std::ops::ControlFlow::Break(());
        }
        std::ops::ControlFlow::Continue(())
    });
    if subquery {
        return Some("(<subquery>)".into());
    }
    Some(match expr {
        Expr::Identifier(ident) => ident.value.to_ascii_lowercase(),
        Expr::CompoundIdentifier(parts) => parts.last()?.value.to_ascii_lowercase(),
        other => other.to_string().to_ascii_lowercase(),
    })
}

/// An expression's SQL text as a column name (a string literal without its quotes).
fn written(expr: &Expr) -> String {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

/// A field's name as shown.
pub(crate) fn field_name(field: &datafusion::arrow::datatypes::Field) -> String {
    field
        .metadata()
        .get(DISPLAY_NAME)
        .cloned()
        .unwrap_or_else(|| field.name().clone())
}

/// Whether names are for showing a result or for storing a new table's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Result column names, as MindsDB shows them.
    Show,
    /// Column names of a table made from a query: aliases as SQL resolves them, so
    /// `CREATE TABLE t AS SELECT a AS Foo` can be queried as `SELECT foo FROM t`.
    Store,
}

/// Column names for `schema`, following `hints` where they line up with the fields.
pub(crate) fn column_names(
    schema: &Schema,
    hints: Option<&[NameHint]>,
    purpose: Purpose,
) -> Vec<String> {
    let fields = schema.fields();
    let by_field = || fields.iter().map(|f| field_name(f)).collect();
    let Some(hints) = hints else {
        return by_field();
    };
    let wildcards = hints.iter().filter(|h| **h == NameHint::Wildcard).count();
    let fixed = hints.len() - wildcards;
    if wildcards > 1 || fixed > fields.len() || (wildcards == 0 && fixed != fields.len()) {
        return by_field();
    }
    let expanded = fields.len() - fixed;
    // bounded: one per field of a planned schema
    let mut names = Vec::with_capacity(fields.len());
    let mut index = 0;
    for hint in hints {
        match hint {
            NameHint::Alias(_) if purpose == Purpose::Store => {
                names.push(fields[index].name().clone());
                index += 1;
            }
            NameHint::Alias(text) | NameHint::Written(text) => {
                names.push(text.clone());
                index += 1;
            }
            NameHint::Field => {
                names.push(field_name(&fields[index]));
                index += 1;
            }
            NameHint::Wildcard => {
                for field in &fields[index..index + expanded] {
                    names.push(field_name(field));
                }
                index += expanded;
            }
        }
    }
    names
}
