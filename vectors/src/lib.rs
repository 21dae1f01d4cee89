//! mindlite's numeric kernels: what runs on every vector of a knowledge base and must be fast
//! in every build, so the workspace compiles this crate optimised even for tests
//! (`[profile.dev.package.mindlite-vectors]`). Pure computation: no I/O, no engine types.
//!
//! - [`distance`]: the dot products every search computes ([`distance::dot`], also at
//!   `hnsw::dot`);
//! - [`hnsw`]: approximate nearest neighbours over L2-normalised vectors;
//! - [`sentence`]: sentence embeddings from a sentence-transformers BERT model.

pub mod distance;
pub mod hnsw;
pub mod sentence;

use std::fmt;

/// What went wrong in a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The caller gave something unfit (a vector of the wrong length).
    Invalid(String),
    /// Stored bytes that do not decode: the data is damaged.
    Corrupt(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(message) | Error::Corrupt(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// A kernel's result.
pub type Result<T> = std::result::Result<T, Error>;

/// `f` of every item, in order, computed on up to `threads` scoped threads that each take one
/// contiguous share of the items (so the result does not depend on the number of threads). A
/// panic in `f` goes on in the caller.
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .chunks(per)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}
