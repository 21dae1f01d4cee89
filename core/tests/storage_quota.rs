//! Per-tenant storage and temporary space: a write that would take a tenant past its plan's
//! `max_storage_mb` fails whole and names the key, whatever wrote it (CREATE TABLE AS, INSERT,
//! an upload, an index), while other tenants write on; dropping gives the bytes back; a
//! rolled-back transaction, savepoint or failed statement leaves the count as it was; the count
//! kept write by write equals a count made from scratch (which a file without counts gets when
//! it is opened). A tenant's spills stop at its plan's `max_spill_mb` while another tenant's
//! sort still spills.

use std::path::Path;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use mindlite::{Config, Edition, Engine, ErrorKind, FileFormat, PlanConfig};

/// A plan of `storage_mb` stored and `spill_mb` of temporary files.
fn plan(storage_mb: u64, spill_mb: u64) -> PlanConfig {
    PlanConfig {
        max_storage_mb: storage_mb,
        max_spill_mb: spill_mb,
        ..PlanConfig::default()
    }
}

/// A hosted config whose `tiny` plan stores 1 MiB and `roomy` 64 MiB (both spill 64 MiB).
fn hosted_config() -> Config {
    let mut config = Config {
        edition: Edition::Hosted,
        ..Config::default()
    };
    config.hosted.plans.insert("tiny".into(), plan(1, 64));
    config.hosted.plans.insert("roomy".into(), plan(64, 64));
    config.hosted.default_plan = "tiny".into();
    config
}

/// The handle of a new user `name` on `plan`.
fn user(engine: &Engine, name: &str, plan: &str) -> Engine {
    engine
        .block_on(engine.create_user(name, Some(plan)))
        .unwrap();
    let key = engine.block_on(engine.create_api_key(name)).unwrap().key;
    engine.as_user(&key).unwrap()
}

fn ok(engine: &Engine, sql: &str) {
    if let Err(e) = engine.sql_blocking(sql) {
        panic!("{sql}: {e}");
    }
}

fn error(engine: &Engine, sql: &str) -> mindlite::Error {
    match engine.sql_blocking(sql) {
        Ok(_) => panic!("{sql} should have failed"),
        Err(e) => e,
    }
}

fn number(engine: &Engine, sql: &str) -> i64 {
    let got = engine.sql_blocking(sql).unwrap();
    let column = got.batches[0].column(0);
    match column.as_primitive_opt::<Int64Type>() {
        Some(values) => values.value(0),
        None => panic!("{sql}: not a BIGINT: {column:?}"),
    }
}

/// The bytes the handle's user stores, as `GET /limits/` shows them.
fn stored(engine: &Engine) -> u64 {
    engine.limits().unwrap().storage_bytes.used
}

/// [`stored`] once it satisfies `done`, waiting (30 s at most) for the sweeper, which removes
/// what a DROP leaves in steps after the DROP and gives the bytes back as it goes.
fn stored_once(engine: &Engine, done: impl Fn(u64) -> bool) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = stored(engine);
        if done(now) || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`stored`] once the sweeper is done: unchanged over 200 ms (30 s at most).
fn stored_settled(engine: &Engine) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut last = stored(engine);
    let mut same = 0;
    while same < 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = stored(engine);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

/// Rows whose text hardly compresses: `rows` of 32 hex digits, about 40 bytes stored each.
fn hashes(rows: u64) -> String {
    format!("SELECT value AS id, md5(CAST(value AS VARCHAR)) AS h FROM generate_series(1, {rows})")
}

/// A CSV file of `rows` such rows.
fn csv(rows: u64) -> Vec<u8> {
    let mut out = String::from("id,h\n");
    for n in 0..rows {
        out.push_str(&format!(
            "{n},{:032x}\n",
            u128::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
        ));
    }
    out.into_bytes()
}

fn over_quota(err: &mindlite::Error) {
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded, "{err}");
    assert!(
        err.message().contains("hosted.plans.tiny.max_storage_mb")
            && err.message().contains("nothing was written"),
        "{err}"
    );
}

#[test]
fn writes_past_max_storage_mb_fail_whole_and_other_tenants_write_on() {
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let (ann, bob) = (user(&engine, "ann", "tiny"), user(&engine, "bob", "roomy"));
    let limits = ann.limits().unwrap();
    assert_eq!(limits.storage_bytes.limit, 1024 * 1024);
    assert_eq!(limits.storage_bytes.used, 0);

    // About 4 MB: refused, and nothing of it is there.
    let err = error(&ann, &format!("CREATE TABLE big AS {}", hashes(100_000)));
    over_quota(&err);
    assert!(error(&ann, "SELECT count(*) FROM big")
        .message()
        .contains("not found"));
    assert_eq!(stored(&ann), 0);

    // A small table fits; an INSERT that would pass the limit leaves it as it was.
    ok(&ann, &format!("CREATE TABLE small AS {}", hashes(1_000)));
    let before = stored(&ann);
    assert!(before > 30_000 && before < 100_000, "{before}");
    over_quota(&error(
        &ann,
        &format!("INSERT INTO small {}", hashes(100_000)),
    ));
    assert_eq!(number(&ann, "SELECT count(*) FROM small"), 1_000);
    assert_eq!(stored(&ann), before);

    // So does an index whose entries would not fit, and an upload.
    ok(&ann, &format!("INSERT INTO small {}", hashes(15_000)));
    let before = stored(&ann);
    over_quota(&error(&ann, "CREATE INDEX by_h ON small (h)"));
    assert_eq!(stored(&ann), before);
    let uploaded = engine.block_on(ann.upload_file("f", csv(100_000), Some(FileFormat::Csv), None));
    over_quota(&uploaded.unwrap_err());
    assert!(ann.list_files().unwrap().is_empty());
    assert_eq!(stored(&ann), before);
    assert!(stored(&ann) <= 1024 * 1024);

    // Another tenant is not affected: the same writes pass on its plan.
    ok(&bob, &format!("CREATE TABLE big AS {}", hashes(100_000)));
    ok(&bob, "CREATE INDEX by_h ON big (h)");
    engine
        .block_on(bob.upload_file("f", csv(100_000), Some(FileFormat::Csv), None))
        .unwrap();
    assert!(stored(&bob) > 4 * 1024 * 1024, "{}", stored(&bob));
    assert_eq!(stored(&ann), before);

    // Over its limit (a smaller plan), a tenant can still delete and drop, and then write.
    engine
        .block_on(engine.update_user("bob", Some("tiny"), None))
        .unwrap();
    over_quota(&error(&bob, "INSERT INTO big VALUES (0, 'x')"));
    // A change to one row of a full indexed chunk lands a new chunk before the old one goes:
    // it is judged by what it adds less what it frees.
    ok(&bob, "DELETE FROM big WHERE id = 5");
    let before = stored(&bob);
    let err = error(&bob, "UPDATE big SET h = h || h WHERE id = 6");
    over_quota(&err);
    assert!(!err.message().contains(", 0 more asked"), "{err}");
    assert_eq!(stored(&bob), before);
    assert_eq!(
        number(
            &bob,
            "SELECT CAST(length(h) AS BIGINT) FROM big WHERE id = 6"
        ),
        32
    );
    ok(&bob, "DELETE FROM big WHERE id > 10");
    ok(&bob, "DROP INDEX by_h");
    engine.block_on(bob.delete_file("f")).unwrap();
    let left = stored_once(&bob, |bytes| bytes < 1024 * 1024);
    assert!(left < 1024 * 1024, "{left}");
    ok(&bob, "INSERT INTO big VALUES (0, 'x')");
}

#[test]
fn dropping_gives_the_bytes_back() {
    let engine = Engine::open_in_memory(hosted_config()).unwrap();
    let ann = user(&engine, "ann", "roomy");
    assert_eq!(stored(&ann), 0);
    ok(&ann, &format!("CREATE TABLE t AS {}", hashes(20_000)));
    let table = stored(&ann);
    assert!(table > 0);
    ok(&ann, "CREATE INDEX by_h ON t (h)");
    assert!(
        stored(&ann) > table + 20_000 * 32,
        "the index's entries count"
    );
    ok(&ann, "DROP INDEX by_h");
    assert_eq!(stored_once(&ann, |bytes| bytes == table), table);
    // A table of 20,000 rows is renewed: the sweeper removes its old chunks after the commit.
    ok(&ann, "TRUNCATE TABLE t");
    let left = stored_once(&ann, |bytes| bytes < 1_000);
    assert!(left < 1_000, "only the schema is left: {left}");
    ok(&ann, "DROP TABLE t");
    assert_eq!(stored_once(&ann, |bytes| bytes == 0), 0);

    engine
        .block_on(ann.upload_file("f", csv(10_000), Some(FileFormat::Csv), None))
        .unwrap();
    assert!(stored(&ann) > 0);
    engine.block_on(ann.delete_file("f")).unwrap();
    assert_eq!(stored_once(&ann, |bytes| bytes == 0), 0);

    ok(&ann, "CREATE PROJECT p");
    ok(&ann, &format!("CREATE TABLE p.a AS {}", hashes(5_000)));
    ok(&ann, &format!("CREATE TABLE p.b AS {}", hashes(5_000)));
    ok(&ann, "CREATE INDEX p_a ON p.a (h)");
    assert!(stored(&ann) > 0);
    ok(&ann, "DROP PROJECT p");
    assert_eq!(stored_once(&ann, |bytes| bytes == 0), 0);
}

/// The bytes the local tenant stores, read from the closed file at `path`.
fn stored_in_file(path: &Path) -> u64 {
    let db = redb::Database::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let table = txn
        .open_table(redb::TableDefinition::<u64, u64>::new("storage_bytes"))
        .unwrap();
    redb::ReadableTable::get(&table, 0)
        .unwrap()
        .map_or(0, |v| v.value())
}

/// Runs `statements` in a local engine on the file at `path`, then closes it.
fn local_session(path: &Path, statements: &[&str]) {
    let engine = Engine::open(path, Config::default()).unwrap();
    for sql in statements {
        ok(&engine, sql);
    }
    engine.close();
}

#[test]
fn a_rolled_back_transaction_or_a_failed_statement_leaves_the_count_as_it_was() {
    // Explicit transactions are the local edition's: its tenant is counted too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("local.redb");
    let table = format!("CREATE TABLE t AS {}", hashes(1_000));
    let insert = format!("INSERT INTO t {}", hashes(1_000));
    local_session(
        &path,
        &[&table, "CREATE TABLE k (id BIGINT PRIMARY KEY, h VARCHAR)"],
    );
    let before = stored_in_file(&path);
    assert!(before > 30_000, "{before}");

    local_session(
        &path,
        &[
            "BEGIN",
            &insert,
            "SAVEPOINT s",
            "DROP TABLE t",
            "ROLLBACK TO s",
            "CREATE INDEX by_h ON t (h)",
            "ROLLBACK",
        ],
    );
    assert_eq!(stored_in_file(&path), before);

    // A statement that fails after writing chunks (a duplicate key) leaves no bytes counted.
    let engine = Engine::open(&path, Config::default()).unwrap();
    let err = error(
        &engine,
        "INSERT INTO k SELECT value % 5000, md5(CAST(value AS VARCHAR)) FROM generate_series(1, 10000)",
    );
    assert_eq!(err.kind(), ErrorKind::ConstraintViolation, "{err}");
    engine.close();
    assert_eq!(stored_in_file(&path), before);

    // What a transaction commits is counted, as a count from scratch finds it.
    local_session(
        &path,
        &["BEGIN", &insert, "SAVEPOINT s", "DROP TABLE k", "COMMIT"],
    );
    let committed = stored_in_file(&path);
    assert!(committed > before, "{committed} after {before}");
    forget_counts(&path);
    local_session(&path, &[]);
    assert_eq!(stored_in_file(&path), committed);
}

/// Deletes the counts from the file at `path` (the engine is closed), as a file written
/// before they existed lacks them.
fn forget_counts(path: &Path) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    assert!(txn
        .delete_table(redb::TableDefinition::<u64, u64>::new("storage_bytes"))
        .unwrap());
    txn.commit().unwrap();
}

#[test]
fn the_count_kept_write_by_write_is_the_count_made_from_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counted.redb");
    let engine = Engine::open(&path, hosted_config()).unwrap();
    let (ann, bob) = (user(&engine, "ann", "roomy"), user(&engine, "bob", "roomy"));
    ok(&ann, &format!("CREATE TABLE t AS {}", hashes(30_000)));
    ok(&ann, "CREATE UNIQUE INDEX by_h ON t (h)");
    ok(&ann, "CREATE TABLE k (id BIGINT PRIMARY KEY, v VARCHAR)");
    for n in 0..5 {
        ok(&ann, &format!("INSERT INTO k VALUES ({n}, 'v{n}')"));
    }
    ok(
        &ann,
        "INSERT INTO k VALUES (1, 'again') ON CONFLICT (id) DO UPDATE SET v = excluded.v",
    );
    ok(&ann, "UPDATE t SET h = upper(h) WHERE id % 3 = 0");
    ok(&ann, "DELETE FROM t WHERE id % 7 = 0");
    ok(
        &ann,
        "INSERT INTO t SELECT value + 100000, md5(CAST(value + 100000 AS VARCHAR)) \
         FROM generate_series(1, 2000)",
    );
    ok(
        &ann,
        &format!("CREATE OR REPLACE TABLE r AS {}", hashes(3_000)),
    );
    ok(
        &ann,
        &format!("CREATE OR REPLACE TABLE r AS {}", hashes(2_000)),
    );
    engine
        .block_on(bob.upload_file("f", csv(5_000), Some(FileFormat::Csv), None))
        .unwrap();
    ok(&bob, &format!("CREATE TABLE gone AS {}", hashes(1_000)));
    ok(&bob, "DROP TABLE gone");
    let (ann_bytes, bob_bytes) = (stored_settled(&ann), stored_settled(&bob));
    assert!(ann_bytes > 0 && bob_bytes > 0);
    drop((ann, bob));
    engine.close();

    forget_counts(&path);
    let engine = Engine::open(&path, hosted_config()).unwrap();
    let key = |name: &str| engine.block_on(engine.create_api_key(name)).unwrap().key;
    let (ann, bob) = (
        engine.as_user(&key("ann")).unwrap(),
        engine.as_user(&key("bob")).unwrap(),
    );
    assert_eq!((stored(&ann), stored(&bob)), (ann_bytes, bob_bytes));
    // And the counts go on from there.
    ok(&ann, "DROP TABLE t");
    ok(&ann, "DROP TABLE k");
    ok(&ann, "DROP TABLE r");
    assert_eq!(stored_once(&ann, |bytes| bytes == 0), 0);
}

/// A hosted engine whose operators spill beyond 16 MiB of memory (a sort keeps 10 MB of it
/// for merging), and whose `cramped` plan may spill 1 MiB and `roomy` 256 MiB.
fn spilling_config() -> Config {
    let mut config = hosted_config();
    config.query.memory_limit_mb = Some(16);
    config.query.staging_memory_mb = 0;
    config.query.target_partitions = 1;
    config.hosted.plans.insert("cramped".into(), plan(64, 1));
    config.hosted.plans.insert("roomy".into(), plan(64, 256));
    config
}

#[test]
fn a_tenants_spills_stop_at_its_share_while_another_tenants_sort_still_spills() {
    let engine = Engine::open_in_memory(spilling_config()).unwrap();
    let (ann, bob) = (
        user(&engine, "ann", "cramped"),
        user(&engine, "bob", "roomy"),
    );
    // About 20 MB of rows sorted in 6 MiB of memory: the sort must spill.
    let sort = "SELECT h FROM (SELECT md5(CAST(value AS VARCHAR)) || md5(CAST(value + 1 AS VARCHAR)) AS h \
                FROM generate_series(1, 300000)) ORDER BY h DESC";
    let err = error(&ann, sort);
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded, "{err}");
    assert!(
        err.message().contains("hosted.plans.cramped.max_spill_mb"),
        "{err}"
    );
    let got = bob.sql_blocking(sort).unwrap();
    assert_eq!(got.num_rows(), 300_000);
    // A write staging its rows in temporary files stops at the share too, writing nothing.
    let err = error(&ann, &format!("CREATE TABLE staged AS {}", hashes(200_000)));
    assert_eq!(err.kind(), ErrorKind::QuotaExceeded, "{err}");
    assert!(
        err.message().contains("hosted.plans.cramped.max_spill_mb"),
        "{err}"
    );
    assert!(error(&ann, "SELECT * FROM staged")
        .message()
        .contains("not found"));
    ok(&bob, &format!("CREATE TABLE staged AS {}", hashes(200_000)));
    assert_eq!(number(&bob, "SELECT count(*) FROM staged"), 200_000);
    // Its files went with its statements: the share is whole again.
    ok(&ann, &format!("CREATE TABLE small AS {}", hashes(1_000)));
    assert_eq!(number(&ann, "SELECT count(*) FROM small"), 1_000);
}

#[test]
fn rows_that_replace_a_whole_table_are_judged_by_what_they_add_less_what_they_replace() {
    let mut config = hosted_config();
    config.hosted.plans.insert("snug".into(), plan(16, 64));
    let engine = Engine::open_in_memory(config).unwrap();
    let bob = user(&engine, "bob", "snug");
    // A keyed table of more than two chunks, so that rows replacing it land in steps, and
    // the old rows stay counted until the sweeper removes them after the commit.
    ok(&bob, "CREATE TABLE t (id BIGINT PRIMARY KEY, h VARCHAR)");
    ok(&bob, &format!("INSERT INTO t {}", hashes(150_000)));
    let held = stored(&bob);
    assert!(
        held > 8 * 1024 * 1024 && held < 16 * 1024 * 1024,
        "the table takes more than half the limit: {held}"
    );
    // The same rows again, then all but ten of them: neither grows the tenant.
    ok(&bob, &format!("INSERT OVERWRITE t {}", hashes(150_000)));
    assert_eq!(number(&bob, "SELECT count(*) FROM t"), 150_000);
    let after = stored_settled(&bob);
    assert!(after.abs_diff(held) < held / 100, "{after} against {held}");
    ok(
        &bob,
        "DELETE FROM t WHERE id IN (SELECT value FROM generate_series(1, 10))",
    );
    assert_eq!(number(&bob, "SELECT count(*) FROM t"), 149_990);
    stored_settled(&bob);

    // Over its limit (a smaller plan), the tenant can still replace the rows with fewer,
    // and not with more.
    engine
        .block_on(engine.update_user("bob", Some("tiny"), None))
        .unwrap();
    ok(
        &bob,
        "DELETE FROM t WHERE id IN (SELECT value FROM generate_series(1, 1000))",
    );
    assert_eq!(number(&bob, "SELECT count(*) FROM t"), 149_000);
    let before = stored_settled(&bob);
    over_quota(&error(
        &bob,
        &format!("INSERT OVERWRITE t {}", hashes(300_000)),
    ));
    assert_eq!(number(&bob, "SELECT count(*) FROM t"), 149_000);
    assert_eq!(stored_settled(&bob), before);
}
