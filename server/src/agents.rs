//! The agent routes (`docs/mindsdb-wire.md` §3): `/api/projects/{p}/agents[/{name}[/completions[/stream]]]`.
//! Each reads its body, calls the engine, and answers with MindsDB's codes, titles and bodies;
//! the engine decides everything else. API keys pass through in bodies and are never logged.

use std::future::Future;
use std::pin::Pin;

use mindlite::{AgentStream, Engine, Error, ErrorKind, Subject};
use serde_json::Value;

use crate::http::{Body, Chunks, Request, Response};
use crate::reply::{json_response, status_of, Problem, Reply};

/// What is asked of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentAction {
    /// GET, PUT or DELETE the record.
    Record,
    /// POST a question, get the answer.
    Completion,
    /// POST a question, follow the answer as server-sent events.
    CompletionStream,
}

/// `GET` lists the project's agents; `POST {"agent": {...}}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Reply {
    if request.method == "GET" {
        let agents = engine.list_agents(project).map_err(agent_error)?;
        return Ok(json_response(
            200,
            &agents.iter().map(|a| a.wire()).collect::<Vec<_>>(),
        ));
    }
    let spec = field(request, "agent", "POST")?;
    if !matches!(spec.get("name"), Some(Value::String(_))) {
        return Err(Problem::titled(
            400,
            "Missing field",
            "Missing \"name\" field for agent",
        ));
    }
    let agent = engine
        .create_agent(project, spec)
        .await
        .map_err(agent_error)?;
    let created = json_response(201, &agent.wire());
    Ok(created)
}

/// One agent: its record (GET, PUT, DELETE) or a question to it (POST, plain or streamed).
pub async fn one(
    engine: &Engine,
    request: &Request,
    project: &str,
    name: &str,
    action: AgentAction,
) -> Reply {
    match (action, request.method.as_str()) {
        (AgentAction::Record, "GET") => {
            let agent = engine.get_agent(project, name).map_err(agent_error)?;
            let record = json_response(200, &agent.wire());
            Ok(record)
        }
        (AgentAction::Record, "PUT") => {
            let changes = field(request, "agent", "PUT")?;
            match engine.update_agent(project, name, changes).await {
                Ok(agent) => Ok(json_response(200, &agent.wire())),
                // MindsDB's PUT never creates, and says so with a 400.
                Err(e)
                    if e.kind() == ErrorKind::NotFound && e.subject() == Some(Subject::Agent) =>
                {
                    Err(Problem::titled(
                        400,
                        "Creation is not allowed",
                        "Creation of an agent using the PUT method is not allowed.",
                    ))
                }
                Err(e) => Err(agent_error(e)),
            }
        }
        (AgentAction::Record, _) => {
            engine
                .delete_agent(project, name)
                .await
                .map_err(agent_error)?;
            Ok(Response::no_content())
        }
        (AgentAction::Completion, _) => {
            let messages = field(request, "messages", "POST")?;
            let answer = engine
                .ask_agent(project, name, &messages)
                .await
                .map_err(agent_error)?;
            Ok(json_response(200, &answer.to_wire_json()))
        }
        (AgentAction::CompletionStream, _) => {
            let messages = field(request, "messages", "POST")?;
            let stream = engine
                .ask_agent_stream(project, name, &messages)
                .await
                .map_err(agent_error)?;
            Ok(Response {
                status: 200,
                content_type: Some("text/event-stream"),
                headers: vec![("cache-control", "no-cache".to_string())],
                body: Body::Stream(Box::new(EventFrames(stream))),
            })
        }
    }
}

/// The request body's `key`, or MindsDB's 400 when the body is not JSON or lacks it.
fn field(request: &Request, key: &str, method: &str) -> Result<Value, Problem> {
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Problem::titled(400, "Invalid body", e.message()))?;
    match body.get(key) {
        Some(value) if !value.is_null() => Ok(value.clone()),
        _ => Err(Problem::titled(
            400,
            "Missing parameter",
            format!("Must provide \"{key}\" parameter in {method} body"),
        )),
    }
}

/// An engine error with MindsDB's title; a provider failure is the model provider's error.
fn agent_error(error: Error) -> Problem {
    if error.kind() == ErrorKind::Upstream {
        return Problem::titled(
            status_of(error.kind()),
            "Model provider error",
            error.message(),
        );
    }
    Problem::about("Agent", &error)
}

/// Agent events as server-sent events, ending after `{"type": "end"}`.
struct EventFrames(AgentStream);

impl Chunks for EventFrames {
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        Box::pin(async move { Some(self.0.next_event().await?.to_sse_frame()) })
    }
}
