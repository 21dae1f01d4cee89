//! MindsDB's model statements, read on tokens: `CREATE MODEL|PREDICTOR [IF NOT EXISTS] [p.]m
//! [FROM db (SELECT …) | FROM db.table] PREDICT col [ORDER BY …] [GROUP BY …] [WINDOW n]
//! [HORIZON n] [USING …]`, `RETRAIN|FINETUNE [MODEL] [p.]m [FROM …] [USING …]`,
//! ``SET active [p.]m.`N` ``, `DROP MODEL|PREDICTOR [IF EXISTS] [p.]m[.`N`]`,
//! `SHOW MODELS [FROM p]`, `DESCRIBE [MODEL|PREDICTOR] [p.]m[.attribute|.`N`]`, and the ML
//! engines models name: `CREATE ML_ENGINE [IF NOT EXISTS] e FROM handler [USING …]`, `DROP
//! ML_ENGINE [IF EXISTS] e` (`SHOW ML_ENGINES` reads `information_schema.ml_engines`).

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::sql::parse::words::{
    closing_paren, end_at, if_exists_at, keyword, tokens_text, using_pairs, word,
};
use crate::sql::FeatureStatement;
use crate::sql::{Outcome, ResultContext, SqlRunner};
use crate::tenant::TenantId;

/// A model statement.
#[derive(Debug, PartialEq)]
pub(crate) enum ModelStatement {
    /// `CREATE MODEL|PREDICTOR`.
    CreateModel(CreateModel),
    /// `RETRAIN|FINETUNE [MODEL] [p.]m [FROM …] [USING …]`: a new version (the built-in
    /// engine fits from scratch, so both read the same).
    RetrainModel {
        project: Option<String>,
        name: String,
        from: Option<(String, String)>,
        using: Map<String, Value>,
    },
    /// ``SET active [p.]m.`N` ``.
    SetActiveModel {
        project: Option<String>,
        name: String,
        version: u32,
    },
    /// `DROP MODEL|PREDICTOR [IF EXISTS] [p.]m[.`N`]`.
    DropModel {
        project: Option<String>,
        name: String,
        version: Option<u32>,
        if_exists: bool,
    },
    /// `SHOW MODELS [FROM p]`.
    ShowModels { project: Option<String> },
    /// `CREATE ML_ENGINE [IF NOT EXISTS] name FROM handler [USING …]`.
    CreateMlEngine {
        name: String,
        handler: String,
        using: Map<String, Value>,
        if_not_exists: bool,
    },
    /// `DROP ML_ENGINE [IF EXISTS] name`.
    DropMlEngine { name: String, if_exists: bool },
    /// `DESCRIBE [MODEL] a[.b[.c]]`: a model (with an attribute), or else a table.
    Describe { parts: Vec<String>, explicit: bool },
}

/// `CREATE MODEL|PREDICTOR [IF NOT EXISTS] [p.]m [FROM …] PREDICT … [USING …]`.
#[derive(Debug, PartialEq)]
pub(crate) struct CreateModel {
    pub(crate) project: Option<String>,
    pub(crate) name: String,
    pub(crate) if_not_exists: bool,
    /// (database, training query).
    pub(crate) from: Option<(String, String)>,
    pub(crate) predict: Vec<String>,
    /// The USING pairs and the time-series clauses (`order_by`, `group_by`, `window`, `horizon`).
    pub(crate) using: Map<String, Value>,
}

impl FeatureStatement for ModelStatement {
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>> {
        let ok = Outcome::Ok {
            affected_rows: None,
        };
        let project_or_current =
            |project: Option<String>| project.unwrap_or_else(|| context.db.clone());
        match *self {
            ModelStatement::CreateModel(statement) => {
                Box::pin(runner.create_model(tenant, context, statement))
            }
            ModelStatement::RetrainModel {
                project,
                name,
                from,
                using,
            } => {
                let project = project_or_current(project);
                Box::pin(runner.retrain_statement(tenant, project, name, from, using))
            }
            ModelStatement::SetActiveModel {
                project,
                name,
                version,
            } => {
                let project = project_or_current(project);
                Box::pin(async move {
                    runner
                        .set_active_model(tenant, project, name, version)
                        .await?;
                    Ok(ok)
                })
            }
            ModelStatement::DropModel {
                project,
                name,
                version,
                if_exists,
            } => {
                let project = project_or_current(project);
                Box::pin(async move {
                    runner
                        .drop_model(tenant, project, name, version, if_exists)
                        .await?;
                    Ok(ok)
                })
            }
            ModelStatement::ShowModels { project } => {
                let project = project_or_current(project);
                Box::pin(async move { runner.show_models(tenant, &project) })
            }
            ModelStatement::CreateMlEngine {
                name,
                handler,
                using,
                if_not_exists,
            } => Box::pin(async move {
                runner
                    .create_ml_engine(tenant, name, handler, using, if_not_exists)
                    .await?;
                Ok(ok)
            }),
            ModelStatement::DropMlEngine { name, if_exists } => Box::pin(async move {
                runner.drop_ml_engine(tenant, name, if_exists).await?;
                Ok(ok)
            }),
            ModelStatement::Describe { parts, explicit } => Box::pin(async move {
                if let Some(described) = runner.describe_model(tenant, &context.db, &parts)? {
                    return Ok(described);
                }
                if explicit {
                    return Err(Error::not_found(format!(
                        "Model '{}' does not exist",
                        parts.join(".")
                    )));
                }
                // Not a model: DESCRIBE of a table, as standard SQL has it.
                runner.describe_table(tenant, context, &parts).await
            }),
        }
    }
}

/// Recognises a model statement; `None` when `words` is something else.
pub(crate) fn model_command(words: &[&Token]) -> Result<Option<ModelStatement>> {
    let is = |k: usize, text: &str| matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    let is_model_word = |k: usize| is(k, "MODEL") || is(k, "PREDICTOR");
    match keyword(words[0]) {
        Some(Keyword::CREATE) if is_model_word(1) => create(words).map(Some),
        Some(Keyword::CREATE) if is(1, "ML_ENGINE") => {
            let (if_not_exists, k) = if_exists_at(words, 2, true);
            let name = word(words, k, "an ML engine name")?;
            if keyword_at(words, k + 1) != Some(Keyword::FROM) {
                return Err(Error::invalid(
                    "Expected CREATE ML_ENGINE name FROM handler [USING key = value, …]",
                ));
            }
            let handler = word(words, k + 2, "a handler name after FROM")?;
            let using = using_pairs(words, k + 3, "the handler name")?
                .into_iter()
                .collect();
            Ok(Some(ModelStatement::CreateMlEngine {
                name,
                handler,
                using,
                if_not_exists,
            }))
        }
        Some(Keyword::DROP) if is(1, "ML_ENGINE") => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let name = word(words, k, "an ML engine name")?;
            end_at(words, k + 1)?;
            Ok(Some(ModelStatement::DropMlEngine { name, if_exists }))
        }
        _ if is(0, "RETRAIN") || is(0, "FINETUNE") => {
            let k = if is_model_word(1) { 2 } else { 1 };
            let (parts, k) = dotted(words, k, "a model name")?;
            let (project, name) = project_and_name(&parts)?;
            let (from, k) = from_clause(words, k)?;
            let using = using_pairs(words, k, "the model name")?
                .into_iter()
                .collect();
            Ok(Some(ModelStatement::RetrainModel {
                project,
                name,
                from,
                using,
            }))
        }
        Some(Keyword::SET) if is(1, "ACTIVE") => {
            let (parts, k) = dotted(words, 2, "a model version")?;
            end_at(words, k)?;
            let (project, name, version) = match parts.as_slice() {
                [name, version] => (None, name.clone(), version_number(version)?),
                [project, name, version] => (
                    Some(project.to_ascii_lowercase()),
                    name.clone(),
                    version_number(version)?,
                ),
                _ => {
                    return Err(Error::invalid(
                        "Expected SET active [project.]model.`version`",
                    ))
                }
            };
            Ok(Some(ModelStatement::SetActiveModel {
                project,
                name,
                version,
            }))
        }
        Some(Keyword::DROP) if is_model_word(1) => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let (parts, k) = dotted(words, k, "a model name")?;
            end_at(words, k)?;
            let (project, name, version) = match parts.as_slice() {
                [name] => (None, name.clone(), None),
                // ``m.`2` ``: a version of a model in the current project, as MindsDB reads it.
                [name, version] if version.parse::<u32>().is_ok() => {
                    (None, name.clone(), Some(version_number(version)?))
                }
                [project, name] => (Some(project.to_ascii_lowercase()), name.clone(), None),
                [project, name, version] => (
                    Some(project.to_ascii_lowercase()),
                    name.clone(),
                    Some(version_number(version)?),
                ),
                _ => return Err(Error::invalid("Expected [project.]model[.`version`]")),
            };
            Ok(Some(ModelStatement::DropModel {
                project,
                name,
                version,
                if_exists,
            }))
        }
        Some(Keyword::SHOW) if is(1, "MODELS") || is(1, "PREDICTORS") => {
            let project = match keyword_at(words, 2) {
                Some(Keyword::FROM | Keyword::IN) => {
                    let project = word(words, 3, "a project name after FROM")?;
                    end_at(words, 4)?;
                    Some(project.to_ascii_lowercase())
                }
                _ => {
                    end_at(words, 2)?;
                    None
                }
            };
            Ok(Some(ModelStatement::ShowModels { project }))
        }
        Some(Keyword::DESCRIBE) if words.len() > 1 => {
            // Only `DESCRIBE [MODEL] a[.b[.c]]`; anything else (`DESCRIBE SELECT …`) is SQL.
            let k = if is_model_word(1) { 2 } else { 1 };
            match dotted(words, k, "a model name") {
                Ok((parts, k)) if k == words.len() => Ok(Some(ModelStatement::Describe {
                    parts,
                    explicit: is_model_word(1),
                })),
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

fn keyword_at(words: &[&Token], k: usize) -> Option<Keyword> {
    words.get(k).and_then(|t| keyword(t))
}

/// `a[.b[.c]]` at `k`: the parts and the position after them.
fn dotted(words: &[&Token], mut k: usize, what: &str) -> Result<(Vec<String>, usize)> {
    let mut parts = vec![part(words, k, what)?];
    k += 1;
    while words.get(k) == Some(&&Token::Period) {
        parts.push(part(words, k + 1, what)?);
        k += 2;
    }
    Ok((parts, k))
}

/// A name part; a bare number is accepted as a version (``m.`2` `` and `m.2`).
fn part(words: &[&Token], k: usize, what: &str) -> Result<String> {
    match words.get(k) {
        Some(Token::Number(n, _)) => Ok(n.clone()),
        _ => word(words, k, what),
    }
}

fn version_number(text: &str) -> Result<u32> {
    text.parse::<u32>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| Error::invalid(format!("'{text}' is not a model version (1, 2, …)")))
}

/// `[project.]name` from dotted parts.
fn project_and_name(parts: &[String]) -> Result<(Option<String>, String)> {
    match parts {
        [name] => Ok((None, name.clone())),
        [project, name] => Ok((Some(project.to_ascii_lowercase()), name.clone())),
        _ => Err(Error::invalid("Expected a model name: [project.]name")),
    }
}

/// An optional `FROM db (SELECT …)` or `FROM db.table` at `k`: (database, query) and the
/// position after it.
fn from_clause(words: &[&Token], k: usize) -> Result<(Option<(String, String)>, usize)> {
    if keyword_at(words, k) != Some(Keyword::FROM) {
        return Ok((None, k));
    }
    let db = word(words, k + 1, "a database after FROM")?.to_ascii_lowercase();
    let k = k + 2;
    if words.get(k) == Some(&&Token::LParen) {
        let close = closing_paren(words, k)?;
        Ok((Some((db, tokens_text(&words[k + 1..close]))), close + 1))
    } else if words.get(k) == Some(&&Token::Period) {
        let table = word(words, k + 1, "a table after the database")?;
        let query = format!("SELECT * FROM \"{db}\".\"{table}\"");
        Ok((Some((db, query)), k + 2))
    } else {
        Err(Error::invalid(
            "Expected FROM db (SELECT …) or FROM db.table",
        ))
    }
}

fn create(words: &[&Token]) -> Result<ModelStatement> {
    let (if_not_exists, k) = if_exists_at(words, 2, true);
    let (parts, k) = dotted(words, k, "a model name")?;
    let (project, name) = project_and_name(&parts)?;
    let (from, mut k) = from_clause(words, k)?;
    if !is_word(words, k, "PREDICT") {
        return Err(Error::invalid(match words.get(k) {
            Some(found) => format!("Expected PREDICT column, found '{found}'"),
            None => "Expected PREDICT column: the column the model learns to predict".into(),
        }));
    }
    let mut predict = vec![word(words, k + 1, "the column to predict after PREDICT")?];
    k += 2;
    while words.get(k) == Some(&&Token::Comma) {
        predict.push(word(words, k + 1, "a column after ','")?);
        k += 2;
    }
    let mut using = Map::new();
    // The time-series clauses are accepted and stored with the options.
    loop {
        match keyword_at(words, k) {
            Some(kw @ (Keyword::ORDER | Keyword::GROUP))
                if keyword_at(words, k + 1) == Some(Keyword::BY) =>
            {
                let mut columns = vec![Value::String(word(words, k + 2, "a column after BY")?)];
                k += 3;
                while words.get(k) == Some(&&Token::Comma) {
                    columns.push(Value::String(word(words, k + 1, "a column after ','")?));
                    k += 2;
                }
                let key = if kw == Keyword::ORDER {
                    "order_by"
                } else {
                    "group_by"
                };
                using.insert(key.into(), Value::Array(columns));
            }
            Some(Keyword::WINDOW) => {
                using.insert("window".into(), count(words, k + 1, "WINDOW")?);
                k += 2;
            }
            _ if is_word(words, k, "HORIZON") => {
                using.insert("horizon".into(), count(words, k + 1, "HORIZON")?);
                k += 2;
            }
            _ => break,
        }
    }
    using.extend(using_pairs(words, k, "PREDICT …")?);
    Ok(ModelStatement::CreateModel(CreateModel {
        project,
        name,
        if_not_exists,
        from,
        predict,
        using,
    }))
}

fn is_word(words: &[&Token], k: usize, text: &str) -> bool {
    matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text))
}

fn count(words: &[&Token], k: usize, clause: &str) -> Result<Value> {
    match words.get(k) {
        Some(Token::Number(n, _)) => n
            .parse::<u64>()
            .map(Value::from)
            .map_err(|_| Error::invalid(format!("{clause} takes a whole number, got {n}"))),
        _ => Err(Error::invalid(format!("{clause} takes a whole number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parse::{parse, Command};
    use std::collections::HashMap;

    fn one(sql: &str) -> ModelStatement {
        let mut commands = parse(sql, &HashMap::new(), &HashMap::new()).unwrap();
        assert_eq!(commands.len(), 1);
        match commands.pop() {
            Some(Command::Feature(statement)) => *statement.into_any().downcast().unwrap(),
            other => panic!("not a model statement: {other:?}"),
        }
    }

    #[test]
    fn create_model_reads_every_clause() {
        let ModelStatement::CreateModel(CreateModel {
            project,
            name,
            if_not_exists,
            from,
            predict,
            using,
        }) = one("create predictor IF NOT EXISTS proj.m1 FROM mindsdb (select a, b FROM t WHERE c = 'x''y' AND f(d) > 1 AND e = 'C:\\\\new') PREDICT y ORDER BY d GROUP BY g, h WINDOW 10 HORIZON 3 USING engine = 'lightwood', k = 2")
        else {
            panic!("not a CREATE MODEL")
        };
        assert_eq!(
            (project.as_deref(), name.as_str(), if_not_exists),
            (Some("proj"), "m1", true)
        );
        let (db, query) = from.unwrap();
        assert_eq!(db, "mindsdb");
        assert_eq!(
            query,
            "select a, b FROM t WHERE c = 'x''y' AND f(d) > 1 AND e = 'C:\\\\new'"
        );
        assert_eq!(predict, ["y"]);
        assert_eq!(
            Value::Object(using),
            serde_json::json!({"order_by": ["d"], "group_by": ["g", "h"], "window": 10, "horizon": 3, "engine": "lightwood", "k": 2})
        );
    }

    #[test]
    fn create_model_from_a_table_and_without_data() {
        let ModelStatement::CreateModel(CreateModel { from, .. }) =
            one("CREATE MODEL m FROM mindsdb.t PREDICT y")
        else {
            panic!()
        };
        assert_eq!(from.unwrap().1, "SELECT * FROM \"mindsdb\".\"t\"");
        let ModelStatement::CreateModel(CreateModel { from, .. }) =
            one("CREATE MODEL m PREDICT y USING engine = 'builtin'")
        else {
            panic!()
        };
        assert!(from.is_none());
        let missing = parse(
            "CREATE MODEL m FROM mindsdb (SELECT 1",
            &HashMap::new(),
            &HashMap::new(),
        );
        assert!(missing.unwrap_err().message().contains("')'"));
        let no_predict = parse(
            "CREATE MODEL m FROM mindsdb (SELECT 1)",
            &HashMap::new(),
            &HashMap::new(),
        );
        assert!(no_predict.unwrap_err().message().contains("PREDICT"));
    }

    #[test]
    fn retrain_finetune_and_set_active() {
        assert_eq!(
            one("RETRAIN mindsdb.m1 FROM example_db (select * from t1)"),
            ModelStatement::RetrainModel {
                project: Some("mindsdb".into()),
                name: "m1".into(),
                from: Some(("example_db".into(), "select * from t1".into())),
                using: Map::new(),
            }
        );
        let ModelStatement::RetrainModel { using, from, .. } = one("FINETUNE MODEL m1 USING x = 2")
        else {
            panic!()
        };
        assert!(from.is_none());
        assert_eq!(Value::Object(using), serde_json::json!({"x": 2}));
        assert_eq!(
            one("SET active mindsdb.m1.`2`"),
            ModelStatement::SetActiveModel {
                project: Some("mindsdb".into()),
                name: "m1".into(),
                version: 2
            }
        );
    }

    #[test]
    fn drop_show_and_describe() {
        assert_eq!(
            one("DROP PREDICTOR IF EXISTS p.m.`2`"),
            ModelStatement::DropModel {
                project: Some("p".into()),
                name: "m".into(),
                version: Some(2),
                if_exists: true
            }
        );
        assert_eq!(
            one("show models from P"),
            ModelStatement::ShowModels {
                project: Some("p".into())
            }
        );
        assert_eq!(
            one("DESCRIBE mindsdb.m1.features"),
            ModelStatement::Describe {
                parts: vec!["mindsdb".into(), "m1".into(), "features".into()],
                explicit: false
            }
        );
    }
}
