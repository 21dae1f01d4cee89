//! The store's writer lock, handed out in turns between users: when it is let go it goes to the
//! next user in line, not to the next caller, so a user's writes queue behind its own and
//! another user's one-row INSERT waits for at most one write of each user ahead of it (and,
//! once its patience is spent, one step of the sweeper's), however many a user has queued.
//! Within a user it is first come, first served. A user is the parent memory account of the
//! work that asks (a hosted user's account, see `memory`); work with no parent (the local
//! edition's, background work) is one more user.
//!
//! One user yields: [`SWEEPER`], the removal of what DROPs left (`engine/sweeper.rs`): nobody's
//! request, in steps as long as anyone's. It gets the lock only while nobody else waits, or
//! once it has waited [`SWEEPER_PATIENCE`]: under a stream of writes it goes ahead of others
//! for one step in that time at most, and it is never starved. Without this, every write of
//! another user waited for one sweeping step besides the step of each user ahead of it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The user that yields to every other (see the module's comment); no parent account has this
/// key (they have 30 bits).
pub(crate) const SWEEPER: u64 = u64::MAX;

/// How long [`SWEEPER`] waits for the others before it takes its turn anyway.
pub(crate) const SWEEPER_PATIENCE: Duration = Duration::from_millis(100);

/// The lock (shared through an `Arc`).
#[derive(Debug, Default)]
pub(crate) struct TurnLock {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether someone holds it. When it is let go with someone waiting it passes straight to
    /// them, so while it is free nobody waits.
    held: bool,
    /// Who waits, per user, first come first.
    queues: HashMap<u64, VecDeque<Arc<Place>>>,
    /// Users with someone waiting, in the order of their next turn.
    turns: VecDeque<u64>,
    /// Since when [`SWEEPER`] waits for its next turn, if it does.
    sweeper_waits: Option<Instant>,
}

/// One caller's place in line.
#[derive(Debug, Default)]
struct Place {
    /// Set (under the state's lock) when the lock is handed to this place.
    granted: AtomicBool,
    /// Set with `granted` when this is the sweeper's and it went ahead of others because its
    /// patience was spent: its step is then whole (see [`Watch::others_wait`]).
    overdue: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// The lock, held until dropped.
#[derive(Debug)]
pub(crate) struct TurnGuard {
    lock: Arc<TurnLock>,
    /// Whose turn it is.
    user: u64,
    /// Whether the turn's step is whole whoever waits: the sweeper's, when it went ahead of
    /// others because its patience was spent.
    whole: bool,
}

impl TurnGuard {
    /// What tells, while this guard is held, whether others wait.
    pub(crate) fn watch(&self) -> Watch {
        Watch {
            lock: Arc::clone(&self.lock),
            user: self.user,
            whole: self.whole,
        }
    }
}

/// Whether users other than a holder wait for the lock (see [`TurnGuard::watch`]).
#[derive(Debug)]
pub(crate) struct Watch {
    lock: Arc<TurnLock>,
    user: u64,
    whole: bool,
}

impl Watch {
    /// Whether a user other than the holder's, and other than the sweeper, waits for the lock.
    /// Never for a sweeper's turn that came because its patience was spent (at most every
    /// [`SWEEPER_PATIENCE`] under a stream of writes): that step is whole, so what DROPs left
    /// is still swept thousands of entries a turn. A turn it took while nobody waited ends
    /// early for whoever comes, as anyone's.
    pub(crate) fn others_wait(&self) -> bool {
        if self.whole {
            return false;
        }
        let state = self.lock.state.lock();
        state
            .turns
            .iter()
            .any(|user| *user != self.user && *user != SWEEPER)
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.lock.pass_on();
    }
}

impl State {
    /// The next place in turn, taken out of line: the first user's, passing over
    /// [`SWEEPER`] while others wait and its patience lasts.
    fn next(&mut self) -> Option<Arc<Place>> {
        let patient = self
            .sweeper_waits
            .is_some_and(|since| since.elapsed() < SWEEPER_PATIENCE);
        let other = self.turns.iter().position(|user| *user != SWEEPER);
        let at = match other {
            Some(other) if patient => other,
            _ => 0,
        };
        let user = self.turns.remove(at)?;
        let overdue = user == SWEEPER && other.is_some();
        let queue = self.queues.get_mut(&user)?;
        let place = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&user);
        } else {
            self.turns.push_back(user);
        }
        if user == SWEEPER {
            self.sweeper_waits = self.queues.contains_key(&SWEEPER).then(Instant::now);
        }
        if let Some(place) = &place {
            place.overdue.store(overdue, Ordering::SeqCst);
        }
        place
    }

    /// Puts `place` in `user`'s line.
    fn queue(&mut self, user: u64, place: Arc<Place>) {
        let queue = self.queues.entry(user).or_default();
        queue.push_back(place);
        if queue.len() == 1 {
            self.turns.push_back(user);
            if user == SWEEPER {
                self.sweeper_waits = Some(Instant::now());
            }
        }
    }
}

impl TurnLock {
    /// Waits for the lock as `user`.
    pub(crate) fn lock(self: Arc<Self>, user: u64) -> impl Future<Output = TurnGuard> + Send {
        let place = {
            let mut state = self.state.lock();
            if state.held {
                let place = Arc::new(Place::default());
                state.queue(user, Arc::clone(&place));
                Some(place)
            } else {
                state.held = true;
                None
            }
        };
        Waiting {
            lock: Some(self),
            place,
            user,
        }
    }

    /// The lock if it is free now.
    pub(crate) fn try_lock(self: &Arc<Self>) -> Option<TurnGuard> {
        let mut state = self.state.lock();
        if state.held {
            return None;
        }
        state.held = true;
        Some(TurnGuard {
            lock: Arc::clone(self),
            user: 0,
            whole: false,
        })
    }

    /// Hands the lock to the next place in turn, or frees it.
    fn pass_on(&self) {
        let mut state = self.state.lock();
        match state.next() {
            Some(place) => {
                place.granted.store(true, Ordering::SeqCst);
                drop(state);
                if let Some(waker) = place.waker.lock().take() {
                    waker.wake();
                }
            }
            None => state.held = false,
        }
    }
}

/// A caller waiting in line; dropped before its turn it leaves the line, dropped after the
/// lock was handed to it, it passes the lock on.
struct Waiting {
    /// `None` once the guard was given out.
    lock: Option<Arc<TurnLock>>,
    /// `None` when the lock was free at once.
    place: Option<Arc<Place>>,
    user: u64,
}

impl Future for Waiting {
    type Output = TurnGuard;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<TurnGuard> {
        if let Some(place) = &self.place {
            if !place.granted.load(Ordering::SeqCst) {
                *place.waker.lock() = Some(cx.waker().clone());
                // Granted between the check and the waker's store: do not sleep on it.
                if !place.granted.load(Ordering::SeqCst) {
                    return Poll::Pending;
                }
            }
        }
        let lock = self.lock.take().expect("polled after completion");
        let overdue = self
            .place
            .as_ref()
            .is_some_and(|place| place.overdue.load(Ordering::SeqCst));
        Poll::Ready(TurnGuard {
            lock,
            user: self.user,
            whole: overdue,
        })
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(lock) = self.lock.take() else {
            return;
        };
        let Some(place) = &self.place else {
            // Taken at once and never handed out.
            lock.pass_on();
            return;
        };
        let mut state = lock.state.lock();
        if place.granted.load(Ordering::SeqCst) {
            drop(state);
            lock.pass_on();
            return;
        }
        if let Some(queue) = state.queues.get_mut(&self.user) {
            queue.retain(|other| !Arc::ptr_eq(other, place));
            if queue.is_empty() {
                state.queues.remove(&self.user);
                state.turns.retain(|user| *user != self.user);
                if self.user == SWEEPER {
                    state.sweeper_waits = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn the_lock_goes_to_users_in_turn_and_to_each_users_callers_in_order() {
        let lock = Arc::new(TurnLock::default());
        let held = Arc::clone(&lock).lock(1).now_or_never().unwrap();
        // User 1 queues three writes, then user 2 one: user 2's comes second.
        type Waiter = Pin<Box<dyn Future<Output = TurnGuard> + Send>>;
        let mut waiting: Vec<(&str, Waiter)> = vec![
            ("1a", Box::pin(Arc::clone(&lock).lock(1))),
            ("1b", Box::pin(Arc::clone(&lock).lock(1))),
            ("1c", Box::pin(Arc::clone(&lock).lock(1))),
            ("2a", Box::pin(Arc::clone(&lock).lock(2))),
        ];
        assert!(waiting
            .iter_mut()
            .all(|(_, w)| w.as_mut().now_or_never().is_none()));
        assert!(lock.try_lock().is_none());
        let mut order = Vec::new();
        let mut guard = held;
        while !waiting.is_empty() {
            drop(guard);
            let (next, taken) = waiting
                .iter_mut()
                .enumerate()
                .find_map(|(n, (_, w))| w.as_mut().now_or_never().map(|g| (n, g)))
                .expect("the lock went to someone");
            order.push(waiting.remove(next).0);
            guard = taken;
        }
        drop(guard);
        assert_eq!(order, ["1a", "2a", "1b", "1c"]);
        assert!(lock.try_lock().is_some(), "free again");
    }

    #[test]
    fn the_sweeper_waits_while_others_do_until_its_patience_ends() {
        let lock = Arc::new(TurnLock::default());
        let held = lock.try_lock().unwrap();
        let mut sweeper = Box::pin(Arc::clone(&lock).lock(SWEEPER));
        let mut first = Box::pin(Arc::clone(&lock).lock(1));
        let mut second = Box::pin(Arc::clone(&lock).lock(2));
        assert!(sweeper.as_mut().now_or_never().is_none());
        // Others wait: they go first, in turn, though the sweeper asked before them.
        drop(held);
        assert!(sweeper.as_mut().now_or_never().is_none());
        let guard = first
            .as_mut()
            .now_or_never()
            .expect("user 1 goes before the sweeper");
        let mut third = Box::pin(Arc::clone(&lock).lock(3));
        drop(guard);
        assert!(sweeper.as_mut().now_or_never().is_none());
        let guard = second.as_mut().now_or_never().expect("user 2 goes next");
        // Its patience spent, the sweeper goes before user 3, who asked later.
        std::thread::sleep(SWEEPER_PATIENCE + Duration::from_millis(10));
        drop(guard);
        assert!(third.as_mut().now_or_never().is_none());
        let guard = sweeper
            .as_mut()
            .now_or_never()
            .expect("the sweeper's turn came");
        drop(guard);
        drop(third.as_mut().now_or_never().expect("then user 3's"));
        // Alone, it never waits for its patience.
        let mut alone = Box::pin(Arc::clone(&lock).lock(SWEEPER));
        drop(alone.as_mut().now_or_never().expect("free: taken at once"));
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn a_holder_sees_others_wait_but_not_its_own_user_nor_the_sweeper() {
        let lock = Arc::new(TurnLock::default());
        let held = Arc::clone(&lock).lock(1).now_or_never().unwrap();
        let mut own = Box::pin(Arc::clone(&lock).lock(1));
        let mut sweeper = Box::pin(Arc::clone(&lock).lock(SWEEPER));
        assert!(own.as_mut().now_or_never().is_none());
        assert!(sweeper.as_mut().now_or_never().is_none());
        assert!(!held.watch().others_wait(), "its own user and the sweeper");
        let mut other = Box::pin(Arc::clone(&lock).lock(2));
        assert!(other.as_mut().now_or_never().is_none());
        assert!(held.watch().others_wait(), "user 2 waits");
        // The sweeper's turn taken while nobody waited ends early for whoever comes.
        let lock = Arc::new(TurnLock::default());
        let held = Arc::clone(&lock).lock(SWEEPER).now_or_never().unwrap();
        let mut waiting = Box::pin(Arc::clone(&lock).lock(4));
        assert!(waiting.as_mut().now_or_never().is_none());
        assert!(held.watch().others_wait(), "user 4 waits");
        // The turn it takes ahead of others once its patience is spent is whole.
        let mut sweeper = Box::pin(Arc::clone(&lock).lock(SWEEPER));
        assert!(sweeper.as_mut().now_or_never().is_none());
        drop(held);
        let held = waiting.as_mut().now_or_never().expect("user 4's turn");
        let mut later = Box::pin(Arc::clone(&lock).lock(5));
        assert!(later.as_mut().now_or_never().is_none());
        std::thread::sleep(SWEEPER_PATIENCE + Duration::from_millis(10));
        drop(held);
        let held = sweeper
            .as_mut()
            .now_or_never()
            .expect("the sweeper's overdue turn");
        assert!(
            !held.watch().others_wait(),
            "its step is whole though user 5 waits"
        );
        drop(held);
        drop(later.as_mut().now_or_never().expect("then user 5's"));
    }

    #[test]
    fn a_caller_that_leaves_gives_up_its_place_or_passes_the_lock_on() {
        let lock = Arc::new(TurnLock::default());
        let held = lock.try_lock().unwrap();
        let leaves = Arc::clone(&lock).lock(1);
        let granted_then_dropped = Arc::clone(&lock).lock(2);
        let mut last = Box::pin(Arc::clone(&lock).lock(3));
        drop(leaves);
        drop(held);
        // Handed to user 2, which goes away without taking it: it passes on to user 3.
        drop(granted_then_dropped);
        let guard = last.as_mut().now_or_never().expect("passed on");
        drop(guard);
        assert!(lock.try_lock().is_some());
    }
}
