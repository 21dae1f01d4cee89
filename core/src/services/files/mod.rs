//! Uploaded files (MindsDB's `files` database): a CSV, JSON, Parquet or spreadsheet upload is
//! read into Arrow here, with its column types inferred, and a document (text, Markdown, HTML,
//! PDF, Word) into rows of its text's chunks; `sql::uploads` stores it as a table of the
//! `files` database, which SQL reads as `files.<name>`. Reading decides the format (given, or
//! from the name's extension, or from the first bytes) and says what is wrong with a file that
//! cannot be read. One decoder per format (`csv`, `json`, `parquet`, `sheets`, `xls`, `documents`;
//! `archive` checks zip containers before anything reads them), each handing its rows to
//! `rows`, which counts them against the caps.

mod archive;
mod csv;
mod documents;
mod json;
mod parquet;
mod rows;
mod sheets;
mod xls;

use serde_json::Value;

use bytes::Bytes;

use crate::error::{Error, Result};

pub(crate) use self::rows::{Caps, FileRows};

/// The formats a file can be uploaded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// A JSON array of objects, or one object per line.
    Json,
    /// Apache Parquet; its own column types are kept.
    Parquet,
    /// Plain text or Markdown: rows of its text's chunks (`content`, `metadata`).
    Text,
    /// HTML: rows of its text's chunks.
    Html,
    /// PDF: rows of its text's chunks.
    Pdf,
    /// Word (`.docx`): rows of its text's chunks.
    Docx,
    /// An Excel workbook (`.xlsx`): a sheet's rows, typed by its cells.
    Xlsx,
    /// An Excel 97–2003 workbook (`.xls`), read as `.xlsx` is.
    Xls,
    /// A zip archive holding one file of any other format.
    Zip,
}

impl FileFormat {
    /// The format a name (`csv`, `json`, `jsonl`, `ndjson`, or a media type such as
    /// `text/csv` or `application/json`) stands for.
    pub fn from_name(name: &str) -> Option<FileFormat> {
        let name = name.trim().to_ascii_lowercase();
        let name = name.split(';').next().unwrap_or_default().trim();
        match name.rsplit(['.', '/', '+']).next().unwrap_or_default() {
            "csv" => Some(FileFormat::Csv),
            "json" | "jsonl" | "ndjson" | "x-ndjson" | "jsonlines" => Some(FileFormat::Json),
            "parquet" | "x-parquet" | "vnd.apache.parquet" => Some(FileFormat::Parquet),
            "txt" | "text" | "plain" | "md" | "markdown" | "x-markdown" => Some(FileFormat::Text),
            "html" | "htm" | "xhtml" => Some(FileFormat::Html),
            "pdf" => Some(FileFormat::Pdf),
            // `application/vnd.openxmlformats-officedocument.wordprocessingml.document`
            "docx" | "document" => Some(FileFormat::Docx),
            // `application/vnd.openxmlformats-officedocument.spreadsheetml.sheet`
            "xlsx" | "xlsm" | "sheet" => Some(FileFormat::Xlsx),
            // `application/vnd.ms-excel`
            "xls" | "ms-excel" => Some(FileFormat::Xls),
            "zip" | "x-zip-compressed" | "x-zip" => Some(FileFormat::Zip),
            _ => None,
        }
    }

    /// The format a caller names (as [`FileFormat::from_name`] reads names); an error naming
    /// the formats there are otherwise.
    pub fn parse(name: &str) -> Result<FileFormat> {
        FileFormat::from_name(name).ok_or_else(|| {
            Error::invalid(format!(
                "Unknown file format '{name}'; files are csv, json (an array of objects, or one object per line), parquet, xlsx, xls, txt, md, html, pdf, docx, or a zip of one of them"
            ))
        })
    }
}

/// An uploaded file as `GET /api/files` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    /// The table name: `files.<name>` in SQL.
    pub name: String,
    /// Rows stored.
    pub row_count: u64,
    /// Column names, in order.
    pub columns: Vec<String>,
}

impl FileInfo {
    /// MindsDB's listing record: `{"name", "row_count", "columns"}`.
    pub fn to_wire_json(&self) -> Value {
        serde_json::json!({"name": self.name, "row_count": self.row_count, "columns": self.columns})
    }
}

/// Opens an uploaded file. `format` as given, else guessed from `file_name`'s extension, else
/// from the first bytes (see `sniff`). The columns are known (and checked) when this returns;
/// rows are decoded only as they are read.
pub(crate) fn open(
    bytes: Bytes,
    format: Option<FileFormat>,
    file_name: Option<&str>,
    caps: Caps,
) -> Result<FileRows> {
    open_in(bytes, format, file_name, caps, false)
}

fn open_in(
    bytes: Bytes,
    format: Option<FileFormat>,
    file_name: Option<&str>,
    caps: Caps,
    in_archive: bool,
) -> Result<FileRows> {
    // A byte-order mark (spreadsheets write one) would become part of the first column's name.
    let bytes = if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.slice(3..)
    } else {
        bytes
    };
    let extension = file_name
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, extension)| extension.to_ascii_lowercase());
    if let (None, Some(extension @ ("tsv" | "doc" | "ppt" | "pptx" | "rtf"))) =
        (format, extension.as_deref())
    {
        return Err(Error::invalid(format!(
            "'.{extension}' files cannot be uploaded; upload CSV (comma-separated, with a header line), JSON, Parquet, .xlsx, .xls, text, Markdown, HTML, PDF or .docx"
        )));
    }
    let format = match format.or_else(|| extension.as_deref().and_then(FileFormat::from_name)) {
        Some(format) => format,
        None => sniff(&bytes),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid("The file is empty"));
    }
    // What a document's metadata says it was: the extension it came with, else the format.
    let label = |default: &str| match extension.as_deref() {
        Some(e) if FileFormat::from_name(e) == Some(format) => e.to_string(),
        _ => default.to_string(),
    };
    let document = |kind, default: &str| {
        documents::open_document(bytes.clone(), kind, &label(default), file_name, caps)
    };
    match format {
        FileFormat::Csv => csv::open_csv(bytes),
        FileFormat::Json => json::open_json(bytes),
        FileFormat::Parquet => parquet::open_parquet(bytes, caps),
        FileFormat::Text => document(documents::Kind::Text, "txt"),
        FileFormat::Html => document(documents::Kind::Html, "html"),
        FileFormat::Pdf => document(documents::Kind::Pdf, "pdf"),
        FileFormat::Docx => document(documents::Kind::Docx, "docx"),
        FileFormat::Xlsx => {
            let workbook = sheets::open_workbook(bytes, caps)?;
            match &workbook.sheets[..] {
                [only] => {
                    let only = only.clone();
                    workbook.sheet(&only)
                }
                _ => workbook.book(),
            }
        }
        FileFormat::Xls => xls::open_xls(bytes, caps),
        FileFormat::Zip if in_archive => Err(Error::invalid(
            "The archive holds another archive; archives inside archives are not read",
        )),
        FileFormat::Zip => {
            let mut archive = archive::Archive::check(bytes, caps, "The archive")?;
            let (member, content) = archive.only_file()?;
            drop(archive);
            open_in(Bytes::from(content), None, Some(&member), caps, true)
        }
    }
}

/// The format the first bytes say: `PAR1` is Parquet, `%PDF-` PDF, a zip archive a Word
/// document or workbook by what it holds (else an archive), an OLE2 compound file an `.xls`
/// workbook, `<!doctype html` or `<html` HTML, `[` or `{` JSON, anything else CSV.
fn sniff(bytes: &Bytes) -> FileFormat {
    if bytes.starts_with(b"PAR1") {
        return FileFormat::Parquet;
    }
    if bytes.starts_with(&xls::OLE2) {
        return FileFormat::Xls;
    }
    if bytes.starts_with(b"%PDF-") {
        return FileFormat::Pdf;
    }
    if bytes.starts_with(b"PK\x03\x04") {
        // Only the archive's directory is read here; its entries are checked when opened.
        let holds = zip::ZipArchive::new(std::io::Cursor::new(bytes.clone()))
            .map(|zip| {
                (
                    zip.index_for_name("word/document.xml").is_some(),
                    zip.index_for_name("xl/workbook.xml").is_some(),
                )
            })
            .unwrap_or_default();
        return match holds {
            (true, _) => FileFormat::Docx,
            (_, true) => FileFormat::Xlsx,
            _ => FileFormat::Zip,
        };
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    let head = &bytes[start.unwrap_or(0)..];
    let starts_with = |prefix: &[u8]| {
        head.len() >= prefix.len() && head[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts_with(b"<!doctype html") || starts_with(b"<html") {
        return FileFormat::Html;
    }
    match head.first() {
        Some(b'[' | b'{') => FileFormat::Json,
        _ => FileFormat::Csv,
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod samples;

#[cfg(test)]
mod tests {
    use super::rows::{stored_size, MAX_COLUMNS};
    use super::samples;
    use super::*;
    use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::DataType;
    use datafusion::arrow::datatypes::SchemaRef;
    use std::sync::Arc;

    /// A file read whole, for looking at.
    struct FileData {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    }

    const NO_CAPS: Caps = Caps {
        max_rows: u64::MAX,
        max_bytes: u64::MAX,
    };

    fn read(bytes: &[u8], format: Option<FileFormat>, name: Option<&str>) -> Result<FileData> {
        let file = open(Bytes::copy_from_slice(bytes), format, name, NO_CAPS)?;
        let schema = Arc::clone(&file.schema);
        let mut batches = Vec::new();
        file.read_counted(NO_CAPS, &mut |batch| {
            batches.push(batch);
            Ok(())
        })?;
        Ok(FileData { schema, batches })
    }

    #[test]
    fn caps_stop_a_file_while_it_is_read() {
        let csv: String = std::iter::once("n,s\n".to_string())
            .chain((0..20_000).map(|i| format!("{i},{}\n", "x".repeat(100))))
            .collect();
        let caps = Caps {
            max_rows: 10_000,
            max_bytes: u64::MAX,
        };
        let file = open(Bytes::from(csv.clone()), None, None, caps).unwrap();
        let mut seen = 0;
        let err = file
            .read_counted(caps, &mut |batch| {
                seen += batch.num_rows();
                Ok(())
            })
            .unwrap_err();
        assert!(err.message().contains("files.max_rows"), "{err}");
        assert!(
            seen <= 10_000,
            "nothing past the cap was handed on ({seen})"
        );
        let caps = Caps {
            max_rows: u64::MAX,
            max_bytes: 1 << 20,
        };
        let file = open(Bytes::from(csv), None, None, caps).unwrap();
        let err = file.read_counted(caps, &mut |_| Ok(())).unwrap_err();
        assert!(err.message().contains("files.max_decoded_mb"), "{err}");
    }

    /// A tiny Parquet file of one long text repeated (dictionary-encoded, compressed) is
    /// counted as it will be stored, and refused before it is expanded.
    #[test]
    fn a_parquet_file_that_expands_is_refused_by_its_stored_size() {
        use datafusion::arrow::array::{DictionaryArray, Int32Array};
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::basic::{Compression, ZstdLevel};
        use datafusion::parquet::file::properties::WriterProperties;
        let rows = 200_000;
        let long = "x".repeat(10_000);
        let keys = Int32Array::from(vec![0; rows]);
        let dictionary =
            DictionaryArray::new(keys, Arc::new(StringArray::from(vec![long.clone()])));
        // Arrow's own dictionary type, and plain text that Parquet dictionary-encodes itself.
        let plain = StringArray::from(vec![long.as_str(); 20_000]);
        for column in [
            Arc::new(dictionary) as ArrayRef,
            Arc::new(plain) as ArrayRef,
        ] {
            let batch = RecordBatch::try_from_iter([("s", column)]).unwrap();
            let mut file = Vec::new();
            let properties = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
                .build();
            let mut writer =
                ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            assert!(file.len() < 200_000, "a small file: {} bytes", file.len());
            let caps = Caps {
                max_rows: u64::MAX,
                max_bytes: 32 << 20,
            };
            let opened = open(Bytes::from(file), None, Some("bomb.parquet"), caps).unwrap();
            let mut expanded = 0u64;
            let err = opened
                .read_counted(caps, &mut |batch| {
                    expanded += stored_size(&batch);
                    Ok(())
                })
                .unwrap_err();
            assert!(err.message().contains("files.max_decoded_mb"), "{err}");
            assert!(
                expanded <= caps.max_bytes,
                "refused before more than the cap was handed on"
            );
        }
    }

    #[test]
    fn json_arrays_are_split_into_rows_without_parsing_them_whole() {
        let data = read(
            br#" [ {"a": "x, ] y", "b": {"c": "}]["}} , {"a": "q\"]"} ] "#,
            None,
            None,
        )
        .unwrap();
        assert_eq!(data.batches[0].num_rows(), 2);
        for bad in [&br#"[{"a": 1},]"#[..], br#"[{"a": 1}] x"#, br#"[{"a": 1}"#] {
            let err = read(bad, None, None).err().expect("refused");
            assert!(
                err.message().contains("not readable as JSON"),
                "{}",
                err.message()
            );
        }
    }

    fn names(data: &FileData) -> Vec<String> {
        data.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    #[test]
    fn csv_columns_and_types_are_inferred() {
        let data = read(b"x,y,name\n1,2.5,a\n2,,b\n", None, Some("t.csv")).unwrap();
        assert_eq!(names(&data), ["x", "y", "name"]);
        let types: Vec<&DataType> = data.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(
            types,
            [&DataType::Int64, &DataType::Float64, &DataType::Utf8]
        );
        assert_eq!(data.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    }

    #[test]
    fn a_value_that_only_looks_typed_makes_its_column_text() {
        let data = read(b"d,n\n2021-01-01,1\n2021-02-30,\n", None, None).unwrap();
        let types: Vec<&DataType> = data.schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types, [&DataType::Utf8, &DataType::Int64]);
        let empty = read(b"a,b\n1,\n", None, None).unwrap();
        assert_eq!(empty.schema.field(1).data_type(), &DataType::Utf8);
    }

    #[test]
    fn json_values_of_mixed_kinds_are_text() {
        let data = read(br#"[{"zip": 12345}, {"zip": "A1B"}]"#, None, None).unwrap();
        assert_eq!(data.schema.field(0).data_type(), &DataType::Utf8);
        let mixed = read(br#"[{"a": {"b": 1}}, {"a": 2}]"#, None, None)
            .err()
            .unwrap();
        assert!(
            mixed.message().contains("holds an object"),
            "{}",
            mixed.message()
        );
        let wide: String = (0..=MAX_COLUMNS)
            .map(|i| format!("{{\"k{i}\": 1}}\n"))
            .collect();
        let error = read(wide.as_bytes(), None, None).err().unwrap();
        assert!(
            error.message().contains("at most 4096"),
            "{}",
            error.message()
        );
        let tsv = read(b"a\tb\n1\t2\n", None, Some("x.tsv")).err().unwrap();
        assert!(tsv.message().contains("'.tsv'"), "{}", tsv.message());
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_name() {
        let data = read(b"\xEF\xBB\xBFid,v\n1,2\n", None, None).unwrap();
        assert_eq!(names(&data), ["id", "v"]);
    }

    #[test]
    fn json_keeps_the_files_column_order() {
        for text in [
            r#"[{"zeta": 1, "alpha": "a"}, {"zeta": 2, "mid": true}]"#,
            "{\"zeta\": 1, \"alpha\": \"a\"}\n{\"zeta\": 2, \"mid\": true}\n",
        ] {
            let data = read(text.as_bytes(), None, None).unwrap();
            assert_eq!(names(&data), ["zeta", "alpha", "mid"], "{text}");
            assert_eq!(data.batches[0].num_rows(), 2);
        }
    }

    #[test]
    fn unreadable_files_say_why() {
        let cases: [(&[u8], Option<FileFormat>, &str); 5] = [
            (b"  \n", None, "empty"),
            (b"PAR1....", None, "Parquet"),
            (b"[1, 2]", None, "not an object"),
            (
                b"[{\"a\": 1}",
                Some(FileFormat::Json),
                "not readable as JSON",
            ),
            (b"a,A\n1,2\n", None, "two columns named 'A'"),
        ];
        for (bytes, format, expected) in cases {
            let error = read(bytes, format, None).err().expect("refused");
            assert!(error.message().contains(expected), "{}", error.message());
        }
    }

    #[test]
    fn formats_are_named_by_extension_or_media_type() {
        assert_eq!(FileFormat::from_name("data.CSV"), Some(FileFormat::Csv));
        assert_eq!(
            FileFormat::from_name("text/csv; charset=utf-8"),
            Some(FileFormat::Csv)
        );
        assert_eq!(
            FileFormat::from_name("application/json"),
            Some(FileFormat::Json)
        );
        assert_eq!(FileFormat::from_name("rows.ndjson"), Some(FileFormat::Json));
        assert_eq!(FileFormat::from_name("application/octet-stream"), None);
    }

    fn texts(data: &FileData, column: usize) -> Vec<String> {
        data.batches
            .iter()
            .flat_map(|b| {
                let column = b
                    .column(column)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap();
                (0..datafusion::arrow::array::Array::len(column))
                    .map(|i| column.value(i).to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn text_and_markdown_become_rows_of_overlapping_chunks() {
        let paragraph = "Mindlite stores everything in one file. ".repeat(10);
        let text = format!("# Title\n\n{paragraph}\n\n{paragraph}\n\n{paragraph}");
        let data = read(text.as_bytes(), None, Some("notes.md")).unwrap();
        assert_eq!(names(&data), ["content", "metadata"]);
        let chunks = texts(&data, 0);
        assert!(chunks.len() >= 3, "{chunks:?}");
        assert!(chunks.iter().all(|c| c.chars().count() <= 500));
        assert!(chunks[0].starts_with("# Title"));
        let metadata: Value = serde_json::from_str(&texts(&data, 1)[0]).unwrap();
        assert_eq!(
            metadata,
            serde_json::json!({"source_file": "notes.md", "file_format": "md"})
        );
        // Not UTF-8: read as Windows-1252, as an old editor wrote it.
        let latin = read(b"caf\xe9 cr\xe8me", Some(FileFormat::Text), None).unwrap();
        assert_eq!(texts(&latin, 0), ["café crème"]);
        let blank = read(b" \n ", Some(FileFormat::Text), None).err().unwrap();
        assert!(blank.message().contains("empty"), "{blank}");
    }

    #[test]
    fn html_keeps_its_text_only() {
        let html = "<!DOCTYPE html><html><head><title>Tab</title><style>p { color: red }</style></head>\
            <body><h1>Fish &amp; chips</h1><p>First  line</p><script>var s = '<p>not text</p>';</script>\
            <div><p>Second</p></div><template><p>hidden</p></template></body></html>";
        let data = read(html.as_bytes(), None, None).unwrap();
        assert_eq!(texts(&data, 0), ["Fish & chips\nFirst  line\nSecond"]);
        let metadata: Value = serde_json::from_str(&texts(&data, 1)[0]).unwrap();
        assert_eq!(metadata["file_format"], "html");
    }

    #[test]
    fn pdf_pages_are_read_and_a_bomb_is_refused() {
        let pdf = samples::pdf(&[&["Hello from page one", "and more"], &["Page two says hi"]]);
        let data = read(&pdf, None, Some("report.pdf")).unwrap();
        let content = texts(&data, 0).join(" ");
        assert!(content.contains("Hello from page one"), "{content}");
        assert!(content.contains("Page two says hi"), "{content}");
        // Sniffed without a name.
        assert_eq!(
            texts(&read(&pdf, None, None).unwrap(), 0).join(" "),
            content
        );
        // A page stream that inflates past the per-stream bound (the caps' decoded size).
        let long = "A".repeat(8 << 20);
        let bomb = samples::pdf(&[&[long.as_str()]]);
        assert!(bomb.len() < 200_000, "a small file: {}", bomb.len());
        let caps = Caps {
            max_rows: u64::MAX,
            max_bytes: 1 << 20,
        };
        let err = open(Bytes::from(bomb), None, None, caps).err().unwrap();
        assert!(
            err.message().contains("decompresses to more than 1 MiB"),
            "{err}"
        );
        let damaged = read(b"%PDF-1.5\n1 0 obj << /Type /Catalog >>", None, None)
            .err()
            .unwrap();
        assert!(damaged.message().contains("PDF"), "{damaged}");
    }

    #[test]
    fn docx_paragraphs_are_read() {
        let docx = samples::docx(&["Terms & conditions", "Second paragraph"]);
        for name in [Some("contract.docx"), None] {
            let data = read(&docx, None, name).unwrap();
            assert_eq!(
                texts(&data, 0),
                ["Terms & conditions\nSecond paragraph"],
                "{name:?}"
            );
        }
    }

    #[test]
    fn a_workbook_sheet_becomes_a_typed_table() {
        let rows: &[&[&str]] = &[
            &["id", "price", "name", "ok", "day", "", "mixed"],
            &["1", "2.5", "apple", "TRUE", "=date:45292", "x", "7"],
            &["", "", "", "", "", "", ""],
            &["2", "3", "pear", "FALSE", "=date:45293.5", "", "seven"],
        ];
        let xlsx = samples::xlsx(&[("Prices", rows)]);
        for name in [Some("book.xlsx"), None] {
            let data = read(&xlsx, None, name).unwrap();
            assert_eq!(
                names(&data),
                ["id", "price", "name", "ok", "day", "Unnamed: 5", "mixed"]
            );
            let types: Vec<DataType> = data
                .schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            use datafusion::arrow::datatypes::TimeUnit;
            assert_eq!(
                types,
                [
                    DataType::Int64,
                    DataType::Float64,
                    DataType::Utf8,
                    DataType::Boolean,
                    DataType::Timestamp(TimeUnit::Microsecond, None),
                    DataType::Utf8,
                    DataType::Utf8,
                ]
            );
            let batch = &data.batches[0];
            assert_eq!(batch.num_rows(), 2, "the empty row is skipped");
            let shown = datafusion::arrow::util::pretty::pretty_format_batches(&data.batches)
                .unwrap()
                .to_string();
            assert!(shown.contains("2024-01-01T00:00:00"), "{shown}");
            assert!(shown.contains("2024-01-02T12:00:00"), "{shown}");
            assert!(shown.contains("| seven"), "{shown}");
        }
        // A workbook of several sheets lists them; each sheet reads as its own table.
        let two = samples::xlsx(&[("A", rows), ("Sales 2024", &[&["x"], &["1"]])]);
        let mut file = open(Bytes::from(two), None, None, NO_CAPS).unwrap();
        assert_eq!(file.schema.field(0).name(), "Tables");
        let mut sheets = std::mem::take(&mut file.sheets);
        assert_eq!(sheets.len(), 2);
        let mut listed = Vec::new();
        file.read_counted(NO_CAPS, &mut |batch| {
            listed.push(batch);
            Ok(())
        })
        .unwrap();
        let shown = datafusion::arrow::util::pretty::pretty_format_batches(&listed)
            .unwrap()
            .to_string();
        assert!(
            shown.contains("| A ") && shown.contains("| Sales 2024 |"),
            "{shown}"
        );
        let second = sheets.pop().unwrap().open().unwrap().unwrap();
        assert_eq!(second.schema.field(0).name(), "x");
        assert_eq!(second.schema.field(0).data_type(), &DataType::Int64);
    }

    #[test]
    fn a_zip_of_one_file_is_that_file() {
        let zip = samples::zip_of(&[("folder/", b""), ("folder/data.csv", b"a,b\n1,x\n2,y\n")]);
        let data = read(&zip, None, Some("upload.zip")).unwrap();
        assert_eq!(names(&data), ["a", "b"]);
        assert_eq!(data.batches[0].num_rows(), 2);
        let docx = samples::docx(&["inside"]);
        let zipped = samples::zip_of(&[("letter.docx", &docx), ("__MACOSX/._letter.docx", b"x")]);
        let data = read(&zipped, None, None).unwrap();
        let metadata: Value = serde_json::from_str(&texts(&data, 1)[0]).unwrap();
        assert_eq!(metadata["source_file"], "letter.docx");
        let two = samples::zip_of(&[("a.csv", b"a\n1\n"), ("b.csv", b"a\n2\n")]);
        let err = read(&two, None, None).err().unwrap();
        assert!(err.message().contains("only one data file"), "{err}");
        let nested = samples::zip_of(&[("inner.zip", &zip)]);
        let err = read(&nested, None, None).err().unwrap();
        assert!(err.message().contains("archives inside archives"), "{err}");
    }

    #[test]
    fn an_archive_that_inflates_or_lies_about_its_size_is_refused() {
        let csv = format!("a\n{}", "1\n".repeat(4 << 20));
        let zip = samples::zip_of(&[("big.csv", csv.as_bytes())]);
        assert!(zip.len() < 100_000, "a small archive: {}", zip.len());
        let caps = Caps {
            max_rows: u64::MAX,
            max_bytes: 1 << 20,
        };
        let err = open(Bytes::from(zip.clone()), None, None, caps)
            .err()
            .unwrap();
        assert!(err.message().contains("files.max_decoded_mb"), "{err}");
        // The central directory claims fewer bytes than the entry inflates to.
        let mut lying = zip;
        let at = lying
            .windows(4)
            .position(|w| w == b"PK\x01\x02")
            .expect("a central directory");
        lying[at + 24..at + 28].copy_from_slice(&100u32.to_le_bytes());
        let err = read(&lying, None, None).err().unwrap();
        assert!(err.message().contains("declare"), "{err}");
    }

    #[test]
    fn document_formats_are_named_by_extension_or_media_type() {
        for (name, format) in [
            ("a.txt", FileFormat::Text),
            ("README.MD", FileFormat::Text),
            ("text/plain", FileFormat::Text),
            ("page.htm", FileFormat::Html),
            ("text/html; charset=utf-8", FileFormat::Html),
            ("application/pdf", FileFormat::Pdf),
            ("x.docx", FileFormat::Docx),
            (
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                FileFormat::Xlsx,
            ),
            ("application/zip", FileFormat::Zip),
            ("old.XLS", FileFormat::Xls),
            ("application/vnd.ms-excel", FileFormat::Xls),
        ] {
            assert_eq!(FileFormat::from_name(name), Some(format), "{name}");
        }
        let doc = read(b"\xd0\xcf\x11\xe0", None, Some("old.doc"))
            .err()
            .unwrap();
        assert!(doc.message().contains("'.doc'"), "{doc}");
    }

    /// `testdata/make_xls.py` wrote these with xlwt; pandas reads `one.xls` as this test
    /// expects (but for the row with no value, which is skipped, as in `.xlsx` sheets).
    #[test]
    fn an_xls_workbook_reads_as_an_xlsx_one() {
        let one = include_bytes!("testdata/one.xls");
        for name in [Some("one.xls"), None] {
            let data = read(one, None, name).unwrap();
            assert_eq!(
                names(&data),
                ["id", "name", "price", "ok", "day", "Unnamed: 5", "at"]
            );
            use datafusion::arrow::datatypes::TimeUnit;
            let types: Vec<DataType> = data
                .schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            let time = DataType::Timestamp(TimeUnit::Microsecond, None);
            assert_eq!(
                types,
                [
                    DataType::Int64,
                    DataType::Utf8,
                    DataType::Float64,
                    DataType::Boolean,
                    time.clone(),
                    DataType::Utf8,
                    time,
                ]
            );
            let shown = datafusion::arrow::util::pretty::pretty_format_batches(&data.batches)
                .unwrap()
                .to_string();
            let rows: Vec<&str> = shown.lines().filter(|l| l.starts_with("| ")).collect();
            assert_eq!(
                rows[1..],
                [
                    "| 1  | apple | 1.5   | true  | 2024-01-02T00:00:00 | x          | 2024-01-02T03:04:05 |",
                    "| 2  | pear  | 2.0   | false | 2024-02-29T00:00:00 |            |                     |",
                    "| 3  |       | 3.25  | true  | 1999-12-31T00:00:00 | z          | 2000-01-01T00:00:00 |",
                    "| 4  | plum  |       |       |                     |            |                     |",
                ],
                "{shown}"
            );
        }
        // Several sheets: a listing, each sheet its own table, an empty one nothing.
        let mut file = open(
            Bytes::from_static(include_bytes!("testdata/book.xls")),
            None,
            Some("book.xls"),
            NO_CAPS,
        )
        .unwrap();
        assert_eq!(file.schema.field(0).name(), "Tables");
        let mut sheets = std::mem::take(&mut file.sheets);
        assert_eq!(sheets.len(), 3);
        let mut listed = 0;
        file.read_counted(NO_CAPS, &mut |batch| {
            listed += batch.num_rows();
            Ok(())
        })
        .unwrap();
        assert_eq!(listed, 3);
        assert!(sheets.pop().unwrap().open().unwrap().is_none(), "Empty");
        let second = sheets.pop().unwrap().open().unwrap().unwrap();
        assert_eq!(second.schema.field(0).name(), "x");
        assert_eq!(second.schema.field(0).data_type(), &DataType::Int64);
        // The caps count every sheet, in the child that reads them.
        let caps = Caps {
            max_rows: 4,
            max_bytes: u64::MAX,
        };
        let err = open(
            Bytes::from_static(include_bytes!("testdata/book.xls")),
            None,
            None,
            caps,
        )
        .err()
        .unwrap();
        assert!(err.message().contains("files.max_rows"), "{err}");
        // A file that only starts like one.
        let mut damaged = one.to_vec();
        damaged.truncate(1000);
        let err = read(&damaged, None, Some("one.xls")).err().unwrap();
        assert!(
            err.message().contains("not a readable .xls workbook"),
            "{err}"
        );
    }

    #[test]
    fn sheets_must_have_names_sql_can_write() {
        let open = |_: &str| rows::Sheet {
            open: Box::new(|| Ok(None)),
        };
        for names in [vec!["", "b"], vec!["a", "\0\0"], vec!["a", " "]] {
            let names = names.into_iter().map(String::from).collect();
            let err = sheets::book(names, open).err().unwrap();
            assert!(err.message().contains("without a name"), "{err}");
        }
    }

    /// A sheet whose DIMENSIONS record claims four billion rows: calamine reserves room for
    /// them before reading a cell, which in this process would abort it; the child that reads
    /// the workbook dies alone, and the upload is refused naming the limits.
    #[test]
    fn an_xls_sheet_that_claims_billions_of_rows_is_refused() {
        let mut hostile = include_bytes!("testdata/one.xls").to_vec();
        // The record: type 0x0200, 14 bytes: first row, last row + 1 (u32), first and last
        // column + 1 (u16), reserved.
        let at = hostile
            .windows(4)
            .position(|w| w == [0x00, 0x02, 0x0e, 0x00])
            .expect("a DIMENSIONS record");
        hostile[at + 8..at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        hostile[at + 14..at + 16].copy_from_slice(&255u16.to_le_bytes());
        let err = read(&hostile, None, Some("claims.xls")).err().unwrap();
        assert!(err.message().contains("could not be read within"), "{err}");
        // And the process goes on reading others.
        read(include_bytes!("testdata/one.xls"), None, None).unwrap();
    }
}
