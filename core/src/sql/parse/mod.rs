//! Turns request text into commands: sqlparser's tokenizer (MySQL rules, so `'it\'s'` and
//! backticks work as MindsDB clients send them), MindsDB's own statements recognised on tokens,
//! and everything else parsed by sqlparser for DataFusion. `:name` parameters are bound on the
//! syntax tree as literal values, never spliced into text.
//!
//! `"x"` follows MindsDB's parser: a name where only a name can stand (tables, aliases, column
//! lists, after a dot) and a string where a value can (`VALUES (1, "it's")`, `WHERE s = "a"`),
//! which is how MindsDB's SDK renders strings that hold a single quote. Backticks always quote
//! a name.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, Expr, Query, SelectItem, SetExpr, Statement, TimezoneInfo, UnaryOperator,
    Value, ValueWithSpan, Visit, VisitMut, Visitor, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::{GenericDialect, MySqlDialect};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer, Word};

pub(crate) mod parametrize;
#[cfg(test)]
mod testing;
pub(crate) mod variables;
pub(crate) mod words;

#[cfg(test)]
pub(crate) use self::testing::parse;

use self::words::{if_exists_at, keyword};
use super::request::TypedParam;
use crate::error::{Error, Result};

/// One statement of a request, ready to run; `F` is a statement a feature claimed.
#[derive(Debug, PartialEq)]
pub(crate) enum Command<F> {
    /// `CREATE PROJECT` / `CREATE DATABASE` without a foreign engine.
    CreateProject { name: String, if_not_exists: bool },
    /// `CREATE DATABASE [IF NOT EXISTS] name [WITH] ENGINE = 'e', PARAMETERS = {…}`.
    CreateDatasource {
        name: String,
        engine: String,
        parameters: serde_json::Map<String, serde_json::Value>,
        if_not_exists: bool,
    },
    /// `ALTER DATABASE name [WITH] PARAMETERS = {…}` or `ALTER DATABASE name key = value, …`:
    /// parameters of a datasource to change (a null removes one).
    AlterDatasource {
        name: String,
        parameters: serde_json::Map<String, serde_json::Value>,
    },
    /// `DROP PROJECT|DATABASE|SCHEMA`: a project or a datasource.
    DropProject { name: String, if_exists: bool },
    /// `SHOW [FULL] DATABASES`.
    ShowDatabases { full: bool },
    /// `SHOW PROJECTS`.
    ShowProjects,
    /// `SHOW [FULL] TABLES [FROM|IN db]`.
    ShowTables { db: Option<String>, full: bool },
    /// `USE db`.
    Use(String),
    /// `SHOW [STORAGE] ENGINES`, `SHOW WARNINGS | ERRORS`, `SHOW FUNCTION | PROCEDURE STATUS`,
    /// each with an optional `LIKE 'pattern'`: what MySQL clients ask that sqlparser does not
    /// read (the runner answers them with the other client SHOWs).
    ShowClient {
        table: ClientTable,
        like: Option<String>,
    },
    /// A statement a feature claimed (see `Claim`), which the feature runs.
    Feature(F),
    /// Anything else: standard SQL for DataFusion, parameters already bound.
    Sql(Box<Statement>),
}

/// How deep expressions may nest. sqlparser's default (50) refuses machine-written conditions
/// that SQLite and DuckDB take; the parser grows its stack as it goes (its
/// `recursive-protection` feature), and this bound keeps a hostile text from growing it far.
const RECURSION_LIMIT: usize = 256;

/// Operators one chain of a statement may hold before it is parsed (a chain like `1 + 1 + …`
/// parses without recursion into a tree as deep as it is long, which then takes that much
/// stack to drop); far beyond `query.max_expression_depth`, which is checked on the parsed
/// tree.
const MAX_CHAIN_OPERATORS: usize = 50_000;

/// The shape a statement may have (`query.max_columns`, `query.max_expression_depth`):
/// checked on the syntax tree before anything walks it recursively.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShapeLimits {
    /// Items one select list may have.
    pub(crate) max_columns: usize,
    /// How deep expressions and queries may nest: every walk of a syntax tree is recursive,
    /// so this, not the input's size, bounds the stack they take.
    pub(crate) max_depth: usize,
}

impl ShapeLimits {
    /// The limits `query` configures.
    pub(crate) fn of(query: &crate::config::QueryConfig) -> ShapeLimits {
        ShapeLimits {
            max_columns: query.max_columns,
            max_depth: query.max_expression_depth,
        }
    }
}

/// How the parser asks the features for a statement: the statement `words` (one statement's
/// tokens, spaces left out) spell when a feature claims it by its leading words, `None` when
/// none does and the engine's own parser reads it. The parser knows no feature: the runner
/// hands it this, as DuckDB hands its parser the parser extensions.
pub(crate) type Claim<'c, F> = dyn Fn(&[&Token]) -> Result<Option<F>> + 'c;

/// Parses a request into commands, binding `params` into the SQL ones: a statement a feature
/// claims (`claim`) is that feature's, the rest the engine's. A statement must keep within
/// `limits`. MindsDB's variables (`@name`) in the values of MindsDB's and the features'
/// statements take their values from `variables` (see [`variables`]).
pub(crate) fn parse_limited<F>(
    sql: &str,
    params: &HashMap<String, serde_json::Value>,
    typed: &HashMap<String, TypedParam>,
    limits: ShapeLimits,
    claim: &Claim<'_, F>,
    variables: &variables::Lookup<'_>,
) -> Result<Vec<Command<F>>> {
    let tokens = tokens_of(sql)?;
    let tokens = normalise_tokens(tokens);
    let mut commands = Vec::new();
    for statement in split_statements(tokens) {
        let statement = show_system_tables(statement);
        let statement = native_queries(sql, mindsdb_forms(view_from_database(statement)));
        let words: Vec<&Token> = statement
            .iter()
            .map(|t| &t.token)
            .filter(|t| !is_space(t))
            .collect();
        if words.is_empty() {
            continue;
        }
        let bound = variables::substitute(&words, variables)?;
        let words = match &bound {
            Some(tokens) => tokens.iter().collect(),
            None => words,
        };
        if let Some(statement) = claim(&words)? {
            commands.push(Command::Feature(statement));
            continue;
        }
        if let Some(command) = mindsdb_command(&words)? {
            commands.push(command);
            continue;
        }
        check_chains(&statement, limits.max_depth)?;
        let mut parser = Parser::new(&GenericDialect {})
            .with_recursion_limit(RECURSION_LIMIT)
            .with_tokens_with_locations(statement);
        let mut parsed = parser
            .parse_statement()
            .map_err(|e| syntax_error(sql, &e.to_string()))?;
        if let Err(e) = check_shape(&parsed, limits) {
            dismantle(parsed);
            return Err(e);
        }
        if parser.peek_token().token != Token::EOF {
            let rest = parser.peek_token();
            return Err(syntax_error(
                sql,
                &format!("unexpected '{}' at {}", rest.token, rest.span.start),
            ));
        }
        double_quotes_as_strings(&mut parsed);
        bind_params(&mut parsed, params, typed)?;
        commands.push(Command::Sql(Box::new(parsed)));
    }
    if commands.is_empty() {
        return Err(Error::invalid("The query is empty"));
    }
    Ok(commands)
}

/// Fails when a chain of operators in `tokens` (counted along each nesting of parentheses,
/// restarting at each comma) is longer than [`MAX_CHAIN_OPERATORS`]: a bound on the depth of
/// the tree the statement would parse into, taken without building it.
fn check_chains(tokens: &[TokenWithSpan], max_depth: usize) -> Result<()> {
    // Operators counted at each open parenthesis level, innermost last.
    let mut levels: Vec<usize> = vec![0];
    let mut total = 0usize;
    for token in tokens {
        match &token.token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                levels.push(0);
                total += 1;
            }
            Token::RParen | Token::RBracket | Token::RBrace => {
                if levels.len() > 1 {
                    total -= levels.pop().unwrap_or(0) + 1;
                }
            }
            Token::Comma => {
                let current = levels.last_mut().expect("the outer level is never popped");
                total -= *current;
                *current = 0;
            }
            Token::Word(word) if is_operator_word(word) => {
                *levels.last_mut().expect("the outer level is never popped") += 1;
                total += 1;
            }
            Token::Word(_)
            | Token::Number(..)
            | Token::Whitespace(_)
            | Token::SemiColon
            | Token::Placeholder(_)
            | Token::EOF => {}
            Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::HexStringLiteral(_) => {}
            _ => {
                *levels.last_mut().expect("the outer level is never popped") += 1;
                total += 1;
            }
        }
        if total > MAX_CHAIN_OPERATORS {
            return Err(Error::invalid(format!(
                "The statement chains more than {MAX_CHAIN_OPERATORS} operators in one expression; statements may nest at most {max_depth} deep (the limit query.max_expression_depth)"
            )));
        }
    }
    Ok(())
}

/// Keywords that join or follow an operand, as an operator does.
fn is_operator_word(word: &Word) -> bool {
    word.quote_style.is_none()
        && matches!(
            word.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::IN
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::REGEXP
                | Keyword::RLIKE
                | Keyword::BETWEEN
                | Keyword::COLLATE
                | Keyword::AT
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::DIV
                | Keyword::ESCAPE
        )
}

/// Fails for a statement nested deeper than `limits.max_depth` (expressions in expressions,
/// queries in queries, set operations one after another) or with a select list of more than
/// `limits.max_columns` items. It is the first walk of the tree, and stops at the first level too
/// deep, so it takes at most that much stack itself.
fn check_shape(statement: &Statement, limits: ShapeLimits) -> Result<()> {
    struct Shape {
        depth: usize,
        max_columns: usize,
        max_depth: usize,
    }
    fn too_deep(max_depth: usize) -> Error {
        Error::invalid(format!(
            "The statement nests expressions or queries more than {max_depth} deep, over the limit query.max_expression_depth"
        ))
    }
    /// The set operations chained down the left of `body`, and its widest select list.
    fn chain(body: &SetExpr) -> (usize, usize) {
        let (mut length, mut widest) = (0, 0);
        let mut next = Some(body);
        while let Some(body) = next {
            next = None;
            match body {
                SetExpr::SetOperation { left, right, .. } => {
                    length += 1;
                    if let SetExpr::Select(select) = right.as_ref() {
                        widest = widest.max(select.projection.len());
                    }
                    next = Some(left);
                }
                SetExpr::Select(select) => widest = widest.max(select.projection.len()),
                _ => {}
            }
        }
        (length, widest)
    }
    impl Visitor for Shape {
        type Break = Error;
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
            let (length, widest) = chain(&query.body);
            if widest > self.max_columns {
                return ControlFlow::Break(Error::invalid(format!(
                    "The statement selects {widest} columns in one select list, more than the limit query.max_columns ({})",
                    self.max_columns
                )));
            }
            self.depth += 1 + length;
            if self.depth > self.max_depth {
                return ControlFlow::Break(too_deep(self.max_depth));
            }
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, query: &Query) -> ControlFlow<Error> {
            self.depth -= 1 + chain(&query.body).0;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<Error> {
            self.depth += 1;
            if self.depth > self.max_depth {
                return ControlFlow::Break(too_deep(self.max_depth));
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<Error> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
    }
    match statement.visit(&mut Shape {
        depth: 0,
        max_columns: limits.max_columns,
        max_depth: limits.max_depth,
    }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// A set expression with nothing in it, to leave in place of one taken out.
fn empty_body() -> SetExpr {
    SetExpr::Values(datafusion::sql::sqlparser::ast::Values {
        explicit_row: false,
        value_keyword: false,
        rows: Vec::new(),
    })
}

/// Drops a statement refused for its depth without recursing down its longest chains (set
/// operations and binary operators), which would take stack in proportion to their length.
fn dismantle(statement: Statement) {
    let mut bodies: Vec<SetExpr> = Vec::new();
    let mut exprs: Vec<Expr> = Vec::new();
    if let Statement::Query(mut query) = statement {
        bodies.push(std::mem::replace(query.body.as_mut(), empty_body()));
    }
    while let Some(body) = bodies.pop() {
        match body {
            SetExpr::SetOperation {
                mut left,
                mut right,
                ..
            } => {
                bodies.push(std::mem::replace(left.as_mut(), empty_body()));
                bodies.push(std::mem::replace(right.as_mut(), empty_body()));
            }
            SetExpr::Select(mut select) => {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } =
                        item
                    {
                        exprs.push(std::mem::replace(e, Expr::Value(Value::Null.into())));
                    }
                }
                if let Some(selection) = select.selection.take() {
                    exprs.push(selection);
                }
            }
            _ => {}
        }
    }
    while let Some(expr) = exprs.pop() {
        if let Expr::BinaryOp {
            mut left,
            mut right,
            ..
        } = expr
        {
            exprs.push(std::mem::replace(
                left.as_mut(),
                Expr::Value(Value::Null.into()),
            ));
            exprs.push(std::mem::replace(
                right.as_mut(),
                Expr::Value(Value::Null.into()),
            ));
        }
    }
}

fn syntax_error(sql: &str, detail: &str) -> Error {
    Error::invalid(format!(
        "The SQL statement cannot be parsed - {sql}: {detail}"
    ))
}

fn is_space(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// `sql`'s tokens with their places, raw (quoted texts as written). The tokenizer makes one
/// token of about 90 bytes for every space and sign, in one call nothing can stop: a statement
/// of 16 MB of spaces is 1.4 GB of tokens. What they can take at most is held for the
/// statement before they are made: one token per space or sign and per run of letters and
/// digits (a long literal is one token; counting its signs and spaces only overestimates), in
/// a vector that grows by doubling, and their texts.
pub(crate) fn tokens_of(sql: &str) -> Result<Vec<TokenWithSpan>> {
    let (mut tokens, mut in_word) = (1u64, false);
    for byte in sql.bytes() {
        let wordy = byte.is_ascii_alphanumeric() || byte == b'_' || byte >= 0x80;
        if !wordy || !in_word {
            tokens += 1;
        }
        in_word = wordy;
    }
    let most = tokens
        .saturating_mul(size_of::<TokenWithSpan>() as u64)
        .saturating_mul(2)
        .saturating_add(sql.len() as u64);
    let _held = crate::capacity::hold(most, "Reading the statement's words")?;
    Tokenizer::new(&MySqlDialect {}, sql)
        .with_unescape(false)
        .tokenize_with_location()
        .map_err(|e| syntax_error(sql, &e.to_string()))
}

/// `sql` with each positional parameter (`?` outside quotes and comments) replaced by the
/// named placeholder `:<name(n)>` (n from 1), and how many there were. The rest of the text is
/// kept byte for byte.
pub(crate) fn name_positional(
    sql: &str,
    name: impl Fn(usize) -> String,
) -> Result<(String, usize)> {
    let tokens = tokens_of(sql)?;
    let mut text = String::with_capacity(sql.len()); // bounded: the statement's own length
    let (mut copied, mut count) = (0usize, 0usize);
    // Where the walk through the text stands: a line and column (the tokenizer's, from 1, in
    // characters) and its byte. Tokens come in order, so the walk is once through the text.
    let (mut line, mut column, mut byte) = (1u64, 1u64, 0usize);
    let mut chars = sql.char_indices().peekable();
    for token in &tokens {
        if token.token != Token::Placeholder("?".to_string()) {
            continue;
        }
        let (want_line, want_column) = (token.span.start.line, token.span.start.column);
        while (line, column) < (want_line, want_column) {
            let Some((at, c)) = chars.next() else { break };
            byte = at + c.len_utf8();
            if c == '\n' {
                (line, column) = (line + 1, 1);
            } else {
                column += 1;
            }
        }
        if let Some(&(at, _)) = chars.peek() {
            byte = at;
        }
        if !sql[byte..].starts_with('?') {
            return Err(Error::internal(
                "a positional parameter's place in the text",
            ));
        }
        count += 1;
        if count > MAX_POSITIONAL {
            return Err(Error::invalid(format!(
                "The statement has more than {MAX_POSITIONAL} parameters, the most MySQL's protocol can bind"
            )));
        }
        text.push_str(&sql[copied..byte]);
        text.push(':');
        text.push_str(&name(count));
        copied = byte + 1;
    }
    text.push_str(&sql[copied..]);
    Ok((text, count))
}

/// The most positional parameters a statement may have: MySQL's protocol counts them in 16 bits.
const MAX_POSITIONAL: usize = 65_535;

/// The tokens of `sql` as a statement's are read (spaces and comments left out), for a
/// feature that rewrites stored statement text on tokens (a job's `LAST`) and writes it back
/// with [`words::tokens_text`].
pub(crate) fn words_of(sql: &str) -> Result<Vec<Token>> {
    let tokens = tokens_of(sql)?;
    Ok(normalise_tokens(tokens)
        .into_iter()
        .map(|t| t.token)
        .filter(|t| !is_space(t) && *t != Token::EOF)
        .collect())
}

/// Token fixes so the generic parser reads what MindsDB clients send: quoted texts unescaped
/// as MindsDB does (see [`unescape`]; the tokenizer keeps them raw), `"x"` is an identifier
/// (MySQL's tokenizer calls it a string), and a bare `None` (the Python SDK's null) is NULL.
fn normalise_tokens(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    tokens
        .into_iter()
        .map(|mut t| {
            t.token = match t.token {
                Token::SingleQuotedString(raw) => Token::SingleQuotedString(unescape(&raw, '\'')),
                Token::NationalStringLiteral(raw) => {
                    Token::NationalStringLiteral(unescape(&raw, '\''))
                }
                Token::DoubleQuotedString(raw) => Token::Word(Word {
                    value: unescape(&raw, '"'),
                    quote_style: Some('"'),
                    keyword: Keyword::NoKeyword,
                }),
                Token::Word(w) if w.quote_style.is_some_and(|q| q != '"') => {
                    let quote = w.quote_style.unwrap_or('`');
                    let doubled = format!("{quote}{quote}");
                    Token::Word(Word {
                        value: w.value.replace(&doubled, &quote.to_string()),
                        ..w
                    })
                }
                Token::Word(w) if w.quote_style.is_none() && w.value == "None" => {
                    Token::make_keyword("NULL")
                }
                other => other,
            };
            t
        })
        .collect()
}

/// A quoted text as MindsDB reads it: a doubled quote is one quote, MySQL's escapes (`\n`,
/// `\t`, `\r`, `\0`, `\b`, `\Z`, `\\`, `\'`, `\"`) are the characters they name, and any other
/// backslash stays with the character after it, so `'\d+'` is the regular expression `\d+`
/// (MySQL would read `d+`) and `LIKE '50\%'` keeps its escaped wildcard.
fn unescape(raw: &str, quote: char) -> String {
    // bounded: a literal of the statement, which is in memory
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote && chars.peek() == Some(&quote) {
            chars.next();
            out.push(quote);
            continue;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            None => out.push('\\'),
            Some('0') => out.push('\0'),
            Some('b') => out.push('\u{8}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('Z') => out.push('\u{1a}'),
            Some(escaped @ ('\\' | '\'' | '"')) => out.push(escaped),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

fn split_statements(tokens: Vec<TokenWithSpan>) -> Vec<Vec<TokenWithSpan>> {
    let mut out = vec![Vec::new()];
    // A `;` inside parentheses separates the statements of one (a job's), not two.
    let mut depth = 0usize;
    for token in tokens {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        match token.token {
            Token::SemiColon if depth == 0 => out.push(Vec::new()),
            Token::EOF => {}
            _ => out
                .last_mut()
                .expect("starts with one statement")
                .push(token),
        }
    }
    out.retain(|s| s.iter().any(|t| !is_space(&t.token)));
    out
}

fn is_word(token: &Token, text: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text))
}

fn synthetic(token: Token) -> TokenWithSpan {
    TokenWithSpan::new(token, Span::empty())
}

/// Rewrites MindsDB spellings into standard ones on tokens:
/// `CREATE [OR REPLACE] TABLE t [(] SELECT …` gets its `AS`, and `IN :ids` gets parentheses.
fn mindsdb_forms(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i].token))
        .collect();
    let at = |k: usize| positions.get(k).map(|&i| &tokens[i].token);
    let mut insert_as_before = None;
    if at(0).and_then(keyword) == Some(Keyword::CREATE) {
        let mut k = 1;
        if at(k).and_then(keyword) == Some(Keyword::OR)
            && at(k + 1).and_then(keyword) == Some(Keyword::REPLACE)
        {
            k += 2;
        }
        if at(k).and_then(keyword) == Some(Keyword::TABLE) {
            k += 1;
            if at(k).and_then(keyword) == Some(Keyword::IF) {
                k += 3;
            }
            // The table name: word(.word)*
            if matches!(at(k), Some(Token::Word(_))) {
                k += 1;
                while at(k) == Some(&Token::Period) && matches!(at(k + 1), Some(Token::Word(_))) {
                    k += 2;
                }
                let starts_query = |t: Option<&Token>| {
                    matches!(t.and_then(keyword), Some(Keyword::SELECT | Keyword::WITH))
                };
                if starts_query(at(k)) || (at(k) == Some(&Token::LParen) && starts_query(at(k + 1)))
                {
                    insert_as_before = positions.get(k).copied();
                }
            }
        }
    }
    // bounded: the statement's tokens, in memory
    let mut out = Vec::with_capacity(tokens.len() + 4);
    let mut i = 0;
    while i < tokens.len() {
        if Some(i) == insert_as_before {
            out.push(synthetic(Token::make_keyword("AS")));
            out.push(synthetic(Token::Whitespace(
                datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
            )));
        }
        let token = tokens[i].clone();
        let is_in = keyword(&token.token) == Some(Keyword::IN);
        out.push(token);
        if is_in {
            // IN :ids  ->  IN (:ids)
            let mut j = i + 1;
            while j < tokens.len() && is_space(&tokens[j].token) {
                j += 1;
            }
            let mut close = j + 1;
            while close < tokens.len() && is_space(&tokens[close].token) {
                close += 1;
            }
            if j < tokens.len()
                && tokens[j].token == Token::LParen
                && tokens.get(close).map(|t| &t.token) == Some(&Token::RParen)
            {
                // IN ()  ->  IN (SELECT NULL WHERE FALSE): the empty list SQLite takes, which
                // sqlparser does not (false, and NOT IN () true, whatever the left side).
                out.push(tokens[j].clone());
                for word in ["SELECT", "NULL", "WHERE", "FALSE"] {
                    out.push(synthetic(Token::Whitespace(
                        datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
                    )));
                    out.push(synthetic(Token::make_keyword(word)));
                }
                out.push(tokens[close].clone());
                i = close + 1;
                continue;
            }
            if j + 1 < tokens.len()
                && tokens[j].token == Token::Colon
                && matches!(tokens[j + 1].token, Token::Word(_))
            {
                out.push(synthetic(Token::LParen));
                out.push(tokens[j].clone());
                out.push(tokens[j + 1].clone());
                out.push(synthetic(Token::RParen));
                i = j + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// MindsDB's `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] v FROM db [AS] (query)` (what its SDK
/// sends) becomes `CREATE … VIEW v AS SELECT * FROM db (query)`: a view over a native query,
/// which `native_queries` then reads.
fn view_from_database(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i].token))
        .collect();
    let at = |k: usize| positions.get(k).map(|&i| &tokens[i].token);
    if at(0).and_then(keyword) != Some(Keyword::CREATE) {
        return tokens;
    }
    let mut k = 1;
    if at(k).and_then(keyword) == Some(Keyword::OR) {
        k += 2;
    }
    if at(k).and_then(keyword) != Some(Keyword::VIEW) {
        return tokens;
    }
    k += 1;
    if at(k).and_then(keyword) == Some(Keyword::IF) {
        k += 3;
    }
    if !matches!(at(k), Some(Token::Word(_))) {
        return tokens;
    }
    k += 1;
    while at(k) == Some(&Token::Period) && matches!(at(k + 1), Some(Token::Word(_))) {
        k += 2;
    }
    let from = k;
    if at(from).and_then(keyword) != Some(Keyword::FROM)
        || !matches!(at(from + 1), Some(Token::Word(_)))
    {
        return tokens;
    }
    // `AS` may be left out before the parenthesis, as MindsDB's parser allows.
    let has_as = at(from + 2).and_then(keyword) == Some(Keyword::AS);
    if !has_as && at(from + 2) != Some(&Token::LParen) {
        return tokens;
    }
    let (from_at, db_at) = (positions[from], positions[from + 1]);
    // Where the query starts: after AS, or at the parenthesis.
    let rest_at = match has_as {
        true => positions[from + 2] + 1,
        false => positions[from + 2],
    };
    let space = || {
        synthetic(Token::Whitespace(
            datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
        ))
    };
    // bounded: the statement's tokens, in memory
    let mut out = Vec::with_capacity(tokens.len() + 8);
    out.extend(tokens[..from_at].iter().cloned());
    out.push(synthetic(Token::make_keyword("AS")));
    for token in [
        space(),
        synthetic(Token::make_keyword("SELECT")),
        space(),
        synthetic(Token::Mul),
        space(),
        tokens[from_at].clone(),
        space(),
        tokens[db_at].clone(),
        space(),
    ] {
        out.push(token);
    }
    out.extend(tokens[rest_at..].iter().cloned());
    out
}

/// MindsDB's `SHOW ML_ENGINES|HANDLERS [LIKE 'pattern' | WHERE condition]` becomes `SELECT *
/// FROM information_schema.<table> [WHERE NAME LIKE 'pattern' | WHERE condition]`, as MindsDB
/// answers it, so the filter is ordinary SQL over the system table.
fn show_system_tables(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i].token))
        .collect();
    let at = |k: usize| positions.get(k).map(|&i| &tokens[i].token);
    if at(0).and_then(keyword) != Some(Keyword::SHOW) {
        return tokens;
    }
    let table = match at(1) {
        Some(t) if is_word(t, "ML_ENGINES") => "ml_engines",
        Some(t) if is_word(t, "HANDLERS") => "handlers",
        Some(t) if is_word(t, "JOBS") => "jobs",
        _ => return tokens,
    };
    // `SHOW JOBS` lists the current project's, or those of the project after FROM | IN.
    let mut k = 2;
    let mut project = None;
    if table == "jobs" && matches!(at(2).and_then(keyword), Some(Keyword::FROM | Keyword::IN)) {
        match at(3) {
            Some(Token::Word(w)) => project = Some(w.value.to_ascii_lowercase()),
            _ => return tokens,
        }
        k = 4;
    }
    let like = at(k).and_then(keyword) == Some(Keyword::LIKE);
    let filtered = like || at(k).and_then(keyword) == Some(Keyword::WHERE);
    if !filtered && at(k).is_some() {
        return tokens;
    }
    let space = || {
        synthetic(Token::Whitespace(
            datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
        ))
    };
    let word = |w: &str| synthetic(Token::make_word(w, None));
    let mut out = vec![
        synthetic(Token::make_keyword("SELECT")),
        space(),
        synthetic(Token::Mul),
        space(),
        synthetic(Token::make_keyword("FROM")),
        space(),
        word("information_schema"),
        synthetic(Token::Period),
        word(table),
    ];
    if table == "jobs" {
        out.extend([space(), synthetic(Token::make_keyword("WHERE")), space()]);
        out.extend([word("PROJECT"), space(), synthetic(Token::Eq), space()]);
        match project {
            Some(name) => out.push(synthetic(Token::SingleQuotedString(name))),
            None => out.extend([
                word("DATABASE"),
                synthetic(Token::LParen),
                synthetic(Token::RParen),
            ]),
        }
        if filtered {
            out.extend([space(), synthetic(Token::make_keyword("AND")), space()]);
        }
    } else if filtered {
        out.extend([space(), synthetic(Token::make_keyword("WHERE")), space()]);
    }
    if filtered {
        let from = positions[k];
        if like {
            out.extend([word("NAME"), space()]);
            // bounded: the statement's tokens, in memory
            out.extend(tokens[from..].iter().cloned());
        } else {
            // The condition in parentheses, so an OR in it stays inside.
            out.push(synthetic(Token::LParen));
            out.extend(tokens[from + 1..].iter().cloned());
            out.push(synthetic(Token::RParen));
        }
    }
    out
}

/// Rewrites each native query `FROM db (SELECT …)` (or after JOIN) into the table reference
/// `db."<NATIVE>SELECT …"`, which the datasource's schema runs as written (see
/// `crate::services::connectors::table::NATIVE`). CREATE MODEL and RETRAIN read their own `FROM db (…)`.
fn native_queries(sql: &str, tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let positions: Vec<usize> = (0..tokens.len())
        .filter(|&i| !is_space(&tokens[i].token))
        .collect();
    let at = |k: usize| positions.get(k).map(|&i| &tokens[i].token);
    let first = at(0);
    let trains = first.is_some_and(|t| is_word(t, "RETRAIN") || is_word(t, "FINETUNE"))
        || (first.and_then(keyword) == Some(Keyword::CREATE)
            && (1..4)
                .any(|k| at(k).is_some_and(|t| is_word(t, "MODEL") || is_word(t, "PREDICTOR"))));
    // A job's statements are kept as written, and read when it runs.
    let job = first.and_then(keyword) == Some(Keyword::CREATE)
        && at(1).is_some_and(|t| is_word(t, "JOB"));
    if trains || job {
        return tokens;
    }
    let starts_native = |t: Option<&Token>| {
        matches!(
            t.and_then(keyword),
            Some(
                Keyword::SELECT
                    | Keyword::WITH
                    | Keyword::VALUES
                    | Keyword::TABLE
                    | Keyword::SHOW
                    | Keyword::EXPLAIN
            )
        )
    };
    // (index of the database word, index of the closing parenthesis), in word positions.
    let mut spans = Vec::new();
    let mut k = 0;
    while k + 3 < positions.len() {
        let after_from = matches!(at(k).and_then(keyword), Some(Keyword::FROM | Keyword::JOIN));
        // `JOIN LATERAL (SELECT …)` and `FROM UNNEST(…)` are SQL, not a database's name.
        let names_database = matches!(
            at(k + 1),
            Some(Token::Word(w)) if w.quote_style.is_some()
                || !matches!(w.keyword, Keyword::LATERAL | Keyword::UNNEST)
        );
        if after_from
            && names_database
            && at(k + 2) == Some(&Token::LParen)
            && starts_native(at(k + 3))
        {
            let words: Vec<&Token> = positions.iter().map(|&i| &tokens[i].token).collect();
            if let Ok(close) = words::closing_paren(&words, k + 2) {
                spans.push((k + 1, close));
                k = close + 1;
                continue;
            }
        }
        k += 1;
    }
    if spans.is_empty() {
        return tokens;
    }
    // bounded: the statement's tokens, in memory
    let mut out = Vec::with_capacity(tokens.len());
    let mut next = 0;
    for (db, close) in spans {
        out.extend(tokens[next..=positions[db]].iter().cloned());
        // The text exactly as written (the tokenizer's MySQL rules would change backslashes
        // and quotes); rebuilt from tokens only if the positions are unknown.
        let open = &tokens[positions[db + 1]];
        let shut = &tokens[positions[close]];
        let text = match (
            byte_offset(sql, open.span.end),
            byte_offset(sql, shut.span.start),
        ) {
            (Some(from), Some(to)) if from <= to => sql[from..to].trim().to_string(),
            _ => {
                let inner: Vec<&Token> = positions[db + 2..close]
                    .iter()
                    .map(|&i| &tokens[i].token)
                    .collect();
                words::tokens_text(&inner)
            }
        };
        out.push(synthetic(Token::Period));
        out.push(synthetic(Token::Word(Word {
            value: format!("{}{text}", crate::services::connectors::table::NATIVE),
            quote_style: Some('"'),
            keyword: Keyword::NoKeyword,
        })));
        next = positions[close] + 1;
    }
    out.extend(tokens[next..].iter().cloned());
    out
}

/// The byte offset in `sql` of a tokenizer location (1-based line and character column);
/// `None` for a made-up token's empty location or one past the text.
fn byte_offset(sql: &str, at: datafusion::sql::sqlparser::tokenizer::Location) -> Option<usize> {
    if at.line == 0 {
        return None;
    }
    let (mut line, mut column) = (1, 1);
    for (i, ch) in sql.char_indices() {
        if line == at.line && column == at.column {
            return Some(i);
        }
        if ch == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line == at.line && column == at.column).then_some(sql.len())
}

/// Recognises MindsDB's own statements; `None` means "standard SQL".
fn mindsdb_command<F>(words: &[&Token]) -> Result<Option<Command<F>>> {
    let kw = |k: usize| words.get(k).and_then(|t| keyword(t));
    let name_at = |k: usize| -> Result<String> {
        match words.get(k) {
            Some(Token::Word(w)) => Ok(w.value.clone()),
            Some(other) => Err(Error::invalid(format!(
                "Expected a database name, found '{other}'"
            ))),
            None => Err(Error::invalid("Expected a database name")),
        }
    };
    let is_db_word = |k: usize| {
        matches!(kw(k), Some(Keyword::DATABASE | Keyword::SCHEMA))
            || words.get(k).is_some_and(|t| is_word(t, "PROJECT"))
    };
    let end_at = |k: usize| -> Result<()> {
        match words.get(k) {
            None => Ok(()),
            Some(extra) => Err(Error::invalid(format!(
                "Unexpected '{extra}' after the statement"
            ))),
        }
    };
    match kw(0) {
        Some(Keyword::CREATE) if is_db_word(1) => {
            let is_project = words.get(1).is_some_and(|t| is_word(t, "PROJECT"));
            let (if_not_exists, k) = if_exists_at(words, 2, true);
            let name = name_at(k)?;
            if is_project {
                end_at(k + 1)?;
            } else if let Some((engine, parameters)) = database_engine(&words[k + 1..])? {
                return Ok(Some(Command::CreateDatasource {
                    name,
                    engine,
                    parameters,
                    if_not_exists,
                }));
            }
            Ok(Some(Command::CreateProject {
                name,
                if_not_exists,
            }))
        }
        Some(Keyword::ALTER) if matches!(kw(1), Some(Keyword::DATABASE)) => {
            let name = name_at(2)?;
            let mut k = 3;
            if kw(k) == Some(Keyword::WITH) {
                k += 1;
            }
            let parameters = alter_pairs(words, k)?;
            Ok(Some(Command::AlterDatasource { name, parameters }))
        }
        Some(Keyword::DROP) if is_db_word(1) => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let name = name_at(k)?;
            end_at(k + 1)?;
            Ok(Some(Command::DropProject { name, if_exists }))
        }
        Some(Keyword::SHOW) => {
            let (full, k) = if kw(1) == Some(Keyword::FULL) {
                (true, 2)
            } else {
                (false, 1)
            };
            match kw(k) {
                Some(Keyword::DATABASES | Keyword::SCHEMAS) => {
                    end_at(k + 1)?;
                    Ok(Some(Command::ShowDatabases { full }))
                }
                Some(Keyword::TABLES) => {
                    let db = if matches!(kw(k + 1), Some(Keyword::FROM | Keyword::IN)) {
                        let db = name_at(k + 2)?;
                        end_at(k + 3)?;
                        Some(db)
                    } else {
                        end_at(k + 1)?;
                        None
                    };
                    Ok(Some(Command::ShowTables { db, full }))
                }
                _ if !full && words.get(k).is_some_and(|t| is_word(t, "PROJECTS")) => {
                    end_at(k + 1)?;
                    Ok(Some(Command::ShowProjects))
                }
                _ if !full => {
                    let word = |k: usize, w: &str| words.get(k).is_some_and(|t| is_word(t, w));
                    let (table, k) = if word(k, "ENGINES") {
                        (ClientTable::Engines, k + 1)
                    } else if word(k, "STORAGE") && word(k + 1, "ENGINES") {
                        (ClientTable::Engines, k + 2)
                    } else if word(k, "WARNINGS") {
                        (ClientTable::Warnings, k + 1)
                    } else if word(k, "ERRORS") {
                        (ClientTable::Errors, k + 1)
                    } else if kw(k) == Some(Keyword::FUNCTION) && word(k + 1, "STATUS") {
                        (ClientTable::FunctionStatus, k + 2)
                    } else if kw(k) == Some(Keyword::PROCEDURE) && word(k + 1, "STATUS") {
                        (ClientTable::ProcedureStatus, k + 2)
                    } else {
                        return Ok(None);
                    };
                    let like = show_like(&words[k..])?;
                    Ok(Some(Command::ShowClient { table, like }))
                }
                _ => Ok(None),
            }
        }
        Some(Keyword::USE) => {
            let name = name_at(1)?;
            end_at(2)?;
            Ok(Some(Command::Use(name)))
        }
        _ => Ok(None),
    }
}

/// A table of what MySQL clients ask about (see [`Command::ShowClient`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientTable {
    /// `SHOW [STORAGE] ENGINES`.
    Engines,
    /// `SHOW WARNINGS`.
    Warnings,
    /// `SHOW ERRORS`.
    Errors,
    /// `SHOW FUNCTION STATUS`.
    FunctionStatus,
    /// `SHOW PROCEDURE STATUS`.
    ProcedureStatus,
}

/// A SHOW's `LIKE 'pattern'` (`rest` is what follows its name), or none. These SHOWs take no
/// WHERE: their tables are one row or none (MindsDB ignores both filters).
fn show_like(rest: &[&Token]) -> Result<Option<String>> {
    match rest {
        [] => Ok(None),
        [like, Token::SingleQuotedString(pattern)] if keyword(like) == Some(Keyword::LIKE) => {
            Ok(Some(pattern.clone()))
        }
        [first, ..] => Err(Error::invalid(format!(
            "Expected nothing or LIKE 'pattern' after the SHOW, found '{first}'"
        ))),
    }
}

/// After `CREATE DATABASE name`: `[WITH] [ENGINE [=] 'e'] [,] [PARAMETERS [=] {…}]`. `None`
/// means a project (no engine, or `mindsdb` without parameters); otherwise the engine and its
/// parameters, for a datasource.
#[allow(clippy::type_complexity)]
fn database_engine(
    rest: &[&Token],
) -> Result<Option<(String, serde_json::Map<String, serde_json::Value>)>> {
    let mut k = 0;
    if rest.get(k).and_then(|t| keyword(t)) == Some(Keyword::WITH) {
        k += 1;
    }
    if rest.is_empty() || k == rest.len() && k > 0 {
        return if k == 0 {
            Ok(None)
        } else {
            Err(Error::invalid("WITH must be followed by ENGINE"))
        };
    }
    if rest.get(k).and_then(|t| keyword(t)) != Some(Keyword::ENGINE) {
        return Err(Error::invalid(format!(
            "Expected ENGINE = 'engine' after the database name, found '{}'",
            rest[k]
        )));
    }
    k += 1;
    if rest.get(k) == Some(&&Token::Eq) {
        k += 1;
    }
    let engine = match rest.get(k) {
        Some(Token::SingleQuotedString(s)) => s.clone(),
        Some(Token::Word(w)) => w.value.clone(),
        _ => return Err(Error::invalid("ENGINE must be followed by an engine name")),
    };
    k += 1;
    if rest.get(k) == Some(&&Token::Comma) {
        k += 1;
    }
    if k == rest.len() {
        if engine.eq_ignore_ascii_case("mindsdb") {
            return Ok(None);
        }
        return Ok(Some((engine, serde_json::Map::new())));
    }
    let parameters = parameters_at(rest, k)?;
    if engine.eq_ignore_ascii_case("mindsdb") {
        return Err(Error::invalid("A project takes no PARAMETERS"));
    }
    Ok(Some((engine, parameters)))
}

/// `key = value, …` from word `k` to the end, as changes; `parameters = {…}` (as MindsDB's SDK
/// writes it) means the object's keys.
fn alter_pairs(
    words: &[&Token],
    mut k: usize,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut changes = serde_json::Map::new();
    if k == words.len() {
        return Err(Error::invalid(
            "Expected PARAMETERS = {…} or key = value after ALTER DATABASE name",
        ));
    }
    loop {
        let key = match words.get(k) {
            Some(Token::Word(w)) => w.value.to_ascii_lowercase(),
            Some(Token::SingleQuotedString(s)) => s.to_ascii_lowercase(),
            other => {
                return Err(Error::invalid(format!(
                    "Expected a parameter name, found '{}'",
                    other.map(|t| t.to_string()).unwrap_or_default()
                )))
            }
        };
        if words.get(k + 1) != Some(&&Token::Eq) {
            return Err(Error::invalid(format!("Expected '=' after '{key}'")));
        }
        k += 2;
        let value = words::json_value(words, &mut k)?;
        match (key.as_str(), value) {
            ("parameters", serde_json::Value::Object(object)) => changes.extend(object),
            ("parameters", _) => {
                return Err(Error::invalid(
                    "PARAMETERS must be an object: {\"key\": value, …}",
                ))
            }
            (_, value) => {
                changes.insert(key, value);
            }
        }
        match words.get(k) {
            None => return Ok(changes),
            Some(Token::Comma) => k += 1,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "Expected ',' between parameters, found '{other}'"
                )))
            }
        }
    }
}

/// `PARAMETERS [=] {…}` from word `k` to the end.
fn parameters_at(
    words: &[&Token],
    mut k: usize,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    if !words.get(k).is_some_and(|t| is_word(t, "PARAMETERS")) {
        return Err(Error::invalid(match words.get(k) {
            Some(other) => format!("Expected PARAMETERS = {{…}}, found '{other}'"),
            None => "Expected PARAMETERS = {…}".to_string(),
        }));
    }
    k += 1;
    if words.get(k) == Some(&&Token::Eq) {
        k += 1;
    }
    let value = words::json_value(words, &mut k)?;
    let serde_json::Value::Object(parameters) = value else {
        return Err(Error::invalid(
            "PARAMETERS must be an object: {\"key\": value, …}",
        ));
    };
    match words.get(k) {
        None => Ok(parameters),
        Some(extra) => Err(Error::invalid(format!(
            "Unexpected '{extra}' after PARAMETERS"
        ))),
    }
}

/// Turns each `"x"` standing alone as a value into the string `'x'`; see the module notes.
fn double_quotes_as_strings(statement: &mut Statement) {
    struct Strings;
    impl VisitorMut for Strings {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::Identifier(ident) = expr {
                if ident.quote_style == Some('"') {
                    let text = std::mem::take(&mut ident.value);
                    *expr = Expr::Value(Value::SingleQuotedString(text).into());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Strings);
}

/// Drops unary `+`, which SQL defines as the value itself: DataFusion refuses it on anything
/// but numbers, where SQLite and MySQL take `+'text'` and `+NULL` as they are. Run after
/// result names are taken from the text, so `SELECT +a` still shows `+a`.
pub(crate) fn without_unary_plus(statement: &mut Statement) {
    struct Plus;
    impl VisitorMut for Plus {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::UnaryOp {
                op: UnaryOperator::Plus,
                expr: inner,
            } = expr
            {
                *expr = std::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Plus);
}

/// Replaces `:name` placeholders with literal values from `params` and `typed`. A JSON array
/// expands into the list of an `IN (…)`; an empty array makes the IN false (NOT IN true).
fn bind_params(
    statement: &mut Statement,
    params: &HashMap<String, serde_json::Value>,
    typed: &HashMap<String, TypedParam>,
) -> Result<()> {
    enum Param<'p> {
        Json(&'p serde_json::Value),
        Typed(&'p TypedParam),
    }
    struct Binder<'p> {
        params: &'p HashMap<String, serde_json::Value>,
        typed: &'p HashMap<String, TypedParam>,
        /// The literals list parameters expand into, over all their uses.
        expanded: crate::capacity::Tally,
    }
    impl<'p> Binder<'p> {
        fn lookup(&self, placeholder: &str) -> Result<Option<Param<'p>>> {
            let Some(name) = placeholder.strip_prefix(':') else {
                return Ok(None);
            };
            if let Some(value) = self.typed.get(name) {
                return Ok(Some(Param::Typed(value)));
            }
            self.params
                .get(name)
                .map(|value| Some(Param::Json(value)))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "Unknown parameter ':{name}': it is not in the query's params"
                    ))
                })
        }
    }
    impl VisitorMut for Binder<'_> {
        type Break = Error;
        fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Error> {
            if let Expr::InList { list, negated, .. } = expr {
                // bounded: the list as written in the statement, in memory
                let mut expanded = Vec::with_capacity(list.len());
                for item in list.drain(..) {
                    match placeholder(&item).map(|p| self.lookup(p)) {
                        Some(Err(e)) => return ControlFlow::Break(e),
                        Some(Ok(Some(Param::Json(serde_json::Value::Array(values))))) => {
                            // Each use copies the whole list into the syntax tree.
                            let bytes = values.iter().map(literal_bytes).sum::<u64>();
                            let what = "Expanding the list parameters into the statement";
                            if let Err(e) = self.expanded.add(bytes, what) {
                                return ControlFlow::Break(e);
                            }
                            expanded.extend(values.iter().map(literal));
                        }
                        _ => expanded.push(item),
                    }
                }
                if expanded.is_empty() {
                    *expr = Expr::Value(Value::Boolean(*negated).into());
                } else {
                    *list = expanded;
                }
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Error> {
            if let Some(p) = placeholder(expr) {
                match self.lookup(p) {
                    Err(e) => return ControlFlow::Break(e),
                    Ok(Some(Param::Json(serde_json::Value::Array(_)))) => {
                        return ControlFlow::Break(Error::invalid(format!(
                            "Parameter '{p}' is a list; a list can only stand in IN (…)"
                        )))
                    }
                    Ok(Some(Param::Json(value))) => {
                        // Each use copies the value into the syntax tree.
                        let what = "Putting the parameters' values into the statement";
                        if let Err(e) = self.expanded.add(literal_bytes(value), what) {
                            return ControlFlow::Break(e);
                        }
                        *expr = literal(value)
                    }
                    Ok(Some(Param::Typed(value))) => match self
                        .expanded
                        .add(
                            typed_bytes(value),
                            "Putting the parameters' values into the statement",
                        )
                        .and_then(|()| typed_literal(p, value))
                    {
                        Ok(typed) => *expr = typed,
                        Err(e) => return ControlFlow::Break(e),
                    },
                    Ok(None) => {}
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut binder = Binder {
        params,
        typed,
        expanded: crate::capacity::Tally::default(),
    };
    match statement.visit(&mut binder) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// What the literal node of a JSON value costs: the node and the text it holds.
fn literal_bytes(value: &serde_json::Value) -> u64 {
    let text = match value {
        serde_json::Value::String(s) => s.len(),
        serde_json::Value::Number(_) => 24,
        serde_json::Value::Null | serde_json::Value::Bool(_) => 0,
        other => other.to_string().len(),
    };
    (size_of::<Expr>() + text) as u64
}

/// What the literal node of a typed value costs (bytes are written as hex digits).
fn typed_bytes(value: &TypedParam) -> u64 {
    let text = match value {
        TypedParam::Date(s) | TypedParam::Timestamp(s) | TypedParam::Decimal(s) => s.len(),
        TypedParam::Bytes(b) => b.len().saturating_mul(2),
    };
    (size_of::<Expr>() + text) as u64
}

/// A typed parameter as a SQL literal node, its text checked first so a malformed value is an
/// error naming the parameter rather than a cast failure at run time.
fn typed_literal(placeholder: &str, value: &TypedParam) -> Result<Expr> {
    let bad = |what: &str, text: &str| {
        Error::invalid(format!("Parameter '{placeholder}' is not {what}: '{text}'"))
    };
    let cast = |text: &str, data_type: DataType| Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Value(
            Value::SingleQuotedString(text.to_string()).into(),
        )),
        data_type,
        array: false,
        format: None,
    };
    match value {
        TypedParam::Date(text) => {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .map_err(|_| bad("a date (YYYY-MM-DD)", text))?;
            Ok(cast(text, DataType::Date))
        }
        TypedParam::Timestamp(text) => {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                .map_err(|_| bad("a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff])", text))?;
            // Microseconds, as Python's and most clients' times: nanoseconds would refuse
            // dates outside 1677–2262.
            Ok(cast(text, DataType::Timestamp(Some(6), TimezoneInfo::None)))
        }
        TypedParam::Decimal(text) => {
            let digits = text.strip_prefix('-').unwrap_or(text);
            let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
            let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
            if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) {
                return Err(bad("a decimal number in plain notation", text));
            }
            let precision = (whole.len() + fraction.len()).max(1);
            if precision > 38 {
                return Err(Error::invalid(format!(
                    "Parameter '{placeholder}' has {precision} digits; decimals take at most 38"
                )));
            }
            let data_type = Parser::new(&GenericDialect {})
                .try_with_sql(&format!("DECIMAL({precision}, {})", fraction.len()))
                .and_then(|mut parser| parser.parse_data_type())
                .map_err(|e| Error::internal(format!("decimal type: {e}")))?;
            Ok(cast(text, data_type))
        }
        TypedParam::Bytes(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
            Ok(Expr::Value(Value::HexStringLiteral(hex).into()))
        }
    }
}

fn placeholder(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(ValueWithSpan {
            value: Value::Placeholder(p),
            ..
        }) => Some(p.as_str()),
        _ => None,
    }
}

/// A JSON value as a SQL literal node.
fn literal(value: &serde_json::Value) -> Expr {
    let value = match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => Value::Number(n.to_string(), false),
        serde_json::Value::String(s) => Value::SingleQuotedString(s.clone()),
        other => Value::SingleQuotedString(other.to_string()),
    };
    Expr::Value(value.into())
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_parameters_are_named_where_they_stand_and_nowhere_else() {
        let sql = "SELECT '?', `?`, \"?\" -- ?\nFROM t WHERE a = ? AND b IN (?, ?) /* ? */ AND c = 'é?'||?";
        let (named, count) = name_positional(sql, |n| format!("p{n}")).unwrap();
        assert_eq!(count, 4);
        assert_eq!(
            named,
            "SELECT '?', `?`, \"?\" -- ?\nFROM t WHERE a = :p1 AND b IN (:p2, :p3) /* ? */ AND c = 'é?'||:p4"
        );
        assert_eq!(
            name_positional("SELECT 1", |n| n.to_string()).unwrap(),
            ("SELECT 1".to_string(), 0)
        );
    }

    fn sql_of(text: &str, params: serde_json::Value) -> String {
        let params: HashMap<String, serde_json::Value> = serde_json::from_value(params).unwrap();
        match parse(text, &params, &HashMap::new())
            .unwrap()
            .pop()
            .unwrap()
        {
            Command::Sql(s) => s.to_string(),
            other => panic!("not SQL: {other:?}"),
        }
    }

    #[test]
    fn mindsdb_create_table_forms_get_their_as() {
        assert_eq!(
            sql_of("CREATE TABLE db.t SELECT 1", serde_json::json!({})),
            "CREATE TABLE db.t AS SELECT 1"
        );
        assert_eq!(
            sql_of(
                "CREATE OR REPLACE TABLE db.t (SELECT * FROM x)",
                serde_json::json!({})
            ),
            "CREATE OR REPLACE TABLE db.t AS (SELECT * FROM x)"
        );
        assert_eq!(
            sql_of("CREATE TABLE t (a INT)", serde_json::json!({})),
            "CREATE TABLE t (a INT)"
        );
    }

    #[test]
    fn parameters_become_literals_and_lists() {
        let sql = sql_of(
            "SELECT * FROM t WHERE a = :a AND b IN :ids AND c = :c AND d = :d",
            serde_json::json!({"a": "it's \\ here", "ids": [1, 2, 3], "c": null, "d": 1.5}),
        );
        assert_eq!(
            sql,
            "SELECT * FROM t WHERE a = 'it''s \\ here' AND b IN (1, 2, 3) AND c = NULL AND d = 1.5"
        );
    }

    #[test]
    fn unknown_parameter_is_an_error() {
        let err = parse("SELECT :nope", &HashMap::new(), &HashMap::new()).unwrap_err();
        assert!(err.message().contains(":nope"), "{err}");
    }

    #[test]
    fn sdk_literals_are_tolerated() {
        assert_eq!(
            sql_of(
                "select * from t where n = None and s = 'it\\'s'",
                serde_json::json!({})
            ),
            "SELECT * FROM t WHERE n = NULL AND s = 'it''s'"
        );
    }

    #[test]
    fn double_quotes_are_strings_as_values_and_names_elsewhere() {
        assert_eq!(
            sql_of(
                r#"insert into "t" ("a", b) values (1, "it\'s"), (2, "x")"#,
                serde_json::json!({})
            ),
            r#"INSERT INTO "t" ("a", b) VALUES (1, 'it''s'), (2, 'x')"#
        );
        assert_eq!(
            sql_of(
                r#"select `c` as "n", t."d" from t as "t" where c = "v""#,
                serde_json::json!({})
            ),
            r#"SELECT `c` AS "n", t."d" FROM t AS "t" WHERE c = 'v'"#
        );
    }

    #[test]
    fn show_ml_engines_and_handlers_read_their_system_tables() {
        let json = serde_json::json!({});
        assert_eq!(
            sql_of("SHOW ML_ENGINES", json.clone()),
            "SELECT * FROM information_schema.ml_engines"
        );
        assert_eq!(
            sql_of("show handlers like 'p%'", json.clone()),
            "SELECT * FROM information_schema.handlers WHERE NAME LIKE 'p%'"
        );
        assert_eq!(
            sql_of(
                "SHOW HANDLERS WHERE type = 'ml' AND name <> 'x'",
                json.clone()
            ),
            "SELECT * FROM information_schema.handlers WHERE (type = 'ml' AND name <> 'x')"
        );
        assert_eq!(
            sql_of("SHOW JOBS", json.clone()),
            "SELECT * FROM information_schema.jobs WHERE PROJECT = DATABASE()"
        );
        assert_eq!(
            sql_of("SHOW JOBS FROM P WHERE name = 'a' OR name = 'b'", json.clone()),
            "SELECT * FROM information_schema.jobs WHERE PROJECT = 'p' AND (name = 'a' OR name = 'b')"
        );
    }

    #[test]
    fn mindsdb_statements_are_recognised() {
        let none = HashMap::new();
        assert!(matches!(
            parse("create project if not exists p1", &none, &HashMap::new()).unwrap()[0],
            Command::CreateProject {
                if_not_exists: true,
                ..
            }
        ));
        assert!(matches!(
            parse(
                "CREATE DATABASE p ENGINE = 'mindsdb'",
                &none,
                &HashMap::new()
            )
            .unwrap()[0],
            Command::CreateProject { .. }
        ));
        match &parse(
            "CREATE DATABASE IF NOT EXISTS pg WITH ENGINE = 'postgres', PARAMETERS = {\"host\": '127.0.0.1', \"port\": 5432}",
            &none,
            &HashMap::new(),
        )
        .unwrap()[0]
        {
            Command::CreateDatasource {
                name,
                engine,
                parameters,
                if_not_exists: true,
            } => {
                assert_eq!((name.as_str(), engine.as_str()), ("pg", "postgres"));
                assert_eq!(parameters["port"], 5432);
                assert_eq!(parameters["host"], "127.0.0.1");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            &parse("ALTER DATABASE pg PARAMETERS = {'port': 5433}", &none, &HashMap::new()).unwrap()[0],
            Command::AlterDatasource { name, parameters } if name == "pg" && parameters["port"] == 5433
        ));
        assert!(matches!(
            &parse("ALTER DATABASE pg password = 'x', port = 1", &none, &HashMap::new()).unwrap()[0],
            Command::AlterDatasource { parameters, .. } if parameters["password"] == "x" && parameters["port"] == 1
        ));
        assert!(parse(
            "CREATE DATABASE p ENGINE = 'mindsdb', PARAMETERS = {}",
            &none,
            &HashMap::new()
        )
        .unwrap_err()
        .message()
        .contains("no PARAMETERS"));
        assert!(parse(
            "CREATE DATABASE p ENGINE = 'postgres' PARAMETERS = [1]",
            &none,
            &HashMap::new()
        )
        .unwrap_err()
        .message()
        .contains("must be an object"));
        // A native query reaches the datasource as written, backslashes and all.
        let native = r"SELECT * FROM pg (SELECT code FROM t WHERE code ~ '^\d+$' AND a::int > 1) AS q JOIN LATERAL (SELECT 1) AS l ON true";
        match &parse(native, &none, &HashMap::new()).unwrap()[0] {
            Command::Sql(statement) => {
                let text = statement.to_string();
                assert!(
                    text.contains(r"SELECT code FROM t WHERE code ~ '^\d+$' AND a::int > 1"),
                    "{text}"
                );
                assert!(text.contains("LATERAL (SELECT 1)"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("SHOW FULL DATABASES", &none, &HashMap::new()).unwrap()[0],
            Command::ShowDatabases { full: true }
        ));
        assert!(
            matches!(&parse("show tables from p", &none, &HashMap::new()).unwrap()[0], Command::ShowTables { db: Some(d), .. } if d == "p")
        );
        assert!(matches!(
            parse("DROP PROJECT IF EXISTS p", &none, &HashMap::new()).unwrap()[0],
            Command::DropProject {
                if_exists: true,
                ..
            }
        ));
        assert_eq!(
            parse("USE p; SELECT 1;", &none, &HashMap::new())
                .unwrap()
                .len(),
            2
        );
    }
}
