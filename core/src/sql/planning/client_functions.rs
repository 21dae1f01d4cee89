//! The functions MySQL clients call on connect, with MindsDB's answers: `VERSION()` (MySQL's
//! version MindsDB claims, `8.0.17`, in place of DataFusion's own), `DATABASE()` and
//! `SCHEMA()` (the current database), and `CONNECTION_ID()`, which over HTTP is NULL in
//! MindsDB: a request has no connection. (MindsDB's `SCHEMA()` answers `public`; MySQL's, and
//! ours, is `DATABASE()`.) `USER()` and `CURRENT_USER()` are keywords to sqlparser, which
//! refuses their parentheses; they wait for the MySQL door, where a connection has a user.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::system_variables;

/// What one of the functions answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Answer {
    Version,
    Database,
    NoConnection,
}

/// One client function.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ClientFunction {
    name: &'static str,
    answer: Answer,
    signature: Signature,
}

impl ScalarUDFImpl for ClientFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(match self.answer {
            Answer::NoConnection => DataType::Int64,
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let text = |s: Option<String>| ColumnarValue::Scalar(ScalarValue::Utf8(s));
        Ok(match self.answer {
            Answer::Version => text(
                system_variables::find("version")
                    .map(|v| v.value.text())
                    .or(Some(String::new())),
            ),
            Answer::Database => text(Some(args.config_options.catalog.default_schema.clone())),
            Answer::NoConnection => ColumnarValue::Scalar(ScalarValue::Int64(None)),
        })
    }
}

/// The functions, to register on every session (`version` replaces DataFusion's).
pub(crate) fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        ("version", Answer::Version, Volatility::Immutable),
        ("database", Answer::Database, Volatility::Stable),
        ("schema", Answer::Database, Volatility::Stable),
        ("connection_id", Answer::NoConnection, Volatility::Stable),
    ]
    .into_iter()
    .map(|(name, answer, volatility)| {
        Arc::new(ScalarUDF::from(ClientFunction {
            name,
            answer,
            signature: Signature::nullary(volatility),
        }))
    })
    .collect()
}
