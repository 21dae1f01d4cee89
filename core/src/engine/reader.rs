//! [`BlockingReader`]: a result's batches read from plain threads, as an Arrow
//! [`RecordBatchReader`], for the blocking fronts (the C ABI's and Python's Arrow C streams).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchReader};
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use crate::engine::Engine;
use crate::error::Error;

/// Reads batches already in hand, then the engine's stream, from whichever thread calls.
/// A failure ends the stream; its message names the problem and has no NUL bytes (Arrow's C
/// stream turns it into a C string).
pub struct BlockingReader {
    engine: Engine,
    schema: SchemaRef,
    leading: std::vec::IntoIter<RecordBatch>,
    stream: Option<SendableRecordBatchStream>,
}

impl BlockingReader {
    /// A reader of `leading`, then of `stream` (none for a statement without rows); `engine`
    /// runs the stream.
    pub fn new(
        engine: Engine,
        schema: SchemaRef,
        leading: Vec<RecordBatch>,
        stream: Option<SendableRecordBatchStream>,
    ) -> BlockingReader {
        BlockingReader {
            engine,
            schema,
            leading: leading.into_iter(),
            stream,
        }
    }
}

impl Iterator for BlockingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(batch) = self.leading.next() {
            return Some(Ok(batch));
        }
        let stream = self.stream.as_mut()?;
        // Consumers call from C callbacks: a panic must not unwind into them.
        let next = catch_unwind(AssertUnwindSafe(|| self.engine.block_on(stream.next())))
            .unwrap_or_else(|_| {
                Some(Err(datafusion::error::DataFusionError::Internal(
                    "internal error in mindlite while reading the next batch".into(),
                )))
            });
        match next {
            Some(Ok(batch)) => Some(Ok(batch)),
            Some(Err(e)) => {
                self.stream = None;
                // A failed cast of user text can put a NUL byte in the message.
                let e = Error::from(e);
                let message = e.message().replace('\0', "");
                Some(Err(ArrowError::ExternalError(Box::new(Error::new(
                    e.kind(),
                    message,
                )))))
            }
            None => {
                self.stream = None;
                None
            }
        }
    }
}

impl RecordBatchReader for BlockingReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}
