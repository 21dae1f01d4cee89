//! Knowledge bases: documents of a project chunked, embedded and searched by meaning. Owns the
//! redb table `knowledge_bases` (the records); a knowledge base's chunks, with their metadata,
//! are rows of a stored table named like it in the database `{project}/kb` (see
//! [`chunk_db`]), made at its first insert, so they share the tables' storage, transactions
//! and crash safety; their vectors and words are in its indexes (`kb_index`), keyed by that
//! table. One kept in PostgreSQL (its `storage`) has the chunk table's record here, never its
//! rows, and no indexes here. Knowledge bases share the names of a project's tables and views.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Float32Type, Schema};
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::catalog::namespace::validate_name;
use crate::catalog::tables::ReadTables;
use crate::catalog::{kb_index, tables};
use crate::config::EmbeddingConfig;
use crate::egress::Egress;
use crate::error::{Error, Result, Subject};
use crate::store;
use crate::store::schema::{KNOWLEDGE_BASES, TABLES, TABLE_SCHEMAS};
use crate::store::Reads;
use crate::tenant::TenantId;

/// The chunk table's column of each chunk's document id.
pub(crate) const ID: &str = "id";
/// The chunk table's column of each chunk's id (`{id}:{column}:{n}of{total}:{start}to{end}`).
pub(crate) const CHUNK_ID: &str = "chunk_id";
/// The chunk's text, which MindsDB also reads as the search condition's column.
pub(crate) const CHUNK_CONTENT: &str = "chunk_content";
/// The chunk table's column of each chunk's metadata as one JSON object.
pub(crate) const METADATA: &str = "metadata";
/// Columns of the chunk table before its metadata columns.
pub(crate) const LEADING: usize = 4;

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

/// Keys of `reranking_model` that are used (a chat model's); others are refused.
const RERANKING_KEYS: [&str; 4] = ["provider", "model_name", "base_url", "api_key"];

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
    /// The reranker's settings (`provider`, `model_name`, `base_url`, `api_key`): a chat
    /// model scoring the chunks a search found; `None` ranks by distance alone.
    #[serde(default)]
    pub reranking_model: Option<Map<String, Value>>,
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
    /// Where its chunks and vectors live when not in this file: a PostgreSQL table with
    /// pgvector's `vector` type (`USING storage = pg.table`, or the configured
    /// `knowledge_bases.storage_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<KbStorage>,
}

/// A knowledge base's PostgreSQL table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KbStorage {
    /// The datasource holding it; `None`: the server of `knowledge_bases.storage_url`, where
    /// the table is the knowledge base's own and is dropped with it (a datasource's table is
    /// the user's, and stays).
    pub database: Option<String>,
    /// The table's name in the datasource's schema.
    pub table: String,
}

impl KbStorage {
    /// `USING storage = db.table`: a datasource's table, named as MindsDB names it (its REST
    /// body's `{"database": …, "table": …}` too).
    fn parse(value: Value) -> Result<KbStorage> {
        let text = match value {
            Value::String(text) => text,
            Value::Object(parts) => match (parts.get("database"), parts.get("table")) {
                (Some(Value::String(database)), Some(Value::String(table))) if parts.len() == 2 => {
                    format!("{database}.{table}")
                }
                _ => {
                    return Err(Error::invalid(
                        "storage must be {\"database\": \"<datasource>\", \"table\": \"<table>\"}",
                    ))
                }
            },
            other => {
                return Err(Error::invalid(format!(
                    "storage must name a PostgreSQL datasource's table as datasource.table, not {other}"
                )))
            }
        };
        match text.split_once('.') {
            // PostgreSQL cuts longer names to 63 bytes, which would then name another table.
            Some((_, table)) if table.len() > 63 => Err(Error::invalid(format!(
                "storage: table name '{table}' is longer than PostgreSQL's 63 bytes"
            ))),
            Some((database, table))
                if !database.is_empty() && !table.is_empty() && !table.contains('.') =>
            {
                Ok(KbStorage {
                    database: Some(database.to_ascii_lowercase()),
                    table: table.to_string(),
                })
            }
            _ => Err(Error::invalid(format!(
                "storage must name a PostgreSQL datasource's table as datasource.table, not '{text}'"
            ))),
        }
    }

    /// Whether the table is the knowledge base's own, dropped with it.
    pub fn owned(&self) -> bool {
        self.database.is_none()
    }
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
            reranking_model: None,
            content_columns: vec!["content".to_string()],
            metadata_columns: Vec::new(),
            id_column: "id".to_string(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            chunk_overlap: DEFAULT_CHUNK_OVERLAP,
            created_at: crate::time::now_text(),
            storage: None,
        };
        for (key, value) in pairs {
            match key.as_str() {
                "embedding_model" => kb.embedding_model = embedding_model(value)?,
                "reranking_model" => kb.reranking_model = reranking_model(value)?,
                "content_columns" => kb.content_columns = names(&key, value, false)?,
                "metadata_columns" => kb.metadata_columns = names(&key, value, true)?,
                "id_column" => kb.id_column = text(&key, value)?,
                "preprocessing" => (kb.chunk_size, kb.chunk_overlap) = preprocessing(value)?,
                "storage" => kb.storage = Some(KbStorage::parse(value)?),
                "vector_store" => {
                    return Err(Error::invalid(
                        "vector_store: name a PostgreSQL datasource's table with storage = datasource.table, or leave it out to keep the vectors in the engine's own file",
                    ))
                }
                other => {
                    return Err(Error::invalid(format!(
                        "Unknown knowledge base parameter '{other}' (known: embedding_model, reranking_model, content_columns, metadata_columns, id_column, preprocessing, storage)"
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
        kb.check_columns()?;
        Ok(kb)
    }

    /// This knowledge base with `ALTER KNOWLEDGE_BASE … USING` pairs (keys lower case)
    /// applied, by MindsDB's rules: `embedding_model` keys are merged in, but its provider and
    /// model cannot change (the stored vectors are theirs); `reranking_model` is merged in,
    /// replaced when its provider changes, removed by `false`; the columns and the chunking
    /// are replaced and apply to later inserts. `filled`: chunks are stored already, so the
    /// metadata columns (the chunk table's) are fixed.
    pub(crate) fn altered(
        &self,
        pairs: Vec<(String, Value)>,
        filled: bool,
    ) -> Result<KnowledgeBase> {
        let mut kb = self.clone();
        for (key, value) in pairs {
            match key.as_str() {
                "embedding_model" => {
                    for (key, value) in embedding_model(value)? {
                        let fixed = matches!(key.as_str(), "provider" | "model_name");
                        if fixed && kb.embedding_model.get(&key) != Some(&value) {
                            return Err(Error::invalid(format!(
                                "You can't update '{key}' setting of knowledge base '{}': its stored vectors come from the current model (create a new knowledge base for another)",
                                kb.name
                            )));
                        }
                        kb.embedding_model.insert(key, value);
                    }
                }
                "reranking_model" => {
                    kb.reranking_model = match (reranking_model(value)?, kb.reranking_model) {
                        (None, _) => None,
                        (Some(new), Some(mut old))
                            if new.get("provider").is_none_or(|p| old.get("provider") == Some(p)) =>
                        {
                            old.extend(new);
                            Some(old)
                        }
                        (Some(new), _) => Some(new),
                    }
                }
                "content_columns" => kb.content_columns = names(&key, value, false)?,
                "metadata_columns" => {
                    let columns = names(&key, value, true)?;
                    if filled && columns != kb.metadata_columns {
                        return Err(Error::invalid(format!(
                            "metadata_columns of knowledge base '{}' are fixed once it holds documents (they are columns of its chunks)",
                            kb.name
                        )));
                    }
                    kb.metadata_columns = columns;
                }
                "id_column" => kb.id_column = text(&key, value)?,
                "preprocessing" => (kb.chunk_size, kb.chunk_overlap) = preprocessing(value)?,
                "storage" => {
                    return Err(Error::invalid(format!(
                        "Knowledge base parameter 'storage' cannot be altered: the chunks and vectors of '{}' are kept there (create a new knowledge base for another)",
                        kb.name
                    )))
                }
                other => {
                    return Err(Error::invalid(format!(
                        "Knowledge base parameter '{other}' cannot be altered (known: embedding_model, reranking_model, content_columns, metadata_columns, id_column, preprocessing)"
                    )))
                }
            }
        }
        kb.check_columns()?;
        Ok(kb)
    }

    /// Refuses an embedding or reranking model's `base_url` that is no http(s) URL with a
    /// host, or that writes an address the egress policy refuses, as agents' and LLM models'
    /// are refused when saved; a name is checked at every call.
    fn check_urls(&self, egress: &Egress) -> Result<()> {
        let models = [
            ("embedding_model", Some(&self.embedding_model)),
            ("reranking_model", self.reranking_model.as_ref()),
        ];
        for (setting, model) in models {
            let Some(url) = model
                .and_then(|m| m.get("base_url"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            let key = format!("{setting}.base_url");
            crate::egress::check_http_url(&key, url)?;
            egress
                .check_url_text(url)
                .map_err(|e| Error::new(e.kind(), format!("'{key}' was {}", e.message())))?;
        }
        Ok(())
    }

    /// Fails when one column has two roles.
    fn check_columns(&self) -> Result<()> {
        let lower =
            |v: &[String]| -> Vec<String> { v.iter().map(|c| c.to_ascii_lowercase()).collect() };
        let id = self.id_column.to_ascii_lowercase();
        if lower(&self.content_columns).contains(&id) || lower(&self.metadata_columns).contains(&id)
        {
            return Err(Error::invalid(format!(
                "id_column '{}' cannot also be a content or metadata column",
                self.id_column
            )));
        }
        if let Some(both) = lower(&self.content_columns)
            .iter()
            .find(|c| lower(&self.metadata_columns).contains(c))
        {
            return Err(Error::invalid(format!(
                "Column '{both}' cannot be both a content and a metadata column"
            )));
        }
        Ok(())
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
            "vector_database": self.storage.as_ref().and_then(|s| s.database.clone()),
            "vector_database_table": self.storage.as_ref().map(|s| s.table.clone()),
            "embedding_model": self.shown_embedding_model(),
            "reranking_model": self.shown_reranking_model(),
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
        masked(&self.embedding_model)
    }

    /// The reranker's settings as shown (`null` without one): the API key masked.
    pub(crate) fn shown_reranking_model(&self) -> Value {
        self.reranking_model.as_ref().map_or(Value::Null, masked)
    }

    /// The columns MindsDB shows in `SHOW KNOWLEDGE_BASES` and
    /// `information_schema.knowledge_bases`, in order (see [`SYSTEM_COLUMNS`]), secrets masked.
    pub(crate) fn system_row(&self) -> [String; 8] {
        let list = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
        [
            self.name.clone(),
            self.project.clone(),
            self.shown_embedding_model().to_string(),
            self.shown_reranking_model().to_string(),
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

/// Settings as shown: the API key masked.
fn masked(settings: &Map<String, Value>) -> Value {
    let mut shown = settings.clone();
    if shown.contains_key("api_key") {
        shown.insert("api_key".into(), json!("******"));
    }
    Value::Object(shown)
}

/// `reranking_model = {…}` (a chat model scoring found chunks) or `false` / `null` (none).
fn reranking_model(value: Value) -> Result<Option<Map<String, Value>>> {
    let mut model = match value {
        Value::Bool(false) | Value::Null => return Ok(None),
        Value::Object(model) => model,
        _ => {
            return Err(Error::invalid(
                "reranking_model must be an object such as {\"provider\": \"openai\", \"model_name\": \"gpt-4o\"}, or false",
            ))
        }
    };
    if let Some(name) = model.remove("model") {
        model.entry("model_name").or_insert(name);
    }
    for (key, value) in &model {
        if !RERANKING_KEYS.contains(&key.as_str()) {
            return Err(Error::invalid(format!(
                "Unknown reranking_model key '{key}' (known: {})",
                RERANKING_KEYS.join(", ")
            )));
        }
        if !value.is_string() {
            return Err(Error::invalid(format!(
                "reranking_model.{key} must be text"
            )));
        }
    }
    Ok(Some(model))
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
    kb_index::init(txn)?;
    let mut old = Vec::new();
    for entry in txn.open_table(KNOWLEDGE_BASES)?.iter()? {
        let (key, _) = entry?;
        let (tenant, project, name) = key.value();
        old.push((TenantId(tenant), project.to_string(), name.to_string()));
    }
    for (tenant, project, name) in old {
        index_vectors(txn, tenant, &project, &name)?;
    }
    Ok(())
}

/// Files written before knowledge bases had indexes kept each chunk's vector in the last
/// column of its row (`embeddings`): those vectors move into a new index, a `node` column
/// takes their place.
fn index_vectors(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<()> {
    let db = chunk_db(project);
    let Some(record) = tables::get(&txn.open_table(TABLES)?, tenant, &db, name)? else {
        return Ok(());
    };
    let schema = tables::schema(&txn.open_table(TABLE_SCHEMAS)?, record.id)?;
    let last = schema.fields().len() - 1;
    let dimensions = match schema.field(last).data_type() {
        DataType::FixedSizeList(_, n) if schema.field(last).name() == "embeddings" => *n as usize,
        _ => return Ok(()),
    };
    let defaults = crate::config::KnowledgeBasesConfig::default();
    let mut index = kb_index::IndexWriter::new(
        None,
        mindlite_vectors::hnsw::Params {
            dimensions,
            m: defaults.hnsw_m,
            ef_construction: defaults.hnsw_ef_construction,
        },
    );
    let mut fields: Vec<Field> = schema.fields()[..last]
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("node", DataType::UInt32, true));
    let new_schema = Arc::new(Schema::new(fields));
    let mut batches = Vec::new();
    for (_, chunk) in txn.chunk_order_of(record.id)? {
        let stored = txn.chunk(record.id, chunk)?;
        let vectors = stored.column(last).as_fixed_size_list();
        let values = vectors.values().as_primitive::<Float32Type>().values();
        let texts = stored.column(2).as_string::<i32>();
        let first = index.next_node();
        let vectors: Vec<Vec<f32>> = values
            .chunks_exact(dimensions)
            .take(stored.num_rows())
            .map(<[f32]>::to_vec)
            .collect();
        let texts: Vec<String> = (0..stored.num_rows())
            .map(|row| match texts.is_null(row) {
                true => String::new(),
                false => texts.value(row).to_string(),
            })
            .collect();
        index.add(first, &vectors, &texts)?;
        let mut columns = stored.columns()[..last].to_vec();
        columns.push(Arc::new(UInt32Array::from_iter_values(
            first..first + stored.num_rows() as u32,
        )));
        batches.push(RecordBatch::try_new(Arc::clone(&new_schema), columns)?);
    }
    tables::drop_table(txn, tenant, &db, name)?;
    let created = tables::create(txn, tenant, &db, name, &new_schema, Default::default())?;
    let mut writer = tables::TableWriter::append(txn, tenant, created.clone())?;
    for batch in batches {
        writer.push(batch)?;
    }
    writer.finish()?;
    index.save(txn, tenant, created.id)?;
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

/// Every knowledge base of `project`, by name, read in `txn`.
pub(crate) fn in_project(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<KnowledgeBase>> {
    list(&txn.reading(KNOWLEDGE_BASES)?, tenant, project)
}

/// A knowledge base of `project` by name (case-insensitive), read in `txn`.
pub(crate) fn named(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<KnowledgeBase>> {
    get(&txn.reading(KNOWLEDGE_BASES)?, tenant, project, name)
}

/// Stores a new knowledge base; with `if_not_exists` an existing one is kept as it is. The
/// caller checks that the project exists and that no table or view has the name; its models'
/// URLs are checked here, under `egress`. `chunks` is the schema of the chunk table of one
/// made over a PostgreSQL table that exists already, whose record is then made with it.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    kb: KnowledgeBase,
    if_not_exists: bool,
    egress: &Egress,
    chunks: Option<&Schema>,
) -> Result<()> {
    kb.check_urls(egress)?;
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
    if let Some(schema) = chunks {
        let db = chunk_db(&kb.project);
        tables::create(txn, tenant, &db, &key, schema, Default::default())?;
    }
    Ok(())
}

/// Every knowledge base of `tenant`, in every project.
fn of_tenant(txn: &WriteTransaction, tenant: TenantId) -> Result<Vec<KnowledgeBase>> {
    let table = txn.open_table(KNOWLEDGE_BASES)?;
    let mut out = Vec::new();
    for entry in table.range((tenant.0, "", "")..(tenant.0 + 1, "", ""))? {
        let (_, value) = entry?;
        out.push(serde_json::from_str(value.value())?);
    }
    Ok(out)
}

/// Fails with Conflict when a knowledge base keeps its chunks in datasource `name`: dropped,
/// the datasource would leave it with no way to its vectors.
pub(crate) fn check_storage_unused(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
) -> Result<()> {
    let key = name.to_ascii_lowercase();
    let users = of_tenant(txn, tenant)?;
    match users.iter().find(|kb| {
        kb.storage
            .as_ref()
            .is_some_and(|s| s.database.as_deref() == Some(key.as_str()))
    }) {
        Some(kb) => Err(Error::conflict(format!(
            "Datasource '{key}' keeps the chunks of knowledge base '{}.{}'; drop the knowledge base first",
            kb.project, kb.name
        ))),
        None => Ok(()),
    }
}

/// Points the knowledge bases that keep their chunks in datasource `old` at its new name.
pub(crate) fn rename_storage(
    txn: &WriteTransaction,
    tenant: TenantId,
    old: &str,
    new: &str,
) -> Result<()> {
    let kept = of_tenant(txn, tenant)?;
    let mut table = txn.open_table(KNOWLEDGE_BASES)?;
    for mut kb in kept {
        match kb.storage.as_mut() {
            Some(storage) if storage.database.as_deref() == Some(old) => {
                storage.database = Some(new.to_string());
            }
            _ => continue,
        }
        let key = kb.name.to_ascii_lowercase();
        table.insert(
            (tenant.0, kb.project.as_str(), key.as_str()),
            serde_json::to_string(&kb)?.as_str(),
        )?;
    }
    Ok(())
}

/// Applies `ALTER KNOWLEDGE_BASE` pairs to the knowledge base `name` (see
/// [`KnowledgeBase::altered`]); the models' URLs it comes to have are checked under `egress`.
pub(crate) fn alter(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    pairs: Vec<(String, Value)>,
    egress: &Egress,
) -> Result<()> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let mut table = txn.open_table(KNOWLEDGE_BASES)?;
    let kb = get(&table, tenant, &project, &key)?.ok_or_else(|| missing(name))?;
    let filled =
        tables::get(&txn.open_table(TABLES)?, tenant, &chunk_db(&project), &key)?.is_some();
    let kb = kb.altered(pairs, filled)?;
    kb.check_urls(egress)?;
    table.insert(
        (tenant.0, project.as_str(), key.as_str()),
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
    drop_chunks(txn, tenant, &project, &key)
}

/// Drops a knowledge base's chunk table and its indexes.
fn drop_chunks(txn: &WriteTransaction, tenant: TenantId, project: &str, key: &str) -> Result<()> {
    let db = chunk_db(project);
    if let Some(record) = tables::get(&txn.open_table(TABLES)?, tenant, &db, key)? {
        kb_index::drop_index(txn, tenant, record.id)?;
    }
    tables::drop_table(txn, tenant, &db, key)?;
    Ok(())
}

/// Drops every knowledge base of a project and their chunks (when the project is dropped).
/// Returns the PostgreSQL tables of their own they leave (`knowledge_bases.storage_url`'s),
/// for the caller to drop once this has committed.
pub(crate) fn drop_all(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
) -> Result<Vec<String>> {
    let project = project.to_ascii_lowercase();
    let owned = list(&txn.open_table(KNOWLEDGE_BASES)?, tenant, &project)?
        .into_iter()
        .filter_map(|kb| kb.storage.filter(KbStorage::owned).map(|s| s.table))
        .collect();
    txn.open_table(KNOWLEDGE_BASES)?.retain_in(
        (tenant.0, project.as_str(), "")..(tenant.0, project.as_str(), "\u{10FFFF}"),
        |_, _| false,
    )?;
    let chunk_tables = tables::list(&txn.open_table(TABLES)?, tenant, &chunk_db(&project))?;
    for record in chunk_tables {
        drop_chunks(txn, tenant, &project, &record.name.to_ascii_lowercase())?;
    }
    Ok(owned)
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
                json!({"reranking_model": {"provider": "openai", "temperature": 0}}),
                "Unknown reranking_model key 'temperature'",
            ),
            (json!({"reranking_model": true}), "or false"),
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

    #[test]
    fn opening_a_file_moves_vectors_kept_in_rows_into_an_index() {
        use crate::catalog::kb_index::ReadIndex;
        use datafusion::arrow::array::{FixedSizeListArray, Float32Array, StringArray};
        let store = store::Store::open_in_memory(0, 0).unwrap();
        let write = |f: &dyn Fn(&WriteTransaction) -> Result<()>| {
            let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
            f(&guard.txn).unwrap();
            guard.commit().unwrap();
        };
        let tenant = TenantId::LOCAL;
        // A knowledge base as files kept it before indexes: vectors in `embeddings`.
        write(&|txn| {
            tables::init(txn)?;
            init(txn)?;
            let kb = using(json!({}))?;
            create(
                txn,
                tenant,
                kb,
                false,
                &crate::Config::default().egress()?,
                None,
            )?;
            let text = |name: &str| Field::new(name, DataType::Utf8, true);
            let item = Arc::new(Field::new("item", DataType::Float32, true));
            let schema = Arc::new(Schema::new(vec![
                text("id"),
                text("chunk_id"),
                text("chunk_content"),
                text("metadata"),
                Field::new(
                    "embeddings",
                    DataType::FixedSizeList(Arc::clone(&item), 2),
                    true,
                ),
            ]));
            let record = tables::create(txn, tenant, "p/kb", "kb", &schema, Default::default())?;
            let strings = |v: [&str; 3]| Arc::new(StringArray::from(v.to_vec())) as _;
            let vectors = FixedSizeListArray::try_new(
                item,
                2,
                Arc::new(Float32Array::from(vec![1.0, 0.0, 0.0, 1.0, 0.6, 0.8])),
                None,
            )?;
            let batch = RecordBatch::try_new(
                schema,
                vec![
                    strings(["a", "b", "c"]),
                    strings(["a:1", "b:1", "c:1"]),
                    strings(["east wind", "north wind", "mostly north"]),
                    strings(["{}", "{}", "{}"]),
                    Arc::new(vectors),
                ],
            )?;
            let mut writer = tables::TableWriter::append(txn, tenant, record)?;
            writer.push(batch)?;
            writer.finish()?;
            Ok(())
        });
        write(&|txn| init(txn));
        let txn = store.read().unwrap();
        let record = tables::get(&txn.open_table(TABLES).unwrap(), tenant, "p/kb", "kb")
            .unwrap()
            .unwrap();
        let schema = tables::schema(&txn.open_table(TABLE_SCHEMAS).unwrap(), record.id).unwrap();
        assert_eq!(schema.field(4).name(), "node");
        assert_eq!(schema.fields().len(), 5);
        let index = kb_index::load(&store, &txn, record.id).unwrap().unwrap();
        assert_eq!(index.graph.live(), 3);
        let nearest = index.graph.search(&[0.0, 1.0], 1, 10, None);
        assert_eq!(nearest[0].node, 1);
        let found =
            kb_index::keyword_search(&index, &txn, record.id, "north", 10, &|_| true).unwrap();
        assert_eq!(found.len(), 2);
        // Opening it again changes nothing.
        drop(txn);
        write(&|txn| init(txn));
        let txn = store.read().unwrap();
        let again = txn.index_record(record.id).unwrap().unwrap();
        assert_eq!(again.stamp, index.record.stamp);
    }
}
