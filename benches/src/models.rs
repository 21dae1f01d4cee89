//! The models benchmark of the models issue: training time of the built-in engine on N rows ×
//! 10 input columns (8 numbers, 2 categories; a regression and a classification target), and
//! prediction throughput of `t JOIN model` over M generated rows. Prints one JSON object.
//!
//! ```text
//! models [--rows 100000] [--predict-rows 1000000] [--runs 3]
//! ```

use std::time::{Duration, Instant};

use mindlite::{Config, Engine};

/// A number in [0, 1) that is a fixed function of the row number `value`.
fn noise(k: u64) -> String {
    format!("((value * {k}) % 1009) / 1009.0")
}

/// The ten input columns of generated rows: eight numbers and two categories.
fn features() -> String {
    let numbers: Vec<String> = [
        7919u64, 104_729, 1_299_709, 15_485_863, 32_452_843, 49_979_687, 67_867_967, 86_028_121,
    ]
    .iter()
    .enumerate()
    .map(|(i, k)| format!("{} AS x{i}", noise(*k)))
    .collect();
    format!(
        "{}, 'c' || (value % 7) AS c0, 'k' || (value % 3) AS c1",
        numbers.join(", ")
    )
}

/// `train`: the features, `y` linear in x0, x1, x2² and c0 plus noise (a linear mixer wins),
/// `label` whether (x0, x1) is inside a circle (no linear boundary: the forest wins); the
/// other columns are noise.
fn training_table(rows: u64) -> String {
    let (x0, x1, x2, n) = (
        noise(7919),
        noise(104_729),
        noise(1_299_709),
        noise(122_949_829),
    );
    format!(
        "CREATE TABLE train AS SELECT {}, \
           3 * {x0} - 2 * {x1} + {x2} * {x2} + (value % 7) * 0.5 + 0.1 * {n} AS y, \
           CASE WHEN ({x0} - 0.5) * ({x0} - 0.5) + ({x1} - 0.5) * ({x1} - 0.5) < 0.09 \
             THEN 'inside' ELSE 'outside' END AS label \
         FROM generate_series(1, {rows})",
        features()
    )
}

/// Trains `name` and waits for it; the seconds from CREATE MODEL to complete, and its row of
/// the models table (mixer accuracy).
fn train(engine: &Engine, name: &str, columns: &str, target: &str) -> (f64, f64) {
    engine
        .sql_blocking(&format!("DROP MODEL IF EXISTS {name}"))
        .expect("drops");
    let started = Instant::now();
    engine
        .sql_blocking(&format!(
            "CREATE MODEL {name} FROM mindsdb (SELECT {columns}, {target} FROM train) PREDICT {target}"
        ))
        .expect("creates");
    loop {
        let model = engine.get_model("mindsdb", name, None).expect("exists");
        match model.status() {
            "complete" => break,
            "error" => panic!("training failed: {}", model.to_wire_json()),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let model = engine.get_model("mindsdb", name, None).expect("exists");
    let accuracy = model.to_wire_json()["accuracy"]
        .as_f64()
        .unwrap_or(f64::NAN);
    (seconds, accuracy)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

pub fn main() {
    let rows = arg("--rows", 100_000);
    let predict_rows = arg("--predict-rows", 1_000_000);
    let runs = arg("--runs", 3) as usize;
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = Engine::open(dir.path().join("models.redb"), Config::default()).expect("opens");
    engine.sql_blocking(&training_table(rows)).expect("loads");
    let inputs = "x0, x1, x2, x3, x4, x5, x6, x7, c0, c1";

    let mut regression = Vec::new();
    let mut classification = Vec::new();
    let (mut r2, mut balanced) = (0.0, 0.0);
    for _ in 0..runs {
        let (s, a) = train(&engine, "reg", inputs, "y");
        regression.push(s);
        r2 = a;
        let (s, a) = train(&engine, "cls", inputs, "label");
        classification.push(s);
        balanced = a;
    }
    let mixer = |name: &str| {
        let model = engine.get_model("mindsdb", name, None).expect("exists");
        model.describe(None).expect("describes")[0]["model"].clone()
    };

    // Predictions through JOIN: the generated rows are computed on the fly, so the time is the
    // prediction operator plus a cheap projection; count(m.y) makes every prediction happen.
    let join = |model: &str, target: &str| {
        format!(
            "SELECT count(m.{target}) FROM (SELECT {} FROM generate_series(1, {predict_rows})) AS t JOIN {model} AS m",
            features()
        )
    };
    let mut join_rates = Vec::new();
    for (model, target) in [("reg", "y"), ("cls", "label")] {
        let sql = join(model, target);
        let mut times = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let counted = engine.sql_blocking(&sql).expect("predicts");
            times.push(started.elapsed().as_secs_f64());
            assert_eq!(counted.num_rows(), 1);
        }
        join_rates.push((model, predict_rows as f64 / median(times)));
    }
    println!(
        "{}",
        serde_json::json!({
            "rows": rows,
            "input_columns": 10,
            "regression_train_s": median(regression),
            "regression_r2": r2,
            "regression_model": mixer("reg"),
            "classification_train_s": median(classification),
            "classification_balanced_accuracy": balanced,
            "classification_model": mixer("cls"),
            "predict_rows": predict_rows,
            "join_rows_per_s": join_rates.iter().map(|(m, r)| (m.to_string(), serde_json::json!(r.round()))).collect::<serde_json::Map<_, _>>(),
        })
    );
}
