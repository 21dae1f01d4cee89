//! The parser as tests call it: every feature the engine opens with, the default limits.

use std::collections::HashMap;

use super::{parse_limited, Command, ShapeLimits};
use crate::error::Result;
use crate::sql::{FeatureStatement, TypedParam};

/// Parses a request into commands, binding `params` into the SQL ones, within the default
/// shape limits, with the features the engine registers.
pub(crate) fn parse(
    sql: &str,
    params: &HashMap<String, serde_json::Value>,
    typed: &HashMap<String, TypedParam>,
) -> Result<Vec<Command<Box<dyn FeatureStatement>>>> {
    let extensions = crate::ai::extensions();
    parse_limited(
        sql,
        params,
        typed,
        ShapeLimits::of(&crate::config::QueryConfig::default()),
        &|words| crate::sql::claim(&extensions, words),
        &super::variables::none,
    )
}
