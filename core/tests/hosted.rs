//! The hosted edition: users and API keys, tenant isolation through SQL and the engine API,
//! plan quotas (atomic under concurrency, freed on delete, windowed questions given back when
//! they fail), `/limits/` figures, and minds answering through a fake provider on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mindlite::{ChatRequest, Config, Edition, Engine, ErrorKind, PlanConfig, QueryRequest};
use serde_json::{json, Value};

/// A provider that answers every chat request with "answer N" (N counting from 1), or with a
/// 500 while `failing` is set, or only after 20 s while `hanging` is set.
struct Provider {
    base_url: String,
    failing: Arc<std::sync::atomic::AtomicBool>,
    hanging: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Provider {
    fn start() -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hanging = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let (f, h, c) = (
            Arc::clone(&failing),
            Arc::clone(&hanging),
            Arc::clone(&calls),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (f, h, c) = (Arc::clone(&f), Arc::clone(&h), Arc::clone(&c));
                std::thread::spawn(move || {
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
                    let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                    if h.load(Ordering::SeqCst) {
                        std::thread::sleep(std::time::Duration::from_secs(20));
                    }
                    let (status, body) = if f.load(Ordering::SeqCst) {
                        (500, json!({"error": {"message": "provider broke"}}))
                    } else {
                        (
                            200,
                            json!({"choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": format!("answer {n}")}}]}),
                        )
                    };
                    let body = body.to_string();
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let mut stream = reader.into_inner();
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(body.as_bytes());
                });
            }
        });
        Provider {
            base_url,
            failing,
            hanging,
            calls,
        }
    }
}

/// A hosted engine with a `tiny` default plan: 2 minds, 1 datasource, 3 questions per hour.
fn hosted(provider: Option<&Provider>) -> Engine {
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.hosted.plans.insert(
        "tiny".into(),
        PlanConfig {
            max_minds: 2,
            max_datasources: 1,
            questions_per_window: 3,
            window_secs: 3600,
            callbacks: false,
            ..PlanConfig::default()
        },
    );
    config.hosted.default_plan = "tiny".into();
    if let Some(provider) = provider {
        config.llm.base_url = provider.base_url.clone();
        config.llm.model_name = "fake".into();
        config.llm.timeout_secs = 10;
    }
    Engine::open_in_memory(config).unwrap()
}

/// A user named `name` with one key, and the handle that key opens.
fn user(engine: &Engine, name: &str) -> (String, Engine) {
    engine.block_on(engine.create_user(name, None)).unwrap();
    let key = engine.block_on(engine.create_api_key(name)).unwrap().key;
    let handle = engine.as_user(&key).unwrap();
    (key, handle)
}

fn rows(engine: &Engine, sql: &str) -> mindlite::Result<Vec<Vec<Value>>> {
    let result = engine.block_on(engine.query(QueryRequest::new(sql)));
    let body = engine.block_on(mindlite::encode_document(result));
    let doc: Value = serde_json::from_slice(&body).unwrap();
    if doc["type"] == "error" {
        return Err(mindlite::Error::invalid(
            doc["error_message"].as_str().unwrap_or_default(),
        ));
    }
    Ok(doc["data"]
        .as_array()
        .map(|rows| rows.iter().map(|r| r.as_array().unwrap().clone()).collect())
        .unwrap_or_default())
}

#[test]
fn users_keys_and_their_errors() {
    let engine = hosted(None);
    let alice = engine.block_on(engine.create_user("alice", None)).unwrap();
    assert_eq!(alice.plan, "tiny");
    let err = engine
        .block_on(engine.create_user("ALICE", None))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let err = engine
        .block_on(engine.create_user("bob", Some("gold")))
        .unwrap_err();
    assert!(err.message().contains("gold"), "{err}");
    let err = engine
        .block_on(engine.create_user("no spaces", None))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");

    let issued = engine.block_on(engine.create_api_key("alice")).unwrap();
    assert!(issued.key.starts_with("mlk_") && issued.key.len() > 40);
    let handle = engine.as_user(&issued.key).unwrap();
    assert_eq!(handle.tenant().0, alice.id);
    // The listing shows the key's id and prefix, never the key.
    let listed = serde_json::to_string(&engine.list_users().unwrap()).unwrap();
    assert!(!listed.contains(&issued.key) && listed.contains(&issued.key[..8]));

    // A user's handle manages no users.
    let err = handle.list_users().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    let err = handle
        .block_on(handle.create_user("mallory", None))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");

    assert_eq!(
        engine.as_user("mlk_nope").unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    engine
        .block_on(engine.update_user("alice", None, Some(true)))
        .unwrap();
    let err = engine.as_user(&issued.key).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(err.message().contains("disabled"), "{err}");
    engine
        .block_on(engine.update_user("alice", Some("pro"), Some(false)))
        .unwrap();
    assert_eq!(
        engine.as_user(&issued.key).unwrap().limits().unwrap().plan,
        "pro"
    );
    let user = engine
        .block_on(engine.revoke_api_key("alice", issued.id))
        .unwrap();
    assert!(user.api_keys.is_empty());
    assert_eq!(
        engine.as_user(&issued.key).unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    let err = engine
        .block_on(engine.revoke_api_key("alice", issued.id))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}

#[test]
fn a_login_token_acts_as_the_user_and_stops_when_the_user_is_disabled() {
    let engine = hosted(None);
    let (key, handle) = user(&engine, "alice");
    let wrong = engine
        .block_on(engine.login(Some("bob"), Some(&key)))
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::Unauthorized);
    let token = engine
        .block_on(engine.login(Some("Alice"), Some(&key)))
        .unwrap()
        .token;
    assert_eq!(
        engine.authenticate(&token).unwrap().tenant(),
        handle.tenant()
    );
    engine
        .block_on(engine.update_user("alice", None, Some(true)))
        .unwrap();
    assert_eq!(
        engine.authenticate(&token).unwrap_err().kind(),
        ErrorKind::Forbidden
    );
    engine
        .block_on(engine.update_user("alice", None, Some(false)))
        .unwrap();
    // Revoking the key that opened a session ends the session.
    let id = engine.get_user("alice").unwrap().api_keys[0].id;
    engine.block_on(engine.revoke_api_key("alice", id)).unwrap();
    assert_eq!(
        engine.authenticate(&token).unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
}

#[test]
fn operator_tokens_and_keys_cross_no_edition() {
    // A token the operator got in a local run of the file is refused once it is hosted.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let mut local = Config::default();
    local.auth.username = "admin".into();
    local.auth.password = "secret".into();
    let engine = Engine::open(&path, local.clone()).unwrap();
    let token = engine
        .block_on(engine.login(Some("admin"), Some("secret")))
        .unwrap()
        .token;
    engine.close();
    let hosted = Config {
        edition: Edition::Hosted,
        ..local.clone()
    };
    let engine = Engine::open(&path, hosted).unwrap();
    assert_eq!(
        engine.authenticate(&token).unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    engine.block_on(engine.create_user("alice", None)).unwrap();
    let key = engine.block_on(engine.create_api_key("alice")).unwrap().key;
    engine.close();
    // And an API key means nothing to the local edition.
    let engine = Engine::open(&path, local).unwrap();
    assert_eq!(
        engine.authenticate(&key).unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    assert!(engine.authenticate(&token).is_ok());
}

#[test]
fn tenants_never_see_each_others_objects() {
    let engine = hosted(None);
    let (_, a) = user(&engine, "alice");
    let (_, b) = user(&engine, "bob");
    for (handle, value) in [(&a, 1), (&b, 2)] {
        for sql in [
            "CREATE TABLE t (v INT)".to_string(),
            format!("INSERT INTO t VALUES ({value})"),
            "CREATE PROJECT shared_name".to_string(),
        ] {
            rows(handle, &sql).unwrap();
        }
    }
    rows(&a, "CREATE PROJECT only_alice").unwrap();
    rows(&a, "CREATE TABLE only_alice.secret (s VARCHAR)").unwrap();
    assert_eq!(rows(&a, "SELECT v FROM t").unwrap(), vec![vec![json!(1)]]);
    assert_eq!(rows(&b, "SELECT v FROM t").unwrap(), vec![vec![json!(2)]]);

    // Another tenant's names read exactly as names nobody has.
    let theirs = rows(&b, "SELECT * FROM only_alice.secret").unwrap_err();
    let nobodys = rows(&b, "SELECT * FROM nobody_has.secret").unwrap_err();
    assert_eq!(
        theirs.message().replace("only_alice", "X"),
        nobodys.message().replace("nobody_has", "X")
    );
    for sql in [
        "SELECT name FROM information_schema.databases",
        "SHOW DATABASES",
        "SELECT table_name FROM information_schema.tables",
    ] {
        let text = format!("{:?}", rows(&b, sql).unwrap());
        assert!(!text.contains("only_alice"), "{sql}: {text}");
    }
    assert!(rows(&b, "DROP DATABASE only_alice").is_err());
    assert!(rows(&b, "INSERT INTO only_alice.secret VALUES ('x')").is_err());
    assert_eq!(
        b.list_projects()
            .unwrap()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>(),
        ["mindsdb", "shared_name"]
    );
    assert!(b.get_project("only_alice").is_err());
    // The operator's own catalog is a third, separate one.
    assert!(rows(&engine, "SELECT v FROM t").is_err());

    // Minds and agents by the same name live side by side.
    for handle in [&a, &b] {
        handle
            .block_on(handle.create_mind(json!({"name": "m"})))
            .unwrap();
    }
    a.block_on(a.update_mind("m", json!({"parameters": {"prompt_template": "alice"}})))
        .unwrap();
    assert!(b.get_mind("m").unwrap().parameters.is_empty());
    a.block_on(a.create_mind(json!({"name": "alices"})))
        .unwrap();
    assert_eq!(
        b.get_mind("alices").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        b.block_on(b.delete_mind("alices")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(b.list_minds().unwrap().len(), 1);
}

#[test]
fn minds_quota_holds_under_concurrency_and_a_delete_frees_a_slot() {
    let engine = hosted(None);
    let (_, alice) = user(&engine, "alice");
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let alice = alice.clone();
            engine.spawn(async move { alice.create_mind(json!({"name": format!("m{i}")})).await })
        })
        .collect();
    let results: Vec<_> = tasks
        .into_iter()
        .map(|t| engine.block_on(t).unwrap())
        .collect();
    let created = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(created, 2);
    let refused = results.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert_eq!(refused.kind(), ErrorKind::QuotaExceeded);
    assert!(
        refused.message().contains("minds") && refused.message().contains("limit 2"),
        "{refused}"
    );
    assert_eq!(refused.retry_after(), None);
    let limits = alice.limits().unwrap();
    assert_eq!((limits.minds.used, limits.minds.remaining), (2, 0));

    let first = alice.list_minds().unwrap()[0].name.clone();
    alice.block_on(alice.delete_mind(&first)).unwrap();
    assert_eq!(alice.limits().unwrap().minds.used, 1);
    alice
        .block_on(alice.create_mind(json!({"name": "again"})))
        .unwrap();
    // Another user's slots are its own.
    let (_, bob) = user(&engine, "bob");
    bob.block_on(bob.create_mind(json!({"name": "m0"})))
        .unwrap();
}

#[test]
fn questions_are_counted_per_window_and_ones_that_never_reached_the_provider_given_back() {
    let provider = Provider::start();
    let engine = hosted(Some(&provider));
    let (_, alice) = user(&engine, "alice");
    alice
        .block_on(alice.create_mind(json!({"name": "helper"})))
        .unwrap();
    let question = ChatRequest::from_chat_completions(
        br#"{"model": "helper", "messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .unwrap();
    let before = alice.limits().unwrap().questions;
    assert_eq!((before.used, before.resets_at.clone()), (0, None));

    let answer = alice.block_on(alice.ask_mind(&question)).unwrap();
    assert!(answer.content.starts_with("answer"));
    assert_eq!(answer.mind, "helper");
    let answer = answer.to_wire_json();
    assert_eq!(answer["object"], "chat.completion");
    assert!(answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("answer"));

    // A question that failed after the provider answered cost a provider call: it counts.
    provider.failing.store(true, Ordering::SeqCst);
    let err = alice.block_on(alice.ask_mind(&question)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upstream, "{err}");
    assert_eq!(alice.limits().unwrap().questions.used, 2);
    provider.failing.store(false, Ordering::SeqCst);

    // One refused before reaching any provider (the egress policy) costs nothing.
    alice
        .sql_blocking(
            "CREATE AGENT mindsdb.local USING model = {\"provider\": \"openai\", \"model_name\": \"x\", \"base_url\": \"http://localhost:9/v1\"}",
        )
        .unwrap();
    let refused = alice
        .block_on(alice.ask_agent(
            "mindsdb",
            "local",
            &json!([{"role": "user", "content": "hi"}]),
        ))
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Forbidden, "{refused}");
    assert!(refused.message().contains("egress policy"), "{refused}");
    assert_eq!(alice.limits().unwrap().questions.used, 2);

    let responses = ChatRequest::from_responses(br#"{"model": "helper", "input": "hi"}"#).unwrap();
    let response = alice
        .block_on(alice.ask_mind(&responses))
        .unwrap()
        .to_wire_json();
    assert_eq!(response["object"], "response");
    assert_eq!(response["output"][0]["content"][0]["type"], "output_text");
    let used = alice.limits().unwrap().questions;
    assert_eq!((used.used, used.remaining), (3, 0));
    assert!(used.resets_at.is_some());

    let calls = provider.calls.load(Ordering::SeqCst);
    let over = alice.block_on(alice.ask_mind(&question)).unwrap_err();
    assert_eq!(over.kind(), ErrorKind::QuotaExceeded);
    let retry = over.retry_after().unwrap();
    assert!((3500..=3600).contains(&retry), "{retry}");
    assert!(over.message().contains("questions"), "{over}");
    // Refused before the provider was called.
    assert_eq!(provider.calls.load(Ordering::SeqCst), calls);

    // The operator's handle has no quotas; an unknown mind is NotFound and costs nothing.
    let missing = ChatRequest::from_chat_completions(
        br#"{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .unwrap();
    assert_eq!(
        alice.block_on(alice.ask_mind(&missing)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

/// Waits (up to 10 s) until the provider has been called `n` times in all.
fn wait_for_calls(provider: &Provider, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while provider.calls.load(Ordering::SeqCst) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the provider was not called"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn abandoned_questions_stay_counted_once_the_provider_was_called() {
    let provider = Provider::start();
    let engine = hosted(Some(&provider));
    let (_, alice) = user(&engine, "alice");
    alice
        .block_on(alice.create_mind(json!({"name": "helper"})))
        .unwrap();
    alice
        .sql_blocking("CREATE AGENT mindsdb.helper_agent USING model_name = 'fake'")
        .unwrap();
    // Refused before any provider call (the egress policy): given back.
    let refused = alice
        .sql_blocking(
            "CREATE AGENT mindsdb.nowhere USING model = {\"provider\": \"openai\", \"model_name\": \"x\", \"base_url\": \"http://localhost:9/v1\"}",
        )
        .and_then(|_| {
            alice.block_on(alice.ask_agent(
                "mindsdb",
                "nowhere",
                &json!([{"role": "user", "content": "hi"}]),
            ))
        })
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Forbidden, "{refused}");
    assert_eq!(alice.limits().unwrap().questions.used, 0);

    provider.hanging.store(true, Ordering::SeqCst);
    let question = ChatRequest::from_chat_completions(
        br#"{"model": "helper", "messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .unwrap();
    // The client goes away while the provider works on the question (a dropped request).
    let asking = alice.spawn({
        let (alice, question) = (alice.clone(), question.clone());
        async move { alice.ask_mind(&question).await }
    });
    wait_for_calls(&provider, 1);
    asking.abort();
    // The same through a stream that its reader drops.
    let stream = alice.block_on(alice.ask_mind_stream(&question)).unwrap();
    wait_for_calls(&provider, 2);
    drop(stream);
    // And through SQL, stopped by the request's time limit.
    let stopped = alice.block_on(
        alice.query(
            QueryRequest::new("SELECT answer FROM mindsdb.helper_agent WHERE question = 'hi'")
                .with_timeout(std::time::Duration::from_millis(1500)),
        ),
    );
    let stopped = alice.block_on(stopped.collect()).unwrap_err();
    assert!(stopped.message().contains("time limit"), "{stopped}");
    assert_eq!(provider.calls.load(Ordering::SeqCst), 3);
    // A refund would come from a task the drop spawns: give it time to be wrong.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let used = alice.limits().unwrap().questions;
    assert_eq!(
        (used.used, used.remaining),
        (3, 0),
        "three questions reached the provider: all three are charged"
    );
}

#[test]
fn rest_predictions_stop_at_the_statement_deadline() {
    let provider = Provider::start();
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.query.statement_timeout_secs = Some(1);
    config.llm.base_url = provider.base_url.clone();
    config.llm.model_name = "fake".into();
    config.llm.timeout_secs = 60;
    let engine = Engine::open_in_memory(config).unwrap();
    let (_, alice) = user(&engine, "alice");
    alice
        .sql_blocking(
            "CREATE MODEL mindsdb.talker PREDICT answer USING engine = 'openai', prompt_template = 'say {{q}}'",
        )
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while alice.get_model("mindsdb", "talker", None).unwrap().status() != "complete" {
        assert!(
            std::time::Instant::now() < deadline,
            "the model never completed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let answered = alice
        .block_on(alice.predict("mindsdb", "talker", None, &json!([{"q": "hi"}])))
        .unwrap();
    assert_eq!(answered[0]["answer"], "answer 1");
    // The provider now takes 20 s: the prediction stops at the 1 s deadline.
    provider.hanging.store(true, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let stopped = alice
        .block_on(alice.predict("mindsdb", "talker", None, &json!([{"q": "hi"}])))
        .unwrap_err();
    assert!(stopped.message().contains("time limit"), "{stopped}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "stopped after {:?} (generous: the limit is 1 s)",
        started.elapsed()
    );
    // Its provider call was made, and counts.
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    assert_eq!(alice.limits().unwrap().model_calls.used, 2);
}

#[test]
fn a_new_window_starts_after_the_last_one_ends() {
    let provider = Provider::start();
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.hosted.plans.insert(
        "brief".into(),
        PlanConfig {
            questions_per_window: 1,
            // Long enough that two questions asked one after the other fall in one window on
            // a loaded machine (with one second, a slow first answer let the second start a
            // new window).
            window_secs: 3,
            ..PlanConfig::default()
        },
    );
    config.hosted.default_plan = "brief".into();
    config.llm.base_url = provider.base_url.clone();
    let engine = Engine::open_in_memory(config).unwrap();
    let (_, alice) = user(&engine, "alice");
    alice
        .block_on(alice.create_mind(json!({"name": "helper"})))
        .unwrap();
    let question = ChatRequest::from_chat_completions(
        br#"{"model": "helper", "messages": [{"role": "user", "content": "hi"}]}"#,
    )
    .unwrap();
    let asked = std::time::Instant::now();
    alice.block_on(alice.ask_mind(&question)).unwrap();
    let second = alice.block_on(alice.ask_mind(&question));
    // Only a second question asked inside the first one's window must be refused.
    if asked.elapsed() < std::time::Duration::from_secs(3) {
        let over = second.unwrap_err();
        assert!(matches!(over.retry_after(), Some(1..=3)), "{over:?}");
    }
    std::thread::sleep(std::time::Duration::from_millis(3500));
    alice.block_on(alice.ask_mind(&question)).unwrap();
}

#[test]
fn bad_mind_bodies_name_the_field() {
    let engine = hosted(None);
    let (_, alice) = user(&engine, "alice");
    for (body, expected) in [
        (json!({}), "name"),
        (
            json!({"name": "m", "datasources": [{"name": "nope"}]}),
            "nope",
        ),
        (json!({"name": "m", "datasources": "x"}), "datasources"),
        (
            json!({"name": "m", "parameters": {"prompt_template": 1}}),
            "prompt_template",
        ),
        (json!({"name": "bad-name"}), "bad-name"),
        (json!({"name": "m", "model_name": 3}), "model_name"),
    ] {
        let err = alice.block_on(alice.create_mind(body)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.message().contains(expected), "{expected}: {err}");
    }
    assert!(alice.list_minds().unwrap().is_empty());
    for (body, expected) in [
        (&br#"{"messages": []}"#[..], "model"),
        (br#"{"model": "m"}"#, "messages"),
        (
            br#"{"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": "yes"}"#,
            "stream",
        ),
        (br#"[1]"#, "object"),
    ] {
        let err = ChatRequest::from_chat_completions(body).unwrap_err();
        assert!(err.message().contains(expected), "{expected}: {err}");
    }
}

#[test]
fn the_files_engine_is_refused_in_the_hosted_edition() {
    let engine = hosted(None);
    let (_, alice) = user(&engine, "alice");
    let dir = tempfile::tempdir().unwrap();
    let err = rows(
        &alice,
        &format!(
            "CREATE DATABASE d ENGINE = 'files', PARAMETERS = {{\"path\": \"{}\"}}",
            dir.path().display()
        ),
    )
    .unwrap_err();
    assert!(err.message().contains("hosted"), "{err}");
    let err = alice
        .block_on(alice.create_datasource(
            json!({"name": "d", "engine": "files", "connection_data": {"path": "/"}}),
        ))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    // Nor PostgreSQL over the server's own Unix socket.
    let err = alice
        .block_on(alice.create_datasource(json!({"name": "d", "engine": "postgres",
            "connection_data": {"host": "/var/run/postgresql", "database": "postgres", "user": "postgres"}})))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(err.message().contains("Unix socket"), "{err}");
}
