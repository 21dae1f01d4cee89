//! The sweeper: removes what DROPs leave in the file (see `catalog::landing`), the chunks of a
//! dropped table and the entries of its indexes or of a dropped index, and a dropped knowledge
//! base's search indexes (graph pages and keyword postings). A DROP only unlinks
//! them, in a transaction as short as any write's; removing them is as much work as their rows,
//! so the sweeper does it in steps, each its own transaction under the writer lock, and others
//! write between its steps. It wakes after every commit and looks for such work (one read of
//! the small `landings` table); what a stopped process left is swept when the engine next
//! starts, in the same steps.
//!
//! It holds the store only while it works (a weak reference otherwise), and a closing engine
//! waits for the step in progress and stops the next ones ([`Sweeper::stop`]), so the file is
//! closed when the engine is dropped and can be opened again at once.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::catalog::{landing, rules};
use crate::error::Result;
use crate::store::Store;

/// The running sweeper, to stop it when the engine closes.
pub(crate) struct Sweeper {
    /// Held while the sweeper uses the store; true once the engine is closing.
    closing: Arc<Mutex<bool>>,
}

impl Sweeper {
    /// Starts the sweeper on the runtime behind `handle`.
    pub(crate) fn start(store: &Arc<Store>, handle: &tokio::runtime::Handle) -> Sweeper {
        let wake = store.swept();
        let closing = Arc::new(Mutex::new(false));
        let (weak, shared) = (Arc::downgrade(store), Arc::clone(&closing));
        // First what the file held when it opened (opening leaves it here), then after
        // every commit.
        crate::memory::spawn_detached(handle, async move {
            loop {
                if !sweep(&weak, &shared).await {
                    return;
                }
                wake.notified().await;
            }
        });
        Sweeper { closing }
    }

    /// Waits for the step in progress, if any, and lets no other begin.
    pub(crate) fn stop(&self) {
        *self.closing.lock() = true;
    }
}

/// Runs `work` with the store, unless the engine is closing (then `None`).
fn with_store<T>(
    weak: &Weak<Store>,
    closing: &Mutex<bool>,
    work: impl FnOnce(&Arc<Store>) -> T,
) -> Option<T> {
    let closed = closing.lock();
    if *closed {
        return None;
    }
    let store = weak.upgrade()?;
    let out = work(&store);
    // The store goes before the lock: once a closing engine holds the lock, no step holds it.
    drop(store);
    drop(closed);
    Some(out)
}

/// Sweeps every dropped object the file holds; false once the engine is closing. An error (of
/// the disk) leaves the rest to the next wake-up, or the next open.
async fn sweep(weak: &Weak<Store>, closing: &Arc<Mutex<bool>>) -> bool {
    let Some(found) = with_store(weak, closing, |store| {
        store.read().and_then(|txn| landing::dropped(&txn))
    }) else {
        return false;
    };
    let Ok(ids) = found else {
        return true;
    };
    for id in ids {
        loop {
            // Waits for an explicit transaction to end: a DROP inside one may be rolled back,
            // and then the step finds nothing left to do. It waits in the sweeper's turn,
            // which yields to every other writer. (Here, not on the thread of the step: a
            // closing engine stops its runtime, waiting for blocking threads, before the
            // store rolls back an open transaction.)
            let Some(waiting) = weak.upgrade().map(|store| store.lock_writes_for_sweeper()) else {
                return false;
            };
            let lock = waiting.await;
            let (weak, closing) = (Weak::clone(weak), Arc::clone(closing));
            let step = crate::memory::spawn_blocking_unshared(move || {
                with_store(&weak, &closing, |store| -> Result<bool> {
                    let mut guard = store.begin_write(lock)?;
                    guard.need_not_persist()?;
                    let done = rules::sweep_dropped_step(&guard.txn, id)?;
                    guard.commit()?;
                    Ok(done)
                })
            });
            match step.await {
                Ok(Some(Ok(false))) => continue,
                Ok(None) => return false,
                _ => break,
            }
        }
    }
    true
}
