//! A datasource's `url` parameter (`scheme://user:password@host:port/database`, as MindsDB
//! takes it), read into the parameters it stands for.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// `parameters` with what `url` (`scheme://user:password@host:port/database`, as MindsDB
/// takes it) says, where they do not say it themselves; `engine` names the datasource's
/// engine in errors and `schemes` are the URL schemes it takes.
pub(crate) fn with_url(
    engine: &str,
    schemes: &[&str],
    parameters: &Map<String, Value>,
    url: &Value,
) -> Result<Map<String, Value>> {
    let bad = |why: &str| Error::invalid(format!("{engine} parameter 'url' {why}"));
    let Value::String(text) = url else {
        return Err(bad("must be text"));
    };
    let url = url::Url::parse(text).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !schemes.contains(&url.scheme()) {
        return Err(bad(&format!("must start with {}://", schemes[0])));
    }
    let decode = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let mut out = parameters.clone();
    out.remove("url");
    let mut put = |key: &str, value: Option<Value>| {
        if let (Some(value), false) = (value, out.contains_key(key)) {
            out.insert(key.to_string(), value);
        }
    };
    put(
        "host",
        url.host_str()
            .map(|h| Value::from(h.trim_matches(['[', ']']))),
    );
    put("port", url.port().map(Value::from));
    put(
        "user",
        (!url.username().is_empty()).then(|| Value::from(decode(url.username()))),
    );
    put("password", url.password().map(|p| Value::from(decode(p))));
    let database = url.path().trim_start_matches('/');
    put(
        "database",
        (!database.is_empty()).then(|| Value::from(decode(database))),
    );
    // `?sslmode=require` and the like are parameters too: the engine's own check refuses
    // what it does not take (TLS settings above all), rather than dropping them unread.
    for (key, value) in url.query_pairs() {
        put(&key, Some(Value::from(value.into_owned())));
    }
    Ok(out)
}
