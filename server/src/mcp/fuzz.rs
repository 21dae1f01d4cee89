//! Fuzz target for the MCP methods: mutated messages (tool calls with SQL, resource reads with
//! odd URIs, prompts and completions) are read and answered against an in-memory engine with
//! a table and a small `mcp.max_result_kb`. Every message ends in an answer or a JSON-RPC
//! error, never a panic; every answer is within the size cap; an answer's id is the request's.

use std::sync::OnceLock;

use mindlite::{Config, Engine};
use mindlite_fuzz::{mutate, note, Target};
use serde_json::{json, Value};

use super::methods::{self, Context};
use super::rpc::{self, Message};

/// The cap every answer must keep, in KiB.
const CAP_KB: u64 = 4;

/// The engine every case asks, with `mindsdb.t` (300 rows of text).
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::default();
        config.mcp.max_result_kb = CAP_KB;
        let engine = Engine::open_in_memory(config).expect("an engine");
        engine
            .sql_blocking("CREATE TABLE mindsdb.t AS SELECT value AS id, repeat('\"', value % 50) AS s FROM generate_series(1, 300)")
            .expect("a table");
        engine
    })
}

/// Messages to start from, one per method family.
fn seeds() -> Vec<Vec<u8>> {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "query", "arguments": {"query": "SELECT * FROM t ORDER BY id", "context": {"db": "mindsdb"}}}}),
        json!({"jsonrpc": "2.0", "id": "a", "method": "resources/read", "params": {"uri": "schema://databases/mindsdb/tables/t/columns"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "schema://databases/mindsdb/tables"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "sample_table", "arguments": {"database_name": "mindsdb", "table_name": "t"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "completion/complete", "params": {"ref": {"type": "ref/prompt", "name": "sample_table"}, "argument": {"name": "table_name", "value": "t"}, "context": {"arguments": {"database_name": "mindsdb"}}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search_knowledge_base", "arguments": {"knowledge_base": "kb", "query": "x", "limit": 3, "filters": {"a": [1, 2]}}}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}),
    ]
    .iter()
    .map(|m| m.to_string().into_bytes())
    .collect()
}

#[test]
fn mutated_messages_get_an_answer_or_an_error_within_the_cap() {
    let engine = engine();
    let seeds = seeds();
    let versions = methods::VERSIONS;
    Target::new(1500).run(|u| {
        let seed = &seeds[u.choose_index(seeds.len())?];
        let version = versions[u.choose_index(versions.len())?];
        // Half the cases mutate the message's bytes (the reader), half one of its strings
        // (SQL, a URI, a name), so most of those still reach the methods.
        let bytes = if u.arbitrary::<bool>()? {
            mutate(u, seed)?
        } else {
            let mut value: Value = serde_json::from_slice(seed).expect("a seed is JSON");
            let mut strings = Vec::new();
            collect_strings(&mut value, &mut strings);
            let chosen = u.choose_index(strings.len())?;
            let text = strings[chosen].clone();
            let changed = String::from_utf8_lossy(&mutate(u, text.as_bytes())?).into_owned();
            replace_string(&mut value, &text, &changed);
            value.to_string().into_bytes()
        };
        note("message", &String::from_utf8_lossy(&bytes));
        let Ok(message) = Message::parse(&bytes) else {
            return Ok(());
        };
        let Message::Request { id, method, params } = message else {
            return Ok(());
        };
        let answer = if method == "initialize" {
            rpc::answer(&id, Ok(methods::initialize(&params).1))
        } else {
            let context = Context { engine, version };
            let outcome = engine.block_on(methods::answer(&context, &method, params));
            rpc::answer(&id, outcome)
        };
        assert_eq!(answer["id"], id, "the answer names its request");
        let size = answer.to_string().len() as u64;
        // The cap, and room for the envelope and a note.
        assert!(size <= CAP_KB * 1024 + 2048, "{size} bytes: {answer}");
        if let Some(result) = answer.get("result") {
            if let Some(Value::Bool(is_error)) = result.get("isError") {
                let text = &result["content"][0]["text"];
                assert!(
                    !*is_error || text.as_str().is_some_and(|t| !t.is_empty()),
                    "a tool error says why: {answer}"
                );
            }
        }
        Ok(())
    });
}

/// Every string in `value` (keys aside), in order.
fn collect_strings(value: &mut Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter_mut().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values_mut().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// Replaces the first string equal to `from` in `value` with `to`.
fn replace_string(value: &mut Value, from: &str, to: &str) -> bool {
    match value {
        Value::String(text) if text == from => {
            *text = to.to_string();
            true
        }
        Value::Array(items) => items.iter_mut().any(|v| replace_string(v, from, to)),
        Value::Object(map) => map.values_mut().any(|v| replace_string(v, from, to)),
        _ => false,
    }
}
