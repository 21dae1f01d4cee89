//! What a write computed before it takes the writer lock: records of bytes (encoded chunks),
//! kept in memory up to a budget and beyond it in a temporary file from DataFusion's disk
//! manager, so they count against `query.max_spill_mb` with every spilling query (and against
//! the tenant's share of it, see `spill`). Read back
//! once, in order, when the write commits; the file is deleted when the spool is dropped.

use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::Arc;

use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::SpillFile;

use crate::error::{Error, ErrorKind, Result};

/// The buffered writer of a spool's file.
type Writer = BufWriter<Box<dyn datafusion::execution::SpillWriter>>;

/// Records, each a number (what it means is the writer's: rows, a position) and bytes.
pub(crate) struct Spool {
    memory: Vec<(u64, Vec<u8>)>,
    memory_bytes: usize,
    budget: usize,
    disk: Arc<DiskManager>,
    file: Option<(Arc<dyn SpillFile>, Writer)>,
    len: usize,
}

impl Spool {
    /// An empty spool holding up to `budget` bytes in memory, the rest in a file of `disk`.
    pub(crate) fn new(disk: Arc<DiskManager>, budget: usize) -> Spool {
        Spool {
            memory: Vec::new(),
            memory_bytes: 0,
            budget,
            disk,
            file: None,
            len: 0,
        }
    }

    /// Whether nothing was kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps one record. Fails when the temporary space is used up (the write then stops,
    /// having written nothing).
    pub(crate) fn push(&mut self, number: u64, bytes: Vec<u8>) -> Result<()> {
        self.len += 1;
        if self.file.is_none() && self.memory_bytes + bytes.len() <= self.budget {
            self.memory_bytes += bytes.len();
            self.memory.push((number, bytes));
            return Ok(());
        }
        if self.file.is_none() {
            let file = self.disk.create_tmp_file("staging a write's rows")?;
            let writer = BufWriter::with_capacity(1 << 20, file.open_writer()?);
            self.file = Some((file, writer));
        }
        let (_, writer) = self.file.as_mut().expect("opened above");
        write_record(writer, number, &bytes).map_err(spill_error)
    }

    /// Every record in the order kept, each handed to `take`.
    pub(crate) fn drain(self, mut take: impl FnMut(u64, Vec<u8>) -> Result<()>) -> Result<()> {
        for (number, bytes) in self.memory {
            take(number, bytes)?;
        }
        let Some((file, mut writer)) = self.file else {
            return Ok(());
        };
        writer.flush().map_err(spill_error)?;
        drop(writer);
        let path = file
            .path()
            .ok_or_else(|| Error::internal("a staged write's temporary file has no path"))?;
        let mut reader =
            BufReader::with_capacity(1 << 20, std::fs::File::open(path).map_err(spill_error)?);
        loop {
            let mut head = [0u8; 16];
            match reader.read_exact(&mut head) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(spill_error(e)),
            }
            let number = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
            let length = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
            // bounded: a record of our own staging file, written from a batch in memory
            let mut bytes = vec![0u8; usize::try_from(length).map_err(|_| corrupt())?];
            reader.read_exact(&mut bytes).map_err(spill_error)?;
            take(number, bytes)?;
        }
    }
}

fn write_record(writer: &mut impl Write, number: u64, bytes: &[u8]) -> std::io::Result<()> {
    writer.write_all(&number.to_le_bytes())?;
    writer.write_all(&(bytes.len() as u64).to_le_bytes())?;
    writer.write_all(bytes)
}

fn spill_error(e: std::io::Error) -> Error {
    // A share's limit, or the whole budget, said so in our words (see `spill`).
    if let Some(ours) = crate::error::ours_in(&e) {
        return ours;
    }
    let text = e.to_string();
    if text.contains("max_temp_directory_size") || text.contains("allowable limit") {
        return Error::new(
            ErrorKind::QuotaExceeded,
            "The statement's rows do not fit in the temporary space left (query.max_spill_mb); nothing was written",
        );
    }
    Error::new(
        ErrorKind::Unavailable,
        format!("cannot stage the statement's rows in a temporary file: {text}"),
    )
}

fn corrupt() -> Error {
    Error::internal("a staged write's temporary file is damaged")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::disk_manager::DiskManagerBuilder;

    #[test]
    fn records_come_back_in_order_from_memory_and_file() {
        let disk = Arc::new(DiskManagerBuilder::default().build().unwrap());
        let mut spool = Spool::new(Arc::clone(&disk), 100);
        for n in 0..50u64 {
            spool.push(n, vec![n as u8; 10 + n as usize]).unwrap();
        }
        assert!(
            spool.file.is_some(),
            "past the budget, records went to a file"
        );
        let mut seen = Vec::new();
        spool
            .drain(|n, bytes| {
                assert_eq!(bytes, vec![n as u8; 10 + n as usize]);
                seen.push(n);
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
        assert_eq!(disk.used_disk_space(), 0, "the file is gone with the spool");
    }

    #[test]
    fn the_temporary_space_limit_stops_a_write() {
        let disk = Arc::new(
            DiskManagerBuilder::default()
                .with_max_temp_directory_size(1000)
                .build()
                .unwrap(),
        );
        let mut spool = Spool::new(disk, 0);
        let err = (0..100)
            .try_for_each(|n| spool.push(n, vec![0; 100]))
            .and_then(|()| spool.drain(|_, _| Ok(())))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::QuotaExceeded, "{err}");
        assert!(err.message().contains("query.max_spill_mb"), "{err}");
    }
}
