//! Models through SQL: CREATE MODEL trains in the background from a query over stored data,
//! the status moves generating → training → complete (or error, with the reason), the models
//! tables and DESCRIBE show what training found, and a model answers `SELECT y FROM m WHERE …`.

use std::time::{Duration, Instant};

use mindlite::{encode_document, Config, Engine, QueryRequest};
use serde_json::Value;

fn doc(engine: &Engine, sql: &str) -> Value {
    let result = engine.query_blocking(QueryRequest::new(sql));
    let body = engine.block_on(encode_document(result));
    serde_json::from_slice(&body).unwrap()
}

fn table(engine: &Engine, sql: &str) -> Value {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "table", "{sql}: {d}");
    d
}

fn error(engine: &Engine, sql: &str) -> String {
    let d = doc(engine, sql);
    assert_eq!(d["type"], "error", "{sql}: {d}");
    d["error_message"].as_str().unwrap().to_string()
}

/// Waits until the model's active (or only) version leaves generating/training; its row.
fn wait_done(engine: &Engine, project: &str, name: &str) -> Value {
    let started = Instant::now();
    loop {
        let d = table(
            engine,
            &format!("SELECT status, error, accuracy, current_training_phase, total_training_phases, training_time FROM {project}.models WHERE name = '{name}'"),
        );
        let row = d["data"][0].clone();
        if row[0] == "complete" || row[0] == "error" {
            return row;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{name} still {row} after 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A deterministic pseudo-random number in [0, 1) from `i`.
fn noise(i: u64) -> f64 {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `homes`: price = 3·rooms + 10 when area is 'center' (else 0) + a little noise, with an
/// unrelated column `color`.
fn homes(engine: &Engine, rows: u64) {
    engine
        .sql_blocking("CREATE TABLE homes (rooms DOUBLE, area VARCHAR, color DOUBLE, price DOUBLE)")
        .unwrap();
    let values: Vec<String> = (0..rows)
        .map(|i| {
            let rooms = (noise(i) * 10.0).floor();
            let area = ["center", "north", "south"][(i % 3) as usize];
            let bonus = if area == "center" { 10.0 } else { 0.0 };
            let price = 3.0 * rooms + bonus + noise(i + 1_000_000) * 0.5;
            format!("({rooms}, '{area}', {}, {price})", noise(i + 2_000_000))
        })
        .collect();
    engine
        .sql_blocking(&format!("INSERT INTO homes VALUES {}", values.join(", ")))
        .unwrap();
}

#[test]
fn a_regression_model_trains_in_the_background_and_predicts() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 600);
    let created = table(
        &engine,
        "CREATE MODEL mindsdb.price_model FROM mindsdb (SELECT * FROM homes) PREDICT price",
    );
    assert_eq!(
        created["column_names"],
        serde_json::json!([
            "NAME",
            "ENGINE",
            "PROJECT",
            "ACTIVE",
            "VERSION",
            "STATUS",
            "ACCURACY",
            "PREDICT",
            "UPDATE_STATUS",
            "MINDSDB_VERSION",
            "ERROR",
            "SELECT_DATA_QUERY",
            "TRAINING_OPTIONS",
            "TAG"
        ])
    );
    let row = &created["data"][0];
    assert_eq!(row[0], "price_model");
    assert_eq!(row[1], "builtin");
    assert_eq!(
        (row[3].clone(), row[4].clone(), row[5].clone()),
        (Value::Bool(true), 1.into(), "generating".into())
    );
    assert_eq!(row[11], "SELECT * FROM homes");
    assert_eq!(
        row[12],
        "{'__mdb_sql_task': None, 'target': 'price', 'using': {}}"
    );

    let done = wait_done(&engine, "mindsdb", "price_model");
    assert_eq!(done[0], "complete", "{done}");
    assert!(done[2].as_f64().unwrap() > 0.9, "r2 {done}");
    assert_eq!(done[3], done[4], "every phase ran: {done}");
    assert!(done[5].as_f64().unwrap() >= 0.0);

    let info = table(&engine, "DESCRIBE mindsdb.price_model.info");
    let importances: serde_json::Map<String, Value> =
        serde_json::from_str(info["data"][0][1].as_str().unwrap()).unwrap();
    let top = importances
        .iter()
        .max_by(|a, b| a.1.as_f64().partial_cmp(&b.1.as_f64()).unwrap())
        .unwrap();
    assert_eq!(top.0, "rooms", "{importances:?}");
    assert!(
        importances["color"].as_f64().unwrap() < 0.2,
        "{importances:?}"
    );
    assert!(
        info["data"][0][4].as_str().unwrap().contains(" --> "),
        "{info}"
    );

    let predicted = table(
        &engine,
        "SELECT price, rooms FROM mindsdb.price_model WHERE rooms = 4 AND area = 'center'",
    );
    // Conditions that are not input values are refused by name, never an empty answer.
    for (sql, named) in [
        ("SELECT price FROM price_model WHERE rooms > 4", "rooms >"),
        (
            "SELECT price FROM price_model WHERE rooms = 4 AND price = 1",
            "predicted column",
        ),
    ] {
        let message = error(&engine, sql);
        assert!(
            message.contains("column = value") && message.contains(named),
            "{sql}: {message}"
        );
    }
    assert!(error(&engine, "DESCRIBE mindsdb.price_model.`7`").contains("no version 7"));
    let price = predicted["data"][0][0].as_f64().unwrap();
    assert!((price - 22.0).abs() < 3.0, "predicted {price} for 3·4 + 10");
    assert_eq!(predicted["data"][0][1], 4.0);
}

#[test]
fn a_classification_model_names_its_informative_column() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking("CREATE TABLE signals (x DOUBLE, junk DOUBLE, label VARCHAR)")
        .unwrap();
    let values: Vec<String> = (0..400)
        .map(|i| {
            let x = noise(i) * 2.0 - 1.0;
            let label = if x > 0.0 { "up" } else { "down" };
            format!("({x}, {}, '{label}')", noise(i + 99_999))
        })
        .collect();
    engine
        .sql_blocking(&format!("INSERT INTO signals VALUES {}", values.join(", ")))
        .unwrap();
    table(
        &engine,
        "CREATE PREDICTOR direction FROM mindsdb (SELECT x, junk, label FROM signals) PREDICT label USING engine = 'lightwood'",
    );
    let done = wait_done(&engine, "mindsdb", "direction");
    assert_eq!(done[0], "complete", "{done}");
    assert!(done[2].as_f64().unwrap() > 0.9, "balanced accuracy {done}");
    let features = table(&engine, "DESCRIBE direction.features");
    assert_eq!(
        features["column_names"],
        serde_json::json!(["COLUMN", "TYPE", "IMPORTANCE", "ROLE"])
    );
    let x = features["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == "x")
        .unwrap()
        .clone();
    assert_eq!(x[2], 1.0, "{features}");
    let up = table(
        &engine,
        "SELECT label FROM direction WHERE x = 0.8 AND junk = 0.1",
    );
    assert_eq!(up["data"], serde_json::json!([["up"]]));
    let down = table(&engine, "SELECT label FROM direction WHERE x = -0.8");
    assert_eq!(down["data"], serde_json::json!([["down"]]));
}

#[test]
fn models_are_listed_shown_described_and_dropped() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 60);
    table(
        &engine,
        "CREATE MODEL m1 FROM mindsdb (SELECT rooms, price FROM homes) PREDICT price",
    );
    wait_done(&engine, "mindsdb", "m1");
    engine.sql_blocking("CREATE PROJECT other").unwrap();
    table(
        &engine,
        "CREATE MODEL other.m2 FROM mindsdb.homes PREDICT area",
    );
    wait_done(&engine, "other", "m2");

    let active = table(
        &engine,
        "SELECT name, active, version FROM models WHERE active = '1'",
    );
    assert_eq!(active["data"], serde_json::json!([["m1", true, 1]]));
    assert_eq!(
        active["column_names"],
        serde_json::json!(["NAME", "ACTIVE", "VERSION"])
    );
    let shown = table(&engine, "SHOW MODELS FROM other");
    assert_eq!(shown["data"][0][0], "m2");
    assert!(shown["column_names"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "TRAINING_TIME"));
    let all = table(
        &engine,
        "SELECT project, name, predict FROM information_schema.models ORDER BY project",
    );
    assert_eq!(
        all["data"],
        serde_json::json!([["mindsdb", "m1", "price"], ["other", "m2", "area"]])
    );
    let options = table(
        &engine,
        "SELECT training_options FROM information_schema.models WHERE name = 'm2'",
    );
    let options: Value = serde_json::from_str(options["data"][0][0].as_str().unwrap()).unwrap();
    assert_eq!(options["target"], "area");

    let described = table(&engine, "DESCRIBE mindsdb.m1");
    assert_eq!(described["column_names"][0], "TABLES");
    assert_eq!(
        described["data"][0][0],
        serde_json::json!(["info", "features", "model"])
    );
    assert!(error(&engine, "DESCRIBE mindsdb.m1.nosuch").contains("info, features"));
    // A table is still described as a table.
    assert!(
        table(&engine, "DESCRIBE homes")["data"]
            .as_array()
            .unwrap()
            .len()
            >= 4
    );

    assert_eq!(
        error(
            &engine,
            "CREATE MODEL m1 FROM mindsdb (SELECT * FROM homes) PREDICT price"
        ),
        "Model already exists: mindsdb.m1"
    );
    assert_eq!(
        doc(
            &engine,
            "CREATE MODEL IF NOT EXISTS m1 FROM mindsdb (SELECT * FROM homes) PREDICT price"
        )["type"],
        "ok"
    );
    engine.sql_blocking("DROP MODEL m1").unwrap();
    assert!(error(&engine, "DROP MODEL m1").contains("'m1'"));
    engine.sql_blocking("DROP PREDICTOR IF EXISTS m1").unwrap();
    assert!(error(&engine, "SELECT price FROM m1 WHERE rooms = 1").contains("m1"));
    engine.sql_blocking("DROP PROJECT other").unwrap();
    engine.sql_blocking("CREATE PROJECT other").unwrap();
    assert_eq!(
        table(&engine, "SELECT * FROM information_schema.models")["data"],
        serde_json::json!([])
    );
}

#[test]
fn bad_model_statements_say_what_is_wrong() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 30);
    let cases = [
        ("CREATE MODEL m FROM mindsdb (SELECT * FROM nosuch) PREDICT price", "nosuch"),
        ("CREATE MODEL m FROM mindsdb (SELECT * FROM homes) PREDICT nope", "'nope'"),
        ("CREATE MODEL m FROM mindsdb (SELECT * FROM homes) PREDICT price USING engine = 'openai_x'", "openai_x"),
        ("CREATE MODEL m PREDICT price", "FROM db (SELECT"),
        ("CREATE MODEL m FROM mindsdb (SELECT * FROM homes) PREDICT price, rooms", "one column"),
        ("CREATE MODEL nosuchproject.m FROM mindsdb (SELECT * FROM homes) PREDICT price", "nosuchproject"),
        ("CREATE MODEL m FROM mindsdb (INSERT INTO homes VALUES (1, 'x', 1, 1)) PREDICT price", "SELECT"),
        ("DROP MODEL nosuch", "nosuch"),
        ("CREATE MODEL homes FROM mindsdb (SELECT * FROM homes) PREDICT price", "already a table"),
        ("CREATE MODEL models FROM mindsdb (SELECT * FROM homes) PREDICT price", "already a table"),
        (
            "CREATE MODEL m FROM mindsdb (SELECT a.price, b.price FROM homes a JOIN homes b ON a.rooms = b.rooms) PREDICT price",
            "two columns named 'price'",
        ),
    ];
    for (sql, named) in cases {
        let message = error(&engine, sql);
        assert!(message.contains(named), "{sql}: {message}");
    }
    assert_eq!(
        table(&engine, "SELECT count(*) AS n FROM homes")["data"],
        serde_json::json!([[30]])
    );
    assert_eq!(table(&engine, "SHOW MODELS")["data"], serde_json::json!([]));
}

#[test]
fn a_model_whose_training_fails_is_an_error_with_the_reason() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 5);
    table(
        &engine,
        "CREATE MODEL tiny FROM mindsdb (SELECT * FROM homes) PREDICT price",
    );
    let done = wait_done(&engine, "mindsdb", "tiny");
    assert_eq!(done[0], "error");
    assert!(done[1].as_str().unwrap().contains("rows"), "{done}");
    let message = error(&engine, "SELECT price FROM tiny WHERE rooms = 1");
    assert!(
        message.contains("model creation not completed"),
        "{message}"
    );
}

#[test]
fn a_model_left_training_by_a_stop_is_an_error_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("models.redb");
    {
        let engine = Engine::open(&path, Config::default()).unwrap();
        homes(&engine, 3000);
        table(
            &engine,
            "CREATE MODEL slow FROM mindsdb (SELECT * FROM homes) PREDICT price",
        );
        engine.close();
    }
    let engine = Engine::open(&path, Config::default()).unwrap();
    let row = table(
        &engine,
        "SELECT status, error FROM models WHERE name = 'slow'",
    )["data"][0]
        .clone();
    // Training may have finished before the close; it must never stay in progress.
    match row[0].as_str().unwrap() {
        "complete" => {}
        "error" => assert!(
            row[1].as_str().unwrap().contains("training interrupted"),
            "{row}"
        ),
        other => panic!("status {other} after reopening"),
    }
}

#[test]
fn retraining_adds_versions_and_the_active_one_can_be_chosen() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 300);
    table(
        &engine,
        "CREATE MODEL m FROM mindsdb (SELECT rooms, area, price FROM homes) PREDICT price",
    );
    wait_done(&engine, "mindsdb", "m");
    let retrained = table(&engine, "RETRAIN mindsdb.m USING note = 'second'");
    assert_eq!(retrained["data"][0][4], 2, "{retrained}");
    assert_eq!(
        retrained["data"][0][3], false,
        "a new version is inactive until complete"
    );
    let versions = |engine: &Engine| {
        let started = Instant::now();
        loop {
            let d = table(engine, "SELECT version, active, status, error FROM models WHERE name = 'm' ORDER BY version");
            let rows = d["data"].as_array().unwrap();
            if rows.iter().all(|r| r[2] == "complete" || r[2] == "error") {
                return d["data"].clone();
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "versions never finished: {d}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(
        versions(&engine),
        serde_json::json!([[1, false, "complete", null], [2, true, "complete", null]])
    );
    let options = table(
        &engine,
        "SELECT training_options FROM models WHERE version = 2",
    )["data"][0][0]
        .clone();
    assert!(options.as_str().unwrap().contains("second"), "{options}");

    // FINETUNE on other data: version 3, trained on the center homes only.
    table(
        &engine,
        "FINETUNE m FROM mindsdb (SELECT rooms, area, price FROM homes WHERE area = 'center')",
    );
    assert_eq!(
        versions(&engine)[2],
        serde_json::json!([3, true, "complete", null])
    );
    assert!(table(
        &engine,
        "SELECT select_data_query FROM models WHERE version = 3"
    )["data"][0][0]
        .as_str()
        .unwrap()
        .contains("center"));

    engine.sql_blocking("SET active mindsdb.m.`1`").unwrap();
    let active = table(
        &engine,
        "SELECT version FROM models WHERE name = 'm' AND active = 'true'",
    );
    assert_eq!(active["data"], serde_json::json!([[1]]));
    // Predictions come from the active version; DESCRIBE can name any version.
    table(&engine, "SELECT price FROM m WHERE rooms = 2");
    assert_eq!(table(&engine, "DESCRIBE mindsdb.m.`2`")["data"][0][5], 2);

    assert!(error(&engine, "SET active mindsdb.m.`9`").contains("no version 9"));
    assert!(error(&engine, "DROP MODEL m.`1`").contains("active"));
    engine.sql_blocking("DROP MODEL m.`2`").unwrap();
    let left = table(&engine, "SELECT version FROM models ORDER BY version");
    assert_eq!(left["data"], serde_json::json!([[1], [3]]));
    assert!(error(&engine, "RETRAIN nosuch").contains("nosuch"));
}

/// `t JOIN model`: every row of `t` gets the model's columns, inputs matched by name and the
/// target predicted; a model joined another way is refused, an input that does not fit its
/// trained type is named.
#[test]
fn joining_a_table_with_a_model_predicts_every_row() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 600);
    table(
        &engine,
        "CREATE MODEL price_model FROM mindsdb (SELECT rooms, area, price FROM homes) PREDICT price",
    );
    assert_eq!(wait_done(&engine, "mindsdb", "price_model")[0], "complete");

    let joined = table(
        &engine,
        "SELECT t.rooms, t.area, m.price FROM mindsdb.homes AS t JOIN mindsdb.price_model AS m",
    );
    let rows = joined["data"].as_array().unwrap();
    assert_eq!(rows.len(), 600);
    for row in rows {
        let expected = 3.0 * row[0].as_f64().unwrap() + if row[1] == "center" { 10.0 } else { 0.0 };
        let price = row[2].as_f64().unwrap();
        assert!(
            (price - expected).abs() < 3.0,
            "{row:?}: {price} for {expected}"
        );
    }

    // `m.*` is the model's columns: inputs from the rows (by name, any case), target predicted.
    let star = table(
        &engine,
        "SELECT m.* FROM (SELECT 2 AS ROOMS, 'center' AS area) AS t JOIN price_model AS m",
    );
    assert_eq!(
        star["column_names"],
        serde_json::json!([
            "rooms",
            "area",
            "price",
            "price_confidence",
            "price_min",
            "price_max",
            "price_explain"
        ])
    );
    assert_eq!(star["data"][0][0], 2.0);
    assert!(
        (star["data"][0][2].as_f64().unwrap() - 16.0).abs() < 3.0,
        "{star}"
    );

    // The model may come first; filters, sorting, LIMIT and aggregates work on predictions.
    let first = table(
        &engine,
        "SELECT m.price, t.rooms FROM price_model AS m JOIN homes AS t WHERE m.price > 30 ORDER BY t.rooms DESC LIMIT 3",
    );
    assert_eq!(first["column_names"], serde_json::json!(["price", "rooms"]));
    assert_eq!(first["data"].as_array().unwrap().len(), 3);
    assert!(first["data"][0][0].as_f64().unwrap() > 30.0);
    let counted = table(
        &engine,
        "SELECT count(*), avg(m.price) > 10 FROM homes AS t JOIN price_model AS m",
    );
    assert_eq!(counted["data"], serde_json::json!([[600, true]]));

    let on = error(
        &engine,
        "SELECT * FROM homes AS t JOIN price_model AS m ON t.rooms = m.rooms",
    );
    assert!(on.contains("joined with a condition"), "{on}");
    let left = error(
        &engine,
        "SELECT * FROM homes AS t LEFT JOIN price_model AS m ON true",
    );
    assert!(left.contains("outer join"), "{left}");
    let misfit = error(
        &engine,
        "SELECT m.price FROM (SELECT 'many' AS rooms) AS t JOIN price_model AS m",
    );
    assert!(
        misfit.contains("'rooms'") && misfit.contains("price_model"),
        "{misfit}"
    );

    let unrelated = error(
        &engine,
        "SELECT m.price FROM (SELECT 1 AS x) AS t JOIN price_model AS m",
    );
    assert!(
        unrelated.contains("none of its input columns (rooms, area)"),
        "{unrelated}"
    );
    let twice = error(
        &engine,
        "SELECT m.price FROM homes AS a JOIN homes AS b ON a.rooms = b.rooms JOIN price_model AS m",
    );
    assert!(twice.contains("two columns named 'rooms'"), "{twice}");

    // A model whose training failed is no model to join.
    table(
        &engine,
        "CREATE MODEL empty_model FROM mindsdb (SELECT rooms, price FROM homes WHERE rooms > 1000) PREDICT price",
    );
    assert_eq!(wait_done(&engine, "mindsdb", "empty_model")[0], "error");
    let failed = error(
        &engine,
        "SELECT m.price FROM homes AS t JOIN empty_model AS m",
    );
    assert!(failed.contains("model creation not completed"), "{failed}");
}

#[test]
fn predictions_carry_confidence_an_interval_and_an_explanation() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    homes(&engine, 600);
    table(
        &engine,
        "CREATE MODEL price_model FROM mindsdb (SELECT rooms, area, color, price FROM homes) PREDICT price",
    );
    assert_eq!(wait_done(&engine, "mindsdb", "price_model")[0], "complete");

    let joined = table(
        &engine,
        "SELECT t.price, m.price, m.price_confidence, m.price_min, m.price_max, m.price_explain \
         FROM homes AS t JOIN price_model AS m",
    );
    let rows = joined["data"].as_array().unwrap();
    assert_eq!(rows.len(), 600);
    let mut inside = 0;
    for row in rows {
        let (truth, price) = (row[0].as_f64().unwrap(), row[1].as_f64().unwrap());
        let (low, high) = (row[3].as_f64().unwrap(), row[4].as_f64().unwrap());
        assert_eq!(row[2], 0.9, "{row:?}");
        assert!(low < price && price < high, "{row:?}");
        inside += usize::from(low <= truth && truth <= high);
        let explained: Value = serde_json::from_str(row[5].as_str().unwrap()).unwrap();
        assert_eq!(explained["predicted_value"], row[1], "{explained}");
        assert_eq!(explained["confidence_lower_bound"], row[3], "{explained}");
        let top = explained["top_inputs"][0]["column"].as_str().unwrap();
        assert!(["rooms", "area"].contains(&top), "{explained}");
    }
    assert!(inside >= 540, "{inside} of 600 inside the 90 % interval");

    // Predictions not asked to explain themselves skip the explanation's cost.
    let plan = table(
        &engine,
        "EXPLAIN SELECT t.rooms, m.price, m.price_max FROM homes AS t JOIN price_model AS m",
    );
    assert!(plan.to_string().contains("without explanations"), "{plan}");
    let plan = table(
        &engine,
        "EXPLAIN SELECT m.price_explain FROM homes AS t JOIN price_model AS m",
    );
    assert!(!plan.to_string().contains("without explanations"), "{plan}");
    // The target spelt in another case names the same columns.
    table(
        &engine,
        "CREATE MODEL upper_model FROM mindsdb (SELECT rooms, area, price FROM homes) PREDICT PRICE",
    );
    assert_eq!(wait_done(&engine, "mindsdb", "upper_model")[0], "complete");
    let plan = table(
        &engine,
        "EXPLAIN SELECT count(*) FROM homes AS t JOIN upper_model AS m",
    );
    assert!(plan.to_string().contains("without explanations"), "{plan}");
    // A detail can be filtered on like any column.
    let sure = table(
        &engine,
        "SELECT count(*) FROM homes AS t JOIN price_model AS m WHERE m.price_confidence > 0.5",
    );
    assert_eq!(sure["data"], serde_json::json!([[600]]));

    let one = table(
        &engine,
        "SELECT price, price_confidence, price_explain FROM price_model WHERE rooms = 4 AND area = 'center'",
    );
    let explained: Value = serde_json::from_str(one["data"][0][2].as_str().unwrap()).unwrap();
    assert_eq!(explained["predicted_value"], one["data"][0][0]);

    let candidates = table(&engine, "DESCRIBE price_model.model");
    assert_eq!(
        candidates["column_names"],
        serde_json::json!([
            "NAME",
            "PERFORMANCE",
            "TRAINING_TIME",
            "SELECTED",
            "ACCURACY_FUNCTIONS",
            "ERROR"
        ])
    );
    let rows = candidates["data"].as_array().unwrap();
    assert!(rows.len() >= 8, "{candidates}");
    assert_eq!(
        rows.iter().filter(|r| r[3] == true).count(),
        1,
        "{candidates}"
    );
    assert!(rows.iter().all(|r| r[4] == "r2_score"), "{candidates}");

    // A classifier's confidence is its predicted class's probability; it has no interval.
    engine
        .sql_blocking("CREATE TABLE signals (x DOUBLE, label VARCHAR)")
        .unwrap();
    let values: Vec<String> = (0..300)
        .map(|i| {
            let x = noise(i) * 2.0 - 1.0;
            format!("({x}, '{}')", if x > 0.0 { "up" } else { "down" })
        })
        .collect();
    engine
        .sql_blocking(&format!("INSERT INTO signals VALUES {}", values.join(", ")))
        .unwrap();
    table(
        &engine,
        "CREATE MODEL direction FROM mindsdb (SELECT x, label FROM signals) PREDICT label",
    );
    assert_eq!(wait_done(&engine, "mindsdb", "direction")[0], "complete");
    let up = table(
        &engine,
        "SELECT label, label_confidence, label_min, label_max FROM direction WHERE x = 0.9",
    );
    let row = &up["data"][0];
    assert_eq!(row[0], "up", "{up}");
    assert!(row[1].as_f64().unwrap() > 0.8, "{up}");
    assert_eq!((row[2].clone(), row[3].clone()), (Value::Null, Value::Null));
}

/// Two stores' daily sales from 2024-01-01: a level per store, a weekly season, a slow trend.
fn sales_amount(store: &str, day: i64) -> f64 {
    let level = if store == "north" { 100.0 } else { 40.0 };
    let weekly = [0.0, 5.0, 8.0, 6.0, 2.0, -9.0, -12.0][(day % 7) as usize];
    level + weekly + 0.05 * day as f64
}

#[test]
fn a_time_series_model_forecasts_each_group_after_its_last_row() {
    let engine = Engine::open_in_memory(Config::default()).unwrap();
    engine
        .sql_blocking("CREATE TABLE sales (d DATE, store VARCHAR, amount DOUBLE)")
        .unwrap();
    let values: Vec<String> = ["north", "south"]
        .iter()
        .flat_map(|store| {
            (0..84).map(move |day| {
                format!(
                    "(DATE '2024-01-01' + INTERVAL '{day} days', '{store}', {})",
                    sales_amount(store, day)
                )
            })
        })
        .collect();
    engine
        .sql_blocking(&format!("INSERT INTO sales VALUES {}", values.join(", ")))
        .unwrap();
    table(
        &engine,
        "CREATE MODEL sales_model FROM mindsdb (SELECT * FROM sales) PREDICT amount ORDER BY d GROUP BY store WINDOW 14 HORIZON 5",
    );
    let done = wait_done(&engine, "mindsdb", "sales_model");
    assert_eq!(done[0], "complete", "{done}");
    assert!(done[2].as_f64().unwrap() > 0.9, "backtest r2 {done}");

    // `> LATEST`: the five days after each store's last (2024-03-24), forecast.
    let future = table(
        &engine,
        "SELECT t.d, t.store, m.amount, m.latest FROM mindsdb.sales AS t JOIN mindsdb.sales_model AS m \
         WHERE t.d > LATEST ORDER BY t.store, t.d",
    );
    let rows = future["data"].as_array().unwrap();
    assert_eq!(rows.len(), 10, "{future}");
    for (n, row) in rows.iter().enumerate() {
        let (store, day) = (if n < 5 { "north" } else { "south" }, 84 + (n % 5) as i64);
        assert_eq!(row[0], format!("2024-03-{}", 25 + n % 5), "{row:?}");
        assert_eq!(row[1], store);
        assert_eq!(row[3], "2024-03-24");
        let (got, want) = (row[2].as_f64().unwrap(), sales_amount(store, day));
        assert!((got - want).abs() < 3.0, "{row:?}: {got} for {want}");
    }
    // Without it: every row answered from the rows before it, then the future rows.
    let all = table(
        &engine,
        "SELECT count(*), count(m.amount) FROM sales AS t JOIN sales_model AS m",
    );
    assert_eq!(all["data"], serde_json::json!([[178, 176]]));
    // The rows joined are the history: one store's gives that store's forecast.
    let north = table(
        &engine,
        "SELECT t.store, m.amount_min < m.amount FROM (SELECT * FROM sales WHERE store = 'north') AS t \
         JOIN sales_model AS m WHERE t.d > LATEST",
    );
    assert_eq!(north["data"].as_array().unwrap().len(), 5, "{north}");
    assert!(north["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r[0] == "north" && r[1] == true));

    // NOT NULL columns of the rows still take the future rows' NULLs.
    engine
        .sql_blocking(
            "CREATE TABLE sales_nn (d DATE NOT NULL, store VARCHAR NOT NULL, amount DOUBLE NOT NULL)",
        )
        .unwrap();
    engine
        .sql_blocking("INSERT INTO sales_nn SELECT * FROM sales")
        .unwrap();
    let strict = table(
        &engine,
        "SELECT count(*) FROM sales_nn AS t JOIN sales_model AS m WHERE t.d > LATEST",
    );
    assert_eq!(strict["data"], serde_json::json!([[10]]));
    // A history shifted in time and level is forecast at its own level.
    let shifted = table(
        &engine,
        "SELECT m.amount FROM (SELECT d + INTERVAL '400 days' AS d, store, amount + 1000 AS amount \
         FROM sales WHERE store = 'north') AS t JOIN sales_model AS m WHERE t.d > LATEST",
    );
    for row in shifted["data"].as_array().unwrap() {
        let amount = row[0].as_f64().unwrap();
        assert!((1080.0..1130.0).contains(&amount), "{shifted}");
    }
    // Without a GROUP BY column the series would merge: refused.
    let merged = error(
        &engine,
        "SELECT count(*) FROM (SELECT d, amount FROM sales) AS t JOIN sales_model AS m",
    );
    assert!(
        merged.contains("no 'store' column (its GROUP BY)"),
        "{merged}"
    );

    let alone = error(
        &engine,
        "SELECT amount FROM sales_model WHERE store = 'north'",
    );
    assert!(alone.contains("join it with them"), "{alone}");
    let info = table(&engine, "DESCRIBE sales_model.info");
    assert!(
        info["data"][0][4]
            .as_str()
            .unwrap()
            .starts_with("Time series: order by d, group by store, window 14, horizon 5"),
        "{info}"
    );
    for (sql, says) in [
        (
            "CREATE MODEL bad FROM mindsdb (SELECT * FROM sales) PREDICT amount ORDER BY d",
            "needs WINDOW n",
        ),
        (
            "CREATE MODEL bad FROM mindsdb (SELECT * FROM sales) PREDICT amount ORDER BY d WINDOW 0",
            "WINDOW must be a whole number from 1 to 512",
        ),
        (
            "CREATE MODEL bad FROM mindsdb (SELECT * FROM sales) PREDICT amount ORDER BY d WINDOW 3 HORIZON 100000",
            "HORIZON must be a whole number from 1 to 1000",
        ),
    ] {
        let message = error(&engine, sql);
        assert!(message.contains(says), "{sql}: {message}");
    }
}

/// A training query that takes seconds to read: a filtered cross join of 9 million pairs,
/// about 1.8 million rows.
const SLOW_TRAINING: &str = "SELECT a.value % 10 AS x, (a.value * b.value) % 7 AS y \
     FROM generate_series(1, 3000) a, generate_series(1, 3000) b WHERE (a.value + b.value) % 5 = 0";

#[test]
fn dropping_a_model_stops_its_training_and_frees_the_training_slot_at_once() {
    let config = Config {
        edition: mindlite::Edition::Hosted,
        ..Config::default()
    };
    let engine = Engine::open_in_memory(config).unwrap();
    engine.block_on(engine.create_user("alice", None)).unwrap();
    let key = engine.block_on(engine.create_api_key("alice")).unwrap().key;
    // The free plan trains one model at a time (max_running_trainings = 1).
    let alice = engine.as_user(&key).unwrap();
    let create = |name: &str| {
        doc(
            &alice,
            &format!("CREATE MODEL mindsdb.{name} FROM mindsdb ({SLOW_TRAINING}) PREDICT y"),
        )
    };
    assert_eq!(create("slow")["type"], "table");
    // The training outlives the statement that started it: its query was once started under
    // the statement's account, and stopped (cancelled) as soon as that statement ended.
    std::thread::sleep(Duration::from_millis(200));
    let status = doc(
        &alice,
        "SELECT status, error FROM mindsdb.models WHERE name = 'slow'",
    );
    assert!(
        ["generating", "training"].contains(&status["data"][0][0].as_str().unwrap()),
        "{status}"
    );
    let refused = create("second");
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["error_message"]
            .as_str()
            .unwrap()
            .contains("max_running_trainings"),
        "{refused}"
    );
    for (drop, name) in [
        ("DROP MODEL mindsdb.slow", "slow"),
        ("DROP PROJECT p", "p.slow"),
    ] {
        if name == "p.slow" {
            alice.sql_blocking("CREATE PROJECT p").unwrap();
            let created = doc(
                &alice,
                &format!("CREATE MODEL p.slow FROM mindsdb ({SLOW_TRAINING}) PREDICT y"),
            );
            assert_eq!(created["type"], "table", "{created}");
        }
        // Dropped while it trains: the place is free when the drop answers.
        alice.sql_blocking(drop).unwrap();
        let admitted = doc(
            &alice,
            "CREATE MODEL mindsdb.quick FROM mindsdb (SELECT value % 3 AS x, value % 2 AS y FROM generate_series(1, 200)) PREDICT y",
        );
        assert_eq!(admitted["type"], "table", "{name}: {admitted}");
        assert_eq!(wait_done(&alice, "mindsdb", "quick")[0], "complete");
        alice.sql_blocking("DROP MODEL mindsdb.quick").unwrap();
    }
    // The dropped trainings wrote nothing after their drop: no version came back.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        table(&alice, "SELECT name FROM mindsdb.models")["data"],
        serde_json::json!([])
    );
}

#[test]
fn a_training_query_stops_at_the_statement_deadline() {
    let mut config = Config::default();
    config.query.statement_timeout_secs = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    let started = Instant::now();
    // A hash of each of 50 million numbers, few rows kept: far more than a second of reading.
    engine
        .sql_blocking(
            "CREATE MODEL late FROM mindsdb (SELECT value % 10 AS x, value % 7 AS y \
             FROM generate_series(1, 50000000) WHERE md5(CAST(value AS VARCHAR)) LIKE '000%') \
             PREDICT y",
        )
        .unwrap();
    let row = wait_done(&engine, "mindsdb", "late");
    assert_eq!(row[0], "error", "{row}");
    assert!(
        row[1]
            .as_str()
            .unwrap()
            .contains("query.statement_timeout_secs"),
        "{row}"
    );
    // Generous: the deadline is 1 s; reading all of it would take far longer.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_training_fit_stops_at_the_statement_deadline() {
    let mut config = Config::default();
    config.query.statement_timeout_secs = Some(1);
    let engine = Engine::open_in_memory(config).unwrap();
    let started = Instant::now();
    // Read in well under a second; fitted (five folds of ridge, boosted trees and a forest over
    // 16,000 rows of a debug build) in far more.
    engine
        .sql_blocking(
            "CREATE MODEL slow FROM mindsdb (SELECT random() AS a, random() AS b, random() AS c, \
             random() AS d, random() AS e, random() AS y FROM generate_series(1, 20000)) PREDICT y",
        )
        .unwrap();
    let row = wait_done(&engine, "mindsdb", "slow");
    assert_eq!(row[0], "error", "{row}");
    let error = row[1].as_str().unwrap();
    assert!(
        error.contains("after fitting") && error.contains("query.statement_timeout_secs"),
        "{row}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}
