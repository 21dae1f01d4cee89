//! `Query`: one statement's result, read row by row into Python tuples or handed over whole
//! as an Arrow C stream.

use std::sync::{Arc, Mutex};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::RecordBatch;
use arrow::record_batch::RecordBatchReader;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use mindlite::{Outcome, QueryResult};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::convert::{self, PyTypes};
use crate::database::Shared;
use crate::{to_py, wait, InterfaceError, ProgrammingError};

/// Where reading stands: the batch being read and the stream of the rest.
pub(crate) struct Reading {
    batch: Option<RecordBatch>,
    offset: usize,
    /// `None` once the stream ended, failed, or was handed over as an Arrow stream.
    stream: Option<SendableRecordBatchStream>,
    /// Set while a thread waits for the next batch without the lock.
    busy: bool,
    /// Why the rows after this point are gone (cancelled, failed): later reads raise it
    /// rather than look like the end of the result.
    lost: Option<mindlite::Error>,
    /// Set when a Ctrl-C stopped an Arrow hand-off, for the Python side to raise
    /// KeyboardInterrupt in place of the consumer's error.
    interrupted: bool,
}

impl Reading {
    /// Refuses a read while another thread is reading, or once the rest of the rows are lost.
    fn check_readable(&self) -> PyResult<()> {
        if self.busy {
            return Err(ProgrammingError::new_err(
                "The result is being read by another thread",
            ));
        }
        match &self.lost {
            Some(lost) => Err(to_py(lost.clone())),
            None => Ok(()),
        }
    }

    /// Drops what is left (the connection closed).
    pub(crate) fn clear(&mut self) {
        self.batch = None;
        self.stream = None;
    }
}

/// A statement's result.
#[pyclass(frozen, module = "mindlite._native")]
pub(crate) struct Query {
    shared: Arc<Shared>,
    columns: Vec<String>,
    schema: SchemaRef,
    affected_rows: Option<u64>,
    has_rows: bool,
    db: String,
    reading: Arc<Mutex<Reading>>,
}

impl Query {
    /// The Python result of `result`; an SQL error raises.
    pub(crate) fn new(shared: &Arc<Shared>, result: QueryResult) -> PyResult<Query> {
        let (columns, schema, stream, affected_rows, has_rows) = match result.outcome {
            Outcome::Error(e) => return Err(to_py(e)),
            Outcome::Ok { affected_rows } => (
                Vec::new(),
                Arc::new(Schema::empty()),
                None,
                affected_rows,
                false,
            ),
            Outcome::Table(table) => (
                table.column_names,
                table.stream.schema(),
                Some(table.stream),
                None,
                true,
            ),
        };
        let reading = Arc::new(Mutex::new(Reading {
            batch: None,
            offset: 0,
            stream,
            busy: false,
            lost: None,
            interrupted: false,
        }));
        shared.track(&reading);
        Ok(Query {
            shared: Arc::clone(shared),
            columns,
            schema,
            affected_rows,
            has_rows,
            db: result.context.db,
            reading,
        })
    }

    fn reading(&self) -> std::sync::MutexGuard<'_, Reading> {
        crate::database::lock(&self.reading)
    }

    /// Takes the stream out while waiting for its next batch, so the lock is never held
    /// across a wait (which gives up the GIL, and another thread may then want the lock).
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<RecordBatch>> {
        let engine = self.shared.engine()?;
        let stream = {
            let mut reading = self.reading();
            reading.check_readable()?;
            match reading.stream.take() {
                Some(stream) => {
                    reading.busy = true;
                    stream
                }
                None => return Ok(None),
            }
        };
        let next = wait(py, &engine, next_of(stream));
        let mut reading = self.reading();
        reading.busy = false;
        match next {
            // Interrupted: the stream was dropped with the future, and the query with it.
            Err(interrupt) => {
                reading.lost = Some(cancelled());
                Err(interrupt)
            }
            Ok((None, _)) => Ok(None),
            Ok((Some(Err(e)), _)) => {
                let e = mindlite::Error::from(e);
                reading.lost = Some(e.clone());
                Err(to_py(e))
            }
            // Closed meanwhile: the stream is dropped here, and the file with it.
            Ok((Some(Ok(_)), _)) if self.shared.is_closed() => {
                Err(InterfaceError::new_err("The connection is closed"))
            }
            Ok((Some(Ok(batch)), stream)) => {
                reading.stream = Some(stream);
                Ok(Some(batch))
            }
        }
    }
}

/// The error later reads of a cancelled result raise.
fn cancelled() -> mindlite::Error {
    mindlite::Error::new(
        mindlite::ErrorKind::Unavailable,
        "The query was cancelled (KeyboardInterrupt); the rest of its rows are gone",
    )
}

type Next = Option<datafusion::error::Result<RecordBatch>>;

/// The stream's next batch, and the stream back (a spawned task owns what it uses).
async fn next_of(mut stream: SendableRecordBatchStream) -> (Next, SendableRecordBatchStream) {
    let next = stream.next().await;
    (next, stream)
}

/// A result exported as an Arrow C stream: the consumer (pyarrow, polars) calls `get_next`
/// from its own code, so each wait takes the GIL back now and then to look for Ctrl-C, as
/// `fetch` does. An interrupt ends the stream with an error and marks the result interrupted,
/// so `Result.arrow()` and its kin raise KeyboardInterrupt instead of the consumer's error.
struct PyReader {
    engine: mindlite::Engine,
    reading: Arc<Mutex<Reading>>,
    schema: SchemaRef,
    leading: std::vec::IntoIter<RecordBatch>,
    stream: Option<SendableRecordBatchStream>,
}

impl Iterator for PyReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(batch) = self.leading.next() {
            return Some(Ok(batch));
        }
        let stream = self.stream.take()?;
        let engine = self.engine.clone();
        // A C callback: no panic may unwind into the consumer.
        let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Python::attach(|py| match wait(py, &engine, next_of(stream)) {
                Ok(next) => Ok(next),
                Err(_interrupt) => {
                    let mut reading = crate::database::lock(&self.reading);
                    reading.lost = Some(cancelled());
                    reading.interrupted = true;
                    Err(cancelled())
                }
            })
        }))
        .unwrap_or_else(|_| {
            Err(mindlite::Error::internal(
                "internal error while reading the next batch",
            ))
        });
        let failed = |e: mindlite::Error| {
            // Arrow's C stream turns the message into a C string: no NUL bytes.
            let message = e.message().replace('\0', "");
            Some(Err(ArrowError::ExternalError(Box::new(
                mindlite::Error::new(e.kind(), message),
            ))))
        };
        match next {
            Err(e) => failed(e),
            Ok((None, _)) => None,
            Ok((Some(Err(e)), _)) => failed(e.into()),
            Ok((Some(Ok(batch)), stream)) => {
                self.stream = Some(stream);
                Some(Ok(batch))
            }
        }
    }
}

impl RecordBatchReader for PyReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

#[pymethods]
impl Query {
    /// Column names as MindsDB shows them.
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.columns.clone()
    }

    /// Each column's SQL type name (`BIGINT`, `VARCHAR`, `DECIMAL(10,2)`, …).
    #[getter]
    fn types(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| mindlite::sql_type_name(f.data_type()))
            .collect()
    }

    /// Each column's nullability.
    #[getter]
    fn nullable(&self) -> Vec<bool> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.is_nullable())
            .collect()
    }

    /// Rows inserted, updated or deleted; `None` for queries and DDL.
    #[getter]
    fn affected_rows(&self) -> Option<u64> {
        self.affected_rows
    }

    /// Whether the statement produced a table (possibly empty).
    #[getter]
    fn has_rows(&self) -> bool {
        self.has_rows
    }

    /// Whether a Ctrl-C stopped this result's Arrow hand-off.
    #[getter]
    fn interrupted(&self) -> bool {
        self.reading().interrupted
    }

    /// The current project after the statement.
    #[getter]
    fn db(&self) -> String {
        self.db.clone()
    }

    /// Up to `size` more rows (all when `None`) as tuples; fewer only at the end.
    #[pyo3(signature = (size=None))]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        size: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.shared.engine()?;
        let types = PyTypes::import(py)?;
        let mut rows = Vec::new();
        let wanted = size.unwrap_or(usize::MAX);
        while rows.len() < wanted {
            let taken = {
                let mut reading = self.reading();
                match reading.batch.take() {
                    Some(batch) if reading.offset < batch.num_rows() => {
                        let from = reading.offset;
                        let to = batch
                            .num_rows()
                            .min(from.saturating_add(wanted - rows.len()));
                        reading.offset = to;
                        reading.batch = Some(batch.clone());
                        Some((batch, from, to))
                    }
                    _ => None,
                }
            };
            match taken {
                Some((batch, from, to)) => match convert::rows(py, &types, &batch, from, to) {
                    Ok(converted) => rows.extend(converted),
                    Err(e) => {
                        // The rows stay unread, so the caller can see the error and go on.
                        let mut reading = self.reading();
                        if reading.offset == to {
                            reading.offset = from;
                        }
                        return Err(convert::value_error(py, e));
                    }
                },
                None => match self.next_batch(py)? {
                    Some(batch) => {
                        let mut reading = self.reading();
                        reading.batch = Some(batch);
                        reading.offset = 0;
                    }
                    None => break,
                },
            }
        }
        Ok(rows)
    }

    /// The rows not yet read, as an Arrow C stream (the Arrow PyCapsule interface). Reading
    /// it moves them out: `fetch` then gives nothing. `requested_schema` is not applied.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let engine = self.shared.engine()?;
        let (leading, stream) = {
            let mut reading = self.reading();
            reading.check_readable()?;
            let leading = match reading.batch.take() {
                Some(batch) if reading.offset < batch.num_rows() => {
                    vec![batch.slice(reading.offset, batch.num_rows() - reading.offset)]
                }
                _ => Vec::new(),
            };
            (leading, reading.stream.take())
        };
        // The columns under the names the engine shows (`SELECT 1` shows `1`, not Arrow's
        // `Int64(1)`); a batch's own field names do not cross the C interface.
        let fields: Vec<_> = self
            .schema
            .fields()
            .iter()
            .zip(&self.columns)
            .map(|(field, name)| field.as_ref().clone().with_name(name))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            self.schema.metadata().clone(),
        ));
        let reader = PyReader {
            engine,
            reading: Arc::clone(&self.reading),
            schema,
            leading: leading.into_iter(),
            stream,
        };
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        // A consumer moves the stream out and leaves it released; dropping the capsule's copy
        // then does nothing, and an unconsumed one is released with the capsule.
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }
}
