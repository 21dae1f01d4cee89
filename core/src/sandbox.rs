//! Work on hostile input that no check of ours can bound from inside: a third-party reader
//! that builds, in one call, whatever the input describes (lopdf parses a PDF's objects into
//! trees ~100 times the size of their text before any callback sees them). Such work runs in
//! a child process forked for it, under an address-space limit (what the process maps now
//! plus the budget) and a CPU-time limit, and hands its result back through a pipe: a reader
//! that runs away dies alone, and the statement gets an error naming the limits.
//!
//! The parent waits on a blocking thread, checking the statement's deadline, memory and
//! cancellation between reads, and kills the child when the statement must stop or the wall
//! clock passes twice the CPU limit (a child stuck on a lock another thread held at the fork
//! uses no CPU). The child only computes on memory it already has, writes to the pipe, and
//! leaves with `_exit`: no destructor, no flush, no lock of the parent's is needed.
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
        child(write_end, limits, work);
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
                "The text of {what} is larger than {} MiB, the most one upload may decode to (files.max_decoded_mb); nothing was stored",
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
fn child(write_end: libc::c_int, limits: Limits, work: impl FnOnce() -> Result<Vec<u8>>) -> ! {
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
}
