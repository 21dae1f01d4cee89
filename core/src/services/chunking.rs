//! Splitting a document into overlapping chunks for embedding, as MindsDB's `text_chunking`
//! preprocessing does: chunks of at most `chunk_size` characters that end at the last
//! paragraph break, else line break, else sentence end, else space in their second half (a
//! hard cut only where the text has none), each starting `chunk_overlap` characters before the
//! previous one ended, at a word start. Positions are in characters, as MindsDB's chunk ids
//! (`{id}:{column}:{n}of{total}:{start}to{end}`) give them.

/// One chunk: its text and its character range in the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chunk<'a> {
    pub(crate) text: &'a str,
    /// First character.
    pub(crate) start: usize,
    /// One past the last character.
    pub(crate) end: usize,
}

/// Where a chunk may end, best first: after a paragraph break, a line break, a sentence, a word.
const BREAKS: [&str; 5] = ["\n\n", "\n", ". ", "? ", " "];

/// A document ready to be cut into chunks, one at a time: a document of millions of tiny
/// chunks is never held as a list of them.
pub(crate) struct Document<'a> {
    text: &'a str,
    /// Byte offset of each character, and of the end.
    offsets: Vec<usize>,
    size: usize,
    overlap: usize,
}

impl<'a> Document<'a> {
    /// `text`, to be cut into chunks of at most `size` characters (at least 1) overlapping by
    /// `overlap` (below `size`). Its characters' positions take 8 bytes each, checked first.
    pub(crate) fn new(text: &'a str, size: usize, overlap: usize) -> crate::error::Result<Self> {
        let size = size.max(1);
        let mut offsets = crate::capacity::vec(text.len() + 1, "Chunking a document")?;
        if !text.trim().is_empty() {
            offsets.extend(text.char_indices().map(|(i, _)| i));
            offsets.push(text.len());
        }
        Ok(Document {
            text,
            offsets,
            size,
            overlap: overlap.min(size - 1),
        })
    }

    /// Its chunks, in order; none when it is blank.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = Chunk<'a>> + '_ {
        let n = self.offsets.len().saturating_sub(1);
        let mut next = (n > 0).then_some(0);
        std::iter::from_fn(move || {
            let start = next?;
            let slice =
                |start: usize, end: usize| &self.text[self.offsets[start]..self.offsets[end]];
            let limit = (start + self.size).min(n);
            let end = if limit == n {
                n
            } else {
                best_break(slice(start, limit), start, &self.offsets, self.size).unwrap_or(limit)
            };
            next =
                (end != n).then(|| next_start(self.text, &self.offsets, start, end, self.overlap));
            Some(Chunk {
                text: slice(start, end),
                start,
                end,
            })
        })
    }
}

/// The character after the best break in `window` (which starts at character `start`), if
/// one lies in its second half.
fn best_break(window: &str, start: usize, offsets: &[usize], size: usize) -> Option<usize> {
    let base = offsets[start];
    for separator in BREAKS {
        if let Some(at) = window.rfind(separator) {
            let byte = base + at + separator.len();
            let character = offsets.partition_point(|&o| o < byte);
            if character - start > size / 2 {
                return Some(character);
            }
        }
    }
    None
}

/// Where the chunk after `start..end` begins: `overlap` characters before `end`, moved on to
/// the next word start; at least half a chunk after `start`, so a document's chunks hold at
/// most about twice its text whatever the settings.
fn next_start(text: &str, offsets: &[usize], start: usize, end: usize, overlap: usize) -> usize {
    let mut next = end
        .saturating_sub(overlap)
        .max(start + (end - start).div_ceil(2).max(1));
    if next < end && overlap > 0 {
        // Skip the rest of a word cut in half, then the spaces after it.
        let at_word_start = |i: usize| {
            let before = text[..offsets[i]].chars().next_back();
            let here = text[offsets[i]..].chars().next();
            matches!((before, here), (Some(b), Some(h)) if b.is_whitespace() && !h.is_whitespace())
        };
        let mut i = next;
        while i < end && !at_word_start(i) {
            i += 1;
        }
        if i < end {
            next = i;
        }
    }
    // Leading whitespace of a chunk is dropped.
    while next < end && text[offsets[next]..].starts_with(char::is_whitespace) {
        next += 1;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(text: &str, size: usize, overlap: usize) -> Vec<Chunk<'_>> {
        let document = Document::new(text, size, overlap).unwrap();
        document.chunks().collect()
    }

    fn texts(text: &str, size: usize, overlap: usize) -> Vec<String> {
        chunks(text, size, overlap)
            .into_iter()
            .map(|c| c.text.to_string())
            .collect()
    }

    #[test]
    fn a_short_document_is_one_chunk_and_a_blank_one_none() {
        assert_eq!(texts("Hello world.", 100, 10), vec!["Hello world."]);
        assert!(chunks("  \n ", 100, 10).is_empty());
    }

    #[test]
    fn chunks_end_at_paragraphs_then_sentences_then_words() {
        let text = "First paragraph here.\n\nSecond one is a bit longer. It has two sentences.";
        let got = chunks(text, 40, 0);
        assert_eq!(got[0].text, "First paragraph here.\n\n");
        assert!(got[1].text.starts_with("Second one is a bit longer. "));
        let words = texts("alpha beta gamma delta epsilon zeta", 12, 0);
        assert_eq!(words, vec!["alpha beta ", "gamma delta ", "epsilon zeta"]);
    }

    #[test]
    fn overlap_starts_at_a_word_and_every_character_is_covered() {
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let got = chunks(text, 20, 8);
        assert!(got.len() > 3);
        for pair in got.windows(2) {
            assert!(pair[1].start < pair[0].end, "overlapping: {pair:?}");
            assert!(pair[1].start > pair[0].start);
            let first = pair[1].text.chars().next().unwrap();
            assert!(first.is_alphanumeric(), "{pair:?}");
        }
        assert_eq!(got.last().unwrap().end, text.chars().count());
    }

    #[test]
    fn positions_count_characters_and_a_text_without_breaks_is_cut_hard() {
        let text = "ééééééééééé"; // 11 two-byte characters
        let got = chunks(text, 4, 1);
        assert_eq!(
            got[0],
            Chunk {
                text: "éééé",
                start: 0,
                end: 4
            }
        );
        assert_eq!(got[1].start, 3);
        assert_eq!(got.last().unwrap().end, 11);
        // An overlap as large as the size still moves half a chunk at a time.
        let long = "x".repeat(1000);
        let many = chunks(&long, 100, 99);
        assert!(many.len() <= 21, "{}", many.len());
    }
}
