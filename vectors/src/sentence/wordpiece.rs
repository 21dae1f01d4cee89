//! BERT's uncased tokenizer: the text cleaned (control characters dropped, whitespace made
//! spaces, CJK ideographs spaced apart), accents stripped (NFD, non-spacing marks dropped),
//! lower-cased, split at whitespace and around punctuation; then each word split greedily
//! into the longest pieces of the vocabulary (`##` marks a piece that continues a word). A
//! word longer than 100 characters, or one without such a split, is `[UNK]`.

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::{Error, Result};

/// Characters a word may have before it is unknown as a whole.
const MAX_WORD_CHARS: usize = 100;

/// A vocabulary and its special tokens.
#[derive(Debug, Clone)]
pub struct WordPiece {
    ids: HashMap<String, u32>,
    unknown: u32,
    /// `[CLS]`, opening every sequence.
    pub start: u32,
    /// `[SEP]`, closing it.
    pub end: u32,
}

impl WordPiece {
    /// The vocabulary of a `vocab.txt`: one token per line, its id the line's number.
    pub fn from_vocab(text: &str) -> Result<WordPiece> {
        let ids: HashMap<String, u32> = text
            .lines()
            .enumerate()
            .map(|(i, token)| (token.trim_end_matches('\r').to_string(), i as u32))
            .collect();
        let special = |name: &str| {
            ids.get(name)
                .copied()
                .ok_or_else(|| Error::Invalid(format!("the vocabulary has no {name} token")))
        };
        Ok(WordPiece {
            unknown: special("[UNK]")?,
            start: special("[CLS]")?,
            end: special("[SEP]")?,
            ids,
        })
    }

    /// The ids of `text`'s pieces, without `[CLS]` and `[SEP]`, at most `limit` of them.
    pub fn pieces(&self, text: &str, limit: usize) -> Vec<u32> {
        let mut out = Vec::new();
        for word in words(&normalise(text)) {
            if out.len() >= limit {
                break;
            }
            self.split(&word, &mut out);
        }
        out.truncate(limit);
        out
    }

    /// The pieces of one word, greedily longest first.
    fn split(&self, word: &str, out: &mut Vec<u32>) {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > MAX_WORD_CHARS {
            out.push(self.unknown);
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut piece = String::new();
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while start < end {
                let from = chars[start].0;
                let to = chars.get(end).map_or(word.len(), |c| c.0);
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[from..to]);
                if let Some(id) = self.ids.get(&piece) {
                    found = Some(*id);
                    break;
                }
                end -= 1;
            }
            let Some(id) = found else {
                out.push(self.unknown);
                return;
            };
            pieces.push(id);
            start = end;
        }
        out.extend(pieces);
    }
}

/// The cleaned, accent-stripped, lower-cased text.
fn normalise(text: &str) -> String {
    // bounded: a text in memory
    let mut cleaned = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\t' | '\n' | '\r') {
            cleaned.push(' ');
            continue;
        }
        if c == '\0' || c == '\u{fffd}' || is_control(c) {
            continue;
        }
        if c.is_whitespace() {
            cleaned.push(' ');
        } else if is_cjk(c) {
            cleaned.push(' ');
            cleaned.push(c);
            cleaned.push(' ');
        } else {
            cleaned.push(c);
        }
    }
    let stripped: String = cleaned
        .nfd()
        .filter(|c| c.general_category() != GeneralCategory::NonspacingMark)
        .collect();
    stripped.to_lowercase()
}

/// The words of normalised text: split at spaces, each punctuation character a word.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in text.split(' ').filter(|w| !w.is_empty()) {
        let mut current = String::new();
        for c in chunk.chars() {
            if is_punctuation(c) {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                out.push(c.to_string());
            } else {
                current.push(c);
            }
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

fn is_control(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Unassigned
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
    )
}

fn is_punctuation(c: char) -> bool {
    (c.is_ascii() && !c.is_ascii_alphanumeric() && ('!'..='~').contains(&c))
        || c.general_category_group() == GeneralCategoryGroup::Punctuation
}

fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary() -> WordPiece {
        let tokens = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "##s", "un", "##aff", "##able", ",",
            "!", "cafe", "東", "京",
        ];
        WordPiece::from_vocab(&tokens.join("\n")).unwrap()
    }

    #[test]
    fn words_split_into_the_longest_pieces() {
        let v = vocabulary();
        assert_eq!(
            v.pieces("The cats, unaffable!", 100),
            [4, 5, 6, 10, 7, 8, 9, 11]
        );
        // Accents go, CJK ideographs are words of their own, unknown words are one [UNK].
        assert_eq!(v.pieces("CAFÉ 東京 dogs", 100), [12, 13, 14, 1]);
        assert_eq!(v.pieces(&"a".repeat(101), 100), [1]);
        assert_eq!(v.pieces("the cat the cat", 3), [4, 5, 4]);
        assert_eq!(v.pieces("\u{0}\u{200b}\t", 10), Vec::<u32>::new());
    }

    #[test]
    fn a_vocabulary_needs_its_special_tokens() {
        assert!(WordPiece::from_vocab("a\nb").is_err());
    }
}
