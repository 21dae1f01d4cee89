//! OpenAI's chat completions wire protocol, with tool calls and streaming, over reqwest: what
//! OpenAI, Ollama, vLLM and llama.cpp servers all speak. Every call has a deadline
//! and goes through the engine's egress policy; a reply is read up to `llm.max_reply_kb` and
//! may make at most `llm.max_tool_calls` tool calls, so a hostile endpoint can neither exhaust
//! memory nor stall the caller. Every failure becomes an [`ErrorKind::Upstream`] error with a
//! short excerpt of what the provider said (or [`ErrorKind::Forbidden`] when the egress policy
//! refused the endpoint). Nothing here logs: requests carry API keys.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::config::LlmConfig;
use crate::egress::{self, HttpClient};
use crate::error::{Error, ErrorKind, Result};

/// Bytes of a provider's error answer read at most (its message is shown shortened).
const ERROR_BODY_CAP: usize = 16 * 1024;

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
    /// Most bytes of a reply read.
    pub(crate) max_reply_bytes: usize,
    /// Most tool calls one reply may make.
    pub(crate) max_tool_calls: usize,
    /// How messages name the endpoint: its URL when the caller chose it, otherwise "the
    /// configured model provider" (the operator's endpoint is not shown to tenants).
    pub(crate) shown: String,
    /// The setting that chose its URL, as the caller's refusal when it was saved names it
    /// (`model.base_url`): a refusal by the egress policy at a call names it the same way, so
    /// that a host refused when saved (an address) and one refused at the call (a name) read
    /// alike. `None` for the configured endpoint and for callers that name no setting.
    pub(crate) setting: Option<String>,
    /// Whether a caller's setting chose its URL (it is not the configured one).
    chosen: bool,
}

impl Endpoint {
    /// The endpoint with refusals naming `key` (see [`Endpoint::setting`]) when a caller's
    /// setting chose its URL; the configured endpoint is left as it is.
    pub(crate) fn named_by(mut self, key: &str) -> Endpoint {
        if self.chosen {
            self.setting = Some(key.to_string());
        }
        self
    }
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

/// What every LLM call of one engine shares: the connection pool (under the egress policy) and
/// the configured default model. Carried in DataFusion's session config so that operators
/// predicting with an LLM model reach it.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    pub(crate) client: HttpClient,
    /// The default LLM and embedding model, as they stand (they change at run time).
    pub(crate) settings: std::sync::Arc<super::settings::Settings>,
    /// Counts LLM models' calls against their users' plans before they are made.
    pub(crate) meter: crate::catalog::quotas::ModelCalls,
    /// How knowledge bases index and search.
    pub(crate) knowledge_bases: crate::config::KnowledgeBasesConfig,
    /// Embedding models run in process, shared by the engine's connectors.
    pub(crate) sentence_models: std::sync::Arc<super::sentence_models::SentenceModels>,
    /// How datasources are reached: knowledge bases kept in PostgreSQL connect through it.
    pub(crate) net: super::connectors::Net,
}

impl Connector {
    /// The connector of an engine with `config`, calling out through `client`.
    pub(crate) fn new(
        client: HttpClient,
        config: &crate::config::Config,
        store: &std::sync::Arc<crate::store::Store>,
        sentence_models: &std::sync::Arc<super::sentence_models::SentenceModels>,
        settings: &std::sync::Arc<super::settings::Settings>,
        net: &super::connectors::Net,
    ) -> Connector {
        Connector {
            client,
            settings: std::sync::Arc::clone(settings),
            meter: crate::catalog::quotas::ModelCalls::new(store, &config.hosted),
            knowledge_bases: config.knowledge_bases.clone(),
            sentence_models: std::sync::Arc::clone(sentence_models),
            net: net.clone(),
        }
    }
}

impl Connector {
    /// The default LLM now.
    pub(crate) fn default_llm(&self) -> LlmConfig {
        self.settings.llm()
    }

    /// The default embedding model now (knowledge bases).
    pub(crate) fn embedding(&self) -> crate::config::EmbeddingConfig {
        self.settings.embedding()
    }
}

/// Where streamed text goes, piece by piece; the call waits for each piece to be taken, so a
/// slow reader slows the provider's stream instead of piling it up in memory.
pub(crate) type TextSink<'a> =
    &'a mut (dyn FnMut(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send);

/// The endpoint `settings` name (`model_name`, `base_url`, `api_key`, `temperature`,
/// `max_tokens`, `top_p`), the configured default for the rest. The configured API key goes
/// only to the configured endpoint, never to one the settings name.
pub(crate) fn endpoint(settings: &Map<String, Value>, default: &LlmConfig) -> Endpoint {
    let (base_url, api_key, shown) = target(
        settings,
        &default.base_url,
        &default.api_key,
        "model provider",
    );
    let chosen = base_url != default.base_url;
    let text = |key: &str| setting_text(settings, key);
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
        max_reply_bytes: usize::try_from(default.max_reply_kb.saturating_mul(1024))
            .unwrap_or(usize::MAX),
        max_tool_calls: default.max_tool_calls.max(1),
        shown,
        setting: None,
        chosen,
    }
}

/// A non-empty text setting.
pub(crate) fn setting_text<'a>(settings: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    settings
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Where a call goes, as `settings` (`base_url`, `api_key`) and the configured endpoint
/// choose: (base URL, API key, how messages name it). The configured key goes only to the
/// configured URL, never to one the settings name; the configured URL is not shown to callers
/// ("the configured {kind}").
pub(crate) fn target(
    settings: &Map<String, Value>,
    configured_url: &str,
    configured_key: &str,
    kind: &str,
) -> (String, String, String) {
    let base_url = setting_text(settings, "base_url")
        .unwrap_or(configured_url)
        .to_string();
    let configured = base_url == configured_url;
    let api_key = match setting_text(settings, "api_key") {
        Some(key) => key.to_string(),
        None if configured => configured_key.to_string(),
        None => String::new(),
    };
    let shown = if configured {
        format!("the configured {kind}")
    } else {
        format!("the {kind} at {}", base_url.trim_end_matches('/'))
    };
    (base_url, api_key, shown)
}

/// Asks the model once. With `on_text`, the answer is streamed and each piece of text is
/// handed over as it arrives; tool calls are assembled from their streamed pieces either way.
/// `made` is counted up as the request goes out (and down again if it never reached the
/// provider: refused by the egress policy, or no connection): from then on the call has
/// cost something, whatever comes of it (an answer, an error, a timeout, or nobody waiting
/// for it any more).
pub(crate) async fn chat(
    client: &HttpClient,
    endpoint: &Endpoint,
    messages: &[Value],
    tools: &[Value],
    on_text: Option<TextSink<'_>>,
    made: Option<&std::sync::atomic::AtomicU64>,
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
    let shown = &endpoint.shown;
    let call = async {
        use std::sync::atomic::Ordering;
        if let Some(made) = made {
            made.fetch_add(1, Ordering::SeqCst);
        }
        let response = match send_reaching(client, &url, endpoint, &body).await {
            Ok(response) => response,
            Err((e, reached)) => {
                if let (Some(made), false) = (made, reached) {
                    made.fetch_sub(1, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        let response = successful(response, shown).await?;
        match on_text {
            Some(on_text) => read_stream(response, endpoint, on_text).await,
            None => {
                let (bytes, complete) =
                    read_capped(response, endpoint.max_reply_bytes, shown).await?;
                if !complete {
                    return Err(too_large(endpoint));
                }
                parse_reply(&bytes, endpoint)
            }
        }
    };
    match tokio::time::timeout(endpoint.timeout, call).await {
        Ok(reply) => reply,
        Err(_) => Err(upstream(format!(
            "{} did not answer within {} s",
            capitalized(shown),
            endpoint.timeout.as_secs_f64()
        ))),
    }
}

/// [`send`] to `endpoint`, telling with a failure whether the request may have reached the
/// provider (only a refusal by the egress policy or a failed connection says it did not).
/// A refusal names the endpoint's setting when it has one (see [`Endpoint::setting`]).
async fn send_reaching(
    client: &HttpClient,
    url: &str,
    endpoint: &Endpoint,
    body: &Value,
) -> std::result::Result<reqwest::Response, (Error, bool)> {
    let shown = &endpoint.shown;
    let refused_call = |refused: &str| match &endpoint.setting {
        Some(key) => Error::new(ErrorKind::Forbidden, format!("'{key}' was {refused}")),
        None => Error::new(
            ErrorKind::Forbidden,
            format!("Calling {shown} was {refused}"),
        ),
    };
    let mut request = client
        .post(url)
        .map_err(|refused| (refused_call(&refused.to_string()), false))?
        .json(body);
    if !endpoint.api_key.is_empty() {
        request = request.bearer_auth(&endpoint.api_key);
    }
    request.send().await.map_err(|e| {
        let reason = egress::http_reason(&e);
        let error = if endpoint.setting.is_some() && is_refusal(&reason) {
            refused_call(&reason)
        } else {
            unreachable(shown, &e)
        };
        (error, !e.is_connect())
    })
}

/// POSTs `body` as JSON to `url` under the egress policy, with the bearer key when there is
/// one; `shown` names the endpoint in errors.
pub(crate) async fn send(
    client: &HttpClient,
    url: &str,
    api_key: &str,
    body: &Value,
    shown: &str,
) -> Result<reqwest::Response> {
    let mut request = client.post(url).map_err(|refused| {
        Error::new(
            ErrorKind::Forbidden,
            format!("Calling {shown} was {refused}"),
        )
    })?;
    request = request.json(body);
    if !api_key.is_empty() {
        request = request.bearer_auth(api_key);
    }
    request.send().await.map_err(|e| unreachable(shown, &e))
}

/// The response if the provider answered success; otherwise an error with its status and the
/// provider's own words.
pub(crate) async fn successful(
    response: reqwest::Response,
    shown: &str,
) -> Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = read_capped(response, ERROR_BODY_CAP, shown)
        .await
        .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    Err(upstream(format!(
        "{} answered {status}: {}",
        capitalized(shown),
        provider_message(&text)
    )))
}

pub(crate) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub(crate) fn upstream(message: String) -> Error {
    Error::new(ErrorKind::Upstream, message)
}

fn too_large(endpoint: &Endpoint) -> Error {
    upstream(format!(
        "{} sent a reply larger than {} KiB (llm.max_reply_kb); it was not read",
        capitalized(&endpoint.shown),
        endpoint.max_reply_bytes / 1024
    ))
}

fn unreachable(shown: &str, error: &reqwest::Error) -> Error {
    let reason = egress::http_reason(error);
    let kind = if is_refusal(&reason) {
        ErrorKind::Forbidden
    } else {
        ErrorKind::Upstream
    };
    Error::new(
        kind,
        format!("{} cannot be reached: {reason}", capitalized(shown)),
    )
}

/// Whether a reason from [`egress::http_reason`] is the egress policy's refusal.
fn is_refusal(reason: &str) -> bool {
    reason.starts_with("refused by the egress policy")
}

/// Reads at most `cap` bytes of a body; the flag says whether that was all of it.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    shown: &str,
) -> Result<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    while let Some(piece) = response.chunk().await.map_err(|e| unreachable(shown, &e))? {
        if out.len() + piece.len() > cap {
            let room = cap - out.len();
            out.extend_from_slice(&piece[..room]);
            return Ok((out, false));
        }
        out.extend_from_slice(&piece);
    }
    Ok((out, true))
}

/// The provider's own words from an error body, shortened: OpenAI's `{"error": {"message":
/// …}}`, or the start of whatever else it sent.
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("detail"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    egress::excerpt(message.unwrap_or(body), egress::EXCERPT_CHARS)
}

fn parse_reply(bytes: &[u8], endpoint: &Endpoint) -> Result<Reply> {
    let shown = capitalized(&endpoint.shown);
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| upstream(format!("{shown} sent a reply that is not JSON: {e}")))?;
    let message = value
        .pointer("/choices/0/message")
        .ok_or_else(|| upstream(format!("{shown} sent a reply without choices[0].message")))?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if calls.len() > endpoint.max_tool_calls {
        return Err(upstream(format!(
            "{} sent {} tool calls in one reply; a reply may make at most {} (llm.max_tool_calls)",
            capitalized(&endpoint.shown),
            calls.len(),
            endpoint.max_tool_calls
        )));
    }
    let tool_calls = calls
        .iter()
        .map(|c| ToolCall {
            id: text_at(c, "/id"),
            name: text_at(c, "/function/name"),
            arguments: text_at(c, "/function/arguments"),
        })
        .collect();
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

/// Reads a `text/event-stream` of `chat.completion.chunk`s up to `data: [DONE]` (or the end),
/// at most `max_reply_bytes` of it.
async fn read_stream(
    mut response: reqwest::Response,
    endpoint: &Endpoint,
    on_text: TextSink<'_>,
) -> Result<Reply> {
    let shown = capitalized(&endpoint.shown);
    let mut reply = Reply::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut read = 0usize;
    while let Some(piece) = response
        .chunk()
        .await
        .map_err(|e| unreachable(&endpoint.shown, &e))?
    {
        read += piece.len();
        if read > endpoint.max_reply_bytes {
            return Err(too_large(endpoint));
        }
        pending.extend_from_slice(&piece);
        // Lines are taken from a moving start and the rest kept once per piece, so a piece of
        // many short lines costs its length, not its length times its lines.
        let mut start = 0;
        while let Some(offset) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&pending[start..start + offset]).into_owned();
            start += offset + 1;
            let Some(data) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                return Ok(reply);
            }
            let chunk: Value = serde_json::from_str(data)
                .map_err(|e| upstream(format!("{shown} streamed a chunk that is not JSON: {e}")))?;
            if let Some(message) = chunk.pointer("/error/message").and_then(Value::as_str) {
                return Err(upstream(format!(
                    "{shown} failed while streaming: {}",
                    egress::excerpt(message, egress::EXCERPT_CHARS)
                )));
            }
            let Some(delta) = chunk.pointer("/choices/0/delta") else {
                continue;
            };
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                if !text.is_empty() {
                    reply.content.push_str(text);
                    on_text(text.to_string()).await;
                }
            }
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                merge_tool_delta(&mut reply.tool_calls, call, endpoint)?;
            }
        }
        pending.drain(..start);
    }
    Ok(reply)
}

/// Tool calls stream in pieces keyed by `index`: the first names the call, later ones add to
/// its arguments. An index at or past the cap ends the reply (rather than growing a list to it).
fn merge_tool_delta(calls: &mut Vec<ToolCall>, delta: &Value, endpoint: &Endpoint) -> Result<()> {
    let index = match delta.get("index") {
        None => calls.len().saturating_sub(1) as u64,
        Some(index) => index.as_u64().ok_or_else(|| {
            upstream(format!(
                "{} streamed a tool call whose index is not a whole number: {}",
                capitalized(&endpoint.shown),
                egress::excerpt(&index.to_string(), 40)
            ))
        })?,
    };
    if index >= endpoint.max_tool_calls as u64 {
        return Err(upstream(format!(
            "{} streamed a tool call with index {index}; a reply may make at most {} (llm.max_tool_calls, indexes from 0)",
            capitalized(&endpoint.shown),
            endpoint.max_tool_calls
        )));
    }
    let index = index as usize;
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured() -> Endpoint {
        endpoint(&Map::new(), &LlmConfig::default())
    }

    #[test]
    fn streamed_tool_calls_are_assembled_by_index() {
        let mut calls = Vec::new();
        let endpoint = configured();
        for delta in [
            json!({"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "sql_query", "arguments": ""}}),
            json!({"index": 0, "function": {"arguments": "{\"query\":"}}),
            json!({"index": 0, "function": {"arguments": " \"SELECT 1\"}"}}),
        ] {
            merge_tool_delta(&mut calls, &delta, &endpoint).unwrap();
        }
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
    fn tool_call_indexes_and_counts_are_capped() {
        let endpoint = configured();
        let mut calls = Vec::new();
        let huge = merge_tool_delta(
            &mut calls,
            &json!({"index": 4_000_000_000_000u64}),
            &endpoint,
        )
        .unwrap_err();
        assert!(huge.message().contains("llm.max_tool_calls"), "{huge}");
        assert!(calls.is_empty(), "nothing was allocated for it");
        let last = endpoint.max_tool_calls as u64 - 1;
        merge_tool_delta(&mut calls, &json!({"index": last}), &endpoint).unwrap();
        assert_eq!(calls.len(), endpoint.max_tool_calls);
        assert!(merge_tool_delta(&mut calls, &json!({"index": -1}), &endpoint).is_err());
        let many: Vec<Value> = (0..=endpoint.max_tool_calls)
            .map(|i| json!({"id": format!("c{i}"), "function": {"name": "sql_query", "arguments": "{}"}}))
            .collect();
        let body = json!({"choices": [{"message": {"content": null, "tool_calls": many}}]});
        let err = parse_reply(body.to_string().as_bytes(), &endpoint).unwrap_err();
        assert!(err.message().contains("at most 16"), "{err}");
    }

    #[test]
    fn the_configured_endpoint_is_not_named_to_callers() {
        assert_eq!(configured().shown, "the configured model provider");
        let mut settings = Map::new();
        settings.insert("base_url".into(), json!("http://llm.example/v1/"));
        assert_eq!(
            endpoint(&settings, &LlmConfig::default()).shown,
            "the model provider at http://llm.example/v1"
        );
    }

    #[test]
    fn only_a_url_a_setting_chose_is_named_by_that_setting() {
        assert_eq!(configured().named_by("model.base_url").setting, None);
        let mut settings = Map::new();
        settings.insert("base_url".into(), json!("http://llm.example/v1"));
        let chosen = endpoint(&settings, &LlmConfig::default()).named_by("model.base_url");
        assert_eq!(chosen.setting.as_deref(), Some("model.base_url"));
        assert_eq!(endpoint(&settings, &LlmConfig::default()).setting, None);
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
        let long = provider_message(&format!("<html>{}</html>", "x".repeat(10_000)));
        assert!(long.chars().count() <= egress::EXCERPT_CHARS + 1, "{long}");
    }
}
