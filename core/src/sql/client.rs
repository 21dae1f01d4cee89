//! What MySQL clients send on connect and their users type to look around, answered as
//! MindsDB answers them: `SHOW [GLOBAL | SESSION] VARIABLES`, `SHOW [GLOBAL | SESSION] STATUS`,
//! `SHOW CHARSET` / `SHOW CHARACTER SET`, `SHOW COLLATION`, and (read by our parser, as
//! `Command::ShowClient`) `SHOW [STORAGE] ENGINES`, `SHOW WARNINGS | ERRORS`,
//! `SHOW FUNCTION | PROCEDURE STATUS` (those with `LIKE 'pattern'` only; the others also
//! with `WHERE condition`); and `SET NAMES …`, `SET autocommit = 1`, `SET @@x = …`,
//! `SET TRANSACTION …`, which are accepted and change nothing (the server variables are
//! constants: `planning::system_variables`). `SET @name = value` is MindsDB's variable, which
//! the runner keeps (`catalog::variables`).
//!
//! A SHOW becomes a query over its rows (a `VALUES` table), so DataFusion evaluates its filter
//! as any WHERE. Two choices differ from MindsDB, which runs these filters in DuckDB: `LIKE`
//! ignores case, as MySQL's does, and the filter may name any column by its shown name in any
//! case (`WHERE variable_name = 'version'`). `SHOW STATUS` has no counters to show and is an
//! empty table rather than MindsDB's "not implemented".

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectName, Set, SetExpr, ShowCharset, ShowStatementFilter, Statement, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::parse::ClientTable;
use super::planning::system_variables::VARIABLES;
use crate::error::{Error, Result};

/// What the runner does with a client's statement.
pub(super) enum ClientStatement {
    /// Runs this query in its place.
    Query(Box<Statement>),
    /// Answers OK and changes nothing.
    Accepted,
    /// `SET @name = value, …`: MindsDB's variables to keep, each with the expression of its
    /// value as written.
    Variables(Vec<(String, Expr)>),
}

/// A shown column: its name as shown, and whether it holds numbers.
type Column = (&'static str, bool);

/// What `statement` is as a client's statement; `None` when it is none.
pub(super) fn read(statement: &Statement) -> Result<Option<ClientStatement>> {
    let query =
        |columns: &[Column], rows: Vec<Vec<String>>, filter: &Option<ShowStatementFilter>| {
            rows_query(columns, &rows, filter.as_ref())
                .map(|q| Some(ClientStatement::Query(Box::new(q))))
        };
    const VARIABLE: [Column; 2] = [("Variable_name", false), ("Value", false)];
    match statement {
        Statement::ShowVariables {
            filter, session, ..
        } => query(&VARIABLE, variables(*session), filter),
        // The session's status is its variables in MindsDB; there are no status counters.
        Statement::ShowStatus {
            filter, session, ..
        } => query(
            &VARIABLE,
            match session {
                true => variables(true),
                false => Vec::new(),
            },
            filter,
        ),
        Statement::ShowCharset(ShowCharset { filter, .. }) => query(
            &[
                ("Charset", false),
                ("Description", false),
                ("Default collation", false),
                ("Maxlen", true),
            ],
            [
                ["utf8", "UTF-8 Unicode", "utf8_general_ci", "3"],
                ["latin1", "cp1252 West European", "latin1_swedish_ci", "1"],
                ["utf8mb4", "UTF-8 Unicode", "utf8mb4_general_ci", "4"],
            ]
            .iter()
            .map(|row| row.iter().map(|s| s.to_string()).collect())
            .collect(),
            filter,
        ),
        Statement::ShowCollation { filter } => query(
            &[
                ("Collation", false),
                ("Charset", false),
                ("Id", true),
                ("Default", false),
                ("Compiled", false),
                ("Sortlen", true),
                ("Pad_attribute", false),
            ],
            [
                [
                    "utf8_general_ci",
                    "utf8",
                    "33",
                    "Yes",
                    "Yes",
                    "1",
                    "PAD SPACE",
                ],
                [
                    "latin1_swedish_ci",
                    "latin1",
                    "8",
                    "Yes",
                    "Yes",
                    "1",
                    "PAD SPACE",
                ],
            ]
            .iter()
            .map(|row| row.iter().map(|s| s.to_string()).collect())
            .collect(),
            filter,
        ),
        Statement::Set(set) => Ok(match user_variables(set) {
            Some(assignments) => Some(ClientStatement::Variables(assignments)),
            None if is_client_setting(set) => Some(ClientStatement::Accepted),
            None => None,
        }),
        _ => Ok(None),
    }
}

/// The query answering a client's SHOW the parser read itself (`Command::ShowClient`).
pub(super) fn show(table: ClientTable, like: Option<&str>) -> Result<Statement> {
    let filter = like.map(|pattern| ShowStatementFilter::Like(pattern.to_string()));
    let filter = filter.as_ref();
    let text =
        |names: &[&'static str]| -> Vec<Column> { names.iter().map(|n| (*n, false)).collect() };
    match table {
        // MindsDB shows information_schema's upper-case names.
        ClientTable::Engines => rows_query(
            &text(&[
                "ENGINE",
                "SUPPORT",
                "COMMENT",
                "TRANSACTIONS",
                "XA",
                "SAVEPOINTS",
            ]),
            &[[
                "InnoDB",
                "DEFAULT",
                "Supports transactions, row-level locking, and foreign keys",
                "YES",
                "YES",
                "YES",
            ]
            .map(String::from)
            .to_vec()],
            filter,
        ),
        // Nothing is kept to show: every statement's outcome is in its own result.
        ClientTable::Warnings | ClientTable::Errors => rows_query(
            &[("Level", false), ("Code", true), ("Message", false)],
            &[],
            filter,
        ),
        // No stored functions or procedures exist. (MindsDB names the second column `Db`
        // too; MySQL's name is `Name`.)
        ClientTable::FunctionStatus | ClientTable::ProcedureStatus => rows_query(
            &text(&[
                "Db",
                "Name",
                "Type",
                "Definer",
                "Modified",
                "Created",
                "Security_type",
                "Comment",
                "character_set_client",
                "collation_connection",
                "Database Collation",
            ]),
            &[],
            filter,
        ),
    }
}

/// The variables `SHOW [SESSION] VARIABLES` lists, as `(name, value)` rows.
fn variables(session_only: bool) -> Vec<Vec<String>> {
    VARIABLES
        .iter()
        .filter(|v| v.session || !session_only)
        .map(|v| vec![v.name.to_string(), v.value.text()])
        .collect()
}

/// The assignments of `set` when it sets MindsDB variables (`@name`, not `@@name`): each name
/// without its `@` and the value's expression. `None` when it sets anything else.
fn user_variables(set: &Set) -> Option<Vec<(String, Expr)>> {
    let user = |name: &ObjectName| match name.0.as_slice() {
        [part] => part
            .as_ident()
            .filter(|ident| ident.quote_style.is_none())
            .and_then(|ident| ident.value.strip_prefix('@'))
            .filter(|rest| !rest.is_empty() && !rest.starts_with('@'))
            .map(str::to_string),
        _ => None,
    };
    match set {
        Set::SingleAssignment {
            variable, values, ..
        } => match values.as_slice() {
            [value] => Some(vec![(user(variable)?, value.clone())]),
            _ => None,
        },
        Set::MultipleAssignments { assignments } => assignments
            .iter()
            .map(|a| Some((user(&a.name)?, a.value.clone())))
            .collect(),
        _ => None,
    }
}

/// Whether `set` is a client's session setting, which is accepted and kept nowhere: every
/// `SET` but one of DataFusion's own settings (`SET datafusion.…`), which is left to it.
fn is_client_setting(set: &Set) -> bool {
    let ours = |name: &str| {
        !name
            .trim_start_matches("@@")
            .to_ascii_lowercase()
            .starts_with("datafusion.")
    };
    match set {
        Set::SetNames { .. } | Set::SetNamesDefault {} | Set::SetTransaction { .. } => true,
        Set::SingleAssignment { variable, .. } => ours(&variable.to_string()),
        Set::MultipleAssignments { assignments } => {
            assignments.iter().all(|a| ours(&a.name.to_string()))
        }
        _ => false,
    }
}

/// `SELECT a AS "A", … FROM (VALUES …) AS t(a, …) [WHERE filter]`: the rows with their shown
/// names; the table's own column names are the shown ones in lower case, so a filter names them
/// as SQL names columns. `LIKE` matches the first column, ignoring case.
fn rows_query(
    columns: &[Column],
    rows: &[Vec<String>],
    filter: Option<&ShowStatementFilter>,
) -> Result<Statement> {
    let quoted = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let lower = |name: &str| name.to_ascii_lowercase();
    let select: Vec<String> = columns
        .iter()
        .map(|(name, _)| format!("{} AS {}", quoted(&lower(name)), quoted(name)))
        .collect();
    let literal = |value: &str, number: bool| match number {
        true => value
            .parse::<i64>()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "NULL".into()),
        false => format!("'{}'", value.replace('\'', "''")),
    };
    // An empty table is one row of NULLs that no row passes.
    let (values, none) = match rows.is_empty() {
        true => (
            vec![format!(
                "({})",
                columns
                    .iter()
                    .map(|(_, number)| match number {
                        true => "CAST(NULL AS BIGINT)",
                        false => "CAST(NULL AS VARCHAR)",
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            )],
            true,
        ),
        false => (
            rows.iter()
                .map(|row| {
                    let cells: Vec<String> = row
                        .iter()
                        .zip(columns)
                        .map(|(value, (_, number))| literal(value, *number))
                        .collect();
                    format!("({})", cells.join(", "))
                })
                .collect(),
            false,
        ),
    };
    let names: Vec<String> = columns
        .iter()
        .map(|(name, _)| quoted(&lower(name)))
        .collect();
    let sql = format!(
        "SELECT {} FROM (VALUES {}) AS shown({}){}",
        select.join(", "),
        values.join(", "),
        names.join(", "),
        if none { " WHERE false" } else { "" }
    );
    let mut statement = Parser::new(&GenericDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_statement())
        .map_err(|e| Error::internal(format!("a SHOW's rows did not parse: {e}")))?;
    let Statement::Query(query) = &mut statement else {
        return Err(Error::internal("a SHOW's rows are not a query"));
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(Error::internal("a SHOW's rows are not a SELECT"));
    };
    let condition = match filter {
        None => None,
        Some(ShowStatementFilter::Where(expr)) => Some(expr.clone()),
        Some(
            ShowStatementFilter::Like(pattern)
            | ShowStatementFilter::ILike(pattern)
            | ShowStatementFilter::NoKeyword(pattern),
        ) => Some(Expr::ILike {
            negated: false,
            any: false,
            expr: Box::new(Expr::Identifier(Ident::with_quote(
                '"',
                lower(columns[0].0),
            ))),
            pattern: Box::new(Expr::Value(
                Value::SingleQuotedString(pattern.clone()).into(),
            )),
            escape_char: None,
        }),
    };
    if let Some(condition) = condition {
        select.selection = Some(match select.selection.take() {
            Some(existing) => Expr::BinaryOp {
                left: Box::new(existing),
                op: datafusion::sql::sqlparser::ast::BinaryOperator::And,
                right: Box::new(condition),
            },
            None => condition,
        });
    }
    Ok(statement)
}
