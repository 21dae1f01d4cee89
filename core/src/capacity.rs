//! Sizes that input controls, checked before memory is taken. A LIMIT, a `k`, a list
//! parameter's length, a repeat count, a file's declared size: where such a number sizes an
//! allocation, it goes through here first, against what the running statement may still use
//! (its memory account, see `memory`) or, outside any statement, what the process may; over it
//! is an error naming the limit and its configuration key, and nothing is allocated.
//!
//! The allocator's accounting stops a statement that grows past its budget at its next check;
//! these checks are for the one allocation that would be too large by itself (a
//! `Vec::with_capacity(limit)` of 160 TB aborts the process before any check could run), and
//! [`Tally`] for a loop that builds as it goes. Where a size has a natural bound (a search
//! never returns more than its index holds) it is clamped to it where it is used. A
//! test reads the engine's sources and fails on a capacity that comes neither from here nor
//! with a `// bounded: <why>` note (`tests::every_input_sized_allocation_is_checked`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

use crate::error::{Error, ErrorKind, Result};
use crate::memory;

/// Fails unless the rows `take` would copy out of `array` (a row at each `Some` index, NULL at
/// each `None`) fit, as [`check`] says: a row repeated many times (a group's text value copied
/// into every forecast of the group) is counted every time, its text's length each time.
pub(crate) fn check_taken(
    array: &dyn datafusion::arrow::array::Array,
    rows: impl Iterator<Item = Option<usize>>,
    what: &str,
) -> Result<()> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::DataType;
    let width = |row: usize| -> u64 {
        let text = match array.data_type() {
            DataType::Utf8 => array.as_string::<i32>().value(row).len(),
            DataType::LargeUtf8 => array.as_string::<i64>().value(row).len(),
            DataType::Utf8View => array.as_string_view().value(row).len(),
            DataType::Binary => array.as_binary::<i32>().value(row).len(),
            DataType::LargeBinary => array.as_binary::<i64>().value(row).len(),
            DataType::BinaryView => array.as_binary_view().value(row).len(),
            _ => 0,
        };
        text as u64 + 16
    };
    let bytes = rows
        .map(|row| row.filter(|&row| row < array.len()).map_or(16, width))
        .fold(0u64, u64::saturating_add);
    check(bytes, what)
}

/// Fails unless `bytes` more fit in what the running statement (or, outside one, the
/// process) may still hold; `what` names the thing being sized in the error.
pub(crate) fn check(bytes: u64, what: &str) -> Result<()> {
    let process = memory::ceiling()
        .unwrap_or(u64::MAX)
        .saturating_sub(memory::live_bytes());
    let (remaining, limit) = match memory::remaining(memory::current()) {
        Some(own) if own <= process => (
            own,
            "query.statement_memory_mb, or the plan's max_memory_mb",
        ),
        _ => (process, "query.process_memory_mb"),
    };
    if bytes <= remaining {
        return Ok(());
    }
    Err(over(bytes, remaining, what, limit))
}

/// Bytes the running statement (or, outside one, the process) may still take.
pub(crate) fn remaining() -> u64 {
    let process = memory::ceiling()
        .unwrap_or(u64::MAX)
        .saturating_sub(memory::live_bytes());
    memory::remaining(memory::current()).map_or(process, |own| own.min(process))
}

fn over(bytes: u64, remaining: u64, what: &str, limit: &str) -> Error {
    // The process's memory is everyone's: short of it, the statement may run later (503);
    // short of its own limit, it never will (400).
    let kind = if limit == "query.process_memory_mb" {
        ErrorKind::Unavailable
    } else {
        ErrorKind::InvalidInput
    };
    Error::new(
        kind,
        format!(
            "{what} needs {} MiB, more than the statement may still use ({} MiB under the limit {limit}); nothing was allocated",
            bytes.div_ceil(1 << 20),
            remaining >> 20
        ),
    )
}

/// Counts `bytes` for the running statement before it allocates them (a function's result,
/// say), so that two statements cannot both pass a check and then together go past a limit;
/// fails naming the limit when they do not fit. The allocations this thread makes while the
/// returned value lives take from it; the rest is given back when it is dropped.
pub(crate) fn hold(bytes: u64, what: &str) -> Result<Option<memory::Reservation>> {
    if !memory::installed() {
        return check(bytes, what).map(|()| None);
    }
    memory::reserve(bytes).map(Some).map_err(|stop| {
        let remaining = memory::remaining(memory::current()).unwrap_or(0);
        let limit = match stop {
            memory::Stop::OverLimit => "query.statement_memory_mb",
            memory::Stop::ParentOverLimit => "the plan's max_memory_mb",
            _ => "query.process_memory_mb",
        };
        let remaining = match stop {
            memory::Stop::ProcessCeiling => memory::ceiling()
                .unwrap_or(u64::MAX)
                .saturating_sub(memory::live_bytes()),
            _ => remaining,
        };
        over(bytes, remaining, what, limit)
    })
}

/// Bytes of `n` values of `T`, saturating.
fn bytes_of<T>(n: usize) -> u64 {
    (n as u64).saturating_mul(size_of::<T>().max(1) as u64)
}

/// `Vec::with_capacity(n)`, once `n` values of `T` are known to fit (counted as they are
/// checked, see [`hold`]).
pub(crate) fn vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let _held = hold(bytes_of::<T>(n), what)?;
    Ok(Vec::with_capacity(n))
}

/// Makes room in `set` for `n` more values, counting the larger table it grows into before it
/// is allocated, or fails naming the limit. A set that collects a table's keys grows by
/// doubling, and its last doubling is one allocation of up to hundreds of MiB: the budget's
/// next check would see it only once made. Call it before each batch of inserts; `what`
/// names the set, and is made only when the set must grow.
pub(crate) fn grow_set<T: Eq + Hash, S: BuildHasher>(
    set: &mut HashSet<T, S>,
    n: usize,
    what: impl FnOnce() -> String,
) -> Result<()> {
    let (len, capacity) = (set.len(), set.capacity());
    grow::<T>(len, capacity, n, what, || set.try_reserve(n))
}

/// [`grow_set`] for a map: its table holds a key and a value per bucket.
pub(crate) fn grow_map<K: Eq + Hash, V, S: BuildHasher>(
    map: &mut HashMap<K, V, S>,
    n: usize,
    what: impl FnOnce() -> String,
) -> Result<()> {
    let (len, capacity) = (map.len(), map.capacity());
    grow::<(K, V)>(len, capacity, n, what, || map.try_reserve(n))
}

/// Room for `n` more entries of `T` in a table of `len` entries and room for `capacity`:
/// `reserve` is called while the larger table's bytes are held.
fn grow<T>(
    len: usize,
    capacity: usize,
    n: usize,
    what: impl FnOnce() -> String,
    reserve: impl FnOnce() -> std::result::Result<(), std::collections::TryReserveError>,
) -> Result<()> {
    let wanted = len.saturating_add(n);
    if wanted <= capacity {
        return Ok(());
    }
    let what = what();
    let _held = hold(table_bytes::<T>(wanted), &what)?;
    reserve().map_err(|e| Error::new(ErrorKind::InvalidInput, format!("{what}: {e}")))
}

/// Bytes of a hash table (std's, a swiss table) that holds `entries`: a power of two of
/// buckets, at least 8/7 of the entries, each one value and one control byte.
fn table_bytes<T>(entries: usize) -> u64 {
    let buckets = (entries as u64)
        .saturating_mul(8)
        .div_ceil(7)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    buckets.saturating_mul(size_of::<T>() as u64 + 1)
}

/// What a loop builds, checked as it grows (a list parameter expanded at each use, a
/// document's chunks): each step's bytes against what the statement may still hold, and the
/// statement's stop (a budget its allocations went over, its deadline) after each.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    bytes: u64,
}

impl Tally {
    /// Counts `bytes` more of `what`, or fails naming the limit.
    pub(crate) fn add(&mut self, bytes: u64, what: &str) -> Result<()> {
        self.bytes = self.bytes.saturating_add(bytes);
        // With the tracking allocator what was built so far is counted as held already.
        check(
            if memory::installed() {
                bytes
            } else {
                self.bytes
            },
            what,
        )?;
        crate::cancel::check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{enter, Account};

    #[test]
    fn a_size_over_the_statements_budget_is_refused_naming_the_limit() {
        let account = Account::open(Some(1 << 20), None).unwrap();
        let _in = enter(account.tag());
        assert_eq!(vec::<u8>(1000, "a list").unwrap().capacity(), 1000);
        let err = vec::<u64>(1 << 20, "the search's candidates").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message()
                .contains("the search's candidates needs 8 MiB"),
            "{err}"
        );
        assert!(err.message().contains("query.statement_memory_mb"), "{err}");
        // A count that would overflow when multiplied is refused, not wrapped.
        assert!(vec::<u64>(usize::MAX, "a vector").is_err());
    }

    #[test]
    fn a_set_grows_only_into_a_table_that_fits() {
        let account = Account::open(Some(4 << 20), None).unwrap();
        let _in = enter(account.tag());
        let mut set = HashSet::<u64>::new();
        grow_set(&mut set, 1000, || "the keys".into()).unwrap();
        assert!(set.capacity() >= 1000);
        set.extend(0..1000);
        // Room already made costs no check.
        grow_set(&mut set, 0, || unreachable!("no room to make")).unwrap();
        // 1M more keys need a table of 2M buckets (18 MiB): refused before it is made, the
        // set unchanged.
        let before = set.capacity();
        let err = grow_set(&mut set, 1 << 20, || "the table's keys".into()).unwrap_err();
        assert!(
            err.message().contains("the table's keys needs 18 MiB"),
            "{err}"
        );
        assert!(err.message().contains("query.statement_memory_mb"), "{err}");
        assert_eq!(set.capacity(), before);
        assert!(account.used() < 1 << 20, "{}", account.used());
    }

    #[test]
    fn a_size_counts_what_the_statement_already_holds() {
        let account = Account::open(Some(1 << 20), None).unwrap();
        let _in = enter(account.tag());
        // Held by the statement: half of its budget (the tests run on the tracking allocator).
        let held = vec![0u8; 600 * 1024];
        assert!(check(600 * 1024, "more").is_err());
        drop(held);
        assert!(check(600 * 1024, "more").is_ok());
    }

    #[test]
    fn outside_a_statement_the_process_ceiling_bounds_a_size() {
        assert!(memory::ceiling().is_none() || memory::ceiling() > Some(1 << 20));
        let err = vec::<u8>(usize::MAX, "a buffer").unwrap_err();
        assert!(
            err.message().contains("query.process_memory_mb")
                || err.message().contains("query.statement_memory_mb"),
            "{err}"
        );
    }

    /// Every place where a size may come from input — `with_capacity`, `vec![x; n]`,
    /// `reserve`, `repeat`, `resize` — either goes through this module or says why its size
    /// is bounded (`// bounded: <why>` on its line or the line above). A new one without
    /// either fails here, so an unchecked size cannot land by accident.
    #[test]
    fn every_input_sized_allocation_is_checked() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut unchecked = Vec::new();
        for dir in [
            "core/src",
            "memory/src",
            "vectors/src",
            "server/src",
            "ffi/src",
            "python/src",
        ] {
            scan(&root.join(dir), &root, &mut unchecked);
        }
        assert!(
            unchecked.is_empty(),
            "sizes that may come from input, neither checked by capacity:: nor marked \
             `// bounded: <why>`:\n{}",
            unchecked.join("\n")
        );
    }

    fn scan(dir: &std::path::Path, root: &std::path::Path, unchecked: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                scan(&path, root, unchecked);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs")
                || path.ends_with("capacity.rs")
                || declared_for_tests(&path)
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                // Tests size things themselves: a test module ends the scan. A `#[cfg(test)]`
                // on one item (a helper tests call) does not: the code after it is the
                // product's.
                let next = lines.get(n + 1).map_or("", |l| l.trim_start());
                if line.trim_start().starts_with("#[cfg(test)]")
                    && (next.starts_with("mod ") || next.starts_with("pub(crate) mod "))
                {
                    break;
                }
                if line.trim_start().starts_with("//") || !sizes_something(line) {
                    continue;
                }
                let marked = |l: &str| l.contains("// bounded:");
                if marked(line) || (n > 0 && marked(lines[n - 1])) {
                    continue;
                }
                let shown = path.strip_prefix(root).unwrap_or(&path).display();
                unchecked.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }

    /// Whether the module in `path` is test code as a whole: its parent declares it as
    /// `#[cfg(test)]` then `mod name;` (as the fuzz targets are), so it is skipped like the
    /// code after a `#[cfg(test)]` line.
    fn declared_for_tests(path: &std::path::Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_stem()) else {
            return false;
        };
        let declaration = format!("mod {};", name.to_string_lossy());
        [dir.with_extension("rs"), dir.join("mod.rs")]
            .iter()
            .filter_map(|parent| std::fs::read_to_string(parent).ok())
            .any(|text| {
                let lines: Vec<&str> = text.lines().map(str::trim).collect();
                lines
                    .windows(2)
                    .any(|pair| pair[0] == "#[cfg(test)]" && pair[1] == declaration)
            })
    }

    /// Whether a line sizes an allocation by a number that is not a constant.
    fn sizes_something(line: &str) -> bool {
        // A literal, an arithmetic of literals, or a CONSTANT: fixed by the code, not input.
        let constant = |argument: &str| {
            argument
                .split(|c: char| " *+-<>()".contains(c))
                .all(|word| {
                    word.is_empty()
                        || word.chars().all(|c| c.is_ascii_digit() || c == '_')
                        || word
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                })
        };
        // The first argument of a call: up to a comma or the closing parenthesis at its depth.
        let first_argument = |rest: &str| {
            let mut depth = 0;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '(' | '[' => depth += 1,
                    ')' | ']' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' | ']' => depth -= 1,
                    ',' if depth == 0 => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest[..end].to_string()
        };
        let calls = [
            "with_capacity(",
            ".reserve(",
            ".reserve_exact(",
            ".repeat(",
            ".resize(",
        ];
        if calls.iter().any(|call| {
            line.match_indices(call)
                .any(|(at, _)| !constant(&first_argument(&line[at + call.len()..])))
        }) {
            return true;
        }
        // `vec![value; n]` with a count that is not a constant.
        line.match_indices("vec![").any(|(at, _)| {
            let rest = &line[at + 5..];
            let Some(semi) = rest.find(';') else {
                return false;
            };
            let count = first_argument(&rest[semi + 1..]);
            rest[..semi].matches('[').count() == rest[..semi].matches(']').count()
                && !constant(&count)
        })
    }
}
