//! The knowledge base routes: `/api/projects/{p}/knowledge_bases[/{name}]`, as `mindsdb_sdk`'s
//! `server.knowledge_bases` and `kb.insert` call them. Each reads its body, calls the engine,
//! and answers with MindsDB's codes, titles and bodies; the engine decides everything else.

use mindlite::{Engine, Error, ErrorKind};
use serde_json::Value;

use crate::http::{Request, Response};
use crate::reply::{json_response, status_of, Problem, Reply};

/// `GET` lists the project's knowledge bases; `POST {"knowledge_base": {...}}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Reply {
    if request.method == "GET" {
        let kbs = engine.list_knowledge_bases(project).map_err(kb_error)?;
        return Ok(json_response(
            200,
            &kbs.iter().map(|kb| kb.wire()).collect::<Vec<_>>(),
        ));
    }
    let body = knowledge_base_field(request, "POST")?;
    if !matches!(body.get("name"), Some(Value::String(_))) {
        return Err(Problem::titled(
            400,
            "Missing parameter",
            "Must provide \"name\" field in \"knowledge_base\"",
        ));
    }
    let kb = engine
        .create_knowledge_base(project, body)
        .await
        .map_err(kb_error)?;
    Ok(json_response(201, &kb.wire()))
}

/// One knowledge base: its record (GET, DELETE), or settings and documents into it (PUT
/// `params`, `rows` or `query`).
pub async fn one(engine: &Engine, request: &Request, project: &str, name: &str) -> Reply {
    match request.method.as_str() {
        "GET" => {
            let kb = engine.get_knowledge_base(project, name).map_err(kb_error)?;
            Ok(json_response(200, &kb.wire()))
        }
        "PUT" => {
            let body = knowledge_base_field(request, "PUT")?;
            engine
                .insert_into_knowledge_base(project, name, body, None)
                .await
                .map_err(kb_error)?;
            Ok(json_response(200, &""))
        }
        _ => {
            engine
                .delete_knowledge_base(project, name)
                .await
                .map_err(kb_error)?;
            Ok(Response::no_content())
        }
    }
}

/// The body's `knowledge_base`, or MindsDB's 400 when the body is not JSON or lacks it.
fn knowledge_base_field(request: &Request, method: &str) -> Result<Value, Problem> {
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Problem::titled(400, "Invalid body", e.message()))?;
    match body.get("knowledge_base") {
        Some(value) if !value.is_null() => Ok(value.clone()),
        _ => Err(Problem::titled(
            400,
            "Missing parameter",
            format!("Must provide \"knowledge_base\" parameter in {method} body"),
        )),
    }
}

/// An engine error with MindsDB's title; an embedding provider's failure says so.
fn kb_error(error: Error) -> Problem {
    match error.kind() {
        ErrorKind::Upstream => Problem::titled(
            status_of(error.kind()),
            "Embedding provider error",
            error.message(),
        ),
        ErrorKind::InvalidInput => Problem::titled(400, "Invalid parameter", error.message()),
        _ => Problem::about("Knowledge Base", &error),
    }
}
