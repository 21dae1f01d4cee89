//! How rows are stored: a table's schema as Arrow IPC, and its rows as chunks of up to
//! [`CHUNK_ROWS`] rows, LZ4-compressed Arrow IPC, gathered from incoming batches by
//! [`ChunkBuffer`].

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;

/// Rows per stored chunk: big enough that per-chunk overhead vanishes, small enough that a scan
/// holds little memory.
pub(crate) const CHUNK_ROWS: usize = 65_536;

/// A schema as stored: an Arrow IPC stream without batches.
pub(crate) fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    encode_batches(schema, &[])
}

/// A schema back from [`encode_schema`]'s bytes.
pub(crate) fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    Ok(StreamReader::try_new(Cursor::new(bytes), None)?.schema())
}

/// Decodes one stored chunk, reading only the `projection` columns when given.
pub(crate) fn decode_chunk(bytes: &[u8], projection: Option<Vec<usize>>) -> Result<RecordBatch> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), projection)?;
    let schema = reader.schema();
    match reader.next() {
        Some(batch) => Ok(batch?),
        None => Ok(RecordBatch::new_empty(schema)),
    }
}

/// A chunk is closed at this many bytes of rows even before it has [`CHUNK_ROWS`] rows, so
/// wide rows (long texts) do not make chunks that take gigabytes to buffer and decode.
pub(super) const CHUNK_BYTES: usize = 16 * 1024 * 1024;

/// Rows waiting to make a chunk: batches of one schema, with their row and byte counts.
pub(super) struct ChunkBuffer {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
}

impl ChunkBuffer {
    pub(super) fn new(schema: SchemaRef) -> ChunkBuffer {
        ChunkBuffer {
            schema,
            batches: Vec::new(),
            rows: 0,
            bytes: 0,
        }
    }

    pub(super) fn add(&mut self, batch: RecordBatch) {
        self.rows += batch.num_rows();
        self.bytes += rows_bytes(&batch);
        self.batches.push(batch);
    }

    /// The buffered rows as one batch: the one batch itself when there is only one (a big
    /// loaded batch is cut into chunks by slicing it, not copied again for every chunk).
    fn all(&self) -> Result<RecordBatch> {
        Ok(match self.batches.as_slice() {
            [one] => one.clone(),
            many => concat_batches(&self.schema, many)?,
        })
    }

    /// The next full chunk (`CHUNK_ROWS` rows, or fewer once they reach `CHUNK_BYTES`), taken
    /// out of the buffer; `None` while the rows make no full chunk yet.
    pub(super) fn full_chunk(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows < CHUNK_ROWS && self.bytes < CHUNK_BYTES {
            return Ok(None);
        }
        let all = self.all()?;
        let take = if self.rows >= CHUNK_ROWS {
            CHUNK_ROWS
        } else {
            // By bytes: as many rows as fit, at least one.
            let per_row = (self.bytes / all.num_rows().max(1)).max(1);
            (CHUNK_BYTES / per_row).clamp(1, all.num_rows())
        };
        let chunk = all.slice(0, take);
        self.batches.clear();
        (self.rows, self.bytes) = (0, 0);
        let rest = all.num_rows() - take;
        if rest > 0 {
            // String views copied, so the remainder does not keep the whole concatenated
            // chunk alive (and, through it, into the next chunk's buffers); other columns are
            // cut from their buffers when the chunk is encoded.
            self.add(compact(&all.slice(take, rest))?);
        }
        Ok(Some(chunk))
    }

    /// Every buffered row as one batch, taken out of the buffer; `None` when it is empty.
    pub(super) fn rest(&mut self) -> Result<Option<RecordBatch>> {
        if self.rows == 0 {
            return Ok(None);
        }
        let all = self.all()?;
        self.batches.clear();
        (self.rows, self.bytes) = (0, 0);
        Ok(Some(all))
    }
}

/// The bytes `batch`'s rows take, counting of each buffer only the part they use.
/// `get_array_memory_size` counts whole buffers, so a slice of a big batch (a loaded Arrow
/// table, or the rows left after a chunk was cut) would count as all of it and close chunks
/// after a few thousand rows.
pub(super) fn rows_bytes(batch: &RecordBatch) -> usize {
    // A view is 16 bytes; strings longer than 12 bytes live in a data buffer besides.
    let views = |views: &[u128]| -> usize {
        views
            .iter()
            .map(|view| {
                let len = *view as u32 as usize;
                16 + if len > 12 { len } else { 0 }
            })
            .sum()
    };
    batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View => views(column.as_string_view().views()),
            DataType::BinaryView => views(column.as_binary_view().views()),
            _ => column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size()),
        })
        .sum()
}

/// Chunks are LZ4-compressed Arrow IPC: decompression is cheaper than reading the extra bytes
/// through redb, and compressed chunks stay clear of redb's power-of-two rounding of large values.
pub(super) fn encode_batches(schema: &Schema, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let options =
        IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
    let mut writer = StreamWriter::try_new_with_options(&mut out, schema, options)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// Copies the live bytes of string and binary view columns into fresh buffers. A view array
/// (DataFusion's default for VARCHAR) keeps whole data buffers alive through slices and concats;
/// written as is, a chunk would carry the bytes of every batch it was cut from.
pub(super) fn compact(batch: &RecordBatch) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Utf8View => Arc::new(column.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(column.as_binary_view().gc()) as ArrayRef,
            _ => Arc::clone(column),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray, StringViewArray};
    use datafusion::arrow::datatypes::Field;

    /// The row counts of the chunks a buffer cuts from `batches`, the rest last.
    fn chunk_rows(schema: SchemaRef, batches: Vec<RecordBatch>) -> Vec<usize> {
        let mut buffer = ChunkBuffer::new(schema);
        let mut rows = Vec::new();
        for batch in batches {
            buffer.add(batch);
            while let Some(chunk) = buffer.full_chunk().unwrap() {
                rows.push(chunk.num_rows());
            }
        }
        rows.extend(buffer.rest().unwrap().map(|rest| rest.num_rows()));
        rows
    }

    fn big(rows: usize, view: bool) -> RecordBatch {
        let text = |n: usize| format!("category_{:02}", n % 100);
        let strings: ArrayRef = if view {
            Arc::new(
                (0..rows)
                    .map(|n| Some(text(n)))
                    .collect::<StringViewArray>(),
            )
        } else {
            Arc::new((0..rows).map(|n| Some(text(n))).collect::<StringArray>())
        };
        let kind = strings.data_type().clone();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("category", kind, false),
        ]));
        let ids = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        RecordBatch::try_new(schema, vec![ids, strings]).unwrap()
    }

    #[test]
    fn a_big_batch_and_its_slices_make_full_chunks() {
        let rows = 300_000;
        for view in [false, true] {
            let batch = big(rows, view);
            let schema = batch.schema();
            // Whole: chunks of CHUNK_ROWS, the rest last.
            let whole = chunk_rows(Arc::clone(&schema), vec![batch.clone()]);
            assert_eq!(
                whole,
                [65_536, 65_536, 65_536, 65_536, 37_856],
                "view {view}"
            );
            // Slices of it, as a loaded table cut into batches: the same chunks, although each
            // slice's buffers are the whole batch's.
            let slices = (0..rows)
                .step_by(8_192)
                .map(|at| batch.slice(at, 8_192.min(rows - at)))
                .collect();
            assert_eq!(chunk_rows(schema, slices), whole, "view {view}");
        }
    }

    #[test]
    fn wide_rows_close_a_chunk_by_its_bytes() {
        let text = "x".repeat(1_000);
        let strings: ArrayRef = Arc::new(StringArray::from(vec![text.as_str(); 40_000]));
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![strings]).unwrap();
        let rows = chunk_rows(schema, vec![batch]);
        assert_eq!(rows.iter().sum::<usize>(), 40_000);
        // About 1,004 bytes a row: 16 MiB hold some 16,700 of them.
        assert!(rows[0] > 16_000 && rows[0] < 17_000, "{rows:?}");
    }
}
