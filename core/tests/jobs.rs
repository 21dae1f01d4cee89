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

/// An engine dropped while a job's statement runs stops the run and closes its file: it opens
/// again at once, and the cut-off run is marked interrupted.
#[test]
fn an_engine_dropped_mid_run_stops_the_run_and_frees_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let engine = Engine::open(&path, fast()).unwrap();
    engine
        .block_on(engine.create_job(
            "mindsdb",
            json!({"name": "slow", "query": "SELECT count(*) FROM generate_series(1, 3000000000)"}),
        ))
        .unwrap();
    // Wait until the run has started.
    wait("the run to start", || {
        count(
            &engine,
            "SELECT * FROM information_schema.jobs_history WHERE NAME = 'slow'",
        ) == 1
    });
    drop(engine);
    let engine = Engine::open(&path, fast()).unwrap();
    let runs = engine
        .sql_blocking("SELECT ERROR FROM information_schema.jobs_history WHERE NAME = 'slow'")
        .unwrap();
    let error = runs.batches[0].column(0);
    let error = datafusion_text(error.as_ref());
    assert!(error.contains("interrupted"), "{error}");
}

fn datafusion_text(column: &dyn mindlite::arrow::array::Array) -> String {
    mindlite::arrow::util::display::array_value_to_string(column, 0).unwrap()
}

#[test]
fn template_variables_are_each_runs_times() {
    let engine = Engine::open_in_memory(fast()).unwrap();
    engine
        .sql_blocking("CREATE TABLE stamps (t TEXT, d TEXT, p TEXT)")
        .unwrap();
    engine
        .sql_blocking(
            "CREATE JOB stamp (INSERT INTO stamps VALUES ('{{START_DATETIME}}', '{{START_DATE}}', \
             '{{PREVIOUS_START_DATETIME}}')) EVERY 1 second",
        )
        .unwrap();
    wait("two runs", || count(&engine, "SELECT * FROM stamps") >= 2);
    let rows = engine
        .sql_blocking("SELECT t, d, p FROM stamps ORDER BY t LIMIT 2")
        .unwrap();
    let batch =
        mindlite::arrow::compute::concat_batches(&rows.batches[0].schema(), &rows.batches).unwrap();
    let text = |column: usize, row: usize| {
        mindlite::arrow::util::display::array_value_to_string(batch.column(column), row).unwrap()
    };
    let parse =
        |text: &str| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").unwrap();
    let (first, second) = (parse(&text(0, 0)), parse(&text(0, 1)));
    assert_eq!(text(1, 0), text(0, 0)[..10]);
    // Before the first run: the job's creation; then the previous start less a minute.
    assert!(parse(&text(2, 0)) <= first);
    assert_eq!(parse(&text(2, 1)), first - chrono::Duration::seconds(60));
    assert!(second > first);
    let history = engine.job_history("mindsdb", "stamp").unwrap();
    let ran = history[0]["query"].as_str().unwrap_or_default().to_string();
    assert!(
        !ran.contains("{{"),
        "the history shows the values run: {ran}"
    );
    // MindsDB's `log` database shows the same runs.
    assert!(count(&engine, "SELECT name, project, run_start, run_end, error, query FROM log.jobs_history WHERE name = 'stamp'") >= 2);
    assert!(engine.sql_blocking("SELECT * FROM log.llm_log").is_err());
    assert!(engine.sql_blocking("CREATE TABLE log.t (a INT)").is_err());
}
