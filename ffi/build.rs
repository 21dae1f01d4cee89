//! Regenerates `include/mindlite.h` from this crate's sources with cbindgen. The header is
//! committed; the test command fails when the build changes it (a stale header).

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let header = crate_dir.join("../include/mindlite.h");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=../include/mindlite.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("ffi/cbindgen.toml is valid");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen can read ffi/src");
    // Written only when it changed, so an unchanged header keeps its timestamp.
    let mut text = Vec::new();
    bindings.write(&mut text);
    // A read-only source tree (a packaged crate) keeps its header; the build goes on.
    if std::fs::read(&header).ok().as_deref() != Some(text.as_slice()) {
        if let Err(e) = std::fs::write(&header, text) {
            println!("cargo:warning=cannot write {}: {e}", header.display());
        }
    }
}
