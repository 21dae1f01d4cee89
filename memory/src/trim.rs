//! Giving freed memory back to the system. glibc keeps what the process frees in its arenas
//! for later allocations; it returns only the free space at the top of each heap. Under a
//! load that allocates and frees hundreds of MiB in blocks of every size, the space left free
//! between live blocks grows: after the hostile benchmark's attack the server's resident size
//! stayed 230 MiB above what it had allocated, and at its peak that free space was 110–170 MiB
//! of it. `malloc_trim` hands the whole free pages inside the arenas back (`madvise`), so a
//! process that trims when that gap grows keeps its resident size near what it uses.
//!
//! Trimming walks every free block of an arena with the arena locked, so it is done from one
//! thread, at most once a second, and only once the gap has grown by [`SLACK`] over its
//! lowest point since the last trim: a process whose memory holds steady never trims; one
//! that allocates and frees much in cycles trims at most once a second.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

/// How far the gap between the resident size and the live bytes grows past its low point
/// before the arenas are trimmed.
const SLACK: u64 = 32 * 1024 * 1024;

/// How often the gap is looked at (one read of `/proc/self/statm`).
const EVERY: Duration = Duration::from_secs(1);

/// Whether the trimming thread has been started (once per process).
static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts a thread that trims the C library's arenas when the memory they keep free has
/// grown (see the module comment), for processes whose allocations go through
/// [`TrackingAllocator`](crate::TrackingAllocator) (it measures what is live). Only on Linux
/// with glibc; elsewhere, and when called again, it does nothing. A server calls it; a
/// library leaves the host's allocator alone.
pub fn keep_malloc_trimmed() {
    if STARTED.swap(true, Relaxed) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // A process that cannot start a thread has larger problems; it runs untrimmed.
        let _ = std::thread::Builder::new()
            .name("mindlite-trim".into())
            .stack_size(64 * 1024)
            .spawn(trim_forever);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_forever() {
    let mut gap = Gap::default();
    loop {
        std::thread::sleep(EVERY);
        // A failed read (no file descriptor left, say, under a flood of connections)
        // skips this look, not every later one.
        let Some(now) = free_kept() else {
            continue;
        };
        if gap.grown(now) {
            // SAFETY: malloc_trim takes no pointers and may be called from any thread.
            unsafe {
                libc::malloc_trim(0);
            }
            gap.trimmed(free_kept().unwrap_or(now));
        }
    }
}

/// The low point of the gap since the last trim.
#[derive(Debug)]
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
struct Gap {
    low: u64,
}

impl Default for Gap {
    fn default() -> Gap {
        Gap { low: u64::MAX }
    }
}

impl Gap {
    /// Whether the gap, `now` bytes, has grown by more than [`SLACK`] over its low point.
    fn grown(&mut self, now: u64) -> bool {
        self.low = self.low.min(now);
        now > self.low.saturating_add(SLACK)
    }

    /// After a trim, what could not be given back (code, stacks, part-used pages), `after`
    /// bytes, is the new low point, even when it is higher than the last one.
    fn trimmed(&mut self, after: u64) {
        self.low = after;
    }
}

/// The resident size above what is allocated: code, stacks and what the arenas keep free.
/// `None` when `/proc` cannot be read.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn free_kept() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system value.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    Some((pages * page).saturating_sub(crate::live_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_arenas_are_trimmed_once_the_gap_grows_past_the_slack_over_its_low_point() {
        let mut gap = Gap::default();
        assert!(!gap.grown(100 * MIB));
        assert!(!gap.grown(80 * MIB));
        // 32 MiB over the low point of 80 is not more than the slack; 1 byte further is.
        assert!(!gap.grown(112 * MIB));
        assert!(gap.grown(112 * MIB + 1));
        // A trim that gave back less than hoped sets a higher floor: no trim again at once.
        gap.trimmed(120 * MIB);
        assert!(!gap.grown(130 * MIB));
        assert!(gap.grown(160 * MIB));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_gap_is_read_from_proc() {
        // Without the tracking allocator nothing is live, so the gap is the resident size.
        assert!(free_kept().expect("/proc/self/statm") > 0);
    }
}
