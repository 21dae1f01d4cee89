//! Knowledge bases: documents of a project chunked, embedded and searched by meaning. Owns the
//! redb table `knowledge_bases` (the records); a knowledge base's chunks, with their metadata
//! and vectors, are rows of a stored table named like it in the database `{project}/kb` (see
//! [`chunk_db`]), made at its first insert, so they share the tables' storage, transactions
//! and crash safety. Knowledge bases share the names of a project's tables and views.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::catalog::namespace::validate_name;
use crate::catalog::tables;
use crate::config::EmbeddingConfig;
use crate::error::{Error, Result, Subject};
use crate::store;
use crate::store::schema::KNOWLEDGE_BASES;
use crate::tenant::TenantId;

/// MindsDB's default chunk size, in characters.
const DEFAULT_CHUNK_SIZE: usize = 1000;
/// MindsDB's default overlap of consecutive chunks, in characters.
const DEFAULT_CHUNK_OVERLAP: usize = 200;
/// Largest chunk size accepted, in characters.
const MAX_CHUNK_SIZE: usize = 100_000;
/// The columns of [`KnowledgeBase::system_row`].
pub(crate) const SYSTEM_COLUMNS: [&str; 8] = [
    "NAME",
    "PROJECT",
    "EMBEDDING_MODEL",
    "RERANKING_MODEL",
    "METADATA_COLUMNS",
    "CONTENT_COLUMNS",
    "ID_COLUMN",
    "PARAMS",
];
/// Keys of `embedding_model` that are used; others are refused, so a typo is no silent default.
const EMBEDDING_KEYS: [&str; 5] = [
    "provider",
    "model_name",
    "base_url",
    "api_key",
    "batch_size",
];

/// A knowledge base's catalog record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeBase {
    /// The name as created.
    pub name: String,
    /// The project it lives in (lower case).
    pub project: String,
    /// The embedding model's settings (`provider`, `model_name`, `base_url`, `api_key`,
    /// `batch_size`), completed from the configured default when created.
    pub embedding_model: Map<String, Value>,
    /// Columns of inserted rows whose text is chunked and embedded.
    pub content_columns: Vec<String>,
    /// Columns kept as metadata, as declared; empty: every column but the id and the content
    /// ones, fixed by the first insert.
    pub metadata_columns: Vec<String>,
    /// The column of inserted rows identifying a document.
    pub id_column: String,
    /// Characters per chunk at most.
    pub chunk_size: usize,
    /// Characters a chunk repeats of the one before.
    pub chunk_overlap: usize,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
}

impl KnowledgeBase {
    /// A knowledge base from `CREATE KNOWLEDGE_BASE … USING` pairs (keys lower case), with
    /// MindsDB's defaults and the configured embedding model for what they leave out.
    pub(crate) fn from_using(
        project: &str,
        name: &str,
        pairs: Vec<(String, Value)>,
        default: &EmbeddingConfig,
    ) -> Result<KnowledgeBase> {
        validate_name("knowledge base", name)?;
        let mut kb = KnowledgeBase {
            name: name.to_string(),
            project: project.to_ascii_lowercase(),
            embedding_model: Map::new(),
            content_columns: vec!["content".to_string()],
            metadata_columns: Vec::new(),
            id_column: "id".to_string(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            chunk_overlap: DEFAULT_CHUNK_OVERLAP,
            created_at: crate::time::now_text(),
        };
        for (key, value) in pairs {
            match key.as_str() {
                "embedding_model" => kb.embedding_model = embedding_model(value)?,
                "reranking_model" => match value {
                    Value::Bool(false) | Value::Null => {}
                    _ => {
                        return Err(Error::invalid(
                            "reranking_model: rerankers are not supported yet; give reranking_model = false (results are ranked by vector distance)",
                        ))
                    }
                },
                "content_columns" => kb.content_columns = names(&key, value, false)?,
                "metadata_columns" => kb.metadata_columns = names(&key, value, true)?,
                "id_column" => kb.id_column = text(&key, value)?,
                "preprocessing" => (kb.chunk_size, kb.chunk_overlap) = preprocessing(value)?,
                "storage" | "vector_store" => {
                    return Err(Error::invalid(format!(
                        "{key}: knowledge bases keep their vectors in the engine's own file; leave {key} out"
                    )))
                }
                other => {
                    return Err(Error::invalid(format!(
                        "Unknown knowledge base parameter '{other}' (known: embedding_model, reranking_model, content_columns, metadata_columns, id_column, preprocessing)"
                    )))
                }
            }
        }
        for (key, value) in [
            ("provider", &default.provider),
            ("model_name", &default.model_name),
        ] {
            kb.embedding_model
                .entry(key)
                .or_insert_with(|| Value::String(value.clone()));
        }
        let lower =
            |v: &[String]| -> Vec<String> { v.iter().map(|c| c.to_ascii_lowercase()).collect() };
        let id = kb.id_column.to_ascii_lowercase();
        if lower(&kb.content_columns).contains(&id) || lower(&kb.metadata_columns).contains(&id) {
            return Err(Error::invalid(format!(
                "id_column '{}' cannot also be a content or metadata column",
                kb.id_column
            )));
        }
        if let Some(both) = lower(&kb.content_columns)
            .iter()
            .find(|c| lower(&kb.metadata_columns).contains(c))
        {
            return Err(Error::invalid(format!(
                "Column '{both}' cannot be both a content and a metadata column"
            )));
        }
        Ok(kb)
    }

    /// A knowledge base from MindsDB's REST body (`{"name", "embedding_model",
    /// "reranking_model", "content_columns", "metadata_columns", "id_column",
    /// "preprocessing", "params": {…}}`; `params` may hold any of the others).
    pub(crate) fn from_body(
        project: &str,
        body: Map<String, Value>,
        default: &EmbeddingConfig,
    ) -> Result<KnowledgeBase> {
        let name = match body.get("name") {
            Some(Value::String(name)) => name.clone(),
            _ => {
                return Err(Error::invalid(
                    "Must provide \"name\" field in \"knowledge_base\"",
                ))
            }
        };
        let mut pairs: Vec<(String, Value)> = Vec::new();
        for (key, value) in body {
            match key.as_str() {
                "name" => {}
                "params" => match value {
                    Value::Object(params) => {
                        pairs.extend(params.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)))
                    }
                    Value::Null => {}
                    _ => return Err(Error::invalid("\"params\" must be an object")),
                },
                // Fields of MindsDB's that say nothing here (its ids and times) are ignored,
                // as MindsDB ignores what it does not read.
                "embedding_model" | "reranking_model" | "content_columns" | "metadata_columns"
                | "id_column" | "preprocessing" | "storage" => pairs.push((key, value)),
                _ => {}
            }
        }
        let mut seen = std::collections::HashSet::new();
        if let Some((key, _)) = pairs.iter().find(|(k, _)| !seen.insert(k.clone())) {
            return Err(Error::invalid(format!(
                "Parameter '{key}' is given twice (in \"params\" and beside it)"
            )));
        }
        Self::from_using(project, &name, pairs, default)
    }

    /// MindsDB's REST body of a knowledge base (its `as_dict`), the API key masked.
    pub fn wire(&self) -> Value {
        json!({
            "name": self.name,
            "project": self.project,
            "vector_database": null,
            "vector_database_table": null,
            "embedding_model": self.shown_embedding_model(),
            "reranking_model": null,
            "metadata_columns": self.metadata_columns,
            "content_columns": self.content_columns,
            "id_column": self.id_column,
            "params": self.params(),
            "created_at": self.created_at,
            "updated_at": self.created_at,
        })
    }

    /// The embedding model's settings as shown: the API key masked.
    pub(crate) fn shown_embedding_model(&self) -> Value {
        let mut shown = self.embedding_model.clone();
        if shown.contains_key("api_key") {
            shown.insert("api_key".into(), json!("******"));
        }
        Value::Object(shown)
    }

    /// The columns MindsDB shows in `SHOW KNOWLEDGE_BASES` and
    /// `information_schema.knowledge_bases`, in order (see [`SYSTEM_COLUMNS`]), secrets masked.
    pub(crate) fn system_row(&self) -> [String; 8] {
        let list = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
        [
            self.name.clone(),
            self.project.clone(),
            self.shown_embedding_model().to_string(),
            "null".to_string(),
            list(&self.metadata_columns),
            list(&self.content_columns),
            self.id_column.clone(),
            self.params().to_string(),
        ]
    }

    /// MindsDB's `PARAMS` column: the chunking settings.
    pub(crate) fn params(&self) -> Value {
        json!({"preprocessing": {"type": "text_chunking", "text_chunking_config": {
            "chunk_size": self.chunk_size, "chunk_overlap": self.chunk_overlap}}})
    }
}

fn embedding_model(value: Value) -> Result<Map<String, Value>> {
    let Value::Object(mut model) = value else {
        return Err(Error::invalid(
            "embedding_model must be an object such as {\"provider\": \"openai\", \"model_name\": \"text-embedding-3-small\"}",
        ));
    };
    // mindsdb_sdk's documentation writes `model` for `model_name`.
    if let Some(name) = model.remove("model") {
        model.entry("model_name").or_insert(name);
    }
    for (key, value) in &model {
        if !EMBEDDING_KEYS.contains(&key.as_str()) {
            return Err(Error::invalid(format!(
                "Unknown embedding_model key '{key}' (known: {})",
                EMBEDDING_KEYS.join(", ")
            )));
        }
        let ok = match key.as_str() {
            "batch_size" => value.as_u64().is_some_and(|n| n > 0),
            _ => value.is_string(),
        };
        if !ok {
            return Err(Error::invalid(format!(
                "embedding_model.{key} must be {}",
                if key == "batch_size" {
                    "a positive integer"
                } else {
                    "text"
                }
            )));
        }
    }
    Ok(model)
}

fn text(key: &str, value: Value) -> Result<String> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(Error::invalid(format!("{key} must be a column name"))),
    }
}

fn names(key: &str, value: Value, may_be_empty: bool) -> Result<Vec<String>> {
    let list = match value {
        Value::String(one) => vec![Value::String(one)],
        Value::Array(list) => list,
        _ => {
            return Err(Error::invalid(format!(
                "{key} must be a list of column names"
            )))
        }
    };
    let names = list
        .into_iter()
        .map(|v| text(key, v))
        .collect::<Result<Vec<_>>>()?;
    if names.is_empty() && !may_be_empty {
        return Err(Error::invalid(format!(
            "{key} must name at least one column"
        )));
    }
    Ok(names)
}

/// `{"type": "text_chunking", "text_chunking_config": {"chunk_size": n, "chunk_overlap": m}}`.
fn preprocessing(value: Value) -> Result<(usize, usize)> {
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("text_chunking");
    if kind != "text_chunking" {
        return Err(Error::invalid(format!(
            "preprocessing type '{kind}' is not supported (use \"text_chunking\")"
        )));
    }
    let config = value
        .get("text_chunking_config")
        .cloned()
        .unwrap_or(json!({}));
    let number = |key: &str, default: usize| match config.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::invalid(format!("{key} must be a non-negative integer"))),
    };
    let size = number("chunk_size", DEFAULT_CHUNK_SIZE)?;
    let overlap = number("chunk_overlap", DEFAULT_CHUNK_OVERLAP.min(size / 2))?;
    if !(1..=MAX_CHUNK_SIZE).contains(&size) {
        return Err(Error::invalid(format!(
            "chunk_size must be between 1 and {MAX_CHUNK_SIZE} characters"
        )));
    }
    // A larger overlap would repeat most of every chunk in the next: a document would be
    // embedded many times over.
    if overlap > size / 2 {
        return Err(Error::invalid(format!(
            "chunk_overlap ({overlap}) must be at most half of chunk_size ({size})"
        )));
    }
    Ok((size, overlap))
}

/// MindsDB's words for a knowledge base that does not exist.
pub(crate) fn missing(name: &str) -> Error {
    Error::not_found(format!("Knowledge Base with name {name} does not exist"))
        .about(Subject::KnowledgeBase)
}

/// The database whose table of the knowledge base's name holds its chunks; no project can be
/// named so, and neither SQL nor `SHOW TABLES` reaches it.
pub(crate) fn chunk_db(project: &str) -> String {
    format!("{}/kb", project.to_ascii_lowercase())
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(KNOWLEDGE_BASES)?;
    Ok(())
}

/// One knowledge base by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<KnowledgeBase>> {
    store::get_in_project(table, tenant, project, name)
}

/// Every knowledge base of a project, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<KnowledgeBase>> {
    store::list_in_project(table, tenant, project)
}

/// Stores a new knowledge base; with `if_not_exists` an existing one is kept as it is. The
/// caller checks that the project exists and that no table or view has the name.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    kb: KnowledgeBase,
    if_not_exists: bool,
) -> Result<()> {
    let key = kb.name.to_ascii_lowercase();
    let mut table = txn.open_table(KNOWLEDGE_BASES)?;
    if table
        .get((tenant.0, kb.project.as_str(), key.as_str()))?
        .is_some()
    {
        if if_not_exists {
            return Ok(());
        }
        return Err(Error::conflict(format!(
            "Knowledge Base with name {} already exists",
            kb.name
        ))
        .about(Subject::KnowledgeBase));
    }
    table.insert(
        (tenant.0, kb.project.as_str(), key.as_str()),
        serde_json::to_string(&kb)?.as_str(),
    )?;
    Ok(())
}

/// Removes the knowledge base `name` and its chunks; `if_exists` makes a missing one a no-op.
pub(crate) fn drop_kb(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let removed = txn
        .open_table(KNOWLEDGE_BASES)?
        .remove((tenant.0, project.as_str(), key.as_str()))?
        .is_some();
    if !removed {
        if if_exists {
            return Ok(());
        }
        return Err(missing(name));
    }
    tables::drop_table(txn, tenant, &chunk_db(&project), &key)?;
    Ok(())
}

/// Drops every knowledge base of a project and their chunks (when the project is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let project = project.to_ascii_lowercase();
    txn.open_table(KNOWLEDGE_BASES)?.retain_in(
        (tenant.0, project.as_str(), "")..(tenant.0, project.as_str(), "\u{10FFFF}"),
        |_, _| false,
    )?;
    tables::drop_all(txn, tenant, &chunk_db(&project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn using(pairs: Value) -> Result<KnowledgeBase> {
        let pairs = pairs
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        KnowledgeBase::from_using("p", "kb", pairs, &EmbeddingConfig::default())
    }

    #[test]
    fn defaults_are_mindsdb_s_and_the_configured_model() {
        let kb = using(json!({})).unwrap();
        assert_eq!(kb.content_columns, ["content"]);
        assert_eq!(kb.id_column, "id");
        assert_eq!((kb.chunk_size, kb.chunk_overlap), (1000, 200));
        assert_eq!(kb.embedding_model["model_name"], "text-embedding-3-small");
    }

    #[test]
    fn bad_parameters_name_what_is_wrong() {
        for (pairs, says) in [
            (
                json!({"embedding_model": {"modelname": "x"}}),
                "Unknown embedding_model key 'modelname'",
            ),
            (
                json!({"reranking_model": {"provider": "openai"}}),
                "rerankers are not supported",
            ),
            (json!({"content_columns": []}), "at least one column"),
            (
                json!({"preprocessing": {"text_chunking_config": {"chunk_size": 10, "chunk_overlap": 10}}}),
                "at most half",
            ),
            (
                json!({"id_column": "body", "content_columns": ["body"]}),
                "cannot also be",
            ),
            (
                json!({"metadata_columns": ["a"], "content_columns": ["a"]}),
                "both a content and a metadata",
            ),
            (
                json!({"colour": 1}),
                "Unknown knowledge base parameter 'colour'",
            ),
        ] {
            let e = using(pairs).unwrap_err();
            assert!(e.message().contains(says), "{}", e.message());
        }
    }

    #[test]
    fn the_api_key_is_masked_when_shown() {
        let kb = using(json!({"embedding_model": {"api_key": "sk-secret"}})).unwrap();
        assert_eq!(kb.shown_embedding_model()["api_key"], "******");
    }
}
