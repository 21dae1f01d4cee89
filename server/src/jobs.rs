//! MindsDB's job routes: `/api/projects/{p}/jobs` (list, create from `{"job": {"name",
//! "query", "if_query", "start_at", "end_at", "schedule_str"}}`), `/api/projects/{p}/jobs/{name}`
//! (get, delete) and `…/{name}/history`, with its codes and titles. The engine stores and runs
//! them.

use mindlite::{Engine, Error, ErrorKind};
use serde_json::Value;

use crate::http::{Request, Response};
use crate::reply::{json_response, Problem, Reply};

/// `GET` lists the project's jobs; `POST {"job": {...}}` creates one.
pub async fn collection(engine: &Engine, request: &Request, project: &str) -> Reply {
    if request.method == "GET" {
        return Ok(json_response(
            200,
            &engine.list_jobs(project).map_err(job_error)?,
        ));
    }
    let body = mindlite::wire::request_body(&request.body)
        .map_err(|e| Problem::titled(400, "Missing parameter", e.message()))?;
    let Some(job) = body.get("job").filter(|j| j.is_object()).cloned() else {
        return Err(Problem::titled(
            400,
            "Missing parameter",
            "Must provide \"job\" parameter in POST body",
        ));
    };
    let created = engine.create_job(project, job).await.map_err(job_error)?;
    Ok(json_response(200, &created))
}

/// One job: its record (GET) or its removal (DELETE, 204).
pub async fn one(engine: &Engine, request: &Request, project: &str, name: &str) -> Reply {
    if request.method == "GET" {
        return Ok(json_response(
            200,
            &engine.get_job(project, name).map_err(job_error)?,
        ));
    }
    engine.delete_job(project, name).await.map_err(job_error)?;
    Ok(Response::no_content())
}

/// A job's runs, oldest first.
pub fn history(engine: &Engine, project: &str, name: &str) -> Reply {
    let runs: Vec<Value> = engine.job_history(project, name).map_err(job_error)?;
    Ok(json_response(200, &runs))
}

/// "Project not found", "Job not found", "Job already exists"; a bad job is 400.
fn job_error(error: Error) -> Problem {
    match error.kind() {
        ErrorKind::InvalidInput => Problem::titled(400, "Invalid job", error.message()),
        _ => Problem::about("Job", &error),
    }
}
