//! The word helpers every statement read on tokens shares (the database statements here and
//! each feature's in `crate::ai`): keywords, names, `IF [NOT] EXISTS`, `USING key = value`
//! pairs and JSON-like values, parentheses, and tokens written back as SQL text.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub(crate) fn keyword(token: &Token) -> Option<Keyword> {
    match token {
        Token::Word(w) if w.quote_style.is_none() => Some(w.keyword),
        _ => None,
    }
}

/// Reads an optional `IF NOT EXISTS` (`not` set) or `IF EXISTS` at word `k`: whether it was
/// there, and the index of the word after it.
pub(crate) fn if_exists_at(words: &[&Token], k: usize, not: bool) -> (bool, usize) {
    let kw = |i: usize| words.get(i).and_then(|t| keyword(t));
    let tail: &[Keyword] = if not {
        &[Keyword::IF, Keyword::NOT, Keyword::EXISTS]
    } else {
        &[Keyword::IF, Keyword::EXISTS]
    };
    if tail
        .iter()
        .enumerate()
        .all(|(i, want)| kw(k + i) == Some(*want))
    {
        (true, k + tail.len())
    } else {
        (false, k)
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
    // A variable still here was not defined (the defined ones were put in as values).
    if let Some(name) = super::variables::variable_name(token) {
        return Err(super::variables::undefined(name));
    }
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
        // `db.table` (MindsDB's `storage = pg.kb_table`): a dotted name, as text.
        Token::Word(w) if matches!(words.get(*k), Some(Token::Period)) => {
            let mut name = w.value.clone();
            while let (Some(Token::Period), Some(Token::Word(part))) =
                (words.get(*k), words.get(*k + 1))
            {
                name.push('.');
                name.push_str(&part.value);
                *k += 2;
            }
            Ok(Value::String(name))
        }
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

/// The index of the `)` that closes the `(` at `open`.
pub(crate) fn closing_paren(words: &[&Token], open: usize) -> Result<usize> {
    let mut depth = 0usize;
    for (i, token) in words.iter().enumerate().skip(open) {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(Error::invalid("The query after FROM db is missing its ')'"))
}

/// Tokens back to SQL text, spaced plainly (`SELECT * FROM t WHERE a = 'x'`). Quotes are
/// written again: the tokenizer has unescaped them.
pub(crate) fn tokens_text(words: &[&Token]) -> String {
    let mut out = String::new();
    for (i, token) in words.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| words[p]);
        // A parenthesis right after a name opens its arguments (`count(`); after a keyword
        // of the grammar (`AND (`) it opens an expression, and keeps its space.
        let opens_arguments = matches!(previous, Some(Token::Word(w)) if w.quote_style.is_some()
        || !matches!(
            w.keyword,
            Keyword::AND | Keyword::OR | Keyword::NOT | Keyword::WHERE | Keyword::ON
                | Keyword::WHEN | Keyword::THEN | Keyword::ELSE | Keyword::FROM
                | Keyword::JOIN | Keyword::SELECT | Keyword::HAVING | Keyword::AS
        ));
        let tight_before = matches!(token, Token::Period | Token::Comma | Token::RParen)
            || (**token == Token::LParen && opens_arguments);
        let tight_after = matches!(previous, Some(Token::Period | Token::LParen));
        if i > 0 && !tight_before && !tight_after {
            out.push(' ');
        }
        match token {
            // The tokenizer unescaped backslashes and doubled quotes: write both again.
            Token::SingleQuotedString(text) => out.push_str(&format!(
                "'{}'",
                text.replace('\\', "\\\\").replace('\'', "''")
            )),
            Token::Word(w) => match w.quote_style {
                Some(open) => {
                    let close = if open == '[' { ']' } else { open };
                    let doubled = format!("{close}{close}");
                    out.push(open);
                    out.push_str(&w.value.replace(close, &doubled));
                    out.push(close);
                }
                None => out.push_str(&w.value),
            },
            other => out.push_str(&other.to_string()),
        }
    }
    out
}
