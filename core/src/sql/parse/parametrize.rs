//! MindsDB's `POST /api/sql/query/utils/parametrize_constants`: a statement's literals turned
//! into named parameters (`:name`), each named after what it is compared with, the column it
//! fills or the alias it has (`param` otherwise; a name used again gets `2`, `3`, …), with the
//! databases and tables the statement names. Editors use it to turn a query into a template.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Ident, ObjectName, SelectItem, SetExpr, Statement, Value, ValueWithSpan,
    Visit, VisitMut, Visitor, VisitorMut,
};
use serde_json::json;

/// A statement with its literals as parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parametrized {
    /// The statement, `:name` where each literal was.
    pub(crate) query: String,
    /// Each parameter: `{"name", "value", "type"}` (`int`, `float`, `str`, `bool`, as Python
    /// names them, since MindsDB's clients read them so).
    pub(crate) parameters: Vec<serde_json::Value>,
    /// The databases it names, each with the tables it names in it.
    pub(crate) databases: BTreeMap<String, BTreeSet<String>>,
}

/// Turns `statement`'s literals into parameters.
pub(crate) fn parametrize(mut statement: Statement) -> Parametrized {
    let mut namer = Namer::default();
    match &mut statement {
        Statement::Insert(insert) => {
            let table = insert.table.to_string();
            let columns: Vec<String> = insert
                .columns
                .iter()
                .map(|c| {
                    c.to_string()
                        .rsplit('.')
                        .next()
                        .unwrap_or("param")
                        .to_string()
                })
                .collect();
            if let Some(source) = &mut insert.source {
                if let SetExpr::Values(values) = source.body.as_mut() {
                    for row in &mut values.rows {
                        for (i, value) in row.iter_mut().enumerate() {
                            let name = columns.get(i).cloned().unwrap_or_else(|| {
                                table.rsplit('.').next().unwrap_or("param").to_string()
                            });
                            namer.replace(value, &name);
                        }
                    }
                }
            }
        }
        Statement::Update(update) => {
            for assignment in &mut update.assignments {
                let name = assignment.target.to_string();
                let name = name.rsplit('.').next().unwrap_or("param").to_string();
                namer.replace(&mut assignment.value, &name);
            }
        }
        Statement::Query(query) => {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::ExprWithAlias { expr, alias } = item {
                        namer.replace(expr, &alias.value);
                    }
                }
            }
        }
        _ => {}
    }
    let _ = VisitMut::visit(&mut statement, &mut namer);
    let mut tables = Tables::default();
    let _ = Visit::visit(&statement, &mut tables);
    Parametrized {
        query: statement.to_string(),
        parameters: namer.parameters,
        databases: tables.databases,
    }
}

/// Names and collects the parameters.
#[derive(Default)]
struct Namer {
    parameters: Vec<serde_json::Value>,
    used: HashMap<String, usize>,
}

impl Namer {
    /// Makes `expr` a parameter named after `name` when it is a literal.
    fn replace(&mut self, expr: &mut Expr, name: &str) {
        let Expr::Value(ValueWithSpan { value, .. }) = expr else {
            return;
        };
        let (json, kind) = match value {
            Value::Number(text, _) => match text.parse::<i64>() {
                Ok(n) => (json!(n), "int"),
                Err(_) => match text.parse::<f64>() {
                    Ok(x) => (json!(x), "float"),
                    Err(_) => (json!(text), "str"),
                },
            },
            Value::SingleQuotedString(text) | Value::DoubleQuotedString(text) => {
                (json!(text), "str")
            }
            Value::Boolean(b) => (json!(b), "bool"),
            _ => return,
        };
        let count = self.used.entry(name.to_string()).or_insert(0);
        *count += 1;
        let name = match *count {
            1 => name.to_string(),
            n => format!("{name}{n}"),
        };
        self.parameters
            .push(json!({"name": name, "value": json, "type": kind}));
        *value = Value::Placeholder(format!(":{name}"));
    }
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let name = |side: &Expr| match side {
            Expr::Identifier(ident) => Some(ident.value.clone()),
            Expr::CompoundIdentifier(parts) => parts.last().map(|p: &Ident| p.value.clone()),
            _ => None,
        };
        match expr {
            // A comparison names its literal after the column on its other side.
            Expr::BinaryOp { left, op, right }
                if !matches!(op, BinaryOperator::And | BinaryOperator::Or) =>
            {
                if let Some(column) = name(left) {
                    self.replace(right, &column);
                } else if let Some(column) = name(right) {
                    self.replace(left, &column);
                }
            }
            Expr::Between {
                expr, low, high, ..
            } => {
                if let Some(column) = name(expr) {
                    self.replace(low, &column);
                    self.replace(high, &column);
                }
            }
            Expr::Value(_) => self.replace(expr, "param"),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// The databases and tables a statement names (`db.table`; one-part names name none).
#[derive(Default)]
struct Tables {
    databases: BTreeMap<String, BTreeSet<String>>,
}

impl Visitor for Tables {
    type Break = ();

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
        let parts: Vec<String> = relation
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
            .collect();
        if let [db, rest @ ..] = parts.as_slice() {
            if !rest.is_empty() {
                self.databases
                    .entry(db.clone())
                    .or_default()
                    .insert(rest.join("."));
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::MySqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn run(sql: &str) -> Parametrized {
        let statement = Parser::parse_sql(&MySqlDialect {}, sql).unwrap().remove(0);
        parametrize(statement)
    }

    #[test]
    fn literals_are_named_after_what_they_meet() {
        let done = run("SELECT a, 5 AS five FROM db.t JOIN other.s.u ON t.x = u.x \
             WHERE b = 'x' AND c > 3 AND d BETWEEN 1 AND 2.5 AND b <> 'y' LIMIT 10");
        assert_eq!(
            done.query,
            "SELECT a, :five AS five FROM db.t JOIN other.s.u ON t.x = u.x WHERE b = :b AND c > :c AND d BETWEEN :d AND :d2 AND b <> :b2 LIMIT :param"
        );
        assert_eq!(
            done.parameters[0],
            json!({"name": "five", "value": 5, "type": "int"})
        );
        assert_eq!(
            done.parameters[1],
            json!({"name": "b", "value": "x", "type": "str"})
        );
        assert_eq!(
            done.parameters[4],
            json!({"name": "d2", "value": 2.5, "type": "float"})
        );
        assert_eq!(done.databases["db"], BTreeSet::from(["t".to_string()]));
        assert_eq!(done.databases["other"], BTreeSet::from(["s.u".to_string()]));

        let insert = run("INSERT INTO p.t (id, name) VALUES (1, 'a'), (2, 'b')");
        assert_eq!(
            insert.query,
            "INSERT INTO p.t (id, name) VALUES (:id, :name), (:id2, :name2)"
        );
        let update = run("UPDATE p.t SET name = 'z', n = n + 1 WHERE id = 7");
        assert_eq!(
            update.query,
            "UPDATE p.t SET name = :name, n = n + :n WHERE id = :id"
        );
    }
}
