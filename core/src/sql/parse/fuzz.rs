//! Fuzz targets for the statement parser (`parse::parse`): statements from a grammar of the
//! SQL and MindsDB forms clients send, with extreme sizes (deep nesting, long texts, many
//! statements, many and long parameters), and soup of the tokens the parser looks at. A
//! parse either succeeds or fails with an `InvalidInput` error that says something; it never
//! panics, overflows its stack (2 MiB, a runtime worker's) or allocates past the limit.
//! `mindlite-fuzz` runs them; see its docs
//! (fuzz/src/lib.rs) for running them longer.

use std::collections::HashMap;

use mindlite_fuzz::{extreme_number, note, Target, Unstructured};
use serde_json::{json, Value};

use super::{parse, Command};
use crate::error::ErrorKind;
use crate::sql::TypedParam;

type Draw<T> = mindlite_fuzz::arbitrary::Result<T>;

/// Parses `sql` with `params` and `typed` and checks the outcome; every target ends here.
fn parses_or_says_why(
    sql: &str,
    params: &HashMap<String, Value>,
    typed: &HashMap<String, TypedParam>,
) {
    note("sql", &sql);
    note("params", &params);
    note("typed params", &typed);
    match parse(sql, params, typed) {
        Ok(commands) => {
            assert!(!commands.is_empty(), "a parse without commands");
            // What runs next walks the tree recursively too: showing it must not fall over.
            for command in &commands {
                if let Command::Sql(statement) = command {
                    let _ = statement.to_string();
                }
            }
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(!e.message().trim().is_empty(), "an error without a message");
        }
    }
}

/// Words, marks and literals the parser treats specially, to be strung together at random.
const SOUP: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "IN",
    "NOT",
    "AND",
    "OR",
    "(",
    ")",
    ",",
    ";",
    ".",
    "*",
    "=",
    ":",
    "::",
    "-",
    "+",
    "[",
    "]",
    "{",
    "}",
    "CREATE",
    "OR",
    "REPLACE",
    "TABLE",
    "VIEW",
    "DATABASE",
    "PROJECT",
    "SCHEMA",
    "ALTER",
    "DROP",
    "SHOW",
    "FULL",
    "DATABASES",
    "TABLES",
    "USE",
    "IF",
    "EXISTS",
    "WITH",
    "ENGINE",
    "PARAMETERS",
    "AGENT",
    "AGENTS",
    "KNOWLEDGE_BASE",
    "KNOWLEDGE_BASES",
    "MODEL",
    "PREDICTOR",
    "MODELS",
    "PREDICT",
    "USING",
    "RETRAIN",
    "FINETUNE",
    "SET",
    "active",
    "DESCRIBE",
    "DESC",
    "ORDER",
    "GROUP",
    "BY",
    "WINDOW",
    "HORIZON",
    "AS",
    "JOIN",
    "LATERAL",
    "UNNEST",
    "VALUES",
    "INSERT",
    "INTO",
    "None",
    "NULL",
    "true",
    "false",
    "LIMIT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "EXPLAIN",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "mindsdb",
    "files",
    "db",
    "t",
    "a",
    "x",
    "1",
    "0",
    "-1",
    "1.5e308",
    "99999999999999999999",
    "'text'",
    "'it\\'s'",
    "'\\\\'",
    "'\\'",
    "''''",
    "\"q\"",
    "\"a\\\"b\"",
    "`b`",
    "`a``b`",
    ":a",
    ":ids",
    ":nope",
    ":",
    "--",
    "/*",
    "*/",
    "#",
    "\n",
    "\t",
    " ",
    "\\",
    "'",
    "\"",
    "`",
    "é",
    "東",
    "\u{0}",
    "\u{feff}",
    "N'x'",
    "X'ff'",
    "$1",
    "?",
    "@x",
    "%",
    "<=>",
    "||",
];

/// Any tokens of [`SOUP`], in any order, with any parameters.
#[test]
fn statement_parser_survives_token_soup() {
    Target::new(100_000).run(|u| {
        let mut sql = String::new();
        for _ in 0..u.int_in_range(0..=80)? {
            sql.push_str(u.choose(SOUP)?);
            if u.ratio(3, 4)? {
                sql.push(' ');
            }
        }
        let (params, typed) = params(u)?;
        parses_or_says_why(&sql, &params, &typed);
        Ok(())
    });
}

/// Random text, as bytes made into UTF-8.
#[test]
fn statement_parser_survives_random_text() {
    Target::new(200_000).run(|u| {
        let bytes: Vec<u8> = u.arbitrary()?;
        let sql = String::from_utf8_lossy(&bytes);
        parses_or_says_why(&sql, &HashMap::new(), &HashMap::new());
        Ok(())
    });
}

/// Statements of the grammar below: plausible enough to get past the first tokens, with
/// extreme sizes.
#[test]
fn statement_parser_survives_generated_statements() {
    Target::new(20_000).run(|u| {
        let (params, typed) = params(u)?;
        let mut g = Gen {
            u,
            out: String::new(),
            names: params.keys().chain(typed.keys()).cloned().collect(),
            budget: 40,
        };
        let statements = if g.u.ratio(1, 8)? {
            g.u.int_in_range(2..=20)?
        } else {
            1
        };
        for i in 0..statements {
            if i > 0 {
                g.out.push_str(";\n");
            }
            g.statement()?;
        }
        if g.u.ratio(1, 4)? {
            g.out.push(';');
        }
        let sql = g.out;
        parses_or_says_why(&sql, &params, &typed);
        Ok(())
    });
}

/// Valid statements grown to extreme sizes: nesting at and past the parser's limit, long
/// statements, many statements, many parameters, and a list parameter used many times. Every
/// shape at every size, in one case (a child process, so an overflow is reported, not fatal).
#[test]
fn statement_parser_survives_extreme_sizes() {
    Target::new(1).run(|u| {
        for shape in 0..10 {
            for n in [
                1usize, 50, 128, 255, 256, 257, 1_000, 5_000, 20_000, 100_000,
            ] {
                let (sql, params) = extreme(shape, n, u.int_in_range(0..=1_000)?);
                note("shape and size", &(shape, n));
                parses_or_says_why(&sql, &params, &HashMap::new());
            }
        }
        Ok(())
    });
}

/// Statement `shape` (see the match) at size `n`; `values` is the length of a list parameter.
fn extreme(shape: u8, n: usize, values: usize) -> (String, HashMap<String, Value>) {
    let mut params = HashMap::new();
    let sql = match shape {
        0 => format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)),
        1 => format!("SELECT {}1", "NOT ".repeat(n)),
        2 => format!("SELECT {}1", "- ".repeat(n)),
        3 => format!(
            "SELECT * FROM t WHERE {}",
            vec!["a = 1"; n.min(20_000)].join(" AND ")
        ),
        4 => format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n)),
        5 => format!(
            "CREATE AGENT a USING data = {}1{}",
            "[".repeat(n),
            "]".repeat(n)
        ),
        6 => format!(
            "CREATE DATABASE d ENGINE = 'postgres', PARAMETERS = {}{}",
            "{\"k\": ".repeat(n),
            "}".repeat(n)
        ),
        7 => "SELECT 1;".repeat(n.min(20_000)),
        // A list used many times is copied at every use: kept to sizes that fit the limit
        // (the expansion's own bound is the memory accounting's business).
        8 => {
            params.insert("a".to_string(), json!((0..values).collect::<Vec<_>>()));
            format!(
                "SELECT * FROM t WHERE {}",
                vec!["a IN :a"; n.min(200)].join(" OR ")
            )
        }
        _ => {
            let count = n.min(5_000);
            for i in 0..count {
                params.insert(format!("p{i}"), json!(i));
            }
            let list: Vec<String> = (0..count).map(|i| format!(":p{i}")).collect();
            format!("SELECT {}", list.join(", "))
        }
    };
    (sql, params)
}

/// Parameters as a request may carry them: names the generator uses, values of every JSON
/// kind (long lists among them), and typed values whose text may not be what they claim.
fn params(u: &mut Unstructured<'_>) -> Draw<(HashMap<String, Value>, HashMap<String, TypedParam>)> {
    let mut params = HashMap::new();
    let mut typed = HashMap::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let name = (*u.choose(&["a", "ids", "b", "x", "A", "é", ""])?).to_string();
        if u.ratio(1, 4)? {
            let text = text_value(u)?;
            let value = match u.int_in_range(0..=3u8)? {
                0 => TypedParam::Date(text),
                1 => TypedParam::Timestamp(text),
                2 => TypedParam::Decimal(text),
                _ => TypedParam::Bytes(u.arbitrary()?),
            };
            typed.insert(name, value);
        } else {
            params.insert(name, json_value(u, 3)?);
        }
    }
    Ok((params, typed))
}

fn text_value(u: &mut Unstructured<'_>) -> Draw<String> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => "2024-02-30".into(),
        1 => "2024-01-31 25:61:00.1234567890".into(),
        2 => format!(
            "-{}.{}",
            "9".repeat(u.int_in_range(0..=60)?),
            "1".repeat(u.int_in_range(0..=60)?)
        ),
        3 => "1e5".into(),
        4 => String::new(),
        _ => u.arbitrary()?,
    })
}

fn json_value(u: &mut Unstructured<'_>, depth: u32) -> Draw<Value> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Value::Null,
        1 => json!(u.arbitrary::<bool>()?),
        2 => json!(extreme_number(u)?),
        3 => json!((extreme_number(u)? as i64).wrapping_neg()),
        4 => json!(u.arbitrary::<f64>()?),
        5 => json!(text_value(u)?),
        6 if depth > 0 => {
            let len = if u.ratio(1, 10)? {
                u.int_in_range(0..=2_000)?
            } else {
                u.int_in_range(0..=4)?
            };
            let mut items = Vec::new();
            for _ in 0..len {
                items.push(if u.is_empty() {
                    json!(items.len())
                } else {
                    json_value(u, depth - 1)?
                });
            }
            Value::Array(items)
        }
        _ if depth > 0 => {
            let mut object = serde_json::Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                object.insert(u.arbitrary()?, json_value(u, depth - 1)?);
            }
            Value::Object(object)
        }
        _ => json!("leaf"),
    })
}

/// A writer of random statements; `budget` bounds how much more structure it may add.
struct Gen<'u, 'b> {
    u: &'u mut Unstructured<'b>,
    out: String,
    names: Vec<String>,
    budget: u32,
}

impl Gen<'_, '_> {
    fn push(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn spend(&mut self) -> bool {
        if self.budget == 0 || self.u.is_empty() {
            return false;
        }
        self.budget -= 1;
        true
    }

    fn statement(&mut self) -> Draw<()> {
        match self.u.int_in_range(0..=17u8)? {
            0..=3 => self.select()?,
            4 => self.create_model()?,
            5 => {
                let verb = *self.u.choose(&[
                    "CREATE AGENT ",
                    "ALTER AGENT ",
                    "CREATE AGENT IF NOT EXISTS ",
                ])?;
                self.push(verb);
                self.qualified()?;
                self.using()?;
            }
            6 => {
                let verb = *self.u.choose(&[
                    "CREATE KNOWLEDGE_BASE ",
                    "ALTER KNOWLEDGE_BASE ",
                    "CREATE KNOWLEDGE_BASE IF NOT EXISTS ",
                ])?;
                self.push(verb);
                self.qualified()?;
                self.using()?;
            }
            7 => {
                self.push("CREATE DATABASE ");
                if self.u.arbitrary()? {
                    self.push("IF NOT EXISTS ");
                }
                self.name()?;
                if self.u.arbitrary()? {
                    self.push(" WITH");
                }
                self.push(" ENGINE = ");
                let engine = *self.u.choose(&[
                    "'postgres'",
                    "'files'",
                    "'mindsdb'",
                    "postgres",
                    "''",
                    "1",
                ])?;
                self.push(engine);
                if self.u.arbitrary()? {
                    self.push(", PARAMETERS = ");
                    self.value(4)?;
                }
            }
            8 => {
                self.push("ALTER DATABASE ");
                self.name()?;
                if self.u.arbitrary()? {
                    self.push(" PARAMETERS = ");
                    self.value(4)?;
                } else {
                    self.pairs()?;
                }
            }
            9 => {
                let verb = *self.u.choose(&[
                    "DROP AGENT ",
                    "DROP MODEL ",
                    "DROP PREDICTOR IF EXISTS ",
                    "DROP KNOWLEDGE_BASE ",
                    "DROP DATABASE IF EXISTS ",
                    "DROP PROJECT ",
                    "DESCRIBE ",
                    "DESCRIBE MODEL ",
                    "DESCRIBE KNOWLEDGE_BASE ",
                    "SET active ",
                    "RETRAIN ",
                    "FINETUNE MODEL ",
                    "USE ",
                    "SHOW MODELS FROM ",
                    "SHOW AGENTS IN ",
                    "SHOW FULL TABLES FROM ",
                ])?;
                self.push(verb);
                self.qualified()?;
                if self.u.arbitrary()? {
                    self.push(".");
                    let version = extreme_number(self.u)?.to_string();
                    let quoted = format!("`{version}`");
                    let part = if self.u.arbitrary()? { version } else { quoted };
                    self.push(&part);
                }
                if verb.starts_with("RETRAIN") || verb.starts_with("FINETUNE") {
                    self.native_from()?;
                    self.using()?;
                }
            }
            10 => {
                self.push("INSERT INTO ");
                self.qualified()?;
                self.push(" (a, `b`, \"c\") VALUES ");
                for row in 0..self.u.int_in_range(1..=4)? {
                    if row > 0 {
                        self.push(", ");
                    }
                    self.push("(");
                    for i in 0..self.u.int_in_range(1..=4)? {
                        if i > 0 {
                            self.push(", ");
                        }
                        self.expr()?;
                    }
                    self.push(")");
                }
            }
            11 => {
                let verb = *self.u.choose(&[
                    "CREATE TABLE ",
                    "CREATE OR REPLACE TABLE ",
                    "CREATE TABLE IF NOT EXISTS ",
                ])?;
                self.push(verb);
                self.qualified()?;
                let open = if self.u.arbitrary()? { " (" } else { " " };
                self.push(open);
                self.select()?;
                if self.u.arbitrary()? {
                    self.push(")");
                }
            }
            12 => {
                let verb = *self.u.choose(&[
                    "CREATE VIEW ",
                    "CREATE OR REPLACE VIEW ",
                    "CREATE VIEW IF NOT EXISTS ",
                ])?;
                self.push(verb);
                self.qualified()?;
                self.push(" FROM ");
                self.name()?;
                self.push(" AS (");
                self.select()?;
                self.push(")");
            }
            13 => {
                let words = self.u.int_in_range(1..=30)?;
                for _ in 0..words {
                    let word = *self.u.choose(SOUP)?;
                    self.push(word);
                    self.push(" ");
                }
            }
            14 => {
                let show = *self.u.choose(&[
                    "SHOW DATABASES",
                    "SHOW FULL DATABASES",
                    "SHOW PROJECTS",
                    "SHOW TABLES",
                    "SHOW KNOWLEDGE_BASES",
                    "SHOW AGENTS",
                    "SHOW MODELS",
                    "BEGIN",
                    "COMMIT",
                    "ROLLBACK",
                ])?;
                self.push(show);
            }
            15 => {
                self.push("UPDATE t SET a = ");
                self.expr()?;
                self.push(" WHERE ");
                self.expr()?;
            }
            16 => {
                self.push("DELETE FROM t WHERE ");
                self.expr()?;
            }
            _ => {
                self.push("EXPLAIN ");
                self.select()?;
            }
        }
        Ok(())
    }

    fn select(&mut self) -> Draw<()> {
        self.push("SELECT ");
        if self.u.ratio(1, 6)? {
            self.push("DISTINCT ");
        }
        for i in 0..self.u.int_in_range(1..=4)? {
            if i > 0 {
                self.push(", ");
            }
            self.expr()?;
            if self.u.ratio(1, 3)? {
                self.push(" AS ");
                self.name()?;
            }
        }
        if self.u.arbitrary()? {
            self.push(" FROM ");
            match self.u.int_in_range(0..=4u8)? {
                0 => self.native_from()?,
                1 => {
                    self.qualified()?;
                    self.push(" JOIN LATERAL (");
                    if self.spend() {
                        self.select()?;
                    } else {
                        self.push("SELECT 1");
                    }
                    self.push(") AS l ON true");
                }
                2 => self.push("UNNEST([1, 2])"),
                _ => self.qualified()?,
            }
        }
        if self.u.arbitrary()? {
            self.push(" WHERE ");
            self.expr()?;
        }
        if self.u.ratio(1, 4)? {
            self.push(" GROUP BY 1");
        }
        if self.u.ratio(1, 4)? {
            self.push(" ORDER BY ");
            self.expr()?;
        }
        if self.u.ratio(1, 3)? {
            let limit = extreme_number(self.u)?;
            self.push(&format!(" LIMIT {limit}"));
        }
        Ok(())
    }

    /// ` FROM db (SELECT …)`, the native query form.
    fn native_from(&mut self) -> Draw<()> {
        if !self.u.arbitrary()? {
            return Ok(());
        }
        self.push(" FROM ");
        self.name()?;
        if self.u.arbitrary()? {
            self.push(".");
            self.name()?;
            return Ok(());
        }
        self.push(" (");
        if self.spend() {
            self.select()?;
        } else {
            self.push("SELECT 1");
        }
        if self.u.ratio(1, 8)? {
            // A native query's own dialect, and parentheses that may not balance.
            let tail = *self.u.choose(&[
                " WHERE x ~ '^\\d+$'",
                " AND a::int > 1",
                " (",
                " ))",
                "é\n'",
            ])?;
            self.push(tail);
        }
        self.push(")");
        Ok(())
    }

    fn create_model(&mut self) -> Draw<()> {
        let verb = *self.u.choose(&[
            "CREATE MODEL ",
            "CREATE PREDICTOR ",
            "CREATE MODEL IF NOT EXISTS ",
        ])?;
        self.push(verb);
        self.qualified()?;
        self.native_from()?;
        self.push(" PREDICT ");
        self.name()?;
        for _ in 0..self.u.int_in_range(0..=2)? {
            self.push(", ");
            self.name()?;
        }
        if self.u.ratio(1, 3)? {
            self.push(" ORDER BY ");
            self.name()?;
        }
        if self.u.ratio(1, 3)? {
            self.push(" GROUP BY ");
            self.name()?;
        }
        if self.u.ratio(1, 3)? {
            let window = extreme_number(self.u)?;
            self.push(&format!(" WINDOW {window}"));
        }
        if self.u.ratio(1, 3)? {
            let horizon = extreme_number(self.u)?;
            self.push(&format!(" HORIZON {horizon}"));
        }
        self.using()
    }

    /// ` USING key = value, …` (sometimes nothing, sometimes malformed).
    fn using(&mut self) -> Draw<()> {
        if self.u.ratio(1, 5)? {
            return Ok(());
        }
        self.push(" USING");
        self.pairs()
    }

    fn pairs(&mut self) -> Draw<()> {
        for i in 0..self.u.int_in_range(0..=5)? {
            if i > 0 {
                let comma = *self.u.choose(&[", ", ", ", ", ", " "])?;
                self.push(comma);
            }
            self.push(" ");
            let key = *self.u.choose(&[
                "model_name",
                "provider",
                "api_key",
                "base_url",
                "timeout",
                "mode",
                "model",
                "data",
                "prompt_template",
                "embedding_model",
                "reranking_model",
                "content_columns",
                "metadata_columns",
                "id_column",
                "preprocessing",
                "storage",
                "engine",
                "tag",
                "parameters",
                "`quoted`",
                "'text'",
            ])?;
            self.push(key);
            if self.u.ratio(7, 8)? {
                self.push(" = ");
            }
            self.value(4)?;
        }
        Ok(())
    }

    /// A JSON-like value as USING and PARAMETERS take them.
    fn value(&mut self, depth: u32) -> Draw<()> {
        match self.u.int_in_range(0..=7u8)? {
            0 => {
                let n = extreme_number(self.u)?;
                self.push(&n.to_string());
            }
            1 => {
                let n = extreme_number(self.u)?;
                self.push(&format!("-{n}"));
            }
            2 => {
                let word = *self
                    .u
                    .choose(&["true", "false", "null", "None", "maybe", "1.5e400", "-"])?;
                self.push(word);
            }
            3 | 4 => self.string()?,
            5 if depth > 0 => {
                self.push("{");
                for i in 0..self.u.int_in_range(0..=3)? {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.string()?;
                    if self.u.ratio(7, 8)? {
                        self.push(": ");
                    }
                    self.value(depth - 1)?;
                }
                if self.u.ratio(7, 8)? {
                    self.push("}");
                }
            }
            6 if depth > 0 => {
                self.push("[");
                for i in 0..self.u.int_in_range(0..=3)? {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.value(depth - 1)?;
                }
                if self.u.ratio(7, 8)? {
                    self.push("]");
                }
            }
            _ => self.push("'x'"),
        }
        Ok(())
    }

    fn string(&mut self) -> Draw<()> {
        let quote = *self.u.choose(&['\'', '"', '`'])?;
        let body = *self.u.choose(&[
            "text",
            "it\\'s",
            "a\\\\b",
            "\\n\\t\\0\\Z\\b\\r",
            "\\d+",
            "50\\%",
            "''",
            "\"\"",
            "``",
            "é東",
            "\\",
            "",
            "db.t",
            "http://127.0.0.1:1/v1",
        ])?;
        let mut text = String::new();
        text.push(quote);
        text.push_str(body);
        if self.u.ratio(1, 10)? {
            let long = self.u.int_in_range(0..=100_000)?;
            text.push_str(&"x".repeat(long));
        }
        if self.u.ratio(15, 16)? {
            text.push(quote);
        }
        self.push(&text);
        Ok(())
    }

    fn name(&mut self) -> Draw<()> {
        let name = *self.u.choose(&[
            "t",
            "a",
            "db",
            "mindsdb",
            "files",
            "`odd name`",
            "\"q\"",
            "p1",
            "é",
            "SELECT",
            "KNOWLEDGE_BASE",
            "None",
        ])?;
        self.push(name);
        Ok(())
    }

    fn qualified(&mut self) -> Draw<()> {
        self.name()?;
        for _ in 0..self.u.int_in_range(0..=2)? {
            self.push(".");
            self.name()?;
        }
        Ok(())
    }

    fn param(&mut self) -> Draw<()> {
        let name = if !self.names.is_empty() && self.u.ratio(3, 4)? {
            self.u.choose(&self.names)?.clone()
        } else {
            "unbound".to_string()
        };
        self.push(&format!(":{name}"));
        Ok(())
    }

    fn expr(&mut self) -> Draw<()> {
        if !self.spend() {
            return self.leaf();
        }
        match self.u.int_in_range(0..=40u8)? {
            0..=2 | 13..=30 => self.leaf()?,
            3 => {
                self.expr()?;
                let op = *self.u.choose(&[
                    " + ", " - ", " * ", " / ", " % ", " = ", " <> ", " < ", " AND ", " OR ",
                    " || ", " LIKE ", " IS ",
                ])?;
                self.push(op);
                self.expr()?;
            }
            4 => {
                let op = *self.u.choose(&["NOT ", "-", "+", "~"])?;
                self.push(op);
                self.expr()?;
            }
            5 => {
                self.push("(");
                self.expr()?;
                self.push(")");
            }
            6 => {
                self.expr()?;
                let keyword = if self.u.arbitrary()? {
                    " NOT IN "
                } else {
                    " IN "
                };
                self.push(keyword);
                match self.u.int_in_range(0..=3u8)? {
                    0 => self.param()?,
                    1 => self.push("()"),
                    2 => {
                        self.push("(");
                        self.select()?;
                        self.push(")");
                    }
                    _ => {
                        self.push("(");
                        for i in 0..self.u.int_in_range(1..=4)? {
                            if i > 0 {
                                self.push(", ");
                            }
                            if self.u.arbitrary()? {
                                self.param()?;
                            } else {
                                self.expr()?;
                            }
                        }
                        self.push(")");
                    }
                }
            }
            7 => {
                let function = *self.u.choose(&[
                    "count(",
                    "sum(",
                    "coalesce(",
                    "repeat(",
                    "length(",
                    "cast(",
                    "abs(",
                ])?;
                self.push(function);
                self.expr()?;
                if self.u.arbitrary()? {
                    self.push(", ");
                    self.expr()?;
                }
                self.push(")");
            }
            8 => {
                self.push("CASE WHEN ");
                self.expr()?;
                self.push(" THEN ");
                self.expr()?;
                self.push(" ELSE ");
                self.expr()?;
                self.push(" END");
            }
            9 => {
                self.push("(");
                self.select()?;
                self.push(")");
            }
            10 => {
                self.push("EXISTS (");
                self.select()?;
                self.push(")");
            }
            11 => {
                self.expr()?;
                self.push("::");
                let cast = *self.u.choose(&[
                    "int",
                    "text",
                    "DECIMAL(38, 10)",
                    "DECIMAL(99, 0)",
                    "date",
                ])?;
                self.push(cast);
            }
            31..=39 => {
                self.expr()?;
                self.push(" AND ");
                self.expr()?;
            }
            _ => {
                // A deep run of parentheses in the middle of ordinary SQL.
                let depth = *self.u.choose(&[10usize, 100, 255, 300])?;
                self.push(&"(".repeat(depth));
                self.leaf()?;
                self.push(&")".repeat(depth));
            }
        }
        Ok(())
    }

    fn leaf(&mut self) -> Draw<()> {
        match self.u.int_in_range(0..=6u8)? {
            0 => {
                let n = extreme_number(self.u)?;
                self.push(&n.to_string());
            }
            1 => self.string()?,
            2 => self.param()?,
            3 => self.qualified()?,
            4 => {
                let word = *self
                    .u
                    .choose(&["NULL", "None", "true", "*", "1.5", ".5e-3", "0x1f", "X'0g'"])?;
                self.push(word);
            }
            _ => self.name()?,
        }
        Ok(())
    }
}
