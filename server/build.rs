//! Link settings for `mindlite-server` on Linux.
//!
//! - A position-independent executable (the toolchain's default), so the server's addresses
//!   are randomised at every start: it is a network-facing program. Its relative relocations
//!   (about 200,000 pointers the loader fixes at start) are packed (`-z pack-relative-relocs`,
//!   DT_RELR): the table shrinks from 5.9 MB to 68 KB, which the loader no longer reads page by
//!   page at every start. Only where the build machine's glibc (2.36 and later) can load such a
//!   binary, since the binary then needs that glibc to start. Measured in docs/benchmarks.md (HTTP
//!   server): start-up and idle memory against a position-dependent build.
//! - Hot code first, when `MINDLITE_HOT_SYMBOLS` names a list of functions (one symbol a line)
//!   that start-up and common requests run: the linker places them together at the start of the
//!   code. Spread over 100 MB they kept about 50 MiB of code resident in an idle server, because
//!   the kernel maps 64 KiB around each page touched; packed, about 6 MiB. `scripts/release.sh`
//!   builds the server, writes the list from a callgrind profile of that very build
//!   (`scripts/hot_code.py`) and relinks with it: symbol names carry hashes of the toolchain,
//!   the dependencies and the profile, so a list is only good for the build it was read from,
//!   and none is kept in the repository. Only `x86_64-unknown-linux-gnu` links with LLD by
//!   default (Rust 1.90 and later), and only LLD reads the list, so it is not passed when the
//!   build names a linker of its own.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MINDLITE_HOT_SYMBOLS");
    let target = std::env::var("TARGET").unwrap_or_default();
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let list = std::env::var_os("MINDLITE_HOT_SYMBOLS").map(std::path::PathBuf::from);
    let own_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || std::env::var("CARGO_ENCODED_RUSTFLAGS")
            .is_ok_and(|flags| flags.contains("link") || flags.contains("fuse-ld"));
    if target != "x86_64-unknown-linux-gnu" || !release || own_linker {
        return;
    }
    if let Some(list) = list {
        assert!(
            list.is_file(),
            "MINDLITE_HOT_SYMBOLS names {}, which is not a file",
            list.display()
        );
        println!("cargo:rerun-if-changed={}", list.display());
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            list.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    if glibc_loads_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc is 2.36 or later, the first whose loader reads packed
/// relative relocations (`getconf GNU_LIBC_VERSION` prints "glibc 2.36").
fn glibc_loads_relr() -> bool {
    let Ok(output) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
