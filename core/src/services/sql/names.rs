//! Result column names as MindsDB shows them: an alias as written, a column by its stored name
//! (or its display name, for `information_schema`'s upper-case columns), and any other
//! expression by its SQL text (`SELECT 1` gives the column `1`, not DataFusion's `Int64(1)`).

use datafusion::arrow::datatypes::Schema;
use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr, Statement, Value};

use super::snapshot::DISPLAY_NAME;

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
        SelectItem::UnnamedExpr(Expr::Value(v)) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                NameHint::Written(s.clone())
            }
            other => NameHint::Written(other.to_string()),
        },
        SelectItem::UnnamedExpr(expr) => NameHint::Written(expr.to_string()),
        SelectItem::ExprWithAliases { .. } => NameHint::Field,
        SelectItem::QualifiedWildcard(..) | SelectItem::Wildcard(_) => NameHint::Wildcard,
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
