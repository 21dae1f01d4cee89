//! A BERT encoder's forward pass, in `f32` on the CPU: embeddings, then per layer
//! self-attention and a feed-forward block, each added back and layer-normalised. Weights come
//! from a safetensors file (names as Hugging Face's `BertModel` saves them, with or without a
//! `bert.` prefix); matrix products go through `matrixmultiply`.

use std::collections::HashMap;

use serde::Deserialize;

use crate::{Error, Result};

/// The largest model accepted (all-MiniLM-L6-v2 has 384, 6, 12, 1536, 512).
const MAX_HIDDEN: usize = 4096;
const MAX_LAYERS: usize = 64;
const MAX_POSITIONS: usize = 8192;

/// What `config.json` says of the encoder.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Width of every token's state.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer (they split the width).
    pub num_attention_heads: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Longest sequence the position embeddings cover.
    pub max_position_embeddings: usize,
    /// `ε` of every layer norm.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f32,
    /// The feed-forward activation: `gelu` (the erf form) is the one supported.
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_eps() -> f32 {
    1e-12
}

fn default_act() -> String {
    "gelu".into()
}

/// A linear layer: `y = x · Wᵀ + b`, W stored as [out, in].
#[derive(Debug, Clone)]
struct Linear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

#[derive(Debug, Clone)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

#[derive(Debug, Clone)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// The encoder's weights.
#[derive(Debug, Clone)]
pub struct Bert {
    config: BertConfig,
    words: Vec<f32>,
    vocabulary: usize,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
}

/// The tensors of a safetensors file, by name, as `f32`s with their shapes.
struct Tensors<'a> {
    bytes: &'a [u8],
    entries: HashMap<String, (Vec<usize>, usize, usize)>,
}

#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

impl<'a> Tensors<'a> {
    fn parse(file: &'a [u8]) -> Result<Tensors<'a>> {
        let corrupt = |what: &str| Error::Invalid(format!("the model's weights: {what}"));
        let length = file
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| corrupt("not a safetensors file"))?;
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(8))
            .filter(|e| *e <= file.len())
            .ok_or_else(|| corrupt("its header runs past the end"))?;
        let header: HashMap<String, serde_json::Value> = serde_json::from_slice(&file[8..end])
            .map_err(|e| corrupt(&format!("its header is not JSON: {e}")))?;
        let bytes = &file[end..];
        let mut entries = HashMap::new();
        for (name, value) in header {
            if name == "__metadata__" {
                continue;
            }
            let entry: Entry = serde_json::from_value(value)
                .map_err(|e| corrupt(&format!("tensor {name}: {e}")))?;
            let [from, to] = entry.data_offsets;
            if from > to || to > bytes.len() {
                return Err(corrupt(&format!("tensor {name} lies outside the file")));
            }
            let name = name.strip_prefix("bert.").unwrap_or(&name).to_string();
            if entry.dtype == "F32" {
                entries.insert(name, (entry.shape, from, to));
            }
        }
        Ok(Tensors { bytes, entries })
    }

    /// The tensor `name` as `f32`s, checked to have `shape`.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let (stored, from, to) = self
            .entries
            .get(name)
            .ok_or_else(|| Error::Invalid(format!("the model's weights lack {name} (F32)")))?;
        let bytes = shape
            .iter()
            .try_fold(4usize, |bytes, d| bytes.checked_mul(*d));
        if stored != shape || bytes != Some(to - from) {
            return Err(Error::Invalid(format!(
                "the model's tensor {name} has shape {stored:?}, the config asks for {shape:?}"
            )));
        }
        Ok(self.bytes[*from..*to]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn linear(&self, name: &str, inputs: usize, outputs: usize) -> Result<Linear> {
        Ok(Linear {
            weight: self.get(&format!("{name}.weight"), &[outputs, inputs])?,
            bias: self.get(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    fn norm(&self, name: &str, width: usize) -> Result<Norm> {
        Ok(Norm {
            weight: self.get(&format!("{name}.weight"), &[width])?,
            bias: self.get(&format!("{name}.bias"), &[width])?,
        })
    }
}

impl Bert {
    /// The encoder `config` describes, with the weights of a safetensors file.
    pub fn load(config: BertConfig, weights: &[u8]) -> Result<Bert> {
        let h = config.hidden_size;
        if h == 0
            || h > MAX_HIDDEN
            || config.num_attention_heads == 0
            || !h.is_multiple_of(config.num_attention_heads)
            || config.num_hidden_layers > MAX_LAYERS
            || config.intermediate_size == 0
            || config.intermediate_size > 8 * MAX_HIDDEN
            // Room for [CLS] and [SEP] at least.
            || config.max_position_embeddings < 2
            || config.max_position_embeddings > MAX_POSITIONS
        {
            return Err(Error::Invalid(format!(
                "the model's config is not one of a BERT encoder this build runs: {config:?}"
            )));
        }
        if config.hidden_act != "gelu" {
            return Err(Error::Invalid(format!(
                "the model's activation '{}' is not supported (gelu is)",
                config.hidden_act
            )));
        }
        let tensors = Tensors::parse(weights)?;
        let (vocabulary, stored) = match tensors.entries.get("embeddings.word_embeddings.weight") {
            Some((shape, ..)) if shape.len() == 2 && shape[0] > 0 && shape[1] == h => {
                (shape[0], shape.clone())
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "the model's weights lack embeddings.word_embeddings.weight of width {h} and at least one word"
                )))
            }
        };
        let words = tensors.get("embeddings.word_embeddings.weight", &stored)?;
        let positions = tensors.get(
            "embeddings.position_embeddings.weight",
            &[config.max_position_embeddings, h],
        )?;
        // Every token is of type 0: the first row, which must be a whole row (a narrower one
        // would leave the token states short of their width).
        let token_type = match tensors
            .entries
            .get("embeddings.token_type_embeddings.weight")
        {
            Some((shape, ..)) => {
                let types = match shape.as_slice() {
                    [types, width] if *types > 0 && *width == h => *types,
                    _ => {
                        return Err(Error::Invalid(format!(
                            "the model's tensor embeddings.token_type_embeddings.weight has shape {shape:?}, the config asks for [types, {h}]"
                        )))
                    }
                };
                let mut all =
                    tensors.get("embeddings.token_type_embeddings.weight", &[types, h])?;
                all.truncate(h);
                all
            }
            // bounded: the model's width, checked when it was loaded
            None => vec![0.0; h],
        };
        let embeddings_norm = tensors.norm("embeddings.LayerNorm", h)?;
        let i = config.intermediate_size;
        let layers = (0..config.num_hidden_layers)
            .map(|n| {
                let p = format!("encoder.layer.{n}");
                Ok(Layer {
                    query: tensors.linear(&format!("{p}.attention.self.query"), h, h)?,
                    key: tensors.linear(&format!("{p}.attention.self.key"), h, h)?,
                    value: tensors.linear(&format!("{p}.attention.self.value"), h, h)?,
                    attention_out: tensors.linear(&format!("{p}.attention.output.dense"), h, h)?,
                    attention_norm: tensors.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                    intermediate: tensors.linear(&format!("{p}.intermediate.dense"), h, i)?,
                    output: tensors.linear(&format!("{p}.output.dense"), i, h)?,
                    output_norm: tensors.norm(&format!("{p}.output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            config,
            words,
            vocabulary,
            positions,
            token_type,
            embeddings_norm,
            layers,
        })
    }

    /// Width of the token states.
    pub fn width(&self) -> usize {
        self.config.hidden_size
    }

    /// Longest sequence it takes.
    pub fn max_tokens(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// The last layer's state of each of `ids` (one sequence, every token attended), row by
    /// row. Ids past the vocabulary are read as its last; at most [`Bert::max_tokens`] are used.
    pub fn encode(&self, ids: &[u32]) -> Vec<f32> {
        let h = self.config.hidden_size;
        let ids = &ids[..ids.len().min(self.max_tokens())];
        let n = ids.len();
        // bounded: tokens (at most the model's positions) times its width
        let mut x = Vec::with_capacity(n * h);
        for (position, id) in ids.iter().enumerate() {
            let id = (*id as usize).min(self.vocabulary.saturating_sub(1));
            let word = &self.words[id * h..(id + 1) * h];
            let place = &self.positions[position * h..(position + 1) * h];
            x.extend(
                word.iter()
                    .zip(place)
                    .zip(&self.token_type)
                    .map(|((w, p), t)| w + p + t),
            );
        }
        self.norm(&mut x, &self.embeddings_norm);
        for layer in &self.layers {
            let attended = self.attention(layer, &x, n);
            let mut y = linear(&layer.attention_out, &attended, n);
            y.iter_mut().zip(&x).for_each(|(y, x)| *y += x);
            self.norm(&mut y, &layer.attention_norm);
            let mut inner = linear(&layer.intermediate, &y, n);
            inner.iter_mut().for_each(|v| *v = gelu(*v));
            let mut out = linear(&layer.output, &inner, n);
            out.iter_mut().zip(&y).for_each(|(o, y)| *o += y);
            self.norm(&mut out, &layer.output_norm);
            x = out;
        }
        x
    }

    /// Multi-head self-attention over `n` tokens' states `x`: each head's weighted mix of the
    /// values, weights the softmax of scaled query·key products.
    fn attention(&self, layer: &Layer, x: &[f32], n: usize) -> Vec<f32> {
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let size = h / heads;
        let q = linear(&layer.query, x, n);
        let k = linear(&layer.key, x, n);
        let v = linear(&layer.value, x, n);
        let scale = 1.0 / (size as f32).sqrt();
        // bounded: tokens (at most the model's positions) times its width
        let mut out = vec![0.0f32; n * h];
        // bounded: tokens, at most the model's positions
        let mut weights = vec![0.0f32; n];
        for head in 0..heads {
            let at = head * size;
            for i in 0..n {
                let qi = &q[i * h + at..i * h + at + size];
                let mut max = f32::NEG_INFINITY;
                for (j, w) in weights.iter_mut().enumerate() {
                    let kj = &k[j * h + at..j * h + at + size];
                    *w = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                    max = max.max(*w);
                }
                let mut total = 0.0;
                for w in weights.iter_mut() {
                    *w = (*w - max).exp();
                    total += *w;
                }
                let row = &mut out[i * h + at..i * h + at + size];
                for (j, w) in weights.iter().enumerate() {
                    let p = w / total;
                    let vj = &v[j * h + at..j * h + at + size];
                    row.iter_mut().zip(vj).for_each(|(o, v)| *o += p * v);
                }
            }
        }
        out
    }

    fn norm(&self, x: &mut [f32], norm: &Norm) {
        let h = self.config.hidden_size;
        let eps = self.config.layer_norm_eps;
        for row in x.chunks_exact_mut(h) {
            let mean = row.iter().sum::<f32>() / h as f32;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
            let inverse = 1.0 / (variance + eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
                *v = (*v - mean) * inverse * w + b;
            }
        }
    }
}

/// `x · Wᵀ + b` for `n` rows of `x`.
fn linear(layer: &Linear, x: &[f32], n: usize) -> Vec<f32> {
    let (k, m) = (layer.inputs, layer.outputs);
    // bounded: tokens times a layer's width, both bounded by the model
    let mut y = Vec::with_capacity(n * m);
    for _ in 0..n {
        y.extend_from_slice(&layer.bias);
    }
    if n == 0 {
        return y;
    }
    // What the unsafe call below relies on; loading checks every shape, so this never fails.
    assert!(
        x.len() >= n * k && layer.weight.len() >= m * k && y.len() == n * m,
        "a linear layer's inputs do not cover its shape"
    );
    // SAFETY: the pointers cover n×k, k×m (W as [m, k] read transposed) and n×m `f32`s, as
    // the strides say (checked above); `y` is not aliased.
    unsafe {
        matrixmultiply::sgemm(
            n,
            k,
            m,
            1.0,
            x.as_ptr(),
            k as isize,
            1,
            layer.weight.as_ptr(),
            1,
            k as isize,
            1.0,
            y.as_mut_ptr(),
            m as isize,
            1,
        );
    }
    y
}

/// GELU in its exact form: x · Φ(x).
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of `tensors` (name, shape), every value `0.5`.
    fn safetensors(tensors: &[(&str, Vec<usize>)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        let mut at = 0usize;
        for (name, shape) in tensors {
            let bytes = shape.iter().product::<usize>() * 4;
            header.insert(
                name.to_string(),
                serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + bytes]}),
            );
            at += bytes;
        }
        let header = serde_json::Value::Object(header).to_string();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        for _ in 0..at / 4 {
            file.extend_from_slice(&0.5f32.to_le_bytes());
        }
        file
    }

    fn config() -> BertConfig {
        serde_json::from_str(
            r#"{"hidden_size": 4, "num_hidden_layers": 0, "num_attention_heads": 1,
                "intermediate_size": 4, "max_position_embeddings": 4}"#,
        )
        .unwrap()
    }

    fn tensors(words: Vec<usize>) -> Vec<(&'static str, Vec<usize>)> {
        vec![
            ("embeddings.word_embeddings.weight", words),
            ("embeddings.position_embeddings.weight", vec![4, 4]),
            ("embeddings.LayerNorm.weight", vec![4]),
            ("embeddings.LayerNorm.bias", vec![4]),
        ]
    }

    #[test]
    fn a_small_model_encodes_and_damaged_weights_are_errors_not_panics() {
        let model = Bert::load(config(), &safetensors(&tensors(vec![3, 4]))).unwrap();
        // Ids past the vocabulary and tokens past the positions are clamped, not read past.
        assert_eq!(model.encode(&[0, 2, 99, 1, 1, 1]).len(), 4 * 4);
        let error = |file: &[u8]| match Bert::load(config(), file) {
            Ok(_) => panic!("damaged weights were accepted"),
            Err(e) => e.to_string(),
        };
        assert!(error(b"short").contains("not a safetensors file"));
        let mut past = safetensors(&tensors(vec![3, 4]));
        past[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(error(&past).contains("runs past the end"));
        assert!(error(&safetensors(&tensors(vec![0, 4]))).contains("at least one word"));
        // A shape whose size overflows: named, not multiplied into a wrapped size.
        let mut huge = safetensors(&tensors(vec![3, 4]));
        let text = String::from_utf8_lossy(&huge).replace("[3,4]", "[4611686018427387904,4]");
        huge = text.into_bytes();
        let header = huge.len() - 8 - (3 * 4 + 16 + 4 + 4) * 4;
        huge[..8].copy_from_slice(&(header as u64).to_le_bytes());
        assert!(error(&huge).contains("has shape"), "{}", error(&huge));
        let mut config = config();
        config.hidden_act = "relu".into();
        assert!(Bert::load(config, &safetensors(&tensors(vec![3, 4])))
            .is_err_and(|e| e.to_string().contains("relu")));
    }

    /// Found by the sentence model fuzz target: one position left no room for [CLS] and
    /// [SEP], and `SentenceModel::from_files` panicked clamping its length.
    #[test]
    fn a_model_of_one_position_is_refused_not_a_panic() {
        let mut config = config();
        config.max_position_embeddings = 1;
        let mut files = tensors(vec![3, 4]);
        files[1].1 = vec![1, 4];
        let err = Bert::load(config, &safetensors(&files)).unwrap_err();
        assert!(
            err.to_string().contains("max_position_embeddings: 1"),
            "{err}"
        );
    }

    /// Found by reading the code the fuzz target runs: token types narrower than the width
    /// left every token's state short, and the first layer's matrix product read past it.
    #[test]
    fn token_types_narrower_than_the_width_are_refused() {
        let mut files = tensors(vec![3, 4]);
        files.push(("embeddings.token_type_embeddings.weight", vec![1, 2]));
        let err = Bert::load(config(), &safetensors(&files)).unwrap_err();
        assert!(
            err.to_string()
                .contains("token_type_embeddings.weight has shape [1, 2]"),
            "{err}"
        );
    }
}
