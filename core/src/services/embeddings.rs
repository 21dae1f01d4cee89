//! How texts become vectors: OpenAI's `/embeddings` wire protocol over reqwest, as OpenAI,
//! Ollama, vLLM and llama.cpp servers speak it, or a model run in process (`provider =
//! "local"`, see `sentence_models`). Texts go out in batches of `embedding.batch_size`,
//! vectors come back in the order of the texts. As for chat calls, every request has a
//! deadline, goes through the egress policy and reads at most `embedding.max_reply_kb`; a reply
//! with the wrong number of vectors, vectors of differing or excessive dimension, or
//! non-finite numbers is refused, never stored. Vectors are returned L2-normalised, so cosine distance is one minus a dot
//! product.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::llm::{
    capitalized, read_capped, send, setting_text, successful, target, upstream, Connector,
};
use super::sentence_models;
use crate::config::EmbeddingConfig;
use crate::egress::HttpClient;
use crate::error::Result;

/// Where and how to call one embedding model.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Base URL up to and including `/v1`; `/embeddings` is appended.
    pub(crate) base_url: String,
    /// Sent as `Authorization: Bearer …` when not empty.
    pub(crate) api_key: String,
    pub(crate) model: String,
    /// Deadline of one request, from connecting to the last byte.
    pub(crate) timeout: Duration,
    /// Texts per request.
    pub(crate) batch_size: usize,
    /// Most bytes of a reply read.
    pub(crate) max_reply_bytes: usize,
    /// Most dimensions a vector may have.
    pub(crate) max_dimensions: usize,
    /// How messages name the endpoint (the operator's URL is not shown to tenants).
    pub(crate) shown: String,
    /// Whether the model runs in process (`provider = "local"`), named by `model`.
    pub(crate) local: bool,
}

/// The endpoint `settings` name (`model_name`, `base_url`, `api_key`, `batch_size`), the
/// configured default for the rest. The configured API key goes only to the configured
/// endpoint, never to one the settings name.
pub(crate) fn endpoint(settings: &Map<String, Value>, default: &EmbeddingConfig) -> Endpoint {
    let (base_url, api_key, shown) = target(
        settings,
        &default.base_url,
        &default.api_key,
        "embedding provider",
    );
    let text = |key: &str| setting_text(settings, key);
    let batch_size = settings
        .get("batch_size")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(default.batch_size)
        .clamp(1, default.batch_size.max(1));
    Endpoint {
        base_url,
        api_key,
        model: text("model_name")
            .unwrap_or(&default.model_name)
            .to_string(),
        timeout: Duration::from_secs(default.timeout_secs.max(1)),
        batch_size,
        max_reply_bytes: usize::try_from(default.max_reply_kb.saturating_mul(1024))
            .unwrap_or(usize::MAX),
        max_dimensions: default.max_dimensions.max(1),
        shown,
        local: text("provider")
            .unwrap_or(&default.provider)
            .eq_ignore_ascii_case(sentence_models::PROVIDER),
    }
}

/// The normalised vector of each text, in order, asked for in batches.
pub(crate) async fn embed(
    connector: &Connector,
    endpoint: &Endpoint,
    texts: &[String],
) -> Result<Vec<Vec<f32>>> {
    // bounded: one per text of the request, in memory
    let mut vectors = Vec::with_capacity(texts.len());
    for batch in texts.chunks(endpoint.batch_size.max(1)) {
        let got = match endpoint.local {
            true => {
                connector
                    .sentence_models
                    .embed(&endpoint.model, batch.to_vec())
                    .await?
            }
            false => embed_batch(&connector.client, endpoint, batch).await?,
        };
        if let (Some(first), Some(new)) = (vectors.first().map(Vec::len), got.first()) {
            if new.len() != first {
                return Err(upstream(format!(
                    "{} sent vectors of {} and of {first} dimensions for one request",
                    capitalized(&endpoint.shown),
                    new.len()
                )));
            }
        }
        vectors.extend(got);
    }
    Ok(vectors)
}

async fn embed_batch(
    client: &HttpClient,
    endpoint: &Endpoint,
    texts: &[String],
) -> Result<Vec<Vec<f32>>> {
    let url = format!("{}/embeddings", endpoint.base_url.trim_end_matches('/'));
    let shown = &endpoint.shown;
    let body = json!({"model": endpoint.model, "input": texts, "encoding_format": "float"});
    let call = async {
        let response = send(client, &url, &endpoint.api_key, &body, shown).await?;
        let response = successful(response, shown).await?;
        let (bytes, complete) = read_capped(response, endpoint.max_reply_bytes, shown).await?;
        if !complete {
            return Err(upstream(format!(
                "{} sent a reply larger than {} KiB (embedding.max_reply_kb); it was not read",
                capitalized(shown),
                endpoint.max_reply_bytes / 1024
            )));
        }
        parse_vectors(&bytes, texts.len(), endpoint)
    };
    match tokio::time::timeout(endpoint.timeout, call).await {
        Ok(vectors) => vectors,
        Err(_) => Err(upstream(format!(
            "{} did not answer within {} s",
            capitalized(shown),
            endpoint.timeout.as_secs_f64()
        ))),
    }
}

/// `{"data": [{"index": i, "embedding": [..]}, …]}` back into one normalised vector per text.
fn parse_vectors(bytes: &[u8], expected: usize, endpoint: &Endpoint) -> Result<Vec<Vec<f32>>> {
    let shown = capitalized(&endpoint.shown);
    let bad = |what: &str| upstream(format!("{shown} sent an invalid embeddings reply: {what}"));
    let reply: Value = serde_json::from_slice(bytes).map_err(|_| bad("not JSON"))?;
    let data = reply
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no 'data' list"))?;
    if data.len() != expected {
        return Err(bad(&format!("{} vectors for {expected} texts", data.len())));
    }
    // bounded: one per text of the request, in memory
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, item) in data.iter().enumerate() {
        let index = match item.get("index") {
            Some(index) => index
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|i| *i < expected)
                .ok_or_else(|| bad("an 'index' out of range"))?,
            None => position,
        };
        let numbers = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("an item without an 'embedding' list"))?;
        if numbers.is_empty() || numbers.len() > endpoint.max_dimensions {
            return Err(bad(&format!(
                "a vector of {} dimensions (at most {}, embedding.max_dimensions)",
                numbers.len(),
                endpoint.max_dimensions
            )));
        }
        // bounded: numbers of a reply read within embedding.max_reply_kb
        let mut vector = Vec::with_capacity(numbers.len());
        for number in numbers {
            let x = number
                .as_f64()
                .map(|x| x as f32)
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad("a vector element that is not a finite number"))?;
            vector.push(x);
        }
        if !normalise(&mut vector) {
            return Err(bad("a vector too long to normalise"));
        }
        if vectors[index].replace(vector).is_some() {
            return Err(bad("two vectors for one text"));
        }
    }
    let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
    if let Some(first) = vectors.first() {
        if vectors.iter().any(|v| v.len() != first.len()) {
            return Err(bad("vectors of differing dimensions"));
        }
    }
    Ok(vectors)
}

/// Scales `vector` to length one (a zero vector stays zero: it is at distance one from all);
/// false when its length is not a finite number.
pub(crate) fn normalise(vector: &mut [f32]) -> bool {
    let norm = vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if !norm.is_finite() {
        return false;
    }
    if norm > 0.0 {
        vector
            .iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint_of(max_dimensions: usize) -> Endpoint {
        let config = EmbeddingConfig {
            max_dimensions,
            ..EmbeddingConfig::default()
        };
        endpoint(&Map::new(), &config)
    }

    #[test]
    fn vectors_come_back_in_text_order_and_normalised() {
        let reply =
            br#"{"data": [{"index": 1, "embedding": [0, 2]}, {"index": 0, "embedding": [3, 4]}]}"#;
        let vectors = parse_vectors(reply, 2, &endpoint_of(8)).unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
    }

    #[test]
    fn malformed_replies_are_refused() {
        let e = endpoint_of(2);
        for (reply, expected, says) in [
            (&br#"{"data": []}"#[..], 1, "0 vectors for 1 texts"),
            (
                br#"{"data": [{"embedding": [1, 2, 3]}]}"#,
                1,
                "3 dimensions",
            ),
            (
                br#"{"data": [{"index": 5, "embedding": [1]}]}"#,
                1,
                "out of range",
            ),
            (
                br#"{"data": [{"embedding": [1]}, {"embedding": [1, 2]}]}"#,
                2,
                "differing",
            ),
            (br#"{"data": [{"embedding": ["x"]}]}"#, 1, "finite number"),
            (br#"{"data": [{"embedding": [1e300]}]}"#, 1, "finite number"),
            (br#"[1]"#, 1, "no 'data'"),
        ] {
            let error = parse_vectors(reply, expected, &e).unwrap_err();
            assert!(error.message().contains(says), "{}", error.message());
        }
    }

    #[test]
    fn the_configured_key_goes_only_to_the_configured_endpoint() {
        let config = EmbeddingConfig {
            api_key: "sk-operator".into(),
            ..EmbeddingConfig::default()
        };
        let mut settings = Map::new();
        assert_eq!(endpoint(&settings, &config).api_key, "sk-operator");
        settings.insert("base_url".into(), json!("http://127.0.0.1:9/v1"));
        assert_eq!(endpoint(&settings, &config).api_key, "");
    }
}
