//! Transaction statements: `BEGIN` / `START TRANSACTION`, `COMMIT` / `END`, `ROLLBACK`,
//! `SAVEPOINT`, `RELEASE`, `ROLLBACK TO`, and what may not run inside a transaction.
//!
//! Who may open one: in-process callers of the local edition (Rust, C, Python, the shell),
//! whose engine is one connection. MindsDB's HTTP API commits every statement on its own, and
//! so does ours; the hosted edition serves many tenants from one engine, where one tenant's
//! open transaction would hold every other tenant's writes, so it never opens one.
//! How a transaction is kept is the store's (`store::transaction`).

use datafusion::sql::sqlparser::ast::Statement;

use super::request::{Outcome, QueryRequest};
use super::SqlRunner;
use crate::config::Edition;
use crate::error::{Error, Result};
use crate::store::Step;

/// The transaction steps `statement` takes, if it is a transaction statement.
pub(crate) fn steps_of(statement: &Statement) -> Option<Result<Vec<Step>>> {
    let name = |ident: &datafusion::sql::sqlparser::ast::Ident| ident.value.clone();
    Some(Ok(match statement {
        Statement::StartTransaction { statements, .. } if !statements.is_empty() => {
            return Some(Err(Error::invalid(
                "BEGIN … END blocks of statements are not supported; use BEGIN; …; COMMIT",
            )))
        }
        Statement::StartTransaction { .. } => vec![Step::Begin],
        Statement::Commit { chain: false, .. } => vec![Step::Commit],
        // `AND CHAIN` opens the next transaction at once.
        Statement::Commit { chain: true, .. } => vec![Step::Commit, Step::Begin],
        Statement::Rollback {
            savepoint: Some(savepoint),
            ..
        } => vec![Step::RollbackTo(name(savepoint))],
        Statement::Rollback { chain, .. } => match chain {
            false => vec![Step::Rollback],
            true => vec![Step::Rollback, Step::Begin],
        },
        Statement::Savepoint { name: savepoint } => vec![Step::Savepoint(name(savepoint))],
        Statement::ReleaseSavepoint { name: savepoint } => vec![Step::Release(name(savepoint))],
        _ => return None,
    }))
}

impl SqlRunner {
    /// Runs a transaction statement's `steps` for `request`.
    pub(crate) async fn transaction(
        &self,
        request: &QueryRequest,
        statement: &Statement,
        steps: Vec<Step>,
    ) -> Result<Outcome> {
        let shown = statement_keyword(statement);
        if request.autocommit {
            // Every statement here committed on its own, so there is nothing open to end:
            // COMMIT and ROLLBACK do nothing, as MySQL's do with autocommit on (and MindsDB's
            // always). Drivers send them unasked (PyMySQL's commit, SQLAlchemy's pool resetting
            // a connection). A transaction cannot be opened: it would end with the request.
            if steps
                .iter()
                .all(|step| matches!(step, Step::Commit | Step::Rollback))
            {
                return Ok(Outcome::Ok {
                    affected_rows: None,
                });
            }
            return Err(Error::invalid(format!(
                "{shown} is not supported over HTTP or MySQL: every statement commits on its own, as MindsDB's does"
            )));
        }
        if self.services.config.edition == Edition::Hosted {
            return Err(Error::invalid(format!(
                "{shown} is not supported in the hosted edition: every statement commits on its own"
            )));
        }
        for step in steps {
            self.services.store.transaction_step(step).await?;
        }
        Ok(Outcome::Ok {
            affected_rows: None,
        })
    }

    /// Fails when a transaction is open: `what` cannot be part of one (its effects could not
    /// be rolled back, or outlive it).
    pub(crate) fn outside_transaction(&self, what: &str) -> Result<()> {
        if self.services.store.in_transaction() {
            return Err(Error::invalid(format!(
                "{what} cannot run inside a transaction; COMMIT or ROLLBACK first"
            )));
        }
        Ok(())
    }
}

/// How to name a transaction statement in messages.
fn statement_keyword(statement: &Statement) -> &'static str {
    match statement {
        Statement::StartTransaction { .. } => "BEGIN",
        Statement::Commit { .. } => "COMMIT",
        Statement::Rollback { .. } => "ROLLBACK",
        Statement::Savepoint { .. } => "SAVEPOINT",
        _ => "RELEASE",
    }
}
