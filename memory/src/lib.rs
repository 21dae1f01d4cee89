//! What a statement's memory is: every byte allocated while a thread works for it, wherever that
//! byte is later freed. [`TrackingAllocator`], installed as the global allocator by the binaries
//! (the server, the C library, the Python module), tags each allocation made while an
//! [`Account`] is current on the thread with that account, and its free gives the bytes back to
//! the same account — so a batch made by a statement and freed by the HTTP encoder, or a cache
//! entry dropped by another statement, is counted where it was made.
//!
//! An account has a limit and may have a parent (a tenant's account over its statements); going
//! over either, or the process ceiling, marks the account stopped with the reason. Nothing here
//! can fail an allocation (that aborts the process): the statement sees the mark at its next
//! check (`check`, every poll of its streams and futures, the loops of its blocking work) and
//! ends with an error naming the limit. One allocation sized by input could still outrun that,
//! so such sizes are checked before allocating (`capacity`).
//!
//! The current account follows the work: [`InScope`] sets it around every poll of a statement's
//! future or stream, and the engine carries it into the tasks and threads it starts. The same
//! wrapper keeps a user's work within its share of the threads (`share`), and
//! [`blocking_place`] its blocking computing (`blocking`): the parent account is the unit of
//! fairness for CPU as it is for memory.
//!
//! This crate holds the allocator and the accounts only (no engine types), so it is built
//! optimised in every profile: the allocator runs on every allocation of the process.
//!
//! How a block is tagged. Blocks with an alignment of at most 8 come from `malloc`, whose blocks
//! are 16-byte aligned: a tagged one is 8 bytes further on, its tag in those 8 bytes, so a
//! pointer that is 8 modulo 16 says "tagged". Blocks with a larger alignment (Arrow's buffers)
//! always carry a header as wide as their alignment, whose last 8 bytes hold the tag or zero.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::sync::Weak;
use std::task::{Context, Poll};

use futures::Stream;
use parking_lot::Mutex;

mod blocking;
mod share;
mod trim;

pub use blocking::{blocking_place, give_up_place, hold, without_place, BlockingPlace, Holding};
pub use share::{set_share, share, urgent, Urgent};
pub use trim::keep_malloc_trimmed;

/// Accounts that can be open at once (statements and tenants together); slot 0 is unused so a
/// zero tag means "no account".
const SLOTS: usize = 1 << 14;
/// Bits of a slot index in a tag.
const INDEX_BITS: u32 = 14;
/// Bits of a slot's generation: a slot reused 65,536 times while a block tagged with an old
/// use still lives would credit the wrong use; each use lasts a statement.
const GEN_BITS: u32 = 16;
/// Bytes in use are the low 48 bits of a slot's state, its generation the high 16.
const USED_BITS: u32 = 48;
const USED_MASK: u64 = (1 << USED_BITS) - 1;

/// The header of a tagged block of alignment at most 8.
const SMALL_HEADER: usize = 8;

/// Each thread's allocations and frees reach the process total in steps of at most this many
/// bytes, so the total costs one shared atomic per step, not per allocation.
const FLUSH_BYTES: i64 = 64 * 1024;

/// Why an account's work must stop (0: it need not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stop {
    /// The account went over its own limit.
    OverLimit = 1,
    /// Its parent (the tenant's account) went over its limit.
    ParentOverLimit = 2,
    /// The process went over its ceiling while this account, holding an eighth of it or more,
    /// was allocating (or far over it, while it was allocating at all).
    ProcessCeiling = 3,
    /// Its deadline passed.
    Deadline = 4,
    /// Its handle was interrupted.
    Interrupted = 5,
    /// Whoever waited for it went away (or the object it worked on was dropped).
    Cancelled = 6,
}

/// The stop byte while a commit is under way: too late to stop, see [`begin_commit`].
const COMMITTING: u8 = 255;

impl Stop {
    fn from_u8(value: u8) -> Option<Stop> {
        Some(match value {
            1 => Stop::OverLimit,
            2 => Stop::ParentOverLimit,
            3 => Stop::ProcessCeiling,
            4 => Stop::Deadline,
            5 => Stop::Interrupted,
            6 => Stop::Cancelled,
            _ => return None,
        })
    }
}

/// One account's counters, in a static table so the allocator can reach them without locks.
struct Slot {
    /// Generation (high 16 bits) and bytes in use (low 48).
    state: AtomicU64,
    /// The most bytes it may use (`u64::MAX`: no limit).
    limit: AtomicU64,
    /// The most bytes it has used at once.
    peak: AtomicU64,
    /// A [`Stop`] as a byte, 0 while running, [`COMMITTING`] during a commit.
    stop: AtomicU8,
    /// Whether the account's [`Account`] was dropped while jobs keep it open ([`retain`]).
    dropped: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            stop: AtomicU8::new(0),
            dropped: AtomicBool::new(false),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// Slots free for a new account, and whether the list was filled (on first use).
static FREE: Mutex<(bool, Vec<u16>)> = parking_lot::const_mutex((false, Vec::new()));

/// Bytes allocated through [`TrackingAllocator`] and not freed, over the whole process
/// (each thread's last few KiB may not have reached it yet).
static LIVE: AtomicI64 = AtomicI64::new(0);
/// Of [`LIVE`], the bytes in blocks no account counts: made while no account was current (a
/// request's body before its statement opens, background work) or for an account already
/// closed. A budget cannot stop what it does not see, so this is where memory outside the
/// budgets shows.
static UNTAGGED: AtomicI64 = AtomicI64::new(0);
/// Of [`LIVE`], the bytes in blocks tagged for an account that has since closed (a cache entry
/// a statement filled, a result held after its statement ended): counted by no one either.
static ORPHANED: AtomicI64 = AtomicI64::new(0);
/// The ceiling on [`LIVE`] (`i64::MAX`: none).
static CEILING: AtomicI64 = AtomicI64::new(i64::MAX);
/// Whether [`TrackingAllocator`] is the global allocator (it has allocated something).
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The tag allocations on this thread are made under (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// This thread's change to [`LIVE`] not yet added to it.
    static PENDING: Cell<i64> = const { Cell::new(0) };
    /// This thread's change to [`UNTAGGED`] not yet added to it.
    static PENDING_UNTAGGED: Cell<i64> = const { Cell::new(0) };
    /// Bytes reserved on this thread ([`reserve`]) and not yet allocated: the tag they were
    /// charged to, and how many. The next allocations of that tag take them instead of
    /// charging again.
    static RESERVED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// An account's identity as allocations carry it: its slot and generation, and its parent's.
/// Bits 0–13 slot, 14–29 generation; bits 30–59 the same for the parent (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag(u64);

impl Tag {
    /// No account.
    pub const NONE: Tag = Tag(0);

    fn own(self) -> u64 {
        self.0 & ((1 << (INDEX_BITS + GEN_BITS)) - 1)
    }

    fn parent(self) -> u64 {
        self.0 >> (INDEX_BITS + GEN_BITS)
    }

    /// Whether this is an account at all.
    pub fn is_some(self) -> bool {
        self.0 != 0
    }

    /// Who the parent account is, as a number (0: none): what work is grouped by when it is
    /// shared out between users.
    pub fn parent_key(self) -> u64 {
        self.parent()
    }
}

/// The slot and generation of a one-account part of a tag.
fn split(part: u64) -> (usize, u64) {
    let index = (part & ((1 << INDEX_BITS) - 1)) as usize;
    let generation = part >> INDEX_BITS;
    (index, generation)
}

/// Adds `bytes` to the account `part` if its generation still matches; returns whether it did,
/// and marks the account stopped when it went over its limit.
fn charge(part: u64, bytes: u64, over: Stop, mark: usize) -> bool {
    let (index, generation) = split(part);
    if index == 0 {
        return false;
    }
    let slot = &TABLE[index];
    let mut state = slot.state.load(Relaxed);
    loop {
        if state >> USED_BITS != generation {
            return false;
        }
        let used = (state & USED_MASK).saturating_add(bytes).min(USED_MASK);
        let next = (generation << USED_BITS) | used;
        match slot
            .state
            .compare_exchange_weak(state, next, Relaxed, Relaxed)
        {
            Ok(_) => {
                slot.peak.fetch_max(used, Relaxed);
                if used > slot.limit.load(Relaxed) {
                    let _ = TABLE[mark]
                        .stop
                        .compare_exchange(0, over as u8, Relaxed, Relaxed);
                }
                return true;
            }
            Err(now) => state = now,
        }
    }
}

/// Takes `bytes` back from the account `part` if its generation still matches; returns whether
/// it did (true for no account).
fn credit(part: u64, bytes: u64) -> bool {
    let (index, generation) = split(part);
    if index == 0 {
        return true;
    }
    let slot = &TABLE[index];
    let mut state = slot.state.load(Relaxed);
    loop {
        if state >> USED_BITS != generation {
            return false;
        }
        let used = (state & USED_MASK).saturating_sub(bytes);
        let next = (generation << USED_BITS) | used;
        match slot
            .state
            .compare_exchange_weak(state, next, Relaxed, Relaxed)
        {
            Ok(_) => return true,
            Err(now) => state = now,
        }
    }
}

/// Charges a new block of `bytes` to `tag` (and its parent); false when the tag is stale, in
/// which case the block is made untagged.
fn charge_tag(tag: Tag, bytes: u64) -> bool {
    let (own_index, _) = split(tag.own());
    if !charge(tag.own(), bytes, Stop::OverLimit, own_index) {
        return false;
    }
    charge(tag.parent(), bytes, Stop::ParentOverLimit, own_index);
    true
}

fn credit_tag(tag: Tag, bytes: u64) {
    if credit(tag.own(), bytes) {
        credit(tag.parent(), bytes);
    } else {
        // Its account closed, and gave its parent back then what it held, this included:
        // giving it back again would let the parent's other accounts use it twice.
        ORPHANED.fetch_sub(bytes as i64, Relaxed);
    }
}

/// Takes up to `size` bytes of this thread's reservation for `tag`; returns how many.
fn take_reserved(tag: Tag, size: u64) -> u64 {
    RESERVED.with(|r| {
        let (reserved_for, left) = r.get();
        if left == 0 || reserved_for != tag.0 {
            return 0;
        }
        let taken = left.min(size);
        r.set((reserved_for, left - taken));
        taken
    })
}

/// Charges `bytes` to the account `part` only if they fit under its limit; returns whether
/// they did (a stale account takes nothing and is reported as fitting nothing).
fn try_charge(part: u64, bytes: u64) -> bool {
    let (index, generation) = split(part);
    if index == 0 {
        return true;
    }
    let slot = &TABLE[index];
    let mut state = slot.state.load(Relaxed);
    loop {
        if state >> USED_BITS != generation {
            return false;
        }
        let used = (state & USED_MASK).saturating_add(bytes);
        if used > slot.limit.load(Relaxed) || used > USED_MASK {
            return false;
        }
        let next = (generation << USED_BITS) | used;
        match slot
            .state
            .compare_exchange_weak(state, next, Relaxed, Relaxed)
        {
            Ok(_) => {
                slot.peak.fetch_max(used, Relaxed);
                return true;
            }
            Err(now) => state = now,
        }
    }
}

/// Bytes counted ahead of the allocations they are for, made on this thread under the
/// account it works for (see [`reserve`]); what they have not taken is given back when this
/// is dropped. Not `Send`: the reservation is this thread's.
#[derive(Debug)]
pub struct Reservation {
    tag: Tag,
    bytes: u64,
    /// Whether allocations take from this one (the thread's first), or it is only counted.
    taken_from: bool,
    _thread: std::marker::PhantomData<*const ()>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let left = match self.taken_from {
            true => RESERVED.with(|r| r.replace((0, 0)).1),
            false => self.bytes,
        };
        if left > 0 {
            credit_tag(self.tag, left);
            LIVE.fetch_sub(left as i64, Relaxed);
        }
    }
}

/// Counts `bytes` now, for allocations this thread is about to make for the account it works
/// for, or fails with why they do not fit: over the account's limit, its parent's, or the
/// process ceiling. Where a size is checked and then allocated, two statements could each
/// pass the check and together go past a limit; a reservation is counted atomically, so the
/// second one fails instead. The allocations made while it lives take its bytes rather than
/// being counted again.
pub fn reserve(bytes: u64) -> Result<Reservation, Stop> {
    let tag = current();
    let Ok(signed) = i64::try_from(bytes) else {
        return Err(Stop::ProcessCeiling);
    };
    let live = LIVE.fetch_add(signed, Relaxed).saturating_add(signed);
    let fail = |reason: Stop| {
        LIVE.fetch_sub(signed, Relaxed);
        Err(reason)
    };
    if live > CEILING.load(Relaxed) {
        return fail(Stop::ProcessCeiling);
    }
    if tag.is_some() {
        if !try_charge(tag.own(), bytes) {
            return fail(Stop::OverLimit);
        }
        if !try_charge(tag.parent(), bytes) {
            credit(tag.own(), bytes);
            return fail(Stop::ParentOverLimit);
        }
    }
    // One reservation per thread at a time is taken from by allocations; a second one (of
    // another account) is only counted, until dropped.
    let taken_from = RESERVED.with(|r| {
        let free = r.get().1 == 0;
        if free {
            r.set((tag.0, bytes));
        }
        free
    });
    Ok(Reservation {
        tag,
        bytes,
        taken_from,
        _thread: std::marker::PhantomData,
    })
}

/// Counts `delta` bytes toward the process total; marks `tag`'s account stopped when the total
/// is over the ceiling.
fn count_live(delta: i64, tag: Tag) {
    let pending = PENDING.with(|p| {
        let value = p.get() + delta;
        p.set(value);
        value
    });
    if pending.abs() < FLUSH_BYTES {
        return;
    }
    PENDING.with(|p| p.set(0));
    let live = LIVE.fetch_add(pending, Relaxed) + pending;
    let ceiling = CEILING.load(Relaxed);
    if delta > 0 && tag.is_some() && live > ceiling {
        let (index, generation) = split(tag.own());
        let state = TABLE[index].state.load(Relaxed);
        // Over the ceiling, the work that holds much of the memory is stopped, not a small
        // statement that happened to allocate next (another tenant's one-row insert); only
        // far over it is anyone allocating stopped.
        let holds = i64::try_from(state & USED_MASK).unwrap_or(i64::MAX);
        let culprit = holds >= ceiling / 8 || live > ceiling.saturating_add(ceiling / 4);
        if index != 0 && culprit && state >> USED_BITS == generation {
            let _ =
                TABLE[index]
                    .stop
                    .compare_exchange(0, Stop::ProcessCeiling as u8, Relaxed, Relaxed);
        }
    }
}

/// Counts `delta` bytes toward [`UNTAGGED`], in steps like [`count_live`].
fn count_untagged(delta: i64) {
    let pending = PENDING_UNTAGGED.with(|p| {
        let value = p.get() + delta;
        p.set(value);
        value
    });
    if pending.abs() >= FLUSH_BYTES {
        PENDING_UNTAGGED.with(|p| p.set(0));
        UNTAGGED.fetch_add(pending, Relaxed);
    }
}

/// The global allocator that gives statements their memory budgets: install it in a binary
/// that embeds mindlite and wants them (`mindlite-server`, the C library and the Python module
/// do). Without it, statements are bounded only by DataFusion's memory pool and the engine's
/// checks of sizes that input controls.
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;
/// ```
///
/// It allocates with the C library's `malloc` family, as Rust's `System` allocator does on
/// Unix, plus an 8-byte header on blocks made for a statement (and on blocks aligned to more
/// than 8 bytes, a header of their alignment).
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAllocator;

/// `malloc`'s blocks are aligned to this on every platform mindlite builds for (glibc and musl
/// on x86_64 and aarch64), which is what lets a pointer's low bits say whether it is tagged.
const MALLOC_ALIGN: usize = 16;

impl TrackingAllocator {
    /// A block of `layout` for `tag` (or untagged), zeroed if `zeroed`.
    unsafe fn allocate(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        INSTALLED.store(true, Relaxed);
        let tag = Tag(CURRENT.with(Cell::get));
        let size = layout.size();
        // What a reservation already counted is not counted again.
        let fresh = size as u64 - take_reserved(tag, size as u64);
        count_live(fresh as i64, tag);
        if layout.align() <= 8 {
            if tag.is_some() && charge_tag(tag, fresh) {
                let total = (size + SMALL_HEADER).max(MALLOC_ALIGN);
                let base = if zeroed {
                    libc::calloc(1, total)
                } else {
                    libc::malloc(total)
                } as *mut u8;
                if base.is_null() {
                    credit_tag(tag, size as u64);
                    count_live(-(size as i64), Tag::NONE);
                    return base;
                }
                debug_assert_eq!(base as usize % MALLOC_ALIGN, 0);
                (base as *mut u64).write(tag.0);
                return base.add(SMALL_HEADER);
            }
            let block = if zeroed {
                libc::calloc(1, size)
            } else {
                libc::malloc(size)
            } as *mut u8;
            debug_assert_eq!(block as usize % MALLOC_ALIGN, 0);
            if !block.is_null() {
                count_untagged(size as i64);
            }
            return block;
        }
        // Aligned blocks always carry a header of their alignment.
        let align = layout.align();
        let Some(total) = size.checked_add(align) else {
            return std::ptr::null_mut();
        };
        let mut base: *mut libc::c_void = std::ptr::null_mut();
        if libc::posix_memalign(&mut base, align, total) != 0 || base.is_null() {
            return std::ptr::null_mut();
        }
        let base = base as *mut u8;
        if zeroed {
            std::ptr::write_bytes(base.add(align), 0, size);
        }
        let tagged = tag.is_some() && charge_tag(tag, fresh);
        if !tagged {
            count_untagged(size as i64);
        }
        let block = base.add(align);
        (block.sub(8) as *mut u64).write(if tagged { tag.0 } else { 0 });
        block
    }
}

unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.allocate(layout, false)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.allocate(layout, true)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let size = layout.size();
        count_live(-(size as i64), Tag::NONE);
        if layout.align() <= 8 {
            if ptr as usize % MALLOC_ALIGN == SMALL_HEADER {
                let base = ptr.sub(SMALL_HEADER);
                credit_tag(Tag((base as *const u64).read()), size as u64);
                libc::free(base as *mut libc::c_void);
            } else {
                count_untagged(-(size as i64));
                libc::free(ptr as *mut libc::c_void);
            }
            return;
        }
        let tag = Tag((ptr.sub(8) as *const u64).read());
        if tag.is_some() {
            credit_tag(tag, size as u64);
        } else {
            count_untagged(-(size as i64));
        }
        libc::free(ptr.sub(layout.align()) as *mut libc::c_void);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old_size = layout.size();
        let current = Tag(CURRENT.with(Cell::get));
        let tagged_small = layout.align() <= 8 && ptr as usize % MALLOC_ALIGN == SMALL_HEADER;
        if layout.align() <= 8 && (tagged_small || !current.is_some()) {
            // Grown in place where malloc can (a tagged block keeps its header and its tag).
            count_live(new_size as i64 - old_size as i64, current);
            if tagged_small {
                let base = ptr.sub(SMALL_HEADER);
                let tag = Tag((base as *const u64).read());
                let total = (new_size + SMALL_HEADER).max(MALLOC_ALIGN);
                let moved = libc::realloc(base as *mut libc::c_void, total) as *mut u8;
                if moved.is_null() {
                    count_live(old_size as i64 - new_size as i64, Tag::NONE);
                    return moved;
                }
                if new_size > old_size {
                    let growth = (new_size - old_size) as u64;
                    if !charge_tag(tag, growth) {
                        // Its account closed: the growth is no one's either.
                        ORPHANED.fetch_add(growth as i64, Relaxed);
                    }
                } else {
                    credit_tag(tag, (old_size - new_size) as u64);
                }
                return moved.add(SMALL_HEADER);
            }
            let moved = libc::realloc(ptr as *mut libc::c_void, new_size) as *mut u8;
            if moved.is_null() {
                count_live(old_size as i64 - new_size as i64, Tag::NONE);
            } else {
                count_untagged(new_size as i64 - old_size as i64);
            }
            return moved;
        }
        // An untagged block growing for an account becomes the account's, and aligned blocks
        // cannot be realloc'd in place keeping their alignment: a new block and a copy.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let moved = self.allocate(new_layout, false);
        if !moved.is_null() {
            std::ptr::copy_nonoverlapping(ptr, moved, old_size.min(new_size));
            self.dealloc(ptr, layout);
        }
        moved
    }
}

/// Whether [`TrackingAllocator`] is the process's allocator, so budgets are enforced.
pub fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// Bytes allocated and not freed in the whole process (to within a few KiB per thread);
/// 0 without [`TrackingAllocator`].
pub fn live_bytes() -> u64 {
    u64::try_from(LIVE.load(Relaxed)).unwrap_or(0)
}

/// Of [`live_bytes`], the bytes no open account counts: in blocks made while no account was
/// current (`untagged`), or for an account that has closed since (`orphaned`). What a budget
/// cannot stop; the figures that show where memory escapes the budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Uncounted {
    /// Bytes in blocks made for no account.
    pub untagged: u64,
    /// Bytes in blocks made for an account that is closed now.
    pub orphaned: u64,
}

/// What [`Uncounted`] holds now (to within a few KiB per thread for `untagged`).
pub fn uncounted() -> Uncounted {
    Uncounted {
        untagged: u64::try_from(UNTAGGED.load(Relaxed)).unwrap_or(0),
        orphaned: u64::try_from(ORPHANED.load(Relaxed)).unwrap_or(0),
    }
}

/// Sets the process ceiling: an account allocating while the process is over it is stopped.
/// `None` removes it. The lowest ceiling set by any engine of the process applies.
pub fn set_ceiling(bytes: Option<u64>) {
    let bytes = bytes.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    CEILING.fetch_min(bytes, Relaxed);
}

/// The process ceiling, if any.
pub fn ceiling() -> Option<u64> {
    match CEILING.load(Relaxed) {
        i64::MAX => None,
        bytes => u64::try_from(bytes).ok(),
    }
}

/// An open account: its slot is its own until this is dropped and every job that works for
/// it ([`retain`]) has ended, when the bytes still tagged with it stop counting (and stop
/// counting toward its parent). Dropping it tells those jobs to stop.
#[derive(Debug)]
pub struct Account {
    inner: Arc<Open>,
}

/// What keeps an account's slot open: its [`Account`], and the jobs still working for it.
#[derive(Debug)]
struct Open {
    tag: Tag,
    /// Keeps the parent open while this account can still charge it: a user's account lives
    /// as long as any of its statements or their jobs, so a job that outlives its statement
    /// still counts within its user's budget, not beside a new account of the same user.
    parent: Option<Arc<Account>>,
}

/// Each slot's open account, for [`retain`] to find from a tag.
static OPEN: Mutex<Vec<Weak<Open>>> = parking_lot::const_mutex(Vec::new());

impl Account {
    /// Opens an account of at most `limit` bytes (`None`: no limit of its own) under `parent`.
    /// `None` when every slot is taken, which only thousands of statements at once could do.
    pub fn open(limit: Option<u64>, parent: Option<Arc<Account>>) -> Option<Account> {
        let index = {
            let mut free = FREE.lock();
            if !free.0 {
                free.0 = true;
                free.1.extend((1..SLOTS as u16).rev());
            }
            free.1.pop()?
        };
        let slot = &TABLE[usize::from(index)];
        slot.limit.store(limit.unwrap_or(u64::MAX), Relaxed);
        slot.peak.store(0, Relaxed);
        slot.stop.store(0, Relaxed);
        let generation = slot.state.load(Relaxed) >> USED_BITS;
        let own = (generation << INDEX_BITS) | u64::from(index);
        let parent_part = parent.as_ref().map_or(0, |p| p.tag().own());
        slot.dropped.store(false, Relaxed);
        let inner = Arc::new(Open {
            tag: Tag(own | (parent_part << (INDEX_BITS + GEN_BITS))),
            parent,
        });
        let mut open = OPEN.lock();
        if open.is_empty() {
            // The table is the process's, not the first statement's.
            let _none = enter(Tag::NONE);
            open.resize_with(SLOTS, Weak::new);
        }
        open[usize::from(index)] = Arc::downgrade(&inner);
        Some(Account { inner })
    }

    fn slot(&self) -> &'static Slot {
        &TABLE[split(self.tag().own()).0]
    }

    /// What allocations for this account carry.
    pub fn tag(&self) -> Tag {
        self.inner.tag
    }

    /// Bytes this account holds now.
    pub fn used(&self) -> u64 {
        self.slot().state.load(Relaxed) & USED_MASK
    }

    /// The most bytes it has held at once.
    pub fn peak(&self) -> u64 {
        self.slot().peak.load(Relaxed)
    }

    /// Its limit, if it has one.
    pub fn limit(&self) -> Option<u64> {
        match self.slot().limit.load(Relaxed) {
            u64::MAX => None,
            limit => Some(limit),
        }
    }

    /// Bytes it may still take before its own limit (or its parent's, the smaller).
    pub fn remaining(&self) -> u64 {
        let own = self
            .limit()
            .map_or(u64::MAX, |l| l.saturating_sub(self.used()));
        let parent = self
            .inner
            .parent
            .as_ref()
            .map_or(u64::MAX, |p| p.remaining());
        own.min(parent)
    }

    /// Polls of its children's work running now (see [`set_share`]).
    pub fn polling(&self) -> u32 {
        share::polling(self.tag().own())
    }

    /// Why it must stop, if it must.
    pub fn stopped(&self) -> Option<Stop> {
        stop_of(self.tag())
    }

    /// Marks it stopped for `reason` unless it is already stopped or committing; returns
    /// whether this call stopped it.
    pub fn stop(&self, reason: Stop) -> bool {
        self.slot()
            .stop
            .compare_exchange(0, reason as u8, Relaxed, Relaxed)
            .is_ok()
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        let slot = self.slot();
        // Its work must stop (unless it is committing, which ends first); the slot closes
        // when the last job still working for it ends, or now.
        slot.dropped.store(true, Relaxed);
        let _ = slot
            .stop
            .compare_exchange(0, Stop::Cancelled as u8, Relaxed, Relaxed);
    }
}

impl Drop for Open {
    /// Closes the account: a new generation, so blocks still tagged with this one no longer
    /// count anywhere (their bytes are given back to the parent), and the slot is free.
    fn drop(&mut self) {
        let (index, generation) = split(self.tag.own());
        let slot = &TABLE[index];
        let next = ((generation + 1) & ((1 << GEN_BITS) - 1)) << USED_BITS;
        let held = slot.state.swap(next, Relaxed) & USED_MASK;
        credit(self.tag.parent(), held);
        ORPHANED.fetch_add(held as i64, Relaxed);
        slot.stop.store(0, Relaxed);
        slot.dropped.store(false, Relaxed);
        FREE.lock().1.push(index as u16);
    }
}

/// Keeps the account a job works for open until the job ends, though its [`Account`] is
/// dropped meanwhile (the statement ended, stopped or was abandoned while its blocking work
/// runs on to its next check): what the job holds and allocates then still counts toward the
/// account and its parent, rather than toward no one.
#[derive(Debug)]
pub struct Retained {
    _open: Arc<Open>,
}

/// Keeps the account `tag` names open while the returned guard lives; `None` without an
/// account, or once its [`Account`] is dropped (no new job starts working for it).
pub fn retain(tag: Tag) -> Option<Retained> {
    let (index, _) = split(tag.own());
    if index == 0 || TABLE[index].dropped.load(Relaxed) {
        return None;
    }
    let open = OPEN.lock().get(index).and_then(Weak::upgrade)?;
    // The slot may have been closed and opened for another account since `tag` was read;
    // that one is not retained (it is dropped outside the table's lock, closing it if it was
    // the last holder).
    (open.tag.own() == tag.own()).then_some(Retained { _open: open })
}

/// The generation of the account in slot `index` now (or of the next one, while it is free).
fn live_generation(index: usize) -> u64 {
    TABLE[index].state.load(Relaxed) >> USED_BITS
}

/// The stop reason of the account `tag` names. An account that is closed (its statement's
/// result was dropped, its caller went away) is [`Stop::Cancelled`]: work still running for it
/// is orphaned and must stop.
fn stop_of(tag: Tag) -> Option<Stop> {
    let (index, generation) = split(tag.own());
    if index == 0 {
        return None;
    }
    let slot = &TABLE[index];
    if slot.state.load(Relaxed) >> USED_BITS != generation {
        return Some(Stop::Cancelled);
    }
    let stop = slot.stop.load(Relaxed);
    // Dropped, kept open by its jobs only until they stop (a commit under way ends first).
    if stop == 0 && slot.dropped.load(Relaxed) {
        return Some(Stop::Cancelled);
    }
    Stop::from_u8(stop)
}

/// Bytes the account `tag` names may still take before its limit or its parent's (the
/// smaller); `None` without an account or without limits.
pub fn remaining(tag: Tag) -> Option<u64> {
    let left = |part: u64| {
        let (index, generation) = split(part);
        if index == 0 {
            return None;
        }
        let slot = &TABLE[index];
        let state = slot.state.load(Relaxed);
        if state >> USED_BITS != generation {
            return Some(0);
        }
        match slot.limit.load(Relaxed) {
            u64::MAX => None,
            limit => Some(limit.saturating_sub(state & USED_MASK)),
        }
    };
    match (left(tag.own()), left(tag.parent())) {
        (Some(own), Some(parent)) => Some(own.min(parent)),
        (own, parent) => own.or(parent),
    }
}

/// The account the current thread works for.
pub fn current() -> Tag {
    Tag(CURRENT.with(Cell::get))
}

/// Why the work on this thread must stop, if it must: the check loops make.
pub fn current_stop() -> Option<Stop> {
    stop_of(current())
}

/// Marks the account `tag` names as committing: from now on it cannot be stopped, until
/// [`end_commit`]. Fails with the reason when it was stopped already (or is closed). Without
/// an account (work of no statement) it always succeeds.
pub fn begin_commit(tag: Tag) -> Result<(), Stop> {
    let (index, generation) = split(tag.own());
    if index == 0 {
        return Ok(());
    }
    let slot = &TABLE[index];
    if slot.state.load(Relaxed) >> USED_BITS != generation || slot.dropped.load(Relaxed) {
        return Err(Stop::Cancelled);
    }
    match slot.stop.compare_exchange(0, COMMITTING, Relaxed, Relaxed) {
        Ok(_) => Ok(()),
        Err(COMMITTING) => Ok(()),
        Err(other) => Err(Stop::from_u8(other).unwrap_or(Stop::Cancelled)),
    }
}

/// Ends what [`begin_commit`] began: the account can be stopped again.
pub fn end_commit(tag: Tag) {
    let (index, generation) = split(tag.own());
    if index == 0 {
        return;
    }
    let slot = &TABLE[index];
    if slot.state.load(Relaxed) >> USED_BITS == generation {
        let _ = slot.stop.compare_exchange(COMMITTING, 0, Relaxed, Relaxed);
    }
}

/// Whether the account `tag` names is in the middle of a commit.
pub fn committing(tag: Tag) -> bool {
    let (index, generation) = split(tag.own());
    index != 0
        && TABLE[index].state.load(Relaxed) >> USED_BITS == generation
        && TABLE[index].stop.load(Relaxed) == COMMITTING
}

/// Makes `tag` the current thread's account until the guard is dropped.
pub fn enter(tag: Tag) -> Entered {
    Entered {
        previous: CURRENT.with(|c| c.replace(tag.0)),
    }
}

/// Restores the thread's previous account when dropped.
pub struct Entered {
    previous: u64,
}

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

/// A future or stream that works for an account: the account is current around each poll, and
/// each poll waits for a place in the parent account's share of the threads (see `share`).
pub struct InScope<F> {
    tag: Tag,
    inner: F,
}

impl<F> InScope<F> {
    /// `inner`, polled for the account `tag`.
    pub fn new(tag: Tag, inner: F) -> InScope<F> {
        InScope { tag, inner }
    }
}

impl<F: Future + Unpin> Future for InScope<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = enter(self.tag);
        let (own, parent) = (self.tag.own(), self.tag.parent());
        share::poll(own, parent, cx, |cx| Pin::new(&mut self.inner).poll(cx))
    }
}

impl<S: Stream + Unpin> Stream for InScope<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let _entered = enter(self.tag);
        let (own, parent) = (self.tag.own(), self.tag.parent());
        share::poll(own, parent, cx, |cx| {
            Pin::new(&mut self.inner).poll_next(cx)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The allocator under test, called directly (the test binary's global allocator may be
    /// it too; these tests do not depend on that).
    const A: TrackingAllocator = TrackingAllocator;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_made_for_an_account_count_until_freed_wherever_they_are_freed() {
        let account = Account::open(Some(1 << 20), None).unwrap();
        let (small, aligned) = {
            let _in = enter(account.tag());
            unsafe {
                (
                    A.alloc(layout(1000, 8)) as usize,
                    A.alloc(layout(5000, 64)) as usize,
                )
            }
        };
        assert_eq!(account.used(), 6000);
        assert_eq!(small % 8, 0);
        assert_eq!(aligned % 64, 0);
        // Freed outside the account (another thread, say): still given back to it.
        let freed = std::thread::spawn(move || unsafe {
            A.dealloc(small as *mut u8, layout(1000, 8));
            A.dealloc(aligned as *mut u8, layout(5000, 64));
        });
        freed.join().unwrap();
        assert_eq!(account.used(), 0);
        assert_eq!(account.peak(), 6000);
        assert_eq!(account.stopped(), None);
    }

    #[test]
    fn a_reservation_is_counted_at_once_and_its_allocations_are_not_counted_twice() {
        let parent = Arc::new(Account::open(Some(10_000), None).unwrap());
        let one = Account::open(Some(8_000), Some(Arc::clone(&parent))).unwrap();
        let two = Account::open(Some(8_000), Some(Arc::clone(&parent))).unwrap();
        let _in = enter(one.tag());
        let held = reserve(6_000).unwrap();
        assert_eq!((one.used(), parent.used()), (6_000, 6_000));
        // Another statement of the same parent cannot take what is reserved.
        {
            let _two = enter(two.tag());
            assert_eq!(reserve(6_000).unwrap_err(), Stop::ParentOverLimit);
            assert_eq!(two.used(), 0);
        }
        // Over its own limit: refused, nothing counted, nobody stopped.
        assert_eq!(reserve(3_000).unwrap_err(), Stop::OverLimit);
        let block = unsafe { A.alloc(layout(5_000, 64)) };
        assert_eq!(one.used(), 6_000, "the block took from the reservation");
        drop(held);
        assert_eq!((one.used(), parent.used()), (5_000, 5_000));
        assert_eq!(one.stopped(), None);
        unsafe { A.dealloc(block, layout(5_000, 64)) };
        assert_eq!(one.used(), 0);
    }

    #[test]
    fn untagged_blocks_are_not_counted_and_stay_untagged() {
        let account = Account::open(None, None).unwrap();
        let block = unsafe { A.alloc(layout(100, 4)) };
        assert_eq!(block as usize % MALLOC_ALIGN, 0);
        {
            let _in = enter(account.tag());
            unsafe { A.dealloc(block, layout(100, 4)) };
        }
        assert_eq!(account.used(), 0);
    }

    #[test]
    fn blocks_of_no_account_or_of_a_closed_one_show_as_uncounted() {
        // Other tests allocate at the same time: sizes far above their blocks and the
        // per-thread steps, compared within a MiB.
        const BIG: usize = 64 << 20;
        let near = |a: u64, b: u64| a.abs_diff(b) < 1 << 20;
        let before = uncounted();
        let untagged = unsafe { A.alloc(layout(BIG, 8)) };
        let aligned = unsafe { A.alloc(layout(BIG, 64)) };
        assert!(near(uncounted().untagged, before.untagged + 2 * BIG as u64));
        let grown = unsafe { A.realloc(untagged, layout(BIG, 8), 2 * BIG) };
        assert!(near(uncounted().untagged, before.untagged + 3 * BIG as u64));
        unsafe {
            A.dealloc(grown, layout(2 * BIG, 8));
            A.dealloc(aligned, layout(BIG, 64));
        }
        assert!(near(uncounted().untagged, before.untagged));

        let tenant = Arc::new(Account::open(None, None).unwrap());
        let statement = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let (small, big) = {
            let _in = enter(statement.tag());
            unsafe { (A.alloc(layout(BIG, 8)), A.alloc(layout(BIG, 128))) }
        };
        assert!(
            near(uncounted().untagged, before.untagged),
            "counted blocks are not"
        );
        assert!(near(uncounted().orphaned, before.orphaned));
        drop(statement);
        assert!(near(uncounted().orphaned, before.orphaned + 2 * BIG as u64));
        let small = unsafe { A.realloc(small, layout(BIG, 8), 2 * BIG) };
        assert!(near(uncounted().orphaned, before.orphaned + 3 * BIG as u64));
        unsafe {
            A.dealloc(small, layout(2 * BIG, 8));
            A.dealloc(big, layout(BIG, 128));
        }
        assert!(near(uncounted().orphaned, before.orphaned));
        assert_eq!(tenant.used(), 0);
    }

    #[test]
    fn growing_a_block_charges_the_growth_and_an_outside_block_becomes_the_accounts() {
        let account = Account::open(None, None).unwrap();
        let outside = unsafe { A.alloc(layout(10, 1)) };
        unsafe { outside.write_bytes(7, 10) };
        let _in = enter(account.tag());
        let grown = unsafe { A.realloc(outside, layout(10, 1), 5000) };
        assert_eq!(account.used(), 5000);
        assert_eq!(unsafe { std::slice::from_raw_parts(grown, 10) }, [7; 10]);
        let shrunk = unsafe { A.realloc(grown, layout(5000, 1), 20) };
        assert_eq!(account.used(), 20);
        let aligned = unsafe { A.alloc(layout(100, 128)) };
        let aligned = unsafe { A.realloc(aligned, layout(100, 128), 300) };
        assert_eq!(aligned as usize % 128, 0);
        assert_eq!(account.used(), 320);
        unsafe {
            A.dealloc(shrunk, layout(20, 1));
            A.dealloc(aligned, layout(300, 128));
        }
        assert_eq!(account.used(), 0);
    }

    #[test]
    fn going_over_the_limit_or_the_parents_marks_the_account_stopped() {
        let tenant = Arc::new(Account::open(Some(10_000), None).unwrap());
        let statement = Account::open(Some(6_000), Some(Arc::clone(&tenant))).unwrap();
        let other = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let _in = enter(statement.tag());
        let a = unsafe { A.alloc(layout(5_000, 8)) };
        assert_eq!(statement.stopped(), None);
        assert_eq!(tenant.used(), 5_000);
        let b = unsafe { A.alloc(layout(2_000, 8)) };
        assert_eq!(statement.stopped(), Some(Stop::OverLimit));
        drop(_in);
        let _in = enter(other.tag());
        let c = unsafe { A.alloc(layout(4_000, 8)) };
        assert_eq!(other.stopped(), Some(Stop::ParentOverLimit));
        assert_eq!(tenant.used(), 11_000);
        unsafe {
            A.dealloc(a, layout(5_000, 8));
            A.dealloc(b, layout(2_000, 8));
            A.dealloc(c, layout(4_000, 8));
        }
        assert_eq!(tenant.used(), 0);
    }

    #[test]
    fn a_closed_account_forgets_its_blocks_and_its_parent_gets_their_bytes_back() {
        let tenant = Arc::new(Account::open(None, None).unwrap());
        let statement = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let tag = statement.tag();
        let block = {
            let _in = enter(tag);
            unsafe { A.alloc(layout(4_096, 8)) }
        };
        let sibling = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let siblings = {
            let _in = enter(sibling.tag());
            unsafe { A.alloc(layout(1_000, 8)) }
        };
        assert_eq!(tenant.used(), 5_096);
        drop(statement);
        assert_eq!(tenant.used(), 1_000);
        // The slot may be someone else's now: the late free must not touch it, nor give the
        // parent back again what the close gave back.
        let next = Account::open(None, None).unwrap();
        unsafe { A.dealloc(block, layout(4_096, 8)) };
        assert_eq!(next.used(), 0);
        assert_eq!(tenant.used(), 1_000, "the sibling's bytes still count");
        unsafe { A.dealloc(siblings, layout(1_000, 8)) };
        assert_eq!(tenant.used(), 0);
        assert_eq!(
            stop_of(tag),
            Some(Stop::Cancelled),
            "orphaned work must stop"
        );
        assert_eq!(begin_commit(tag), Err(Stop::Cancelled));
    }

    #[test]
    fn a_job_keeps_its_dropped_account_counting_until_it_ends() {
        let tenant = Arc::new(Account::open(None, None).unwrap());
        let statement = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let tag = statement.tag();
        let job = retain(tag).unwrap();
        let before = uncounted().orphaned;
        let held = {
            let _in = enter(tag);
            unsafe { A.alloc(layout(3_000, 8)) }
        };
        drop(statement);
        // The job runs on: told to stop, but what it holds and makes still counts.
        assert_eq!(stop_of(tag), Some(Stop::Cancelled));
        assert_eq!(begin_commit(tag), Err(Stop::Cancelled));
        assert!(retain(tag).is_none(), "no new job for a dropped account");
        let more = {
            let _in = enter(tag);
            unsafe { A.alloc(layout(2_000, 64)) }
        };
        assert_eq!(tenant.used(), 5_000);
        unsafe { A.dealloc(more, layout(2_000, 64)) };
        assert_eq!(tenant.used(), 3_000);
        // The job ends: the account closes, and what is left is no one's.
        drop(job);
        assert_eq!(tenant.used(), 0);
        assert_eq!(stop_of(tag), Some(Stop::Cancelled));
        assert!(retain(tag).is_none(), "closed");
        assert!(uncounted().orphaned >= before + 3_000);
        unsafe { A.dealloc(held, layout(3_000, 8)) };

        // Without a job left, the drop closes at once; a slot's next account starts with no
        // references of the last one's.
        let again = Account::open(None, Some(Arc::clone(&tenant))).unwrap();
        let index = split(again.tag().own()).0;
        assert!(
            retain(tag).is_none(),
            "the old tag is not the slot's next account"
        );
        drop(again);
        assert!(
            !TABLE[index].dropped.load(Relaxed),
            "closed, not only dropped"
        );
    }

    #[test]
    fn a_job_keeps_its_users_account_open_too() {
        // The user's account is held only by its statements (as the engine's admission does):
        // a job that outlives its statement keeps it, so the user's next statement shares its
        // budget with the job rather than opening a fresh one beside it.
        let user = Arc::new(Account::open(Some(1 << 20), None).unwrap());
        let users_handle = Arc::downgrade(&user);
        let statement = Account::open(None, Some(user)).unwrap();
        let job = retain(statement.tag()).unwrap();
        drop(statement);
        let user = users_handle.upgrade().expect("open while the job runs");
        drop(user);
        drop(job);
        assert!(users_handle.upgrade().is_none(), "closed with its last job");
    }

    #[test]
    fn a_commit_under_way_cannot_be_stopped_and_a_stopped_account_cannot_commit() {
        let account = Account::open(None, None).unwrap();
        assert!(begin_commit(account.tag()).is_ok());
        assert!(committing(account.tag()));
        assert!(!account.stop(Stop::Deadline), "too late: it is committing");
        end_commit(account.tag());
        assert!(account.stop(Stop::Deadline));
        assert_eq!(begin_commit(account.tag()), Err(Stop::Deadline));
        assert!(
            begin_commit(Tag::NONE).is_ok(),
            "no account, nothing to stop"
        );
    }

    #[test]
    fn zeroed_blocks_are_zero_tagged_or_not() {
        let account = Account::open(None, None).unwrap();
        for tagged in [false, true] {
            let _in = tagged.then(|| enter(account.tag()));
            for align in [1, 8, 64] {
                let block = unsafe { A.alloc_zeroed(layout(999, align)) };
                assert!(unsafe { std::slice::from_raw_parts(block, 999) }
                    .iter()
                    .all(|b| *b == 0));
                unsafe { A.dealloc(block, layout(999, align)) };
            }
        }
        assert_eq!(account.used(), 0);
    }
}
