//! A user's share of the threads: the work of every account under one parent (a hosted user's
//! statements, its trainings, the tasks they spawn) is polled on at most [`set_share`] threads
//! at once, whatever runs it (the runtime's workers, blocking threads driving a stream; the
//! planning pool has its own share per user, see core's `compute`, and so do the blocking
//! threads, see `blocking`). A poll past the share
//! waits — as `Pending`, holding no thread — until one of that user's polls ends; other users'
//! polls never wait for it. So one user with thirty statements computing at once holds as many
//! threads as one with two, and a second user's short statement, and every connection the
//! server reads and writes on those threads, finds a thread free.
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
//!
//! Gates live in a table beside the accounts' slots, and a slot is reused as soon as its
//! account closes, even while that account's abandoned work finishes its last poll. Counts
//! therefore carry the account's generation: a user whose account lands in the slot of another
//! user's closed one never waits for that user's leftovers (it did, for seconds, when a
//! statement stopped at its deadline in the middle of a long join).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::SLOTS;

/// Threads one parent's work may be polled on at once (0: no limit).
static SHARE: AtomicU32 = AtomicU32::new(0);

/// One parent account's gate, in a static table beside the accounts' slots. A slot is
/// reused once its account closes, while work of the closed account may still be running (a
/// statement abandoned at its deadline stops at its next check, which can be a long poll
/// away). So the counts carry the generation they are for: the slot's next account never
/// waits for its predecessor's leftovers, and they never give back a place it took.
/// Generations are 16 bits, as in allocation tags: a leftover still polling after its slot
/// went through 65,536 accounts would count as the live one's for that poll, which corrects
/// itself when the poll ends.
struct Gate {
    /// Polls of its work running now: the parent's generation (high half) and their count.
    polling: AtomicU64,
    /// [`Urgent`] marks on the account in this slot (as a child, not as a parent): its
    /// generation (high half) and their count.
    urgent: AtomicU64,
    /// Whether anything may be waiting in `wakers` (set before trying to take a place, so a
    /// poll that ends at the same moment sees it).
    waiting: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

/// A generation and a count in one word.
fn pack(generation: u64, count: u32) -> u64 {
    (generation << 32) | u64::from(count)
}

fn unpack(word: u64) -> (u64, u32) {
    (word >> 32, word as u32)
}

/// What a poll got from its parent's gate.
enum Place {
    /// A place, given back when the poll ends.
    Taken,
    /// None free: wait.
    Full,
    /// The poll is a closed account's leftover and the slot has a new account: it runs
    /// outside the gate (it is orphaned, and stops at its next check).
    Outside,
}

impl Gate {
    const fn new() -> Gate {
        Gate {
            polling: AtomicU64::new(0),
            urgent: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            wakers: parking_lot::const_mutex(Vec::new()),
        }
    }

    /// Takes a place for a poll of the work of the parent of `generation` in this slot;
    /// `live` tells the generation of the slot's account now.
    fn take(&self, generation: u64, live: impl Fn() -> u64, share: u32) -> Place {
        let mut word = self.polling.load(SeqCst);
        loop {
            let (counted, polling) = unpack(word);
            let next = if counted == generation {
                if polling >= share {
                    return Place::Full;
                }
                pack(generation, polling + 1)
            } else if live() == generation {
                // The slot's account now: what is counted is its predecessor's leftovers.
                pack(generation, 1)
            } else {
                return Place::Outside;
            };
            match self
                .polling
                .compare_exchange_weak(word, next, SeqCst, SeqCst)
            {
                Ok(_) => return Place::Taken,
                Err(now) => word = now,
            }
        }
    }

    fn give_back(&self, generation: u64) {
        // A no-op when the count has passed to the slot's next account.
        let _ = self.polling.fetch_update(SeqCst, SeqCst, |word| {
            let (counted, polling) = unpack(word);
            (counted == generation && polling > 0).then(|| pack(generation, polling - 1))
        });
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

    /// Marks the account of `generation` in this slot urgent once more (`live`: the
    /// generation of the slot's account now). The live account's mark replaces a closed
    /// one's; a closed account's mark never replaces the live one's (it marks nothing then,
    /// and its end takes nothing off).
    fn mark(&self, generation: u64, live: impl Fn() -> u64) {
        let _ = self
            .urgent
            .fetch_update(SeqCst, SeqCst, |word| match unpack(word) {
                (marked, marks) if marked == generation => Some(pack(generation, marks + 1)),
                (_, 0) => Some(pack(generation, 1)),
                _ if live() == generation => Some(pack(generation, 1)),
                _ => None,
            });
    }

    /// Takes one mark off; a no-op when the slot's next account has marks of its own.
    fn unmark(&self, generation: u64) {
        let _ = self.urgent.fetch_update(SeqCst, SeqCst, |word| {
            let (marked, marks) = unpack(word);
            (marked == generation && marks > 0).then(|| pack(generation, marks - 1))
        });
    }

    /// Whether the account of `generation` in this slot is marked urgent.
    fn is_urgent(&self, generation: u64) -> bool {
        let (marked, marks) = unpack(self.urgent.load(SeqCst));
        marked == generation && marks > 0
    }
}

static GATES: [Gate; SLOTS] = [const { Gate::new() }; SLOTS];

/// Tests that set the process-wide share take turns.
#[cfg(test)]
pub(crate) static TESTS: Mutex<()> = parking_lot::const_mutex(());

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

/// Polls of the work of the parent account `part` (its slot and generation) running now.
pub(crate) fn polling(part: u64) -> u32 {
    let (index, generation) = crate::split(part);
    GATES.get(index).map_or(0, |gate| {
        let (counted, polling) = unpack(gate.polling.load(SeqCst));
        if counted == generation {
            polling
        } else {
            0
        }
    })
}

/// While it lives, the work of the account it was made for has one place more than its
/// parent's share, which the parent's other work cannot take: that work holds something every
/// user may be waiting for (the store's writer lock), and holding it back behind its own
/// user's other work would make them all wait.
pub struct Urgent {
    /// The account's slot (0: none) and generation.
    index: usize,
    generation: u64,
}

impl Drop for Urgent {
    fn drop(&mut self) {
        if self.index != 0 {
            GATES[self.index].unmark(self.generation);
        }
    }
}

/// Marks the account `tag` names urgent until the mark is dropped (nothing without an account).
/// A mark outliving its account marks nothing: the slot's next account starts unmarked.
pub fn urgent(tag: crate::Tag) -> Urgent {
    let (index, generation) = crate::split(tag.own());
    if index != 0 {
        GATES[index].mark(generation, || crate::live_generation(index));
    }
    Urgent { index, generation }
}

/// Marks the thread as inside a poll, and gives its place back (if it took one) when the poll
/// ends, however it ends.
struct Held {
    place: Option<(&'static Gate, u64)>,
}

impl Held {
    fn enter(place: Option<(&'static Gate, u64)>) -> Held {
        INSIDE.with(|inside| inside.set(true));
        Held { place }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        INSIDE.with(|inside| inside.set(false));
        if let Some((gate, generation)) = self.place {
            gate.give_back(generation);
        }
    }
}

/// Runs one poll of the work of the account `own` (a tag's slot-and-generation part), whose
/// parent is `parent` (0: none), within that parent's share (one place more if the account is
/// [`Urgent`]): at once if a place is free, else `Pending`, with `cx`'s waker woken when a
/// place frees.
pub(crate) fn poll<T>(
    own: u64,
    parent: u64,
    cx: &mut Context<'_>,
    inner: impl FnOnce(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let share = SHARE.load(SeqCst);
    let (parent_index, generation) = crate::split(parent);
    if parent_index == 0 || share == 0 || INSIDE.with(Cell::get) {
        return inner(cx);
    }
    // Urgent work has one place more than the share, which the rest cannot take: never held
    // back behind its user's other work, and never more than one thread beyond the share
    // (a statement that holds the writer lock while it runs a whole plan stays within it).
    let (own_index, own_generation) = crate::split(own);
    let share = if GATES[own_index].is_urgent(own_generation) {
        share + 1
    } else {
        share
    };
    let gate = &GATES[parent_index];
    let live = || crate::live_generation(parent_index);
    let place = match gate.take(generation, live, share) {
        Place::Taken => Some((gate, generation)),
        Place::Outside => None,
        Place::Full => {
            let mut wakers = gate.wakers.lock();
            gate.waiting.store(true, SeqCst);
            match gate.take(generation, live, share) {
                Place::Taken => {
                    gate.waiting.store(!wakers.is_empty(), SeqCst);
                    Some((gate, generation))
                }
                Place::Outside => {
                    gate.waiting.store(!wakers.is_empty(), SeqCst);
                    None
                }
                Place::Full => {
                    if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        wakers.push(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    };
    // A leftover outside the gate is still a poll: the polls nested in it take nothing.
    let _held = Held::enter(place);
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
        let _serial = TESTS.lock();
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

    #[test]
    fn a_closed_parents_leftover_polls_never_hold_back_the_next_account_in_its_slot() {
        let gate = Gate::new();
        // The parent of generation 5 holds its one place.
        assert!(matches!(gate.take(5, || 5, 1), Place::Taken));
        assert!(matches!(gate.take(5, || 5, 1), Place::Full));
        // It closes while that poll runs (abandoned at its deadline, say); the slot's next
        // account, generation 6, takes a place at once.
        assert!(matches!(gate.take(6, || 6, 1), Place::Taken));
        assert!(matches!(gate.take(6, || 6, 1), Place::Full));
        // The leftover poll ends: it gives back nothing of the new account's.
        gate.give_back(5);
        assert_eq!(unpack(gate.polling.load(SeqCst)), (6, 1));
        // Another leftover poll runs outside the gate, counted nowhere.
        assert!(matches!(gate.take(5, || 6, 1), Place::Outside));
        assert_eq!(unpack(gate.polling.load(SeqCst)), (6, 1));
        gate.give_back(6);
        assert_eq!(unpack(gate.polling.load(SeqCst)), (6, 0));

        // An urgent mark that outlives its account marks nothing of the next one's, and its
        // end takes nothing off the next one's marks.
        gate.mark(5, || 5);
        assert!(gate.is_urgent(5));
        assert!(!gate.is_urgent(6), "the next account starts unmarked");
        gate.mark(6, || 6);
        gate.unmark(5);
        assert!(gate.is_urgent(6));
        // A closed account's work marking itself late replaces nothing of the live one's.
        gate.mark(5, || 6);
        assert!(gate.is_urgent(6) && !gate.is_urgent(5));
        gate.unmark(5);
        assert!(gate.is_urgent(6));
        gate.unmark(6);
        assert!(!gate.is_urgent(6));
        // Unmarked, the slot takes anyone's mark.
        gate.mark(5, || 6);
        assert!(gate.is_urgent(5));
        gate.unmark(5);
    }
}
