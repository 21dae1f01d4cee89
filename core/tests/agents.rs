//! Agents through the engine API and SQL, against a fake OpenAI-compatible server on 127.0.0.1
//! that answers from a script (plain replies, tool calls, streamed chunks, errors, silence).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mindlite::{AgentEvent, Config, Engine, ErrorKind, QueryRequest, Subject};
use serde_json::{json, Value};

/// One scripted answer of the fake provider.
enum Reply {
    Text(&'static str),
    Sql(&'static str),
    Fail(u16, &'static str),
    Hang(Duration),
}

/// A fake OpenAI-compatible provider: answers requests from its script in order (a text reply
/// "unscripted" when it runs out) and records every request body.
struct FakeLlm {
    base_url: String,
    script: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeLlm {
    fn start(script: Vec<Reply>) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (Arc::clone(&script), Arc::clone(&requests));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, r) = (Arc::clone(&s), Arc::clone(&r));
                std::thread::spawn(move || serve(stream, &s, &r));
            }
        });
        FakeLlm {
            base_url,
            script,
            requests,
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    fn script(&self, replies: Vec<Reply>) {
        self.script.lock().unwrap().extend(replies);
    }
}

fn serve(stream: TcpStream, script: &Mutex<VecDeque<Reply>>, requests: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: Value = serde_json::from_slice(&body).unwrap();
    let streamed = request["stream"] == json!(true);
    requests.lock().unwrap().push(request);
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Text("unscripted"));
    let mut stream = reader.into_inner();
    let (status, content_type, body) = match reply {
        Reply::Hang(pause) => {
            std::thread::sleep(pause);
            return;
        }
        Reply::Fail(status, message) => (
            status,
            "application/json",
            json!({"error": {"message": message, "type": "server_error"}}).to_string(),
        ),
        Reply::Text(text) if streamed => (200, "text/event-stream", text_chunks(text)),
        Reply::Sql(query) if streamed => (200, "text/event-stream", tool_chunks(query)),
        Reply::Text(text) => (
            200,
            "application/json",
            json!({"choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text}}]})
            .to_string(),
        ),
        Reply::Sql(query) => (
            200,
            "application/json",
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "sql_query", "arguments": json!({"query": query}).to_string()}}]}}]})
            .to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

fn text_chunks(text: &str) -> String {
    let mut out = chunk(json!({"role": "assistant", "content": ""}), None);
    for word in text.split_inclusive(' ') {
        out.push_str(&chunk(json!({"content": word}), None));
    }
    out.push_str(&chunk(json!({}), Some("stop")));
    out + "data: [DONE]\n\n"
}

fn tool_chunks(query: &str) -> String {
    let arguments = json!({"query": query}).to_string();
    let (a, b) = arguments.split_at(arguments.len() / 2);
    let mut out = chunk(
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                "function": {"name": "sql_query", "arguments": ""}}]}),
        None,
    );
    out.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}),
        None,
    ));
    out.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
        None,
    ));
    out.push_str(&chunk(json!({}), Some("tool_calls")));
    out + "data: [DONE]\n\n"
}

/// An engine whose default model is the fake provider, with sales and secrets tables.
fn engine_for(llm: &FakeLlm, timeout_secs: u64) -> Engine {
    let mut config = Config::default();
    config.llm.base_url = llm.base_url.clone();
    config.llm.model_name = "fake-model".into();
    config.llm.api_key = "sk-default".into();
    config.llm.timeout_secs = timeout_secs;
    let engine = Engine::open_in_memory(config).unwrap();
    for sql in [
        "CREATE TABLE sales (region VARCHAR, amount INT)",
        "INSERT INTO sales VALUES ('north', 10), ('south', 20), ('north', 30)",
        "CREATE TABLE secrets (k VARCHAR)",
        "INSERT INTO secrets VALUES ('TOPSECRET-42')",
    ] {
        engine.sql_blocking(sql).unwrap();
    }
    engine
}

fn create(engine: &Engine, spec: Value) -> mindlite::Result<mindlite::Agent> {
    engine.block_on(engine.create_agent("mindsdb", spec))
}

fn ask(engine: &Engine, name: &str, question: &str) -> mindlite::Result<mindlite::Answer> {
    engine.block_on(engine.ask_agent(
        "mindsdb",
        name,
        &json!([{"role": "user", "content": question}]),
    ))
}

fn sales_agent(engine: &Engine) {
    create(
        engine,
        json!({"name": "analyst", "data": {"tables": ["mindsdb.sales"]},
               "prompt_template": "You answer questions about sales."}),
    )
    .unwrap();
}

#[test]
fn an_answer_that_needed_sql_over_a_table() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT sum(amount) AS total FROM mindsdb.sales"),
        Reply::Text("The total is 60."),
    ]);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    let answer = ask(&engine, "analyst", "What is the total?").unwrap();
    assert_eq!(answer.content, "The total is 60.");
    assert_eq!(answer.trace_id.len(), 32);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    // The default model, its key, the tool, and the schema with sample rows in the system prompt.
    assert_eq!(requests[0]["model"], "fake-model");
    assert_eq!(requests[0]["tools"][0]["function"]["name"], "sql_query");
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You answer questions about sales."),
        "{system}"
    );
    assert!(
        system.contains("Table mindsdb.sales (region VARCHAR, amount INTEGER)"),
        "{system}"
    );
    assert!(system.contains("| north | 10 |"), "{system}");
    let tool = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_1");
    let result: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        json!({"columns": ["total"], "rows": [[60]], "truncated": false})
    );
}

/// An uploaded file is a table an agent can be given, by name or with `files.*`.
#[test]
fn an_agent_reads_an_uploaded_file() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT max(temp) AS top FROM files.weather"),
        Reply::Text("18."),
    ]);
    let engine = engine_for(&llm, 10);
    engine
        .block_on(engine.upload_file(
            "weather",
            b"city,temp\nOslo,4\nRome,18\n".to_vec(),
            None,
            None,
        ))
        .unwrap();
    let missing = create(
        &engine,
        json!({"name": "w", "data": {"tables": ["files.nosuch"]}}),
    )
    .unwrap_err();
    assert!(
        missing.message().contains("'nosuch'"),
        "{}",
        missing.message()
    );
    for (name, entry) in [("by_name", "files.weather"), ("all_files", "files.*")] {
        create(&engine, json!({"name": name, "data": {"tables": [entry]}})).unwrap();
    }
    assert_eq!(ask(&engine, "by_name", "Warmest?").unwrap().content, "18.");
    let requests = llm.requests();
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("Table files.weather (city VARCHAR, temp BIGINT)"),
        "{system}"
    );
    let tool = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let result: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["rows"], json!([[18]]), "{result}");
}

/// A datasource's tables (here a directory of CSV files) are tables an agent can be given with
/// `db.*`; native queries through it are never the agent's.
#[test]
fn an_agent_reads_a_datasource_but_sends_it_no_native_query() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT * FROM shop (SELECT 1)"),
        Reply::Sql("SELECT sum(qty) AS n FROM shop.orders"),
        Reply::Text("12."),
    ]);
    let engine = engine_for(&llm, 10);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("orders.csv"), "id,qty\n1,5\n2,7\n").unwrap();
    engine
        .sql_blocking(&format!(
            "CREATE DATABASE shop ENGINE = 'files', PARAMETERS = {{\"path\": \"{}\"}}",
            dir.path().display()
        ))
        .unwrap();
    create(
        &engine,
        json!({"name": "buyer", "data": {"tables": ["shop.*"]}}),
    )
    .unwrap();
    assert_eq!(ask(&engine, "buyer", "How many?").unwrap().content, "12.");
    let requests = llm.requests();
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("Table shop.orders (id BIGINT, qty BIGINT)"),
        "{system}"
    );
    let tool_result = |i: usize| -> String {
        let last = requests[i]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        last["content"].as_str().unwrap().to_string()
    };
    assert!(
        tool_result(1).contains("not for agents"),
        "{}",
        tool_result(1)
    );
    let rows: Value = serde_json::from_str(&tool_result(2)).unwrap();
    assert_eq!(rows["rows"], json!([[12]]), "{rows}");
}

#[test]
fn a_table_outside_the_agents_data_is_refused_and_never_reaches_the_model() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT k FROM secrets"),
        Reply::Sql("SELECT * FROM mindsdb.sales s JOIN information_schema.tables t ON true"),
        Reply::Sql("WITH x AS (SELECT * FROM mindsdb.secrets) SELECT * FROM x"),
        Reply::Text("I cannot see that."),
    ]);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    assert_eq!(
        ask(&engine, "analyst", "secrets?").unwrap().content,
        "I cannot see that."
    );
    let requests = llm.requests();
    let everything = serde_json::to_string(&requests).unwrap();
    assert!(!everything.contains("TOPSECRET-42"), "{everything}");
    for (i, request) in requests.iter().enumerate().skip(1) {
        let tool = request["messages"].as_array().unwrap().last().unwrap();
        let content = tool["content"].as_str().unwrap();
        assert!(content.contains("Query refused"), "step {i}: {content}");
    }
}

/// An agent is a table in SQL, but not to an agent's SQL tool: an agent whose data is a whole
/// project cannot ask itself or another agent (a loop of model calls a prompt could start).
#[test]
fn an_agents_tool_cannot_ask_an_agent() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT answer FROM mindsdb.everything WHERE question = 'again'"),
        Reply::Sql("SELECT answer FROM mindsdb.analyst WHERE question = 'you?'"),
        Reply::Text("No recursion."),
    ]);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    create(
        &engine,
        json!({"name": "everything", "data": {"tables": ["mindsdb.*"]}}),
    )
    .unwrap();
    assert_eq!(
        ask(&engine, "everything", "loop?").unwrap().content,
        "No recursion."
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "one question, two refused tool calls");
    for request in requests.iter().skip(1) {
        let tool = request["messages"].as_array().unwrap().last().unwrap();
        let content = tool["content"].as_str().unwrap();
        assert!(
            content.contains("Query refused") && content.contains("agent"),
            "{content}"
        );
    }
}

#[test]
fn tool_calls_that_would_write_are_refused_and_change_nothing() {
    let writes = [
        "INSERT INTO mindsdb.sales VALUES ('east', 1)",
        "UPDATE mindsdb.sales SET amount = 0",
        "DELETE FROM mindsdb.sales",
        "DROP TABLE mindsdb.sales",
        "CREATE TABLE mindsdb.copy AS SELECT * FROM mindsdb.sales",
        "SELECT 1; DROP TABLE mindsdb.sales",
    ];
    let mut script: Vec<Reply> = writes.iter().map(|w| Reply::Sql(w)).collect();
    script.push(Reply::Text("done"));
    let llm = FakeLlm::start(script);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    assert_eq!(ask(&engine, "analyst", "wreck it").unwrap().content, "done");
    let requests = llm.requests();
    for (write, request) in writes.iter().zip(requests.iter().skip(1)) {
        let tool = request["messages"].as_array().unwrap().last().unwrap();
        assert!(
            tool["content"].as_str().unwrap().contains("Query refused"),
            "{write}: {tool}"
        );
    }
    assert_eq!(
        cells(&engine, "SELECT count(*), sum(amount) FROM sales"),
        [["3", "60"]]
    );
    assert!(engine.sql_blocking("SELECT * FROM copy").is_err());
}

#[test]
fn provider_down_slow_or_failing_is_a_clear_upstream_error() {
    // Down: nothing listens on the port any more.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let llm = FakeLlm::start(vec![
        Reply::Hang(Duration::from_secs(10)),
        Reply::Fail(500, "The engine is overloaded"),
    ]);
    let engine = engine_for(&llm, 2);
    create(
        &engine,
        json!({"name": "down", "model": {"base_url": format!("http://127.0.0.1:{port}/v1")}}),
    )
    .unwrap();
    sales_agent(&engine);
    let err = ask(&engine, "down", "hi").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upstream);
    assert!(err.message().contains("cannot be reached"), "{err}");
    let started = Instant::now();
    let err = ask(&engine, "analyst", "hi").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upstream);
    assert!(err.message().contains("did not answer within 2 s"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let err = ask(&engine, "analyst", "hi").unwrap_err();
    assert!(
        err.message().contains("500") && err.message().contains("The engine is overloaded"),
        "{err}"
    );
}

#[test]
fn records_follow_mindsdbs_rules() {
    let llm = FakeLlm::start(Vec::new());
    let engine = engine_for(&llm, 10);
    // Defaults, legacy model fields, the wire shape.
    let a = create(&engine, json!({"name": "Alpha", "model_name": "m1", "provider": "openai",
                                   "model": null, "data": null, "prompt_template": null, "params": {}}))
        .unwrap();
    let wire = a.to_wire_json();
    let keys: Vec<&str> = wire
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "created_at",
            "id",
            "model",
            "name",
            "project_id",
            "updated_at"
        ]
    );
    assert_eq!(
        wire["model"],
        json!({"model_name": "m1", "provider": "openai"})
    );
    let b = create(&engine, json!({"name": "beta"})).unwrap();
    assert_eq!(
        b.to_wire_json()["model"],
        json!({"provider": "openai", "model_name": "fake-model"})
    );
    // Refusals name what was wrong.
    let refused = |spec: Value| create(&engine, spec).unwrap_err();
    assert_eq!(
        refused(json!({"name": "alpha"})).kind(),
        ErrorKind::Conflict
    );
    assert!(refused(json!({"name": "c", "foo": 1}))
        .message()
        .contains("Parameter 'foo' is not allowed"));
    assert!(refused(json!({"name": "c", "params": {"bar": 1}}))
        .message()
        .contains("Parameter 'bar' is not allowed"));
    assert!(
        refused(json!({"name": "c", "data": {"tables": ["mindsdb.nope"]}}))
            .message()
            .contains("'nope'")
    );
    assert!(
        refused(json!({"name": "c", "data": {"tables": ["nodb.*"]}}))
            .message()
            .contains("'nodb'")
    );
    assert!(
        refused(json!({"name": "c", "data": {"knowledge_bases": ["mindsdb.kb"]}}))
            .message()
            .contains("'kb'")
    );
    assert!(refused(json!({"prompt_template": "x"}))
        .message()
        .contains("Missing \"name\""));
    assert!(
        refused(json!({"name": "c", "model": {"base_url": "ftp://x"}}))
            .message()
            .contains("base_url")
    );
    let err = engine
        .block_on(engine.create_agent("nope", json!({"name": "x"})))
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (ErrorKind::NotFound, "Project with name nope does not exist")
    );
    // Update: merge, null drops, rename, conflicts, no create.
    let update =
        |name: &str, changes: Value| engine.block_on(engine.update_agent("mindsdb", name, changes));
    let a = update(
        "alpha",
        json!({"prompt_template": "p", "data": {"tables": ["mindsdb.sales"]}}),
    )
    .unwrap();
    assert_eq!(a.to_wire_json()["prompt_template"], "p");
    assert_eq!(a.to_wire_json()["model"]["model_name"], "m1");
    let a = update(
        "ALPHA",
        json!({"prompt_template": null, "params": {"timeout": 30}}),
    )
    .unwrap();
    assert!(a.to_wire_json().get("prompt_template").is_none());
    assert_eq!(a.to_wire_json()["params"], json!({"timeout": 30}));
    assert_eq!(
        update("alpha", json!({"name": "beta"})).unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let renamed = update("alpha", json!({"name": "gamma"})).unwrap();
    assert_eq!((renamed.name.as_str(), renamed.id), ("gamma", a.id));
    assert_eq!(
        update("alpha", json!({"prompt_template": "x"}))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert!(update("gamma", json!({"mode": "chat"})).is_err());
    let names: Vec<String> = engine
        .list_agents("mindsdb")
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["beta", "gamma"]);
    engine
        .block_on(engine.delete_agent("mindsdb", "Beta"))
        .unwrap();
    assert_eq!(
        engine.get_agent("mindsdb", "beta").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        engine
            .block_on(engine.delete_agent("mindsdb", "beta"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

fn cells(engine: &Engine, sql: &str) -> Vec<Vec<String>> {
    let rows = engine.sql_blocking(sql).unwrap();
    let mut out = Vec::new();
    for batch in &rows.batches {
        for row in 0..batch.num_rows() {
            out.push(
                (0..batch.num_columns())
                    .map(|c| {
                        mindlite::arrow::util::display::array_value_to_string(batch.column(c), row)
                            .unwrap()
                    })
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn agents_in_sql() {
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT count(*) AS n FROM sales"),
        Reply::Text("There are 3 sales, it's true."),
    ]);
    let engine = engine_for(&llm, 10);
    engine.sql_blocking(&format!(
        "CREATE AGENT mindsdb.bot USING model = {{\"provider\": \"openai\", \"model_name\": \"m\", \"base_url\": \"{}\", \"api_key\": \"sk-bot\"}}, \
         data = {{\"tables\": [\"mindsdb.sales\"]}}, prompt_template = 'You count.'",
        llm.base_url
    ))
    .unwrap();
    engine
        .sql_blocking("CREATE AGENT flat USING provider = 'openai', model_name = 'm2', timeout = 5")
        .unwrap();
    assert!(engine
        .sql_blocking("CREATE AGENT IF NOT EXISTS flat USING model_name = 'x'")
        .is_ok());
    assert!(engine
        .sql_blocking("CREATE AGENT flat USING model_name = 'x'")
        .is_err());
    let shown = cells(&engine, "SHOW AGENTS");
    assert_eq!(shown.len(), 2);
    assert_eq!(shown[0][..2], ["bot", "mindsdb"]);
    // MODEL holds the model's parameters as JSON, as MindsDB fills it, its key masked.
    let model: Value = serde_json::from_str(&shown[0][2]).unwrap();
    assert_eq!(model["model_name"], "m");
    assert_eq!(model["api_key"], "******");
    assert!(
        shown[0][3].contains("\"api_key\":\"******\"") && !shown[0][3].contains("sk-bot"),
        "{}",
        shown[0][3]
    );
    assert_eq!(
        cells(
            &engine,
            "SELECT name, project, model FROM information_schema.agents WHERE name = 'flat'"
        ),
        [[
            "flat",
            "mindsdb",
            r#"{"model_name":"m2","provider":"openai"}"#
        ]]
    );
    let answer = cells(
        &engine,
        "SELECT answer, upper(question) FROM mindsdb.bot WHERE question = 'How many sales?'",
    );
    assert_eq!(
        answer,
        [["There are 3 sales, it's true.", "HOW MANY SALES?"]]
    );
    assert_eq!(llm.requests()[0]["model"], "m");
    let missing = engine.sql_blocking("SELECT answer FROM bot").unwrap_err();
    assert!(missing.message().contains("WHERE question"), "{missing}");
    engine
        .sql_blocking("ALTER AGENT bot USING prompt_template = 'Count well.'")
        .unwrap();
    assert_eq!(
        engine.get_agent("mindsdb", "bot").unwrap().to_wire_json()["prompt_template"],
        "Count well."
    );
    engine.sql_blocking("DROP AGENT bot").unwrap();
    engine.sql_blocking("DROP AGENT IF EXISTS bot").unwrap();
    assert!(engine.sql_blocking("DROP AGENT bot").is_err());
    // Dropping a project drops its agents.
    engine
        .sql_blocking("CREATE PROJECT p2; CREATE AGENT p2.a USING model_name = 'x'")
        .unwrap();
    engine
        .sql_blocking("DROP PROJECT p2; CREATE PROJECT p2")
        .unwrap();
    assert!(engine.list_agents("p2").unwrap().is_empty());
    // A failing provider is an error result.
    llm.script(vec![Reply::Fail(503, "try later")]);
    let result = engine.query_blocking(QueryRequest::new(
        "SELECT answer FROM flat WHERE question = 'x'",
    ));
    let err = engine.block_on(result.collect()).unwrap_err();
    assert!(err.message().contains("try later"), "{err}");
}

/// An agent is a table of `(question, answer)`: it joins with stored tables, nests in
/// subqueries and takes expressions, and is asked when the query runs (EXPLAIN asks nothing).
#[test]
fn an_agent_is_a_table_that_joins_and_nests() {
    let llm = FakeLlm::start(vec![Reply::Text("Because."), Reply::Text("seven")]);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    let explained = cells(
        &engine,
        "EXPLAIN SELECT answer FROM analyst WHERE question = 'q'",
    );
    assert!(!explained.is_empty());
    assert!(llm.requests().is_empty(), "EXPLAIN asked the agent");
    let joined = cells(
        &engine,
        "SELECT s.region, s.amount, a.answer FROM sales AS s, mindsdb.analyst AS a \
         WHERE a.question = 'Why?' AND s.amount > 15 ORDER BY s.amount",
    );
    assert_eq!(
        joined,
        [["south", "20", "Because."], ["north", "30", "Because."]]
    );
    let nested = cells(
        &engine,
        "SELECT upper(x.answer), length(x.question) FROM \
         (SELECT * FROM analyst WHERE 'again' = question) AS x",
    );
    assert_eq!(nested, [["SEVEN", "5"]]);
    assert_eq!(llm.requests().len(), 2, "one question each");
    // Two different questions at once: no row is both, and nothing is asked.
    assert!(cells(
        &engine,
        "SELECT answer FROM analyst WHERE question = 'a' AND question = 'b'"
    )
    .is_empty());
    assert_eq!(llm.requests().len(), 2);
    // A stored table of the agent's name comes first.
    engine
        .sql_blocking("CREATE TABLE analyst (question VARCHAR, answer VARCHAR)")
        .unwrap();
    assert!(cells(&engine, "SELECT answer FROM analyst WHERE question = 'x'").is_empty());
    assert_eq!(llm.requests().len(), 2);
}

#[test]
fn a_streamed_answer_reports_its_steps_and_ends() {
    let llm = FakeLlm::start(vec![
        Reply::Sql(
            "SELECT region, sum(amount) AS total FROM sales GROUP BY region ORDER BY region",
        ),
        Reply::Text("North sold 40 and south 20."),
        Reply::Fail(401, "Incorrect API key provided"),
    ]);
    let engine = engine_for(&llm, 10);
    sales_agent(&engine);
    let events = |question: &str| {
        let mut stream = engine
            .block_on(engine.ask_agent_stream(
                "mindsdb",
                "analyst",
                &json!([{"question": question, "answer": null}]),
            ))
            .unwrap();
        let mut events = Vec::new();
        while let Some(event) = engine.block_on(stream.next_event()) {
            events.push(event);
        }
        events
    };
    let got = events("by region?");
    assert_eq!(
        got[..2],
        [
            AgentEvent::Sql(
                "SELECT region, sum(amount) AS total FROM sales GROUP BY region ORDER BY region"
                    .into()
            ),
            AgentEvent::Data(
                "| region | total |\n| --- | --- |\n| north | 40 |\n| south | 20 |\n".into()
            ),
        ]
    );
    let text: String = got[2..got.len() - 1]
        .iter()
        .map(|e| match e {
            AgentEvent::Text(t) => t.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(text, "North sold 40 and south 20.");
    assert!(got.len() > 4, "the answer came in pieces: {got:?}");
    assert_eq!(got.last(), Some(&AgentEvent::End));
    assert_eq!(llm.requests()[0]["stream"], true);
    let failed = events("again?");
    assert!(
        matches!(&failed[0], AgentEvent::Error(m) if m.contains("Incorrect API key provided")),
        "{failed:?}"
    );
    assert_eq!(failed[1], AgentEvent::End);
    assert_eq!(failed[1].to_sse_frame(), b"data: {\"type\": \"end\"}\n\n");
    assert_eq!(
        AgentEvent::Sql("SELECT 1, 2".into()).to_sse_frame(),
        b"data: {\"content\": \"SELECT 1, 2\", \"type\": \"sql\"}\n\n"
    );
    assert!(engine
        .block_on(engine.ask_agent_stream("mindsdb", "nope", &json!([])))
        .is_err());
}

#[test]
fn agents_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let engine = Engine::open(&path, Config::default()).unwrap();
    engine
        .block_on(engine.create_agent("mindsdb", json!({"name": "keeper", "prompt_template": "x"})))
        .unwrap();
    engine.close();
    let engine = Engine::open(&path, Config::default()).unwrap();
    assert_eq!(
        engine
            .get_agent("mindsdb", "KEEPER")
            .unwrap()
            .to_wire_json()["prompt_template"],
        "x"
    );
}

/// PostgreSQL tells `orders` from `"Orders"`: an agent given `pg.orders` reads that table and
/// never `pg."Orders"`, as the remote database compares names (exactly, unquoted ones folded).
#[test]
fn remote_table_names_are_compared_as_postgresql_compares_them() {
    let Ok(url) = std::env::var("PGTEST_URL") else {
        assert!(std::env::var("CI").is_err(), "PGTEST_URL is not set");
        eprintln!("SKIPPED: PGTEST_URL is not set");
        return;
    };
    let pg: tokio_postgres::Config = url.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = pg.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(
                "DROP SCHEMA IF EXISTS agent_case CASCADE; CREATE SCHEMA agent_case; \
                 CREATE TABLE agent_case.orders (n INT); INSERT INTO agent_case.orders VALUES (1), (2); \
                 CREATE TABLE agent_case.\"Orders\" (secret TEXT); \
                 INSERT INTO agent_case.\"Orders\" VALUES ('UPPER-SECRET');",
            )
            .await
            .unwrap();
    });
    let host = match &pg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)]
        _ => panic!("PGTEST_URL must name a TCP host"),
    };
    let llm = FakeLlm::start(vec![
        Reply::Sql("SELECT * FROM pg.\"Orders\""),
        Reply::Sql("SELECT count(*) AS n FROM pg.ORDERS"),
        Reply::Text("2."),
    ]);
    let engine = engine_for(&llm, 10);
    engine
        .sql_blocking(&format!(
            "CREATE DATABASE pg WITH ENGINE = 'postgres', PARAMETERS = {{\"host\": \"{host}\", \"port\": {}, \"database\": \"{}\", \"user\": \"{}\", \"schema\": \"agent_case\"}}",
            pg.get_ports()[0],
            pg.get_dbname().unwrap(),
            pg.get_user().unwrap()
        ))
        .unwrap();
    create(
        &engine,
        json!({"name": "clerk", "data": {"tables": ["pg.orders"]}}),
    )
    .unwrap();
    assert_eq!(ask(&engine, "clerk", "How many?").unwrap().content, "2.");
    let requests = llm.requests();
    let everything = serde_json::to_string(&requests).unwrap();
    assert!(!everything.contains("UPPER-SECRET"), "{everything}");
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("Table pg.orders"), "{system}");
    assert!(!system.contains("Table pg.Orders"), "{system}");
    let tool = |i: usize| -> String {
        let last = requests[i]["messages"].as_array().unwrap().last().unwrap();
        last["content"].as_str().unwrap().to_string()
    };
    assert!(tool(1).contains("Query refused"), "{}", tool(1));
    assert!(tool(2).contains("[[2]]"), "{}", tool(2));
}

#[test]
fn not_found_and_conflict_errors_say_what_they_are_about() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let subject = |result: mindlite::Result<_>| {
        let error = result.map(|_: ()| ()).unwrap_err();
        (error.kind(), error.subject())
    };
    assert_eq!(
        subject(engine.get_agent("nosuch", "a").map(|_| ())),
        (ErrorKind::NotFound, Some(Subject::Project))
    );
    assert_eq!(
        subject(engine.get_agent("mindsdb", "a").map(|_| ())),
        (ErrorKind::NotFound, Some(Subject::Agent))
    );
    assert_eq!(
        subject(engine.get_model("mindsdb", "m", None).map(|_| ())),
        (ErrorKind::NotFound, Some(Subject::Model))
    );
    assert_eq!(
        subject(engine.get_model("nosuch", "m", None).map(|_| ())),
        (ErrorKind::NotFound, Some(Subject::Project))
    );
    let spec = json!({"name": "a", "model": {"model_name": "m", "provider": "openai"}});
    engine
        .block_on(engine.create_agent("mindsdb", spec.clone()))
        .unwrap();
    assert_eq!(
        subject(
            engine
                .block_on(engine.create_agent("mindsdb", spec))
                .map(|_| ())
        ),
        (ErrorKind::Conflict, Some(Subject::Agent))
    );
}

/// A knowledge base named without its project in an agent's `data.knowledge_bases` is the
/// default project's, as MindsDB resolves it, whichever project the agent is in.
#[test]
fn bare_knowledge_base_names_are_the_default_projects() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking("CREATE KNOWLEDGE_BASE mindsdb.notes")
        .unwrap();
    engine.sql_blocking("CREATE PROJECT p").unwrap();
    let body = json!({"name": "helper", "data": {"knowledge_bases": ["notes"]}});
    let agent = engine.block_on(engine.create_agent("p", body)).unwrap();
    assert_eq!(
        agent.to_wire_json()["data"]["knowledge_bases"],
        json!(["mindsdb.notes"])
    );
    engine
        .sql_blocking("CREATE AGENT p.other USING data = {\"knowledge_bases\": [\"notes\"]}")
        .unwrap();
    let other = engine.get_agent("p", "other").unwrap();
    assert_eq!(
        other.to_wire_json()["data"]["knowledge_bases"],
        json!(["mindsdb.notes"])
    );
    // One in no project at all is refused by name.
    let missing = engine.block_on(engine.create_agent(
        "p",
        json!({"name": "lost", "data": {"knowledge_bases": ["nowhere"]}}),
    ));
    assert!(missing.unwrap_err().message().contains("nowhere"));
}
