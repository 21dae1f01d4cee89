//! Asking a mind through the OpenAI-style APIs minds-sdk and the `openai` client use (chat
//! completions, responses; `docs/mindsdb-wire.md` §6): reading the request into a conversation
//! for the agent loop, and shaping the answer, whole or streamed, so every front speaks the same
//! wire.

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};

use crate::ai::agents::answer::{AgentEvent, AgentStream};
use crate::error::{Error, Result};
use crate::wire::Fields;

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
    Ok(Fields::request_body(body)?.into_map())
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
    crate::ai::agents::answer::read_messages(&Value::Array(out))
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

/// A mind's answer to a [`ChatRequest`]: it serializes in the shape of the API the question
/// came through (a `chat.completion` object, or a `response` object).
#[derive(Debug, Clone, PartialEq)]
pub struct MindAnswer {
    /// The API whose shape it takes.
    pub api: ChatApi,
    /// The mind that answered (OpenAI's `model`).
    pub mind: String,
    /// The answer's text.
    pub content: String,
    /// OpenAI's id of the answer (`chatcmpl-…` or `resp_…`).
    pub id: String,
    /// When it was answered, Unix seconds.
    pub created: u64,
}

impl MindAnswer {
    /// `content` from `mind`, answered now, with a new id.
    pub(crate) fn new(api: ChatApi, mind: &str, content: String) -> MindAnswer {
        let prefix = match api {
            ChatApi::ChatCompletions => "chatcmpl-",
            ChatApi::Responses => "resp_",
        };
        MindAnswer {
            api,
            mind: mind.to_string(),
            content,
            id: new_id(prefix),
            created: crate::time::now_unix(),
        }
    }

    /// The answer in its API's JSON shape.
    pub fn to_wire_json(&self) -> Value {
        answer_json(self.api, &self.id, &self.mind, self.created, &self.content)
    }
}

impl serde::Serialize for MindAnswer {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.to_wire_json().serialize(serializer)
    }
}

/// An answer in its API's JSON shape.
fn answer_json(api: ChatApi, id: &str, mind: &str, created: u64, text: &str) -> Value {
    match api {
        ChatApi::ChatCompletions => json!({
            "id": id,
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
        ChatApi::Responses => response_object(id, mind, created, "completed", text),
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
