//! What a Parquet file's pages decode to, known before any of them is decoded. The Parquet
//! reader decompresses a page whole, into a buffer of the size the page's header declares
//! (zstd, snappy and raw LZ4 stop there), or as far as the data goes (gzip, brotli and framed
//! LZ4 read to the end). So before a file is read, every page header is walked: each page's
//! declared size is summed per row group (what decoding one holds at once) and checked against
//! what the statement may still hold, and a page whose codec reads to the end is decompressed
//! here first through a cap of its declared size, so one that would decode to more is refused
//! rather than expanded.

use std::io::Read;

use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::metadata::ParquetMetaData;

use crate::error::{Error, Result};

/// Page header fields, by their Thrift field ids (parquet.thrift's `PageHeader`).
const UNCOMPRESSED_SIZE: i16 = 2;
const COMPRESSED_SIZE: i16 = 3;
const DATA_PAGE_V2: i16 = 8;
/// `DataPageHeaderV2`'s: the levels' bytes (never compressed) and whether values are.
const DEFINITION_BYTES: i16 = 5;
const REPETITION_BYTES: i16 = 6;
const IS_COMPRESSED: i16 = 7;

/// What a page header says.
#[derive(Debug, Default, Clone, Copy)]
struct PageHeader {
    uncompressed: i64,
    compressed: i64,
    /// For a data page of version 2: bytes of levels before the (maybe compressed) values.
    levels: i64,
    compressed_values: bool,
}

/// Checks every page of the file `bytes`, whose footer is `metadata`: fails naming the limit
/// when a row group decodes to more than the statement may hold, or when a page decodes to
/// more than its header declares.
pub(crate) fn check(bytes: &[u8], metadata: &ParquetMetaData) -> Result<()> {
    let unreadable =
        |what: &str| Error::invalid(format!("The file is not readable as Parquet: {what}"));
    for group in metadata.row_groups() {
        let mut declared: u64 = 0;
        for column in group.columns() {
            // Not `byte_range()`: it asserts the footer's numbers are not negative, a panic
            // on a damaged file.
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let (Ok(start), Ok(length)) = (
                u64::try_from(start),
                u64::try_from(column.compressed_size()),
            ) else {
                return Err(unreadable("a column chunk's offset or size is negative"));
            };
            let end = start
                .checked_add(length)
                .filter(|end| *end <= bytes.len() as u64)
                .ok_or_else(|| unreadable("a column chunk lies outside the file"))?;
            let mut at = start as usize;
            while (at as u64) < end {
                let (header, header_len) = read_header(&bytes[at..end as usize])
                    .ok_or_else(|| unreadable("a page header is damaged"))?;
                if header.uncompressed < 0 || header.compressed < 0 {
                    return Err(unreadable("a page header gives a negative size"));
                }
                let data_start = at + header_len;
                let data_end = data_start
                    .checked_add(header.compressed as usize)
                    .filter(|e| *e as u64 <= end)
                    .ok_or_else(|| unreadable("a page runs past its column chunk"))?;
                declared = declared.saturating_add(header.uncompressed as u64);
                crate::capacity::check(declared, "Decoding a row group of the Parquet file")?;
                verify_page(&bytes[data_start..data_end], header, column.compression())?;
                at = data_end;
            }
            crate::cancel::check()?;
        }
    }
    Ok(())
}

/// For codecs that decompress to the end of the data: fails unless the page's data decodes
/// to at most what its header declares, reading through a cap of that size.
fn verify_page(data: &[u8], header: PageHeader, codec: Compression) -> Result<()> {
    let (levels, values) = match header.levels {
        0 => (0, data),
        levels => {
            let levels = usize::try_from(levels).unwrap_or(usize::MAX);
            if levels > data.len() {
                return Err(Error::invalid(
                    "The file is not readable as Parquet: a page's levels run past its data",
                ));
            }
            if !header.compressed_values {
                return Ok(());
            }
            (levels as u64, &data[levels..])
        }
    };
    let limit = (header.uncompressed as u64).saturating_sub(levels);
    let reader: Box<dyn Read + '_> = match codec {
        Compression::GZIP(_) => Box::new(flate2::read::MultiGzDecoder::new(values)),
        Compression::BROTLI(_) => Box::new(brotli::Decompressor::new(values, 4096)),
        Compression::LZ4 => Box::new(lz4_flex::frame::FrameDecoder::new(values)),
        // The others decode into a buffer of the declared size and no further.
        _ => return Ok(()),
    };
    let produced = match std::io::copy(
        &mut reader.take(limit.saturating_add(1)),
        &mut std::io::sink(),
    ) {
        Ok(produced) => produced,
        // LZ4 pages are Hadoop's framing first; only a page that is not falls back to
        // reading an LZ4 frame to its end, so one that is no frame is bounded already.
        Err(_) if codec == Compression::LZ4 => return Ok(()),
        Err(e) => {
            return Err(Error::invalid(format!(
                "The file is not readable as Parquet: {e}"
            )))
        }
    };
    if produced > limit {
        return Err(Error::invalid(format!(
            "The file is not readable as Parquet: a page decodes to more than the {limit} bytes its header declares"
        )));
    }
    Ok(())
}

/// Reads a page header (Thrift's compact protocol) from the start of `bytes`: the header and
/// how many bytes it took; `None` when it is damaged.
fn read_header(bytes: &[u8]) -> Option<(PageHeader, usize)> {
    let mut reader = Compact { bytes, at: 0 };
    let mut header = PageHeader::default();
    let mut last = 0i16;
    loop {
        let (kind, id) = reader.field_header(&mut last)?;
        match (kind, id) {
            (STOP, _) => break,
            (I32, UNCOMPRESSED_SIZE) => header.uncompressed = reader.zigzag()?,
            (I32, COMPRESSED_SIZE) => header.compressed = reader.zigzag()?,
            (STRUCT, DATA_PAGE_V2) => {
                let mut inner_last = 0i16;
                let (mut definition, mut repetition) = (0, 0);
                header.compressed_values = true;
                loop {
                    let (kind, id) = reader.field_header(&mut inner_last)?;
                    match (kind, id) {
                        (STOP, _) => break,
                        (I32, DEFINITION_BYTES) => definition = reader.zigzag()?,
                        (I32, REPETITION_BYTES) => repetition = reader.zigzag()?,
                        (TRUE, IS_COMPRESSED) => header.compressed_values = true,
                        (FALSE, IS_COMPRESSED) => header.compressed_values = false,
                        (kind, _) => reader.skip(kind, 0)?,
                    }
                }
                header.levels = definition.checked_add(repetition)?;
                if header.levels < 0 {
                    return None;
                }
            }
            (kind, _) => reader.skip(kind, 0)?,
        }
    }
    Some((header, reader.at))
}

/// Thrift compact protocol types.
const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const I32: u8 = 5;
const STRUCT: u8 = 12;

/// Nesting deeper than this is not a page header.
const MAX_DEPTH: u32 = 32;

/// A reader of Thrift's compact protocol, as much of it as page headers use.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn zigzag(&mut self) -> Option<i64> {
        let n = self.varint()?;
        Some((n >> 1) as i64 ^ -((n & 1) as i64))
    }

    /// A field's type and id (ids given as a delta from the previous field's, or in full).
    fn field_header(&mut self, last: &mut i16) -> Option<(u8, i16)> {
        let byte = self.byte()?;
        let kind = byte & 0x0f;
        if kind == STOP {
            return Some((STOP, 0));
        }
        let delta = i16::from(byte >> 4);
        let id = match delta {
            0 => i16::try_from(self.zigzag()?).ok()?,
            delta => last.checked_add(delta)?,
        };
        *last = id;
        Some((kind, id))
    }

    /// An element count of a list, set or map: each element takes a byte at least, so a
    /// count past the bytes left is damage, found before counting through it.
    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?)
            .ok()
            .filter(|count| *count <= self.bytes.len() - self.at)
    }

    /// Skips one element of a list, set or map `depth` containers deep: unlike a field's, a
    /// boolean element is a byte of its own (skipping it as a field's would take nothing, and
    /// a count of billions of them would spin).
    fn skip_element(&mut self, kind: u8, depth: u32) -> Option<()> {
        match kind {
            TRUE | FALSE => self.byte().map(drop),
            kind => self.skip(kind, depth + 1),
        }
    }

    /// Skips a value of compact type `kind`.
    fn skip(&mut self, kind: u8, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match kind {
            // Booleans in a field header carry their value.
            TRUE | FALSE => {}
            // byte
            3 => {
                self.byte()?;
            }
            // i16, i32, i64
            4..=6 => {
                self.varint()?;
            }
            // double
            7 => self.at = self.at.checked_add(8).filter(|a| *a <= self.bytes.len())?,
            // binary / string
            8 => {
                let length = usize::try_from(self.varint()?).ok()?;
                self.at = self
                    .at
                    .checked_add(length)
                    .filter(|a| *a <= self.bytes.len())?;
            }
            // list, set
            9 | 10 => {
                let head = self.byte()?;
                let element = head & 0x0f;
                let count = match head >> 4 {
                    15 => self.count()?,
                    n => usize::from(n),
                };
                for _ in 0..count {
                    self.skip_element(element, depth)?;
                }
            }
            // map
            11 => {
                let count = self.count()?;
                if count > 0 {
                    let kinds = self.byte()?;
                    for _ in 0..count {
                        self.skip_element(kinds >> 4, depth)?;
                        self.skip_element(kinds & 0x0f, depth)?;
                    }
                }
            }
            STRUCT => {
                let mut last = 0i16;
                loop {
                    let (kind, _) = self.field_header(&mut last)?;
                    if kind == STOP {
                        break;
                    }
                    self.skip(kind, depth + 1)?;
                }
            }
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::basic::{GzipLevel, ZstdLevel};
    use datafusion::parquet::file::properties::{WriterProperties, WriterVersion};
    use std::sync::Arc;

    fn file(compression: Compression, version: WriterVersion, text: &str, rows: usize) -> Vec<u8> {
        let column: ArrayRef = Arc::new(StringArray::from(vec![text; rows]));
        let batch = RecordBatch::try_from_iter([("s", column)]).unwrap();
        let properties = WriterProperties::builder()
            .set_compression(compression)
            .set_writer_version(version)
            .set_dictionary_enabled(false)
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    fn metadata(bytes: &[u8]) -> Arc<ParquetMetaData> {
        let bytes = bytes::Bytes::from(bytes.to_vec());
        Arc::clone(
            ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap()
                .metadata(),
        )
    }

    #[test]
    fn honest_files_of_every_codec_and_page_version_pass() {
        for compression in [
            Compression::UNCOMPRESSED,
            Compression::SNAPPY,
            Compression::GZIP(GzipLevel::default()),
            Compression::ZSTD(ZstdLevel::default()),
            Compression::LZ4,
            Compression::LZ4_RAW,
            Compression::BROTLI(Default::default()),
        ] {
            for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
                let bytes = file(compression, version, "hello", 5000);
                check(&bytes, &metadata(&bytes))
                    .unwrap_or_else(|e| panic!("{compression:?} {version:?}: {e}"));
            }
        }
    }

    #[test]
    fn a_row_group_larger_than_the_statement_may_hold_is_refused_before_decoding() {
        let bytes = file(
            Compression::ZSTD(ZstdLevel::default()),
            WriterVersion::PARQUET_1_0,
            &"x".repeat(1000),
            4000,
        );
        let account = crate::memory::Account::open(Some(1 << 20), None).unwrap();
        let _in = crate::memory::enter(account.tag());
        let err = check(&bytes, &metadata(&bytes)).unwrap_err();
        assert!(err.message().contains("Decoding a row group"), "{err}");
    }

    #[test]
    fn a_gzip_page_that_decodes_to_more_than_its_header_says_is_refused() {
        let bytes = file(
            Compression::GZIP(GzipLevel::default()),
            WriterVersion::PARQUET_1_0,
            "aaaaaaaaaa",
            1000,
        );
        let metadata = metadata(&bytes);
        let column = &metadata.row_groups()[0].columns()[0];
        let (start, _) = column.byte_range();
        let (header, header_len) = read_header(&bytes[start as usize..]).unwrap();
        assert!(header.uncompressed > 100);
        // The same page, its declared size lowered in place (a one-byte varint field).
        let mut lying = bytes.clone();
        let page = &mut lying[start as usize..start as usize + header_len];
        let mut reader = Compact { bytes: page, at: 0 };
        let mut last = 0;
        let mut size_at = None;
        loop {
            let before = reader.at;
            let (kind, id) = reader.field_header(&mut last).unwrap();
            if kind == STOP {
                break;
            }
            if id == UNCOMPRESSED_SIZE {
                size_at = Some((reader.at, before));
            }
            reader.skip(kind, 0).unwrap();
        }
        let (value_at, _) = size_at.unwrap();
        // zigzag(20) = 40, one byte; the varint it replaces is at least as long, so pad it
        // with continuation bytes of zero value.
        let old_len = {
            let mut n = 0;
            while page[value_at + n] & 0x80 != 0 {
                n += 1;
            }
            n + 1
        };
        for i in 0..old_len {
            page[value_at + i] = if i + 1 < old_len { 0x80 } else { 0 };
        }
        page[value_at] = if old_len > 1 { 40 | 0x80 } else { 40 };
        let err = check(&lying, &metadata).unwrap_err();
        assert!(err.message().contains("decodes to more than"), "{err}");
    }

    #[test]
    fn damaged_headers_are_refused_not_read_past() {
        for damaged in [
            &[][..],
            &[0x15][..],
            &[0x19, 0xff, 0xff][..],
            &[0x1c; 64][..],
        ] {
            assert!(read_header(damaged).is_none(), "{damaged:?}");
        }
    }

    /// Found reading the code the upload fuzz target runs: a header field holding a map of
    /// 2^62 booleans was skipped taking no bytes per element, so the check spun (a stalled
    /// upload) instead of refusing it.
    #[test]
    fn a_header_counting_more_elements_than_bytes_is_refused_at_once() {
        // Field 4 (delta 4) of type map; count 2^62 as a varint; key and value kinds boolean.
        let mut map = vec![0x4b];
        map.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
        map.extend_from_slice(&[0x11, 0x01, 0x00]);
        let started = std::time::Instant::now();
        assert!(read_header(&map).is_none());
        // A list of 2^40 booleans likewise.
        let list = [0x49, 0xf1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x01, 0x00];
        assert!(read_header(&list).is_none());
        // Generous: each is refused before its first element.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
