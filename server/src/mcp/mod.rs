//! MindsDB's third door: the Model Context Protocol (MCP) on the HTTP port, where AI
//! assistants and IDE agents list and call tools, read resources and get prompts, in JSON-RPC
//! 2.0. Two transports, as MindsDB serves them:
//!
//! - streamable HTTP at `/mcp/` (also `/mcp/streamable`): each POST carries one message, and a
//!   request's answer comes back as the POST's JSON body. `initialize` starts a session whose
//!   id (`Mcp-Session-Id`) every later POST carries; DELETE ends it. No server-initiated
//!   messages are sent, so the GET stream is not offered (405, as the protocol allows).
//! - SSE at `/mcp/sse`: a GET opens an event stream whose first event names where to POST
//!   (`/mcp/messages/?session_id=…`); each POST is answered 202, its answer sent on the
//!   stream. The POST waits while its request runs, so the request keeps its budgets and is
//!   stopped if its client goes, as on every other route.
//!
//! `rpc` reads and writes messages, `methods` answers them from the engine, `sessions`
//! remembers sessions. Requests are admitted as every other route's are (credentials, the
//! local edition's Host and Origin rules, rate limits, memory); a session belongs to the user
//! that started it and is found by no other.
//!
//! The protocol is implemented here rather than with the official Rust SDK (`rmcp`): rmcp's
//! server transports are hyper/tower services, and this server speaks HTTP with httparse and
//! its own connection limits; rmcp's model types would have brought schemars and a service
//! runtime to describe the few messages below, whose shapes the Python SDK's own schema
//! checks in the tests (`tests/http/test_mcp.py` validates every answer for each version).

#[cfg(test)]
mod fuzz;
mod methods;
mod rpc;
mod sessions;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use mindlite::Engine;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::http::{Body, Chunks, Request, Response};
use crate::reply::{json_response, Reply};
use methods::Context;
use rpc::{Message, RpcError, INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION};
pub(crate) use sessions::Sessions;

/// The largest message taken, in bytes: MCP messages are small (a tool call's SQL), and one
/// waiting for its SSE stream must not hold much. A body declared larger is refused before it
/// is read (`routes::admit`).
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// How often an SSE stream with nothing to send sends a comment, so a client that has gone is
/// noticed and proxies keep the stream open.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// How long an answer waits for room on its SSE stream (a client not reading it) before the
/// session is given up.
const OUTBOX_WAIT: Duration = Duration::from_secs(30);

/// The MCP paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum McpRoute {
    /// `/mcp/`, `/mcp/streamable`: the streamable HTTP endpoint.
    Endpoint,
    /// `/mcp/sse`: opens an SSE session.
    Sse,
    /// `/mcp/messages/`: an SSE session's messages.
    Messages,
    /// `/mcp/status`
    Status,
}

impl McpRoute {
    /// The route of `path`, if it is one.
    pub(crate) fn find(path: &str) -> Option<McpRoute> {
        let path = path.strip_suffix('/').unwrap_or(path);
        Some(match path {
            "/mcp" | "/mcp/streamable" => McpRoute::Endpoint,
            "/mcp/sse" => McpRoute::Sse,
            "/mcp/messages" => McpRoute::Messages,
            "/mcp/status" => McpRoute::Status,
            _ => return None,
        })
    }

    /// The methods it takes.
    pub(crate) fn methods(self) -> &'static [&'static str] {
        match self {
            McpRoute::Endpoint => &["POST", "DELETE"],
            McpRoute::Sse | McpRoute::Status => &["GET"],
            McpRoute::Messages => &["POST"],
        }
    }

    /// Whether it needs credentials (when the server asks for them).
    pub(crate) fn needs_auth(self) -> bool {
        self != McpRoute::Status
    }
}

/// Answers a request to an MCP route, acting through `engine` (the caller's handle).
pub(crate) async fn handle(
    engine: &Engine,
    request: &Request,
    route: McpRoute,
    sessions: &Sessions,
) -> Reply {
    Ok(match route {
        McpRoute::Status => json_response(200, &json!({"status": "ok", "service": "mindlite-mcp"})),
        McpRoute::Endpoint if request.method == "DELETE" => end(engine, request, sessions),
        McpRoute::Endpoint => streamable(engine, request, sessions).await,
        McpRoute::Sse => open_stream(engine, request, sessions),
        McpRoute::Messages => message(engine, request, sessions).await,
    })
}

/// A POST to the streamable HTTP endpoint.
async fn streamable(engine: &Engine, request: &Request, sessions: &Sessions) -> Response {
    let message = match read(request) {
        Ok(message) => message,
        Err(response) => return response,
    };
    if let Message::Request { id, method, params } = &message {
        if method == "initialize" {
            let (version, result) = methods::initialize(params);
            return match sessions.start(engine.tenant(), &version, None) {
                Ok(session) => rpc_response(200, &rpc::answer(id, Ok(result)))
                    .with_header("mcp-session-id", session),
                Err(e) => failure(503, &RpcError::new(rpc::INTERNAL_ERROR, e.to_string())),
            };
        }
    }
    if let Err(response) = check_version(request) {
        return response;
    }
    let Some(session) = request.header("mcp-session-id").map(str::trim) else {
        return failure(
            400,
            &RpcError::new(
                INVALID_REQUEST,
                "Bad Request: no Mcp-Session-Id header: send initialize first, then its session id with every request",
            ),
        );
    };
    let Some(found) = sessions.find(session, engine.tenant()) else {
        return session_missing();
    };
    if let Some(version) = request.header("mcp-protocol-version").map(str::trim) {
        if version != found.version {
            return failure(
                400,
                &RpcError::new(
                    INVALID_REQUEST,
                    format!(
                        "Bad Request: MCP-Protocol-Version {version} is not the version this session agreed ({})",
                        found.version
                    ),
                ),
            );
        }
    }
    match message {
        Message::Request { id, method, params } => {
            let context = Context {
                engine,
                version: &found.version,
            };
            let outcome = methods::answer(&context, &method, params).await;
            rpc_response(200, &rpc::answer(&id, outcome))
        }
        Message::Notification { .. } | Message::Response => accepted(),
    }
}

/// DELETE of the streamable endpoint: ends the session.
fn end(engine: &Engine, request: &Request, sessions: &Sessions) -> Response {
    let Some(session) = request.header("mcp-session-id").map(str::trim) else {
        return failure(
            400,
            &RpcError::new(
                INVALID_REQUEST,
                "Bad Request: no Mcp-Session-Id header names the session to end",
            ),
        );
    };
    if sessions.end(session, engine.tenant()) {
        json_response(200, &json!({}))
    } else {
        session_missing()
    }
}

/// GET `/mcp/sse`: a new session and the stream its answers go to.
fn open_stream(engine: &Engine, request: &Request, sessions: &Sessions) -> Response {
    // An event-stream client asks for one (the protocol says it must). A page's `<img>` or
    // `<script>` cannot (and sends no Origin to refuse it by): without this, a page could open
    // streams until they push out the user's own sessions.
    let wants_events = request
        .header("accept")
        .is_some_and(|accept| accept.to_ascii_lowercase().contains("text/event-stream"));
    if !wants_events {
        return failure(
            406,
            &RpcError::new(
                INVALID_REQUEST,
                "Not Acceptable: GET /mcp/sse answers an event stream; send Accept: text/event-stream",
            ),
        );
    }
    // One answer waits in the channel at most; the others wait in their own POSTs, each held
    // by its connection and budgets.
    let (outbox, inbox) = mpsc::channel(1);
    let session = match sessions.start(engine.tenant(), methods::LATEST, Some(outbox)) {
        Ok(session) => session,
        Err(e) => return failure(503, &RpcError::new(rpc::INTERNAL_ERROR, e.to_string())),
    };
    let endpoint = format!("event: endpoint\r\ndata: /mcp/messages/?session_id={session}\r\n\r\n");
    Response {
        status: 200,
        content_type: Some("text/event-stream"),
        headers: vec![("cache-control", "no-store".to_string())],
        body: Body::Stream(Box::new(EventStream {
            first: Some(endpoint.into_bytes()),
            inbox,
            sessions: sessions.clone(),
            session,
        })),
    }
}

/// A POST of an SSE session's message: answered 202 once its answer is on the stream.
async fn message(engine: &Engine, request: &Request, sessions: &Sessions) -> Response {
    let Some(session) = request
        .query_param("session_id")
        .or_else(|| request.query_param("sessionId"))
    else {
        return failure(
            400,
            &RpcError::new(
                INVALID_REQUEST,
                "Bad Request: no session_id in the query string: open /mcp/sse and POST where its endpoint event says",
            ),
        );
    };
    let Some(found) = sessions.find(&session, engine.tenant()) else {
        return session_missing();
    };
    let Some(outbox) = found.outbox else {
        // A streamable HTTP session's id: its messages go to /mcp/.
        return session_missing();
    };
    let message = match read(request) {
        Ok(message) => message,
        Err(response) => return response,
    };
    let reply = match message {
        Message::Request { id, method, params } if method == "initialize" => {
            let (version, result) = methods::initialize(&params);
            sessions.agree(&session, &version);
            rpc::answer(&id, Ok(result))
        }
        Message::Request { id, method, params } => {
            let context = Context {
                engine,
                version: &found.version,
            };
            rpc::answer(&id, methods::answer(&context, &method, params).await)
        }
        Message::Notification { .. } | Message::Response => return accepted(),
    };
    let event = format!("event: message\r\ndata: {reply}\r\n\r\n").into_bytes();
    match tokio::time::timeout(OUTBOX_WAIT, outbox.send(event)).await {
        Ok(Ok(())) => accepted(),
        // The stream closed (its client went) or stopped reading.
        _ => {
            sessions.forget(&session);
            session_missing()
        }
    }
}

/// Refuses a message of `bytes` (declared, before its body is read; or read, when chunked)
/// larger than an MCP message may be.
pub(crate) fn check_size(bytes: u64) -> Result<(), Response> {
    if bytes > MAX_MESSAGE_BYTES as u64 {
        return Err(failure(
            413,
            &RpcError::new(
                INVALID_REQUEST,
                format!(
                    "The message is {bytes} bytes, more than the {MAX_MESSAGE_BYTES} one MCP message may have"
                ),
            ),
        ));
    }
    Ok(())
}

/// The message a POST carries, or the response that refuses it.
fn read(request: &Request) -> Result<Message, Response> {
    check_size(request.body.len() as u64)?;
    Message::parse(&request.body).map_err(|e| failure(400, &e))
}

/// Refuses a request whose `MCP-Protocol-Version` header names a version not spoken here.
fn check_version(request: &Request) -> Result<(), Response> {
    match request.header("mcp-protocol-version").map(str::trim) {
        Some(version) if !methods::VERSIONS.contains(&version) => Err(failure(
            400,
            &RpcError::new(
                UNSUPPORTED_PROTOCOL_VERSION,
                format!(
                    "Bad Request: protocol version {version} is not spoken here (this server speaks {})",
                    methods::VERSIONS.join(", ")
                ),
            )
            .with_data(json!({"supported": methods::VERSIONS, "requested": version})),
        )),
        _ => Ok(()),
    }
}

/// 404 for a session that is not (or no longer) there: the client starts a new one.
fn session_missing() -> Response {
    failure(
        404,
        &RpcError::new(
            INVALID_REQUEST,
            "Session not found: it ended or was never started; initialize a new one",
        ),
    )
}

/// 202 with no body: a notification or response taken.
fn accepted() -> Response {
    Response {
        status: 202,
        content_type: None,
        headers: Vec::new(),
        body: Body::Full(Vec::new()),
    }
}

/// A transport-level refusal: `status`, with the JSON-RPC error (id null) as its body.
fn failure(status: u16, error: &RpcError) -> Response {
    rpc_response(status, &rpc::error_message(&Value::Null, error))
}

fn rpc_response(status: u16, message: &Value) -> Response {
    json_response(status, message)
}

/// An SSE session's stream: the endpoint event, then the answers its POSTs send, with a
/// comment now and then while there are none. It ends when its session ends (idle too long,
/// or made room for another) and ends its session when it closes.
struct EventStream {
    first: Option<Vec<u8>>,
    inbox: mpsc::Receiver<Vec<u8>>,
    sessions: Sessions,
    session: String,
}

impl Chunks for EventStream {
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        Box::pin(async move {
            if let Some(first) = self.first.take() {
                return Some(first);
            }
            tokio::select! {
                event = self.inbox.recv() => event,
                () = tokio::time::sleep(KEEPALIVE) => {
                    self.sessions.is_live(&self.session).then(|| b": ping\r\n\r\n".to_vec())
                }
            }
        })
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.sessions.forget(&self.session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_are_mindsdbs_with_or_without_a_slash() {
        assert_eq!(McpRoute::find("/mcp/"), Some(McpRoute::Endpoint));
        assert_eq!(McpRoute::find("/mcp"), Some(McpRoute::Endpoint));
        assert_eq!(McpRoute::find("/mcp/streamable"), Some(McpRoute::Endpoint));
        assert_eq!(McpRoute::find("/mcp/sse"), Some(McpRoute::Sse));
        assert_eq!(McpRoute::find("/mcp/messages/"), Some(McpRoute::Messages));
        assert_eq!(McpRoute::find("/mcp/status"), Some(McpRoute::Status));
        assert_eq!(McpRoute::find("/mcp/other"), None);
        assert_eq!(McpRoute::find("/mcpx"), None);
    }
}
