//! `mindlite-server`: MindsDB's HTTP wire protocol over a mindlite engine. The server itself
//! lands with the HTTP server issue; until then this binary only explains that and exits.

fn main() -> std::process::ExitCode {
    eprintln!(
        "mindlite-server {}: the HTTP server is not built yet; use mindlite-shell (see README.md)",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::from(2)
}
