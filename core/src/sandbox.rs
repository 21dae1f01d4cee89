//! Work on hostile input that no check of ours can bound from inside: a third-party reader
//! that builds, in one call, whatever the input describes (lopdf parses a PDF's objects into
//! trees ~100 times the size of their text before any callback sees them). Such work runs in
//! a child process forked for it, under an address-space limit (what the process maps now
//! plus the budget) and a CPU-time limit, and hands its result back through a pipe: a reader
//! that runs away dies alone, and the statement gets an error naming the limits.
//!
//! The parent holds the child's memory budget for the statement while the child lives (the
//! allocator cannot see a child's memory, so concurrent children are counted this way), waits
//! on a blocking thread, checking the statement's deadline, memory and cancellation between
//! reads, and kills the child when the statement must stop, when its CPU time stands still
//! for 5 s (a child stuck on a lock another thread held at the fork: a panic message being
//! printed, say), or when the wall clock passes twice the CPU limit. The child dies with its
//! parent (`PR_SET_PDEATHSIG`), keeps none of the parent's descriptors but its pipe and
//! stdio, writes no core file, only computes on memory it already has, writes to the pipe,
//! and leaves with `_exit`: no destructor, no flush.
//!
//! Linux only; elsewhere the work runs in the calling thread, bounded as its own checks allow.

use crate::error::{Error, Result};

/// What the child may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes the child may map beyond what the process maps when it forks.
    pub(crate) memory: u64,
    /// CPU seconds the child may use.
    pub(crate) seconds: u64,
    /// Bytes of result the parent takes; more is an error.
    pub(crate) max_output: u64,
}

/// The memory a child may map to read `input` bytes with a reader that needs about `base`
/// plus `per_byte` per input byte, at most `cap`: no more than the statement and the process
/// have left (less a margin for the parent's own work meanwhile), and at least [`FLOOR`] (when
/// even that is not left, [`run`]'s hold of it fails naming the limit). The child's memory is
/// held whole while it lives, whatever it uses, so it is sized by the input rather than at the
/// most a reader could want: one small upload must not take the process's memory from the
/// others.
pub(crate) fn memory_for(input: u64, base: u64, per_byte: u64, cap: u64) -> u64 {
    let wanted = base.saturating_add(input.saturating_mul(per_byte)).min(cap);
    wanted
        .min(crate::capacity::remaining().saturating_sub(MARGIN))
        .max(FLOOR)
}

/// The least memory a child is given.
pub(crate) const FLOOR: u64 = 32 << 20;
/// What the parent keeps for itself beside a child.
const MARGIN: u64 = 8 << 20;

/// Runs `work` in a child process under `limits`, returning its bytes; `what` names the
/// input in errors ("the PDF").
#[cfg(target_os = "linux")]
pub(crate) fn run(
    what: &str,
    limits: Limits,
    work: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    use std::time::{Duration, Instant};

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: a two-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::internal(format!(
            "cannot make a pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // The child's memory is invisible to the allocator's accounts: it is held for the
    // statement (and the process) while the child lives, so concurrent children cannot
    // together pass what the process may use.
    let _held = match crate::capacity::hold(limits.memory, &format!("reading {what}")) {
        Ok(held) => held,
        Err(e) => {
            // SAFETY: both ends are ours.
            unsafe {
                libc::close(read_end);
                libc::close(write_end);
            }
            return Err(e);
        }
    };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: fork has no preconditions; the child below runs only `child`, which ends in
    // `_exit` and touches no lock another thread could hold (see the module's comment).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: both ends are ours.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        return Err(Error::internal(format!(
            "cannot start a process to read {what}: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        // SAFETY: the read end is the child's copy.
        unsafe { libc::close(read_end) };
        child(parent, write_end, limits, work);
    }
    // SAFETY: the write end is the parent's copy; the child holds its own.
    unsafe { libc::close(write_end) };
    let stop = |reason: Error| -> Result<Vec<u8>> {
        // SAFETY: `pid` is our child, not yet waited for.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::close(read_end);
        }
        reap(pid);
        Err(reason)
    };
    let started = Instant::now();
    let wall = Duration::from_secs(limits.seconds.saturating_mul(2).max(1));
    // A child whose CPU time stands still is stuck (on a lock another thread held when it was
    // forked, say): its work is computing and writing to the pipe, nothing else.
    let (mut cpu, mut cpu_seen) = (cpu_ticks(pid), Instant::now());
    let mut output: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 64 * 1024];
    loop {
        if let Err(e) = crate::cancel::check() {
            return stop(e);
        }
        if started.elapsed() > wall {
            return stop(Error::invalid(format!(
                "Reading {what} took longer than {} s; it is refused",
                wall.as_secs()
            )));
        }
        if cpu_seen.elapsed() > STALL {
            let now = cpu_ticks(pid);
            if now == cpu && now.is_some() {
                return stop(Error::invalid(format!(
                    "{} could not be read: its reader stopped making progress; it is refused",
                    capitalized(what)
                )));
            }
            (cpu, cpu_seen) = (now, Instant::now());
        }
        let mut poll = libc::pollfd {
            fd: read_end,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        let ready = unsafe { libc::poll(&mut poll, 1, 100) };
        if ready <= 0 {
            continue;
        }
        // SAFETY: `buffer` is writable for its length.
        let n = unsafe { libc::read(read_end, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return stop(Error::internal(format!(
                "reading {what}'s result failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        if n == 0 {
            break;
        }
        if output.len() as u64 + n as u64 > limits.max_output.saturating_add(9) {
            return stop(Error::invalid(format!(
                "{} decodes to more than {} MiB, the most one upload may (files.max_decoded_mb); nothing was stored",
                capitalized(what),
                limits.max_output >> 20
            )));
        }
        output.extend_from_slice(&buffer[..n as usize]);
    }
    // SAFETY: the parent's read end, done with.
    unsafe { libc::close(read_end) };
    reap(pid);
    // The child's exit status is not trusted (a tool such as valgrind may change it): what it
    // wrote is, when it is whole: its length, then `O` and the result or `E` and a message.
    let whole = output.split_first_chunk::<8>().and_then(|(length, rest)| {
        (u64::from_le_bytes(*length) == rest.len() as u64).then_some(rest)
    });
    match whole.and_then(|rest| rest.split_first()) {
        Some((b'O', body)) => Ok(body.to_vec()),
        Some((_, message)) => Err(Error::invalid(
            String::from_utf8_lossy(message).into_owned(),
        )),
        None => Err(Error::invalid(format!(
            "{} could not be read within {} MiB of memory and {} s of CPU; it is refused",
            capitalized(what),
            limits.memory >> 20,
            limits.seconds
        ))),
    }
}

/// How long a child may use no CPU before it counts as stuck.
#[cfg(target_os = "linux")]
const STALL: std::time::Duration = std::time::Duration::from_secs(5);

/// The CPU time `pid` has used, in clock ticks (`/proc/<pid>/stat`'s utime + stime); None
/// once it is gone.
#[cfg(target_os = "linux")]
fn cpu_ticks(pid: libc::pid_t) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (in parentheses) may hold spaces; the fields after it do not.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the file, utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Elsewhere, the work runs here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn run(
    _what: &str,
    _limits: Limits,
    work: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    work()
}

#[cfg(target_os = "linux")]
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Waits for `pid` to end: a child not waited for would stay a zombie. (When the embedding
/// program ignores SIGCHLD there is nothing to wait for, and nothing stays.)
#[cfg(target_os = "linux")]
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    loop {
        // SAFETY: `status` is writable; `pid` is our child.
        let done = unsafe { libc::waitpid(pid, &mut status, 0) };
        if done == pid || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            return;
        }
    }
}

/// The child's side: limits set, the work done, its outcome written (its length as 8 bytes,
/// then `O` and the bytes, or `E` and the error's message), and out.
#[cfg(target_os = "linux")]
fn child(
    parent: libc::pid_t,
    write_end: libc::c_int,
    limits: Limits,
    work: impl FnOnce() -> Result<Vec<u8>>,
) -> ! {
    // The child must not outlive the parent, nor keep what the parent holds open (its
    // listening socket, its database file's lock, other requests' pipes) should the parent
    // die first: it dies with the parent, and keeps only its pipe (as fd 3) and stdio.
    // SAFETY: plain system calls on the child's own process and descriptors.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        const PIPE: libc::c_int = 3;
        if write_end != PIPE && libc::dup2(write_end, PIPE) != PIPE {
            libc::_exit(1);
        }
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
            let open: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
                .map(|dir| {
                    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                        .filter(|fd| *fd > PIPE)
                        .collect()
                })
                .unwrap_or_default();
            for fd in open {
                libc::close(fd);
            }
        }
    }
    let write_end = 3;
    let limit = |resource, value: u64| {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `current` is writable; setting a limit no higher than the hard one.
        unsafe {
            if libc::getrlimit(resource, &mut current) == 0 {
                let value = value.min(current.rlim_max);
                let wanted = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: current.rlim_max,
                };
                libc::setrlimit(resource, &wanted);
            }
        }
    };
    limit(
        libc::RLIMIT_AS,
        mapped_bytes().saturating_add(limits.memory),
    );
    limit(libc::RLIMIT_CPU, limits.seconds.max(1));
    // A reader killed by a limit leaves no core file of its gigabyte behind.
    limit(libc::RLIMIT_CORE, 0);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    let (tag, body) = match outcome {
        Ok(Ok(bytes)) => (b'O', bytes),
        Ok(Err(e)) => (b'E', e.message().as_bytes().to_vec()),
        Err(panic) => (
            b'E',
            format!(
                "The file is damaged (its reader failed: {})",
                crate::error::panic_message(panic.as_ref())
            )
            .into_bytes(),
        ),
    };
    let write_all = |mut bytes: &[u8]| {
        while !bytes.is_empty() {
            // SAFETY: `bytes` is readable for its length.
            let n = unsafe { libc::write(write_end, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                return;
            }
            bytes = &bytes[n as usize..];
        }
    };
    write_all(&(body.len() as u64 + 1).to_le_bytes());
    write_all(&[tag]);
    write_all(&body);
    // SAFETY: leaving the child without running anything of the parent's.
    unsafe { libc::_exit(0) }
}

/// Bytes the process maps now (its virtual size), from `/proc/self/statm`.
#[cfg(target_os = "linux")]
fn mapped_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pages.saturating_mul(page)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        memory: 256 << 20,
        seconds: 10,
        max_output: 1 << 20,
    };

    #[test]
    fn a_child_hands_back_its_result_or_its_error() {
        assert_eq!(
            run("x", LIMITS, || Ok(b"hello".to_vec())).unwrap(),
            b"hello"
        );
        let err = run("x", LIMITS, || Err(Error::invalid("bad input"))).unwrap_err();
        assert_eq!(err.message(), "bad input");
        let err = run("x", LIMITS, || panic!("boom")).unwrap_err();
        assert!(err.message().contains("boom"), "{err}");
    }

    #[test]
    fn a_child_that_runs_away_dies_alone() {
        let err = run("the test input", LIMITS, || {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 << 20]);
                if hoard.len() > 1_000 {
                    return Ok(Vec::new());
                }
            }
        })
        .unwrap_err();
        assert!(err.message().contains("within 256 MiB of memory"), "{err}");
        let err = run("x", LIMITS, || Ok(vec![b'a'; 2 << 20])).unwrap_err();
        assert!(err.message().contains("files.max_decoded_mb"), "{err}");
    }

    #[test]
    fn a_stuck_child_is_stopped_and_keeps_nothing_of_the_parents() {
        let started = std::time::Instant::now();
        let err = run("x", LIMITS, || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            Ok(Vec::new())
        })
        .unwrap_err();
        assert!(err.message().contains("stopped making progress"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        // A socket the parent listens on is not the child's.
        let _listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = run("x", LIMITS, || {
            let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            Ok(fds.join(",").into_bytes())
        })
        .unwrap();
        let open = String::from_utf8(open).unwrap();
        // stdio, the pipe (3), and the directory being listed.
        assert!(
            open.split(',').all(|fd| fd.parse::<i32>().unwrap() <= 4),
            "{open}"
        );
    }
}
