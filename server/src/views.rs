//! MindsDB's view routes: `/api/projects/{p}/views` (list, create) and
//! `/api/projects/{p}/views/{v}` (get, create-or-update, delete), with its bodies
//! (`{"view": {"name", "query"}}`), codes and titles. The engine plans and stores the view.

use mindlite::{Engine, Error, ErrorKind};
use serde_json::{Map, Value};

use crate::http::{Request, Response};
use crate::reply::{json_response, Problem, Reply};

/// `GET` lists the project's views; `POST {"view": {"name", "query"}}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Reply {
    if request.method == "GET" {
        let views = engine.list_views(project).map_err(view_error)?;
        let listed: Vec<Value> = views.iter().map(mindlite::View::to_wire_json).collect();
        return Ok(json_response(200, &listed));
    }
    let view = view_field(request, "POST")?;
    let Some(Value::String(name)) = view.get("name") else {
        return Err(wrong_argument("Missing \"name\" field for view"));
    };
    let Some(Value::String(query)) = view.get("query") else {
        return Err(wrong_argument("Missing \"query\" field for view"));
    };
    let created = engine
        .create_view(project, name, query, false)
        .await
        .map_err(view_error)?;
    Ok(json_response(201, &created.to_wire_json()))
}

/// One view: its record (GET), a new query or a new view (PUT), or its removal (DELETE).
pub async fn one(engine: &Engine, request: &Request, project: &str, name: &str) -> Reply {
    match request.method.as_str() {
        "GET" => {
            let view = engine.get_view(project, name).map_err(view_error)?;
            Ok(json_response(200, &view.to_wire_json()))
        }
        "PUT" => {
            let view = view_field(request, "PUT")?;
            let exists = engine.get_view(project, name).is_ok();
            let query = match view.get("query") {
                Some(Value::String(query)) => query.clone(),
                Some(_) => return Err(wrong_argument("\"query\" must be a string")),
                None if exists => {
                    // Nothing to change: MindsDB answers the view as it is.
                    let view = engine.get_view(project, name).map_err(view_error)?;
                    return Ok(json_response(200, &view.to_wire_json()));
                }
                None => return Err(wrong_argument("Missing \"query\" field for new view")),
            };
            let stored = engine
                .create_view(project, name, &query, true)
                .await
                .map_err(view_error)?;
            let status = if exists { 200 } else { 201 };
            Ok(json_response(status, &stored.to_wire_json()))
        }
        _ => {
            engine
                .delete_view(project, name)
                .await
                .map_err(view_error)?;
            Ok(Response::no_content())
        }
    }
}

/// The body's `view` object, or MindsDB's 400 naming it.
fn view_field(request: &Request, method: &str) -> Result<Map<String, Value>, Problem> {
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Problem::titled(400, "Wrong argument", e.message()))?;
    match body.get("view") {
        Some(Value::Object(view)) => Ok(view.clone()),
        _ => Err(wrong_argument(&format!(
            "Must provide \"view\" parameter in {method} body"
        ))),
    }
}

fn wrong_argument(detail: &str) -> Problem {
    Problem::titled(400, "Wrong argument", detail)
}

/// "Project not found", "View not found", "Name conflict"; a query that does not plan is 400.
fn view_error(error: Error) -> Problem {
    match error.kind() {
        ErrorKind::Conflict => Problem::titled(409, "Name conflict", error.message()),
        // What the engine knows it did not find (the project, the view) is titled so; a
        // table the query names but that does not exist is a bad query.
        ErrorKind::NotFound if error.subject().is_some() => Problem::about("View", &error),
        ErrorKind::NotFound => Problem::titled(400, "Error", error.message()),
        ErrorKind::InvalidInput | ErrorKind::InvalidData => {
            Problem::titled(400, "Error", error.message())
        }
        _ => Problem::from(error),
    }
}
