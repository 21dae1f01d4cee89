//! A knowledge base's reranker: a chat model asked how relevant each found chunk is to the
//! question, through the OpenAI-compatible chat wire every LLM call uses. The prompt and the
//! answer's reading are MindsDB's ("no-logprobs" method): the model answers a number from 0
//! to 100, which becomes a relevance from 0 to 1. A reply holding no number scores 0, as in
//! MindsDB: the chunk sinks to the bottom rather than failing the whole search over one
//! unruly answer. Calls run a few at a time.

use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Map, Value};

use super::llm::{self, Connector};
use crate::error::Result;

/// Reranking calls in flight at once for one search.
const CONCURRENCY: usize = 4;

/// The relevance (0 to 1) of each of `chunks` to `question`, in order.
pub(crate) async fn scores(
    connector: &Connector,
    settings: &Map<String, Value>,
    question: &str,
    chunks: &[String],
) -> Result<Vec<f64>> {
    let endpoint = llm::endpoint(settings, &connector.default_llm());
    let system = format!(
        "Score the relevance between search query and user message on scale between 0 and 100 per cents. \
         Consider semantic meaning, key concepts, and contextual relevance. \
         Return ONLY a numerical score between 0 and 100 per cents. No other text. Stop after sending a number. \
         Search query: {question}"
    );
    let (system, endpoint) = (&system, &endpoint);
    futures::stream::iter(chunks.iter().cloned())
        .map(|chunk: String| async move {
            let messages = [
                json!({"role": "system", "content": system}),
                json!({"role": "user", "content": chunk}),
            ];
            let reply = llm::chat(&connector.client, endpoint, &messages, &[], None, None).await?;
            Ok(score(&reply.content))
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await
}

/// The first number of `answer`, read as per cents and kept within 0 to 1; 0 without one.
fn score(answer: &str) -> f64 {
    let digits: String = answer
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .trim_end_matches('.')
        .parse::<f64>()
        .map(|n| (n / 100.0).clamp(0.0, 1.0))
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::score;

    #[test]
    fn answers_read_as_per_cents() {
        assert_eq!(score("87"), 0.87);
        assert_eq!(score("Score: 40%."), 0.4);
        assert_eq!(score("12.5"), 0.125);
        assert_eq!(score("1000"), 1.0);
        assert_eq!(score("very relevant"), 0.0);
        assert_eq!(score(""), 0.0);
        assert_eq!(score("99999999999999999999999999999999999"), 1.0);
    }
}
