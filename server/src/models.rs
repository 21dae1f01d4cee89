//! The model routes (`docs/mindsdb-wire.md` §4): `/api/projects/{p}/models[/{name[.N]}[/predict|/describe]]`.
//! Each reads its body, calls the engine, and answers with MindsDB's codes and bodies; the
//! engine decides everything else.

use mindlite::{Engine, Error};
use serde_json::Value;

use crate::http::{Request, Response};
use crate::routes::{json_response, titled_error, titled_problem};

/// What is asked of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelAction {
    /// GET or DELETE the record.
    Record,
    /// POST rows, get them back predicted.
    Predict,
    /// GET the describe record.
    Describe,
}

/// `GET` lists every version; `POST {"query": "CREATE MODEL …"}` creates one (201).
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Response {
    if request.method == "GET" {
        return match engine.list_models(project) {
            Ok(models) => json_response(
                200,
                &models.iter().map(|m| m.to_wire_json()).collect::<Vec<_>>(),
            ),
            Err(e) => model_error(&e),
        };
    }
    let query = match body(request).map(|b| b.get("query").cloned()) {
        Ok(Some(Value::String(query))) => query,
        Ok(_) => {
            return titled_problem(
                400,
                "Missing parameter",
                "Must provide \"query\" (a CREATE MODEL statement) in POST body",
            )
        }
        Err(response) => return *response,
    };
    match engine.create_model(project, &query).await {
        Ok(model) => json_response(201, &model.to_wire_json()),
        Err(e) => model_error(&e),
    }
}

/// One model: its record (GET, DELETE), predictions (POST …/predict) or description
/// (GET …/describe, attribute from an optional JSON body).
pub async fn one(
    engine: &Engine,
    request: &Request,
    project: &str,
    name: &str,
    action: ModelAction,
) -> Response {
    let (name, version) = name_and_version(name);
    match (action, request.method.as_str()) {
        (ModelAction::Record, "GET") => match engine.get_model(project, name, version) {
            Ok(model) => json_response(200, &model.to_wire_json()),
            Err(e) => model_error(&e),
        },
        (ModelAction::Record, _) => match engine.drop_model(project, name, version).await {
            Ok(()) => Response::no_content(),
            Err(e) => model_error(&e),
        },
        (ModelAction::Predict, _) => {
            let data = match body(request).map(|b| b.get("data").cloned()) {
                Ok(Some(data)) => data,
                Ok(None) => {
                    return titled_problem(
                        400,
                        "Missing parameter",
                        "Must provide \"data\" (a list of rows) in POST body",
                    )
                }
                Err(response) => return *response,
            };
            match engine.predict(project, name, version, &data).await {
                Ok(rows) => json_response(200, &rows),
                Err(e) => model_error(&e),
            }
        }
        (ModelAction::Describe, _) => {
            // MindsDB reads the attribute from a GET body; no body is fine here.
            let attribute = if request.body.is_empty() {
                None
            } else {
                match body(request) {
                    Ok(b) => b
                        .get("attribute")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    Err(response) => return *response,
                }
            };
            let model = match engine.get_model(project, name, version) {
                Ok(model) => model,
                Err(e) => return model_error(&e),
            };
            match model.describe(attribute.as_deref()) {
                Ok(described) => json_response(200, &described),
                Err(e) => model_error(&e),
            }
        }
    }
}

/// `name.N` is version N of `name` (MindsDB's REST form); a name alone is the active version.
fn name_and_version(segment: &str) -> (&str, Option<u32>) {
    match segment.rsplit_once('.') {
        Some((name, version)) if !name.is_empty() => match version.parse::<u32>() {
            Ok(v) => (name, Some(v)),
            Err(_) => (segment, None),
        },
        _ => (segment, None),
    }
}

/// The request body as a JSON object, or a 400 that says why not.
fn body(request: &Request) -> Result<serde_json::Map<String, Value>, Box<Response>> {
    mindlite::wire::Fields::request_body(&request.body)
        .map(mindlite::wire::Fields::into_map)
        .map_err(|e| Box::new(titled_problem(400, "Invalid body", e.message())))
}

fn model_error(error: &Error) -> Response {
    titled_error("Model", error)
}
