//! The sweeper: removes what DROPs leave in the file (see `catalog::landing`), the chunks of a
//! dropped table and the entries of its indexes or of a dropped index. A DROP only unlinks
//! them, in a transaction as short as any write's; removing them is as much work as their rows,
//! so the sweeper does it in steps, each its own transaction under the writer lock, and others
//! write between its steps. It wakes after every commit and looks for such work (one read of
//! the small `landings` table); what a stopped process left is swept when the file is next
//! opened.

use std::sync::Arc;

use crate::catalog::{landing, tables};
use crate::error::Result;
use crate::store::Store;

/// Starts the sweeper on the runtime behind `handle`, for as long as the runtime lives.
pub(crate) fn start(store: Arc<Store>, handle: &tokio::runtime::Handle) {
    let wake = store.swept();
    crate::memory::spawn_detached(handle, async move {
        loop {
            wake.notified().await;
            sweep(&store).await;
        }
    });
}

/// Sweeps every dropped object the file holds; an error (of the disk) leaves the rest to the
/// next wake-up, or the next open.
async fn sweep(store: &Arc<Store>) {
    let Ok(ids) = store.read().and_then(|txn| landing::dropped(&txn)) else {
        return;
    };
    for id in ids {
        loop {
            // Waits for an explicit transaction to end: a DROP inside one may be rolled back,
            // and then the step finds nothing left to do.
            let lock = store.lock_writes_detached().await;
            let stepping = Arc::clone(store);
            let step = crate::memory::spawn_blocking(move || -> Result<bool> {
                let guard = stepping.begin_write(lock)?;
                let done = tables::sweep_dropped_step(&guard.txn, id)?;
                guard.commit()?;
                Ok(done)
            });
            match step.await {
                Ok(Ok(false)) => continue,
                _ => break,
            }
        }
    }
}
