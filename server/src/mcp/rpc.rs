//! JSON-RPC 2.0 as MCP uses it: reading one message a client sent (a request, a notification,
//! or a response to a request of ours, which this server never makes) and writing answers and
//! errors. Batches (a JSON array of messages) were allowed by one revision of MCP and dropped
//! by the next; they are refused with an Invalid Request error that says so.

use serde_json::{json, Map, Value};

/// The message is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a JSON-RPC message (or is a batch).
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The method's parameters are wrong: missing, of the wrong type, or naming nothing known.
pub const INVALID_PARAMS: i64 = -32602;
/// The server failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// A resource that does not exist (MCP's code).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// The `MCP-Protocol-Version` header names a version this server does not speak (MCP's code).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// One message from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: it gets an answer with its id.
    Request {
        /// The id to answer with (a string or an integer).
        id: Value,
        /// The method.
        method: String,
        /// Its parameters (an empty object when absent).
        params: Map<String, Value>,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
    },
    /// A response or error answering a request of the server's.
    Response,
}

/// A JSON-RPC error: a code, a message a person can act on, and data when there is some.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// One of the codes above.
    pub code: i64,
    /// What was wrong.
    pub message: String,
    /// More about it, as the code defines.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error of `code` saying `message`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Invalid parameters, saying which and why.
    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// The same error with `data`.
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }
}

impl Message {
    /// Reads one message from a request body.
    pub fn parse(body: &[u8]) -> Result<Message, RpcError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            RpcError::new(PARSE_ERROR, format!("The message is not valid JSON: {e}"))
        })?;
        let Value::Object(mut object) = value else {
            let what = if value.is_array() {
                "A batch (a JSON array of messages) is not taken: send one message per request"
            } else {
                "A message must be a JSON object"
            };
            return Err(RpcError::new(INVALID_REQUEST, what));
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "A message must have \"jsonrpc\": \"2.0\"",
            ));
        }
        let id = object.remove("id");
        let Some(method) = object.get("method") else {
            // A response (result or error) to a request of ours: we make none, so nothing
            // waits for it; it is taken and dropped.
            if id.is_some() && (object.contains_key("result") || object.contains_key("error")) {
                return Ok(Message::Response);
            }
            return Err(RpcError::new(
                INVALID_REQUEST,
                "A message must have a \"method\" (a request or notification) or a \"result\" or \"error\" (a response)",
            ));
        };
        let Some(method) = method.as_str().map(str::to_string) else {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "\"method\" must be a string",
            ));
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params,
            Some(_) => {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    format!("The params of {method} must be an object"),
                ))
            }
        };
        match id {
            None => Ok(Message::Notification { method }),
            // An integer id beyond 64 bits would come back changed (as a float), and the
            // client could not match the answer to its request.
            Some(Value::Number(n)) if !(n.is_i64() || n.is_u64()) => Err(RpcError::new(
                INVALID_REQUEST,
                "A request's \"id\" must be a string or an integer of at most 64 bits",
            )),
            Some(id @ (Value::String(_) | Value::Number(_))) => {
                Ok(Message::Request { id, method, params })
            }
            Some(_) => Err(RpcError::new(
                INVALID_REQUEST,
                "A request's \"id\" must be a string or an integer",
            )),
        }
    }
}

/// The answer to request `id`: its result, or its error.
pub fn answer(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => error_message(id, &error),
    }
}

/// An error message for request `id` (null when the request could not be read).
pub fn error_message(id: &Value, error: &RpcError) -> Value {
    let mut body = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": body})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> i64 {
        Message::parse(body.as_bytes()).unwrap_err().code
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        let request = Message::parse(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert_eq!(
            request,
            Message::Request {
                id: json!(7),
                method: "ping".into(),
                params: Map::new()
            }
        );
        let note =
            Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert_eq!(
            note,
            Message::Notification {
                method: "notifications/initialized".into()
            }
        );
        let response = Message::parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert_eq!(response, Message::Response);
    }

    #[test]
    fn what_is_not_a_message_gets_the_code_that_says_why() {
        assert_eq!(code("{"), PARSE_ERROR);
        assert_eq!(code("[]"), INVALID_REQUEST);
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            INVALID_REQUEST
        );
        assert_eq!(code(r#""ping""#), INVALID_REQUEST);
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":3}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            INVALID_REQUEST
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), INVALID_REQUEST);
        for id in ["1000000000000000000000000000000", "1.5", "-1e3"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(code(&body), INVALID_REQUEST, "{id}");
        }
    }

    #[test]
    fn answers_carry_the_request_id_and_errors_their_data() {
        let ok = answer(&json!("x"), Ok(json!({})));
        assert_eq!(ok, json!({"jsonrpc": "2.0", "id": "x", "result": {}}));
        let error = RpcError::params("no").with_data(json!({"k": 1}));
        let failed = answer(&json!(3), Err(error));
        assert_eq!(failed["error"]["code"], INVALID_PARAMS);
        assert_eq!(failed["error"]["data"]["k"], 1);
        assert_eq!(failed["id"], 3);
    }
}
