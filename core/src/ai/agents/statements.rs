//! MindsDB's agent statements, read on tokens: `CREATE AGENT [IF NOT EXISTS] [p.]a USING …`,
//! `ALTER AGENT [p.]a USING …`, `DROP AGENT [IF EXISTS] [p.]a`, `SHOW AGENTS [FROM p]`. `USING`
//! takes `key = value` pairs whose values are strings, numbers, booleans or JSON-like objects
//! and lists (`{"tables": ["db.t"]}`, also with single quotes, as MindsDB's docs write them).
//! The flat form's model keys (`model_name = …, provider = …`) are gathered into `model`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::sql::parse::{if_exists_at, keyword, Command};

/// Keys of the flat form that belong inside `model`.
const MODEL_KEYS: [&str; 4] = ["model_name", "provider", "api_key", "base_url"];
/// Keys of the flat form that belong inside `params`.
const PARAM_KEYS: [&str; 2] = ["timeout", "mode"];

/// Recognises an agent statement; `None` when `words` is something else.
pub(crate) fn agent_command(words: &[&Token]) -> Result<Option<Command>> {
    let is = |k: usize, text: &str| matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    let kw = |k: usize| words.get(k).and_then(|t| keyword(t));
    match kw(0) {
        Some(Keyword::CREATE) if is(1, "AGENT") => {
            let (if_not_exists, k) = if_exists_at(words, 2, true);
            let (project, name, k) = agent_name(words, k)?;
            let spec = using(words, k)?;
            Ok(Some(Command::CreateAgent {
                project,
                name,
                if_not_exists,
                spec,
            }))
        }
        Some(Keyword::ALTER) if is(1, "AGENT") => {
            let (project, name, k) = agent_name(words, 2)?;
            let spec = using(words, k)?;
            Ok(Some(Command::AlterAgent {
                project,
                name,
                spec,
            }))
        }
        Some(Keyword::DROP) if is(1, "AGENT") => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let (project, name, k) = agent_name(words, k)?;
            end_at(words, k)?;
            Ok(Some(Command::DropAgent {
                project,
                name,
                if_exists,
            }))
        }
        Some(Keyword::SHOW) if is(1, "AGENTS") => Ok(Some(Command::ShowAgents {
            project: from_project(words, 2)?,
        })),
        _ => Ok(None),
    }
}

/// `[FROM|IN project]` at `k`, ending the statement: the project (lower case), if named.
pub(crate) fn from_project(words: &[&Token], k: usize) -> Result<Option<String>> {
    if matches!(
        words.get(k).and_then(|t| keyword(t)),
        Some(Keyword::FROM | Keyword::IN)
    ) {
        let project = word(words, k + 1, "a project name")?;
        end_at(words, k + 2)?;
        Ok(Some(project.to_ascii_lowercase()))
    } else {
        end_at(words, k)?;
        Ok(None)
    }
}

/// The word at `k` (quoted or not), or an error saying `what` was expected.
pub(crate) fn word(words: &[&Token], k: usize, what: &str) -> Result<String> {
    match words.get(k) {
        Some(Token::Word(w)) => Ok(w.value.clone()),
        Some(other) => Err(Error::invalid(format!("Expected {what}, found '{other}'"))),
        None => Err(Error::invalid(format!("Expected {what}"))),
    }
}

/// Fails unless the statement ends at `k`.
pub(crate) fn end_at(words: &[&Token], k: usize) -> Result<()> {
    match words.get(k) {
        None => Ok(()),
        Some(extra) => Err(Error::invalid(format!(
            "Unexpected '{extra}' after the statement"
        ))),
    }
}

/// `[project.]name` at `k`; returns the parts and the position after them.
fn agent_name(words: &[&Token], k: usize) -> Result<(Option<String>, String, usize)> {
    qualified_name(words, k, "an agent name")
}

/// `[project.]name` at `k`, `what` naming the object in errors; returns the parts and the
/// position after them.
pub(crate) fn qualified_name(
    words: &[&Token],
    k: usize,
    what: &str,
) -> Result<(Option<String>, String, usize)> {
    let first = word(words, k, what)?;
    if words.get(k + 1) == Some(&&Token::Period) {
        let name = word(words, k + 2, &format!("{what} after the project"))?;
        Ok((Some(first.to_ascii_lowercase()), name, k + 3))
    } else {
        Ok((None, first, k + 1))
    }
}

/// `USING key = value, …` (or nothing) from `k` up to the end, as `(key, value)` pairs in
/// order, keys lower case; `after` names what USING follows, for the error message.
pub(crate) fn using_pairs(
    words: &[&Token],
    mut k: usize,
    after: &str,
) -> Result<Vec<(String, Value)>> {
    let mut pairs: Vec<(String, Value)> = Vec::new();
    if k == words.len() {
        return Ok(pairs);
    }
    if keyword(words[k]) != Some(Keyword::USING) {
        return Err(Error::invalid(format!(
            "Expected USING key = value, … after {after}, found '{}'",
            words[k]
        )));
    }
    k += 1;
    loop {
        let key = word(words, k, "a parameter name after USING")?.to_ascii_lowercase();
        if words.get(k + 1) != Some(&&Token::Eq) {
            return Err(Error::invalid(format!("Expected '=' after '{key}'")));
        }
        k += 2;
        let value = json_value(words, &mut k)?;
        if pairs.iter().any(|(given, _)| *given == key) {
            return Err(Error::invalid(format!("Parameter '{key}' is given twice")));
        }
        pairs.push((key, value));
        match words.get(k) {
            None => return Ok(pairs),
            Some(Token::Comma) => k += 1,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "Expected ',' between USING parameters, found '{other}'"
                )))
            }
        }
    }
}

/// `USING key = value, …` (or nothing) up to the end, as an agent request body.
fn using(words: &[&Token], k: usize) -> Result<Map<String, Value>> {
    let mut spec = Map::new();
    let mut model = Map::new();
    let mut params = Map::new();
    for (key, value) in using_pairs(words, k, "the agent name")? {
        if MODEL_KEYS.contains(&key.as_str()) {
            model.insert(key, value);
        } else if PARAM_KEYS.contains(&key.as_str()) {
            params.insert(key, value);
        } else {
            spec.insert(key, value);
        }
    }
    if !model.is_empty() {
        match spec.get_mut("model") {
            Some(Value::Object(given)) => given.extend(model),
            Some(_) => return Err(Error::invalid("'model' must be an object")),
            None => {
                spec.insert("model".into(), Value::Object(model));
            }
        }
    }
    if !params.is_empty() {
        spec.insert("params".into(), Value::Object(params));
    }
    Ok(spec)
}

/// How deeply lists and objects of a value may nest: as deep as serde_json reads a JSON body.
/// Each level is a call on the stack, so a statement of 100,000 `[` must be refused, not read.
const MAX_VALUE_DEPTH: usize = 128;

/// A JSON-like value on tokens: strings in either quote, numbers, true/false/null, objects and lists.
pub(crate) fn json_value(words: &[&Token], k: &mut usize) -> Result<Value> {
    nested_value(words, k, 0)
}

/// [`json_value`] `depth` lists and objects deep.
fn nested_value(words: &[&Token], k: &mut usize, depth: usize) -> Result<Value> {
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::invalid(format!(
            "A value nests lists and objects more than {MAX_VALUE_DEPTH} levels deep"
        )));
    }
    let token = words
        .get(*k)
        .ok_or_else(|| Error::invalid("Expected a value at the end of the statement"))?;
    *k += 1;
    match token {
        Token::SingleQuotedString(s) => Ok(Value::String(s.clone())),
        Token::Word(w) if w.quote_style.is_some() => Ok(Value::String(w.value.clone())),
        Token::Number(n, _) => number(n),
        Token::Minus => match words.get(*k) {
            Some(Token::Number(n, _)) => {
                *k += 1;
                number(&format!("-{n}"))
            }
            _ => Err(Error::invalid("Expected a number after '-'")),
        },
        Token::Word(w) => match w.value.to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            "null" | "none" => Ok(Value::Null),
            other => Err(Error::invalid(format!(
                "Expected a value, found '{other}' (quote text as 'text')"
            ))),
        },
        Token::LBrace => {
            let mut object = Map::new();
            if words.get(*k) == Some(&&Token::RBrace) {
                *k += 1;
                return Ok(Value::Object(object));
            }
            loop {
                let key = match nested_value(words, k, depth + 1)? {
                    Value::String(key) => key,
                    other => {
                        return Err(Error::invalid(format!(
                            "Object keys must be quoted text, found {other}"
                        )))
                    }
                };
                if words.get(*k) != Some(&&Token::Colon) {
                    return Err(Error::invalid(format!(
                        "Expected ':' after the key '{key}'"
                    )));
                }
                *k += 1;
                let value = nested_value(words, k, depth + 1)?;
                object.insert(key, value);
                match words.get(*k) {
                    Some(Token::Comma) => *k += 1,
                    Some(Token::RBrace) => {
                        *k += 1;
                        return Ok(Value::Object(object));
                    }
                    _ => return Err(Error::invalid("Expected ',' or '}' in an object")),
                }
            }
        }
        Token::LBracket => {
            let mut list = Vec::new();
            if words.get(*k) == Some(&&Token::RBracket) {
                *k += 1;
                return Ok(Value::Array(list));
            }
            loop {
                list.push(nested_value(words, k, depth + 1)?);
                match words.get(*k) {
                    Some(Token::Comma) => *k += 1,
                    Some(Token::RBracket) => {
                        *k += 1;
                        return Ok(Value::Array(list));
                    }
                    _ => return Err(Error::invalid("Expected ',' or ']' in a list")),
                }
            }
        }
        other => Err(Error::invalid(format!("Expected a value, found '{other}'"))),
    }
}

fn number(text: &str) -> Result<Value> {
    serde_json::from_str::<serde_json::Number>(text)
        .map(Value::Number)
        .map_err(|_| Error::invalid(format!("'{text}' is not a number")))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::sql::parse::parse;

    fn command(sql: &str) -> Command {
        parse(sql, &HashMap::new(), &HashMap::new())
            .unwrap()
            .pop()
            .unwrap()
    }

    /// Found by the statement fuzz target: 100,000 nested `[` overflowed the stack (an abort
    /// of the whole server), one call per level.
    #[test]
    fn deeply_nested_using_values_are_refused_not_a_stack_overflow() {
        let deep = |n: usize| {
            format!(
                "CREATE AGENT a USING data = {}1{}",
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let err = parse(&deep(100_000), &HashMap::new(), &HashMap::new()).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(err.message().contains("more than 128 levels deep"), "{err}");
        let objects = format!(
            "CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = {}{}",
            "{\"k\": ".repeat(100_000),
            "}".repeat(100_000)
        );
        let err = parse(&objects, &HashMap::new(), &HashMap::new()).unwrap_err();
        assert!(err.message().contains("more than 128 levels deep"), "{err}");
        // As deep as JSON bodies may nest is still read.
        assert!(matches!(command(&deep(128)), Command::CreateAgent { .. }));
    }

    #[test]
    fn create_agent_reads_objects_in_both_quote_styles() {
        let Command::CreateAgent { project, name, if_not_exists, spec } = command(
            "CREATE AGENT IF NOT EXISTS p.Bot USING model = {\"provider\": \"openai\", 'model_name': 'gpt-4o', \"temperature\": -0.5}, \
             data = {\"tables\": [\"p.t\", 'p.*']}, prompt_template = 'it\\'s you', timeout = 30",
        ) else {
            panic!("not CreateAgent")
        };
        assert_eq!(
            (project.as_deref(), name.as_str(), if_not_exists),
            (Some("p"), "Bot", true)
        );
        assert_eq!(
            Value::Object(spec),
            serde_json::json!({
                "model": {"provider": "openai", "model_name": "gpt-4o", "temperature": -0.5},
                "data": {"tables": ["p.t", "p.*"]},
                "prompt_template": "it's you",
                "params": {"timeout": 30}
            })
        );
    }

    #[test]
    fn the_flat_form_gathers_model_keys() {
        let Command::CreateAgent { spec, project, .. } =
            command("create agent a using provider = 'openai', model_name = 'm', base_url = 'http://127.0.0.1:1/v1'")
        else {
            panic!("not CreateAgent")
        };
        assert_eq!(project, None);
        assert_eq!(
            Value::Object(spec),
            serde_json::json!({"model": {"provider": "openai", "model_name": "m", "base_url": "http://127.0.0.1:1/v1"}})
        );
    }

    #[test]
    fn other_agent_statements() {
        assert!(matches!(
            command("ALTER AGENT a USING prompt_template = 'x'"),
            Command::AlterAgent { .. }
        ));
        assert!(matches!(
            command("DROP AGENT IF EXISTS p.a"),
            Command::DropAgent {
                if_exists: true,
                ..
            }
        ));
        assert!(
            matches!(command("SHOW AGENTS FROM P"), Command::ShowAgents { project: Some(p) } if p == "p")
        );
        assert!(matches!(
            command("show agents"),
            Command::ShowAgents { project: None }
        ));
        let err = parse(
            "CREATE AGENT a USING model = {\"x\" 1}",
            &HashMap::new(),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(err.message().contains("':'"), "{err}");
        let err = parse(
            "CREATE AGENT a WITH x = 1",
            &HashMap::new(),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(err.message().contains("USING"), "{err}");
    }
}
