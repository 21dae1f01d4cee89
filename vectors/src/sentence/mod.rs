//! Sentence embeddings from a sentence-transformers BERT model, such as all-MiniLM-L6-v2:
//! a text's WordPiece tokens through the encoder, the mean of the token states, L2-normalised
//! (the model's `1_Pooling` mean and its normalisation). The caller reads the model folder's
//! files and hands their contents over; this module only computes.

mod bert;
mod wordpiece;

use bert::Bert;
pub use bert::BertConfig;
pub use wordpiece::WordPiece;

use crate::{Error, Result};

/// Tokens a text keeps when the model does not say (sentence-transformers' default).
const DEFAULT_MAX_TOKENS: usize = 256;

/// A loaded sentence embedding model.
#[derive(Debug, Clone)]
pub struct SentenceModel {
    tokenizer: WordPiece,
    encoder: Bert,
    max_tokens: usize,
}

impl SentenceModel {
    /// A model from its folder's files: `config.json`, `model.safetensors`, `vocab.txt` and,
    /// when there, `sentence_bert_config.json` (for `max_seq_length`).
    pub fn from_files(
        config_json: &str,
        weights: &[u8],
        vocab: &str,
        sentence_config_json: Option<&str>,
    ) -> Result<SentenceModel> {
        let config: BertConfig = serde_json::from_str(config_json)
            .map_err(|e| Error::Invalid(format!("the model's config.json: {e}")))?;
        let encoder = Bert::load(config, weights)?;
        let tokenizer = WordPiece::from_vocab(vocab)?;
        let max_tokens = match sentence_config_json {
            Some(text) => serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| Error::Invalid(format!("the model's sentence_bert_config.json: {e}")))?
                .get("max_seq_length")
                .and_then(serde_json::Value::as_u64)
                .map_or(DEFAULT_MAX_TOKENS, |n| n as usize),
            None => DEFAULT_MAX_TOKENS,
        };
        Ok(SentenceModel {
            tokenizer,
            max_tokens: max_tokens.clamp(2, encoder.max_tokens()),
            encoder,
        })
    }

    /// Length of its vectors.
    pub fn dimensions(&self) -> usize {
        self.encoder.width()
    }

    /// The token ids the model reads for `text`: `[CLS]`, its pieces (cut to the model's
    /// length), `[SEP]`.
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.tokenizer.start];
        ids.extend(self.tokenizer.pieces(text, self.max_tokens - 2));
        ids.push(self.tokenizer.end);
        ids
    }

    /// The unit vector of `text`.
    pub fn embed(&self, text: &str) -> Vec<f32> {
        let ids = self.tokens(text);
        let states = self.encoder.encode(&ids);
        let width = self.dimensions();
        // bounded: the model's width, checked when it was loaded
        let mut mean = vec![0.0f32; width];
        for row in states.chunks_exact(width) {
            mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
        }
        let count = (states.len() / width).max(1) as f32;
        mean.iter_mut().for_each(|m| *m /= count);
        let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        mean.iter_mut().for_each(|m| *m /= norm);
        mean
    }

    /// The vectors of `texts`, in order, computed on up to `threads` threads.
    pub fn embed_all(&self, texts: &[String], threads: usize) -> Vec<Vec<f32>> {
        crate::parallel_map(texts, threads, |text| self.embed(text))
    }
}
