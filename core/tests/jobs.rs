//! Jobs through the Rust facade: created, run by the scheduler, listed with their history,
//! deleted; an engine with jobs running closes its file when dropped, so it opens again at once.

use mindlite::{Config, Engine};
use serde_json::json;

fn fast() -> Config {
    let mut config = Config::default();
    config.jobs.poll_interval_ms = 20;
    config
}

fn count(engine: &Engine, sql: &str) -> usize {
    engine.sql_blocking(sql).unwrap().num_rows()
}

fn wait(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn jobs_run_are_listed_and_deleted_and_never_keep_the_file_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let engine = Engine::open(&path, fast()).unwrap();
    engine.sql_blocking("CREATE TABLE beats (n INT)").unwrap();
    let created = engine
        .block_on(engine.create_job(
            "mindsdb",
            json!({"name": "beat", "query": "INSERT INTO beats SELECT 1", "schedule_str": "every 1 second"}),
        ))
        .unwrap();
    assert_eq!(created["schedule_str"], "every 1 second");
    wait("a run", || count(&engine, "SELECT * FROM beats") >= 1);
    assert_eq!(engine.list_jobs("mindsdb").unwrap().len(), 1);
    let history = engine.job_history("mindsdb", "beat").unwrap();
    assert!(history[0]["error"].is_null(), "{history:?}");
    assert!(engine.get_job("mindsdb", "nope").is_err());

    // Dropped while its job keeps running: the file is free at once, again and again.
    drop(engine);
    for _ in 0..5 {
        let engine = Engine::open(&path, fast()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(engine);
    }
    let engine = Engine::open(&path, fast()).unwrap();
    let before = count(&engine, "SELECT * FROM beats");
    wait("a run after reopening", || {
        count(&engine, "SELECT * FROM beats") > before
    });
    engine
        .block_on(engine.delete_job("mindsdb", "beat"))
        .unwrap();
    assert!(engine.list_jobs("mindsdb").unwrap().is_empty());
    assert!(!engine
        .job_history("mindsdb", "beat")
        .is_ok_and(|h| h.is_empty()));
}
