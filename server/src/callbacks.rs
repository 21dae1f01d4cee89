//! Model-status callbacks (hosted edition, `docs/mindsdb-wire.md` §6): `/cloud/callback/model_status`
//! (GET lists, POST registers), `/cloud/callback/model_status/{id}` (GET, PUT, DELETE) and
//! `/cloud/callback/model_status/{id}/deliveries` (the delivery log). The engine decides who
//! may (404 in the local edition, 403 for plans without callbacks); this maps its answers.

use mindlite::Engine;
use serde_json::{json, Value};

use crate::http::Request;
use crate::reply::{json_response, Problem, Reply};

const BASE: &str = "/cloud/callback/model_status";

/// A callbacks route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackRoute<'a> {
    /// The collection.
    All,
    /// One callback, by the id in the path.
    One(&'a str),
    /// One callback's delivery log.
    Deliveries(&'a str),
}

impl<'a> CallbackRoute<'a> {
    /// The route `path` names, with or without a trailing slash.
    pub fn find(path: &'a str) -> Option<CallbackRoute<'a>> {
        let rest = path.strip_prefix(BASE)?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Some(CallbackRoute::All);
        }
        let parts: Vec<&str> = rest.strip_prefix('/')?.split('/').collect();
        match parts.as_slice() {
            [id] if !id.is_empty() => Some(CallbackRoute::One(id)),
            [id, "deliveries"] if !id.is_empty() => Some(CallbackRoute::Deliveries(id)),
            _ => None,
        }
    }

    /// The methods the route takes.
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            CallbackRoute::All => &["GET", "POST"],
            CallbackRoute::One(_) => &["GET", "PUT", "DELETE"],
            CallbackRoute::Deliveries(_) => &["GET"],
        }
    }
}

/// Answers one callbacks request as the caller's tenant.
pub async fn handle(engine: &Engine, request: &Request, route: CallbackRoute<'_>) -> Reply {
    Ok(match (route, request.method.as_str()) {
        (CallbackRoute::All, "GET") => json_response(200, &engine.list_callbacks()?),
        (CallbackRoute::All, _) => {
            json_response(200, &engine.register_callback(body(request)?).await?)
        }
        (CallbackRoute::One(id), method) => {
            let id = parse_id(id)?;
            match method {
                "GET" => json_response(200, &engine.get_callback(id)?),
                "PUT" => json_response(200, &engine.update_callback(id, body(request)?).await?),
                _ => {
                    engine.delete_callback(id).await?;
                    json_response(200, &json!({}))
                }
            }
        }
        (CallbackRoute::Deliveries(id), _) => {
            json_response(200, &engine.callback_deliveries(parse_id(id)?)?)
        }
    })
}

/// The callback id in the path; a path that is no id names no callback (404).
fn parse_id(id: &str) -> Result<u64, Problem> {
    id.parse()
        .map_err(|_| Problem::new(404, format!("Callback {id} not found")))
}

fn body(request: &Request) -> mindlite::Result<Value> {
    mindlite::wire::request_body(&request.body)
}
