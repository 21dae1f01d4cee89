//! Okapi BM25, the keyword half of a knowledge base's search: how a text splits into words and
//! how one word's occurrences in a chunk score. Words are lower-case runs of letters and digits,
//! in any script, of at most [`MAX_WORD_BYTES`] bytes (longer runs are no words: an index key
//! stays small whatever a document holds). The parameters are Lucene's defaults (k1 = 1.2,
//! b = 0.75, idf = ln(1 + (N − n + ½) / (n + ½))).

use std::collections::HashMap;

/// The longest word kept, in bytes.
pub(crate) const MAX_WORD_BYTES: usize = 64;
/// Term-frequency saturation.
pub(crate) const K1: f64 = 1.2;
/// Length normalisation.
pub(crate) const B: f64 = 0.75;

/// The lower-case words of `text`, in order.
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && w.len() <= MAX_WORD_BYTES)
        .map(str::to_lowercase)
        .filter(|w| w.len() <= MAX_WORD_BYTES)
}

/// Distinct words of a question a keyword search looks up, at most: each is one lookup of its
/// postings, and a question of more words ranks no better.
pub(crate) const MAX_QUESTION_TERMS: usize = 1024;

/// The distinct words of a question, in order of appearance, the first
/// [`MAX_QUESTION_TERMS`].
pub(crate) fn terms(question: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut terms: Vec<String> = Vec::new();
    for word in words(question) {
        if terms.len() == MAX_QUESTION_TERMS {
            break;
        }
        if seen.insert(word.clone()) {
            terms.push(word);
        }
    }
    terms
}

/// How often each word occurs in `text`, and its length in words.
pub(crate) fn counts(text: &str) -> (HashMap<String, u32>, u32) {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut length = 0u32;
    for word in words(text) {
        length = length.saturating_add(1);
        let count = counts.entry(word).or_insert(0);
        *count = count.saturating_add(1);
    }
    (counts, length)
}

/// What the score of a word in one chunk depends on besides the chunk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Corpus {
    /// Chunks searched.
    pub(crate) chunks: u64,
    /// Their average length in words.
    pub(crate) average_length: f64,
}

impl Corpus {
    /// What a word that `containing` chunks hold scores by, in every chunk: its idf, worked out
    /// once for all its postings.
    pub(crate) fn weight(&self, containing: u64) -> Weight {
        let idf = match self.chunks {
            0 => 0.0,
            _ => {
                let (chunks, n) = (self.chunks as f64, containing.min(self.chunks) as f64);
                (1.0 + (chunks - n + 0.5) / (n + 0.5)).ln()
            }
        };
        Weight {
            idf,
            average_length: self.average_length.max(1.0),
        }
    }
}

/// One word's scoring in a corpus (see [`Corpus::weight`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Weight {
    idf: f64,
    average_length: f64,
}

impl Weight {
    /// The word's score in a chunk of `length` words where it occurs `count` times.
    pub(crate) fn score(&self, count: u32, length: u32) -> f64 {
        if count == 0 || self.idf == 0.0 {
            return 0.0;
        }
        let tf = f64::from(count);
        let norm = 1.0 - B + B * f64::from(length) / self.average_length;
        self.idf * tf * (K1 + 1.0) / (tf + K1 * norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lower_case_runs_of_letters_and_digits() {
        let got: Vec<String> = words("Élan, NAÏVE co-op x2!").collect();
        assert_eq!(got, ["élan", "naïve", "co", "op", "x2"]);
        let long = "a".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(words(&format!("short {long} end")).count(), 2);
        assert_eq!(terms("the cat, THE dog"), ["the", "cat", "dog"]);
        // A question of many words keeps the first MAX_QUESTION_TERMS, found in one pass.
        let long: String = (0..200_000).map(|i| format!("w{i} ")).collect();
        let kept = terms(&long);
        assert_eq!(kept.len(), MAX_QUESTION_TERMS);
        assert_eq!(kept[1023], "w1023");
        let (counts, length) = counts("purr purr cat");
        assert_eq!((counts["purr"], counts["cat"], length), (2, 1, 3));
    }

    #[test]
    fn rarer_words_more_occurrences_and_shorter_chunks_score_higher() {
        let corpus = Corpus {
            chunks: 100,
            average_length: 10.0,
        };
        assert!(corpus.weight(2).score(1, 10) > corpus.weight(50).score(1, 10));
        assert!(corpus.weight(10).score(3, 10) > corpus.weight(10).score(1, 10));
        assert!(corpus.weight(10).score(1, 5) > corpus.weight(10).score(1, 20));
        assert_eq!(corpus.weight(10).score(0, 10), 0.0);
    }
}
