//! A user's share of the blocking threads: the synchronous work of a hosted user's statements
//! (writes' row loops and commits, uploads being decoded, knowledge-base searches, local
//! embeddings) runs for at most [`crate::share`] of them at once, the same number as its
//! share of the runtime's workers. Past it, a statement waits for a place (as `Pending`,
//! holding no thread), first come first served, and the place is handed straight to it when
//! one of the user's statements finishes its blocking work. Without this, one user's writes
//! and uploads had up to six threads computing at once on the hostile benchmark's two cores,
//! and the operating system gave a second user's one-row INSERT a share of the cores as small.
//!
//! Places are per statement (per account), not per job: a statement with blocking work
//! running may start more jobs without another place, up to the share (at least two) at once.
//! Its parallel parts (a UNION ALL of knowledge-base searches) take turns within that, and the
//! second job keeps a write, whose job waits for nested blocking work of its own statement (a
//! search its rows come from, its commit through the store), from waiting for itself. Across
//! statements of one user the only wait inside blocking work is for the store's writer lock,
//! and whoever holds it or waits for it is [`crate::urgent`]: urgent work has one place beyond
//! the share and one job beyond its statement's, as it has a poll beyond the share, so the
//! lock's holder never waits behind work that waits for it, nor with the lock idle.
//!
//! Work without a parent account (the local edition's, background work) takes no place, nor
//! does work whose concurrency has a cap of its own (core runs trainings' fits, capped by the
//! plan's `max_running_trainings`, outside the share, so that a user's fits never hold every
//! place while its one-row INSERTs wait for them). The cost is one lock of a small table per
//! blocking job of a hosted user, none otherwise.

use std::collections::{BTreeMap, VecDeque};

use futures::channel::oneshot;
use parking_lot::Mutex;

use crate::Tag;

/// One user's blocking work.
#[derive(Default)]
struct User {
    /// Statements (their own part of a tag) with blocking work running, and how many jobs each.
    running: BTreeMap<u64, usize>,
    /// Statements waiting for a place, first come first.
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

/// Jobs one statement may run at once: its parallel parts (a UNION ALL of knowledge-base
/// searches runs a search per branch) take turns within this. At least two, so that a write's
/// job always leaves room for the nested work it waits for (a search its rows come from, its
/// commit); nested work is at most one level deep, and only a write's job waits for it.
fn jobs_per_statement(share: u32) -> usize {
    (share as usize).max(2)
}

impl User {
    /// Whether a job of the statement `own` may start now. Urgent work (holding or waiting
    /// for the writer lock) has one place beyond the user's share and one job beyond the
    /// statement's, so that it never waits with the writer lock idle.
    fn admits(&self, own: u64, share: u32) -> bool {
        let extra = usize::from(crate::share::is_urgent(own));
        match self.running.get(&own) {
            Some(&jobs) => jobs < jobs_per_statement(share) + extra,
            None => self.running.len() < share as usize + extra,
        }
    }

    /// Counts a job of `own` as running.
    fn start(&mut self, own: u64) {
        *self.running.entry(own).or_insert(0) += 1;
    }
}

/// Waits for a place for the blocking work of the account `tag` names; hold it while the work
/// runs. At once when no place is needed (no parent account, no share set), or when the user
/// is within its share and the statement within its jobs.
pub async fn blocking_place(tag: Tag) -> BlockingPlace {
    let share = crate::share::share();
    let (parent, own) = (tag.parent(), tag.own());
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
    use crate::{urgent, Account};
    use futures::task::noop_waker;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    fn poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(&noop_waker()))
    }

    #[test]
    fn a_users_statements_take_turns_for_blocking_threads_and_the_urgent_one_passes() {
        let _serial = crate::share::TESTS.lock();
        crate::set_share(1);
        let user = Arc::new(Account::open(None, None).unwrap());
        let first = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let second = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let third = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let writer = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let other_user = Arc::new(Account::open(None, None).unwrap());
        let others = Account::open(None, Some(Arc::clone(&other_user))).unwrap();
        let no_user = Account::open(None, None).unwrap();

        // The first statement takes the user's one place, and its nested job rides on it.
        let held = match poll(&mut Box::pin(blocking_place(first.tag()))) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("a free place is taken at once"),
        };
        let nested = match poll(&mut Box::pin(blocking_place(first.tag()))) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("a statement's second job needs no second place"),
        };
        // Its third (a third branch of a UNION ALL) waits for one of its two to end.
        let mut sibling = Box::pin(blocking_place(first.tag()));
        assert!(poll(&mut sibling).is_pending());
        // The user's next statements wait, in order; another user and work with no user
        // never do.
        let mut second_waits = Box::pin(blocking_place(second.tag()));
        let mut third_waits = Box::pin(blocking_place(third.tag()));
        assert!(poll(&mut second_waits).is_pending());
        assert!(poll(&mut third_waits).is_pending());
        assert!(poll(&mut Box::pin(blocking_place(others.tag()))).is_ready());
        assert!(poll(&mut Box::pin(blocking_place(no_user.tag()))).is_ready());

        // Work that holds or waits for the writer lock has one place beyond the share.
        let mark = urgent(writer.tag());
        let beyond = match poll(&mut Box::pin(blocking_place(writer.tag()))) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("urgent work takes the place beyond the share"),
        };
        drop(mark);

        // The first statement's jobs end while the urgent work runs, which leaves the user at
        // its share: its waiting job takes the freed job, and nothing else is handed on until
        // the urgent work ends too.
        drop(nested);
        let sibling = match poll(&mut sibling) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("the statement's freed job goes to its waiting part"),
        };
        assert!(poll(&mut second_waits).is_pending(), "two jobs still run");
        drop(held);
        assert!(poll(&mut second_waits).is_pending(), "one job still runs");
        drop(sibling);
        assert!(
            poll(&mut second_waits).is_pending(),
            "the urgent work holds the place"
        );
        // Then the place goes to the second statement, first in line, not to the third.
        drop(beyond);
        let second_place = match poll(&mut second_waits) {
            Poll::Ready(place) => place,
            Poll::Pending => panic!("the freed place was handed to the first in line"),
        };
        assert!(poll(&mut third_waits).is_pending());

        // A waiter that gives up is passed over: the place goes on to the one behind it.
        let fourth = Account::open(None, Some(Arc::clone(&user))).unwrap();
        let mut fourth_waits = Box::pin(blocking_place(fourth.tag()));
        assert!(poll(&mut fourth_waits).is_pending());
        drop(third_waits);
        drop(second_place);
        assert!(poll(&mut fourth_waits).is_ready());
        assert!(
            USERS.lock().get(&user.tag().own()).is_none(),
            "nothing kept"
        );
        crate::set_share(0);
    }
}
