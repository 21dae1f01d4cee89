//! `SELECT answer FROM p.agent WHERE question = '…'`: the agent is asked, and its answer is
//! spliced into the statement as a one-row derived table `(question, answer)` under the
//! agent's name (or the query's alias), so DataFusion runs the rest of the query — projection,
//! the WHERE itself, expressions — as usual.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, SetExpr, Statement, TableFactor, Value, ValueWithSpan,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use futures::future::BoxFuture;

use crate::catalog::agents::Agent;
use crate::catalog::quotas::Question;
use crate::error::{Error, Result};
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::SqlRunner;
use crate::tenant::TenantId;

/// What answers an agent asked from SQL: the agent loop (`answer`), which the agents'
/// extension holds. A trait, so that this file and the agent loop, which runs SQL itself (its
/// `sql_query` tool) and asks nothing of this one, do not need each other.
pub(crate) trait AskAgent: Send + Sync {
    /// `agent`'s answer to `question`, for `tenant`, whose plan counted the question already
    /// (`counted` is given back if nothing reached a provider).
    fn ask<'a>(
        &'a self,
        runner: &'a SqlRunner,
        tenant: TenantId,
        counted: Question,
        agent: &'a Agent,
        question: String,
    ) -> BoxFuture<'a, Result<String>>;
}

impl SqlRunner {
    /// When `statement` selects from an agent (and no table of that name exists), asks it
    /// through `asker` and rewrites the statement around the answer; returns whether it did.
    pub(crate) async fn answer_agent_select(
        &self,
        asker: &dyn AskAgent,
        tenant: TenantId,
        db: &str,
        statement: &mut Statement,
    ) -> Result<bool> {
        let Statement::Query(query) = statement else {
            return Ok(false);
        };
        let SetExpr::Select(select) = query.body.as_mut() else {
            return Ok(false);
        };
        if select.from.len() != 1 || !select.from[0].joins.is_empty() {
            return Ok(false);
        }
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = &select.from[0].relation
        else {
            return Ok(false);
        };
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|part| part.as_ident().map(|i| i.value.clone()))
            .collect();
        let (project, agent_name) = match parts.as_slice() {
            [agent] => (db.to_ascii_lowercase(), agent.clone()),
            [project, agent] => (project.to_ascii_lowercase(), agent.clone()),
            _ => return Ok(false),
        };
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        if snapshot.table(&project, &agent_name)?.is_some() {
            return Ok(false);
        }
        let Some(agent) = snapshot.agent(&project, &agent_name)? else {
            return Ok(false);
        };
        drop(snapshot);
        let question = select
            .selection
            .as_ref()
            .and_then(question_of)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "Ask agent '{}' with WHERE question = '…'",
                    agent.name
                ))
            })?;
        let alias = alias
            .as_ref()
            .map(|a| a.name.value.clone())
            .unwrap_or_else(|| agent.name.clone());
        // A question asked through SQL counts against the plan like any other.
        let counted =
            Question::take(&self.services.store, &self.services.config.hosted, tenant).await?;
        let answer = asker
            .ask(self, tenant, counted, &agent, question.clone())
            .await?;
        select.from[0].relation = answer_table(&question, &answer, &alias)?;
        Ok(true)
    }
}

/// The text of a `question = '…'` (or `'…' = question`) found through ANDs.
fn question_of(expr: &Expr) -> Option<String> {
    let Expr::BinaryOp { left, op, right } = expr else {
        return None;
    };
    match op {
        BinaryOperator::And => question_of(left).or_else(|| question_of(right)),
        BinaryOperator::Eq => {
            let is_question = |e: &Expr| match e {
                Expr::Identifier(i) => i.value.eq_ignore_ascii_case("question"),
                Expr::CompoundIdentifier(parts) => parts
                    .last()
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("question")),
                _ => false,
            };
            let text = |e: &Expr| match e {
                Expr::Value(ValueWithSpan {
                    value: Value::SingleQuotedString(s),
                    ..
                }) => Some(s.clone()),
                _ => None,
            };
            if is_question(left) {
                text(right)
            } else if is_question(right) {
                text(left)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `(SELECT '…' AS question, '…' AS answer) AS "alias"`, built by the parser from quoted text.
fn answer_table(question: &str, answer: &str, alias: &str) -> Result<TableFactor> {
    let literal = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let sql = format!(
        "SELECT * FROM (SELECT {} AS question, {} AS answer) AS \"{}\"",
        literal(question),
        literal(answer),
        alias.replace('"', "\"\"")
    );
    let mut parsed = Parser::parse_sql(&GenericDialect {}, &sql)
        .map_err(|e| Error::internal(format!("cannot build the agent's answer table: {e}")))?;
    match parsed.pop() {
        Some(Statement::Query(mut query)) => match query.body.as_mut() {
            SetExpr::Select(select) if !select.from.is_empty() => {
                Ok(select.from.swap_remove(0).relation)
            }
            _ => Err(Error::internal(
                "the agent's answer table did not parse as a SELECT",
            )),
        },
        _ => Err(Error::internal(
            "the agent's answer table did not parse as a query",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn where_of(sql: &str) -> Expr {
        let mut parsed = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        let Some(Statement::Query(query)) = parsed.pop() else {
            panic!()
        };
        let SetExpr::Select(select) = *query.body else {
            panic!()
        };
        select.selection.unwrap()
    }

    #[test]
    fn the_question_is_found_through_ands_on_either_side() {
        let q = |sql| question_of(&where_of(sql));
        assert_eq!(
            q("SELECT * FROM a WHERE question = 'hi'").as_deref(),
            Some("hi")
        );
        assert_eq!(
            q("SELECT * FROM a WHERE x = 1 AND 'yo' = a.question").as_deref(),
            Some("yo")
        );
        assert_eq!(q("SELECT * FROM a WHERE question LIKE 'hi'"), None);
    }

    #[test]
    fn answers_with_quotes_survive() {
        let table = answer_table("it's", "a 'b' \"c\"", "my\"agent").unwrap();
        assert!(
            table.to_string().contains("'a ''b'' \"c\"' AS answer"),
            "{table}"
        );
    }
}
