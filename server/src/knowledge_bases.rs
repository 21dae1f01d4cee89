//! The knowledge base routes: `/api/projects/{p}/knowledge_bases[/{name}]`, as `mindsdb_sdk`'s
//! `server.knowledge_bases` and `kb.insert` call them. Each reads its body, calls the engine,
//! and answers with MindsDB's codes, titles and bodies; the engine decides everything else.

use mindlite::{Engine, Error, ErrorKind};
use serde_json::Value;

use crate::http::{Request, Response};
use crate::routes::{json_response, titled_error, titled_problem};

/// `GET` lists the project's knowledge bases; `POST {"knowledge_base": {...}}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Response {
    if request.method == "GET" {
        return match engine.list_knowledge_bases(project) {
            Ok(kbs) => json_response(200, &kbs.iter().map(|kb| kb.wire()).collect::<Vec<_>>()),
            Err(e) => kb_error(&e),
        };
    }
    let body = match knowledge_base_field(request, "POST") {
        Ok(body) => body,
        Err(response) => return *response,
    };
    if !matches!(body.get("name"), Some(Value::String(_))) {
        return titled_problem(
            400,
            "Missing parameter",
            "Must provide \"name\" field in \"knowledge_base\"",
        );
    }
    match engine.create_knowledge_base(project, body).await {
        Ok(kb) => json_response(201, &kb.wire()),
        Err(e) => kb_error(&e),
    }
}

/// One knowledge base: its record (GET, DELETE), or settings and documents into it (PUT
/// `params`, `rows` or `query`).
pub async fn one(engine: &Engine, request: &Request, project: &str, name: &str) -> Response {
    match request.method.as_str() {
        "GET" => match engine.get_knowledge_base(project, name) {
            Ok(kb) => json_response(200, &kb.wire()),
            Err(e) => kb_error(&e),
        },
        "PUT" => {
            let body = match knowledge_base_field(request, "PUT") {
                Ok(body) => body,
                Err(response) => return *response,
            };
            match engine
                .insert_into_knowledge_base(project, name, body, None)
                .await
            {
                Ok(_) => json_response(200, &""),
                Err(e) => kb_error(&e),
            }
        }
        _ => match engine.delete_knowledge_base(project, name).await {
            Ok(()) => Response::no_content(),
            Err(e) => kb_error(&e),
        },
    }
}

/// The body's `knowledge_base`, or MindsDB's 400 when the body is not JSON or lacks it.
fn knowledge_base_field(request: &Request, method: &str) -> Result<Value, Box<Response>> {
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Box::new(titled_problem(400, "Invalid body", e.message())))?;
    match body.get("knowledge_base") {
        Some(value) if !value.is_null() => Ok(value.clone()),
        _ => Err(Box::new(titled_problem(
            400,
            "Missing parameter",
            &format!("Must provide \"knowledge_base\" parameter in {method} body"),
        ))),
    }
}

/// An engine error with MindsDB's title; an embedding provider's failure says so.
fn kb_error(error: &Error) -> Response {
    match error.kind() {
        ErrorKind::Upstream => titled_problem(
            crate::routes::status_of(error.kind()),
            "Embedding provider error",
            error.message(),
        ),
        ErrorKind::InvalidInput => titled_problem(400, "Invalid parameter", error.message()),
        _ => titled_error("Knowledge Base", error),
    }
}
