//! A user's share of the threads: the work of every account under one parent (a hosted user's
//! statements, its trainings, the tasks they spawn) is polled on at most [`set_share`] threads
//! at once, whatever runs it (the runtime's workers, blocking threads driving a stream; the
//! planning pool has its own share per user, see core's `compute`). A poll past the share waits — as `Pending`, holding no thread — until one of
//! that user's polls ends; other users' polls never wait for it. So one user with thirty
//! statements computing at once holds as many threads as one with two, and a second user's
//! short statement, and every connection the server reads and writes on those threads, finds a
//! thread free.
//!
//! The share is taken around each poll, not for a statement's life: a poll computes at most a
//! bounded amount (DataFusion's operators give way every few batches), so a statement that
//! waits for its share waits for a poll, not for another statement. Polls nested inside a
//! poll on the same thread (a stream polled by its parent operator) take nothing more. Work
//! without a parent account (the local edition's, which has one user) is never held back.
//!
//! Cost when nobody waits: one compare-and-swap and one subtraction on the user's counter and
//! one load per poll. Waiters are woken all at once when a poll ends (each tries again), so a
//! waiter whose future was dropped, or that was woken for another reason first, can never
//! leave the others waiting with a thread free.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::SLOTS;

/// Threads one parent's work may be polled on at once (0: no limit).
static SHARE: AtomicU32 = AtomicU32::new(0);

/// One parent account's gate, in a static table beside the accounts' slots.
struct Gate {
    /// Polls of its work running now.
    polling: AtomicU32,
    /// [`Urgent`] marks on the account in this slot (as a child, not as a parent).
    urgent: AtomicU32,
    /// Whether anything may be waiting in `wakers` (set before trying to take a place, so a
    /// poll that ends at the same moment sees it).
    waiting: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Gate {
    const fn new() -> Gate {
        Gate {
            polling: AtomicU32::new(0),
            urgent: AtomicU32::new(0),
            waiting: AtomicBool::new(false),
            wakers: parking_lot::const_mutex(Vec::new()),
        }
    }

    fn take(&self, share: u32) -> bool {
        self.polling
            .fetch_update(SeqCst, SeqCst, |n| (n < share).then_some(n + 1))
            .is_ok()
    }

    fn give_back(&self) {
        self.polling.fetch_sub(1, SeqCst);
        if self.waiting.load(SeqCst) {
            let woken = {
                let mut wakers = self.wakers.lock();
                self.waiting.store(false, SeqCst);
                std::mem::take(&mut *wakers)
            };
            for waker in woken {
                waker.wake();
            }
        }
    }
}

static GATES: [Gate; SLOTS] = [const { Gate::new() }; SLOTS];

thread_local! {
    /// Whether this thread is inside a poll that holds a place.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Sets how many threads one parent account's work may be polled on at once (0: no limit).
/// Process-wide: the hosted engine sets it to half its workers when it opens.
pub fn set_share(threads: u32) {
    SHARE.store(threads, SeqCst);
}

/// The share [`set_share`] set.
pub fn share() -> u32 {
    SHARE.load(SeqCst)
}

/// Polls of the work of the parent account in slot `parent` running now (a test's view).
pub fn polling(parent: usize) -> u32 {
    GATES.get(parent).map_or(0, |g| g.polling.load(SeqCst))
}

/// While it lives, the work of the account it was made for has one place more than its
/// parent's share, which the parent's other work cannot take: that work holds something every
/// user may be waiting for (the store's writer lock), and holding it back behind its own
/// user's other work would make them all wait.
pub struct Urgent(usize);

impl Drop for Urgent {
    fn drop(&mut self) {
        if self.0 != 0 {
            GATES[self.0].urgent.fetch_sub(1, SeqCst);
        }
    }
}

/// Marks the account `tag` names urgent until the mark is dropped (nothing without an account).
/// Meant for a short hold: were the account closed and its slot reused meanwhile, the new
/// account would be urgent too until then.
pub fn urgent(tag: crate::Tag) -> Urgent {
    let own = crate::split(tag.own()).0;
    if own != 0 {
        GATES[own].urgent.fetch_add(1, SeqCst);
    }
    Urgent(own)
}

/// Gives a place back when the poll ends, however it ends.
struct Held(&'static Gate);

impl Drop for Held {
    fn drop(&mut self) {
        INSIDE.with(|inside| inside.set(false));
        self.0.give_back();
    }
}

/// Runs one poll of the work of the account in slot `own`, whose parent is in slot `parent`
/// (0: none), within that parent's share (one place more if the account is [`Urgent`]): at
/// once if a place is free, else `Pending`, with `cx`'s waker woken when a place frees.
pub(crate) fn poll<T>(
    own: usize,
    parent: usize,
    cx: &mut Context<'_>,
    inner: impl FnOnce(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let share = SHARE.load(SeqCst);
    if parent == 0 || share == 0 || INSIDE.with(Cell::get) {
        return inner(cx);
    }
    // Urgent work has one place more than the share, which the rest cannot take: never held
    // back behind its user's other work, and never more than one thread beyond the share
    // (a statement that holds the writer lock while it runs a whole plan stays within it).
    let share = if GATES[own].urgent.load(SeqCst) > 0 {
        share + 1
    } else {
        share
    };
    let gate = &GATES[parent];
    if !gate.take(share) {
        let mut wakers = gate.wakers.lock();
        gate.waiting.store(true, SeqCst);
        if !gate.take(share) {
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        gate.waiting.store(!wakers.is_empty(), SeqCst);
    }
    let _held = Held(gate);
    INSIDE.with(|inside| inside.set(true));
    inner(cx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Account, InScope};
    use futures::task::ArcWake;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{mpsc, Arc};

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl ArcWake for Count {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, SeqCst);
        }
    }

    fn poll_once<F: Future + Unpin>(future: &mut F, woken: &Arc<Count>) -> Poll<F::Output> {
        let waker = futures::task::waker(Arc::clone(woken));
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_users_work_is_polled_on_at_most_its_share_of_threads() {
        set_share(1);
        let user = Arc::new(Account::open(None, None).unwrap());
        let first = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let second = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let other_user = Arc::new(Account::open(None, None).unwrap());
        let others = Account::open(None, Some(Arc::clone(&other_user))).unwrap();
        let no_user = Account::open(None, None).unwrap();

        // A poll of the first statement's work that holds its thread until told to end.
        let (inside, entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let tag = first.tag();
        let nested_tag = second.tag();
        let holder = std::thread::spawn(move || {
            let mut work = InScope::new(
                tag,
                Box::pin(async move {
                    // A poll nested inside it, of the same user's work: takes nothing more.
                    let nested = InScope::new(nested_tag, Box::pin(async { 7 })).await;
                    inside.send(nested).unwrap();
                    released.recv().unwrap();
                }),
            );
            poll_once(&mut work, &Arc::new(Count::default())).is_ready()
        });
        assert_eq!(entered.recv().unwrap(), 7);
        assert_eq!(user.polling(), 1);

        // Marked urgent (it holds the writer lock), the same user's statement has one place
        // more than the share; unmarked, it waits again.
        let urgent_one = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let urgent_woken = Arc::new(Count::default());
        let mark = urgent(urgent_one.tag());
        let mut pressing = InScope::new(urgent_one.tag(), Box::pin(async { 4 }));
        assert_eq!(poll_once(&mut pressing, &urgent_woken), Poll::Ready(4));
        drop(mark);
        let mut later = InScope::new(urgent_one.tag(), Box::pin(async { 5 }));
        assert!(
            poll_once(&mut later, &urgent_woken).is_pending(),
            "no longer urgent"
        );

        // The same user's other statement waits, holding no thread; another user's work and
        // work with no user run.
        let woken = Arc::new(Count::default());
        let mut waiting = InScope::new(second.tag(), Box::pin(async { 1 }));
        assert!(poll_once(&mut waiting, &woken).is_pending());
        assert!(poll_once(&mut waiting, &woken).is_pending());
        let mut other = InScope::new(others.tag(), Box::pin(async { 2 }));
        assert_eq!(poll_once(&mut other, &woken), Poll::Ready(2));
        let mut alone = InScope::new(no_user.tag(), Box::pin(async { 3 }));
        assert_eq!(poll_once(&mut alone, &woken), Poll::Ready(3));
        assert_eq!(woken.0.load(SeqCst), 0);
        assert_eq!(other_user.polling(), 0, "its place was given back");

        // The holding poll ends: the waiter is woken (once, though it registered twice) and
        // runs.
        release.send(()).unwrap();
        assert!(holder.join().unwrap());
        assert_eq!(user.polling(), 0);
        assert_eq!(
            woken.0.load(SeqCst),
            1,
            "one wake-up for the task both waited in"
        );
        assert_eq!(urgent_woken.0.load(SeqCst), 1);
        assert_eq!(poll_once(&mut waiting, &woken), Poll::Ready(1));
        assert_eq!(poll_once(&mut later, &urgent_woken), Poll::Ready(5));
        set_share(0);
    }
}
