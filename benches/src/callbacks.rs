//! The callbacks benchmark: the delay from a model's status change (the outbox write in its
//! transaction) to the receipt of the signed POST at a receiver on 127.0.0.1, over N events
//! (LLM models, which complete at once), on a database file with real commits. Prints one
//! JSON object with p50, p99 and max in milliseconds.
//!
//! ```text
//! callbacks [--events 1000]
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mindlite::{Config, Edition, Engine, QueryRequest};
use serde_json::json;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a whole number"))
        .unwrap_or(default)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A keep-alive receiver answering 200 to everything; records when each webhook-id arrived.
fn receiver(got: Arc<Mutex<HashMap<String, u64>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let got = Arc::clone(&got);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let (mut id, mut length) = (String::new(), 0);
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        let (name, value) = line.split_once(':').unwrap_or(("", ""));
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap(),
                            "webhook-id" => id = value.trim().to_string(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    got.lock().unwrap().insert(id, now_ms());
                    let stream = reader.get_mut();
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    url
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn main() {
    let events = arg("--events", 1000) as usize;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.hosted.default_plan = "pro".into();
    // Every event is queued at once, and the receiver is on this machine.
    if let Some(pro) = config.hosted.plans.get_mut("pro") {
        pro.max_pending_deliveries = u64::MAX;
    }
    config.egress.allow = vec!["127.0.0.1".into()];
    let engine = Engine::open(dir.path().join("bench.redb"), config).unwrap();
    engine.block_on(engine.create_user("bench", None)).unwrap();
    let key = engine.block_on(engine.create_api_key("bench")).unwrap().key;
    let user = engine.as_user(&key).unwrap();
    let got = Arc::new(Mutex::new(HashMap::new()));
    let url = receiver(Arc::clone(&got));
    let registered = user
        .block_on(user.register_callback(json!({"url": url})))
        .unwrap();
    let id = registered.id;

    let started = Instant::now();
    for i in 0..events {
        let sql = format!(
            "CREATE MODEL mindsdb.m{i} PREDICT answer USING engine = 'openai', prompt_template = 'say {{{{q}}}}'"
        );
        let result = user.block_on(user.query(QueryRequest::new(&sql)));
        user.block_on(result.collect()).unwrap();
    }
    while got.lock().unwrap().len() < events && started.elapsed() < Duration::from_secs(600) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let received = got.lock().unwrap().clone();
    let log = user.callback_deliveries(id).unwrap();
    let mut delays: Vec<u64> = log
        .iter()
        .filter(|a| a.delivered)
        .filter_map(|a| {
            let at = received.get(&a.event_id)?;
            Some(at.saturating_sub(a.enqueued_at))
        })
        .collect();
    delays.sort_unstable();
    assert_eq!(
        delays.len(),
        events,
        "every event delivered and logged once"
    );
    println!(
        "{}",
        json!({
            "events": events,
            "delay_ms_p50": percentile(&delays, 0.50),
            "delay_ms_p99": percentile(&delays, 0.99),
            "delay_ms_max": delays.last(),
            "seconds_total": (elapsed * 100.0).round() / 100.0,
        })
    );
}
