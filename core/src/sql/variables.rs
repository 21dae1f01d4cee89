//! The runner's side of MindsDB's variables: `SET @name = value` keeps a value
//! (`catalog::variables`), and the parser reads `@name` in a statement's values from the
//! request's parameters or, failing those, from what was kept (`parse::variables`).
//!
//! A value is a literal or `from_env('MDB_…')`, MindsDB's way to take a secret from the
//! server's environment. Only variables whose names start with `MDB_` can be read, as in
//! MindsDB, and only in the local edition: in the hosted one the environment is the
//! operator's, not the tenant's.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator, Value,
};
use serde_json::Value as Json;

use super::SqlRunner;
use crate::catalog::variables;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::tenant::TenantId;

/// The prefix of the environment variables `from_env` may read.
const ENV_PREFIX: &str = "MDB_";

impl SqlRunner {
    /// `SET @name = value, …`: keeps each value for `tenant`, all in one transaction.
    pub(super) async fn set_variables(
        &self,
        tenant: TenantId,
        assignments: Vec<(String, Expr)>,
    ) -> Result<()> {
        let hosted = self.services.config.edition == crate::config::Edition::Hosted;
        let values = assignments
            .into_iter()
            .map(|(name, expr)| Ok((name.clone(), value_of(&name, &expr, hosted)?)))
            .collect::<Result<Vec<_>>>()?;
        self.services
            .store
            .write(move |txn| {
                values
                    .iter()
                    .try_for_each(|(name, value)| variables::set(txn, tenant, name, value))
            })
            .await
    }
}

/// How the parser reads `@name` for a request of `tenant` with `params`: the parameter of that
/// name (as written, else in lower case), else the variable kept under it.
pub(super) fn lookup(
    store: Arc<Store>,
    tenant: TenantId,
    params: &HashMap<String, Json>,
    name: &str,
) -> Result<Option<Json>> {
    let param = params
        .get(name)
        .or_else(|| params.get(&name.to_ascii_lowercase()));
    match param {
        Some(value) => Ok(Some(value.clone())),
        None => variables::get(&store.read()?, tenant, name),
    }
}

/// The value `expr` gives variable `name`: a literal, or `from_env('MDB_…')` (local edition).
fn value_of(name: &str, expr: &Expr, hosted: bool) -> Result<Json> {
    let refused = || {
        Error::invalid(format!(
            "SET @{name} takes a literal value or from_env('{ENV_PREFIX}…'), not '{expr}'"
        ))
    };
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Ok(Json::String(s.clone()))
            }
            Value::Number(n, _) => number(n).ok_or_else(refused),
            Value::Boolean(b) => Ok(Json::Bool(*b)),
            Value::Null => Ok(Json::Null),
            _ => Err(refused()),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => number(&format!("-{n}")).ok_or_else(refused),
                _ => Err(refused()),
            },
            _ => Err(refused()),
        },
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("from_env") => {
            let FunctionArguments::List(list) = &f.args else {
                return Err(refused());
            };
            let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))] =
                list.args.as_slice()
            else {
                return Err(refused());
            };
            let Value::SingleQuotedString(var) = &v.value else {
                return Err(refused());
            };
            from_env(var, hosted).map(Json::String)
        }
        _ => Err(refused()),
    }
}

/// A number as JSON keeps it (an integer stays one).
fn number(text: &str) -> Option<Json> {
    serde_json::from_str::<serde_json::Number>(text)
        .ok()
        .map(Json::Number)
}

/// The server's environment variable `var`, which must start with `MDB_`.
fn from_env(var: &str, hosted: bool) -> Result<String> {
    if hosted {
        return Err(Error::invalid(
            "from_env is not available in the hosted edition: the server's environment is \
             the operator's",
        ));
    }
    if !var.starts_with(ENV_PREFIX) {
        return Err(Error::invalid(format!(
            "from_env reads only environment variables whose names start with {ENV_PREFIX}; \
             '{var}' does not"
        )));
    }
    std::env::var(var)
        .map_err(|_| Error::invalid(format!("The environment variable {var} is not set")))
}
