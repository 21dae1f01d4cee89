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

    /// Keeps the sweeper from starting its next step until the guard is dropped (tests).
    #[cfg(test)]
    pub(crate) fn hold(&self) -> parking_lot::MutexGuard<'_, bool> {
        self.closing.lock()
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::catalog::landing;
    use crate::sql::execute::sweep_waits;
    use crate::{Config, Engine, ErrorKind};

    /// An engine whose user bob may store 16 MiB, and bob.
    fn snug() -> (Engine, Engine) {
        let mut config = Config {
            edition: crate::Edition::Hosted,
            ..Config::default()
        };
        let plan = crate::PlanConfig {
            max_storage_mb: 16,
            ..crate::PlanConfig::default()
        };
        config.hosted.plans.insert("snug".into(), plan);
        config.hosted.default_plan = "snug".into();
        let engine = Engine::open_in_memory(config).unwrap();
        engine
            .block_on(engine.create_user("bob", Some("snug")))
            .unwrap();
        let key = engine.block_on(engine.create_api_key("bob")).unwrap().key;
        let bob = engine.as_user(&key).unwrap();
        (engine, bob)
    }

    /// Waits until a statement of `engine`'s has been refused for storage and waits for a
    /// sweep, with the sweeper held, since `waits` were counted; fails if `work` ends first.
    fn until_it_waits<T>(engine: &Engine, waits: usize, work: &std::thread::JoinHandle<T>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while sweep_waits::of(engine.store()) == waits {
            assert!(
                Instant::now() < deadline,
                "the write never waited for the sweep"
            );
            assert!(!work.is_finished(), "it ended without waiting");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A write that would fit once what its user dropped is swept, refused while the sweep
    /// is still to come, waits for it and runs again instead of failing.
    #[test]
    fn a_write_refused_for_storage_while_a_drop_is_swept_runs_again_after_it() {
        let (engine, bob) = snug();
        let rows = "SELECT value AS id, md5(CAST(value AS VARCHAR)) AS h \
                    FROM generate_series(1, 250000)";
        bob.sql_blocking(&format!("CREATE TABLE first AS {rows}"))
            .unwrap();
        let held = bob.limits().unwrap().storage_bytes.used;
        assert!(held > 8 << 20 && held < 16 << 20, "{held}");

        let sweeper = engine.hold_sweeper();
        bob.sql_blocking("DROP TABLE first").unwrap();
        // Only the schema is freed at once; the rows count until swept.
        let dropped = bob.limits().unwrap().storage_bytes.used;
        assert!(dropped + 4096 > held, "{dropped} against {held}");
        // With the sweeper held, the copy cannot fit until it is let go.
        let waits = sweep_waits::of(engine.store());
        let writer = bob.clone();
        let copy = std::thread::spawn(move || {
            writer.sql_blocking(&format!("CREATE TABLE second AS {rows}"))
        });
        until_it_waits(&engine, waits, &copy);
        drop(sweeper);
        copy.join().unwrap().unwrap();
        let count = bob.sql_blocking("SELECT count(*) FROM second").unwrap();
        let count =
            datafusion::arrow::util::display::array_value_to_string(count.batches[0].column(0), 0);
        assert_eq!(count.unwrap(), "250000");
        assert!(!landing::sweeping(&bob.store().read().unwrap(), bob.tenant).unwrap());
        let now = bob.limits().unwrap().storage_bytes.used;
        assert!(now <= held + (1 << 20), "{now} against {held}");

        // A write that does not fit even then is refused as before.
        let e = bob
            .sql_blocking(&format!("CREATE TABLE third AS {rows}"))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::QuotaExceeded, "{e}");
        assert!(e.message().contains("max_storage_mb"), "{e}");
    }

    /// Replacing an uploaded file near the limit (delete, then upload again) is not refused
    /// while the deleted file is swept: the upload reads the file again once it is gone.
    #[test]
    fn an_upload_after_its_files_delete_waits_for_the_sweep_rather_than_fail() {
        let (engine, bob) = snug();
        let mut csv = String::from("id,h\n");
        for i in 0..250_000u128 {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
            csv.push_str(&format!("{i},{h:032x}\n"));
        }
        let csv = csv.into_bytes();
        let upload = |who: &Engine, csv: Vec<u8>| {
            who.block_on(who.upload_file("hashes", csv, Some(crate::FileFormat::Csv), None))
        };
        assert_eq!(upload(&bob, csv.clone()).unwrap(), 250_000);
        let held = bob.limits().unwrap().storage_bytes.used;
        assert!(held > 8 << 20 && held < 16 << 20, "{held}");

        let sweeper = engine.hold_sweeper();
        bob.block_on(bob.delete_file("hashes")).unwrap();
        let waits = sweep_waits::of(engine.store());
        let (uploader, again) = (bob.clone(), csv.clone());
        let replaced = std::thread::spawn(move || upload(&uploader, again));
        until_it_waits(&engine, waits, &replaced);
        drop(sweeper);
        assert_eq!(replaced.join().unwrap().unwrap(), 250_000);
        assert_eq!(bob.list_files().unwrap()[0].row_count, 250_000);
    }
}
