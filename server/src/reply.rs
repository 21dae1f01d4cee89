//! What a route answers: JSON documents, and errors as MindsDB sends them (problem+json,
//! `{"title", "detail", "timestamp"}`, with the status the engine's error kind maps to).
//!
//! A handler returns a [`Reply`] and ends in `?`: an engine error becomes a [`Problem`] through
//! `From<mindlite::Error>`, and a route that answers MindsDB's own title for a case ("File not
//! found") says so with [`Problem::titled`]. Every route family uses this module; none uses
//! another's, nor the dispatcher.

use mindlite::{Error, ErrorKind};

use crate::http::{reason, Response};

const JSON: &str = "application/json";
const PROBLEM: &str = "application/problem+json";

/// What a handler answers: a response, or the problem to answer instead.
pub type Reply = Result<Response, Problem>;

/// An error answer: its status, MindsDB's title when the case has one (else the status's
/// reason), what went wrong, and the seconds until a quota resets (`Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: u16,
    title: Option<String>,
    detail: String,
    retry_after: Option<u64>,
}

impl Problem {
    /// A problem of `status` saying `detail`, titled by the status.
    pub fn new(status: u16, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            title: None,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// A problem with MindsDB's title for the case ("Agent not found", …).
    pub fn titled(status: u16, title: impl Into<String>, detail: impl Into<String>) -> Problem {
        Problem {
            title: Some(title.into()),
            ..Problem::new(status, detail)
        }
    }

    /// An engine error from a route about a `thing` ("Agent", "Model"), with MindsDB's title:
    /// what was not found (the error's subject, the project say, else the `thing`), or that it
    /// already exists; other errors as they are.
    pub fn about(thing: &str, error: &Error) -> Problem {
        let subject = error.subject().map_or(thing, |s| s.name());
        match error.kind() {
            ErrorKind::NotFound => {
                Problem::titled(404, format!("{subject} not found"), error.message())
            }
            ErrorKind::Conflict => {
                Problem::titled(409, format!("{subject} already exists"), error.message())
            }
            _ => Problem::from(error),
        }
    }

    /// The same problem with another status (the Minds API answers 422 where others 400).
    pub fn with_status(self, status: u16) -> Problem {
        Problem { status, ..self }
    }

    /// The response that says it.
    pub fn into_response(self) -> Response {
        let title = self.title.as_deref().unwrap_or(match self.status {
            404 => "Not found",
            other => reason(other),
        });
        let response = problem_body(self.status, title, &self.detail);
        match self.retry_after {
            Some(seconds) => response.with_header("retry-after", seconds.to_string()),
            None => response,
        }
    }
}

impl From<&Error> for Problem {
    fn from(error: &Error) -> Problem {
        Problem {
            retry_after: error.retry_after(),
            ..Problem::new(status_of(error.kind()), error.message())
        }
    }
}

impl From<Error> for Problem {
    fn from(error: Error) -> Problem {
        Problem::from(&error)
    }
}

/// The response a [`Reply`] comes to.
pub fn answer(reply: Reply) -> Response {
    reply.unwrap_or_else(Problem::into_response)
}

/// The HTTP status for an engine error.
pub fn status_of(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::InvalidInput | ErrorKind::InvalidData | ErrorKind::ConstraintViolation => 400,
        ErrorKind::Unauthorized => 401,
        ErrorKind::Forbidden => 403,
        ErrorKind::NotFound => 404,
        ErrorKind::Conflict => 409,
        ErrorKind::QuotaExceeded => 429,
        ErrorKind::Unavailable => 503,
        ErrorKind::Upstream => 502,
        ErrorKind::Internal => 500,
    }
}

/// An engine error's response.
pub fn error_response(error: &Error) -> Response {
    Problem::from(error).into_response()
}

/// A problem+json response titled by its status.
pub fn problem(status: u16, detail: &str) -> Response {
    Problem::new(status, detail).into_response()
}

/// The fields of a problem+json body, in MindsDB's order.
#[derive(serde::Serialize)]
struct ProblemBody<'a> {
    title: &'a str,
    detail: &'a str,
    timestamp: String,
}

fn problem_body(status: u16, title: &str, detail: &str) -> Response {
    let timestamp = chrono::Utc::now()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string();
    let body = ProblemBody {
        title,
        detail,
        timestamp,
    };
    json_response(status, &body).with_content_type(PROBLEM)
}

/// `value` as a JSON response of `status`.
pub fn json_response(status: u16, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => Response::full(status, JSON, body),
        Err(e) => problem(500, &format!("cannot encode the response: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(response: &Response) -> serde_json::Value {
        match &response.body {
            crate::http::Body::Full(bytes) => serde_json::from_slice(bytes).unwrap(),
            crate::http::Body::Stream(_) => panic!("a problem is a full body"),
        }
    }

    fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
        let found = response.headers.iter().find(|(n, _)| *n == name);
        found.map(|(_, value)| value.as_str())
    }

    #[test]
    fn an_engine_error_answers_its_status_title_and_retry_after() {
        let quota = Error::quota_exceeded("Quota exceeded: questions", Some(30));
        let response = Problem::from(quota).into_response();
        assert_eq!(response.status, 429);
        assert_eq!(header(&response, "retry-after"), Some("30"));
        let json = body(&response);
        assert_eq!(json["title"], "Too Many Requests");
        assert_eq!(json["detail"], "Quota exceeded: questions");

        let missing = Error::not_found("Agent 'x' does not exist");
        let response = Problem::about("Agent", &missing).into_response();
        assert_eq!(response.status, 404);
        assert_eq!(body(&response)["title"], "Agent not found");
        assert_eq!(body(&problem(404, "no such route"))["title"], "Not found");
    }
}
