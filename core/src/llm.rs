//! OpenAI's chat completions wire protocol, with tool calls and streaming, over reqwest: what
//! OpenAI, Ollama, vLLM and llama.cpp servers all speak (DESIGN §6). Every call has a deadline,
//! and every failure becomes an [`ErrorKind::Upstream`] error carrying what the provider said.
//! Nothing here logs: requests carry API keys.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::config::LlmConfig;
use crate::error::{Error, ErrorKind, Result};

/// Where and how to call one model.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Base URL up to and including `/v1`; `/chat/completions` is appended.
    pub(crate) base_url: String,
    /// Sent as `Authorization: Bearer …` when not empty.
    pub(crate) api_key: String,
    pub(crate) model: String,
    /// Deadline of one call, from connecting to the last byte.
    pub(crate) timeout: Duration,
    /// Sampling settings passed through (`temperature`, `max_tokens`, `top_p`).
    pub(crate) options: Map<String, Value>,
}

/// One tool call the model asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The arguments as the model wrote them: JSON text, not yet checked.
    pub(crate) arguments: String,
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reply {
    /// Its text (may be empty when it only calls tools).
    pub(crate) content: String,
    pub(crate) tool_calls: Vec<ToolCall>,
}

impl Reply {
    /// The assistant message to send back with the tool results.
    pub(crate) fn to_message(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        message
    }
}

/// What every LLM call of one engine shares: the connection pool and the configured default
/// model. Carried in DataFusion's session config so that operators predicting with an LLM
/// model reach it.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pub(crate) client: reqwest::Client,
    pub(crate) default: LlmConfig,
}

/// The endpoint `settings` name (`model_name`, `base_url`, `api_key`, `temperature`,
/// `max_tokens`, `top_p`), the configured default for the rest. The configured API key goes
/// only to the configured endpoint, never to one the settings name.
pub(crate) fn endpoint(settings: &Map<String, Value>, default: &LlmConfig) -> Endpoint {
    let text = |key: &str| {
        settings
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let base_url = text("base_url").unwrap_or(&default.base_url).to_string();
    let api_key = match text("api_key") {
        Some(key) => key.to_string(),
        None if base_url == default.base_url => default.api_key.clone(),
        None => String::new(),
    };
    let options: Map<String, Value> = ["temperature", "max_tokens", "top_p"]
        .iter()
        .filter_map(|k| settings.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    Endpoint {
        base_url,
        api_key,
        model: text("model_name")
            .unwrap_or(&default.model_name)
            .to_string(),
        timeout: Duration::from_secs(default.timeout_secs.max(1)),
        options,
    }
}

/// Checks that the base URL in the setting `name` is http(s) with a host, so a typo fails
/// when the agent or model is saved rather than when it is first asked.
pub(crate) fn check_base_url(name: &str, url: &str) -> Result<()> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
            Ok(())
        }
        _ => Err(Error::invalid(format!(
            "'{name}' must be an http or https URL with a host, like http://127.0.0.1:11434/v1; got '{url}'"
        ))),
    }
}

/// A connection pool shared by every call of one engine.
pub(crate) fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        // A provider never needs to redirect an API call; following one could send the key elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| Error::internal(format!("cannot start the HTTP client for LLM calls: {e}")))
}

/// Asks the model once. With `on_text`, the answer is streamed and each piece of text is
/// handed over as it arrives; tool calls are assembled from their streamed pieces either way.
pub(crate) async fn chat(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    messages: &[Value],
    tools: &[Value],
    on_text: Option<&mut (dyn FnMut(&str) + Send)>,
) -> Result<Reply> {
    let stream = on_text.is_some();
    let mut body = json!({"model": endpoint.model, "messages": messages, "stream": stream});
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools.to_vec());
    }
    for (key, value) in &endpoint.options {
        body[key] = value.clone();
    }
    let url = format!(
        "{}/chat/completions",
        endpoint.base_url.trim_end_matches('/')
    );
    let call = async {
        let mut request = client.post(&url).json(&body);
        if !endpoint.api_key.is_empty() {
            request = request.bearer_auth(&endpoint.api_key);
        }
        let response = request.send().await.map_err(|e| unreachable(&url, &e))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(upstream(format!(
                "The model provider at {url} answered {status}: {}",
                provider_message(&text)
            )));
        }
        match on_text {
            Some(on_text) => read_stream(response, &url, on_text).await,
            None => {
                let text = response.text().await.map_err(|e| unreachable(&url, &e))?;
                parse_reply(&text, &url)
            }
        }
    };
    match tokio::time::timeout(endpoint.timeout, call).await {
        Ok(reply) => reply,
        Err(_) => Err(upstream(format!(
            "The model provider at {url} did not answer within {} s",
            endpoint.timeout.as_secs_f64()
        ))),
    }
}

fn upstream(message: String) -> Error {
    Error::new(ErrorKind::Upstream, message)
}

fn unreachable(url: &str, error: &reqwest::Error) -> Error {
    // reqwest's own text only says "error sending request"; the innermost two causes say
    // what happened ("tcp connect error: Connection refused").
    let mut causes = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let detail = causes[causes.len().saturating_sub(2)..].join(": ");
    upstream(format!(
        "The model provider at {url} cannot be reached: {detail}"
    ))
}

/// The provider's own words from an error body: OpenAI's `{"error": {"message": …}}`, or the
/// start of whatever else it sent.
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("detail"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    match message {
        Some(message) => message.to_string(),
        None => body.chars().take(300).collect(),
    }
}

fn parse_reply(text: &str, url: &str) -> Result<Reply> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        upstream(format!(
            "The model provider at {url} sent a reply that is not JSON: {e}"
        ))
    })?;
    let message = value.pointer("/choices/0/message").ok_or_else(|| {
        upstream(format!(
            "The model provider at {url} sent a reply without choices[0].message"
        ))
    })?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: text_at(c, "/id"),
                    name: text_at(c, "/function/name"),
                    arguments: text_at(c, "/function/arguments"),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply {
        content,
        tool_calls,
    })
}

fn text_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Reads a `text/event-stream` of `chat.completion.chunk`s up to `data: [DONE]` (or the end).
async fn read_stream(
    response: reqwest::Response,
    url: &str,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<Reply> {
    let mut reply = Reply::default();
    let mut pending = Vec::new();
    let mut bytes = response.bytes_stream();
    while let Some(piece) = bytes.next().await {
        pending.extend_from_slice(&piece.map_err(|e| unreachable(url, &e))?);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(reply);
            }
            let chunk: Value = serde_json::from_str(data).map_err(|e| {
                upstream(format!(
                    "The model provider at {url} streamed a chunk that is not JSON: {e}"
                ))
            })?;
            if let Some(message) = chunk.pointer("/error/message").and_then(Value::as_str) {
                return Err(upstream(format!(
                    "The model provider at {url} failed while streaming: {message}"
                )));
            }
            let Some(delta) = chunk.pointer("/choices/0/delta") else {
                continue;
            };
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                if !text.is_empty() {
                    on_text(text);
                    reply.content.push_str(text);
                }
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                merge_tool_delta(&mut reply.tool_calls, call);
            }
        }
    }
    Ok(reply)
}

/// Tool calls stream in pieces keyed by `index`: the first names the call, later ones add to
/// its arguments.
fn merge_tool_delta(calls: &mut Vec<ToolCall>, delta: &Value) {
    let index = delta
        .get("index")
        .and_then(Value::as_u64)
        .map_or(calls.len().saturating_sub(1), |i| i as usize);
    while calls.len() <= index {
        calls.push(ToolCall::default());
    }
    let call = &mut calls[index];
    if let Some(id) = delta.get("id").and_then(Value::as_str) {
        call.id.push_str(id);
    }
    if let Some(name) = delta.pointer("/function/name").and_then(Value::as_str) {
        call.name.push_str(name);
    }
    if let Some(arguments) = delta.pointer("/function/arguments").and_then(Value::as_str) {
        call.arguments.push_str(arguments);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_tool_calls_are_assembled_by_index() {
        let mut calls = Vec::new();
        merge_tool_delta(
            &mut calls,
            &json!({"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "sql_query", "arguments": ""}}),
        );
        merge_tool_delta(
            &mut calls,
            &json!({"index": 0, "function": {"arguments": "{\"query\":"}}),
        );
        merge_tool_delta(
            &mut calls,
            &json!({"index": 0, "function": {"arguments": " \"SELECT 1\"}"}}),
        );
        assert_eq!(
            calls,
            [ToolCall {
                id: "call_1".into(),
                name: "sql_query".into(),
                arguments: "{\"query\": \"SELECT 1\"}".into()
            }]
        );
    }

    #[test]
    fn provider_errors_keep_the_providers_words() {
        assert_eq!(
            provider_message(
                r#"{"error": {"message": "Incorrect API key provided", "type": "x"}}"#
            ),
            "Incorrect API key provided"
        );
        assert_eq!(provider_message("plain failure"), "plain failure");
    }

    #[test]
    fn base_urls_must_be_http_with_a_host() {
        assert!(check_base_url("base_url", "http://127.0.0.1:8080/v1").is_ok());
        assert!(check_base_url("base_url", "https://api.openai.com/v1").is_ok());
        for bad in ["ftp://x/v1", "127.0.0.1:8080", "http://", ""] {
            assert!(check_base_url("base_url", bad).is_err(), "{bad}");
        }
    }
}
