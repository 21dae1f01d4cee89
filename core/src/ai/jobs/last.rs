//! `LAST`, MindsDB's keyword for "rows added since the job last ran": in a job's statement,
//! `col > LAST` (or `>=`, or `col > COALESCE(LAST, value)`) in a SELECT that reads one table.
//!
//! Each run first asks the table for the column's greatest value now (`hi`), then runs the
//! statement with `col > <last value> AND col <= hi`, and keeps `hi` for the next run once the
//! run has succeeded. Reading up to `hi` rather than "whatever is there" means a row added
//! while the statement runs is read by the next run, never by neither. As in MindsDB, the first
//! run reads nothing new (its last value is `hi`) unless `COALESCE(LAST, value)` gives a
//! start; a table empty at a run makes the next read everything up to its `hi`.

use std::collections::HashMap;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::sql::parse::words::{keyword, tokens_text};
use crate::sql::parse::words_of;

/// One `LAST` of a statement: the column it follows and the table that column is read from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LastUse {
    /// `table.column` as written, lower case: the key its value is kept under.
    pub(crate) key: String,
    /// The query that finds the column's greatest value now.
    pub(crate) max_query: String,
}

/// Where one `LAST` is in a statement's words.
struct Found {
    /// The words of the comparison: `col op LAST` or `col op COALESCE(LAST, v)`.
    start: usize,
    end: usize,
    column: Vec<Token>,
    operator: Token,
    /// `COALESCE(LAST, v)`'s `v`.
    start_value: Option<Vec<Token>>,
    key: String,
    table: Vec<Token>,
}

fn is_last(token: &Token) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("LAST"))
}

/// The uses of `LAST` in `statement`; an error when one is not in a form this reads.
pub(crate) fn uses(statement: &str) -> Result<Vec<LastUse>> {
    let words = words_of(statement)?;
    Ok(find(&words)?
        .into_iter()
        .map(|found| LastUse {
            key: found.key,
            max_query: format!(
                "SELECT max({}) FROM {}",
                text(&found.column),
                text(&found.table)
            ),
        })
        .collect())
}

fn text(tokens: &[Token]) -> String {
    tokens_text(&tokens.iter().collect::<Vec<_>>())
}

fn find(words: &[Token]) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    for (i, token) in words.iter().enumerate() {
        if !is_last(token) {
            continue;
        }
        // `COALESCE ( LAST , v )` or a bare LAST.
        let (op_at, end, start_value) = if i >= 2
            && words[i - 1] == Token::LParen
            && matches!(&words[i - 2], Token::Word(w) if w.value.eq_ignore_ascii_case("COALESCE"))
        {
            if words.get(i + 1) != Some(&Token::Comma) {
                return Err(unreadable());
            }
            // COALESCE's own closing parenthesis, past any its default value holds.
            let mut depth = 1usize;
            let close = (i + 2..words.len())
                .find(|&j| {
                    match words[j] {
                        Token::LParen => depth += 1,
                        Token::RParen => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .ok_or_else(unreadable)?;
            (
                i.saturating_sub(3),
                close + 1,
                Some(words[i + 2..close].to_vec()),
            )
        } else {
            (i.wrapping_sub(1), i + 1, None)
        };
        let operator = match words.get(op_at) {
            Some(op @ (Token::Gt | Token::GtEq)) => op.clone(),
            _ => return Err(unreadable()),
        };
        // The column: word or word.word before the operator.
        let mut start = op_at.checked_sub(1).ok_or_else(unreadable)?;
        if !matches!(words[start], Token::Word(_)) {
            return Err(unreadable());
        }
        while start >= 2
            && words[start - 1] == Token::Period
            && matches!(words[start - 2], Token::Word(_))
        {
            start -= 2;
        }
        let column = words[start..op_at].to_vec();
        let table = table_before(words, start)?;
        let column_name = match column.last() {
            Some(Token::Word(w)) => w.value.to_ascii_lowercase(),
            _ => return Err(unreadable()),
        };
        let key = format!("{}.{column_name}", text(&table).to_ascii_lowercase());
        out.push(Found {
            start,
            end,
            column,
            operator,
            start_value,
            key,
            table,
        });
    }
    Ok(out)
}

/// The table of the SELECT that `at` is in: the name after the nearest FROM before it, at its
/// depth of parentheses or outside it.
fn table_before(words: &[Token], at: usize) -> Result<Vec<Token>> {
    let mut depth = 0i64;
    for j in (0..at).rev() {
        match &words[j] {
            Token::RParen => depth += 1,
            Token::LParen => depth -= 1,
            token if depth <= 0 && keyword(token) == Some(Keyword::FROM) => {
                let mut end = j + 1;
                if !matches!(words.get(end), Some(Token::Word(_))) {
                    break;
                }
                end += 1;
                while words.get(end) == Some(&Token::Period)
                    && matches!(words.get(end + 1), Some(Token::Word(_)))
                {
                    end += 2;
                }
                // `FROM db (native query)` or a join: not one table this can ask.
                let after = words.get(end);
                if after == Some(&Token::LParen)
                    || after.and_then(keyword).is_some_and(|k| {
                        matches!(
                            k,
                            Keyword::JOIN | Keyword::INNER | Keyword::LEFT | Keyword::RIGHT
                        )
                    })
                    || after == Some(&Token::Comma)
                {
                    break;
                }
                return Ok(words[j + 1..end].to_vec());
            }
            _ => {}
        }
    }
    Err(Error::invalid(
        "LAST must be in a SELECT that reads one table by name: … FROM db.table WHERE col > LAST",
    ))
}

fn unreadable() -> Error {
    Error::invalid(
        "LAST must be compared as `column > LAST`, `column >= LAST` or `column > COALESCE(LAST, value)`",
    )
}

/// `statement` with each `LAST` filled in, given the values kept from the last run (`lasts`)
/// and the greatest values now (`highs`, by key: a SQL literal, `None` for an empty table);
/// returns it and the values to keep if it succeeds.
pub(crate) fn fill(
    statement: &str,
    lasts: &Map<String, Value>,
    highs: &HashMap<String, Option<String>>,
) -> Result<(String, Map<String, Value>)> {
    let words = words_of(statement)?;
    let found = find(&words)?;
    if found.is_empty() {
        return Ok((statement.to_string(), Map::new()));
    }
    let mut keep = Map::new();
    // bounded: the statement's words, and eight more for each LAST in them
    let mut out: Vec<Token> = Vec::with_capacity(words.len() + found.len() * 8);
    let mut next = 0;
    for use_ in found {
        out.extend(words[next..use_.start].iter().cloned());
        next = use_.end;
        let high = highs.get(&use_.key).cloned().flatten();
        let previous = match lasts.get(&use_.key) {
            // Kept by an earlier run (null: the table was empty then).
            Some(Value::String(value)) => Some(Some(value.clone())),
            Some(_) => Some(None),
            None => None,
        };
        let lower: Option<Vec<Token>> = match (previous, &use_.start_value, &high) {
            (Some(Some(value)), _, _) => Some(words_of(&value)?),
            (Some(None), _, _) => None,
            // The first run: from COALESCE's value, or from now.
            (None, Some(start), _) => Some(start.clone()),
            (None, None, Some(high)) => Some(words_of(high)?),
            (None, None, None) => None,
        };
        let space = |tokens: &mut Vec<Token>, words: Vec<Token>| tokens.extend(words);
        out.push(Token::LParen);
        match &high {
            None => space(&mut out, words_of("1 = 0")?),
            Some(high) => {
                if let Some(lower) = lower {
                    out.extend(use_.column.iter().cloned());
                    out.push(use_.operator.clone());
                    out.extend(lower);
                    out.push(Token::make_keyword("AND"));
                }
                out.extend(use_.column.iter().cloned());
                out.push(Token::LtEq);
                out.extend(words_of(high)?);
            }
        }
        out.push(Token::RParen);
        let kept = match (&high, lasts.get(&use_.key)) {
            (Some(high), _) => Value::String(high.clone()),
            (None, Some(before)) => before.clone(),
            (None, None) => Value::Null,
        };
        keep.insert(use_.key, kept);
    }
    out.extend(words[next..].iter().cloned());
    Ok((text(&out), keep))
}

/// The value of a one-row, one-column result as a SQL literal of its own type, so comparing
/// the column with it is exact (a REAL's `0.1` is not the DOUBLE `0.1`); `None` for NULL.
/// Numbers, text, dates and timestamps (what a tracked column holds); anything else, and a
/// float that is not finite, is refused.
pub(crate) fn literal(column: &dyn Array) -> Result<Option<String>> {
    if column.is_empty() || column.is_null(0) {
        return Ok(None);
    }
    // Arrow's own text of the value: digits for numbers (a decimal with its point), ISO 8601
    // for dates and times.
    let value = array_value_to_string(column, 0)?;
    let quoted = || format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"));
    let text = match column.data_type() {
        DataType::Float16 | DataType::Float32 | DataType::Float64
            if value.parse::<f64>().map_or(true, |x| !x.is_finite()) =>
        {
            return Err(Error::invalid(format!(
                "A tracked column cannot go past {value}: it holds a value that is not a \
                 finite number (NaN or an infinity)"
            )))
        }
        DataType::Float16 | DataType::Float32 => format!("CAST('{value}' AS REAL)"),
        t if t.is_numeric() => value.clone(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => quoted(),
        DataType::Date32 | DataType::Date64 => format!("CAST({} AS DATE)", quoted()),
        DataType::Timestamp(_, _) => format!("CAST({} AS TIMESTAMP)", quoted()),
        other => {
            return Err(Error::invalid(format!(
                "A column of type {other} cannot be tracked: use a number, text, date or timestamp"
            )))
        }
    };
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn highs(pairs: &[(&str, Option<&str>)]) -> HashMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn last_reads_up_to_what_the_table_holds_now() {
        let statement = "INSERT INTO p.seen SELECT id FROM p.events WHERE kind = 'a' AND id > LAST";
        assert_eq!(
            uses(statement).unwrap(),
            vec![LastUse {
                key: "p.events.id".into(),
                max_query: "SELECT max(id) FROM p.events".into()
            }]
        );
        // The first run reads nothing new, and keeps the greatest id.
        let (first, keep) = fill(
            statement,
            &Map::new(),
            &highs(&[("p.events.id", Some("7"))]),
        )
        .unwrap();
        assert_eq!(
            first,
            "INSERT INTO p.seen SELECT id FROM p.events WHERE kind = 'a' AND (id > 7 AND id <= 7)"
        );
        assert_eq!(keep["p.events.id"], "7");
        // The next reads from there to what is there now.
        let (second, keep) = fill(statement, &keep, &highs(&[("p.events.id", Some("9"))])).unwrap();
        assert!(second.ends_with("(id > 7 AND id <= 9)"), "{second}");
        assert_eq!(keep["p.events.id"], "9");
        // An empty table reads nothing and keeps what it had.
        let (empty, keep) = fill(statement, &keep, &highs(&[("p.events.id", None)])).unwrap();
        assert!(empty.ends_with("(1 = 0)"), "{empty}");
        assert_eq!(keep["p.events.id"], "9");
    }

    #[test]
    fn coalesce_gives_the_first_run_its_start() {
        let statement = "SELECT * FROM t WHERE t.at >= COALESCE(LAST, '2024-01-01')";
        let (first, keep) = fill(
            statement,
            &Map::new(),
            &highs(&[("t.at", Some("'2024-05-01'"))]),
        )
        .unwrap();
        assert_eq!(
            first,
            "SELECT * FROM t WHERE (t.at >= '2024-01-01' AND t.at <= '2024-05-01')"
        );
        // A table empty at the first run: the next reads all it then holds.
        let (_, keep_empty) = fill(statement, &Map::new(), &highs(&[("t.at", None)])).unwrap();
        assert_eq!(keep_empty["t.at"], Value::Null);
        let (next, _) = fill(statement, &keep_empty, &highs(&[("t.at", Some("3"))])).unwrap();
        assert!(next.ends_with("(t.at <= 3)"), "{next}");
        assert_eq!(keep["t.at"], "'2024-05-01'");
    }

    #[test]
    fn a_tracked_value_is_a_literal_whatever_the_data_holds() {
        use datafusion::arrow::array::{Decimal128Array, Float64Array, StringArray};
        let statement = "SELECT * FROM t WHERE s > LAST";
        for nasty in [
            "a'b",
            "a\\'b",
            "x'; DROP TABLE t; --",
            "ends with \\",
            "\\'",
            "'' OR 1=1",
            "/* open",
        ] {
            let column = StringArray::from(vec![nasty]);
            let high = literal(&column).unwrap().unwrap();
            let pairs = highs(&[("t.s", Some(high.as_str()))]);
            let (filled, _) = fill(statement, &Map::new(), &pairs).unwrap();
            // Whatever the value, the statement is the same comparison pair, and the value one
            // string token with the same text.
            let words = words_of(&filled).unwrap();
            let strings: Vec<&Token> = words
                .iter()
                .filter(|t| matches!(t, Token::SingleQuotedString(_)))
                .collect();
            let expected = Token::SingleQuotedString(nasty.to_string());
            assert_eq!(strings, vec![&expected, &expected], "{filled}");
            assert_eq!(words.len(), 14, "{filled}: {words:?}");
        }
        let decimal = Decimal128Array::from(vec![12345])
            .with_precision_and_scale(10, 2)
            .unwrap();
        assert_eq!(literal(&decimal).unwrap().unwrap(), "123.45");
        // A REAL compares exactly with a REAL, not with the DOUBLE its text would read as.
        let real = datafusion::arrow::array::Float32Array::from(vec![0.1f32]);
        assert_eq!(literal(&real).unwrap().unwrap(), "CAST('0.1' AS REAL)");
        assert!(literal(&Float64Array::from(vec![f64::NAN])).is_err());
        let at = datafusion::arrow::array::TimestampNanosecondArray::from(vec![
            1_704_067_200_000_000_000,
        ]);
        assert_eq!(
            literal(&at).unwrap().unwrap(),
            "CAST('2024-01-01T00:00:00' AS TIMESTAMP)"
        );
        assert_eq!(
            literal(&Float64Array::from(vec![None::<f64>])).unwrap(),
            None
        );
    }

    #[test]
    fn last_in_a_form_it_cannot_read_is_refused() {
        for statement in [
            "SELECT * FROM t WHERE id < LAST",
            "SELECT * FROM a JOIN b ON a.x = b.x WHERE id > LAST",
            "SELECT * FROM pg (SELECT * FROM t) WHERE id > LAST",
            "SELECT LAST",
        ] {
            assert!(uses(statement).is_err(), "{statement}");
        }
        assert!(uses("SELECT last_seen FROM t").unwrap().is_empty());
        // A default in parentheses is the default, whole.
        let (filled, _) = fill(
            "SELECT * FROM t WHERE n > COALESCE(LAST, (1))",
            &Map::new(),
            &highs(&[("t.n", Some("5"))]),
        )
        .unwrap();
        assert_eq!(filled, "SELECT * FROM t WHERE (n > (1) AND n <= 5)");
    }
}
