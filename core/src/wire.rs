//! JSON bodies as callers send them: HTTP request bodies (MindsDB's and OpenAI's request
//! shapes), the C front's and the Python front's JSON arguments, agent and mind specs. One
//! place reads their fields and words what is wrong, so every front and every engine module
//! says the same thing about the same mistake ("'context.db' must be a string").
//!
//! A field that is absent and one that is `null` are the same: not given.
//!
//! ```
//! use mindlite::wire::Fields;
//! let body = Fields::parse(br#"{"query": "SELECT 1", "context": {"db": 7}}"#, "The request body").unwrap();
//! assert_eq!(body.text("query").unwrap().as_deref(), Some("SELECT 1"));
//! let context = body.object("context").unwrap().unwrap();
//! assert_eq!(context.text("db").unwrap_err().message(), "'context.db' must be a string");
//! ```

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// How errors name an HTTP request's body.
const REQUEST_BODY: &str = "The request body";

/// Parses an HTTP request's body as any JSON value ("The request body is not valid JSON: …").
pub fn request_body(bytes: &[u8]) -> Result<Value> {
    parse(bytes, REQUEST_BODY)
}

/// Parses `bytes` as any JSON value; `what` names it when it is not JSON ("The request body
/// is not valid JSON: …").
pub fn parse(bytes: &[u8], what: &str) -> Result<Value> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid(format!("{what} is not valid JSON: {e}")))
}

/// The fields of one JSON object, read with checked types. Nested objects read through
/// [`Fields::object`] name their fields by their path (`context.db`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields {
    map: Map<String, Value>,
    /// `""` at the top, `"context."` inside `context`.
    prefix: String,
}

impl Fields {
    /// Parses `bytes` as a JSON object; `what` names it in errors ("The request body is not
    /// valid JSON: …", "The request body must be a JSON object").
    pub fn parse(bytes: &[u8], what: &str) -> Result<Fields> {
        Fields::of(parse(bytes, what)?, what)
    }

    /// An HTTP request's body as an object ("The request body must be a JSON object").
    pub fn request_body(bytes: &[u8]) -> Result<Fields> {
        Fields::parse(bytes, REQUEST_BODY)
    }

    /// `value` as an object; `what` names it when it is not one.
    pub fn of(value: Value, what: &str) -> Result<Fields> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: String::new(),
            }),
            _ => Err(Error::invalid(format!("{what} must be a JSON object"))),
        }
    }

    /// The field's value as given (`null` included), if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// The field, unless absent or `null`.
    fn given(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The field's path as errors name it: `'context.db'`.
    fn path(&self, key: &str) -> String {
        format!("'{}{key}'", self.prefix)
    }

    /// The error for a field of the wrong type: `'key' must be <kind>`.
    pub fn wrong(&self, key: &str, kind: &str) -> Error {
        Error::invalid(format!("{} must be {kind}", self.path(key)))
    }

    /// A text field.
    pub fn text(&self, key: &str) -> Result<Option<String>> {
        match self.given(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    /// A text field that must be given; `needed` says so when it is not ("A datasource needs
    /// a 'name' (a string)").
    pub fn required_text(&self, key: &str, needed: &str) -> Result<String> {
        self.text(key)?.ok_or_else(|| Error::invalid(needed))
    }

    /// A true/false field.
    pub fn flag(&self, key: &str) -> Result<Option<bool>> {
        match self.given(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(_) => Err(self.wrong(key, "true or false")),
        }
    }

    /// An object field, read as fields of its own (named by their path in errors).
    pub fn object(&self, key: &str) -> Result<Option<Fields>> {
        Ok(self.map_field(key)?.map(|map| Fields {
            map,
            prefix: format!("{}{key}.", self.prefix),
        }))
    }

    /// An object field as it was given (free-form: parameters, connection data).
    pub fn map_field(&self, key: &str) -> Result<Option<Map<String, Value>>> {
        match self.given(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map.clone())),
            Some(_) => Err(self.wrong(key, "an object")),
        }
    }

    /// A list-of-strings field.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>> {
        match self.given(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a list of strings")),
            Some(_) => Err(self.wrong(key, "a list of strings")),
        }
    }

    /// The field names given, in the order the object had them.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// Takes a field out (`null` included), if present.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// The object itself.
    pub fn into_map(self) -> Map<String, Value> {
        self.map
    }
}

/// `Day, DD Mon YYYY HH:MM:SS GMT`, the HTTP-date MindsDB's callback API shows times in.
pub(crate) fn http_date(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// A stored time text (`YYYY-MM-DD HH:MM:SS.ffffff` UTC) as an HTTP-date (the text itself if it
/// does not parse).
pub(crate) fn http_date_of_text(text: &str) -> String {
    match chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f") {
        Ok(time) => http_date(time.and_utc().timestamp()),
        Err(_) => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(value: Value) -> Fields {
        Fields::of(value, "The body").unwrap()
    }

    #[test]
    fn wrong_types_are_named_by_their_path() {
        let body = fields(json!({"a": 1, "o": {"b": [1], "c": "x", "d": "yes"}}));
        assert_eq!(
            body.text("a").unwrap_err().message(),
            "'a' must be a string"
        );
        let inner = body.object("o").unwrap().unwrap();
        assert_eq!(
            inner.strings("b").unwrap_err().message(),
            "'o.b' must be a list of strings"
        );
        assert_eq!(
            inner.flag("d").unwrap_err().message(),
            "'o.d' must be true or false"
        );
        assert_eq!(inner.text("c").unwrap().as_deref(), Some("x"));
        assert_eq!(
            body.object("a").unwrap_err().message(),
            "'a' must be an object"
        );
    }

    #[test]
    fn null_and_absent_are_not_given() {
        let body = fields(json!({"a": null}));
        assert_eq!(body.text("a").unwrap(), None);
        assert_eq!(body.text("missing").unwrap(), None);
        assert!(body.get("a").is_some_and(Value::is_null));
        assert_eq!(
            body.required_text("a", "It needs an 'a'")
                .unwrap_err()
                .message(),
            "It needs an 'a'"
        );
    }

    #[test]
    fn bodies_that_are_not_objects_say_what_they_are() {
        let err = Fields::parse(b"{", "The request body").unwrap_err();
        assert!(
            err.message()
                .starts_with("The request body is not valid JSON"),
            "{err}"
        );
        let err = Fields::parse(b"[1]", "The request body").unwrap_err();
        assert_eq!(err.message(), "The request body must be a JSON object");
    }

    #[test]
    fn http_dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            http_date_of_text("2026-11-25 10:00:00.123456"),
            "Wed, 25 Nov 2026 10:00:00 GMT"
        );
        assert_eq!(http_date_of_text("not a time"), "not a time");
    }
}
