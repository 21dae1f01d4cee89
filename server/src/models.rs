//! The model routes (`docs/mindsdb-wire.md` §4): `/api/projects/{p}/models[/{name[.N]}[/predict|/describe]]`.
//! Each reads its body, calls the engine, and answers with MindsDB's codes and bodies; the
//! engine decides everything else.

use mindlite::{Engine, Error};
use serde_json::Value;

use crate::http::{Request, Response};
use crate::reply::{json_response, Problem, Reply};

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
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Reply {
    if request.method == "GET" {
        let models = engine.list_models(project).map_err(model_error)?;
        let listed: Vec<Value> = models.iter().map(|m| m.to_wire_json()).collect();
        return Ok(json_response(200, &listed));
    }
    let Some(Value::String(query)) = body(request)?.get("query").cloned() else {
        return Err(Problem::titled(
            400,
            "Missing parameter",
            "Must provide \"query\" (a CREATE MODEL statement) in POST body",
        ));
    };
    let model = engine
        .create_model(project, &query)
        .await
        .map_err(model_error)?;
    Ok(json_response(201, &model.to_wire_json()))
}

/// One model: its record (GET, DELETE), predictions (POST …/predict) or description
/// (GET …/describe, attribute from an optional JSON body).
pub async fn one(
    engine: &Engine,
    request: &Request,
    project: &str,
    name: &str,
    action: ModelAction,
) -> Reply {
    let (name, version) = name_and_version(name);
    match (action, request.method.as_str()) {
        (ModelAction::Record, "GET") => {
            let model = engine
                .get_model(project, name, version)
                .map_err(model_error)?;
            Ok(json_response(200, &model.to_wire_json()))
        }
        (ModelAction::Record, _) => {
            engine
                .drop_model(project, name, version)
                .await
                .map_err(model_error)?;
            Ok(Response::no_content())
        }
        (ModelAction::Predict, _) => {
            // The model is looked up first, as MindsDB does: a missing one is 404 whatever
            // the body.
            engine
                .get_model(project, name, version)
                .map_err(model_error)?;
            let Some(data) = body(request)?.get("data").cloned() else {
                return Err(Problem::titled(
                    400,
                    "Missing parameter",
                    "Must provide \"data\" (a list of rows) in POST body",
                ));
            };
            let rows = engine
                .predict(project, name, version, &data)
                .await
                .map_err(model_error)?;
            Ok(json_response(200, &rows))
        }
        (ModelAction::Describe, _) => {
            // MindsDB reads the attribute from a GET body; no body is fine here.
            let attribute = if request.body.is_empty() {
                None
            } else {
                body(request)?
                    .get("attribute")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let model = engine
                .get_model(project, name, version)
                .map_err(model_error)?;
            let described = model.describe(attribute.as_deref()).map_err(model_error)?;
            Ok(json_response(200, &described))
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
fn body(request: &Request) -> Result<serde_json::Map<String, Value>, Problem> {
    mindlite::wire::Fields::request_body(&request.body)
        .map(mindlite::wire::Fields::into_map)
        .map_err(|e| Problem::titled(400, "Invalid body", e.message()))
}

/// An engine error about a model, with MindsDB's title.
fn model_error(error: Error) -> Problem {
    Problem::about("Model", &error)
}
