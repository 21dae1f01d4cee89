//! The store's writer lock, handed out in turns between users: when it is let go it goes to the
//! next user in line, not to the next caller, so a user's writes queue behind its own and
//! another user's one-row INSERT waits for at most one write of each user ahead of it, however
//! many a user has queued. Within a user it is first come, first served. A user is the parent
//! memory account of the work that asks (a hosted user's account, see `memory`); work with no
//! parent (the local edition's, background work) is one more user.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

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
}

/// One caller's place in line.
#[derive(Debug, Default)]
struct Place {
    /// Set (under the state's lock) when the lock is handed to this place.
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// The lock, held until dropped.
#[derive(Debug)]
pub(crate) struct TurnGuard {
    lock: Arc<TurnLock>,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.lock.pass_on();
    }
}

impl State {
    /// The next place in turn, taken out of line.
    fn next(&mut self) -> Option<Arc<Place>> {
        let user = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&user)?;
        let place = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&user);
        } else {
            self.turns.push_back(user);
        }
        place
    }
}

impl TurnLock {
    /// Waits for the lock as `user`.
    pub(crate) fn lock(self: Arc<Self>, user: u64) -> impl Future<Output = TurnGuard> + Send {
        let place = {
            let mut state = self.state.lock();
            if state.held {
                let place = Arc::new(Place::default());
                let queue = state.queues.entry(user).or_default();
                queue.push_back(Arc::clone(&place));
                if queue.len() == 1 {
                    state.turns.push_back(user);
                }
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
        Poll::Ready(TurnGuard { lock })
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
