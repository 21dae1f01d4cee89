//! The routes: each parses its request, calls the engine, and encodes the answer in MindsDB's
//! shape (`docs/mindsdb-wire.md` §0–§2, §5). No rule lives here; the engine decides, this translates.

use mindlite::{Engine, Error, ErrorKind, HostedApi, QueryRequest, WireFormat, WireStream};
use serde_json::json;

use crate::agents::{self, AgentAction};
use crate::callbacks::{self, CallbackRoute};
use crate::databases::{self, DatabaseRoute};
use crate::files;
use crate::http::{decode, Body, Request, Response};
use crate::jobs;
use crate::knowledge_bases;
use crate::mcp::{self, McpRoute, Sessions};
use crate::minds::{self, MindsRoute};
use crate::models::{self, ModelAction};
use crate::origin;
use crate::reply::{answer, error_response, json_response, problem, Problem, Reply};
use crate::views;

const JSON: &str = "application/json";

/// Judges a request on its head, before its body is read: the route and method must exist
/// (404, 405; the MCP endpoint only when `mcp.enabled`), a browser's preflight is answered, an
/// MCP message must not declare more bytes than one may have (413), the edition must serve
/// the route (404), a body must be JSON except for uploads (415), a caller without valid
/// credentials is refused
/// (401, 403), and requests without credentials (login, logout, failed ones, also on
/// `/api/status`) are rate-limited per client address (429). A request carrying MindsDB's
/// `company-id` / `user-id` headers acts as the tenant they name when the server sits behind a
/// trusted proxy (`http.trusted_tenant_headers`), and is refused (403) otherwise. Returns the
/// handle the request acts through, or the response that answers it from its head.
pub async fn admit(engine: &Engine, request: &Request, client: &str) -> Result<Engine, Response> {
    let path = request.path.as_str();
    let method = request.method.as_str();
    let route = match Route::find(path, &engine.config().http.minds_prefix) {
        Some(route) => route,
        None => {
            return Err(problem(
                404,
                "The endpoint you are trying to access does not exist on the server.",
            ))
        }
    };
    if matches!(route, Route::Mcp(_)) && !engine.config().mcp.enabled {
        return Err(problem(
            404,
            "The MCP endpoint is off on this server (mcp.enabled)",
        ));
    }
    if origin::is_preflight(request) {
        return Err(origin::preflight(route.methods()));
    }
    if matches!(route, Route::Mcp(_)) {
        mcp::check_size(request.declared_body_bytes())?;
    }
    if !route.methods().contains(&method) {
        return Err(problem(
            405,
            &format!("The method {method} is not allowed for {path}"),
        )
        .with_header("allow", route.methods().join(", ")));
    }
    // Answered before credentials: what this edition does not serve does not exist here.
    let hosted_only = match route {
        Route::Minds(_) => Some(HostedApi::Minds),
        Route::Callbacks(_) => Some(HostedApi::Callbacks),
        _ => None,
    };
    if let Some(api) = hosted_only {
        engine.serves(api).map_err(|e| error_response(&e))?;
    }
    // A web page can send a body of another type without asking first (a CORS "simple"
    // request); a JSON route takes nothing else, so such a body never reaches it.
    if request.has_body() && !matches!(route, Route::File(_)) {
        check_json(request)?;
    }
    if matches!(route, Route::Login | Route::Logout | Route::CloudLogin) {
        engine
            .throttle_unauthenticated(client)
            .map_err(|e| error_response(&e))?;
    }
    if matches!(route, Route::Status) && engine.auth_required() {
        // Status says whether a credential is valid: a failed one counts like a failed login,
        // so it is no faster a way to test keys.
        if let Some(credential) = credential(request) {
            if engine.authenticate(credential).is_err() {
                engine
                    .throttle_unauthenticated(client)
                    .map_err(|e| error_response(&e))?;
            }
        }
    }
    // MindsDB's tenant headers, set by a proxy in front: honoured only when the operator says
    // one is there (the engine refuses them otherwise).
    let company = request.header("company-id").map(str::trim);
    let user = request.header("user-id").map(str::trim);
    if company.is_some() || user.is_some() {
        let Some(company) = company else {
            return Err(problem(400, "A user-id header needs a company-id header"));
        };
        return engine
            .as_proxied_tenant(company, user)
            .await
            .map_err(|e| error_response(&e));
    }
    if !(route.needs_auth() && engine.auth_required()) {
        return Ok(engine.clone());
    }
    let authenticated = credential(request)
        .ok_or_else(unauthorized)
        .and_then(|credential| engine.authenticate(credential));
    authenticated.map_err(|e| {
        // Failed credentials count against the address's rate, so keys cannot be guessed fast.
        let refused = match engine.throttle_unauthenticated(client) {
            Err(throttled) => error_response(&throttled),
            Ok(()) => error_response(&e),
        };
        // MCP clients learn from this header that the endpoint wants a bearer token.
        if refused.status == 401 && matches!(route, Route::Mcp(_)) {
            return refused.with_header("www-authenticate", "Bearer");
        }
        refused
    })
}

/// Answers a request that [`admit`] let through, acting through `engine` (the handle it
/// returned).
pub async fn handle(engine: &Engine, request: &Request, sessions: &Sessions) -> Response {
    answer(dispatch(engine, request, sessions).await)
}

/// Finds the request's route and hands it to its handler; a route family's module answers.
async fn dispatch(engine: &Engine, request: &Request, sessions: &Sessions) -> Reply {
    let path = request.path.as_str();
    let method = request.method.as_str();
    let Some(route) = Route::find(path, &engine.config().http.minds_prefix) else {
        return Err(Problem::new(
            404,
            "The endpoint you are trying to access does not exist on the server.",
        ));
    };
    Ok(match route {
        Route::SqlQuery => sql_query(engine, request).await?,
        Route::Parametrize => {
            let body = mindlite::wire::request_body(&request.body)
                .map_err(|e| Problem::titled(400, "Wrong argument", e.message()))?;
            let Some(query) = body.get("query").and_then(|q| q.as_str()) else {
                return Err(Problem::titled(
                    400,
                    "Wrong argument",
                    "Must provide \"query\" (a SQL statement) in POST body",
                ));
            };
            let done = engine
                .parametrize_constants(query)
                .map_err(|e| Problem::titled(400, "Error", e.message()))?;
            json_response(200, &done)
        }
        Route::Status => {
            let authenticated = credential(request).is_some_and(|c| engine.authenticate(c).is_ok());
            json_response(200, &engine.status(authenticated))
        }
        Route::Ping => json_response(200, &json!({"status": "ok"})),
        Route::PingNative => json_response(200, &engine.active_tasks()),
        Route::Config if method == "PUT" => {
            let body = mindlite::wire::request_body(&request.body)
                .map_err(|e| Problem::titled(400, "Wrong arguments", e.message()))?;
            let changed = engine
                .change_settings(body)
                .await
                .map_err(|e| match e.kind() {
                    ErrorKind::InvalidInput => Problem::titled(400, "Wrong arguments", e.message()),
                    _ => Problem::from(&e),
                })?;
            json_response(200, &changed)
        }
        Route::Config => json_response(200, &engine.settings()),
        Route::Databases(route) => return databases::handle(engine, request, route).await,
        Route::Views(project) => {
            return views::collection(engine, request, &decode(project)?).await
        }
        Route::View(project, name) => {
            let (project, name) = (decode(project)?, decode(name)?);
            return views::one(engine, request, &project, &name).await;
        }
        Route::Jobs(project) => return jobs::collection(engine, request, &decode(project)?).await,
        Route::Job(project, name) => {
            let (project, name) = (decode(project)?, decode(name)?);
            return jobs::one(engine, request, &project, &name).await;
        }
        Route::JobHistory(project, name) => {
            return jobs::history(engine, &decode(project)?, &decode(name)?)
        }
        Route::Chatbots => return Err(Problem::titled(
            501,
            "Not implemented",
            "Chatbots answer in a chat service (Slack, Teams) that this server does not connect to",
        )),
        Route::Projects => {
            let projects = engine.list_projects()?;
            let listed: Vec<_> = projects
                .iter()
                .map(mindlite::Project::to_wire_json)
                .collect();
            json_response(200, &listed)
        }
        Route::Project(name) => {
            json_response(200, &engine.get_project(&decode(name)?)?.to_wire_json())
        }
        Route::Login => login(engine, request).await?,
        Route::Logout => {
            // Only a live token is revoked; anything else writes nothing.
            if let Some(token) = bearer(request) {
                engine.logout(token).await?;
            }
            json_response(200, &"")
        }
        Route::CloudLogin => {
            engine.serves(HostedApi::CloudLogin)?;
            login(engine, request).await?
        }
        Route::Minds(route) => return minds::handle(engine, request, route).await,
        Route::Callbacks(route) => return callbacks::handle(engine, request, route).await,
        Route::Mcp(route) => return mcp::handle(engine, request, route, sessions).await,
        Route::Agents(project) => {
            return agents::collection(engine, request, &decode(project)?).await
        }
        Route::Agent(project, name, action) => {
            let (project, name) = (decode(project)?, decode(name)?);
            return agents::one(engine, request, &project, &name, action).await;
        }
        Route::KnowledgeBases(project) => {
            return knowledge_bases::collection(engine, request, &decode(project)?).await
        }
        Route::KnowledgeBase(project, name) => {
            let (project, name) = (decode(project)?, decode(name)?);
            return knowledge_bases::one(engine, request, &project, &name).await;
        }
        Route::Models(project) => {
            return models::collection(engine, request, &decode(project)?).await
        }
        Route::Model(project, name, action) => {
            let (project, name) = (decode(project)?, decode(name)?);
            return models::one(engine, request, &project, &name, action).await;
        }
        Route::Files => return files::list(engine),
        Route::File(name) if method == "PUT" => {
            return files::put(engine, request, &decode(name)?).await
        }
        Route::File(name) => return files::delete(engine, &decode(name)?).await,
    })
}

/// The routes this server knows.
enum Route<'a> {
    SqlQuery,
    /// `/api/sql/query/utils/parametrize_constants`
    Parametrize,
    Status,
    Ping,
    /// `/api/util/ping_native`: which background tasks run.
    PingNative,
    /// `/api/config`: the settings a running server changes.
    Config,
    /// `/api/databases…` and `/api/tree…`
    Databases(DatabaseRoute<'a>),
    /// `/api/projects/{p}/views`
    Views(&'a str),
    /// `/api/projects/{p}/views/{name}`
    View(&'a str, &'a str),
    /// `/api/projects/{p}/jobs`
    Jobs(&'a str),
    /// `/api/projects/{p}/jobs/{name}`
    Job(&'a str, &'a str),
    /// `/api/projects/{p}/jobs/{name}/history`
    JobHistory(&'a str, &'a str),
    /// `/api/projects/{p}/chatbots…`: not served here (501).
    Chatbots,
    Projects,
    Project(&'a str),
    Login,
    Logout,
    CloudLogin,
    /// `/api/projects/{p}/agents`
    Agents(&'a str),
    /// `/api/projects/{p}/agents/{name}[/completions[/stream]]`
    Agent(&'a str, &'a str, AgentAction),
    /// `/api/projects/{p}/knowledge_bases`
    KnowledgeBases(&'a str),
    /// `/api/projects/{p}/knowledge_bases/{name}`
    KnowledgeBase(&'a str, &'a str),
    /// `/api/projects/{p}/models`
    Models(&'a str),
    /// `/api/projects/{p}/models/{name[.N]}[/predict|/describe]`
    Model(&'a str, &'a str, ModelAction),
    /// `/api/files`
    Files,
    /// `/api/files/{name}`
    File(&'a str),
    /// The Minds API under its prefix, and `/limits/`.
    Minds(MindsRoute<'a>),
    /// `/cloud/callback/model_status[/{id}[/deliveries]]`
    Callbacks(CallbackRoute<'a>),
    /// `/mcp/…`: the MCP endpoint.
    Mcp(McpRoute),
}

impl<'a> Route<'a> {
    fn find(path: &'a str, minds_prefix: &str) -> Option<Route<'a>> {
        if let Some(route) = MindsRoute::find(path, minds_prefix) {
            return Some(Route::Minds(route));
        }
        if let Some(route) = CallbackRoute::find(path) {
            return Some(Route::Callbacks(route));
        }
        if let Some(route) = DatabaseRoute::find(path) {
            return Some(Route::Databases(route));
        }
        if let Some(route) = McpRoute::find(path) {
            return Some(Route::Mcp(route));
        }
        Some(match path {
            "/api/sql/query" | "/api/sql/query/" => Route::SqlQuery,
            "/api/sql/query/utils/parametrize_constants" => Route::Parametrize,
            "/api/status" | "/api/status/" => Route::Status,
            "/api/util/ping" | "/api/util/ping/" => Route::Ping,
            "/api/util/ping_native" | "/api/util/ping_native/" => Route::PingNative,
            "/api/config" | "/api/config/" => Route::Config,
            "/api/projects" | "/api/projects/" => Route::Projects,
            "/api/login" => Route::Login,
            "/api/logout" => Route::Logout,
            "/cloud/login" => Route::CloudLogin,
            "/api/files" | "/api/files/" => Route::Files,
            _ if path.starts_with("/api/files/") => {
                let name = &path["/api/files/".len()..];
                let name = name.strip_suffix('/').unwrap_or(name);
                if name.is_empty() || name.contains('/') {
                    return None;
                }
                Route::File(name)
            }
            _ => {
                let rest = path.strip_prefix("/api/projects/")?;
                let rest = rest.strip_suffix('/').unwrap_or(rest);
                let parts: Vec<&str> = rest.split('/').collect();
                if parts.iter().any(|p| p.is_empty()) {
                    return None;
                }
                match parts.as_slice() {
                    [project] => Route::Project(project),
                    [project, "agents"] => Route::Agents(project),
                    [project, "agents", name] => Route::Agent(project, name, AgentAction::Record),
                    [project, "agents", name, "completions"] => {
                        Route::Agent(project, name, AgentAction::Completion)
                    }
                    [project, "agents", name, "completions", "stream"] => {
                        Route::Agent(project, name, AgentAction::CompletionStream)
                    }
                    [project, "views"] => Route::Views(project),
                    [project, "views", name] => Route::View(project, name),
                    [project, "jobs"] => Route::Jobs(project),
                    [project, "jobs", name] => Route::Job(project, name),
                    [project, "jobs", name, "history"] => Route::JobHistory(project, name),
                    [_, "chatbots", ..] => Route::Chatbots,
                    [project, "knowledge_bases"] => Route::KnowledgeBases(project),
                    [project, "knowledge_bases", name] => Route::KnowledgeBase(project, name),
                    [project, "models"] => Route::Models(project),
                    [project, "models", name] => Route::Model(project, name, ModelAction::Record),
                    [project, "models", name, "predict"] => {
                        Route::Model(project, name, ModelAction::Predict)
                    }
                    [project, "models", name, "describe"] => {
                        Route::Model(project, name, ModelAction::Describe)
                    }
                    _ => return None,
                }
            }
        })
    }

    fn methods(&self) -> &'static [&'static str] {
        match self {
            Route::SqlQuery
            | Route::Parametrize
            | Route::Login
            | Route::Logout
            | Route::CloudLogin => &["POST"],
            Route::Status
            | Route::Ping
            | Route::PingNative
            | Route::Projects
            | Route::Project(_) => &["GET"],
            Route::Databases(route) => route.methods(),
            Route::Config => &["GET", "PUT"],
            Route::Views(_) => &["GET", "POST"],
            Route::View(_, _) => &["GET", "PUT", "DELETE"],
            Route::Chatbots => &["GET", "POST", "PUT", "DELETE"],
            Route::Jobs(_) => &["GET", "POST"],
            Route::Job(_, _) => &["GET", "DELETE"],
            Route::JobHistory(_, _) => &["GET"],
            Route::Agents(_) => &["GET", "POST"],
            Route::Agent(_, _, AgentAction::Record) => &["GET", "PUT", "DELETE"],
            Route::Agent(_, _, _) => &["POST"],
            Route::KnowledgeBases(_) => &["GET", "POST"],
            Route::KnowledgeBase(_, _) => &["GET", "PUT", "DELETE"],
            Route::Models(_) => &["GET", "POST"],
            Route::Model(_, _, ModelAction::Record) => &["GET", "DELETE"],
            Route::Model(_, _, ModelAction::Predict) => &["POST"],
            Route::Model(_, _, ModelAction::Describe) => &["GET"],
            Route::Files => &["GET"],
            Route::File(_) => &["PUT", "DELETE"],
            Route::Minds(route) => route.methods(),
            Route::Callbacks(route) => route.methods(),
            Route::Mcp(route) => route.methods(),
        }
    }

    /// MindsDB leaves these open even with auth on (`docs/mindsdb-wire.md` §1).
    fn needs_auth(&self) -> bool {
        match self {
            Route::Mcp(route) => route.needs_auth(),
            _ => !matches!(
                self,
                Route::Status | Route::Ping | Route::Login | Route::Logout | Route::CloudLogin
            ),
        }
    }
}

async fn sql_query(engine: &Engine, request: &Request) -> Reply {
    let (query, format) = QueryRequest::from_wire_json(&request.body)?;
    let result = engine.query(query).await;
    Ok(match format {
        // The result carries the engine's cap on a document's size (query.max_document_mb).
        WireFormat::Json => Response::full(200, JSON, mindlite::encode_document(result).await),
        WireFormat::JsonLines | WireFormat::Sse => Response {
            status: 200,
            content_type: Some(format.content_type()),
            headers: Vec::new(),
            body: Body::Stream(Box::new(WireStream::new(result, format))),
        },
    })
}

async fn login(engine: &Engine, request: &Request) -> Reply {
    let body: serde_json::Value = if request.body.is_empty() {
        serde_json::Value::Null
    } else {
        mindlite::wire::request_body(&request.body).map_err(|e| Problem::new(400, e.message()))?
    };
    let field = |name| body.get(name).and_then(|v| v.as_str());
    // MindsDB's cloud login names the user `email`.
    let username = field("username").or_else(|| field("email"));
    let login = engine.login(username, field("password")).await?;
    Ok(json_response(200, &json!({"token": login.token})))
}

fn check_json(request: &Request) -> Result<(), Response> {
    let declared = request.header("content-type").map(str::trim);
    let media_type = declared
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if media_type.is_some_and(|t| t.eq_ignore_ascii_case(JSON)) {
        return Ok(());
    }
    let got = match declared {
        Some(value) => format!("got '{value}'"),
        None => "it had none".to_string(),
    };
    Err(problem(
        415,
        &format!("The request body must be JSON, sent with Content-Type: application/json ({got})"),
    ))
}

/// The caller's credential: a bearer token or API key, or `X-Api-Key` as MindsDB's Python SDK
/// sends an API key.
fn credential(request: &Request) -> Option<&str> {
    bearer(request).or_else(|| {
        request
            .header("x-api-key")
            .map(str::trim)
            .filter(|k| !k.is_empty())
    })
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(request: &Request) -> Option<&str> {
    let value = request.header("authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized() -> Error {
    Error::new(
        ErrorKind::Unauthorized,
        "Authorization is required to complete the request",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_content_type(value: Option<&str>) -> Request {
        let header = value.map_or(String::new(), |v| format!("Content-Type: {v}\r\n"));
        let head = format!("POST /api/sql/query HTTP/1.1\r\n{header}Content-Length: 2\r\n\r\n");
        Request::parse_for_test(head.as_bytes())
    }

    #[test]
    fn a_json_body_may_carry_parameters_and_any_case() {
        for value in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            " application/json ;charset=UTF-8",
        ] {
            assert!(
                check_json(&with_content_type(Some(value))).is_ok(),
                "{value}"
            );
        }
    }

    #[test]
    fn what_a_page_can_send_without_asking_is_415_naming_json() {
        for value in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonp"),
            Some("text/json"),
            None,
        ] {
            match check_json(&with_content_type(value)) {
                Err(response) => assert_eq!(response.status, 415, "{value:?}"),
                Ok(()) => panic!("{value:?} must be refused"),
            }
        }
    }
}
