//! The agent routes (`docs/mindsdb-wire.md` §3): `/api/projects/{p}/agents[/{name}[/completions[/stream]]]`.
//! Each reads its body, calls the engine, and answers with MindsDB's codes, titles and bodies;
//! the engine decides everything else. API keys pass through in bodies and are never logged.

use std::future::Future;
use std::pin::Pin;

use mindlite::{AgentStream, Engine, Error, ErrorKind, Subject};
use serde_json::Value;

use crate::http::{Body, Chunks, Request, Response};
use crate::routes::{json_response, titled_error, titled_problem, AgentAction};

/// `GET` lists the project's agents; `POST {"agent": {...}}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Response {
    if request.method == "GET" {
        return match engine.list_agents(project) {
            Ok(agents) => json_response(200, &agents.iter().map(|a| a.wire()).collect::<Vec<_>>()),
            Err(e) => agent_error(&e),
        };
    }
    let spec = match field(request, "agent", "POST") {
        Ok(spec) => spec,
        Err(response) => return *response,
    };
    if !matches!(spec.get("name"), Some(Value::String(_))) {
        return titled_problem(400, "Missing field", "Missing \"name\" field for agent");
    }
    match engine.create_agent(project, spec).await {
        Ok(agent) => json_response(201, &agent.wire()),
        Err(e) => agent_error(&e),
    }
}

/// One agent: its record (GET, PUT, DELETE) or a question to it (POST, plain or streamed).
pub async fn one(
    engine: &Engine,
    request: &Request,
    project: &str,
    name: &str,
    action: AgentAction,
) -> Response {
    match (action, request.method.as_str()) {
        (AgentAction::Record, "GET") => match engine.get_agent(project, name) {
            Ok(agent) => json_response(200, &agent.wire()),
            Err(e) => agent_error(&e),
        },
        (AgentAction::Record, "PUT") => {
            let changes = match field(request, "agent", "PUT") {
                Ok(changes) => changes,
                Err(response) => return *response,
            };
            match engine.update_agent(project, name, changes).await {
                Ok(agent) => json_response(200, &agent.wire()),
                // MindsDB's PUT never creates, and says so with a 400.
                Err(e)
                    if e.kind() == ErrorKind::NotFound && e.subject() == Some(Subject::Agent) =>
                {
                    titled_problem(
                        400,
                        "Creation is not allowed",
                        "Creation of an agent using the PUT method is not allowed.",
                    )
                }
                Err(e) => agent_error(&e),
            }
        }
        (AgentAction::Record, _) => match engine.delete_agent(project, name).await {
            Ok(()) => Response::no_content(),
            Err(e) => agent_error(&e),
        },
        (AgentAction::Completion, _) => {
            let messages = match field(request, "messages", "POST") {
                Ok(messages) => messages,
                Err(response) => return *response,
            };
            match engine.ask_agent(project, name, &messages).await {
                Ok(answer) => json_response(200, &answer.to_wire_json()),
                Err(e) => agent_error(&e),
            }
        }
        (AgentAction::CompletionStream, _) => {
            let messages = match field(request, "messages", "POST") {
                Ok(messages) => messages,
                Err(response) => return *response,
            };
            match engine.ask_agent_stream(project, name, &messages).await {
                Ok(stream) => Response {
                    status: 200,
                    content_type: Some("text/event-stream"),
                    headers: vec![("cache-control", "no-cache".to_string())],
                    body: Body::Stream(Box::new(EventFrames(stream))),
                },
                Err(e) => agent_error(&e),
            }
        }
    }
}

/// The request body's `key`, or MindsDB's 400 when the body is not JSON or lacks it.
fn field(request: &Request, key: &str, method: &str) -> Result<Value, Box<Response>> {
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Box::new(titled_problem(400, "Invalid body", e.message())))?;
    match body.get(key) {
        Some(value) if !value.is_null() => Ok(value.clone()),
        _ => Err(Box::new(titled_problem(
            400,
            "Missing parameter",
            &format!("Must provide \"{key}\" parameter in {method} body"),
        ))),
    }
}

/// An engine error with MindsDB's title; a provider failure is the model provider's error.
fn agent_error(error: &Error) -> Response {
    if error.kind() == ErrorKind::Upstream {
        return titled_problem(
            crate::routes::status_of(error.kind()),
            "Model provider error",
            error.message(),
        );
    }
    titled_error("Agent", error)
}

/// Agent events as server-sent events, ending after `{"type": "end"}`.
struct EventFrames(AgentStream);

impl Chunks for EventFrames {
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        Box::pin(async move { Some(self.0.next_event().await?.to_sse_frame()) })
    }
}
