//! MindsDB's database routes: `/api/databases` (list, create), `/api/databases/status` (a
//! connection check), `/api/databases/{db}` (get, create-or-update, delete),
//! `/api/databases/{db}/tables[/{t}]`, `/api/projects/{p}/views[/{v}]` and the object tree
//! `/api/tree[/{db}]` that `mindsdb_sdk` lists views and databases through, and the
//! integrations this build has (`/api/handlers[/{name}]`). Each reads its
//! body, calls the engine, and answers with MindsDB's codes, titles and bodies.

use mindlite::{Engine, Error, ErrorKind};
use serde_json::{json, Map, Value};

use crate::http::{Request, Response};
use crate::reply::{json_response, Problem, Reply};

/// Which database route a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseRoute<'a> {
    /// `/api/databases`
    List,
    /// `/api/databases/status`
    Status,
    /// `/api/databases/{db}`
    One(&'a str),
    /// `/api/databases/{db}/tables`
    Tables(&'a str),
    /// `/api/databases/{db}/tables/{t}`
    Table(&'a str, &'a str),
    /// `/api/tree`
    Tree,
    /// `/api/tree/{db}`
    TreeOf(&'a str),
    /// `/api/handlers`
    Handlers,
    /// `/api/handlers/{name}`
    Handler(&'a str),
}

impl<'a> DatabaseRoute<'a> {
    /// The route of `path`, if it is one of these.
    pub fn find(path: &'a str) -> Option<DatabaseRoute<'a>> {
        let path = path.strip_suffix('/').unwrap_or(path);
        if let Some(rest) = path.strip_prefix("/api/tree") {
            return match rest.strip_prefix('/') {
                None if rest.is_empty() => Some(DatabaseRoute::Tree),
                Some(db) if !db.is_empty() && !db.contains('/') => Some(DatabaseRoute::TreeOf(db)),
                _ => None,
            };
        }
        if let Some(rest) = path.strip_prefix("/api/handlers") {
            return match rest.strip_prefix('/') {
                None if rest.is_empty() => Some(DatabaseRoute::Handlers),
                Some(name) if !name.is_empty() && !name.contains('/') => {
                    Some(DatabaseRoute::Handler(name))
                }
                _ => None,
            };
        }
        let rest = path.strip_prefix("/api/databases")?;
        if rest.is_empty() {
            return Some(DatabaseRoute::List);
        }
        let parts: Vec<&str> = rest.strip_prefix('/')?.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        Some(match parts.as_slice() {
            ["status"] => DatabaseRoute::Status,
            [db] => DatabaseRoute::One(db),
            [db, "tables"] => DatabaseRoute::Tables(db),
            [db, "tables", table] => DatabaseRoute::Table(db, table),
            _ => return None,
        })
    }

    /// The methods it answers.
    pub fn methods(&self) -> &'static [&'static str] {
        match self {
            DatabaseRoute::List | DatabaseRoute::Tables(_) => &["GET", "POST"],
            DatabaseRoute::Status => &["POST"],
            DatabaseRoute::One(_) => &["GET", "PUT", "DELETE"],
            DatabaseRoute::Table(_, _) => &["GET", "DELETE"],
            DatabaseRoute::Tree
            | DatabaseRoute::TreeOf(_)
            | DatabaseRoute::Handlers
            | DatabaseRoute::Handler(_) => &["GET"],
        }
    }
}

/// Answers a database route (the names in its path are percent-decoded here).
pub async fn handle(engine: &Engine, request: &Request, route: DatabaseRoute<'_>) -> Reply {
    let decode = crate::http::decode;
    let method = request.method.as_str();
    match route {
        DatabaseRoute::List if method == "GET" => {
            let listed: Vec<Value> = engine
                .list_databases()?
                .iter()
                .map(mindlite::Database::to_wire_json)
                .collect();
            Ok(json_response(200, &listed))
        }
        DatabaseRoute::List => create(engine, request).await,
        DatabaseRoute::Status => {
            let mut body = object_body(request)?;
            let Some(Value::String(kind)) = body.remove("engine") else {
                return Err(wrong_argument("Missing \"engine\" field for database"));
            };
            Ok(match engine.check_database(&kind, body).await {
                Ok(()) => json_response(200, &json!({"status": "success"})),
                Err(e) => connection_error(&e),
            })
        }
        DatabaseRoute::One(db) => {
            let db = decode(db)?;
            match method {
                "GET" => Ok(json_response(
                    200,
                    &engine
                        .get_database(&db)
                        .map_err(database_error)?
                        .to_wire_json(),
                )),
                "PUT" => update(engine, request, &db).await,
                _ => {
                    engine
                        .delete_database(&db)
                        .await
                        .map_err(|e| match e.kind() {
                            ErrorKind::InvalidInput => Problem::titled(400, "Error", e.message()),
                            _ => database_error(e),
                        })?;
                    Ok(Response::no_content())
                }
            }
        }
        DatabaseRoute::Tables(db) if method == "GET" => {
            let tables = engine
                .list_database_tables(&decode(db)?)
                .await
                .map_err(database_error)?;
            let listed: Vec<Value> = tables.iter().map(|t| t.to_wire_json()).collect();
            Ok(json_response(200, &listed))
        }
        DatabaseRoute::Tables(db) => {
            let db = decode(db)?;
            let body = object_body(request)?;
            let Some(Value::Object(table)) = body.get("table") else {
                return Err(wrong_argument(
                    "Must provide \"table\" parameter in POST body",
                ));
            };
            let Some(Value::String(name)) = table.get("name") else {
                return Err(wrong_argument("Missing \"name\" field for table"));
            };
            let Some(Value::String(select)) = table.get("select") else {
                return Err(wrong_argument("Missing \"select\" field for table"));
            };
            let replace = table.get("replace").and_then(Value::as_bool) == Some(true);
            let created = engine
                .create_database_table(&db, name, select, replace)
                .await
                .map_err(|e| titled_or_error(e, "Name conflict"))?;
            Ok(json_response(201, &created.to_wire_json()))
        }
        DatabaseRoute::Table(db, table) => {
            let (db, table) = (decode(db)?, decode(table)?);
            if method == "GET" {
                let found = engine
                    .get_database_table(&db, &table)
                    .await
                    .map_err(database_error)?;
                return Ok(json_response(200, &found.to_wire_json()));
            }
            engine
                .drop_database_table(&db, &table)
                .await
                .map_err(|e| titled_or_error(e, "Name conflict"))?;
            Ok(Response::no_content())
        }
        DatabaseRoute::Handlers => Ok(json_response(200, &engine.list_handlers())),
        DatabaseRoute::Handler(name) => {
            let name = decode(name)?;
            let handler = engine
                .get_handler(&name)
                .map_err(|e| Problem::titled(404, "Handler not found", e.message()))?;
            Ok(json_response(200, &handler))
        }
        DatabaseRoute::Tree => {
            let nodes: Vec<Value> = engine
                .list_databases()?
                .iter()
                .map(mindlite::Database::tree_json)
                .collect();
            Ok(json_response(200, &nodes))
        }
        DatabaseRoute::TreeOf(db) => {
            let db = decode(db)?;
            // MindsDB answers an unknown name with 400 "There is no element with name …".
            let tables = match engine.list_database_tables(&db).await {
                Err(e) if e.kind() == ErrorKind::NotFound && engine.get_database(&db).is_err() => {
                    return Err(Problem::titled(
                        400,
                        "Error",
                        format!("There is no element with name '{db}'"),
                    ))
                }
                other => other?,
            };
            let nodes: Vec<Value> = tables.iter().map(|t| t.tree_json()).collect();
            Ok(json_response(200, &nodes))
        }
    }
}

/// `POST /api/databases {"database": {"name", "engine", "parameters"}, "check_connection"}`:
/// 201 with the record; with `check_connection`, a failed connection is MindsDB's 200
/// `{"status": "connection_error", "detail"}`.
async fn create(engine: &Engine, request: &Request) -> Reply {
    let body = object_body(request)?;
    let check_connection = body.get("check_connection").and_then(Value::as_bool) == Some(true);
    let Some(Value::Object(database)) = body.get("database") else {
        return Err(wrong_argument(
            "Must provide \"database\" parameter in POST body",
        ));
    };
    let Some(Value::String(name)) = database.get("name") else {
        return Err(wrong_argument("Missing \"name\" field for database"));
    };
    let Some(Value::String(kind)) = database.get("engine") else {
        return Err(wrong_argument(
            "Missing \"engine\" field for database. If you want to create a project instead, use the /api/projects endpoint.",
        ));
    };
    let parameters = parameters_of(database)?;
    match engine.create_database(name, kind, parameters).await {
        Ok(created) => Ok(json_response(201, &created.to_wire_json())),
        Err(e) if e.kind() == ErrorKind::Conflict => {
            Err(Problem::titled(409, "Name conflict", e.message()))
        }
        Err(e) if check_connection && is_connection_error(&e) => Ok(connection_error(&e)),
        Err(e) => Err(e.into()),
    }
}

/// `PUT /api/databases/{db} {"database": {"engine"?, "parameters"}}`: creates it (201) when
/// absent, else replaces its parameters (200); a refusal is MindsDB's 400 "Connection error".
async fn update(engine: &Engine, request: &Request, db: &str) -> Reply {
    let body = object_body(request)?;
    let Some(Value::Object(database)) = body.get("database") else {
        return Err(wrong_argument(
            "Must provide \"database\" parameter in POST body",
        ));
    };
    let parameters = parameters_of(database)?;
    let connection = |e: Error| match e.kind() {
        ErrorKind::InvalidInput | ErrorKind::Upstream | ErrorKind::Unavailable => {
            Problem::titled(400, "Connection error", e.message())
        }
        _ => Problem::from(e),
    };
    if engine.get_database(db).is_err() {
        let Some(Value::String(kind)) = database.get("engine") else {
            return Err(wrong_argument(
                "Missing \"engine\" field for new database. If you want to create a project instead, use the POST /api/projects endpoint.",
            ));
        };
        let created = engine
            .create_database(db, kind, parameters)
            .await
            .map_err(connection)?;
        return Ok(json_response(201, &created.to_wire_json()));
    }
    let updated = engine
        .update_database(db, parameters)
        .await
        .map_err(connection)?;
    Ok(json_response(200, &updated.to_wire_json()))
}

/// The body as a JSON object, or MindsDB's 400.
fn object_body(request: &Request) -> Result<Map<String, Value>, Problem> {
    match mindlite::wire::request_body(&request.body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(wrong_argument("The request body must be a JSON object")),
        Err(e) => Err(Problem::titled(400, "Wrong argument", e.message())),
    }
}

/// A database's `parameters`: an object, or none.
fn parameters_of(database: &Map<String, Value>) -> Result<Map<String, Value>, Problem> {
    match database.get("parameters") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(parameters)) => Ok(parameters.clone()),
        Some(_) => Err(wrong_argument("\"parameters\" must be an object")),
    }
}

fn wrong_argument(detail: &str) -> Problem {
    Problem::titled(400, "Wrong argument", detail)
}

/// Whether `error` says the datasource could not be reached or refused its parameters.
fn is_connection_error(error: &Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::InvalidInput | ErrorKind::Upstream | ErrorKind::Unavailable
    )
}

/// MindsDB's answer to a failed connection check: 200 with the reason.
fn connection_error(error: &Error) -> Response {
    json_response(
        200,
        &json!({"status": "connection_error", "detail": error.message()}),
    )
}

/// An engine error titled by what was not found ("Database not found", "Table not found").
fn database_error(error: Error) -> Problem {
    Problem::about("Database", &error)
}

/// A conflict titled as MindsDB titles it; a refusal is its 400 "Error"; others as they are.
fn titled_or_error(error: Error, conflict: &str) -> Problem {
    match error.kind() {
        ErrorKind::Conflict => Problem::titled(409, conflict, error.message()),
        // What the engine knows it did not find (the database, the table) is titled so; a
        // table the SELECT names but that does not exist is a bad statement.
        ErrorKind::NotFound if error.subject().is_some() => database_error(error),
        ErrorKind::QuotaExceeded | ErrorKind::Unauthorized | ErrorKind::Forbidden => {
            Problem::from(error)
        }
        ErrorKind::Internal | ErrorKind::Unavailable => Problem::from(error),
        _ => Problem::titled(400, "Error", error.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_routes() {
        assert_eq!(
            DatabaseRoute::find("/api/databases"),
            Some(DatabaseRoute::List)
        );
        assert_eq!(
            DatabaseRoute::find("/api/databases/"),
            Some(DatabaseRoute::List)
        );
        assert_eq!(
            DatabaseRoute::find("/api/databases/status"),
            Some(DatabaseRoute::Status)
        );
        assert_eq!(
            DatabaseRoute::find("/api/databases/pg/tables/t"),
            Some(DatabaseRoute::Table("pg", "t"))
        );
        assert_eq!(DatabaseRoute::find("/api/tree/"), Some(DatabaseRoute::Tree));
        assert_eq!(
            DatabaseRoute::find("/api/handlers/"),
            Some(DatabaseRoute::Handlers)
        );
        assert_eq!(
            DatabaseRoute::find("/api/handlers/postgres"),
            Some(DatabaseRoute::Handler("postgres"))
        );
        assert_eq!(
            DatabaseRoute::find("/api/tree/mindsdb"),
            Some(DatabaseRoute::TreeOf("mindsdb"))
        );
        for path in [
            "/api/databasesx",
            "/api/databases//tables",
            "/api/databases/pg/tables/t/x",
            "/api/tree/a/b",
            "/api/treex",
        ] {
            assert_eq!(DatabaseRoute::find(path), None, "{path}");
        }
    }
}
