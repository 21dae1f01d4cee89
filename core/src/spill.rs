//! Temporary-file space: `query.max_spill_mb` for every running statement together, and each
//! tenant's share of it (`hosted.plans.<plan>.max_spill_mb`), so one tenant's sorts, joins,
//! aggregations and staged writes cannot take all of it from the others.
//!
//! Every file is made by the one shared [`DiskManager`], which keeps the whole budget. A
//! tenant's statements reach it through a disk manager of their own ([`SpillSpace::disk_for`]),
//! whose files also count every byte written against the tenant's [`SpillShare`] and give it
//! back when they are deleted. Either limit reached fails the write with QuotaExceeded naming
//! its key; the statement stops and writes nothing.

use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder};
use datafusion::execution::{SpillFile, SpillWriter, TempFileFactory};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// The temporary space of one engine.
pub(crate) struct SpillSpace {
    shared: Arc<DiskManager>,
}

impl SpillSpace {
    /// The space of `shared`, the disk manager that keeps the whole budget (and serves
    /// statements without a share of their own).
    pub(crate) fn new(shared: Arc<DiskManager>) -> SpillSpace {
        SpillSpace { shared }
    }

    /// A disk manager whose files count against `share` as well as the whole budget.
    pub(crate) fn disk_for(&self, share: &Arc<SpillShare>) -> Result<Arc<DiskManager>> {
        let factory = ShareFiles {
            shared: Arc::clone(&self.shared),
            share: Arc::clone(share),
        };
        Ok(Arc::new(
            DiskManagerBuilder::default()
                .with_temp_file_factory(Arc::new(factory))
                .build()?,
        ))
    }
}

/// One tenant's part of the temporary space: the bytes its files hold now, and the most they
/// may hold.
#[derive(Debug)]
pub(crate) struct SpillShare {
    used: AtomicU64,
    limit: AtomicU64,
    /// The key that sets `limit`, named when it is reached.
    key: Mutex<String>,
}

impl Default for SpillShare {
    fn default() -> Self {
        SpillShare {
            used: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            key: Mutex::new(String::new()),
        }
    }
}

impl SpillShare {
    /// Sets the most bytes the share's files may hold and the configuration key that says so;
    /// `None` leaves only the whole budget. Files already written stay: a lower limit stops
    /// the next write.
    pub(crate) fn set_limit(&self, limit: Option<(u64, String)>) {
        match limit {
            Some((bytes, key)) => {
                let mut shown = self.key.lock();
                if *shown != key {
                    *shown = key;
                }
                self.limit.store(bytes, Ordering::Relaxed);
            }
            None => self.limit.store(u64::MAX, Ordering::Relaxed),
        }
    }

    /// Counts `bytes` more, or fails (counting nothing) when they do not fit.
    fn take(&self, bytes: u64) -> std::io::Result<()> {
        let limit = self.limit.load(Ordering::Relaxed);
        let now = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if now > limit {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            let key = self.key.lock().clone();
            return Err(quota_error(format!(
                "The statement's temporary files would pass its user's share of the temporary \
                 space ({key}, {} MiB); it stopped and wrote nothing",
                limit / (1024 * 1024)
            )));
        }
        Ok(())
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// An I/O error carrying our QuotaExceeded error, which [`Error`]'s conversions find again.
fn quota_error(message: String) -> std::io::Error {
    std::io::Error::other(Error::quota_exceeded(message, None))
}

/// Makes a share's files: the shared manager's, counted against the share too.
struct ShareFiles {
    shared: Arc<DiskManager>,
    share: Arc<SpillShare>,
}

impl TempFileFactory for ShareFiles {
    fn create_temp_file(&self, description: &str) -> datafusion::error::Result<Arc<dyn SpillFile>> {
        Ok(Arc::new(ShareFile {
            file: self.shared.create_tmp_file(description)?,
            written: Arc::new(Written {
                bytes: AtomicU64::new(0),
                share: Arc::clone(&self.share),
                shared: Arc::clone(&self.shared),
            }),
        }))
    }
}

/// What one file has counted against its share, given back when the file and its writers
/// are all gone (the file is deleted then).
struct Written {
    bytes: AtomicU64,
    share: Arc<SpillShare>,
    shared: Arc<DiskManager>,
}

impl Drop for Written {
    fn drop(&mut self) {
        self.share.give_back(self.bytes.load(Ordering::Relaxed));
    }
}

struct ShareFile {
    file: Arc<dyn SpillFile>,
    written: Arc<Written>,
}

impl SpillFile for ShareFile {
    fn path(&self) -> Option<&Path> {
        self.file.path()
    }

    fn size(&self) -> Option<u64> {
        self.file.size()
    }

    fn read_stream(
        &self,
    ) -> datafusion::error::Result<
        Pin<Box<dyn futures::Stream<Item = datafusion::error::Result<bytes::Bytes>> + Send>>,
    > {
        self.file.read_stream()
    }

    fn open_writer(&self) -> datafusion::error::Result<Box<dyn SpillWriter>> {
        Ok(Box::new(ShareWriter {
            writer: self.file.open_writer()?,
            written: Arc::clone(&self.written),
            // The writer keeps the file (and so its count) until it is done.
            _file: Arc::clone(&self.file),
        }))
    }
}

struct ShareWriter {
    writer: Box<dyn SpillWriter>,
    written: Arc<Written>,
    _file: Arc<dyn SpillFile>,
}

impl Write for ShareWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bytes = buf.len() as u64;
        if bytes == 0 {
            return Ok(0);
        }
        let written = &self.written;
        written.share.take(bytes)?;
        let shared = &written.shared;
        if shared.used_disk_space().saturating_add(bytes) > shared.max_temp_directory_size() {
            written.share.give_back(bytes);
            return Err(quota_error(format!(
                "The statement's temporary files would pass the temporary space all statements \
                 share (query.max_spill_mb, {} MiB); it stopped and wrote nothing",
                shared.max_temp_directory_size() / (1024 * 1024)
            )));
        }
        match self.writer.write(buf) {
            Ok(n) => {
                written.share.give_back(bytes - n as u64);
                written.bytes.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                written.share.give_back(bytes);
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush()
    }
}

impl SpillWriter for ShareWriter {
    fn finish(&mut self) -> datafusion::error::Result<()> {
        self.writer.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn fill(disk: &Arc<DiskManager>, bytes: usize) -> std::io::Result<Arc<dyn SpillFile>> {
        let file = disk.create_tmp_file("test").unwrap();
        let mut writer = file.open_writer().unwrap();
        for _ in 0..bytes / 1024 {
            writer.write_all(&[7u8; 1024])?;
        }
        Ok(file)
    }

    fn used(share: &SpillShare) -> u64 {
        share.used.load(Ordering::Relaxed)
    }

    fn ours(e: std::io::Error) -> Error {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<Error>())
            .cloned()
            .expect("our error inside")
    }

    #[test]
    fn a_share_stops_its_files_and_frees_what_they_held_when_deleted() {
        let shared = DiskManagerBuilder::default()
            .with_max_temp_directory_size(1 << 20)
            .build()
            .unwrap();
        let space = SpillSpace::new(Arc::new(shared));
        let (mine, theirs) = (
            Arc::new(SpillShare::default()),
            Arc::new(SpillShare::default()),
        );
        mine.set_limit(Some((64 * 1024, "hosted.plans.tiny.max_spill_mb".into())));
        let (my_disk, their_disk) = (
            space.disk_for(&mine).unwrap(),
            space.disk_for(&theirs).unwrap(),
        );
        let kept = fill(&my_disk, 48 * 1024).unwrap();
        assert_eq!(used(&mine), 48 * 1024);
        let err = ours(fill(&my_disk, 32 * 1024).err().unwrap());
        assert_eq!(err.kind(), ErrorKind::QuotaExceeded);
        assert!(
            err.message().contains("hosted.plans.tiny.max_spill_mb"),
            "{err}"
        );
        assert_eq!(
            used(&mine),
            48 * 1024,
            "the failed file's bytes are given back"
        );
        // Another share still has room, up to the whole budget.
        let big = fill(&their_disk, 512 * 1024).unwrap();
        let err = ours(fill(&their_disk, 512 * 1024).err().unwrap());
        assert!(err.message().contains("query.max_spill_mb"), "{err}");
        drop((kept, big));
        assert_eq!((used(&mine), used(&theirs)), (0, 0));
        assert_eq!(space.shared.used_disk_space(), 0);
        fill(&my_disk, 60 * 1024).unwrap();
    }
}
