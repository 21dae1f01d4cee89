//! MindsDB's variables in the values of its own statements: `@name` where a value of
//! `PARAMETERS = {…}` or `USING key = …` stands takes the value of the request's parameter
//! `name`, or else of the variable a `SET @name = …` stored (MindsDB reads both the same way,
//! so a password need not be written into the statement: `PARAMETERS = {"password": @pg_pw}`
//! with `{"params": {"pg_pw": "…"}}`).
//!
//! Only value positions are read (after `=`, after an object key's `:`, as an item of a
//! `[…]` list) and only outside parentheses, so a statement's own SQL (a job's body, a model's
//! `FROM db (SELECT …)`) is never rewritten: there `@name` stays what SQL makes of it. The
//! values go in as tokens (a string as a quoted string, a list or object as its tokens), never
//! as text to re-read, so no value can change the statement's shape.

use datafusion::sql::sqlparser::tokenizer::{Token, Word};
use serde_json::Value;

use crate::capacity::Tally;
use crate::error::{Error, Result};

/// What the values put into one statement may take in all, whatever its memory budget: a
/// value is a setting (a password, a URL), and one small statement repeating a large one
/// thousands of times must not become gigabytes of stored settings.
pub(crate) const MAX_SUBSTITUTED_BYTES: u64 = 1 << 20;

/// How the parser looks a variable up (its name without `@`, as written): its value, `None`
/// when it is not defined.
pub(crate) type Lookup<'v> = dyn Fn(&str) -> Result<Option<Value>> + 'v;

/// A lookup that knows no variable (tests).
#[cfg(test)]
pub(crate) fn none(_: &str) -> Result<Option<Value>> {
    Ok(None)
}

/// The variable `token` names, when it is one (`@name`, not a server variable `@@name`).
pub(crate) fn variable_name(token: &Token) -> Option<&str> {
    match token {
        Token::Word(Word {
            value,
            quote_style: None,
            ..
        }) => value
            .strip_prefix('@')
            .filter(|name| !name.is_empty() && !name.starts_with('@')),
        _ => None,
    }
}

/// `words` with each variable in a value position replaced by its value's tokens; `None` when
/// no variable stands in one (the common case: nothing is copied). A variable that is not
/// defined is left in place: reading the value there names it (see [`undefined`]).
pub(crate) fn substitute(words: &[&Token], lookup: &Lookup<'_>) -> Result<Option<Vec<Token>>> {
    if !words.iter().any(|t| variable_name(t).is_some()) {
        return Ok(None);
    }
    // bounded: the statement's tokens, in memory; what values add is tallied below
    let mut out = Vec::with_capacity(words.len());
    let mut parens = 0usize;
    // Open `{` and `[` since the last parenthesis level began: a comma inside `[…]` separates
    // values, one outside separates USING pairs.
    let mut brackets: Vec<bool> = Vec::new();
    let mut copied = Tally::default();
    let mut total = 0u64;
    let mut any = false;
    for (k, token) in words.iter().enumerate() {
        match token {
            Token::LParen => parens += 1,
            Token::RParen => parens = parens.saturating_sub(1),
            Token::LBracket => brackets.push(true),
            Token::LBrace => brackets.push(false),
            Token::RBracket | Token::RBrace => {
                brackets.pop();
            }
            _ => {}
        }
        let at_value = parens == 0
            && k > 0
            && match words[k - 1] {
                Token::Eq | Token::Colon | Token::LBracket => true,
                Token::Comma => brackets.last() == Some(&true),
                _ => false,
            };
        match variable_name(token).filter(|_| at_value) {
            Some(name) => match lookup(name)? {
                Some(value) => {
                    let bytes = value_bytes(&value);
                    total = total.saturating_add(bytes);
                    if total > MAX_SUBSTITUTED_BYTES {
                        return Err(Error::invalid(format!(
                            "The variables' values put into this statement take more than \
                             {MAX_SUBSTITUTED_BYTES} bytes, the most one statement takes"
                        )));
                    }
                    copied.add(bytes, "Putting the variables' values into the statement")?;
                    push_value(&value, &mut out);
                    any = true;
                }
                None => out.push((*token).clone()),
            },
            None => out.push((*token).clone()),
        }
    }
    Ok(any.then_some(out))
}

/// The error for variable `name` read as a value though it is not defined.
pub(crate) fn undefined(name: &str) -> Error {
    Error::invalid(format!(
        "Variable @{name} is not defined: pass \"{name}\" in the request's params, or set it \
         first with SET @{name} = value"
    ))
}

/// What `value`'s tokens cost, about: the text they hold and a token per scalar.
fn value_bytes(value: &Value) -> u64 {
    let scalar = size_of::<Token>() as u64;
    match value {
        Value::String(s) => scalar + s.len() as u64,
        Value::Array(items) => scalar + items.iter().map(value_bytes).sum::<u64>(),
        Value::Object(map) => {
            scalar
                + map
                    .iter()
                    .map(|(k, v)| 2 * scalar + k.len() as u64 + value_bytes(v))
                    .sum::<u64>()
        }
        _ => scalar + 24,
    }
}

/// Appends the tokens the value reader (`words::json_value`) reads back as `value`.
fn push_value(value: &Value, out: &mut Vec<Token>) {
    match value {
        Value::Null => out.push(Token::make_keyword("NULL")),
        Value::Bool(b) => out.push(Token::make_keyword(if *b { "TRUE" } else { "FALSE" })),
        Value::Number(n) => out.push(Token::Number(n.to_string(), false)),
        Value::String(s) => out.push(Token::SingleQuotedString(s.clone())),
        Value::Array(items) => {
            out.push(Token::LBracket);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(Token::Comma);
                }
                push_value(item, out);
            }
            out.push(Token::RBracket);
        }
        Value::Object(map) => {
            out.push(Token::LBrace);
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(Token::Comma);
                }
                out.push(Token::SingleQuotedString(key.clone()));
                out.push(Token::Colon);
                push_value(item, out);
            }
            out.push(Token::RBrace);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;
    use crate::sql::parse::{parse_limited, Command, ShapeLimits};

    /// The commands `sql` parses into with variables `vars`.
    fn parsed(
        sql: &str,
        vars: Value,
    ) -> Result<Vec<Command<Box<dyn crate::sql::FeatureStatement>>>> {
        let extensions = crate::ai::extensions();
        parse_limited(
            sql,
            &HashMap::new(),
            &HashMap::new(),
            ShapeLimits::of(&crate::config::QueryConfig::default()),
            &|words| crate::sql::claim(&extensions, words),
            &|name| Ok(vars.get(name).cloned()),
        )
    }

    fn parameters(sql: &str, vars: Value) -> Value {
        match parsed(sql, vars).unwrap().pop() {
            Some(Command::CreateDatasource { parameters, .. }) => Value::Object(parameters),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_kind_of_value_goes_in_as_the_value_it_is() {
        let vars = json!({
            "s": "it's \"quoted\" {x}", "n": -1.5, "b": true, "z": null,
            "l": [1, "two", [3]], "o": {"k": [1, {"m": "v"}]}
        });
        let got = parameters(
            "CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = \
             {\"s\": @s, \"n\": @n, \"b\": @b, \"z\": @z, \"l\": @l, \"o\": @o, \"in\": [@n, @s]}",
            vars.clone(),
        );
        let mut want = vars;
        want["in"] = json!([-1.5, "it's \"quoted\" {x}"]);
        assert_eq!(got, want);
    }

    #[test]
    fn only_value_positions_outside_parentheses_are_read() {
        // A key position and a statement's own SQL are not values.
        let vars = json!({"x": "v"});
        let err = parsed(
            "CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = {@x: 1}",
            vars.clone(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("@x"), "{err}");
        let tokens = |sql: &str| -> Vec<Token> {
            datafusion::sql::sqlparser::tokenizer::Tokenizer::new(
                &datafusion::sql::sqlparser::dialect::MySqlDialect {},
                sql,
            )
            .tokenize()
            .unwrap()
            .into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect()
        };
        let words = tokens("CREATE JOB j (SELECT * FROM t WHERE a = @x) EVERY 1 hour");
        let refs: Vec<&Token> = words.iter().collect();
        let lookup = |name: &str| Ok(vars.get(name).cloned());
        assert_eq!(substitute(&refs, &lookup).unwrap(), None);
        let words = tokens("x USING a = @x, b = [@x, @x]");
        let refs: Vec<&Token> = words.iter().collect();
        let got = substitute(&refs, &lookup).unwrap().unwrap();
        let quoted = got
            .iter()
            .filter(|t| **t == Token::SingleQuotedString("v".into()))
            .count();
        assert_eq!(quoted, 3);
    }

    #[test]
    fn server_variables_and_quoted_names_are_no_variables() {
        let word = |text: &str| Token::make_word(text, None);
        assert_eq!(variable_name(&word("@@version")), None);
        assert_eq!(variable_name(&word("@")), None);
        assert_eq!(variable_name(&Token::make_word("@x", Some('`'))), None);
        assert_eq!(variable_name(&word("@x")), Some("x"));
    }

    #[test]
    fn copies_of_a_large_value_are_refused_within_the_statements_budget() {
        let big = "x".repeat(1 << 20);
        let account = crate::memory::Account::open(Some(8 << 20), None).unwrap();
        let _in = crate::memory::enter(account.tag());
        let list = vec!["@big"; 64].join(", ");
        // Within the memory budget or not, a megabyte of values is the most.
        let err = parsed(
            &format!("CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = {{\"l\": [{list}]}}"),
            json!({"big": "x".repeat(20_000)}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("1048576"), "{err}");
        let sql =
            format!("CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = {{\"l\": [{list}]}}");
        let err = parsed(&sql, json!({"big": big})).unwrap_err();
        assert!(err.to_string().contains("variables"), "{err}");
    }
}
