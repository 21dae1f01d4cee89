//! Fuzz targets for uploads (`files::open` and `FileRows::read_counted`): random bytes in every
//! format, and valid CSV, JSON and Parquet files (every codec, several row groups and pages,
//! nested and dictionary columns), documents (HTML, PDF, Word), workbooks (`.xlsx`, `.xls`) and zip archives
//! mutated. A file is read within the caps or refused with an
//! error that names the problem; never a panic, and never an allocation past the child's
//! limit (a Parquet page that claims or inflates to more than the caps must be refused).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use datafusion::arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, DictionaryArray,
    Float64Array, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use datafusion::parquet::file::properties::{WriterProperties, WriterVersion};
use mindlite_fuzz::{mutate, note, Target, Unstructured};

use super::{open, Caps, FileFormat};
use crate::error::ErrorKind;

type Draw<T> = mindlite_fuzz::arbitrary::Result<T>;

/// Caps small enough that mutated files cross them.
const CAPS: Caps = Caps {
    max_rows: 100_000,
    max_bytes: 64 << 20,
};

/// Opens and reads `bytes` as an upload would, and checks the outcome.
fn reads_or_says_why(bytes: &[u8], format: Option<FileFormat>, name: Option<&str>) {
    note("format and name", &(format, name));
    note("bytes", &String::from_utf8_lossy(bytes));
    let read = |file: super::FileRows| -> crate::error::Result<Vec<super::rows::Sheet>> {
        let columns = file.schema.fields().len();
        assert!(columns > 0, "a file of no columns was opened");
        let mut rows = 0u64;
        let sheets = file.sheets;
        let file = super::FileRows {
            sheets: Vec::new(),
            ..file
        };
        file.read_counted(CAPS, &mut |batch| {
            assert_eq!(batch.num_columns(), columns, "a batch of other columns");
            rows += batch.num_rows() as u64;
            Ok(())
        })?;
        assert!(rows <= CAPS.max_rows, "{rows} rows read past the cap");
        Ok(sheets)
    };
    let outcome = open(Bytes::copy_from_slice(bytes), format, name, CAPS).and_then(|file| {
        // A workbook's sheets read as uploads do, each a table of its own.
        for sheet in read(file)? {
            if let Some(sheet) = sheet.open()? {
                read(sheet)?;
            }
        }
        Ok(())
    });
    if let Err(e) = outcome {
        assert!(
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::InvalidData),
            "an upload failed with a {:?} error (not the file's fault?): {e}",
            e.kind()
        );
        assert!(!e.message().trim().is_empty(), "an error without a message");
    }
}

fn format(u: &mut Unstructured<'_>) -> Draw<Option<FileFormat>> {
    Ok(*u.choose(&[
        None,
        Some(FileFormat::Csv),
        Some(FileFormat::Json),
        Some(FileFormat::Parquet),
        Some(FileFormat::Text),
        Some(FileFormat::Html),
        Some(FileFormat::Pdf),
        Some(FileFormat::Docx),
        Some(FileFormat::Xlsx),
        Some(FileFormat::Xls),
        Some(FileFormat::Zip),
    ])?)
}

/// The Parquet reader's source and the Arrow IPC schema decoder it calls: they panic on some
/// damaged files, and `open_parquet` contains that (see `contained`).
const PARQUET: &[&str] = &["parquet", "arrow_ipc"];

#[test]
fn uploads_survive_random_bytes() {
    Target::new(50_000).contained_panics_from(PARQUET).run(|u| {
        let format = format(u)?;
        let name = *u.choose(&[
            None,
            Some("f.csv"),
            Some("f.json"),
            Some("f.parquet"),
            Some("f.txt"),
            Some("noext"),
        ])?;
        let bytes: Vec<u8> = u.arbitrary()?;
        reads_or_says_why(&bytes, format, name);
        Ok(())
    });
}

/// Text files that read, each a different corner: quoting, types that only look typed,
/// nested JSON values, mixed kinds, a byte-order mark.
const TEXT_SEEDS: &[(&str, FileFormat)] = &[
    (
        "id,price,name,day,flag\n1,2.5,apple,2024-01-31,true\n2,,\"b, \"\"q\"\"\nline\",2021-02-30,false\n",
        FileFormat::Csv,
    ),
    ("\u{feff}a,b\n1,99999999999999999999\n-1,1e308\n", FileFormat::Csv),
    ("x\n\n\n1\n", FileFormat::Csv),
    (
        r#"[{"a": 1, "b": "x", "c": {"d": [1, 2, {"e": null}]}}, {"a": 2.5, "b": true, "f": [[1], []]}]"#,
        FileFormat::Json,
    ),
    (
        "{\"a\": 1, \"s\": \"it\\\"s\"}\n{\"a\": null, \"s\": \"\\u00e9\"}\n{\"b\": [1, \"x\"]}\n",
        FileFormat::Json,
    ),
];

#[test]
fn mutated_text_uploads_are_read_or_refused() {
    Target::new(50_000).run(|u| {
        let (seed, kind) = *u.choose(TEXT_SEEDS)?;
        let bytes = mutate(u, seed.as_bytes())?;
        let format = if u.ratio(3, 4)? {
            Some(kind)
        } else {
            format(u)?
        };
        reads_or_says_why(&bytes, format, None);
        Ok(())
    });
}

/// Documents, workbooks and archives that read: each of the other readers' formats.
fn document_seeds() -> &'static [(Vec<u8>, FileFormat)] {
    use super::samples;
    static SEEDS: OnceLock<Vec<(Vec<u8>, FileFormat)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let rows: &[&[&str]] = &[
            &["id", "price", "name", "ok", "day"],
            &["1", "2.5", "apple & pear", "TRUE", "=date:45292"],
            &["2", "x", "", "FALSE", "=date:2958466"],
        ];
        vec![
            (
                b"<html><head><style>a{}</style></head><body><p>a &amp; b<br>c</p><script>x<y</script><table><tr><td>1</td></tr></table></body></html>".to_vec(),
                FileFormat::Html,
            ),
            (samples::pdf(&[&["Hello (world)", "line two"], &["page two"]]), FileFormat::Pdf),
            (samples::docx(&["one & two", "three"]), FileFormat::Docx),
            (samples::xlsx(&[("Sheet1", rows)]), FileFormat::Xlsx),
            (
                samples::zip_of(&[("d/data.csv", b"a,b\n1,x\n")]),
                FileFormat::Zip,
            ),
        ]
    })
}

#[test]
fn mutated_documents_are_read_or_refused() {
    Target::new(10_000).run(|u| {
        let (seed, kind) = u.choose(document_seeds())?;
        let bytes = mutate(u, seed)?;
        let format = if u.ratio(3, 4)? { Some(*kind) } else { None };
        reads_or_says_why(&bytes, format, None);
        Ok(())
    });
}

/// `.xls` workbooks are each read in a process of their own (see `xls`): a valid one in about
/// 3 ms, a mutated one in 50 ms on average (the reader maps what the damaged file claims, up
/// to the child's limit), so fewer runs than the other documents.
#[test]
fn mutated_xls_workbooks_are_read_or_refused() {
    const SEEDS: [&[u8]; 2] = [
        include_bytes!("testdata/one.xls"),
        include_bytes!("testdata/book.xls"),
    ];
    Target::new(300).run(|u| {
        let seed = u.choose(&SEEDS)?;
        let bytes = mutate(u, seed)?;
        let format = *u.choose(&[None, Some(FileFormat::Xls)])?;
        reads_or_says_why(&bytes, format, None);
        Ok(())
    });
}

#[test]
fn mutated_parquet_uploads_are_read_or_refused() {
    Target::new(10_000).contained_panics_from(PARQUET).run(|u| {
        let seeds = parquet_seeds();
        let seed = u.choose(seeds)?;
        let bytes = mutate(u, seed)?;
        let format = *u.choose(&[None, Some(FileFormat::Parquet)])?;
        reads_or_says_why(&bytes, format, None);
        Ok(())
    });
}

/// Valid Parquet files, one per codec and writer setting, built once per process.
fn parquet_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let codecs = [
            Compression::UNCOMPRESSED,
            Compression::SNAPPY,
            Compression::GZIP(GzipLevel::default()),
            Compression::ZSTD(ZstdLevel::default()),
            Compression::BROTLI(BrotliLevel::default()),
            Compression::LZ4_RAW,
        ];
        let mut seeds = Vec::new();
        for (i, codec) in codecs.into_iter().enumerate() {
            for dictionary in [true, false] {
                let version = if i % 2 == 0 {
                    WriterVersion::PARQUET_1_0
                } else {
                    WriterVersion::PARQUET_2_0
                };
                let properties = WriterProperties::builder()
                    .set_compression(codec)
                    .set_dictionary_enabled(dictionary)
                    .set_writer_version(version)
                    .set_max_row_group_row_count(Some(20))
                    .set_data_page_row_count_limit(8)
                    .set_write_batch_size(8)
                    .build();
                seeds.push(parquet_file(properties));
            }
        }
        seeds
    })
}

/// Fifty rows of most column kinds an upload can hold, written with `properties`.
fn parquet_file(properties: WriterProperties) -> Vec<u8> {
    let rows = 50;
    let texts: Vec<Option<String>> = (0..rows)
        .map(|i| (i % 7 != 0).then(|| format!("text {} {}", i % 5, "é".repeat(i % 3))))
        .collect();
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>(
        (0..rows)
            .map(|i| (i % 4 != 0).then(|| (0..i % 3).map(|v| Some(v as i32)).collect::<Vec<_>>())),
    );
    let keys = Int32Array::from((0..rows).map(|i| (i % 3) as i32).collect::<Vec<_>>());
    let dictionary =
        DictionaryArray::new(keys, Arc::new(StringArray::from(vec!["a", "bb", "ccc"])));
    let inner = StructArray::from(vec![(
        Arc::new(Field::new("x", DataType::Int32, true)),
        Arc::new(Int32Array::from(
            (0..rows).map(|i| i as i32).collect::<Vec<_>>(),
        )) as ArrayRef,
    )]);
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "i",
            Arc::new(Int64Array::from((0..rows as i64).collect::<Vec<_>>())),
        ),
        ("s", Arc::new(StringArray::from(texts))),
        (
            "f",
            Arc::new(Float64Array::from(
                (0..rows).map(|i| i as f64 / 3.0).collect::<Vec<_>>(),
            )),
        ),
        (
            "b",
            Arc::new(BooleanArray::from(
                (0..rows).map(|i| i % 2 == 0).collect::<Vec<_>>(),
            )),
        ),
        ("l", Arc::new(list)),
        (
            "d",
            Arc::new(Date32Array::from(
                (0..rows).map(|i| 19_000 + i as i32).collect::<Vec<_>>(),
            )),
        ),
        (
            "t",
            Arc::new(TimestampMicrosecondArray::from(
                (0..rows)
                    .map(|i| 1_700_000_000_000_000 + i as i64)
                    .collect::<Vec<_>>(),
            )),
        ),
        ("k", Arc::new(dictionary)),
        ("st", Arc::new(inner)),
        (
            "dec",
            Arc::new(
                Decimal128Array::from((0..rows).map(|i| i as i128 * 101).collect::<Vec<_>>())
                    .with_precision_and_scale(10, 2)
                    .expect("a decimal type"),
            ),
        ),
        (
            "bin",
            Arc::new(BinaryArray::from_iter_values(
                (0..rows).map(|i| vec![i as u8; i % 4]),
            )),
        ),
    ];
    let batch = RecordBatch::try_from_iter(columns).expect("a batch");
    let mut file = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut file, batch.schema(), Some(properties)).expect("a writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
    file
}
