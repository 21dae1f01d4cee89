//! MindsDB's agent statements, read on tokens: `CREATE AGENT [IF NOT EXISTS] [p.]a USING …`,
//! `ALTER AGENT [p.]a USING …`, `DROP AGENT [IF EXISTS] [p.]a`, `SHOW AGENTS [FROM p]`. `USING`
//! takes `key = value` pairs whose values are strings, numbers, booleans or JSON-like objects
//! and lists (`{"tables": ["db.t"]}`, also with single quotes, as MindsDB's docs write them).
//! The flat form's model keys (`model_name = …, provider = …`) are gathered into `model`.

use std::sync::Arc;

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

use crate::catalog::agents as catalog_agents;
use crate::error::{Error, Result};
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::parse::words::{
    end_at, from_project, if_exists_at, keyword, qualified_name, using_pairs,
};
use crate::sql::FeatureStatement;
use crate::sql::{text_table, Outcome, ResultContext, SqlRunner};
use crate::tenant::TenantId;

/// Keys of the flat form that belong inside `model`.
const MODEL_KEYS: [&str; 4] = ["model_name", "provider", "api_key", "base_url"];
/// Keys of the flat form that belong inside `params`.
const PARAM_KEYS: [&str; 2] = ["timeout", "mode"];

/// An agent statement.
#[derive(Debug, PartialEq)]
pub(crate) enum AgentStatement {
    /// `CREATE AGENT [IF NOT EXISTS] [p.]name USING …`; `spec` is the agent's request body.
    CreateAgent {
        project: Option<String>,
        name: String,
        if_not_exists: bool,
        spec: Map<String, Value>,
    },
    /// `ALTER AGENT [p.]name USING …`.
    AlterAgent {
        project: Option<String>,
        name: String,
        spec: Map<String, Value>,
    },
    /// `DROP AGENT [IF EXISTS] [p.]name`.
    DropAgent {
        project: Option<String>,
        name: String,
        if_exists: bool,
    },
    /// `SHOW AGENTS [FROM p]`.
    ShowAgents { project: Option<String> },
}

impl FeatureStatement for AgentStatement {
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(async move {
            match *self {
                AgentStatement::CreateAgent {
                    project,
                    name,
                    if_not_exists,
                    mut spec,
                } => {
                    let project = project.unwrap_or_else(|| context.db.clone());
                    spec.insert("name".into(), name.into());
                    catalog_agents::qualify_knowledge_bases(&mut spec, runner.default_project());
                    let (llm, egress) = (
                        runner.services.settings.llm(),
                        runner.services.net.egress.clone(),
                    );
                    runner
                        .services
                        .store
                        .write(move |txn| {
                            catalog_agents::create(
                                txn,
                                tenant,
                                &project,
                                &spec,
                                &llm,
                                if_not_exists,
                                &egress,
                            )
                        })
                        .await?;
                    Ok(Outcome::Ok {
                        affected_rows: None,
                    })
                }
                AgentStatement::AlterAgent {
                    project,
                    name,
                    mut spec,
                } => {
                    let project = project.unwrap_or_else(|| context.db.clone());
                    catalog_agents::qualify_knowledge_bases(&mut spec, runner.default_project());
                    let egress = runner.services.net.egress.clone();
                    runner
                        .services
                        .store
                        .write(move |txn| {
                            catalog_agents::update(txn, tenant, &project, &name, &spec, &egress)
                        })
                        .await?;
                    Ok(Outcome::Ok {
                        affected_rows: None,
                    })
                }
                AgentStatement::DropAgent {
                    project,
                    name,
                    if_exists,
                } => {
                    let project = project.unwrap_or_else(|| context.db.clone());
                    runner
                        .services
                        .store
                        .write(move |txn| {
                            catalog_agents::delete(txn, tenant, &project, &name, if_exists)
                        })
                        .await?;
                    Ok(Outcome::Ok {
                        affected_rows: None,
                    })
                }
                AgentStatement::ShowAgents { project } => {
                    let project = project.unwrap_or_else(|| context.db.clone());
                    let snapshot = Snapshot::new(Arc::clone(&runner.services.store), tenant)?;
                    if snapshot.namespace(&project)?.is_none() {
                        return Err(Error::not_found(format!("Database '{project}' not found")));
                    }
                    let rows: Vec<[String; 4]> = snapshot
                        .agents(Some(&project))?
                        .iter()
                        .map(catalog_agents::Agent::system_row)
                        .collect();
                    let column = |i: usize| rows.iter().map(|r| Some(r[i].clone())).collect();
                    text_table(vec![
                        ("NAME", column(0)),
                        ("PROJECT", column(1)),
                        ("MODEL", column(2)),
                        ("PARAMS", column(3)),
                    ])
                }
            }
        })
    }
}

/// Recognises an agent statement; `None` when `words` is something else.
pub(crate) fn agent_command(words: &[&Token]) -> Result<Option<AgentStatement>> {
    let is = |k: usize, text: &str| matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    let kw = |k: usize| words.get(k).and_then(|t| keyword(t));
    match kw(0) {
        Some(Keyword::CREATE) if is(1, "AGENT") => {
            let (if_not_exists, k) = if_exists_at(words, 2, true);
            let (project, name, k) = agent_name(words, k)?;
            let spec = using(words, k)?;
            Ok(Some(AgentStatement::CreateAgent {
                project,
                name,
                if_not_exists,
                spec,
            }))
        }
        Some(Keyword::ALTER) if is(1, "AGENT") => {
            let (project, name, k) = agent_name(words, 2)?;
            let spec = using(words, k)?;
            Ok(Some(AgentStatement::AlterAgent {
                project,
                name,
                spec,
            }))
        }
        Some(Keyword::DROP) if is(1, "AGENT") => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let (project, name, k) = agent_name(words, k)?;
            end_at(words, k)?;
            Ok(Some(AgentStatement::DropAgent {
                project,
                name,
                if_exists,
            }))
        }
        Some(Keyword::SHOW) if is(1, "AGENTS") => Ok(Some(AgentStatement::ShowAgents {
            project: from_project(words, 2)?,
        })),
        _ => Ok(None),
    }
}

/// `[project.]name` at `k`; returns the parts and the position after them.
fn agent_name(words: &[&Token], k: usize) -> Result<(Option<String>, String, usize)> {
    qualified_name(words, k, "an agent name")
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::sql::parse::{parse, Command};

    fn command(sql: &str) -> AgentStatement {
        match parse(sql, &HashMap::new(), &HashMap::new()).unwrap().pop() {
            Some(Command::Feature(statement)) => *statement.into_any().downcast().unwrap(),
            other => panic!("not an agent statement: {other:?}"),
        }
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
        assert!(matches!(
            command(&deep(128)),
            AgentStatement::CreateAgent { .. }
        ));
    }

    #[test]
    fn create_agent_reads_objects_in_both_quote_styles() {
        let AgentStatement::CreateAgent { project, name, if_not_exists, spec } = command(
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
        let AgentStatement::CreateAgent { spec, project, .. } =
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
            AgentStatement::AlterAgent { .. }
        ));
        assert!(matches!(
            command("DROP AGENT IF EXISTS p.a"),
            AgentStatement::DropAgent {
                if_exists: true,
                ..
            }
        ));
        assert!(
            matches!(command("SHOW AGENTS FROM P"), AgentStatement::ShowAgents { project: Some(p) } if p == "p")
        );
        assert!(matches!(
            command("show agents"),
            AgentStatement::ShowAgents { project: None }
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
