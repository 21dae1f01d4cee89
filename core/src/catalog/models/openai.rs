//! The `openai` engine: a model that asks an LLM (any OpenAI-compatible endpoint) once per
//! row. `prompt_template` names input columns as `{{column}}`; each row's values fill the
//! slots (NULL as an empty text) and the answer's text is the prediction. Nothing is fitted:
//! "training" checks the settings and records the columns. This module reads and checks the
//! settings; `ml` asks the provider (through `llm`, at most `max_concurrency` calls at a time,
//! answers in the rows' order).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use serde_json::{Map, Value};

use super::description::Description;
use crate::error::{Error, Result};

/// The engine's name in `USING engine = …`.
pub(crate) const ENGINE: &str = "openai";

/// Refuses a setting this engine does not read, naming it and the ones it reads, and an
/// endpoint that is no http(s) URL.
pub(crate) fn check_settings(using: &Map<String, Value>) -> Result<()> {
    if let Some(unknown) = using
        .keys()
        .find(|k| !SETTINGS.contains(&k.as_str()) && !is_time_series_clause(k))
    {
        return Err(Error::invalid(format!(
            "The openai engine has no setting '{unknown}'; it reads: {}",
            SETTINGS.join(", ")
        )));
    }
    for key in ["base_url", "api_base"] {
        if let Some(url) = using.get(key).and_then(Value::as_str) {
            crate::egress::check_http_url(key, url)?;
        }
    }
    Ok(())
}

/// Calls in flight per prediction when `max_concurrency` is not given.
const DEFAULT_CONCURRENCY: u64 = 4;
/// The most `max_concurrency` may ask for: more would only queue at the provider.
const MAX_CONCURRENCY: u64 = 64;

/// The `USING` settings this engine reads; any other is refused by name. `api_base` and
/// `openai_api_key` are MindsDB's spellings of `base_url` and `api_key`.
const SETTINGS: [&str; 11] = [
    "engine",
    "prompt_template",
    "model_name",
    "base_url",
    "api_base",
    "api_key",
    "openai_api_key",
    "temperature",
    "max_tokens",
    "top_p",
    "max_concurrency",
];

/// One piece of a prompt template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    /// `{{column}}`: the row's value of that column.
    Slot(String),
}

/// A checked LLM model: its template and the endpoint settings it names.
/// Asking the provider is `ml`'s (`Prompted::predict`).
pub(crate) struct Prompted {
    pub(crate) template: Vec<Piece>,
    /// `model_name`, `base_url`, `api_key` and sampling settings, under `llm`'s names.
    pub(crate) settings: Map<String, Value>,
    pub(crate) concurrency: usize,
    /// Calls in flight for this model in one query, whatever its partitions: `max_concurrency`
    /// holds per query, not per partition.
    pub(crate) permits: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Prompted {
    // Without the settings: they hold the API key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompted")
            .field("template", &self.template)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// Reads and checks the `USING` settings of an `openai` model.
pub(crate) fn check(using: &Map<String, Value>) -> Result<Prompted> {
    check_settings(using)?;
    let text = |key: &str| -> Result<Option<String>> {
        match using.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::invalid(format!(
                "'{key}' must be text in quotes; got {other}"
            ))),
        }
    };
    let template = text("prompt_template")?.ok_or_else(|| {
        Error::invalid(
            "The openai engine needs a prompt: USING engine = 'openai', prompt_template = 'Summarize: {{text}}'",
        )
    })?;
    let template = parse_template(&template)?;
    let mut settings = Map::new();
    if let Some(name) = text("model_name")? {
        settings.insert("model_name".into(), name.into());
    }
    if let Some((key, url)) = one_of(&text, "base_url", "api_base")? {
        crate::egress::check_http_url(key, &url)?;
        settings.insert("base_url".into(), url.into());
    }
    if let Some((_, api_key)) = one_of(&text, "api_key", "openai_api_key")? {
        settings.insert("api_key".into(), api_key.into());
    }
    for key in ["temperature", "top_p"] {
        match using.get(key) {
            None => {}
            Some(v) if v.is_number() => {
                settings.insert(key.into(), v.clone());
            }
            Some(other) => {
                return Err(Error::invalid(format!(
                    "'{key}' must be a number; got {other}"
                )))
            }
        }
    }
    if let Some(v) = using.get("max_tokens") {
        positive(v, "max_tokens", u64::from(u32::MAX))?;
        settings.insert("max_tokens".into(), v.clone());
    }
    let concurrency = match using.get("max_concurrency") {
        None => DEFAULT_CONCURRENCY,
        Some(v) => positive(v, "max_concurrency", MAX_CONCURRENCY)?,
    };
    let concurrency = usize::try_from(concurrency).unwrap_or(1);
    Ok(Prompted {
        template,
        settings,
        concurrency,
        permits: Arc::new(tokio::sync::Semaphore::new(concurrency)),
    })
}

/// The value of `name` or of its MindsDB spelling `alias` (with the key it came under); both
/// given is an error rather than one silently winning.
fn one_of(
    text: &dyn Fn(&str) -> Result<Option<String>>,
    name: &'static str,
    alias: &'static str,
) -> Result<Option<(&'static str, String)>> {
    match (text(name)?, text(alias)?) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "'{name}' and '{alias}' name the same setting; give one"
        ))),
        (Some(value), None) => Ok(Some((name, value))),
        (None, Some(value)) => Ok(Some((alias, value))),
        (None, None) => Ok(None),
    }
}

/// ORDER BY / GROUP BY / WINDOW / HORIZON are stored with the settings; this engine ignores them.
fn is_time_series_clause(key: &str) -> bool {
    matches!(key, "order_by" | "group_by" | "window" | "horizon")
}

fn positive(value: &Value, key: &str, max: u64) -> Result<u64> {
    value
        .as_u64()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            Error::invalid(format!(
                "'{key}' must be a whole number from 1 to {max}; got {value}"
            ))
        })
}

/// Splits a template into text and `{{column}}` slots.
fn parse_template(template: &str) -> Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or_else(|| {
            Error::invalid(format!(
                "'prompt_template' opens a slot with {{{{ that is never closed with }}}}: …{}",
                &rest[open..]
            ))
        })?;
        let column = after[..close].trim();
        if column.is_empty() || column.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "'prompt_template' has a slot without a column name: {{{{{}}}}}",
                &after[..close]
            )));
        }
        pieces.push(Piece::Slot(column.to_string()));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

impl Prompted {
    /// The columns the template names, each once, in order of first use.
    pub(crate) fn inputs(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for piece in &self.template {
            if let Piece::Slot(column) = piece {
                if !seen.iter().any(|s| s.eq_ignore_ascii_case(column)) {
                    seen.push(column.clone());
                }
            }
        }
        seen
    }

    /// The model's columns: each input, then the target, all text.
    pub(crate) fn schema(&self, target: &str) -> Result<Schema> {
        let inputs = self.inputs();
        if let Some(clash) = inputs.iter().find(|c| c.eq_ignore_ascii_case(target)) {
            return Err(Error::invalid(format!(
                "'prompt_template' uses the predicted column '{clash}' as an input"
            )));
        }
        let fields: Vec<Field> = inputs
            .iter()
            .chain(std::iter::once(&target.to_string()))
            .map(|c| Field::new(c, DataType::Utf8, true))
            .collect();
        Ok(Schema::new(fields))
    }

    /// What DESCRIBE shows: no accuracy (nothing was held out), every input equally important.
    pub(crate) fn description(&self, target: &str, default_model: &str) -> Description {
        let inputs = self.inputs();
        let model_name = self
            .settings
            .get("model_name")
            .and_then(Value::as_str)
            .unwrap_or(default_model);
        let mut column_types: BTreeMap<String, String> = inputs
            .iter()
            .map(|c| (c.clone(), "text".to_string()))
            .collect();
        column_types.insert(target.to_string(), "text".to_string());
        Description {
            accuracies: BTreeMap::new(),
            column_importances: inputs.iter().map(|c| (c.clone(), 1.0)).collect(),
            inputs,
            outputs: vec![target.to_string()],
            model: format!("prompt template --> {model_name} chat completion --> text"),
            mixer: "llm".to_string(),
            column_types,
            candidates: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn using(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_template_names_its_columns_once_in_order() {
        let model = check(&using(&[(
            "prompt_template",
            json!("Is {{ review }} about {{product}}? Answer for {{Review}}."),
        )]))
        .unwrap();
        assert_eq!(model.inputs(), ["review", "product"]);
        let schema = model.schema("sentiment").unwrap();
        let names: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["review", "product", "sentiment"]);
    }

    #[test]
    fn bad_settings_are_named() {
        let cases: [(&[(&str, Value)], &str); 7] = [
            (&[], "needs a prompt"),
            (&[("prompt_template", json!("x {{a"))], "never closed"),
            (&[("prompt_template", json!("x {{ }}"))], "without a column"),
            (
                &[("prompt_template", json!("x")), ("tempreature", json!(1))],
                "no setting 'tempreature'",
            ),
            (
                &[
                    ("prompt_template", json!("x")),
                    ("base_url", json!("ftp://h")),
                ],
                "'base_url' must be an http",
            ),
            (
                &[
                    ("prompt_template", json!("x")),
                    ("max_concurrency", json!(0)),
                ],
                "'max_concurrency' must be a whole number from 1 to 64",
            ),
            (&[("prompt_template", json!(3))], "must be text"),
        ];
        for (pairs, expected) in cases {
            let error = check(&using(pairs)).unwrap_err();
            assert!(error.message().contains(expected), "{}", error.message());
        }
    }

    #[test]
    fn the_target_cannot_be_an_input() {
        let model = check(&using(&[("prompt_template", json!("{{y}}"))])).unwrap();
        assert!(model.schema("Y").is_err());
    }
}
