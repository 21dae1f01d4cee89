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

/// MindsDB also lists its `log` system database; mindlite has none.
#[test]
fn show_databases_matches_mindsdb_without_log() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let (request, expected) = capture("sql_show_databases");
    let expected = String::from_utf8(expected)
        .unwrap()
        .replace("[\"log\"],", "");
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
