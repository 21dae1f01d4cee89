//! The encoders against MindsDB's own bytes: each capture in `captures/` holds a request and
//! the exact body a MindsDB 26.1 server answered; mindlite must answer the same bytes.

use mindlite::{Config, Engine, QueryRequest, WireFormat, WireStream};

/// Request JSON and response body bytes of a capture file.
fn capture(name: &str) -> (serde_json::Value, Vec<u8>) {
    let text = std::fs::read_to_string(format!(
        "{}/tests/captures/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let request = text
        .split("### REQUEST")
        .nth(1)
        .and_then(|r| r.split("### RESPONSE HEADERS").next())
        .and_then(|r| r.lines().find(|l| l.starts_with('{')))
        .expect("capture has a JSON request body");
    let repr = text
        .split("### BODY repr")
        .nth(1)
        .expect("capture has a body repr")
        .trim();
    (serde_json::from_str(request).unwrap(), python_bytes(repr))
}

/// Decodes a Python bytes literal such as `b'a\'b\n'`.
fn python_bytes(repr: &str) -> Vec<u8> {
    let inner = repr
        .strip_prefix("b'")
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| repr.strip_prefix("b\"").and_then(|r| r.strip_suffix('"')))
        .expect("a bytes literal");
    let mut out = Vec::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next().expect("escape") {
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            't' => out.push(b'\t'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(u8::from_str_radix(&hex, 16).unwrap());
            }
            other => out.push(other as u8),
        }
    }
    out
}

/// Runs a capture's request the way the HTTP server will and returns the body bytes.
fn answer(engine: &Engine, request: &serde_json::Value) -> Vec<u8> {
    let format =
        WireFormat::parse(request.get("response_format").and_then(|f| f.as_str())).unwrap();
    let query: QueryRequest = serde_json::from_value(request.clone()).unwrap();
    let mut stream = WireStream::new(engine.query_blocking(query), format);
    let mut body = Vec::new();
    while let Some(piece) = engine.block_on(stream.next_chunk()) {
        body.extend_from_slice(&piece);
    }
    body
}

fn assert_matches_capture(name: &str) {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let (request, expected) = capture(name);
    let body = answer(&engine, &request);
    assert_eq!(
        String::from_utf8_lossy(&body),
        String::from_utf8_lossy(&expected),
        "capture {name}"
    );
}

#[test]
fn select1_matches_mindsdb_in_all_three_formats() {
    assert_matches_capture("sql_select1");
    assert_matches_capture("sql_select1_jsonlines");
    assert_matches_capture("sql_select1_sse");
}

#[test]
fn missing_table_error_matches_mindsdb_in_all_three_formats() {
    assert_matches_capture("sql_error_nosuch");
    assert_matches_capture("sql_error_nosuch_jsonlines");
    assert_matches_capture("sql_error_nosuch_sse");
}

#[test]
fn ok_results_match_mindsdb() {
    assert_matches_capture("sql_ok_type");
    assert_matches_capture("sql_ok_type_jsonlines");
}

#[test]
fn context_db_is_echoed() {
    assert_matches_capture("sql_context_db");
}

/// MindsDB renders `CAST(… AS DATE)` through pandas as a midnight timestamp; mindlite
/// deliberately sends a DATE as `YYYY-MM-DD`. Everything else is byte-identical.
#[test]
fn cell_types_match_mindsdb_except_dates() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    for name in ["sql_types", "sql_types_jsonlines"] {
        let (request, expected) = capture(name);
        let expected = String::from_utf8(expected)
            .unwrap()
            .replace(" 00:00:00.000000", "");
        let body = String::from_utf8(answer(&engine, &request)).unwrap();
        assert_eq!(body, expected, "capture {name}");
    }
}

#[test]
fn show_databases_matches_mindsdb() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let (request, expected) = capture("sql_show_databases");
    let expected = String::from_utf8(expected).unwrap();
    assert_eq!(
        String::from_utf8(answer(&engine, &request)).unwrap(),
        expected
    );
}

#[test]
fn cells_encode_per_design() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let sql = "SELECT CAST('2024-01-02 03:04:05.123456' AS TIMESTAMP) AS ts, CAST('2024-02-29' AS DATE) AS d, \
               CAST('NaN' AS DOUBLE) AS nan, X'68656C6C6F' AS bin, [1, 2] AS list, \
               named_struct('a', 1, 'b', 'x') AS s, 'quote \" and \\\\ slash' AS q, CAST(12.50 AS DECIMAL(5,2)) AS dec";
    let body = answer(&engine, &serde_json::json!({ "query": sql }));
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["type"], "table", "{doc}");
    assert_eq!(
        doc["data"][0],
        serde_json::json!([
            "2024-01-02 03:04:05.123456", "2024-02-29", null, "aGVsbG8=", [1, 2], {"a": 1, "b": "x"},
            "quote \" and \\ slash", 12.5
        ])
    );
}

/// Nulls at every level, lists sliced out of a longer column, dictionaries and 32-bit floats:
/// the per-column writers must give each row its own values.
#[test]
fn nested_and_null_cells_encode_row_by_row() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let rows = "SELECT * FROM (VALUES \
        (1, [1, NULL, 3], named_struct('a', CAST(NULL AS TEXT), 'b', [2.5]), \
         arrow_cast('x', 'Dictionary(Int32, Utf8)'), CAST(1.5 AS FLOAT)), \
        (2, NULL, NULL, NULL, NULL), \
        (3, [], named_struct('a', 'z', 'b', CAST(NULL AS DOUBLE[])), \
         arrow_cast('y', 'Dictionary(Int32, Utf8)'), CAST('inf' AS FLOAT)), \
        (4, [4], named_struct('a', 'w', 'b', [0.25, NULL]), \
         arrow_cast('x', 'Dictionary(Int32, Utf8)'), CAST(-2 AS FLOAT)) \
        ) AS t(n, l, s, d, f) ORDER BY n";
    let all = serde_json::json!([
        [1, [1, null, 3], {"a": null, "b": [2.5]}, "x", 1.5],
        [2, null, null, null, null],
        [3, [], {"a": "z", "b": null}, "y", null],
        [4, [4], {"a": "w", "b": [0.25, null]}, "x", -2.0]
    ]);
    for format in [serde_json::Value::Null, "jsonlines".into()] {
        for (sql, expected) in [
            (rows.to_string(), all.clone()),
            (
                format!("{rows} LIMIT 2 OFFSET 2"),
                serde_json::json!([all[2], all[3]]),
            ),
        ] {
            let body = answer(
                &engine,
                &serde_json::json!({"query": sql, "response_format": format}),
            );
            let data = if format.is_null() {
                serde_json::from_slice::<serde_json::Value>(&body).unwrap()["data"].clone()
            } else {
                let lines: Vec<serde_json::Value> = body
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice(l).unwrap())
                    .collect();
                serde_json::Value::Array(
                    lines[1..]
                        .iter()
                        .flat_map(|l| l.as_array().unwrap().clone())
                        .collect(),
                )
            };
            assert_eq!(data, expected, "{sql} as {format}");
        }
    }
}

/// MindsDB executes before it streams, so a failing query is one error item, never a table
/// header followed by an error.
#[test]
fn a_query_failing_before_its_first_row_streams_one_error_item() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let body = answer(
        &engine,
        &serde_json::json!({
            "query": "SELECT CAST(column1 AS INT) AS x FROM (VALUES ('abc'))",
            "response_format": "jsonlines"
        }),
    );
    let body = String::from_utf8(body).unwrap();
    assert_eq!(body.lines().count(), 1, "{body}");
    assert!(
        body.starts_with("{\"type\":\"error\",\"error_code\":0,"),
        "{body}"
    );
    let body = answer(
        &engine,
        &serde_json::json!({"query": "SELECT 1 WHERE false", "response_format": "sse"}),
    );
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "data: {\"type\":\"table\",\"column_names\":[\"1\"]}\n\n"
    );
}

/// MindsDB's HTTP API runs one statement per request; the in-process API runs several.
#[test]
fn a_wire_request_holds_one_statement() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let (request, _) = QueryRequest::from_wire_json(br#"{"query": "SELECT 1; SELECT 2"}"#).unwrap();
    let error = engine
        .block_on(engine.query_blocking(request).collect())
        .unwrap_err();
    assert!(error.message().contains("2 statements"), "{error}");
    let (request, _) = QueryRequest::from_wire_json(br#"{"query": "SELECT 1;"}"#).unwrap();
    assert!(engine
        .block_on(engine.query_blocking(request).collect())
        .is_ok());
    let collected = engine.sql_blocking("SELECT 1; SELECT 2 AS two").unwrap();
    assert_eq!(collected.column_names, ["two"]);
}

/// Fuzz targets for the JSON bodies callers send: `wire::Fields`, the SQL request (query,
/// context, params, response_format, timeout), the chat requests, and every spec the engine
/// stores (agents, knowledge bases, minds, datasources, callbacks). A body is taken or refused
/// with an error that is the caller's (never `Internal`) and says something; nothing panics.
/// Bodies come from a generator that knows the fields each reader looks for, and values of
/// every JSON kind; URL and host fields only ever name 127.0.0.1 or a private address, so no
/// case reaches the network.
mod fuzz {
    use mindlite::wire::{self, Fields};
    use mindlite::{ChatRequest, Config, Edition, Engine, ErrorKind, PlanConfig, QueryRequest};
    use mindlite_fuzz::{extreme_number, mutate, note, Target, Unstructured};
    use serde_json::{json, Map, Value};

    type Draw<T> = mindlite_fuzz::arbitrary::Result<T>;

    /// The fields the readers look for, at any depth.
    const KEYS: &[&str] = &[
        "query",
        "context",
        "db",
        "show_secrets",
        "params",
        "response_format",
        "timeout",
        "messages",
        "input",
        "role",
        "content",
        "model",
        "stream",
        "name",
        "model_name",
        "provider",
        "api_key",
        "base_url",
        "data",
        "tables",
        "knowledge_bases",
        "prompt_template",
        "mode",
        "embedding_model",
        "reranking_model",
        "content_columns",
        "metadata_columns",
        "id_column",
        "preprocessing",
        "chunk_size",
        "chunk_overlap",
        "text_chunking_config",
        "type",
        "storage",
        "datasources",
        "parameters",
        "engine",
        "connection_data",
        "description",
        "host",
        "port",
        "user",
        "password",
        "database",
        "path",
        "url",
        "filter",
        "project_name",
        "attempt",
        "count",
        "interval",
        "http_timeout",
        "knowledge_base",
        "rows",
        "batch_size",
        "temperature",
        "skills",
        "agent",
    ];

    /// Fields whose values are addresses: always one of [`ADDRESSES`].
    const ADDRESS_KEYS: &[&str] = &["base_url", "host", "url", "path", "database"];

    /// Loopback only, and nothing a resolver would look up: a datasource's host is connected
    /// to when it is created.
    const ADDRESSES: &[&str] = &[
        "http://127.0.0.1:1/v1",
        "http://[::1]:1/",
        "https://127.0.0.1:1/x?y=z",
        "127.0.0.1",
        "::1",
        "ftp://127.0.0.1/",
        "http://127.0.0.1:99999/",
        "http://",
        "",
        "/nonexistent/dir",
    ];

    fn text(u: &mut Unstructured<'_>) -> Draw<String> {
        Ok(match u.int_in_range(0..=7u8)? {
            0 => {
                (*u.choose(&["openai", "ollama", "local", "postgres", "files", "mindsdb"])?).into()
            }
            1 => {
                (*u.choose(&["SELECT 1", "SELECT :x", "jsonlines", "sse", "json", "user"])?).into()
            }
            2 => (*u.choose(&[
                "mindsdb",
                "p",
                "db.t",
                "p.*",
                "a b",
                "É",
                "x".repeat(300).as_str(),
            ])?)
            .into(),
            3 => "y".repeat(u.int_in_range(0..=70_000)?),
            4 => String::new(),
            _ => u.arbitrary()?,
        })
    }

    fn value(u: &mut Unstructured<'_>, depth: u32) -> Draw<Value> {
        Ok(match u.int_in_range(0..=8u8)? {
            0 => Value::Null,
            1 => json!(u.arbitrary::<bool>()?),
            2 => json!(extreme_number(u)?),
            3 => json!((extreme_number(u)? as i64).wrapping_neg()),
            4 => json!(*u.choose(&[0.5, -1.5, 1e308, -0.0, 3.0])?),
            5 | 6 => json!(text(u)?),
            7 if depth > 0 => {
                let len = if u.ratio(1, 10)? {
                    u.int_in_range(0..=3_000)?
                } else {
                    u.int_in_range(0..=3)?
                };
                let mut items = Vec::new();
                for i in 0..len {
                    items.push(if u.is_empty() {
                        json!(i)
                    } else {
                        value(u, depth - 1)?
                    });
                }
                Value::Array(items)
            }
            _ if depth > 0 => Value::Object(object(u, depth - 1)?),
            _ => json!("leaf"),
        })
    }

    fn object(u: &mut Unstructured<'_>, depth: u32) -> Draw<Map<String, Value>> {
        let mut map = Map::new();
        for _ in 0..u.int_in_range(0..=5)? {
            let key = if u.ratio(7, 8)? {
                (*u.choose(KEYS)?).to_string()
            } else {
                u.arbitrary()?
            };
            let value = if ADDRESS_KEYS.contains(&key.as_str()) {
                json!(*u.choose(ADDRESSES)?)
            } else {
                value(u, depth)?
            };
            map.insert(key, value);
        }
        Ok(map)
    }

    /// An object body, sometimes nested deeply or damaged as text.
    fn body(u: &mut Unstructured<'_>) -> Draw<Vec<u8>> {
        let text = match u.int_in_range(0..=9u8)? {
            0 => {
                let depth = *u.choose(&[100usize, 127, 128, 129, 10_000])?;
                format!("{{\"query\": {}1{}}}", "[".repeat(depth), "]".repeat(depth))
            }
            1 => u.arbitrary::<String>()?,
            _ => Value::Object(object(u, 3)?).to_string(),
        };
        Ok(if u.ratio(1, 6)? {
            mutate(u, text.as_bytes())?
        } else {
            text.into_bytes()
        })
    }

    /// An error a caller can act on: not the engine's fault, and worded.
    fn check_error(error: &mindlite::Error) {
        assert_ne!(
            error.kind(),
            ErrorKind::Internal,
            "an internal error from a body: {error}"
        );
        assert!(
            !error.message().trim().is_empty(),
            "an error without a message"
        );
    }

    #[test]
    fn request_bodies_are_read_or_refused_by_field() {
        Target::new(50_000).run(|u| {
            let bytes = body(u)?;
            note("body", &String::from_utf8_lossy(&bytes));
            if let Err(e) = wire::request_body(&bytes) {
                check_error(&e);
            }
            match Fields::request_body(&bytes) {
                Ok(fields) => {
                    for _ in 0..4 {
                        let key = *u.choose(KEYS)?;
                        let read = match u.int_in_range(0..=4u8)? {
                            0 => fields.text(key).map(drop),
                            1 => fields.flag(key).map(drop),
                            2 => fields.object(key).map(drop),
                            3 => fields.map_field(key).map(drop),
                            _ => fields.strings(key).map(drop),
                        };
                        if let Err(e) = read {
                            check_error(&e);
                            assert!(e.message().contains(key), "the error names '{key}': {e}");
                        }
                    }
                }
                Err(e) => check_error(&e),
            }
            for read in [
                QueryRequest::from_wire_json(&bytes).map(drop),
                ChatRequest::from_chat_completions(&bytes).map(drop),
                ChatRequest::from_responses(&bytes).map(drop),
            ] {
                if let Err(e) = read {
                    check_error(&e);
                }
            }
            Ok(())
        });
    }

    /// A hosted engine (egress to internal addresses refused, as a server runs it) and a
    /// user's handle, made once per process: in the child, after its memory limit is set.
    fn tenant() -> &'static Engine {
        static TENANT: std::sync::OnceLock<(Engine, Engine)> = std::sync::OnceLock::new();
        &TENANT
            .get_or_init(|| {
                let mut config = Config {
                    edition: Edition::Hosted,
                    ..Config::default()
                };
                config.hosted.plans.insert(
                    "roomy".into(),
                    PlanConfig {
                        max_minds: 1_000_000,
                        max_datasources: 1_000_000,
                        callbacks: true,
                        max_callbacks: 1_000_000,
                        ..PlanConfig::default()
                    },
                );
                config.hosted.default_plan = "roomy".into();
                // Providers a spec leaves to the configuration: here, nowhere.
                config.llm.base_url = "http://127.0.0.1:1/v1".into();
                config.embedding.base_url = "http://127.0.0.1:1/v1".into();
                let engine = Engine::open_in_memory(config).expect("an engine");
                engine
                    .block_on(engine.create_user("fuzz", None))
                    .expect("a user");
                let key = engine
                    .block_on(engine.create_api_key("fuzz"))
                    .expect("a key")
                    .key;
                let handle = engine.as_user(&key).expect("the user's handle");
                // A knowledge base for inserts to go to (its provider is refused at use).
                let kb = base_spec(2);
                let mut kb = kb.as_object().expect("an object").clone();
                kb.insert("name".into(), json!("kb"));
                handle
                    .block_on(handle.create_knowledge_base("mindsdb", Value::Object(kb)))
                    .expect("a knowledge base");
                (engine, handle)
            })
            .1
    }

    /// A valid body for `call` (see [`specs_are_stored_or_refused_by_field`]), for cases
    /// to change in a few places.
    fn base_spec(call: u8) -> Value {
        let local = "http://127.0.0.1:1/v1";
        match call {
            0 | 1 => json!({"name": "a", "model": {"provider": "openai", "model_name": "gpt-4o",
                "base_url": local, "api_key": "k"}, "data": {"tables": [], "knowledge_bases": []},
                "prompt_template": "hi", "params": {"timeout": 10}}),
            2 => json!({"name": "kb2", "embedding_model": {"provider": "openai",
                "model_name": "text-embedding-3-small", "base_url": local},
                "content_columns": ["content"], "metadata_columns": ["m"], "id_column": "id",
                "preprocessing": {"text_chunking_config": {"chunk_size": 100, "chunk_overlap": 10}}}),
            3 => json!({"rows": [{"id": 1, "content": "x", "m": 2}], "params": {"batch_size": 10}}),
            4 | 5 => json!({"name": "m", "model_name": "gpt-4o", "provider": "openai",
                "datasources": [], "knowledge_bases": [], "parameters": {"prompt_template": "x"}}),
            6 | 7 => json!({"name": "d", "engine": "postgres", "description": "x",
                "connection_data": {"host": "127.0.0.1", "port": 1, "user": "u", "password": "p",
                "database": "db"}}),
            8 => json!({"url": "http://127.0.0.1:1/hook", "filter": {"model_name": "m",
                "project_name": "mindsdb"}, "attempt": {"count": 3, "interval": 1, "http_timeout": 5}}),
            _ => json!([{"a": 1, "b": "x"}]),
        }
    }

    /// `spec` with one to three changes: a field (at the top or one level down) set to any
    /// value, or removed.
    fn changed(u: &mut Unstructured<'_>, mut spec: Value) -> Draw<Value> {
        for _ in 0..u.int_in_range(1..=3)? {
            let target = match &mut spec {
                Value::Object(map) if !map.is_empty() && u.arbitrary()? => {
                    let keys: Vec<String> = map.keys().cloned().collect();
                    let key = u.choose(&keys)?.clone();
                    match map.get_mut(&key) {
                        Some(Value::Object(inner)) => inner,
                        _ => map,
                    }
                }
                Value::Object(map) => map,
                Value::Array(rows) => match rows.first_mut() {
                    Some(Value::Object(row)) => row,
                    _ => return Ok(spec),
                },
                _ => return Ok(spec),
            };
            let key = (*u.choose(KEYS)?).to_string();
            if u.ratio(1, 4)? {
                target.remove(&key);
            } else if ADDRESS_KEYS.contains(&key.as_str()) {
                target.insert(key, json!(*u.choose(ADDRESSES)?));
            } else {
                target.insert(key, value(u, 2)?);
            }
        }
        Ok(spec)
    }

    #[test]
    fn specs_are_stored_or_refused_by_field() {
        Target::new(15_000).run(|u| {
            let engine = tenant();
            let call = u.int_in_range(0..=9u8)?;
            let spec = match u.int_in_range(0..=3u8)? {
                0 => Value::Object(object(u, 3)?),
                1 => base_spec(call),
                _ => changed(u, base_spec(call))?,
            };
            let name = if u.ratio(3, 4)? {
                (*u.choose(&["a", "kb", "m", "d", "x"])?).to_string()
            } else {
                text(u)?
            };
            note("call", &call);
            note("name", &name);
            note("spec", &spec);
            let outcome = engine.block_on(async {
                match call {
                    0 => engine.create_agent("mindsdb", spec).await.map(drop),
                    1 => engine.update_agent("mindsdb", &name, spec).await.map(drop),
                    2 => engine
                        .create_knowledge_base("mindsdb", spec)
                        .await
                        .map(drop),
                    3 => engine
                        .insert_into_knowledge_base("mindsdb", &name, spec, None)
                        .await
                        .map(drop),
                    4 => engine.create_mind(spec).await.map(drop),
                    5 => engine.update_mind(&name, spec).await.map(drop),
                    6 => engine.create_datasource(spec).await.map(drop),
                    7 => engine.update_datasource(&name, spec).await.map(drop),
                    8 => engine.register_callback(spec).await.map(drop),
                    _ => engine
                        .predict("mindsdb", &name, None, &spec)
                        .await
                        .map(drop),
                }
            });
            note("outcome", &outcome);
            if let Err(e) = outcome {
                check_error(&e);
            }
            Ok(())
        });
    }
}
