//! Uploaded files (MindsDB's `files` database): a CSV, JSON or Parquet upload is read into
//! Arrow here, with its column types inferred; `sql::uploads` stores it as a table of the
//! `files` database, which SQL reads as `files.<name>`. Reading decides the format (given, or
//! from the name's extension, or from the first bytes) and says what is wrong with a file that
//! cannot be read. One decoder per format (`csv`, `json`, `parquet`), each handing its rows
//! to `rows`, which counts them against the caps.

mod csv;
mod json;
mod parquet;
mod rows;

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
            _ => None,
        }
    }

    /// The format a caller names (as [`FileFormat::from_name`] reads names); an error naming
    /// the formats there are otherwise.
    pub fn parse(name: &str) -> Result<FileFormat> {
        FileFormat::from_name(name).ok_or_else(|| {
            Error::invalid(format!(
                "Unknown file format '{name}'; files are csv, json (an array of objects, or one object per line) or parquet"
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
/// from the first bytes (`[` or `{` is JSON, `PAR1` is Parquet, anything else CSV). The
/// columns are known (and checked) when this returns; rows are decoded only as they are read.
pub(crate) fn open(
    bytes: Bytes,
    format: Option<FileFormat>,
    file_name: Option<&str>,
    caps: Caps,
) -> Result<FileRows> {
    // A byte-order mark (spreadsheets write one) would become part of the first column's name.
    let bytes = if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.slice(3..)
    } else {
        bytes
    };
    let named = file_name.and_then(|name| {
        let extension = name.rsplit_once('.')?.1.to_ascii_lowercase();
        matches!(extension.as_str(), "tsv" | "xlsx" | "xls" | "txt").then_some(extension)
    });
    if let (None, Some(extension)) = (format, named) {
        return Err(Error::invalid(format!(
            "'.{extension}' files cannot be uploaded; upload CSV (comma-separated, with a header line), JSON or Parquet"
        )));
    }
    let format = match format.or_else(|| file_name.and_then(FileFormat::from_name)) {
        Some(format) => format,
        None => sniff(&bytes)?,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid("The file is empty"));
    }
    match format {
        FileFormat::Csv => csv::open_csv(bytes),
        FileFormat::Json => json::open_json(bytes),
        FileFormat::Parquet => parquet::open_parquet(bytes, caps),
    }
}

fn sniff(bytes: &[u8]) -> Result<FileFormat> {
    if bytes.starts_with(b"PAR1") {
        return Ok(FileFormat::Parquet);
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    Ok(match start.map(|i| bytes[i]) {
        Some(b'[' | b'{') => FileFormat::Json,
        _ => FileFormat::Csv,
    })
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::rows::{stored_size, MAX_COLUMNS};
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
        file.read_into(NO_CAPS, &mut |batch| {
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
            .read_into(caps, &mut |batch| {
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
        let err = file.read_into(caps, &mut |_| Ok(())).unwrap_err();
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
                .read_into(caps, &mut |batch| {
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
}
