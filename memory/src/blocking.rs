//! A user's share of the blocking threads: the synchronous computing of a hosted user's
//! statements (knowledge-base searches, uploads being decoded, local embeddings) runs for at
//! most [`share()`](crate::share()) of them at once, the same number as its share of the runtime's
//! workers, and each statement's parallel parts (a UNION ALL of searches runs one per branch)
//! on at most as many jobs. Past either, the work waits for a place (as `Pending`, holding no
//! thread), first come first served among the waiters the share admits, and a freed place is
//! handed straight to the next. Without a share, one user's thirty uploads and searches had as
//! many threads computing on the cores, and the operating system gave a second user's request
//! as small a part of them.
//!
//! A place is held only while its job computes, so every place comes back: a job waiting
//! while it holds one could wait for a user's other work that needs one. The job's place is
//! kept on its thread ([`hold`]); a job that must wait (a write, for a stream of its plan, for
//! its embedding model, for a lock) waits through [`without_place`], which gives the place
//! back for the wait and takes one again after, in turn, but for at most 50 ms (`RETAKE_WAIT`):
//! then it goes on over the share. A job on a thread must not wait for a place without end:
//! jobs waiting on their threads for places that went to jobs waiting for a thread could fill
//! the runtime's blocking pool, every user's. Before it waits for the store's writer lock a
//! job gives its place up for good ([`give_up_place`]): from then on it holds the lock every
//! other writer waits for. Core runs
//! trainings' fits (capped by the plan's `max_running_trainings`) and work that holds the
//! writer lock from its start outside the share. Work without a parent account (the local
//! edition's, background work) takes no place. The cost is one lock of a small table per
//! blocking job of a hosted user, and per wait of one, none otherwise.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;

use futures::channel::oneshot;
use parking_lot::Mutex;

use crate::Tag;

/// One user's blocking work.
#[derive(Default)]
struct User {
    /// Statements (their own part of a tag) with blocking work running, and how many jobs each.
    running: BTreeMap<u64, usize>,
    /// Jobs waiting for a place (each by its statement's part of a tag), first come first.
    waiting: VecDeque<(u64, oneshot::Sender<BlockingPlace>)>,
}

/// Users with blocking work running or waiting, by their parent account's part of a tag (slot
/// and generation, so a closed user's leftovers never count for the slot's next user).
static USERS: Mutex<BTreeMap<u64, User>> = parking_lot::const_mutex(BTreeMap::new());

/// A statement's place among its user's blocking threads, given back when dropped (at the
/// end of the blocking job that holds it, however it ends).
#[must_use = "the place is given back when it is dropped"]
pub struct BlockingPlace {
    /// The user's part of a tag (0: no place was needed).
    parent: u64,
    /// The statement's.
    own: u64,
}

impl std::fmt::Debug for BlockingPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingPlace")
            .field("held", &(self.parent != 0))
            .finish()
    }
}

impl Drop for BlockingPlace {
    fn drop(&mut self) {
        if self.parent != 0 {
            give_back(self.parent, self.own);
        }
    }
}

impl User {
    /// Whether a job of the statement `own` may start now: within the user's share of
    /// statements, and within the statement's share of jobs.
    fn admits(&self, own: u64, share: u32) -> bool {
        match self.running.get(&own) {
            Some(&jobs) => jobs < share as usize,
            None => self.running.len() < share as usize,
        }
    }

    /// Counts a job of `own` as running.
    fn start(&mut self, own: u64) {
        *self.running.entry(own).or_insert(0) += 1;
    }
}

/// Waits for a place for the blocking work of the account `tag` names; hold it while the work
/// runs. At once when no place is needed (no parent account, no share set), or when the user
/// is within its share and the statement within its jobs. Only for work that waits for
/// nothing while it holds the place (see the module's comment).
pub async fn blocking_place(tag: Tag) -> BlockingPlace {
    take(tag.parent(), tag.own()).await
}

/// [`blocking_place`] for the user `parent` and the statement `own` (parts of a tag).
async fn take(parent: u64, own: u64) -> BlockingPlace {
    let share = crate::share::share();
    if parent == 0 || share == 0 {
        return BlockingPlace { parent: 0, own: 0 };
    }
    loop {
        let receiver = {
            let mut users = USERS.lock();
            let user = users.entry(parent).or_default();
            if user.admits(own, share) {
                user.start(own);
                return BlockingPlace { parent, own };
            }
            // Waiters that gave up are dropped here too, so they never pile up while the
            // user's places are held.
            user.waiting.retain(|(_, sender)| !sender.is_canceled());
            let (sender, receiver) = oneshot::channel();
            user.waiting.push_back((own, sender));
            receiver
        };
        // A place handed over arrives counted; dropping this future before it arrives leaves
        // the sender to find the receiver gone and hand the place on.
        if let Ok(place) = receiver.await {
            return place;
        }
        // The sender was dropped unsent (it is not, while waiters are kept): ask again.
    }
}

thread_local! {
    /// The place the blocking job on this thread holds while it computes (see [`hold`]).
    static HELD: RefCell<Option<BlockingPlace>> = const { RefCell::new(None) };
    /// Whom the job on this thread takes a place for again after a wait: its user's and its
    /// statement's parts of a tag, until it gives its place up for good.
    static JOB: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// A blocking job's hold on its place while it runs on this thread; ends it when dropped.
#[must_use = "the place is given back when this is dropped"]
pub struct Holding {
    _thread: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Holding")
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        JOB.with(|job| job.set(None));
        let place = HELD.with(|held| held.borrow_mut().take());
        drop(place);
    }
}

/// Keeps `place` as the place of the blocking job now running on this thread, for
/// [`without_place`] and [`give_up_place`], until the returned guard is dropped.
pub fn hold(place: BlockingPlace) -> Holding {
    JOB.with(|job| job.set((place.parent != 0).then_some((place.parent, place.own))));
    let before = HELD.with(|held| held.borrow_mut().replace(place));
    drop(before);
    Holding {
        _thread: std::marker::PhantomData,
    }
}

/// How long a job on a thread waits for its turn to compute again after a wait, before it
/// goes on over its user's share (see the module's comment). Long enough for the user's other
/// jobs to take their turns (their steps between checks last milliseconds), short enough
/// that a pool filling with such waiters frees itself.
const RETAKE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs `wait`, a wait for something other work of the user may need a place to finish (a
/// stream of the job's plan, a lock, another job), without this thread's place, and takes a
/// place again after, waiting for its turn at most 50 ms (`RETAKE_WAIT`) and then going on over the
/// share, unless the wait gave the place up for good. Without a place held it only runs
/// `wait`.
pub fn without_place<T>(wait: impl FnOnce() -> T) -> T {
    let place = HELD.with(|held| held.borrow_mut().take());
    if place.is_none() {
        return wait();
    }
    drop(place);
    let out = wait();
    if let Some((parent, own)) = JOB.with(Cell::get) {
        let again = take_within(parent, own, RETAKE_WAIT).unwrap_or_else(|| {
            USERS.lock().entry(parent).or_default().start(own);
            BlockingPlace { parent, own }
        });
        let before = HELD.with(|held| held.borrow_mut().replace(again));
        drop(before);
    }
    out
}

/// [`take`] on this thread, waiting at most `limit`; `None` when the time ran out (the waiter
/// is dropped: a place handed to it meanwhile goes on to the next).
fn take_within(parent: u64, own: u64, limit: std::time::Duration) -> Option<BlockingPlace> {
    use std::task::{Context, Poll, Wake};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut taking = Box::pin(take(parent, own));
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Poll::Ready(place) = taking.as_mut().poll(&mut cx) {
            return Some(place);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// Gives this thread's place back for the rest of its job: before a wait after which the job
/// must not wait for a place (it will hold the store's writer lock).
pub fn give_up_place() {
    JOB.with(|job| job.set(None));
    let place = HELD.with(|held| held.borrow_mut().take());
    drop(place);
}

/// Gives back one job's hold on its statement's place and hands what that frees to waiters.
fn give_back(parent: u64, own: u64) {
    let share = crate::share::share();
    let handed = {
        let mut users = USERS.lock();
        let Some(user) = users.get_mut(&parent) else {
            return;
        };
        if let Some(jobs) = user.running.get_mut(&own) {
            *jobs -= 1;
            if *jobs == 0 {
                user.running.remove(&own);
            }
        }
        // Waiters that gave up go first.
        user.waiting.retain(|(_, sender)| !sender.is_canceled());
        let mut handed = Vec::new();
        // The first waiter that may start, again and again: first come first served among
        // those the share and their statement's jobs admit.
        while let Some(next) = user
            .waiting
            .iter()
            .position(|&(waiter, _)| user.admits(waiter, share))
        {
            let Some((waiter, sender)) = user.waiting.remove(next) else {
                break;
            };
            user.start(waiter);
            handed.push((
                sender,
                BlockingPlace {
                    parent,
                    own: waiter,
                },
            ));
        }
        if user.running.is_empty() && user.waiting.is_empty() {
            users.remove(&parent);
        }
        handed
    };
    // Outside the table's lock: a waiter that went away meanwhile gives its place back
    // through the returned place's drop, which takes the lock again.
    for (sender, place) in handed {
        drop(sender.send(place));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Account;
    use futures::task::noop_waker;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(&noop_waker()))
    }

    fn taken<F: Future<Output = BlockingPlace> + Unpin>(
        future: &mut F,
        why: &str,
    ) -> BlockingPlace {
        match poll(future) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("{why}"),
        }
    }

    #[test]
    fn a_users_statements_and_their_parts_take_turns_for_blocking_threads() {
        let _serial = crate::share::TESTS.lock();
        crate::set_share(2);
        let user = Arc::new(Account::open(None, None).unwrap());
        let [first, second, third, fourth] =
            std::array::from_fn(|_| Account::open(None, Some(Arc::clone(&user))).unwrap());
        let other_user = Arc::new(Account::open(None, None).unwrap());
        let others = Account::open(None, Some(Arc::clone(&other_user))).unwrap();
        let no_user = Account::open(None, None).unwrap();

        // The first statement runs two parts (the share); its third waits for one of them.
        let part_one = taken(&mut Box::pin(blocking_place(first.tag())), "a free place");
        let part_two = taken(
            &mut Box::pin(blocking_place(first.tag())),
            "its second part",
        );
        let mut part_three = Box::pin(blocking_place(first.tag()));
        assert!(poll(&mut part_three).is_pending());
        // A second statement takes the user's second place; the third and fourth wait, in
        // order. Another user and work with no user never wait.
        let second_place = taken(&mut Box::pin(blocking_place(second.tag())), "a free place");
        let mut third_waits = Box::pin(blocking_place(third.tag()));
        let mut fourth_waits = Box::pin(blocking_place(fourth.tag()));
        assert!(poll(&mut third_waits).is_pending());
        assert!(poll(&mut fourth_waits).is_pending());
        assert!(poll(&mut Box::pin(blocking_place(others.tag()))).is_ready());
        assert!(poll(&mut Box::pin(blocking_place(no_user.tag()))).is_ready());

        // A part of the first statement ends: its waiting part takes the job, not another
        // statement (the user still runs two).
        drop(part_one);
        let part_three = taken(&mut part_three, "the freed job goes to the waiting part");
        assert!(poll(&mut third_waits).is_pending());
        // The first statement ends: its place goes to the third, first in line.
        drop(part_two);
        assert!(poll(&mut third_waits).is_pending(), "one part still runs");
        drop(part_three);
        let third_place = taken(&mut third_waits, "the first in line");
        assert!(poll(&mut fourth_waits).is_pending());

        // A waiter that gives up is passed over: the place goes on to the one behind it.
        let fifth = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let mut fifth_waits = Box::pin(blocking_place(fifth.tag()));
        assert!(poll(&mut fifth_waits).is_pending());
        drop(fourth_waits);
        drop(second_place);
        assert!(poll(&mut fifth_waits).is_ready());
        drop(third_place);
        assert!(
            USERS.lock().get(&user.tag().own()).is_none(),
            "nothing kept"
        );
        crate::set_share(0);
    }

    #[test]
    fn a_job_waits_without_its_place_and_gives_it_up_before_the_writer_lock() {
        let _serial = crate::share::TESTS.lock();
        crate::set_share(1);
        let user = Arc::new(Account::open(None, None).unwrap());
        let [writer, other, third] =
            std::array::from_fn(|_| Account::open(None, Some(Arc::clone(&user))).unwrap());
        let running = |own: &Account| {
            USERS
                .lock()
                .get(&user.tag().own())
                .is_some_and(|u| u.running.contains_key(&own.tag().own()))
        };
        let holding = hold(taken(
            &mut Box::pin(blocking_place(writer.tag())),
            "a free place",
        ));
        let mut other_waits = Box::pin(blocking_place(other.tag()));
        assert!(poll(&mut other_waits).is_pending(), "the writer computes");

        // While the writer waits (for its plan's stream, say), the other statement computes;
        // the writer takes its turn again when that one gives its place back.
        let given_back = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let computed = without_place(|| {
            assert!(!running(&writer), "no place held while waiting");
            let place = taken(&mut other_waits, "the writer's place while it waits");
            let given_back = Arc::clone(&given_back);
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                given_back.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(place);
            });
            7
        });
        assert_eq!(computed, 7);
        assert!(given_back.load(std::sync::atomic::Ordering::SeqCst));
        assert!(running(&writer), "its turn again after the wait");

        // A place that does not come back within RETAKE_WAIT: the writer goes on over the
        // share rather than hold its thread waiting; a job that has not started still waits.
        let mut other_place = None;
        without_place(|| {
            other_place = Some(taken(
                &mut Box::pin(blocking_place(other.tag())),
                "the writer's place while it waits",
            ));
        });
        assert!(
            running(&writer) && running(&other),
            "both compute, one over the share"
        );
        let mut third_waits = Box::pin(blocking_place(third.tag()));
        assert!(poll(&mut third_waits).is_pending(), "a new job waits");
        drop(other_place);
        assert!(
            poll(&mut third_waits).is_pending(),
            "still the share's one running"
        );

        // Before the writer lock: given up for good, and not taken again after the wait.
        without_place(give_up_place);
        assert!(!running(&writer));
        let third_place = taken(&mut third_waits, "the writer's place");
        without_place(|| ());
        assert!(!running(&writer));
        drop(holding);
        drop(third_place);
        assert!(
            USERS.lock().get(&user.tag().own()).is_none(),
            "nothing kept"
        );
        crate::set_share(0);
    }
}
