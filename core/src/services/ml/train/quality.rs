//! Known answers the trainer must get right: exact lines and planes fitted exactly, a step, a
//! circle and an XOR learnt by trees, constant and all-missing columns ignored, intervals that
//! hold about 90 % of new values, and the same predictor from the same rows.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};

use super::sampling::SplitMix64;
use super::*;

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("test columns have equal lengths")
}

/// Uniform in [0, 1).
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next() >> 11) as f64 / (1u64 << 53) as f64
}

fn floats(values: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(values))
}

fn trained(data: &RecordBatch, target: &str) -> Trained {
    train(
        std::slice::from_ref(data),
        target,
        &mut |_, _| true,
        &|| false,
    )
    .expect("trains")
}

fn predicted_floats(predictor: &Predictor, probe: &RecordBatch) -> Vec<f64> {
    let array = predictor.predict(probe).expect("predicts");
    array.as_primitive::<Float64Type>().values().to_vec()
}

/// The first case: y = 3x + 2 for x = 0..59 beside a text column of 20 labels.
#[test]
fn an_exact_line_beside_a_text_column_is_fitted_exactly() {
    let mut rng = SplitMix64(4);
    let x: Vec<i64> = (0..60).collect();
    let txt: Vec<String> = (0..60).map(|_| format!("t{}", rng.next() % 20)).collect();
    let y: Vec<f64> = x.iter().map(|&x| 3.0 * x as f64 + 2.0).collect();
    let data = batch(vec![
        ("x", Arc::new(Int64Array::from(x)) as ArrayRef),
        ("txt", Arc::new(StringArray::from(txt))),
        ("y", floats(y)),
    ]);
    let trained = trained(&data, "y");
    let description = &trained.description;
    assert!(
        description.accuracies["r2_score"] > 0.999_999,
        "{description:?}"
    );
    assert_eq!(description.mixer, "linear", "{description:?}");
    let probe = batch(vec![(
        "x",
        Arc::new(Int64Array::from(vec![0, 2, 100])) as ArrayRef,
    )]);
    let predicted = predicted_floats(&trained.predictor, &probe);
    for (got, want) in predicted.iter().zip([2.0, 8.0, 302.0]) {
        assert!((got - want).abs() < 1e-3, "{predicted:?}");
    }
}

/// An integer target on an exact line: exact integers, not a shrunk slope rounded.
#[test]
fn an_exact_integer_line_predicts_exact_integers() {
    let x: Vec<i64> = (0..80).collect();
    let y: Vec<i64> = x.iter().map(|x| 3 * x + 2).collect();
    let data = batch(vec![
        ("x", Arc::new(Int64Array::from(x)) as ArrayRef),
        ("y", Arc::new(Int64Array::from(y))),
    ]);
    let trained = trained(&data, "y");
    assert_eq!(trained.description.accuracies["r2_score"], 1.0);
    let probe = batch(vec![(
        "x",
        Arc::new(Int64Array::from(vec![5, 100])) as ArrayRef,
    )]);
    let predicted = trained.predictor.predict(&probe).expect("predicts");
    assert_eq!(predicted.as_primitive::<Int64Type>().values(), &[17, 302]);
}

#[test]
fn an_exact_plane_is_fitted_exactly() {
    let mut rng = SplitMix64(8);
    let a: Vec<f64> = (0..200).map(|_| uniform(&mut rng) * 10.0).collect();
    let b: Vec<f64> = (0..200).map(|_| uniform(&mut rng) * 10.0 - 5.0).collect();
    let y: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| 2.0 * a - 3.0 * b + 1.0)
        .collect();
    let data = batch(vec![("a", floats(a)), ("b", floats(b)), ("y", floats(y))]);
    let trained = trained(&data, "y");
    assert!(trained.description.accuracies["r2_score"] > 0.999_999);
    let probe = batch(vec![
        ("a", floats(vec![0.0, 1.0])),
        ("b", floats(vec![0.0, 1.0])),
    ]);
    let predicted = predicted_floats(&trained.predictor, &probe);
    assert!((predicted[0] - 1.0).abs() < 1e-6, "{predicted:?}");
    assert!((predicted[1] - 0.0).abs() < 1e-6, "{predicted:?}");
}

#[test]
fn a_step_is_learnt_by_trees() {
    let mut rng = SplitMix64(9);
    let x: Vec<f64> = (0..400).map(|_| uniform(&mut rng)).collect();
    let y: Vec<f64> = x
        .iter()
        .map(|&x| if x > 0.5 { 10.0 } else { 0.0 })
        .collect();
    let data = batch(vec![("x", floats(x)), ("y", floats(y))]);
    let trained = trained(&data, "y");
    let description = &trained.description;
    assert!(description.accuracies["r2_score"] > 0.95, "{description:?}");
    assert_ne!(description.mixer, "linear", "{description:?}");
    let probe = batch(vec![("x", floats(vec![0.2, 0.8]))]);
    let predicted = predicted_floats(&trained.predictor, &probe);
    assert!(predicted[0].abs() < 1.0 && (predicted[1] - 10.0).abs() < 1.0);
}

/// Classes no line separates: inside a circle, and an XOR of two signs.
#[test]
fn a_circle_and_an_xor_are_learnt() {
    let mut rng = SplitMix64(10);
    let rows = 800;
    let a: Vec<f64> = (0..rows).map(|_| uniform(&mut rng) * 2.0 - 1.0).collect();
    let b: Vec<f64> = (0..rows).map(|_| uniform(&mut rng) * 2.0 - 1.0).collect();
    let circle: Vec<&str> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| if a * a + b * b < 0.5 { "in" } else { "out" })
        .collect();
    let xor: Vec<&str> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| {
            if (*a > 0.0) != (*b > 0.0) {
                "odd"
            } else {
                "even"
            }
        })
        .collect();
    for (target, column) in [("circle", circle), ("xor", xor)] {
        let data = batch(vec![
            ("a", floats(a.clone())),
            ("b", floats(b.clone())),
            (target, Arc::new(StringArray::from(column))),
        ]);
        let trained = trained(&data, target);
        let description = &trained.description;
        assert!(
            description.accuracies["balanced_accuracy_score"] > 0.9,
            "{target}: {description:?}"
        );
        assert_ne!(description.mixer, "linear", "{target}: {description:?}");
    }
}

#[test]
fn constant_and_all_missing_columns_are_ignored() {
    let x: Vec<f64> = (0..120).map(f64::from).collect();
    let y: Vec<f64> = x.iter().map(|x| 0.5 * x - 4.0).collect();
    let data = batch(vec![
        ("x", floats(x)),
        ("constant", floats(vec![7.0; 120])),
        (
            "nothing",
            Arc::new(Float64Array::from(vec![None::<f64>; 120])),
        ),
        (
            "no_label",
            Arc::new(StringArray::from(vec![None::<&str>; 120])),
        ),
        ("y", floats(y)),
    ]);
    let trained = trained(&data, "y");
    let description = &trained.description;
    assert!(
        description.accuracies["r2_score"] > 0.999_999,
        "{description:?}"
    );
    for ignored in ["constant", "nothing", "no_label"] {
        assert_eq!(
            description.column_importances[ignored], 0.0,
            "{description:?}"
        );
    }
}

/// About 90 % of new values fall inside the 90 % interval, for a linear and a non-linear fit.
#[test]
fn intervals_hold_about_ninety_percent_of_new_values() {
    let rows = 2_000;
    let sample = |seed: u64| {
        let mut rng = SplitMix64(seed);
        let x: Vec<f64> = (0..rows).map(|_| uniform(&mut rng) * 10.0).collect();
        let noise: Vec<f64> = (0..rows).map(|_| uniform(&mut rng) * 4.0 - 2.0).collect();
        (x, noise)
    };
    let (x, noise) = sample(21);
    let (x_new, noise_new) = sample(22);
    type Shape = fn(f64) -> f64;
    let shapes: [(&str, Shape); 2] = [("line", |x| 2.0 * x), ("wave", |x| (x * 1.3).sin() * 5.0)];
    for (shape, f) in shapes {
        let y: Vec<f64> = x.iter().zip(&noise).map(|(x, n)| f(*x) + n).collect();
        let data = batch(vec![("x", floats(x.clone())), ("y", floats(y))]);
        let trained = trained(&data, "y");
        let probe = batch(vec![("x", floats(x_new.clone()))]);
        let (_, details) = trained
            .predictor
            .predict_detailed(&probe, false)
            .expect("predicts");
        let confidence = details[0].as_primitive::<Float64Type>();
        assert!(confidence.iter().all(|c| c == Some(0.9)));
        let (low, high) = (
            details[1].as_primitive::<Float64Type>(),
            details[2].as_primitive::<Float64Type>(),
        );
        let inside = x_new
            .iter()
            .zip(&noise_new)
            .enumerate()
            .filter(|(row, (x, n))| {
                let truth = f(**x) + **n;
                low.value(*row) <= truth && truth <= high.value(*row)
            })
            .count();
        let share = inside as f64 / rows as f64;
        assert!(
            (0.85..=0.95).contains(&share),
            "{shape}: {share} inside the 90 % interval"
        );
    }
}

#[test]
fn the_same_rows_train_the_same_predictor() {
    let mut rng = SplitMix64(30);
    let a: Vec<f64> = (0..300).map(|_| uniform(&mut rng)).collect();
    let y: Vec<f64> = a.iter().map(|a| (a * 6.0).sin()).collect();
    let data = batch(vec![("a", floats(a)), ("y", floats(y))]);
    let first = serde_json::to_string(&trained(&data, "y").predictor).unwrap();
    let second = serde_json::to_string(&trained(&data, "y").predictor).unwrap();
    assert!(first == second, "two trainings on the same rows differ");
}

/// A class's confidence is its probability, and an explanation names the driving input.
#[test]
fn class_confidence_is_a_probability_and_the_explanation_names_the_driver() {
    let mut rng = SplitMix64(31);
    let x: Vec<f64> = (0..400).map(|_| uniform(&mut rng) * 2.0 - 1.0).collect();
    let junk: Vec<f64> = (0..400).map(|_| uniform(&mut rng)).collect();
    let label: Vec<&str> = x
        .iter()
        .map(|&x| if x > 0.0 { "pos" } else { "neg" })
        .collect();
    let data = batch(vec![
        ("x", floats(x)),
        ("junk", floats(junk)),
        ("label", Arc::new(StringArray::from(label))),
    ]);
    let trained = trained(&data, "label");
    let probe = batch(vec![
        ("x", floats(vec![-0.9, 0.9, 0.0])),
        ("junk", floats(vec![0.5, 0.5, 0.5])),
    ]);
    let (predicted, details) = trained
        .predictor
        .predict_detailed(&probe, true)
        .expect("predicts");
    let predicted = predicted.as_string::<i32>();
    assert_eq!((predicted.value(0), predicted.value(1)), ("neg", "pos"));
    let confidence = details[0].as_primitive::<Float64Type>();
    assert!(
        confidence.value(0) > 0.8 && confidence.value(1) > 0.8,
        "{confidence:?}"
    );
    assert!((0.0..=1.0).contains(&confidence.value(2)));
    assert_eq!(details[1].null_count(), 3, "a class has no interval");
    let explained: serde_json::Value =
        serde_json::from_str(details[3].as_string::<i32>().value(1)).unwrap();
    assert_eq!(explained["predicted_value"], "pos");
    assert_eq!(explained["top_inputs"][0]["column"], "x", "{explained}");
    let fields = trained.predictor.detail_fields();
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "label_confidence",
            "label_min",
            "label_max",
            "label_explain"
        ]
    );
    // Without the explanation asked for, its column is NULL.
    let (_, details) = trained.predictor.predict_detailed(&probe, false).unwrap();
    assert_eq!(details[3].null_count(), 3);
}

/// Every candidate is described with its score, and exactly one is selected: the best.
#[test]
fn every_candidate_is_described_and_the_best_one_selected() {
    let mut rng = SplitMix64(32);
    let a: Vec<f64> = (0..300).map(|_| uniform(&mut rng)).collect();
    let y: Vec<f64> = a
        .iter()
        .map(|a| 4.0 * a + uniform(&mut rng) * 0.1)
        .collect();
    let data = batch(vec![("a", floats(a)), ("y", floats(y))]);
    let candidates = trained(&data, "y").description.candidates;
    let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    assert!(names.contains(&"ridge regression (alpha = 0)"), "{names:?}");
    assert!(names.contains(&"gradient-boosted trees"), "{names:?}");
    assert!(names.contains(&"random forest"), "{names:?}");
    let selected: Vec<_> = candidates.iter().filter(|c| c.selected).collect();
    assert_eq!(selected.len(), 1, "{candidates:?}");
    let best = candidates
        .iter()
        .filter_map(|c| c.score)
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(selected[0].score, Some(best));
    assert!(selected[0].name.starts_with("ridge"), "{candidates:?}");
}

/// A class so rare that a fold's training rows lack it, or one only the held-out rows have,
/// still trains: the fold is skipped, the refit keeps the scored fit.
#[test]
fn rare_classes_do_not_fail_training() {
    let x: Vec<f64> = (1..=200).map(f64::from).collect();
    let rare: Vec<&str> = (1..=200).map(|v| if v == 77 { "b" } else { "a" }).collect();
    let data = batch(vec![
        ("x", floats(x.clone())),
        ("c", Arc::new(StringArray::from(rare))),
    ]);
    let fitted = trained(&data, "c");
    assert!(fitted.predictor.predict(&data).is_ok());
    // 21 classes, the 21st in one row only: boosting takes 20, so a refit with it would fail.
    let x: Vec<f64> = (1..=420).map(|v| f64::from(v % 20)).collect();
    let many: Vec<String> = (1..=420)
        .map(|v| {
            if v == 12 {
                "zz".to_owned()
            } else {
                format!("c{}", (v - 1) % 20)
            }
        })
        .collect();
    let data = batch(vec![
        ("x", floats(x)),
        ("c", Arc::new(StringArray::from(many))),
    ]);
    let fitted = trained(&data, "c");
    assert!(fitted.predictor.predict(&data).is_ok());
}

/// Values near f64's limits: inputs whose squares overflow, targets whose r² sums would.
#[test]
fn values_near_the_limits_of_f64_train_and_score() {
    let x: Vec<f64> = (1..=200).map(|v| f64::from(v) * 8e305).collect();
    let y: Vec<f64> = (1..=200).map(|v| f64::from(v % 3)).collect();
    let z: Vec<f64> = (1..=200).map(f64::from).collect();
    let data = batch(vec![("x", floats(x)), ("z", floats(z)), ("y", floats(y))]);
    let fitted = trained(&data, "y");
    assert!(fitted.description.accuracies["r2_score"].is_finite());
    let x: Vec<f64> = (1..=200).map(f64::from).collect();
    let y: Vec<f64> = x.iter().map(|x| x * 1e200).collect();
    let data = batch(vec![("x", floats(x)), ("y", floats(y))]);
    let fitted = trained(&data, "y");
    let r2 = fitted.description.accuracies["r2_score"];
    assert!(r2 > 0.999, "{r2}");
    // What is stored must read back.
    let json = serde_json::to_string(&fitted.description).unwrap();
    let _: Description = serde_json::from_str(&json).unwrap();
}

/// A forest's votes make probabilities within [0, 1], however many trees agree.
#[test]
fn class_confidence_never_passes_one() {
    let x: Vec<f64> = (1..=20).map(f64::from).collect();
    let c: Vec<String> = (1..=20).map(|v| format!("k{}", (v - 1) / 2)).collect();
    let data = batch(vec![
        ("x", floats(x)),
        ("c", Arc::new(StringArray::from(c))),
    ]);
    let trained = trained(&data, "c");
    let (_, details) = trained.predictor.predict_detailed(&data, false).unwrap();
    let confidence = details[0].as_primitive::<Float64Type>();
    assert!(
        confidence
            .iter()
            .flatten()
            .all(|c| (0.0..=1.0).contains(&c)),
        "{confidence:?}"
    );
}

/// 300 categories, each its own level: target means carry every category in one feature (a
/// one-hot of the 50 most frequent would miss most of them).
#[test]
fn many_categories_are_learnt_through_their_target_means() {
    let mut rng = SplitMix64(21);
    let levels: Vec<f64> = (0..300).map(|_| uniform(&mut rng) * 100.0).collect();
    let (mut shop, mut y) = (Vec::new(), Vec::new());
    for _ in 0..6_000 {
        let category = (rng.next() % 300) as usize;
        shop.push(format!("shop-{category}"));
        y.push(levels[category] + uniform(&mut rng));
    }
    let data = batch(vec![
        ("shop", Arc::new(StringArray::from(shop)) as ArrayRef),
        ("y", floats(y)),
    ]);
    let trained = trained(&data, "y");
    let description = &trained.description;
    assert!(
        description.model.starts_with("Target means (shop)"),
        "{description:?}"
    );
    assert!(description.accuracies["r2_score"] > 0.95, "{description:?}");
    let probe = batch(vec![(
        "shop",
        Arc::new(StringArray::from(vec!["shop-7", "shop-250"])) as ArrayRef,
    )]);
    let predicted = predicted_floats(&trained.predictor, &probe);
    for (got, want) in predicted.iter().zip([levels[7], levels[250]]) {
        assert!((got - want).abs() < 3.0, "{predicted:?} vs {want}");
    }
}

/// A high-cardinality column that says nothing of the target: were a row's own target in its
/// category's mean, the search would see a strong feature and the reported score would be
/// far above the truth (zero).
#[test]
fn target_means_do_not_leak_the_target_into_the_score() {
    let mut rng = SplitMix64(22);
    let (mut code, mut y) = (Vec::new(), Vec::new());
    for _ in 0..3_000 {
        code.push(format!("c{}", rng.next() % 400));
        y.push(uniform(&mut rng));
    }
    let data = batch(vec![
        ("code", Arc::new(StringArray::from(code)) as ArrayRef),
        ("y", floats(y)),
    ]);
    let description = trained(&data, "y").description;
    assert!(
        description.model.contains("Target means (code)"),
        "{description:?}"
    );
    assert!(description.accuracies["r2_score"] < 0.05, "{description:?}");
}

/// A class among many decided by the words a text holds: hashed words carry them.
#[test]
fn free_text_is_learnt_through_its_words() {
    let mut rng = SplitMix64(23);
    let filler = [
        "the", "a", "order", "was", "my", "it", "and", "very", "item", "today",
    ];
    let good = ["great", "excellent", "love", "perfect"];
    let bad = ["broken", "awful", "refund", "late"];
    let (mut review, mut verdict) = (Vec::new(), Vec::new());
    for row in 0..1_500 {
        let positive = rng.next().is_multiple_of(2);
        let mut words: Vec<&str> = (0..6)
            .map(|_| filler[(rng.next() % filler.len() as u64) as usize])
            .collect();
        let cue = if positive { &good } else { &bad };
        words.insert(
            (rng.next() % 6) as usize,
            cue[(rng.next() % cue.len() as u64) as usize],
        );
        // Every review distinct, as free text is.
        review.push(format!("{} #{row}", words.join(" ")));
        verdict.push(if positive { "positive" } else { "negative" });
    }
    let data = batch(vec![
        ("review", Arc::new(StringArray::from(review)) as ArrayRef),
        ("verdict", Arc::new(StringArray::from(verdict))),
    ]);
    let trained = trained(&data, "verdict");
    let description = &trained.description;
    assert_eq!(description.column_types["review"], "text");
    assert!(
        description
            .model
            .starts_with("Hashed words and word pairs (review)"),
        "{description:?}"
    );
    assert!(
        description.accuracies["balanced_accuracy_score"] > 0.95,
        "{description:?}"
    );
    let probe = batch(vec![(
        "review",
        Arc::new(StringArray::from(vec![
            "My order was PERFECT, love it",
            "item arrived broken and late",
        ])) as ArrayRef,
    )]);
    let array = trained.predictor.predict(&probe).expect("predicts");
    let labels: Vec<&str> = array.as_string::<i32>().iter().flatten().collect();
    assert_eq!(labels, ["positive", "negative"]);
}

/// The hashing is a pure function of the words (not of a per-process seed) and of unit length.
#[test]
fn hashed_words_are_stable_and_of_unit_length() {
    let mut first = vec![0.0; 64];
    let mut second = vec![0.0; 64];
    hash_words("The quick brown fox", &mut first);
    hash_words("the QUICK  brown, fox!", &mut second);
    assert_eq!(first, second);
    let length: f64 = first.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((length - 1.0).abs() < 1e-12, "{length}");
    let mut empty = vec![0.0; 64];
    hash_words(" ,; ", &mut empty);
    assert!(empty.iter().all(|v| *v == 0.0));
}

/// A smooth trend plus a step: a line gets the trend, trees the step, and their mean beats
/// either. The ensemble is fitted, described, stored and predicts as it was scored.
#[test]
fn an_ensemble_of_a_line_and_trees_is_described_stored_and_predicts() {
    let mut rng = SplitMix64(24);
    let (mut a, mut b, mut y) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..200 {
        let (x1, x2) = (uniform(&mut rng) * 10.0, uniform(&mut rng));
        a.push(x1);
        b.push(x2);
        let step = if x2 > 0.5 { 20.0 } else { 0.0 };
        y.push(10.0 * x1 + step + uniform(&mut rng) * 2.0);
    }
    let data = batch(vec![("a", floats(a)), ("b", floats(b)), ("y", floats(y))]);
    let trained = trained(&data, "y");
    let description = &trained.description;
    assert_eq!(description.mixer, "ensemble", "{description:?}");
    let selected: Vec<&CandidateScore> = description
        .candidates
        .iter()
        .filter(|c| c.selected)
        .collect();
    assert_eq!(selected.len(), 1, "{description:?}");
    assert!(
        selected[0].name.starts_with("ensemble (mean of "),
        "{selected:?}"
    );
    let best_single = description
        .candidates
        .iter()
        .filter(|c| !c.selected)
        .filter_map(|c| c.score)
        .fold(f64::MIN, f64::max);
    assert!(selected[0].score.expect("scored") > best_single);
    assert!(
        description.model.contains("Ensemble, the mean of: "),
        "{description:?}"
    );
    let json = serde_json::to_string(&trained.predictor).expect("serialises");
    let stored: Predictor = serde_json::from_str(&json).expect("deserialises");
    assert_eq!(
        predicted_floats(&stored, &data),
        predicted_floats(&trained.predictor, &data)
    );
}

/// Targets at 1e200 or 1e-300 (whose squares overflow or vanish) still learn their
/// categories' means; at 1e306, whose sums overflow, the model still stores and reads back (a
/// non-finite prior stored as null made every prediction of a "complete" model fail).
#[test]
fn target_means_hold_targets_near_the_limits_of_f64() {
    let data = |unit: f64| {
        let code: Vec<String> = (0..3_000).map(|row| format!("c{}", row % 100)).collect();
        let y: Vec<f64> = (0..3_000).map(|row| (row % 100) as f64 * unit).collect();
        batch(vec![
            ("code", Arc::new(StringArray::from(code)) as ArrayRef),
            ("y", floats(y)),
        ])
    };
    let probe = batch(vec![(
        "code",
        Arc::new(StringArray::from(vec!["c7", "c93"])) as ArrayRef,
    )]);
    for unit in [1e200, 1e-300] {
        let trained = trained(&data(unit), "y");
        let description = &trained.description;
        assert!(
            description.accuracies["r2_score"] > 0.99,
            "{unit}: {description:?}"
        );
        let predicted = predicted_floats(&trained.predictor, &probe);
        for (got, want) in predicted.iter().zip([7.0, 93.0]) {
            assert!((got / unit - want).abs() < 1.0, "{unit}: {predicted:?}");
        }
    }
    let trained = trained(&data(1e306), "y");
    let stored = super::super::stored_predictor(&trained.predictor).expect("stores");
    let read: Predictor = serde_json::from_slice(&stored).expect("reads back");
    assert_eq!(predicted_floats(&read, &probe).len(), 2);
}

/// Many text columns share a bounded number of features, and past the linear candidates'
/// limit only trees are tried.
#[test]
fn text_features_are_bounded_however_many_columns() {
    assert_eq!(text_buckets(200, 1), 256);
    assert_eq!(text_buckets(200, 4), 128);
    assert_eq!(text_buckets(300, 48), 8);
    assert_eq!(text_buckets(1_000_000, 1), 8);
    for columns in 1..=64 {
        assert!(text_buckets(200, columns) * columns <= 512, "{columns}");
    }
    let task = Task::Regression { integer: false };
    assert!(search::specs(&task, 200, 512, 0).contains(&search::Spec::Ridge(0.0)));
    let wide = search::specs(&task, 200, 513, 0);
    assert!(
        wide.iter().all(|spec| spec.family() != "linear"),
        "{wide:?}"
    );
}

/// A wide model predicts a batch a slice of rows at a time; the answers are those of the
/// rows predicted alone.
#[test]
fn wide_models_predict_large_batches_in_slices() {
    let mut rng = SplitMix64(25);
    let words = [
        "red", "green", "blue", "cyan", "plum", "teal", "gold", "rose",
    ];
    let text = |rng: &mut SplitMix64| -> String {
        (0..5)
            .map(|_| words[(rng.next() % words.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let notes: Vec<String> = (0..400).map(|_| text(&mut rng)).collect();
    let y: Vec<f64> = notes
        .iter()
        .map(|note| note.matches("red").count() as f64 * 3.0 + uniform(&mut rng))
        .collect();
    let data = batch(vec![
        ("note", Arc::new(StringArray::from(notes)) as ArrayRef),
        ("y", floats(y)),
    ]);
    let predictor = trained(&data, "y").predictor;
    let width: usize = predictor.columns.iter().map(|c| c.encoder.width()).sum();
    let rows = PREDICT_MAX_CELLS / width * 2 + 17;
    let probe_notes: Vec<String> = (0..rows).map(|_| text(&mut rng)).collect();
    let probe = batch(vec![(
        "note",
        Arc::new(StringArray::from(probe_notes)) as ArrayRef,
    )]);
    let whole = predicted_floats(&predictor, &probe);
    assert_eq!(whole.len(), rows);
    let (detailed, details) = predictor.predict_detailed(&probe, false).expect("predicts");
    assert_eq!(detailed.len(), rows);
    assert!(details.iter().all(|column| column.len() == rows));
    for from in [0, rows / 2, rows - 3] {
        let alone = predicted_floats(&predictor, &probe.slice(from, 3));
        assert_eq!(alone, whole[from..from + 3], "rows {from}..");
    }
}
