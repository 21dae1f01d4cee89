//! Model-status callbacks end to end: a real receiver on 127.0.0.1 gets the seed's payload,
//! signed as Standard Webhooks sign; failures are retried at the interval up to the count; a
//! hanging receiver is cut off at the timeout; events pending when the process is killed are
//! delivered after the file is reopened; plans gate registration.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use mindlite::{Config, Edition, Engine, ErrorKind, QueryRequest};
use serde_json::{json, Value};

const CHILD_ENV: &str = "CALLBACKS_CHILD_DB";
const CHILD_URL_ENV: &str = "CALLBACKS_CHILD_URL";

/// How the receiver answers one request.
#[derive(Clone, Copy)]
enum Reply {
    Status(u16),
    Hang(Duration),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    at: Instant,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// A receiver on 127.0.0.1: answers from its script (200 when it runs out), records requests.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(script: Vec<Reply>) -> Receiver {
        Receiver::on(TcpListener::bind("127.0.0.1:0").unwrap(), script)
    }

    fn on(listener: TcpListener, script: Vec<Reply>) -> Receiver {
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let g = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (g, script) = (Arc::clone(&g), Arc::clone(&script));
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    let mut headers = Vec::new();
                    let mut length = 0;
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap_or(0);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            let value = value.trim().to_string();
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.parse().unwrap();
                            }
                            headers.push((name.to_string(), value));
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    g.lock().unwrap().push(Received {
                        at: Instant::now(),
                        headers,
                        body: String::from_utf8(body).unwrap(),
                    });
                    let reply = script
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or(Reply::Status(200));
                    let status = match reply {
                        Reply::Hang(pause) => {
                            std::thread::sleep(pause);
                            return;
                        }
                        Reply::Status(status) => status,
                    };
                    let mut stream = reader.into_inner();
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    );
                });
            }
        });
        Receiver { url, got }
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits up to `limit` for `n` requests.
    fn wait_for(&self, n: usize, limit: Duration) -> Vec<Received> {
        let start = Instant::now();
        while self.received().len() < n && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.received()
    }
}

fn hosted_config() -> Config {
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.hosted.default_plan = "pro".into();
    // The receivers are on this machine, which the hosted egress policy refuses by default.
    config.egress.allow = vec!["127.0.0.1".into()];
    config
}

/// A user's handle (plan `pro`) on `engine`.
fn pro_user(engine: &Engine, name: &str) -> Engine {
    engine.block_on(engine.create_user(name, None)).unwrap();
    let key = engine.block_on(engine.create_api_key(name)).unwrap().key;
    engine.as_user(&key).unwrap()
}

fn sql(engine: &Engine, sql: &str) {
    let result = engine.block_on(engine.query(QueryRequest::new(sql)));
    engine.block_on(result.collect()).unwrap();
}

/// An LLM model: it completes at once (its one phase checks the prompt).
fn llm_model(engine: &Engine, name: &str) {
    sql(
        engine,
        &format!(
            "CREATE MODEL mindsdb.{name} PREDICT answer USING engine = 'openai', prompt_template = 'say {{{{q}}}}'"
        ),
    );
}

fn register(engine: &Engine, body: Value) -> (u64, String) {
    let answer = engine.block_on(engine.register_callback(body)).unwrap();
    (answer.id, answer.secret)
}

#[test]
fn a_completed_model_is_posted_signed_with_the_seed_payload() {
    let receiver = Receiver::start(Vec::new());
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, secret) = register(
        &alice,
        json!({"url": receiver.url, "filter": {"model_name": "sales", "project_name": "minds"}}),
    );
    assert!(secret.starts_with("whsec_"));
    llm_model(&alice, "other_model");
    llm_model(&alice, "sales_forecast");
    let got = receiver.wait_for(1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(receiver.received().len(), 1, "only the matching model");
    let request = &got[0];
    let body: Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body["name"], "sales_forecast");
    assert_eq!(body["project_name"], "mindsdb");
    assert_eq!(body["version"], 1);
    assert_eq!(body["active"], true);
    assert_eq!(body["new_status"], "complete");
    assert!(body["old_status"].is_string());
    assert!(body["predictor_id"].is_u64());
    let http_date = regex_like_http_date();
    for key in ["changed_at", "predictor_created_at"] {
        let text = body[key].as_str().unwrap();
        assert!(http_date(text), "{key}: {text}");
    }

    // The signature, checked as a receiver would.
    let (msg_id, timestamp) = (
        request.header("webhook-id"),
        request.header("webhook-timestamp"),
    );
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{msg_id}.{timestamp}.{}", request.body).as_bytes());
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    assert_eq!(request.header("webhook-signature"), expected);
    assert!(msg_id.starts_with("msg_"));
    let now = chrono_now();
    let sent: i64 = timestamp.parse().unwrap();
    assert!((now - sent).abs() < 60);

    let log = alice.callback_deliveries(id).unwrap();
    assert_eq!(log.len(), 1);
    assert!(log[0].delivered);
    assert_eq!(log[0].status, Some(200));
    assert_eq!(log[0].attempt, 1);
}

#[test]
fn failing_twice_then_succeeding_takes_exactly_three_attempts_at_the_interval() {
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(503)]);
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, _) = register(
        &alice,
        json!({"url": receiver.url, "attempt": {"count": 5, "interval": 1, "http_timeout": 5}}),
    );
    llm_model(&alice, "m");
    let got = receiver.wait_for(3, Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(1500));
    let got_after = receiver.received();
    assert_eq!(got_after.len(), 3, "exactly three attempts");
    for pair in got.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(900), "gap {gap:?}");
        assert!(gap < Duration::from_secs(5), "gap {gap:?}");
        assert_eq!(pair[0].header("webhook-id"), pair[1].header("webhook-id"));
    }
    let log = alice.callback_deliveries(id).unwrap();
    let statuses: Vec<Option<u16>> = log.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(500), Some(503), Some(200)]);
    let delivered: Vec<bool> = log.iter().map(|a| a.delivered).collect();
    assert_eq!(delivered, [false, false, true]);
}

#[test]
fn the_delivery_log_keeps_the_newest_attempts_only() {
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(502)]);
    let mut config = hosted_config();
    config.callbacks.log_entries = 2;
    let engine = Engine::open_in_memory(config).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, _) = register(
        &alice,
        json!({"url": receiver.url, "attempt": {"count": 5, "interval": 1, "http_timeout": 5}}),
    );
    let quiet = Receiver::start(Vec::new());
    let (other, _) = register(&alice, json!({"url": quiet.url}));
    llm_model(&alice, "m");
    receiver.wait_for(3, Duration::from_secs(15));
    let start = Instant::now();
    let mut log = alice.callback_deliveries(id).unwrap();
    while log.last().is_none_or(|a| !a.delivered) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        log = alice.callback_deliveries(id).unwrap();
    }
    let kept: Vec<(u32, Option<u16>)> = log.iter().map(|a| (a.attempt, a.status)).collect();
    assert_eq!(kept, [(2, Some(502)), (3, Some(200))]);
    // Another callback's log is its own: one delivery, kept.
    quiet.wait_for(1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let theirs = alice.callback_deliveries(other).unwrap();
    assert_eq!(theirs.len(), 1);
    assert!(theirs[0].delivered);

    let mut zero = hosted_config();
    zero.callbacks.log_entries = 0;
    let error = Engine::open_in_memory(zero).unwrap_err();
    assert!(error.message().contains("callbacks.log_entries"), "{error}");
}

#[test]
fn a_hanging_receiver_is_cut_off_at_the_timeout_and_given_up_after_the_count() {
    let hang = Reply::Hang(Duration::from_secs(6));
    let receiver = Receiver::start(vec![hang, hang, hang]);
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, _) = register(
        &alice,
        json!({"url": receiver.url, "attempt": {"count": 2, "interval": 1, "http_timeout": 1}}),
    );
    let start = Instant::now();
    llm_model(&alice, "m");
    let mut log = Vec::new();
    while start.elapsed() < Duration::from_secs(10) && log.len() < 2 {
        std::thread::sleep(Duration::from_millis(50));
        log = alice.callback_deliveries(id).unwrap();
    }
    assert_eq!(log.len(), 2, "{log:?}");
    // Two attempts of about a second each, a second apart: far less than one hang.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for attempt in &log {
        assert!(
            attempt.error.as_deref().unwrap().contains("timed out"),
            "{attempt:?}"
        );
        let took = attempt.duration_ms;
        assert!((900..2500).contains(&took), "{took}");
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(receiver.received().len(), 2, "no third attempt");
}

/// Child mode: registers a callback to a URL nobody listens on, completes a model, waits for
/// the first failed attempt to be logged, says so, and waits to be killed.
#[test]
fn callbacks_child() {
    let (Ok(path), Ok(url)) = (std::env::var(CHILD_ENV), std::env::var(CHILD_URL_ENV)) else {
        return;
    };
    let engine = Engine::open(&path, hosted_config()).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, _) = register(
        &alice,
        json!({"url": url, "attempt": {"count": 20, "interval": 1}}),
    );
    llm_model(&alice, "m");
    while alice.callback_deliveries(id).unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "pending {id}").unwrap();
    out.flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn events_pending_when_the_process_is_killed_are_delivered_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callbacks.redb");
    // A port with nobody on it yet: the child's attempts are refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "callbacks::callbacks_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .env(CHILD_URL_ENV, &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.contains("pending"));
    child.kill().unwrap();
    child.wait().unwrap();
    let id: u64 = ready
        .expect("the child got its event pending")
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();

    let receiver = Receiver::on(TcpListener::bind(("127.0.0.1", port)).unwrap(), Vec::new());
    let engine = Engine::open(&path, hosted_config()).unwrap();
    let got = receiver.wait_for(1, Duration::from_secs(10));
    assert!(
        !got.is_empty(),
        "the pending event was delivered after reopening"
    );
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["name"], "m");
    let key = engine.block_on(engine.create_api_key("alice")).unwrap().key;
    let alice = engine.as_user(&key).unwrap();
    let start = Instant::now();
    let mut log = alice.callback_deliveries(id).unwrap();
    while !log.iter().any(|a| a.delivered) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        log = alice.callback_deliveries(id).unwrap();
    }
    assert!(
        log.len() >= 2,
        "refused attempts, then the delivery: {log:?}"
    );
    assert!(log[0].error.is_some());
    assert!(log.last().unwrap().delivered);
}

#[test]
fn only_the_hosted_edition_and_plans_with_callbacks_may_register() {
    let local = Engine::open_in_memory(Config::default()).unwrap();
    let err = local
        .block_on(local.register_callback(json!({"url": "http://127.0.0.1:1/"})))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    engine
        .block_on(engine.create_user("frugal", Some("free")))
        .unwrap();
    let key = engine
        .block_on(engine.create_api_key("frugal"))
        .unwrap()
        .key;
    let frugal = engine.as_user(&key).unwrap();
    let err = frugal
        .block_on(frugal.register_callback(json!({"url": "http://127.0.0.1:1/"})))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.message().contains("free") && err.message().contains("pro"),
        "{err}"
    );

    let alice = pro_user(&engine, "alice");
    let bob = pro_user(&engine, "bob");
    let (id, _) = register(&alice, json!({"url": "http://127.0.0.1:1/"}));
    assert_eq!(
        bob.get_callback(id).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        bob.block_on(bob.delete_callback(id)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(bob.list_callbacks().unwrap().is_empty());
    for (body, named) in [
        (json!({}), "url"),
        (json!({"url": "ftp://x/"}), "http"),
        (json!({"url": "http://"}), "url"),
        (
            json!({"url": "http://h/", "filter": {"model_name": "("}}),
            "filter.model_name",
        ),
        (
            json!({"url": "http://h/", "filter": {"owner": "x"}}),
            "filter.owner",
        ),
        (
            json!({"url": "http://h/", "attempt": {"count": 0}}),
            "attempt.count",
        ),
        (
            json!({"url": "http://h/", "attempt": {"interval": 1.5}}),
            "attempt.interval",
        ),
        (
            json!({"url": "http://h/", "attempt": {"http_timeout": 301}}),
            "attempt.http_timeout",
        ),
    ] {
        let err = alice
            .block_on(alice.register_callback(body.clone()))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{body}: {err}");
        assert!(err.message().contains(named), "{named}: {err}");
    }
    assert_eq!(alice.list_callbacks().unwrap().len(), 1);
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `Day, DD Mon YYYY HH:MM:SS GMT`.
fn regex_like_http_date() -> impl Fn(&str) -> bool {
    |text: &str| {
        let parts: Vec<&str> = text.split(' ').collect();
        parts.len() == 6
            && parts[0].len() == 4
            && parts[0].ends_with(',')
            && parts[1].len() == 2
            && parts[2].len() == 3
            && parts[3].len() == 4
            && parts[4].len() == 8
            && parts[5] == "GMT"
    }
}

#[test]
fn one_users_failing_delivery_never_holds_up_anothers_to_the_same_url() {
    let receiver = Receiver::start(vec![Reply::Status(401)]);
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let (alice, bob) = (pro_user(&engine, "alice"), pro_user(&engine, "bob"));
    let slow = json!({"url": receiver.url, "attempt": {"count": 20, "interval": 86400}});
    register(&alice, slow);
    register(&bob, json!({"url": receiver.url}));
    llm_model(&alice, "first");
    receiver.wait_for(1, Duration::from_secs(10));
    llm_model(&bob, "second");
    let got = receiver.wait_for(2, Duration::from_secs(10));
    let names: Vec<String> = got
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap()["name"].to_string())
        .collect();
    assert_eq!(names, ["\"first\"", "\"second\""]);
}

#[test]
fn a_user_whose_plan_loses_callbacks_gets_no_more_deliveries() {
    let receiver = Receiver::start(vec![Reply::Status(500)]);
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let alice = pro_user(&engine, "alice");
    let (id, _) = register(
        &alice,
        json!({"url": receiver.url, "attempt": {"count": 10, "interval": 1}}),
    );
    llm_model(&alice, "m");
    receiver.wait_for(1, Duration::from_secs(10));
    engine
        .block_on(engine.update_user("alice", Some("free"), None))
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(receiver.received().len(), 1, "no retry after the downgrade");
    engine
        .block_on(engine.update_user("alice", Some("pro"), None))
        .unwrap();
    let log = alice.callback_deliveries(id).unwrap();
    let last = log.last().unwrap();
    assert!(
        last.error.as_deref().unwrap().contains("plan 'free'"),
        "{log:?}"
    );
    assert!(!last.delivered);
}
