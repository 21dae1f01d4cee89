//! Minds (the Minds API, `docs/mindsdb-wire.md` §6): a named LLM with datasources and parameters that
//! answers questions with the agent loop over its datasources' tables. Owns the redb table
//! `minds`, keyed by (tenant, lower-cased name). Also reads the OpenAI-style requests a mind is
//! asked with (chat completions, responses) and shapes their answers, so every front speaks
//! the same wire.

use std::future::Future;
use std::pin::Pin;

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::agent_loop::AgentEvent;
use crate::agents::Agent;
use crate::config::{HostedConfig, LlmConfig};
use crate::datasources::{self, DATASOURCES};
use crate::engine::AgentStream;
use crate::error::{Error, Result};
use crate::projects;
use crate::quotas::{self, Slot};
use crate::store;
use crate::tenant::TenantId;

pub(crate) const MINDS: TableDefinition<(u64, &str), &str> = TableDefinition::new("minds");

/// The status minds-sdk expects of a mind that can answer.
const READY: &str = "COMPLETED";

/// A mind as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mind {
    /// Stable id, never reused.
    pub id: u64,
    /// The name (lower case).
    pub name: String,
    /// The LLM asked.
    pub model_name: String,
    /// The LLM's provider (any OpenAI-compatible endpoint).
    pub provider: String,
    /// The datasources it reads, each with the tables it may read (`None`: all of them).
    pub datasources: Vec<MindDatasource>,
    /// Other settings, such as `prompt_template`.
    pub parameters: Map<String, Value>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// Last change, same form.
    pub modified_at: String,
}

/// One datasource of a mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MindDatasource {
    /// The datasource's name.
    pub name: String,
    /// The tables the mind may read; `None` for all.
    pub tables: Option<Vec<String>>,
}

impl Mind {
    /// The mind in the Minds API's shape (`status` added).
    pub fn to_wire_json(&self) -> Value {
        json!({
            "name": self.name,
            "model_name": self.model_name,
            "provider": self.provider,
            "datasources": self.datasources,
            "parameters": self.parameters,
            "created_at": self.created_at,
            "modified_at": self.modified_at,
            "status": READY,
        })
    }

    /// The unsaved agent that answers for this mind: its model, its datasources' tables and
    /// its prompt template. Its queries run with `project` (the tenant's default) as the
    /// current database.
    pub(crate) fn agent(&self, project: &str) -> Agent {
        let tables: Vec<Value> = self
            .datasources
            .iter()
            .flat_map(|ds| match &ds.tables {
                None => vec![Value::String(format!("{}.*", ds.name))],
                Some(tables) => tables
                    .iter()
                    .map(|t| Value::String(format!("{}.{t}", ds.name)))
                    .collect(),
            })
            .collect();
        let mut params = Map::new();
        params.insert(
            "model".into(),
            json!({"provider": self.provider, "model_name": self.model_name}),
        );
        params.insert("data".into(), json!({ "tables": tables }));
        if let Some(template) = self.parameters.get("prompt_template") {
            params.insert("prompt_template".into(), template.clone());
        }
        Agent {
            id: self.id,
            name: self.name.clone(),
            project: project.to_string(),
            project_id: 0,
            created_at: self.created_at.clone(),
            updated_at: self.modified_at.clone(),
            params,
        }
    }
}

/// Creates the table in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(MINDS)?;
    Ok(())
}

/// Creates a mind from a Minds API body (`name`, `model_name`, `provider`, `datasources`,
/// `parameters`), quota-checked in the same transaction.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    body: &Map<String, Value>,
    llm: &LlmConfig,
    hosted: &HostedConfig,
) -> Result<Mind> {
    let name = match body.get("name") {
        Some(Value::String(name)) => name.to_ascii_lowercase(),
        _ => return Err(Error::invalid("A mind needs a 'name' (a string)")),
    };
    projects::validate_name("mind", &name)?;
    if get(&txn.open_table(MINDS)?, tenant, &name)?.is_some() {
        return Err(Error::conflict(format!("Mind '{name}' already exists")));
    }
    quotas::check_slot(txn, tenant, hosted, Slot::Minds, count(txn, tenant)?)?;
    let now = crate::time::now_text();
    let mut mind = Mind {
        id: store::next_tenant_id(txn, tenant, "mind")?,
        name,
        model_name: llm.model_name.clone(),
        provider: llm.provider.clone(),
        datasources: Vec::new(),
        parameters: Map::new(),
        created_at: now.clone(),
        modified_at: now,
    };
    apply(txn, tenant, &mut mind, body)?;
    put(txn, tenant, &mind)?;
    Ok(mind)
}

/// Changes a mind with a Minds API PUT body: the fields given replace the stored ones; a new
/// `name` renames it.
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    body: &Map<String, Value>,
) -> Result<Mind> {
    let old = name.to_ascii_lowercase();
    let mut mind = get(&txn.open_table(MINDS)?, tenant, &old)?.ok_or_else(|| missing(name))?;
    if let Some(new) = body.get("name") {
        let new = new
            .as_str()
            .ok_or_else(|| Error::invalid("'name' must be a string"))?
            .to_ascii_lowercase();
        if new != old {
            projects::validate_name("mind", &new)?;
            if get(&txn.open_table(MINDS)?, tenant, &new)?.is_some() {
                return Err(Error::conflict(format!("Mind '{new}' already exists")));
            }
            txn.open_table(MINDS)?.remove((tenant.0, old.as_str()))?;
            mind.name = new;
        }
    }
    apply(txn, tenant, &mut mind, body)?;
    mind.modified_at = crate::time::now_text();
    put(txn, tenant, &mind)?;
    Ok(mind)
}

/// Deletes a mind, freeing its slot.
pub(crate) fn delete(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<()> {
    let key = name.to_ascii_lowercase();
    match txn.open_table(MINDS)?.remove((tenant.0, key.as_str()))? {
        Some(_) => Ok(()),
        None => Err(missing(name)),
    }
}

/// One mind by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Option<Mind>> {
    store::get_named(table, tenant, name)
}

/// A mind that must exist.
pub(crate) fn require(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Mind> {
    get(table, tenant, name)?.ok_or_else(|| missing(name))
}

/// All minds of `tenant`, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
) -> Result<Vec<Mind>> {
    store::list_named(table, tenant)
}

/// How many minds `tenant` has.
pub(crate) fn count(txn: &WriteTransaction, tenant: TenantId) -> Result<u64> {
    Ok(list(&txn.open_table(MINDS)?, tenant)?.len() as u64)
}

/// Fails with Conflict when a mind reads the datasource `name`, which must then stay.
pub(crate) fn check_unused(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<()> {
    let key = name.to_ascii_lowercase();
    let minds = list(&txn.open_table(MINDS)?, tenant)?;
    match minds
        .iter()
        .find(|m| m.datasources.iter().any(|d| d.name == key))
    {
        Some(mind) => Err(Error::conflict(format!(
            "Datasource '{key}' is used by mind '{}'; remove it from the mind first",
            mind.name
        ))),
        None => Ok(()),
    }
}

/// Points the minds that read datasource `old` at its new name `new`.
pub(crate) fn rename_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    old: &str,
    new: &str,
) -> Result<()> {
    let minds = list(&txn.open_table(MINDS)?, tenant)?;
    for mut mind in minds {
        let mut changed = false;
        for ds in mind.datasources.iter_mut().filter(|d| d.name == old) {
            ds.name = new.to_string();
            changed = true;
        }
        if changed {
            put(txn, tenant, &mind)?;
        }
    }
    Ok(())
}

fn put(txn: &WriteTransaction, tenant: TenantId, mind: &Mind) -> Result<()> {
    txn.open_table(MINDS)?.insert(
        (tenant.0, mind.name.as_str()),
        serde_json::to_string(mind)?.as_str(),
    )?;
    Ok(())
}

/// Copies the body's settable fields onto `mind`, checking each.
fn apply(
    txn: &WriteTransaction,
    tenant: TenantId,
    mind: &mut Mind,
    body: &Map<String, Value>,
) -> Result<()> {
    for (key, value) in body {
        match (key.as_str(), value) {
            ("name", _) | (_, Value::Null) => {}
            ("model_name", Value::String(v)) if !v.is_empty() => mind.model_name = v.clone(),
            ("provider", Value::String(v)) if !v.is_empty() => mind.provider = v.clone(),
            ("datasources", Value::Array(list)) => {
                mind.datasources = list
                    .iter()
                    .enumerate()
                    .map(|(i, entry)| read_datasource(txn, tenant, i, entry))
                    .collect::<Result<_>>()?;
            }
            ("parameters", Value::Object(parameters)) => {
                if parameters
                    .get("prompt_template")
                    .is_some_and(|t| !t.is_string() && !t.is_null())
                {
                    return Err(Error::invalid(
                        "'parameters.prompt_template' must be a string",
                    ));
                }
                mind.parameters = parameters.clone();
            }
            ("model_name" | "provider", _) => {
                return Err(Error::invalid(format!(
                    "'{key}' must be a non-empty string"
                )))
            }
            ("datasources", _) => {
                return Err(Error::invalid(
                    "'datasources' must be a list of {\"name\": …, \"tables\": [...] or null}",
                ))
            }
            ("parameters", _) => return Err(Error::invalid("'parameters' must be an object")),
            // Fields of other Minds API versions (knowledge bases) are not ours to keep.
            _ => {}
        }
    }
    Ok(())
}

/// One `{"name", "tables"}` entry: the datasource must exist for `tenant`.
fn read_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    index: usize,
    entry: &Value,
) -> Result<MindDatasource> {
    let (name, tables) = match entry {
        Value::String(name) => (name.as_str(), &Value::Null),
        Value::Object(entry) => match entry.get("name") {
            Some(Value::String(name)) => {
                (name.as_str(), entry.get("tables").unwrap_or(&Value::Null))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "datasources[{index}] needs a 'name' (a string)"
                )))
            }
        },
        _ => {
            return Err(Error::invalid(format!(
                "datasources[{index}] must be {{\"name\": …, \"tables\": […]}}"
            )))
        }
    };
    let name = name.to_ascii_lowercase();
    if datasources::get(&txn.open_table(DATASOURCES)?, tenant, &name)?.is_none() {
        return Err(Error::invalid(format!("Datasource '{name}' not found")));
    }
    let tables = match tables {
        Value::Null => None,
        Value::Array(list) if list.iter().all(Value::is_string) => Some(
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        ),
        _ => {
            return Err(Error::invalid(format!(
                "datasources[{index}].tables must be a list of table names or null"
            )))
        }
    };
    Ok(MindDatasource { name, tables })
}

fn missing(name: &str) -> Error {
    Error::not_found(format!("Mind '{name}' not found"))
}

/// Which OpenAI-style API a question came through, which decides the answer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatApi {
    /// `POST /chat/completions`.
    ChatCompletions,
    /// `POST /responses`.
    Responses,
}

/// A question to a mind, read from an OpenAI-style request body.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The mind asked (the request's `model`).
    pub mind: String,
    /// The conversation, as the agent loop takes it.
    pub(crate) messages: Vec<Value>,
    /// Whether the answer is to be streamed.
    pub stream: bool,
    /// The API it came through.
    pub api: ChatApi,
}

impl ChatRequest {
    /// Reads a chat completions body: `{"model", "messages": [{"role", "content"}], "stream"}`.
    /// Content may be text or a list of `{"type": "text", "text"}` parts; system and developer
    /// messages are put before the next user message, since a mind's instructions are its own.
    pub fn from_chat_completions(body: &[u8]) -> Result<ChatRequest> {
        let body = object(body)?;
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::invalid("'messages' must be a list of messages"))?;
        Ok(ChatRequest {
            mind: model(&body)?,
            messages: conversation(messages)?,
            stream: stream(&body)?,
            api: ChatApi::ChatCompletions,
        })
    }

    /// Reads a Responses body: `{"model", "input", "stream"}`, `input` being text or a list of
    /// messages (`{"role", "content"}` with text or `input_text` parts).
    pub fn from_responses(body: &[u8]) -> Result<ChatRequest> {
        let body = object(body)?;
        let messages = match body.get("input") {
            Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
            Some(Value::Array(items)) => conversation(items)?,
            _ => {
                return Err(Error::invalid(
                    "'input' must be text or a list of {\"role\", \"content\"} messages",
                ))
            }
        };
        Ok(ChatRequest {
            mind: model(&body)?,
            messages,
            stream: stream(&body)?,
            api: ChatApi::Responses,
        })
    }
}

fn object(body: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::invalid("The request body must be a JSON object")),
        Err(e) => Err(Error::invalid(format!(
            "The request body is not valid JSON: {e}"
        ))),
    }
}

fn model(body: &Map<String, Value>) -> Result<String> {
    match body.get("model") {
        Some(Value::String(name)) if !name.is_empty() => Ok(name.clone()),
        _ => Err(Error::invalid("'model' must name a mind")),
    }
}

fn stream(body: &Map<String, Value>) -> Result<bool> {
    match body.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Error::invalid("'stream' must be true or false")),
    }
}

/// OpenAI messages as the agent loop's `[{"role": "user"|"assistant", "content": text}]`.
fn conversation(messages: &[Value]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut instructions = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let content = content_text(message.get("content"))
            .ok_or_else(|| Error::invalid(format!("Message {i} has no text content")))?;
        match role {
            "system" | "developer" => instructions.push(content),
            "user" => {
                let text = if instructions.is_empty() {
                    content
                } else {
                    let mut all = std::mem::take(&mut instructions);
                    all.push(content);
                    all.join("\n\n")
                };
                out.push(json!({"role": "user", "content": text}));
            }
            "assistant" => out.push(json!({"role": "assistant", "content": content})),
            other => {
                return Err(Error::invalid(format!(
                    "Message {i} has role '{other}'; use user, assistant, system or developer"
                )))
            }
        }
    }
    crate::agent_loop::read_messages(&Value::Array(out))
}

/// Text content, or the text parts of a content list joined.
fn content_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// A random id with OpenAI's prefix (`chatcmpl-`, `resp_`, `msg_`).
fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    // Ids only tell answers apart; with no randomness they are still unique enough by time.
    if getrandom::fill(&mut bytes).is_err() {
        bytes[..8].copy_from_slice(&crate::time::now_unix().to_le_bytes());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// The answer to a [`ChatRequest`] in its API's JSON shape.
pub(crate) fn answer_json(api: ChatApi, mind: &str, text: &str) -> Value {
    let created = crate::time::now_unix();
    match api {
        ChatApi::ChatCompletions => json!({
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": created,
            "model": mind,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }),
        ChatApi::Responses => response_object(&new_id("resp_"), mind, created, "completed", text),
    }
}

fn response_object(id: &str, mind: &str, created: u64, status: &str, text: &str) -> Value {
    let output = if status == "completed" {
        json!([{
            "type": "message",
            "id": format!("msg_{}", id.trim_start_matches("resp_")),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }])
    } else {
        json!([])
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": mind,
        "output": output,
        "parallel_tool_calls": false,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
    })
}

/// A streamed answer as server-sent event frames: chat completion chunks ending with
/// `data: [DONE]`, or Responses events ending with `response.completed` (or `error`).
pub struct MindStream {
    events: AgentStream,
    api: ChatApi,
    mind: String,
    id: String,
    created: u64,
    started: bool,
    text: String,
    sequence: u64,
    finished: bool,
}

impl MindStream {
    pub(crate) fn new(events: AgentStream, api: ChatApi, mind: &str) -> MindStream {
        let id = match api {
            ChatApi::ChatCompletions => new_id("chatcmpl-"),
            ChatApi::Responses => new_id("resp_"),
        };
        MindStream {
            events,
            api,
            mind: mind.to_string(),
            id,
            created: crate::time::now_unix(),
            started: false,
            text: String::new(),
            sequence: 0,
            finished: false,
        }
    }

    /// The next frames to send; `None` after the last.
    pub fn next_frames(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        Box::pin(async move {
            if self.finished {
                return None;
            }
            let mut out = Vec::new();
            if !self.started {
                self.started = true;
                self.opening(&mut out);
            }
            loop {
                match self.events.next_event().await {
                    Some(AgentEvent::Text(piece)) => {
                        self.piece(&mut out, &piece);
                        return Some(out);
                    }
                    Some(AgentEvent::Error(message)) => {
                        self.failure(&mut out, &message);
                        self.finished = true;
                        return Some(out);
                    }
                    Some(AgentEvent::End) | None => {
                        self.closing(&mut out);
                        self.finished = true;
                        return Some(out);
                    }
                    // Progress (queries run, their results) has no place in either API.
                    Some(_) => continue,
                }
            }
        })
    }

    /// The id of the one output message (as the non-streamed response names it).
    fn item_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.mind,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    fn event(&mut self, out: &mut Vec<u8>, kind: &str, mut body: Value) {
        body["type"] = kind.into();
        body["sequence_number"] = self.sequence.into();
        self.sequence += 1;
        out.extend_from_slice(format!("event: {kind}\ndata: {body}\n\n").as_bytes());
    }

    fn opening(&mut self, out: &mut Vec<u8>) {
        match self.api {
            ChatApi::ChatCompletions => {
                let chunk = self.chunk(json!({"role": "assistant", "content": ""}), None);
                data_frame(out, &chunk);
            }
            ChatApi::Responses => {
                let response =
                    response_object(&self.id, &self.mind, self.created, "in_progress", "");
                self.event(out, "response.created", json!({ "response": response }));
                // The item and its text part open before any delta: the openai client's
                // stream helper refuses deltas for an item it was not told about.
                let item = self.item_id();
                self.event(
                    out,
                    "response.output_item.added",
                    json!({"output_index": 0, "item": {"type": "message", "id": item,
                        "status": "in_progress", "role": "assistant", "content": []}}),
                );
                self.event(
                    out,
                    "response.content_part.added",
                    json!({"item_id": item, "output_index": 0, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
            }
        }
    }

    fn piece(&mut self, out: &mut Vec<u8>, piece: &str) {
        self.text.push_str(piece);
        match self.api {
            ChatApi::ChatCompletions => {
                let chunk = self.chunk(json!({ "content": piece }), None);
                data_frame(out, &chunk);
            }
            ChatApi::Responses => {
                let item = self.item_id();
                self.event(
                    out,
                    "response.output_text.delta",
                    json!({"item_id": item, "output_index": 0, "content_index": 0, "delta": piece}),
                );
            }
        }
    }

    fn closing(&mut self, out: &mut Vec<u8>) {
        match self.api {
            ChatApi::ChatCompletions => {
                let chunk = self.chunk(json!({}), Some("stop"));
                data_frame(out, &chunk);
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            ChatApi::Responses => {
                let item = self.item_id();
                let text = self.text.clone();
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": item, "output_index": 0, "content_index": 0, "text": text}),
                );
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": item, "output_index": 0, "content_index": 0, "part": part}),
                );
                self.event(
                    out,
                    "response.output_item.done",
                    json!({"output_index": 0, "item": {"type": "message", "id": item,
                        "status": "completed", "role": "assistant", "content": [part]}}),
                );
                let response =
                    response_object(&self.id, &self.mind, self.created, "completed", &text);
                self.event(out, "response.completed", json!({ "response": response }));
            }
        }
    }

    fn failure(&mut self, out: &mut Vec<u8>, message: &str) {
        match self.api {
            ChatApi::ChatCompletions => {
                data_frame(
                    out,
                    &json!({"error": {"message": message, "type": "server_error"}}),
                );
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            ChatApi::Responses => {
                self.event(
                    out,
                    "error",
                    json!({"code": "server_error", "message": message, "param": null}),
                );
            }
        }
    }
}

fn data_frame(out: &mut Vec<u8>, value: &Value) {
    out.extend_from_slice(format!("data: {value}\n\n").as_bytes());
}
