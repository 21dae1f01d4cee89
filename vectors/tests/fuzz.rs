//! Fuzz targets for a sentence model's files (`SentenceModel::from_files`): `config.json`,
//! the safetensors weights (header length, header JSON, dtypes, shapes, offsets), `vocab.txt`
//! and `sentence_bert_config.json`, built consistent with each other and then damaged or
//! replaced by random bytes; a model that loads then embeds texts of every kind. Loading
//! either works or fails with an error; embedding gives a vector of the model's width; nothing
//! panics or reads out of bounds. `mindlite-fuzz` runs them; see its docs (fuzz/src/lib.rs) for
//! running them longer.

// Tests and benchmarks unwrap: a failure is the test's answer, with its message.
#![allow(clippy::unwrap_used)]

use mindlite_fuzz::{extreme_number, mutate, note, Target, Unstructured};
use mindlite_vectors::sentence::SentenceModel;
use serde_json::{json, Map, Value};

type Draw<T> = mindlite_fuzz::arbitrary::Result<T>;

/// The shapes a config asks for: small, so cases are fast.
struct Shape {
    hidden: usize,
    heads: usize,
    layers: usize,
    intermediate: usize,
    positions: usize,
}

/// What is wrong with a case's files: half the cases nothing, the rest one thing each, so
/// each damage is met on its own with the rest of the files good.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    None,
    ConfigValue,
    ConfigText,
    TokenTypes,
    TensorMissing,
    TensorShape,
    Dtype,
    Offsets,
    HeaderText,
    HeaderLength,
    WeightBytes,
    Vocabulary,
    Values,
}

fn damage(u: &mut Unstructured<'_>) -> Draw<Damage> {
    use Damage::*;
    if u.arbitrary()? {
        return Ok(None);
    }
    Ok(*u.choose(&[
        ConfigValue,
        ConfigText,
        TokenTypes,
        TensorMissing,
        TensorShape,
        Dtype,
        Offsets,
        HeaderText,
        HeaderLength,
        WeightBytes,
        Vocabulary,
        Values,
    ])?)
}

fn shape(u: &mut Unstructured<'_>, damage: Damage) -> Draw<Shape> {
    let hidden = *u.choose(&[1usize, 2, 4, 6, 8])?;
    let mut shape = Shape {
        hidden,
        heads: (*u.choose(&[1, hidden / 2, hidden])?).max(1),
        layers: u.int_in_range(0..=2)?,
        intermediate: u.int_in_range(1..=8)?,
        positions: u.int_in_range(2..=6)?,
    };
    if damage == Damage::ConfigValue {
        let value = if u.arbitrary()? {
            extreme_number(u)? as usize
        } else {
            u.int_in_range(0..=3)?
        };
        match u.int_in_range(0..=4u8)? {
            0 => shape.hidden = value,
            1 => shape.heads = value,
            2 => shape.layers = value,
            3 => shape.intermediate = value,
            _ => shape.positions = value,
        }
    }
    Ok(shape)
}

fn config_json(u: &mut Unstructured<'_>, shape: &Shape, damage: Damage) -> Draw<String> {
    let mut config = json!({
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": shape.positions,
    });
    if u.ratio(1, 4)? {
        config["layer_norm_eps"] = json!(*u.choose(&[0.0, -1.0, 1e-12, 1e38])?);
    }
    if damage == Damage::ConfigValue && u.ratio(1, 4)? {
        config["hidden_act"] = json!(*u.choose(&["relu", "", "GELU"])?);
        config["layer_norm_eps"] = json!(*u.choose(&[f64::MAX, f64::MIN_POSITIVE, -0.0])?);
    }
    let text = config.to_string();
    if damage == Damage::ConfigText {
        return Ok(String::from_utf8_lossy(&mutate(u, text.as_bytes())?).into_owned());
    }
    Ok(text)
}

/// The tensors the config names, each `(name, shape)`.
fn tensors(
    u: &mut Unstructured<'_>,
    shape: &Shape,
    damage: Damage,
) -> Draw<Vec<(String, Vec<usize>)>> {
    let (h, i) = (shape.hidden, shape.intermediate);
    let vocabulary = u.int_in_range(1..=12)?;
    let mut tensors = vec![
        (
            "embeddings.word_embeddings.weight".to_string(),
            vec![vocabulary, h],
        ),
        (
            "embeddings.position_embeddings.weight".to_string(),
            vec![shape.positions, h],
        ),
        ("embeddings.LayerNorm.weight".to_string(), vec![h]),
        ("embeddings.LayerNorm.bias".to_string(), vec![h]),
    ];
    if u.ratio(3, 4)? || damage == Damage::TokenTypes {
        let types = if damage == Damage::TokenTypes {
            (0..u.int_in_range(0..=3)?)
                .map(|_| u.int_in_range(0..=8))
                .collect::<Draw<_>>()?
        } else {
            vec![u.int_in_range(1..=2)?, h]
        };
        tensors.push(("embeddings.token_type_embeddings.weight".to_string(), types));
    }
    for layer in 0..shape.layers.min(3) {
        let p = format!("encoder.layer.{layer}");
        for (name, dims) in [
            ("attention.self.query", [h, h]),
            ("attention.self.key", [h, h]),
            ("attention.self.value", [h, h]),
            ("attention.output.dense", [h, h]),
            ("intermediate.dense", [i, h]),
            ("output.dense", [h, i]),
        ] {
            tensors.push((format!("{p}.{name}.weight"), dims.to_vec()));
            tensors.push((format!("{p}.{name}.bias"), vec![dims[0]]));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            tensors.push((format!("{p}.{norm}.weight"), vec![h]));
            tensors.push((format!("{p}.{norm}.bias"), vec![h]));
        }
    }
    let at = u.choose_index(tensors.len())?;
    match damage {
        Damage::TensorMissing => {
            tensors.remove(at);
        }
        Damage::TensorShape => {
            tensors[at].1 = (0..u.int_in_range(0..=3)?)
                .map(|_| Ok(extreme_number(u)? as usize % 10))
                .collect::<Draw<_>>()?;
        }
        _ => {}
    }
    Ok(tensors)
}

/// A safetensors file of `tensors`, values drawn at random.
fn safetensors(
    u: &mut Unstructured<'_>,
    tensors: &[(String, Vec<usize>)],
    damage: Damage,
) -> Draw<Vec<u8>> {
    let prefix = if u.ratio(1, 4)? { "bert." } else { "" };
    let damaged = u.choose_index(tensors.len().max(1))?;
    let mut header = Map::new();
    let mut at = 0usize;
    let mut sizes = Vec::new();
    for (n, (name, dims)) in tensors.iter().enumerate() {
        let values = dims
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(*d))
            .filter(|n| *n <= 4096)
            .unwrap_or(1);
        let bytes = values * 4;
        let dtype = if damage == Damage::Dtype && n == damaged {
            *u.choose(&["F16", "I64", "", "f32"])?
        } else {
            "F32"
        };
        let offsets = if damage == Damage::Offsets && n == damaged {
            json!([extreme_number(u)?, extreme_number(u)?])
        } else {
            json!([at, at + bytes])
        };
        header.insert(
            format!("{prefix}{name}"),
            json!({"dtype": dtype, "shape": dims, "data_offsets": offsets}),
        );
        at += bytes;
        sizes.push(values);
    }
    if u.ratio(1, 4)? {
        header.insert("__metadata__".into(), json!({"format": "pt"}));
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    if damage == Damage::HeaderText {
        text = mutate(u, &text)?;
    }
    let length = if damage == Damage::HeaderLength {
        extreme_number(u)?
    } else {
        text.len() as u64
    };
    let mut file = length.to_le_bytes().to_vec();
    file.extend_from_slice(&text);
    for values in sizes {
        for _ in 0..values {
            let value = if damage == Damage::Values && u.ratio(1, 4)? {
                *u.choose(&[f32::NAN, f32::INFINITY, f32::MAX, -0.0, f32::MIN_POSITIVE])?
            } else {
                u.int_in_range(-100..=100)? as f32 / 50.0
            };
            file.extend_from_slice(&value.to_le_bytes());
        }
    }
    if damage == Damage::WeightBytes {
        file = mutate(u, &file)?;
    }
    Ok(file)
}

fn vocab(u: &mut Unstructured<'_>, damage: Damage) -> Draw<String> {
    let mut lines: Vec<String> = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "##s", "un", "##able", ",", "東", "é",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for _ in 0..u.int_in_range(0..=8)? {
        lines.push(u.arbitrary()?);
    }
    let mut text = lines.join(if u.ratio(1, 4)? { "\r\n" } else { "\n" });
    if damage == Damage::Vocabulary {
        text = String::from_utf8_lossy(&mutate(u, text.as_bytes())?).into_owned();
        if u.arbitrary()? {
            text = text.replacen(*u.choose(&["[UNK]", "[CLS]", "[SEP]"])?, "", 1);
        }
    }
    Ok(text)
}

fn sentence_config(u: &mut Unstructured<'_>) -> Draw<Option<String>> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 | 1 => None,
        2 => Some(json!({"max_seq_length": extreme_number(u)?}).to_string()),
        3 => Some(json!({"max_seq_length": -1}).to_string()),
        4 => Some(json!({"max_seq_length": "128"}).to_string()),
        _ => Some(json!({"max_seq_length": u.int_in_range(0..=8)?}).to_string()),
    })
}

fn text(u: &mut Unstructured<'_>) -> Draw<String> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => "The cats are unable, 東京!".into(),
        1 => "a".repeat(u.int_in_range(0..=300)?),
        2 => "é\u{301}\u{0}\u{200b}\t\r\n\u{fffd} ".repeat(u.int_in_range(0..=20)?),
        3 => "the ".repeat(u.int_in_range(0..=600)?),
        _ => u.arbitrary()?,
    })
}

/// Consistent files, some damaged in one place: undamaged ones load; damaged ones load or
/// are refused with an error; a loaded model embeds any text into a vector of its width.
#[test]
fn sentence_models_load_or_are_refused_and_embed_any_text() {
    Target::new(20_000).run(|u| {
        let damage = damage(u)?;
        let shape = shape(u, damage)?;
        let config = config_json(u, &shape, damage)?;
        let tensors = tensors(u, &shape, damage)?;
        let weights = safetensors(u, &tensors, damage)?;
        let vocab = vocab(u, damage)?;
        let sentence = sentence_config(u)?;
        note("damage", &damage);
        note("config.json", &config);
        note("tensors", &tensors);
        note("vocab.txt", &vocab);
        note("sentence_bert_config.json", &sentence);
        let model = match SentenceModel::from_files(&config, &weights, &vocab, sentence.as_deref())
        {
            Ok(model) => model,
            Err(e) => {
                assert!(
                    !e.to_string().trim().is_empty(),
                    "an error without a message"
                );
                let harmless = matches!(damage, Damage::None | Damage::Values);
                assert!(!harmless, "undamaged files were refused: {e}");
                return Ok(());
            }
        };
        for _ in 0..u.int_in_range(1..=3)? {
            let text = text(u)?;
            note("text", &text);
            let tokens = model.tokens(&text);
            assert!(tokens.len() >= 2, "[CLS] and [SEP] at least: {tokens:?}");
            let vector = model.embed(&text);
            assert_eq!(vector.len(), model.dimensions());
        }
        Ok(())
    });
}

/// Random bytes as each file in turn, the others valid.
#[test]
fn sentence_model_files_survive_random_bytes() {
    Target::new(30_000).run(|u| {
        let shape = Shape {
            hidden: 4,
            heads: 2,
            layers: 1,
            intermediate: 4,
            positions: 4,
        };
        let mut config = config_json(u, &shape, Damage::None)?;
        let tensors = tensors(u, &shape, Damage::None)?;
        let mut weights = safetensors(u, &tensors, Damage::None)?;
        let mut vocab = vocab(u, Damage::None)?;
        let mut sentence = sentence_config(u)?;
        let bytes: Vec<u8> = u.arbitrary()?;
        let random = String::from_utf8_lossy(&bytes).into_owned();
        match u.int_in_range(0..=3u8)? {
            0 => config = random,
            1 => weights = bytes,
            2 => vocab = random,
            _ => sentence = Some(random),
        }
        note("config.json", &config);
        note("weights", &weights);
        note("vocab.txt", &vocab);
        note("sentence_bert_config.json", &sentence);
        if let Ok(model) = SentenceModel::from_files(&config, &weights, &vocab, sentence.as_deref())
        {
            assert_eq!(model.embed("the cats").len(), model.dimensions());
        }
        Ok(())
    });
}
