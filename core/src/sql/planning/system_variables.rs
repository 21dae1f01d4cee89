//! The server variables MySQL clients read (`SELECT @@version`, `SHOW VARIABLES`), with the
//! values MindsDB answers, so a client or ORM that asks on connect gets what it expects. They
//! are constants: `SET` accepts a client's settings and keeps none (as MindsDB does). Names are
//! matched as MySQL matches them: without regard to case, and with `@@session.` or
//! `@@global.` in front alike.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::var_provider::VarProvider;

/// A variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// A number (`@@max_allowed_packet`).
    Int(i64),
    /// Text (`@@version`).
    Text(&'static str),
}

impl Value {
    /// The value as `SHOW VARIABLES` shows it: text.
    pub(crate) fn text(self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Text(s) => s.to_string(),
        }
    }
}

/// One variable: its name, its value, and whether `SHOW SESSION VARIABLES` lists it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variable {
    /// Its name, lower case, without `@@`.
    pub(crate) name: &'static str,
    /// Its value.
    pub(crate) value: Value,
    /// Whether it is one of the session's (MindsDB lists three).
    pub(crate) session: bool,
}

const fn var(name: &'static str, value: Value, session: bool) -> Variable {
    Variable {
        name,
        value,
        session,
    }
}

/// Every variable, in the order `SHOW VARIABLES` lists them (MindsDB 26's).
pub(crate) const VARIABLES: &[Variable] = &[
    var("auto_increment_increment", Value::Int(1), true),
    var("character_set_client", Value::Text("utf8"), false),
    var("character_set_connection", Value::Text("utf8"), false),
    var("character_set_results", Value::Text("utf8"), false),
    var("character_set_server", Value::Text("latin1"), false),
    var("collation_server", Value::Text("latin1_swedish_ci"), false),
    var("init_connect", Value::Text(""), false),
    var("interactive_timeout", Value::Int(28800), false),
    var("license", Value::Text("GPL"), false),
    var("lower_case_table_names", Value::Int(0), false),
    var("max_allowed_packet", Value::Int(16_777_216), false),
    var("net_buffer_length", Value::Int(16384), false),
    var("net_write_timeout", Value::Int(60), false),
    var("query_cache_size", Value::Int(16_777_216), false),
    var("query_cache_type", Value::Text("OFF"), false),
    var(
        "sql_mode",
        Value::Text(
            "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,\
             ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION",
        ),
        false,
    ),
    var("system_time_zone", Value::Text("UTC"), false),
    var("time_zone", Value::Text("SYSTEM"), false),
    var("tx_isolation", Value::Text("REPEATABLE-READ"), true),
    var("wait_timeout", Value::Int(28800), false),
    var("tx_read_only", Value::Text("0"), true),
    var("version_comment", Value::Text("(MindsDB)"), false),
    var("version", Value::Text("8.0.17"), false),
    var(
        "collation_connection",
        Value::Text("utf8_general_ci"),
        false,
    ),
    var("performance_schema", Value::Int(1), false),
    var(
        "transaction_isolation",
        Value::Text("REPEATABLE-READ"),
        false,
    ),
    var("event_scheduler", Value::Text("OFF"), false),
    var("default_storage_engine", Value::Text("InnoDB"), false),
    var("default_tmp_storage_engine", Value::Text("InnoDB"), false),
];

/// The variable `name` names (`version`, `@@VERSION`, `@@session.tx_isolation`), if any.
pub(crate) fn find(name: &str) -> Option<&'static Variable> {
    let name = name.trim_start_matches("@@").to_ascii_lowercase();
    let name = name
        .strip_prefix("session.")
        .or_else(|| name.strip_prefix("global."))
        .or_else(|| name.strip_prefix("local."))
        .unwrap_or(&name);
    VARIABLES.iter().find(|v| v.name == name)
}

/// `@@name` in an expression, as DataFusion asks for system variables.
#[derive(Debug)]
pub(crate) struct SystemVariables;

impl SystemVariables {
    fn lookup(names: &[String]) -> DfResult<&'static Variable> {
        let name = names.join(".");
        find(&name)
            .ok_or_else(|| DataFusionError::Plan(format!("Unknown system variable '{name}'")))
    }
}

impl VarProvider for SystemVariables {
    fn get_value(&self, names: Vec<String>) -> DfResult<ScalarValue> {
        Ok(match Self::lookup(&names)?.value {
            Value::Int(n) => ScalarValue::Int64(Some(n)),
            Value::Text(s) => ScalarValue::Utf8(Some(s.to_string())),
        })
    }

    fn get_type(&self, names: &[String]) -> Option<DataType> {
        Self::lookup(names).ok().map(|v| match v.value {
            Value::Int(_) => DataType::Int64,
            Value::Text(_) => DataType::Utf8,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_without_regard_to_case_or_scope() {
        for name in [
            "version",
            "@@version",
            "@@VERSION",
            "@@session.version",
            "@@GLOBAL.Version",
        ] {
            assert_eq!(find(name).unwrap().value, Value::Text("8.0.17"), "{name}");
        }
        assert!(find("@@no_such_thing").is_none());
        let provider = SystemVariables;
        assert_eq!(
            provider
                .get_value(vec!["@@session".into(), "auto_increment_increment".into()])
                .unwrap(),
            ScalarValue::Int64(Some(1))
        );
        assert!(provider.get_value(vec!["@@nope".into()]).is_err());
    }
}
