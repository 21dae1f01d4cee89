//! Documents uploaded as tables, as MindsDB reads them: the text of a `.txt`, `.md`, `.html`,
//! `.pdf` or `.docx` file, cut into chunks of at most 500 characters that overlap by 250
//! (`services::chunking`), one row per chunk: `content`, and `metadata` as JSON
//! (`{"source_file", "file_format"}`). Such a table is what a knowledge base's `INSERT … SELECT
//! content FROM files.doc` takes.
//!
//! Each format's text comes from a crate that reads hostile input within bounds: HTML through
//! html5ever's tokenizer (streaming, no tree, so no depth to overflow), PDF through lopdf with
//! every stream's decompression bounded and the statement's deadline and memory checked between
//! objects, `.docx` through zip (checked first, see `archive`) and quick-xml's streaming reader.
//! The text is held whole while it is cut (it is at most the upload's decoded-size cap, and
//! counted in the statement's memory); the rows are made a batch at a time.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{ArrayRef, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use super::archive::Archive;
use super::rows::Caps;
use super::rows::{FileRows, BATCH_ROWS};
use crate::error::{Error, Result};

/// MindsDB's chunk size and overlap for uploaded documents, in characters.
const CHUNK_SIZE: usize = 500;
const CHUNK_OVERLAP: usize = 250;

/// The kinds of document read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Plain text and Markdown, as written.
    Text,
    /// HTML: its text, without tags, scripts and styles.
    Html,
    /// PDF: the text of its pages.
    Pdf,
    /// Word (Office Open XML): the text of its paragraphs.
    Docx,
}

/// Opens a document: its text is read now (so a file without any is refused here), its rows
/// are made as they are read. `label` is the `file_format` of the metadata, `file_name` its
/// `source_file`.
pub(super) fn open_document(
    bytes: Bytes,
    kind: Kind,
    label: &str,
    file_name: Option<&str>,
    caps: Caps,
) -> Result<FileRows> {
    let text = match kind {
        Kind::Text => decode_text(&bytes).into_owned(),
        Kind::Html => html_text_apart(&decode_text(&bytes), caps)?,
        Kind::Pdf => pdf_text(&bytes, caps)?,
        Kind::Docx => docx_text(bytes, caps)?,
    };
    if text.len() as u64 > caps.max_bytes {
        return Err(caps.bytes_over());
    }
    // Leading and trailing blank lines would only start or end the first and last chunks.
    let text = match text.trim() {
        trimmed if trimmed.len() == text.len() => text,
        trimmed => trimmed.to_string(),
    };
    if text.is_empty() {
        return Err(Error::invalid(match kind {
            Kind::Pdf => "The PDF holds no text that can be read (a scanned image has none)",
            _ => "The document holds no text",
        }));
    }
    // The name is repeated in every row: a name no file system would hold is cut.
    let source: String = file_name.unwrap_or_default().chars().take(255).collect();
    let metadata = serde_json::json!({"source_file": source, "file_format": label}).to_string();
    let schema = Arc::new(Schema::new(vec![
        Field::new("content", DataType::Utf8, true),
        Field::new("metadata", DataType::Utf8, true),
    ]));
    let batch_schema = Arc::clone(&schema);
    Ok(FileRows {
        schema,
        rows: Box::new(move |sink| {
            let document =
                crate::services::chunking::Document::new(&text, CHUNK_SIZE, CHUNK_OVERLAP)?;
            let mut chunks = document.chunks().peekable();
            while chunks.peek().is_some() {
                crate::cancel::check()?;
                let (mut content, mut meta) = (StringBuilder::new(), StringBuilder::new());
                let mut bytes = 0;
                for chunk in chunks.by_ref().take(BATCH_ROWS) {
                    content.append_value(chunk.text);
                    meta.append_value(&metadata);
                    bytes += chunk.text.len() + metadata.len();
                    if bytes > 8 << 20 {
                        break;
                    }
                }
                let columns: Vec<ArrayRef> =
                    vec![Arc::new(content.finish()), Arc::new(meta.finish())];
                let batch = RecordBatch::try_new(Arc::clone(&batch_schema), columns)
                    .map_err(|e| Error::internal(format!("a document's rows: {e}")))?;
                sink(batch)?;
            }
            Ok(())
        }),
        sheets: Vec::new(),
    })
}

/// Text in whatever encoding it came in: UTF-8 (a byte-order mark dropped), UTF-16 with its
/// byte-order mark, else Windows-1252 (which decodes any byte), as the text editors that
/// write files without saying their encoding mostly do.
pub(super) fn decode_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Some((encoding, _)) = encoding_rs::Encoding::for_bom(bytes) {
        return encoding.decode_with_bom_removal(bytes).0;
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => {
            encoding_rs::WINDOWS_1252
                .decode_without_bom_handling(bytes)
                .0
        }
    }
}

/// CPU seconds reading one HTML document may take: html5ever checks each attribute of a tag
/// against the tag's others, so one tag of a million attributes is hours of work; the child
/// process that reads it (see `sandbox`) is stopped at this.
const HTML_SECONDS: u64 = 60;

/// [`html_text`] in a child process under the statement's memory and [`HTML_SECONDS`].
fn html_text_apart(html: &str, caps: Caps) -> Result<String> {
    let limits = crate::sandbox::Limits {
        memory: crate::sandbox::memory_for(html.len() as u64, 64 << 20, 32, PDF_MEMORY),
        seconds: HTML_SECONDS,
        max_output: caps.max_bytes,
    };
    let text = crate::sandbox::run("the HTML document", limits, || {
        html_text(html, caps).map(String::into_bytes)
    })?;
    String::from_utf8(text)
        .map_err(|_| Error::internal("an HTML document's text came back as no text"))
}

/// The text of an HTML document: character data outside `<script>`, `<style>`, `<template>`
/// and `<head>` elements, entities decoded, a line break where a block element starts or ends.
fn html_text(html: &str, caps: Caps) -> Result<String> {
    use html5ever::tendril::StrTendril;
    use html5ever::tokenizer::states::RawKind;
    use html5ever::tokenizer::{
        BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
    };

    /// Tags whose text is not the document's.
    const HIDDEN: [&str; 6] = ["script", "style", "template", "head", "noscript", "title"];
    /// Tags that start or end a line.
    const BLOCKS: [&str; 30] = [
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "tr",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "nav",
        "aside",
        "blockquote",
        "pre",
        "hr",
        "dd",
        "dt",
        "dl",
        "figure",
        "figcaption",
        "main",
        "form",
    ];

    struct Collect {
        text: RefCell<String>,
        /// How many hidden elements are open.
        hidden: Cell<usize>,
        max: u64,
        over: Cell<bool>,
    }

    impl TokenSink for Collect {
        type Handle = ();

        fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
            match token {
                Token::TagToken(tag) => {
                    let name: &str = &tag.name;
                    if HIDDEN.contains(&name) {
                        match tag.kind {
                            TagKind::StartTag if !tag.self_closing => {
                                self.hidden.set(self.hidden.get() + 1);
                                // A script's or style's text is raw: `<` in it starts no tag.
                                if name == "script" {
                                    return TokenSinkResult::RawData(RawKind::ScriptData);
                                }
                                if name == "style" {
                                    return TokenSinkResult::RawData(RawKind::Rawtext);
                                }
                            }
                            TagKind::EndTag => self.hidden.set(self.hidden.get().saturating_sub(1)),
                            TagKind::StartTag => {}
                        }
                    } else if BLOCKS.contains(&name) {
                        let mut text = self.text.borrow_mut();
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                    }
                }
                Token::CharacterTokens(chars) if self.hidden.get() == 0 && !self.over.get() => {
                    let mut text = self.text.borrow_mut();
                    text.push_str(&chars);
                    if text.len() as u64 > self.max {
                        self.over.set(true);
                    }
                }
                _ => {}
            }
            TokenSinkResult::Continue
        }
    }

    let sink = Collect {
        text: RefCell::new(String::new()),
        hidden: Cell::new(0),
        max: caps.max_bytes,
        over: Cell::new(false),
    };
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    // Fed a piece at a time, so the deadline and memory are checked as the document is read.
    let mut rest = html;
    while !rest.is_empty() {
        crate::cancel::check()?;
        let mut cut = rest.len().min(64 * 1024);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        input.push_back(StrTendril::from_slice(&rest[..cut]));
        let _ = tokenizer.feed(&input);
        rest = &rest[cut..];
        if tokenizer.sink.over.get() {
            return Err(caps.bytes_over());
        }
    }
    tokenizer.end();
    let text = tokenizer.sink.text.take();
    Ok(squeeze_blank_lines(&text))
}

/// Lines trimmed at their ends and runs of blank lines made one, so markup's indentation does
/// not fill the chunks.
fn squeeze_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len()); // bounded: the text, already held
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

thread_local! {
    /// Set when a PDF's load had to drop objects because the statement must stop (see
    /// `keep_object`).
    static LOAD_STOPPED: Cell<bool> = const { Cell::new(false) };
}

/// lopdf's load filter, called for every object it reads: keeps the object while the
/// statement may go on, drops every further one once its memory or time is up (lopdf's load
/// is one call; this is the only place it can be stopped from).
fn keep_object(id: (u32, u16), object: &mut lopdf::Object) -> Option<((u32, u16), lopdf::Object)> {
    if LOAD_STOPPED.get() || crate::cancel::check().is_err() {
        LOAD_STOPPED.set(true);
        return None;
    }
    Some((id, object.clone()))
}

/// What reading one PDF may use at most, in a process of its own (see `sandbox`): memory by
/// its size (lopdf's trees take about 100 times their text) up to this, and this much CPU.
const PDF_MEMORY: u64 = 1 << 30;
const PDF_SECONDS: u64 = 60;

/// The text of a PDF's pages, a blank line between pages. lopdf builds each object a file
/// describes whole (an array of millions of numbers from a few kilobytes inflated, or one
/// object read many times over from an object stream's offsets) before anything of ours
/// runs, so the reading happens in a child process under memory and CPU limits.
fn pdf_text(bytes: &[u8], caps: Caps) -> Result<String> {
    let limits = crate::sandbox::Limits {
        memory: crate::sandbox::memory_for(bytes.len() as u64, 128 << 20, 100, PDF_MEMORY),
        seconds: PDF_SECONDS,
        max_output: caps.max_bytes,
    };
    let text = crate::sandbox::run("the PDF", limits, || {
        pdf_text_here(bytes, caps).map(String::into_bytes)
    })?;
    String::from_utf8(text).map_err(|_| Error::internal("a PDF's text came back as no text"))
}

/// [`pdf_text`]'s work, done where it is called.
fn pdf_text_here(bytes: &[u8], caps: Caps) -> Result<String> {
    // A stream (page contents, an object stream, a font's map) may decompress to at most this.
    let per_stream = caps.max_bytes.min(64 << 20) as usize;
    let damaged = |e: lopdf::Error| match e {
        lopdf::Error::Decompress(lopdf::DecompressError::MemoryLimitExceeded { .. }) => {
            Error::invalid(format!(
                "The PDF has a stream that decompresses to more than {} MiB; it is refused",
                per_stream >> 20
            ))
        }
        e => Error::invalid(format!("The file is not a readable PDF: {e}")),
    };
    let options = lopdf::LoadOptions {
        filter: Some(keep_object),
        max_decompressed_size: Some(per_stream),
        ..Default::default()
    };
    LOAD_STOPPED.set(false);
    let loaded = super::rows::contained("PDF", || {
        lopdf::Document::load_mem_with_options(bytes, options).map_err(damaged)
    });
    // The statement's own stop (memory, deadline) says what it was, not "damaged".
    crate::cancel::check()?;
    let document = loaded?;
    if document.is_encrypted() {
        return Err(Error::invalid(
            "The PDF is encrypted; upload it without a password",
        ));
    }
    let mut text = String::new();
    for page in document.get_pages().into_keys() {
        crate::cancel::check()?;
        let page_text = super::rows::contained("PDF", || {
            document
                .extract_text_with_limit(&[page], per_stream)
                .map_err(damaged)
        });
        // A page whose text cannot be read (an unknown font encoding) leaves a gap, as a
        // reader's copy would; a bomb refuses the file.
        let page_text = match page_text {
            Ok(page_text) => page_text,
            Err(e) if e.message().contains("decompresses to more") => return Err(e),
            Err(_) => continue,
        };
        if !text.is_empty() && !page_text.trim().is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(page_text.trim());
        if text.len() as u64 > caps.max_bytes {
            return Err(caps.bytes_over());
        }
    }
    Ok(text)
}

/// The text of a `.docx` file's body: its paragraphs, one per line, tabs and line breaks kept.
fn docx_text(bytes: Bytes, caps: Caps) -> Result<String> {
    use quick_xml::events::Event;

    let mut archive = Archive::check(bytes, caps, "The .docx file")?;
    let xml = archive.read("word/document.xml")?.ok_or_else(|| {
        Error::invalid("The file is not a Word document: it has no word/document.xml")
    })?;
    let mut reader = quick_xml::Reader::from_reader(&xml[..]);
    let mut buffer = Vec::new();
    let mut text = String::new();
    // Inside a `w:t` (text) element.
    let mut in_text = false;
    let bad = |e: &dyn std::fmt::Display| {
        Error::invalid(format!("The Word document's XML is damaged: {e}"))
    };
    loop {
        let event = reader.read_event_into(&mut buffer).map_err(|e| bad(&e))?;
        match event {
            Event::Start(e) if e.name().as_ref() == "w:t" => in_text = true,
            Event::End(e) => match e.name().as_ref() {
                "w:t" => in_text = false,
                "w:p" => text.push('\n'),
                _ => {}
            },
            Event::Empty(e) => match e.name().as_ref() {
                "w:tab" => text.push('\t'),
                "w:br" | "w:cr" => text.push('\n'),
                "w:p" => text.push('\n'),
                _ => {}
            },
            Event::Text(t) if in_text => text.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                let resolved = match r.resolve_char_ref().map_err(|e| bad(&e))? {
                    Some(c) => Some(c),
                    None => match r.as_ref() {
                        "amp" => Some('&'),
                        "lt" => Some('<'),
                        "gt" => Some('>'),
                        "quot" => Some('"'),
                        "apos" => Some('\''),
                        _ => None,
                    },
                };
                text.extend(resolved);
            }
            Event::Eof => break,
            _ => {}
        }
        buffer.clear();
        if text.len() as u64 > caps.max_bytes {
            return Err(caps.bytes_over());
        }
    }
    Ok(text)
}
