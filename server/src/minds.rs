//! The hosted edition's Minds API (`docs/mindsdb-wire.md` §6) under the configured prefix (default
//! `/api/v1`): minds, datasources, `chat/completions` and `responses` (OpenAI's shapes, plain
//! or streamed), and `/limits/`. Each route reads its body, calls the engine, and answers with
//! the Minds API's codes: 201 created, 204 deleted, 422 for a body the engine refused, 429 over
//! quota with `Retry-After` where a window resets.

use std::future::Future;
use std::pin::Pin;

use mindlite::{ChatRequest, Engine, Error, ErrorKind, MindStream};
use serde_json::Value;

use crate::http::{decode, Body, Chunks, Request, Response};
use crate::reply::{json_response, status_of, Problem, Reply};

/// A route of the Minds API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MindsRoute<'a> {
    /// `/minds`
    Minds,
    /// `/minds/{name}`
    Mind(&'a str),
    /// `/datasources`
    Datasources,
    /// `/datasources/{name}`
    Datasource(&'a str),
    /// `/chat/completions`
    ChatCompletions,
    /// `/responses`
    Responses,
    /// `/limits` (also at `/limits/` and `/api/limits/`, where MindsDB serves it)
    Limits,
}

impl<'a> MindsRoute<'a> {
    /// The route `path` names under `prefix`; with or without a trailing slash.
    pub fn find(path: &'a str, prefix: &str) -> Option<MindsRoute<'a>> {
        let path = path.strip_suffix('/').unwrap_or(path);
        if matches!(path, "/limits" | "/api/limits") {
            return Some(MindsRoute::Limits);
        }
        let rest = path.strip_prefix(prefix.trim_end_matches('/'))?;
        let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
        if !rest.starts_with('/') || parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(match parts.as_slice() {
            ["minds"] => MindsRoute::Minds,
            ["minds", name] => MindsRoute::Mind(name),
            ["datasources"] => MindsRoute::Datasources,
            ["datasources", name] => MindsRoute::Datasource(name),
            ["chat", "completions"] => MindsRoute::ChatCompletions,
            ["responses"] => MindsRoute::Responses,
            ["limits"] => MindsRoute::Limits,
            _ => return None,
        })
    }

    /// The methods the route takes.
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            MindsRoute::Minds | MindsRoute::Datasources => &["GET", "POST"],
            MindsRoute::Mind(_) | MindsRoute::Datasource(_) => &["GET", "PUT", "DELETE"],
            MindsRoute::ChatCompletions | MindsRoute::Responses => &["POST"],
            MindsRoute::Limits => &["GET"],
        }
    }
}

/// Answers one Minds API request, acting as the caller's tenant.
pub async fn handle(engine: &Engine, request: &Request, route: MindsRoute<'_>) -> Reply {
    answer(engine, request, route).await.map_err(minds_error)
}

async fn answer(
    engine: &Engine,
    request: &Request,
    route: MindsRoute<'_>,
) -> mindlite::Result<Response> {
    let method = request.method.as_str();
    Ok(match (route, method) {
        (MindsRoute::Limits, _) => json_response(200, &engine.limits()?),
        (MindsRoute::Minds, "GET") => {
            let minds: Vec<Value> = engine
                .list_minds()?
                .iter()
                .map(|m| m.to_wire_json())
                .collect();
            json_response(200, &minds)
        }
        (MindsRoute::Minds, _) => {
            let mind = engine.create_mind(body(request)?).await?;
            json_response(201, &mind.to_wire_json())
        }
        (MindsRoute::Mind(name), "GET") => {
            json_response(200, &engine.get_mind(&decode(name)?)?.to_wire_json())
        }
        (MindsRoute::Mind(name), "PUT") => {
            let mind = engine.update_mind(&decode(name)?, body(request)?).await?;
            json_response(200, &mind.to_wire_json())
        }
        (MindsRoute::Mind(name), _) => {
            engine.delete_mind(&decode(name)?).await?;
            Response::no_content()
        }
        (MindsRoute::Datasources, "GET") => json_response(200, &engine.list_datasources()?),
        (MindsRoute::Datasources, _) => {
            json_response(201, &engine.create_datasource(body(request)?).await?)
        }
        (MindsRoute::Datasource(name), "GET") => {
            json_response(200, &engine.get_datasource(&decode(name)?)?)
        }
        (MindsRoute::Datasource(name), "PUT") => {
            let updated = engine
                .update_datasource(&decode(name)?, body(request)?)
                .await?;
            json_response(200, &updated)
        }
        (MindsRoute::Datasource(name), _) => {
            engine.delete_datasource(&decode(name)?).await?;
            Response::no_content()
        }
        (MindsRoute::ChatCompletions, _) => {
            ask(engine, ChatRequest::from_chat_completions(&request.body)?).await?
        }
        (MindsRoute::Responses, _) => {
            ask(engine, ChatRequest::from_responses(&request.body)?).await?
        }
    })
}

/// A question to a mind: one JSON answer, or server-sent events when `stream` is set.
async fn ask(engine: &Engine, question: ChatRequest) -> mindlite::Result<Response> {
    if !question.stream {
        return Ok(json_response(200, &engine.ask_mind(&question).await?));
    }
    let stream = engine.ask_mind_stream(&question).await?;
    Ok(Response {
        status: 200,
        content_type: Some("text/event-stream"),
        headers: vec![("cache-control", "no-cache".to_string())],
        body: Body::Stream(Box::new(Frames(stream))),
    })
}

fn body(request: &Request) -> mindlite::Result<Value> {
    mindlite::wire::request_body(&request.body)
}

/// The Minds API's codes: a body the engine refused is 422 (validation), the rest as
/// everywhere else; 429 carries `Retry-After` when the quota is windowed.
fn minds_error(error: Error) -> Problem {
    let status = match error.kind() {
        ErrorKind::InvalidInput | ErrorKind::InvalidData | ErrorKind::ConstraintViolation => 422,
        kind => status_of(kind),
    };
    Problem::from(error).with_status(status)
}

/// A streamed answer's frames.
struct Frames(MindStream);

impl Chunks for Frames {
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        self.0.next_frames()
    }
}
