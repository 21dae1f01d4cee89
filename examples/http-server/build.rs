//! Links `mindlite-server` as a position-dependent executable on Linux. A PIE of this size
//! carries about 200,000 relocations that the dynamic loader applies at every start, reading
//! 5 MB of relocation records and writing 4 MB of pointer tables before `main`; a fixed load
//! address resolves them at link time instead. (The code is still position independent: only
//! the final link changes.)

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
