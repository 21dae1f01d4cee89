//! The driver mindlite's fuzz targets share. A target is a function of random bytes, read
//! as structured values through [`Unstructured`] (the shape `cargo fuzz` targets have, so a
//! coverage-guided fuzzer can run the same functions on nightly); this driver runs it on the
//! stable toolchain, in an ordinary `#[test]`:
//!
//! ```no_run
//! #[test]
//! fn numbers_parse_or_are_refused() {
//!     mindlite_fuzz::Target::new(2_000).run(|u| {
//!         let text: String = u.arbitrary()?;
//!         mindlite_fuzz::note("text", &text);
//!         let _ = text.parse::<i64>();
//!         Ok(())
//!     });
//! }
//! ```
//!
//! The test command runs each target for its fixed number of cases from a fixed seed, so a run
//! is the same every time. `FUZZ_CASES=n`, `FUZZ_SECONDS=s` and `FUZZ_SEED=n` run it longer or
//! differently (with `FUZZ_SECONDS` and no seed, a new seed each run, printed);
//! `FUZZ_CASE=i` runs case `i` alone, in process, printing its input. So
//! `FUZZ_SECONDS=600 cargo test --workspace` runs every target for ten minutes (two at a time
//! per test binary; a test filter such as `parse::fuzz` picks some), and the test command's
//! fixed cases take about 30 s of a debug build on two cores together.
//!
//! Each target runs in a child process of its own test binary (the test run again with only
//! that test selected), under an address-space limit and on a stack of a set size: a stack
//! overflow or a failed allocation aborts only the child, and the test fails naming the
//! target, the case, and how to run that case again. A panic anywhere in the child during a
//! case fails it too, even one the code under test catches and turns into an error.

use std::fmt::{self, Write as _};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use arbitrary::{self, Arbitrary, Unstructured};

/// The test command's base seed: fixed, so its runs are the same every time.
const DEFAULT_SEED: u64 = 0x6d69_6e64_6c69_7465;

/// How long one case may run before the child counts as hung.
const HANG_AFTER: Duration = Duration::from_secs(120);

/// Characters of one [`note`] kept for a failure report.
const NOTE_CHARS: usize = 2000;

/// The progress file: the case running (or the number run), whether the run finished, and
/// the contained panics so far (see [`Target::contained_panics_from`]); then the case's notes.
const HEADER: usize = 24;
const RUNNING: u64 = 1;
const FINISHED: u64 = 2;

/// One fuzz target's settings; [`Target::run`] runs it.
#[derive(Debug, Clone)]
pub struct Target {
    cases: u64,
    max_len: usize,
    memory_mb: u64,
    stack_bytes: usize,
    contained: &'static [&'static str],
}

impl Target {
    /// A target run for `cases` cases in the test command. Inputs are up to 4 KiB of bytes,
    /// the child may take 1 GiB of address space more than it starts with, and cases run on
    /// a 2 MiB stack (the engine's runtime threads' size).
    pub fn new(cases: u64) -> Target {
        Target {
            cases,
            max_len: 4096,
            memory_mb: 1024,
            stack_bytes: 2 * 1024 * 1024,
            contained: &[],
        }
    }

    /// Crates (`parquet`) that panic on some bad input where they should fail, and whose
    /// panics the code under test contains (catches and turns into errors): a panic raised
    /// while one of their functions is on the stack, and caught, is counted and shown, not a
    /// failure. One that escapes still fails the case, as does any panic elsewhere.
    pub fn contained_panics_from(mut self, crates: &'static [&'static str]) -> Target {
        self.contained = crates;
        self
    }

    /// The most random bytes one case is given.
    pub fn max_len(mut self, bytes: usize) -> Target {
        self.max_len = bytes;
        self
    }

    /// The address space the child may take beyond what it has when it starts, in MiB: an
    /// allocation past it fails, and the failure aborts the child.
    pub fn memory_mb(mut self, mb: u64) -> Target {
        self.memory_mb = mb;
        self
    }

    /// The stack each case runs on.
    pub fn stack_bytes(mut self, bytes: usize) -> Target {
        self.stack_bytes = bytes;
        self
    }

    /// Runs `case` on each case's bytes (see the crate's notes). `case` panics when the code
    /// under test misbehaves; an `Err` (the bytes ran out) ends a case quietly.
    pub fn run<F>(self, case: F)
    where
        F: Fn(&mut Unstructured<'_>) -> arbitrary::Result<()> + Sync,
    {
        let settings = Settings::from_env();
        let name = std::thread::current()
            .name()
            .filter(|name| *name != "main")
            .map(str::to_string);
        if let Some(index) = settings.case {
            let seed = settings.seed.unwrap_or(DEFAULT_SEED);
            return self.one_case(seed, index, &case);
        }
        match (std::env::var("FUZZ_CHILD"), name) {
            (Ok(_), _) => self.child(&settings, &case),
            (Err(_), Some(name)) => self.parent(&name, &settings),
            // Without the test's name it cannot be run again alone: run it here.
            (Err(_), None) => self.child(&settings, &case),
        }
    }

    /// Runs the target in a child process and fails with what happened there.
    fn parent(&self, name: &str, settings: &Settings) {
        let seed = settings.seed.unwrap_or(if settings.seconds.is_some() {
            clock_seed()
        } else {
            DEFAULT_SEED
        });
        let dir = std::env::temp_dir();
        let stem = format!("mindlite-fuzz-{}-{}", std::process::id(), seed_id());
        let progress = dir.join(format!("{stem}.progress"));
        let log = dir.join(format!("{stem}.log"));
        std::fs::write(&progress, [0u8; HEADER]).expect("the temporary directory is writable");
        let output = std::fs::File::create(&log).expect("the temporary directory is writable");
        let started = Instant::now();
        let mut child = Command::new(std::env::current_exe().expect("the test binary's path"))
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("FUZZ_CHILD", name)
            .env("FUZZ_PROGRESS", &progress)
            .env("FUZZ_SEED", seed.to_string())
            // glibc reserves 64 MiB of address space per malloc arena; a few are plenty here.
            .env("MALLOC_ARENA_MAX", "2")
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("a log file handle"))
            .stderr(output)
            .spawn()
            .expect("the test binary runs again as a child");
        // Hung: the same case running (or none started) for HANG_AFTER.
        let (mut last, mut since) = ((u64::MAX, 0), Instant::now());
        let status = loop {
            if let Some(status) = child.try_wait().expect("the child can be waited for") {
                break Some(status);
            }
            let (at, state, _, _) = read_progress(&progress);
            if (at, state) != last {
                (last, since) = ((at, state), Instant::now());
            } else if since.elapsed() > HANG_AFTER {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (at, state, contained, notes) = read_progress(&progress);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&progress);
        let _ = std::fs::remove_file(&log);
        let seconds = started.elapsed().as_secs_f64();
        let failure = match status {
            Some(status) if status.success() && state == FINISHED => {
                let contained = match contained {
                    0 => String::new(),
                    n => format!("; {n} panics in dependencies were contained"),
                };
                eprintln!(
                    "fuzz target {name}: {at} cases in {seconds:.1} s (FUZZ_SEED={seed}){contained}"
                );
                return;
            }
            Some(status) if status.success() => format!(
                "the child process ran no fuzz target: is `{name}` this test's path, and does it call Target::run?"
            ),
            Some(status) => how_it_ended(status, self.memory_mb),
            None => format!(
                "it hung: one case ran for more than {} s",
                HANG_AFTER.as_secs()
            ),
        };
        let case = if state == RUNNING {
            format!(
                " at case {at}; run that case alone with\n  FUZZ_SEED={seed} FUZZ_CASE={at} cargo test {name} -- --exact --nocapture\n--- the case's input ---\n{notes}"
            )
        } else {
            String::new()
        };
        panic!(
            "fuzz target {name} failed after {seconds:.1} s: {failure}{case}\n--- the child's output (its end) ---\n{}",
            tail(&text, 8000)
        );
    }

    /// Runs the cases in this process: the child's part.
    fn child<F>(&self, settings: &Settings, case: &F)
    where
        F: Fn(&mut Unstructured<'_>) -> arbitrary::Result<()> + Sync,
    {
        let seed = settings.seed.unwrap_or(DEFAULT_SEED);
        if let Some(path) = std::env::var_os("FUZZ_PROGRESS") {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(PathBuf::from(path))
                .expect("the progress file the parent made");
            let _ = PROGRESS.set(std::sync::Mutex::new(file));
        }
        count_panics(self.contained);
        limit_address_space(self.memory_mb);
        let deadline = settings
            .seconds
            .map(|s| Instant::now() + Duration::from_secs(s));
        let cases = match (settings.cases, deadline) {
            (Some(cases), _) => cases,
            (None, Some(_)) => u64::MAX,
            (None, None) => self.cases,
        };
        let ran = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("fuzz case".into())
                .stack_size(self.stack_bytes)
                .spawn_scoped(scope, || {
                    let mut index = 0;
                    while index < cases && deadline.is_none_or(|d| Instant::now() < d) {
                        write_progress(index, RUNNING);
                        self.run_case(seed, index, case);
                        index += 1;
                    }
                    index
                })
                .expect("a thread for the cases")
                .join()
                .unwrap_or_else(|panic| panic::resume_unwind(panic))
        });
        write_progress(ran, FINISHED);
    }

    /// Case `index` alone, its notes printed as they are made (`FUZZ_CASE`).
    fn one_case<F>(&self, seed: u64, index: u64, case: &F)
    where
        F: Fn(&mut Unstructured<'_>) -> arbitrary::Result<()> + Sync,
    {
        PRINT_NOTES.store(1, Ordering::Relaxed);
        count_panics(self.contained);
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(self.stack_bytes)
                .spawn_scoped(scope, || self.run_case(seed, index, case))
                .expect("a thread for the case")
                .join()
                .unwrap_or_else(|panic| panic::resume_unwind(panic))
        });
        eprintln!("fuzz case {index} of FUZZ_SEED={seed} passed");
    }

    fn run_case<F>(&self, seed: u64, index: u64, case: &F)
    where
        F: Fn(&mut Unstructured<'_>) -> arbitrary::Result<()> + Sync,
    {
        let bytes = case_bytes(seed, index, self.max_len);
        NOTES.with(|notes| notes.borrow_mut().clear());
        let panics = PANICS.load(Ordering::Relaxed);
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            let mut u = Unstructured::new(&bytes);
            let _ = case(&mut u);
        }));
        let caught = PANICS.load(Ordering::Relaxed) != panics;
        // A child's notes are in its progress file, which the parent shows.
        if (outcome.is_err() || caught) && PROGRESS.get().is_none() {
            let notes = NOTES.with(|notes| notes.borrow().clone());
            eprintln!("fuzz case {index} of FUZZ_SEED={seed} failed; its input:\n{notes}");
        }
        match outcome {
            Err(panic) => panic::resume_unwind(panic),
            Ok(()) if caught => panic!(
                "code under test panicked (printed above) and the panic was caught on the way: a panic is not a clear error"
            ),
            Ok(()) => {}
        }
    }
}

/// Records what a case is working on (`label: value`, cut to 2,000 characters), printed
/// when the case fails, and as it is made when a case runs alone (`FUZZ_CASE`).
pub fn note(label: &str, value: &dyn fmt::Debug) {
    let mut text = Bounded(String::new());
    let _ = write!(text, "{label}: {value:?}");
    let mut text = text.0;
    if text.len() >= NOTE_CHARS {
        text.push_str(" …");
    }
    if PRINT_NOTES.load(Ordering::Relaxed) == 1 {
        eprintln!("{text}");
    }
    text.push('\n');
    write_note(&text);
    NOTES.with(|notes| notes.borrow_mut().push_str(&text));
}

/// `original` with one to eight random changes: bits flipped, bytes and integers (LE and BE)
/// overwritten with boundary values, bytes inserted, deleted, repeated, or the end cut off.
/// For structured-random inputs: mutated valid files reach deeper than random bytes.
pub fn mutate(u: &mut Unstructured<'_>, original: &[u8]) -> arbitrary::Result<Vec<u8>> {
    const INTERESTING: [u64; 14] = [
        0,
        1,
        0x7f,
        0x80,
        0xff,
        0x7fff,
        0xffff,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        1 << 40,
        i64::MAX as u64,
        u64::MAX,
        u64::MAX - 1,
    ];
    let mut out = original.to_vec();
    for _ in 0..u.int_in_range(1..=8)? {
        let at = if out.is_empty() {
            0
        } else {
            u.choose_index(out.len())?
        };
        match u.int_in_range(0..=6u8)? {
            0 if !out.is_empty() => out[at] ^= 1 << u.int_in_range(0..=7)?,
            1 if !out.is_empty() => out[at] = *u.choose(&[0u8, 1, 0x7f, 0x80, 0xff])?,
            2 => {
                let value = *u.choose(&INTERESTING)?;
                let width = *u.choose(&[2usize, 4, 8])?;
                let bytes = if u.arbitrary()? {
                    value.to_le_bytes()
                } else {
                    value.to_be_bytes()
                };
                let bytes = if u.arbitrary()? {
                    &bytes[..width]
                } else {
                    &bytes[8 - width..]
                };
                let end = (at + width).min(out.len());
                out.splice(at..end, bytes.iter().copied());
            }
            3 => {
                let len = u.int_in_range(1..=16)?;
                let inserted: Vec<u8> =
                    (0..len).map(|_| u.arbitrary()).collect::<Result<_, _>>()?;
                out.splice(at..at, inserted);
            }
            4 => {
                let end = (at + u.int_in_range(1..=64)?).min(out.len());
                out.drain(at..end);
            }
            5 => {
                let end = (at + u.int_in_range(1..=64)?).min(out.len());
                let repeated = out[at..end].to_vec();
                for _ in 0..u.int_in_range(1..=4)? {
                    out.splice(at..at, repeated.iter().copied());
                }
            }
            _ => out.truncate(at),
        }
    }
    Ok(out)
}

/// A count or size as hostile input picks one: mostly small, often at a boundary (a power of
/// two, just past it, the largest `i32`, `u32`, `i64`), sometimes anything at all.
pub fn extreme_number(u: &mut Unstructured<'_>) -> arbitrary::Result<u64> {
    Ok(match u.int_in_range(0..=9u8)? {
        0..=4 => u.int_in_range(0..=16)?,
        5 | 6 => {
            let power = 1u64 << u.int_in_range(0..=63)?;
            match u.int_in_range(0..=2u8)? {
                0 => power - 1,
                1 => power,
                _ => power.saturating_add(1),
            }
        }
        7 => *u.choose(&[
            i32::MAX as u64,
            u32::MAX as u64,
            i64::MAX as u64,
            u64::MAX,
            usize::MAX as u64 / 2,
        ])?,
        _ => u.arbitrary()?,
    })
}

/// What the environment asks of a run.
struct Settings {
    cases: Option<u64>,
    seconds: Option<u64>,
    seed: Option<u64>,
    case: Option<u64>,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |key: &str| {
            std::env::var(key).ok().map(|text| {
                text.trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("{key} must be a whole number, not '{text}'"))
            })
        };
        Settings {
            cases: number("FUZZ_CASES"),
            seconds: number("FUZZ_SECONDS"),
            seed: number("FUZZ_SEED"),
            case: number("FUZZ_CASE"),
        }
    }
}

thread_local! {
    static NOTES: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The child's progress file, where [`note`] writes too (so an abort's report shows them).
static PROGRESS: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> = std::sync::OnceLock::new();

/// Panics seen by the hook [`count_panics`] installs.
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Panics in the dependencies named by [`Target::contained_panics_from`].
static CONTAINED: AtomicU64 = AtomicU64::new(0);

/// 1 when notes are printed as they are made.
static PRINT_NOTES: AtomicU64 = AtomicU64::new(0);

/// Counts every panic of the process (and prints it as before), so one that the code under
/// test catches is still seen.
fn count_panics(contained: &'static [&'static str]) {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !contained.is_empty() && inside_any(contained) {
            CONTAINED.fetch_add(1, Ordering::Relaxed);
        } else {
            PANICS.fetch_add(1, Ordering::Relaxed);
        }
        previous(info);
    }));
}

/// Whether a function of one of `crates` is on the stack: a frame named `krate::…` (or
/// `<krate::…`), or one whose source is the crate's folder in cargo's registry
/// (`…/krate-1.2.3/src/…`), so a panic raised inside them, wherever its message points.
fn inside_any(crates: &[&str]) -> bool {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace.lines().map(str::trim_start).any(|line| {
        crates.iter().any(|krate| match line.strip_prefix("at ") {
            Some(path) => {
                let folder = format!("/{}-", krate.replace('_', "-"));
                path.match_indices(&folder).any(|(at, _)| {
                    path[at + folder.len()..].starts_with(|c: char| c.is_ascii_digit())
                })
            }
            None => line.split_once(": ").is_some_and(|(_, symbol)| {
                symbol
                    .trim_start_matches('<')
                    .strip_prefix(krate)
                    .is_some_and(|rest| rest.starts_with("::"))
            }),
        })
    })
}

/// Limits the process's address space to what it has now plus `mb` MiB, so an allocation
/// sized by input fails (and aborts) instead of taking the machine's memory.
fn limit_address_space(mb: u64) {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let current_kb = status
            .lines()
            .find_map(|line| line.strip_prefix("VmSize:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            });
        if let Some(kb) = current_kb {
            let bytes = (kb + mb * 1024) * 1024;
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: setrlimit reads the struct it is given and nothing else.
            let set = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
            assert_eq!(set, 0, "setrlimit(RLIMIT_AS) failed");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = mb;
}

/// Why a child that did not succeed ended.
fn how_it_ended(status: std::process::ExitStatus, memory_mb: u64) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return match signal {
                libc::SIGABRT => format!(
                    "the process aborted (SIGABRT): a stack overflow, a failed allocation (the limit is {memory_mb} MiB above the start) or another abort"
                ),
                libc::SIGSEGV | libc::SIGBUS => {
                    format!("the process crashed on a bad memory access (signal {signal})")
                }
                other => format!("the process was killed by signal {other}"),
            };
        }
    }
    let _ = memory_mb;
    match status.code() {
        Some(101) => "a case panicked".to_string(),
        Some(code) => format!("the process exited with status {code}"),
        None => "the process ended without a status".to_string(),
    }
}

/// Writes the case running (or the number run) and the state to the progress file, and
/// drops the last case's notes from it.
fn write_progress(index: u64, state: u64) {
    let Some(file) = PROGRESS.get() else {
        return;
    };
    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
    let mut bytes = [0u8; HEADER];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes[8..16].copy_from_slice(&state.to_le_bytes());
    bytes[16..].copy_from_slice(&CONTAINED.load(Ordering::Relaxed).to_le_bytes());
    let written = file
        .set_len(HEADER as u64)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(&bytes));
    written.expect("the progress file is writable");
}

/// Appends a note to the progress file, after the case's earlier ones.
fn write_note(text: &str) {
    let Some(file) = PROGRESS.get() else {
        return;
    };
    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
    let written = file
        .seek(SeekFrom::End(0))
        .and_then(|_| file.write_all(text.as_bytes()));
    written.expect("the progress file is writable");
}

/// The progress file's case, state, contained panics and notes.
fn read_progress(path: &Path) -> (u64, u64, u64, String) {
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|mut file| file.read_to_end(&mut bytes));
    if read.is_err() || bytes.len() < HEADER {
        return (0, 0, 0, String::new());
    }
    let word = |range: std::ops::Range<usize>| {
        u64::from_le_bytes(bytes[range].try_into().expect("eight bytes"))
    };
    let notes = String::from_utf8_lossy(&bytes[HEADER..]).into_owned();
    (word(0..8), word(8..16), word(16..24), notes)
}

/// The random bytes of case `index`: a length mostly short (structure-driven targets need few
/// bytes, and short inputs are fast), sometimes up to `max_len`.
fn case_bytes(seed: u64, index: u64, max_len: usize) -> Vec<u8> {
    let mut rng = SplitMix64(seed ^ index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let bound = match rng.next() % 10 {
        0..=4 => 64.min(max_len),
        5..=7 => 1024.min(max_len),
        _ => max_len,
    };
    let len = (rng.next() % (bound as u64 + 1)) as usize;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        bytes.extend_from_slice(&rng.next().to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// A small, fast generator that is the same everywhere (cases must replay from their seed).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A seed from the clock, for runs on demand without `FUZZ_SEED`.
fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SplitMix64(nanos).next()
}

/// A number distinguishing the temporary files of targets run at once by one process.
fn seed_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The last `max` bytes of `text` (at a character boundary).
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// A writer that keeps the first [`NOTE_CHARS`] bytes and then stops the formatting.
struct Bounded(String);

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = NOTE_CHARS.saturating_sub(self.0.len());
        if s.len() <= room {
            self.0.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.push_str(&s[..end]);
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_replay_from_their_seed() {
        assert_eq!(case_bytes(7, 3, 4096), case_bytes(7, 3, 4096));
        assert_ne!(case_bytes(7, 3, 4096), case_bytes(7, 4, 4096));
        assert!((0..200).all(|i| case_bytes(1, i, 100).len() <= 100));
    }

    #[test]
    fn mutations_change_the_input_within_bounds() {
        let original = b"PAR1 some bytes of a file PAR1".to_vec();
        let mut changed = 0;
        for i in 0..200 {
            let bytes = case_bytes(9, i, 256);
            let mut u = Unstructured::new(&bytes);
            if let Ok(mutated) = mutate(&mut u, &original) {
                changed += usize::from(mutated != original);
                assert!(mutated.len() <= original.len() + 8 * 4 * 64 + 8 * 16);
            }
        }
        assert!(
            changed > 100,
            "only {changed} of 200 mutations changed anything"
        );
    }

    #[test]
    fn notes_are_cut_to_their_bound() {
        NOTES.with(|notes| notes.borrow_mut().clear());
        note("long", &"x".repeat(10 * NOTE_CHARS));
        let kept = NOTES.with(|notes| notes.borrow().len());
        assert!(kept < NOTE_CHARS + 16, "{kept}");
    }

    /// What the test fails with when `case` runs as a target; in the child, just runs it.
    fn failure_of<F>(target: Target, case: F) -> Option<String>
    where
        F: Fn(&mut Unstructured<'_>) -> arbitrary::Result<()> + Sync,
    {
        if std::env::var_os("FUZZ_CHILD").is_some() {
            target.run(case);
            return None;
        }
        let failed = panic::catch_unwind(AssertUnwindSafe(|| target.run(case))).err()?;
        Some(match failed.downcast::<String>() {
            Ok(message) => *message,
            Err(_) => "a panic without a message".to_string(),
        })
    }

    #[test]
    fn an_abort_fails_the_test_naming_the_case() {
        let Some(failure) = failure_of(Target::new(50), |u| {
            let _: u8 = u.arbitrary()?;
            if read_progress_in_child() == 7 {
                std::process::abort();
            }
            Ok(())
        }) else {
            return;
        };
        assert!(failure.contains("SIGABRT"), "{failure}");
        assert!(failure.contains("at case 7"), "{failure}");
        assert!(failure.contains("FUZZ_CASE=7"), "{failure}");
    }

    #[test]
    fn an_allocation_past_the_memory_limit_fails_the_test() {
        let Some(failure) = failure_of(Target::new(5).memory_mb(256), |_| {
            let huge = vec![1u8; 1 << 30];
            assert_eq!(huge.len(), 1 << 30);
            Ok(())
        }) else {
            return;
        };
        assert!(failure.contains("memory allocation"), "{failure}");
        assert!(failure.contains("at case 0"), "{failure}");
    }

    #[test]
    fn a_caught_panic_still_fails_the_test() {
        let Some(failure) = failure_of(Target::new(5), |_| {
            let _ = panic::catch_unwind(|| panic!("deep inside"));
            Ok(())
        }) else {
            return;
        };
        assert!(failure.contains("deep inside"), "{failure}");
        assert!(
            failure.contains("a panic is not a clear error"),
            "{failure}"
        );
    }

    #[test]
    fn a_caught_panic_inside_a_named_crate_is_contained() {
        let target = Target::new(5).contained_panics_from(&["arbitrary"]);
        let failure = failure_of(target, |_| {
            // arbitrary asserts its range is not empty: a panic raised inside that crate.
            let empty = panic::catch_unwind(|| {
                let (low, high) = (std::hint::black_box(5u8), 1u8);
                let mut u = Unstructured::new(&[]);
                let _ = u.int_in_range(low..=high);
            });
            assert!(empty.is_err());
            Ok(())
        });
        assert_eq!(failure, None);
    }

    /// The case the child is running, from its progress file.
    fn read_progress_in_child() -> u64 {
        let path = std::env::var_os("FUZZ_PROGRESS").expect("run as a child");
        read_progress(Path::new(&path)).0
    }

    #[test]
    fn an_abort_is_reported_with_the_cases_notes() {
        let Some(failure) = failure_of(Target::new(50), |u| {
            let value: u8 = u.arbitrary()?;
            note("the value", &value);
            if read_progress_in_child() == 3 {
                note("about to", &"abort");
                std::process::abort();
            }
            Ok(())
        }) else {
            return;
        };
        assert!(failure.contains("about to: \"abort\""), "{failure}");
        assert_eq!(failure.matches("the value: ").count(), 1, "{failure}");
    }

    #[test]
    fn a_passing_target_runs_its_cases_in_a_child_process() {
        let seen = AtomicU64::new(0);
        Target::new(50).run(|u| {
            let _: u8 = u.arbitrary()?;
            seen.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        // The cases ran in the child; this process only waited for it.
        if std::env::var("FUZZ_CHILD").is_err() && std::env::var("FUZZ_CASE").is_err() {
            assert_eq!(seen.load(Ordering::Relaxed), 0);
        }
    }
}
