//! `ENGINE = 'files'` over a local directory of CSV and Parquet files, and Parquet uploads.

use std::sync::Arc;

use datafusion::parquet::arrow::ArrowWriter;
use mindlite::arrow::array::{Date32Array, Float64Array, Int64Array, RecordBatch, StringArray};
use mindlite::arrow::datatypes::{DataType, Field, Schema};
use mindlite::{encode_document, Config, Engine, QueryRequest};
use serde_json::{json, Value};

fn doc(engine: &Engine, sql: &str) -> Value {
    let result = engine.query_blocking(QueryRequest::new(sql));
    serde_json::from_slice(&engine.block_on(encode_document(result))).unwrap()
}

fn rows(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d["data"].clone()
}

fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

/// A Parquet file's bytes: (sku, name, price, since) × 3.
fn stock_parquet() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("sku", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
        Field::new("since", DataType::Date32, true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec![Some("bolt"), None, Some("nut")])),
            Arc::new(Float64Array::from(vec![0.5, 1.25, 0.1])),
            Arc::new(Date32Array::from(vec![Some(19_000), None, Some(19_723)])),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

#[test]
fn a_directory_of_csv_and_parquet_files_is_a_read_only_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Sales.csv"),
        "id,sku,qty\n1,1,10\n2,3,5\n3,1,2\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("stock.parquet"), stock_parquet()).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a table").unwrap();
    std::fs::create_dir(dir.path().join("nested")).unwrap();
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let path = dir.path().to_str().unwrap();
    let d = doc(
        &engine,
        &format!("CREATE DATABASE f ENGINE = 'files', PARAMETERS = {{\"path\": \"{path}\"}}"),
    );
    assert_eq!(d["type"], "ok", "{d}");

    assert_eq!(
        rows(&engine, "SHOW TABLES FROM f"),
        json!([["sales"], ["stock"]])
    );
    assert_eq!(
        rows(
            &engine,
            "SELECT s.name, sum(t.qty) AS n FROM f.sales t JOIN f.stock s ON s.sku = t.sku GROUP BY s.name ORDER BY n DESC"
        ),
        json!([["bolt", 12], ["nut", 5]])
    );
    assert_eq!(
        rows(
            &engine,
            "SELECT sku, since FROM f.stock WHERE price < 1 ORDER BY sku"
        ),
        json!([[1, "2022-01-08"], [3, "2024-01-01"]])
    );
    let listed = rows(
        &engine,
        "SELECT type, engine, connection_data FROM information_schema.databases WHERE name = 'f'",
    );
    assert_eq!(
        (&listed[0][0], &listed[0][1]),
        (&json!("data"), &json!("files"))
    );
    assert!(listed[0][2].as_str().unwrap().contains(path), "{listed}");

    // A file changed on disk is read as it is now.
    std::fs::write(dir.path().join("Sales.csv"), "id,sku,qty\n9,2,1\n").unwrap();
    assert_eq!(rows(&engine, "SELECT count(*) FROM f.sales"), json!([[1]]));

    assert!(error(&engine, "INSERT INTO f.sales VALUES (4, 1, 1)").contains("read-only"));
    assert!(error(&engine, "CREATE TABLE f.more (SELECT 1 AS x)").contains("read-only"));
    assert!(error(&engine, "SELECT * FROM f (SELECT 1)").contains("no native queries"));
    assert!(error(&engine, "SELECT * FROM f.nosuch").contains("nosuch"));

    // Models train from its tables.
    let created = doc(
        &engine,
        "CREATE MODEL mindsdb.price_of FROM f (SELECT sku, price FROM stock) PREDICT price",
    );
    assert_eq!(created["type"], "table", "{created}");
}

#[test]
fn bad_directories_are_refused_by_name() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let message = error(
        &engine,
        "CREATE DATABASE f ENGINE = 'files', PARAMETERS = {\"path\": \"/no/such/dir\"}",
    );
    assert!(message.contains("/no/such/dir"), "{message}");
    let file = tempfile::NamedTempFile::new().unwrap();
    let message = error(
        &engine,
        &format!(
            "CREATE DATABASE f ENGINE = 'files', PARAMETERS = {{\"path\": \"{}\"}}",
            file.path().display()
        ),
    );
    assert!(message.contains("not a directory"), "{message}");
    let message = error(&engine, "CREATE DATABASE f ENGINE = 'files'");
    assert!(message.contains("\"path\""), "{message}");
    let message = error(
        &engine,
        "CREATE DATABASE f ENGINE = 'files', PARAMETERS = {\"path\": \"/tmp\", \"glob\": \"*\"}",
    );
    assert!(message.contains("'glob'"), "{message}");
    assert_eq!(
        rows(
            &engine,
            "SELECT count(*) FROM information_schema.databases WHERE name = 'f'"
        ),
        json!([[0]])
    );
}

#[test]
fn parquet_uploads_keep_their_types() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    let rows_written = engine
        .block_on(engine.upload_file("stock", stock_parquet(), None, Some("stock.parquet")))
        .unwrap();
    assert_eq!(rows_written, 3);
    assert_eq!(
        rows(
            &engine,
            "SELECT arrow_typeof(sku), arrow_typeof(price), arrow_typeof(since) FROM files.stock LIMIT 1"
        ),
        json!([["Int64", "Float64", "Date32"]])
    );
    assert_eq!(
        rows(&engine, "SELECT name, since FROM files.stock ORDER BY sku"),
        json!([["bolt", "2022-01-08"], [null, null], ["nut", "2024-01-01"]])
    );
    // Sniffed from the bytes when neither a format nor a name says.
    engine
        .block_on(engine.upload_file("again", stock_parquet(), None, None))
        .unwrap();
    let broken = engine
        .block_on(engine.upload_file("broken", b"PAR1 but not really".to_vec(), None, None))
        .unwrap_err();
    assert!(
        broken.message().contains("not readable as Parquet"),
        "{broken}"
    );
}

#[test]
fn variables_fill_parameters_from_the_request_or_a_set_that_outlives_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.csv"), "x\n1\n2\n").unwrap();
    let path = dir.path().to_str().unwrap();
    let file = tempfile::tempdir().unwrap();
    let store = file.path().join("vars.mindlite");
    let engine = Engine::open(&store, Config::default()).unwrap();

    // A request's parameter, in any case the statement writes it.
    let create = "CREATE DATABASE a ENGINE = 'files', PARAMETERS = {\"path\": @Dir}";
    let request = QueryRequest::new(create).with_param("dir", json!(path));
    let d: Value =
        serde_json::from_slice(&engine.block_on(encode_document(engine.query_blocking(request))))
            .unwrap();
    assert_eq!(d["type"], "ok", "{d}");
    assert_eq!(rows(&engine, "SELECT count(*) FROM a.t"), json!([[2]]));

    // Not defined: named, with how to define it.
    let message = error(
        &engine,
        "CREATE DATABASE b ENGINE = 'files', PARAMETERS = {\"path\": @nope}",
    );
    assert!(
        message.contains("@nope") && message.contains("SET @nope"),
        "{message}"
    );

    // SET keeps it; a list and an object are values too (read back as JSON).
    let set = format!("SET @dir = '{}', @list = 3", path.replace('\'', "''"));
    assert_eq!(doc(&engine, &set)["type"], "ok");
    drop(engine);
    let engine = Engine::open(&store, Config::default()).unwrap();
    assert_eq!(
        doc(
            &engine,
            "CREATE DATABASE b ENGINE = 'files', PARAMETERS = {\"path\": @dir}"
        )["type"],
        "ok"
    );
    assert_eq!(rows(&engine, "SELECT sum(x) FROM b.t"), json!([[3]]));
    // The request's parameter comes first.
    let request =
        QueryRequest::new("CREATE DATABASE c ENGINE = 'files', PARAMETERS = {\"path\": @dir}")
            .with_param("dir", json!("/no/such/dir"));
    let d: Value =
        serde_json::from_slice(&engine.block_on(encode_document(engine.query_blocking(request))))
            .unwrap();
    assert!(
        d["error_message"]
            .as_str()
            .unwrap()
            .contains("/no/such/dir"),
        "{d}"
    );

    // from_env reads only MDB_ variables.
    let message = error(&engine, "SET @home = from_env('HOME')");
    assert!(message.contains("MDB_"), "{message}");
    let message = error(&engine, "SET @v = from_env('MDB_SURELY_NOT_SET_42')");
    assert!(message.contains("MDB_SURELY_NOT_SET_42"), "{message}");
    let message = error(&engine, "SET @v = now()");
    assert!(message.contains("literal value"), "{message}");

    // Bounded: 100 variables of 16 KiB each.
    let message = error(&engine, &format!("SET @big = '{}'", "x".repeat(17_000)));
    assert!(message.contains("16384"), "{message}");
    for i in 0..98 {
        assert_eq!(doc(&engine, &format!("SET @v{i} = {i}"))["type"], "ok");
    }
    let message = error(&engine, "SET @one_too_many = 1");
    assert!(message.contains("(100)"), "{message}");
    assert_eq!(doc(&engine, "SET @v1 = 'replaced'")["type"], "ok");
    // NULL forgets one, which frees its place.
    assert_eq!(doc(&engine, "SET @v2 = NULL")["type"], "ok");
    assert_eq!(doc(&engine, "SET @one_more = 1")["type"], "ok");
}
