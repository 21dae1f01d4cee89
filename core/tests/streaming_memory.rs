//! Streaming keeps memory bounded: jsonlines encoding of a multi-million-row result into a sink
//! must peak at the same heap whatever the row count. A counting global allocator in this test
//! binary measures the live heap; the tests here take turns (`SERIAL`) so none allocates while
//! another measures.

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use mindlite::{Config, Engine, QueryRequest, WireFormat, WireStream};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Streams `sql` as jsonlines into a counter; returns (bytes, rows, peak heap growth).
fn stream_peak(engine: &Engine, sql: &str) -> (usize, usize, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut stream = WireStream::new(
        engine.query_blocking(QueryRequest::new(sql)),
        WireFormat::JsonLines,
    );
    let (mut bytes, mut brackets, mut lines) = (0, 0, 0);
    while let Some(piece) = engine.block_on(stream.next_chunk()) {
        bytes += piece.len();
        brackets += piece.iter().filter(|b| **b == b'[').count();
        lines += 1;
    }
    drop(stream);
    // The header has one bracket; each row line `[[…],[…]]` one per row plus one.
    (
        bytes,
        brackets - lines,
        PEAK.load(Ordering::Relaxed).saturating_sub(base),
    )
}

const MIB: usize = 1024 * 1024;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn jsonlines_streaming_memory_does_not_grow_with_row_count() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path().join("stream.redb"), Config::default()).unwrap();
    let computed = |n: u64| {
        format!("SELECT value AS id, value * 0.5 AS half, concat('row-', value) AS label FROM generate_series(1, {n})")
    };

    // A computed result, straight from DataFusion's streaming execution.
    let (_, small_rows, small_peak) = stream_peak(&engine, &computed(200_000));
    let (big_bytes, big_rows, big_peak) = stream_peak(&engine, &computed(2_000_000));
    assert_eq!((small_rows, big_rows), (200_000, 2_000_000));
    assert!(
        big_bytes > 50 * MIB,
        "the 2M-row result is {big_bytes} bytes"
    );
    eprintln!(
        "computed: 200k rows peak {} KiB, 2M rows peak {} KiB ({} MiB encoded)",
        small_peak / 1024,
        big_peak / 1024,
        big_bytes / MIB
    );
    assert!(
        big_peak < 48 * MIB,
        "2M computed rows peaked at {} MiB of heap",
        big_peak / MIB
    );
    assert!(
        big_peak < small_peak * 2 + 8 * MIB,
        "peak grew with rows: {small_peak} -> {big_peak}"
    );

    // A stored table, read chunk by chunk from redb. Both caches (decoded chunks, redb pages) are
    // bounded by their own budgets, not by the stream; they are made small so the stream alone
    // is measured.
    engine
        .sql_blocking(&format!("CREATE TABLE t AS {}", computed(2_000_000)))
        .unwrap();
    drop(engine);
    let mut config = Config::default();
    config.storage.batch_cache_mb = Some(0);
    config.storage.page_cache_mb = Some(4);
    // Each partition holds one decoded chunk at a time, so the bound scales with partitions.
    config.query.target_partitions = 2;
    let engine = Engine::open(dir.path().join("stream.redb"), config).unwrap();
    let (stored_bytes, stored_rows, stored_peak) = stream_peak(&engine, "SELECT * FROM t");
    eprintln!(
        "stored: 2M rows peak {} KiB ({} MiB encoded)",
        stored_peak / 1024,
        stored_bytes / MIB
    );
    assert_eq!(stored_rows, 2_000_000, "the stored table streams every row");
    assert!(
        stored_peak < 48 * MIB,
        "2M stored rows peaked at {} MiB of heap",
        stored_peak / MIB
    );
}

/// `t JOIN model` predicts batch by batch: the heap while streaming predictions for 200k rows
/// stays where it is for 20k.
#[test]
fn predicting_by_join_streams() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking(
            "CREATE TABLE train AS SELECT value % 10 AS x, CASE WHEN value % 3 = 0 THEN 'a' ELSE 'b' END AS g, \
             (value % 10) * 2.0 + CASE WHEN value % 3 = 0 THEN 5 ELSE 0 END AS y FROM generate_series(1, 500)",
        )
        .unwrap();
    engine
        .sql_blocking("CREATE MODEL m FROM mindsdb (SELECT * FROM train) PREDICT y")
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let model = engine.get_model("mindsdb", "m", None).unwrap();
        if model.status() == "complete" {
            break;
        }
        assert_ne!(model.status(), "error", "{model:?}");
        assert!(
            started.elapsed().as_secs() < 120,
            "still training: {model:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let join = |n: u64| {
        format!(
            "SELECT t.id, m.y FROM (SELECT value AS id, value % 10 AS x, 'a' AS g FROM generate_series(1, {n})) AS t \
             JOIN m AS m"
        )
    };
    let (_, small_rows, small_peak) = stream_peak(&engine, &join(20_000));
    let (_, big_rows, big_peak) = stream_peak(&engine, &join(200_000));
    eprintln!(
        "predicted by join: 20k rows peak {} KiB, 200k rows peak {} KiB",
        small_peak / 1024,
        big_peak / 1024
    );
    assert_eq!((small_rows, big_rows), (20_000, 200_000));
    assert!(
        big_peak < small_peak * 2 + 8 * MIB,
        "peak grew with rows: {small_peak} -> {big_peak}"
    );
}

/// ORDER BY must see every row before the first one goes out; past the memory limit it spills to
/// temporary files instead of holding the result.
#[test]
fn a_sort_larger_than_the_memory_limit_spills_instead_of_growing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut config = Config::default();
    config.query.memory_limit_mb = Some(40);
    let engine = Engine::open_in_memory(config).unwrap();
    let sql = "SELECT value AS id, concat('row-', value) AS label, value * 0.5 AS half \
               FROM generate_series(1, 2000000) ORDER BY label DESC";
    let (bytes, rows, peak) = stream_peak(&engine, sql);
    eprintln!(
        "sorted 2M rows ({} MiB encoded) with a 40 MiB limit: peak {} MiB",
        bytes / MIB,
        peak / MIB
    );
    assert_eq!(rows, 2_000_000);
    // The sorted rows alone take more than 64 MiB as Arrow arrays.
    assert!(
        peak < 64 * MIB,
        "the sort peaked at {} MiB of heap",
        peak / MIB
    );
}

/// A sort over no columns (its keys computed from nothing but the row: `ORDER BY random()`)
/// counts its keys against the memory limit and spills like any other.
#[test]
fn a_sort_of_keys_alone_spills_past_the_memory_limit() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut config = Config::default();
    config.query.memory_limit_mb = Some(40);
    let engine = Engine::open_in_memory(config).unwrap();
    let sql = "SELECT max(rn) AS top FROM (SELECT row_number() OVER (ORDER BY random()) AS rn \
               FROM generate_series(1, 6000000))";
    let (_, rows, peak) = stream_peak(&engine, sql);
    eprintln!(
        "sorted 6M keys with a 40 MiB limit: peak {} MiB",
        peak / MIB
    );
    assert_eq!(rows, 1);
    // The keys and their sort indices alone take more than 90 MiB.
    assert!(
        peak < 80 * MIB,
        "the sort peaked at {} MiB of heap",
        peak / MIB
    );
}
