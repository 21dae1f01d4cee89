//! `mindlite-server`: MindsDB's HTTP wire protocol over a mindlite engine, so MindsDB's own
//! clients (`mindsdb_sdk`, curl scripts) work unchanged. tokio for I/O, `httparse` for requests;
//! every decision is the engine's, this binary only translates HTTP to engine calls and back.

mod agents;
mod callbacks;
mod connections;
mod databases;
mod files;
mod http;
mod jobs;
mod knowledge_bases;
mod mcp;
mod minds;
mod models;
mod mysql;
mod origin;
mod reply;
mod routes;
mod users;
mod views;

use std::path::PathBuf;

/// Every allocation counted toward the statement it is made for, so statements, users and the
/// process keep to their memory budgets (`query.statement_memory_mb`, plans' `max_memory_mb`,
/// `query.process_memory_mb`).
#[global_allocator]
static ALLOCATOR: mindlite::TrackingAllocator = mindlite::TrackingAllocator;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindlite::{Config, Engine};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connections::{Connections, Place, Refusal};
use crate::http::{BodyBudget, Connection, Limits, ReadError, Request, Response};
use crate::origin::Origins;

const USAGE: &str = "\
mindlite-server: MindsDB's HTTP API over an embedded mindlite database

Usage: mindlite-server [--config FILE] [--data PATH] [--host HOST] [--port PORT] [--mysql-port PORT]
       mindlite-server users COMMAND … (hosted edition user administration; `users --help`)

Options:
  --config FILE   TOML or JSON configuration (see docs/configuration.md); MINDLITE_* variables override it
  --data PATH     the database file [default: ./mindlite-data/mindlite.redb, created if missing]
  --host HOST     address to listen on [default: 127.0.0.1]
  --port PORT     TCP port, 0 for any free one [default: 47334]
  --mysql-port PORT
                  the MySQL wire protocol's TCP port, 0 for none [default: 47335]
  -h, --help      print this help
  -V, --version   print the version

One log line per HTTP request goes to stderr. SIGINT or SIGTERM stops accepting connections, lets
requests in flight finish, and closes the database cleanly.";

/// How long a request runs before the server starts watching for its client leaving.
const WATCH_AFTER: Duration = Duration::from_millis(20);

/// How long a shutdown waits for requests in flight before closing the database anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What the command line asked for.
struct Options {
    config: Option<PathBuf>,
    data: Option<PathBuf>,
    host: Option<String>,
    port: Option<u16>,
    mysql_port: Option<u16>,
    /// `users …`: the command's words and its `--plan`.
    users: Option<(Vec<String>, Option<String>)>,
}

fn main() -> ExitCode {
    tune_malloc();
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mindlite-server: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .init();
    let config = match load_config(&options) {
        Ok(config) => config,
        Err(message) => {
            tracing::error!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some((words, plan)) = options.users {
        return run_users(&words, plan, config);
    }
    let started = Instant::now();
    let path = config.storage.path.clone();
    let engine = match Engine::open(&path, config.clone()) {
        Ok(engine) => engine,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // Connections are served on the engine's own runtime: one set of threads, and a request
    // runs where it was read instead of hopping to another runtime and back.
    let runner = engine.clone();
    // What the arenas keep free after a load is given back (see `tune_malloc`).
    mindlite::keep_malloc_trimmed();
    let served = runner.block_on(serve(engine, config, started));
    // The last clone of the engine: dropping it closes the database file cleanly.
    drop(runner);
    match served {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// glibc gives threads that allocate at once arenas of their own, up to eight per core; a
/// server's many threads then keep freed memory in arenas no other thread reuses, which doubled
/// the peak RSS of a server under load (benches/hostile.sh: 1.1 GiB against 0.66 GiB with two).
/// Two arenas keep it bounded; `MALLOC_ARENA_MAX` in the environment still decides if set.
///
/// glibc also raises its mmap threshold to the size of each large block freed (up to 32 MiB),
/// so after one statement's large buffers are freed, later ones come from the arenas and
/// stay there once freed: after the hostile benchmark's attack the server held 540–620 MiB
/// with 11–34 MiB allocated, and its peak was that much above what was allocated. A fixed
/// threshold (glibc's starting value, 128 KiB) hands every large block back when it is
/// freed: 278–337 MiB after the attack, and a peak 80–160 MiB above what was allocated.
/// `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` in the environment still decide if set.
///
/// What remains of that gap is free space between live blocks, which glibc keeps until told
/// to trim: a serving process trims its arenas when it grows (`mindlite::keep_malloc_trimmed`).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = |name: &str| {
            std::env::var("GLIBC_TUNABLES").is_ok_and(|tunables| tunables.contains(name))
        };
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() && !tuned("arena_max") {
            // SAFETY: called first thing in main, before any other thread exists.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 2);
            }
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() && !tuned("mmap_threshold") {
            // SAFETY: as above.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
            }
        }
    }
}

/// Reads the options; `Ok(None)` when `--help` or `--version` was answered.
fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut options = Options {
        config: None,
        data: None,
        host: None,
        port: None,
        mysql_port: None,
        users: None,
    };
    let mut args = args.peekable();
    if args.peek().map(String::as_str) == Some("users") {
        args.next();
        options.users = Some((Vec::new(), None));
    }
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_string(), Some(value.to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => {
                match options.users {
                    Some(_) => println!("{}", users::USAGE),
                    None => println!("{USAGE}"),
                }
                return Ok(None);
            }
            "-V" | "--version" => {
                println!("mindlite-server {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--config" => options.config = Some(PathBuf::from(value()?)),
            "--data" => options.data = Some(PathBuf::from(value()?)),
            "--host" => options.host = Some(value()?),
            "--port" => {
                let text = value()?;
                let port = text.parse().map_err(|_| {
                    format!("--port must be a number from 0 to 65535, got '{text}'")
                })?;
                options.port = Some(port);
            }
            "--mysql-port" => {
                let text = value()?;
                let port = text.parse().map_err(|_| {
                    format!("--mysql-port must be a number from 0 to 65535, got '{text}'")
                })?;
                options.mysql_port = Some(port);
            }
            "--plan" if options.users.is_some() => {
                let plan = value()?;
                if let Some((_, slot)) = options.users.as_mut() {
                    *slot = Some(plan);
                }
            }
            word if !word.starts_with('-') && options.users.is_some() => {
                if let Some((words, _)) = options.users.as_mut() {
                    words.push(word.to_string());
                }
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(options))
}

/// Runs a `users` command on the configured database and prints its JSON.
fn run_users(words: &[String], plan: Option<String>, config: Config) -> ExitCode {
    let command = match users::Command::parse(words, plan) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("mindlite-server: {message}\n\n{}", users::USAGE);
            return ExitCode::from(2);
        }
    };
    let engine = match Engine::open(&config.storage.path, config.clone()) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("mindlite-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ran = engine.block_on(command.run(&engine));
    engine.close();
    match ran {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mindlite-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Defaults, then the config file, then `MINDLITE_*` variables, then the command line.
fn load_config(options: &Options) -> Result<Config, String> {
    let config = match &options.config {
        Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    let mut config = config.with_env_overrides().map_err(|e| e.to_string())?;
    if let Some(data) = &options.data {
        config.storage.path = data.clone();
    }
    if let Some(host) = &options.host {
        config.http.host = host.clone();
    }
    if let Some(port) = options.port {
        config.http.port = port;
    }
    if let Some(port) = options.mysql_port {
        config.mysql.port = port;
    }
    Ok(config)
}

async fn serve(engine: Engine, config: Config, started: Instant) -> Result<(), String> {
    let address = format!("{}:{}", config.http.host, config.http.port);
    let limits = Limits {
        max_header_bytes: config.http.max_header_bytes,
        max_body_bytes: config.http.max_body_bytes,
        idle_timeout: Duration::from_secs(config.http.idle_timeout_secs.max(1)),
        first_byte_timeout: Duration::from_secs(config.http.first_byte_timeout_secs.max(1)),
        head_timeout: Duration::from_secs(config.http.head_timeout_secs.max(1)),
        body_timeout: Duration::from_secs(config.http.body_timeout_secs.max(1)),
        write_timeout: Duration::from_secs(config.http.write_timeout_secs.max(1)),
    };
    let budget = BodyBudget::new(config.max_buffered_body_bytes());
    let connections = Connections::new(
        config.http.max_connections,
        config.max_connections_per_address(),
    );
    let origins = Arc::new(Origins::new(&config));
    let mcp_sessions = mcp::Sessions::new(&config.mcp);
    let path = &config.storage.path;
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let door = mysql::bind(&engine, &config, budget.clone()).await?;
    tracing::info!(
        "listening on http://{local} (database {}, auth {}, ready in {} ms)",
        path.display(),
        if engine.auth_required() { "on" } else { "off" },
        started.elapsed().as_millis()
    );
    if let Some(door) = &door {
        let address = door
            .local_addr()
            .map_err(|e| format!("cannot read the MySQL listening address: {e}"))?;
        tracing::info!("MySQL protocol on {address}");
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mysql = door.map(|door| tokio::spawn(door.serve(stop_rx.clone(), DRAIN_TIMEOUT)));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => match connections.admit(peer.ip()) {
                    Ok(place) => {
                        let client = Client {
                            engine: engine.clone(),
                            address: peer.ip().to_string(),
                            budget: budget.clone(),
                            origins: Arc::clone(&origins),
                            mcp: mcp_sessions.clone(),
                            place,
                        };
                        let stop = stop_rx.clone();
                        tasks.spawn(serve_connection(client, Connection::new(socket, limits), stop));
                    }
                    Err(refusal) => {
                        let detail = refusal_detail(refusal);
                        tracing::warn!("connection from {peer} refused: {detail}");
                        tokio::spawn(refuse(socket, refusal));
                    }
                },
                // Out of file descriptors and the like: back off instead of spinning.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            signal = &mut shutdown => {
                tracing::info!("{signal}: no new connections; finishing requests in flight");
                break;
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Open MCP event streams end with their sessions, rather than hold up the drain.
    mcp_sessions.end_all();
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("requests still running after {DRAIN_TIMEOUT:?}; closing anyway");
        tasks.shutdown().await;
    }
    if let Some(mysql) = mysql {
        let _ = mysql.await;
    }
    drop(engine);
    Ok(())
}

/// Waits for SIGINT or SIGTERM and names which came.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        tracing::warn!("cannot listen for signals; stop the server by killing it");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

/// What serving one connection needs besides its socket.
struct Client {
    engine: Engine,
    /// The peer's address, the key of the rate limit on requests without credentials.
    address: String,
    budget: BodyBudget,
    /// Which hosts and origins are answered.
    origins: Arc<Origins>,
    /// The MCP sessions.
    mcp: mcp::Sessions,
    /// Its place among the open connections, given back when it closes.
    place: Place,
}

/// Why a connection got no place, for its client and the log.
fn refusal_detail(refusal: Refusal) -> String {
    match refusal {
        Refusal::Full(cap) => format!(
            "The server has {cap} connections open, its limit (http.max_connections), none of them idle; try again shortly"
        ),
        Refusal::AddressFull(share) => format!(
            "This address has {share} connections open, its share (http.max_connections_per_address), none of them idle; try again shortly"
        ),
    }
}

/// Answers a connection that got no place (503 when the server is full, 429 when its address
/// is) and closes it, spending at most a second on it.
async fn refuse(mut socket: TcpStream, refusal: Refusal) {
    let status = match refusal {
        Refusal::Full(_) => 503,
        Refusal::AddressFull(_) => 429,
    };
    let body = serde_json::json!({
        "title": http::reason(status),
        "detail": refusal_detail(refusal),
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        http::reason(status),
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = socket.write_all(response.as_bytes()).await;
        let _ = socket.shutdown().await;
    })
    .await;
}

/// Serves requests on one connection until the client closes it, asks to, misbehaves, idles
/// too long, its place is needed for a newcomer while it waits, or the server is stopping.
/// Each request is judged on its head (host, origin, route, credentials, rate) before its body
/// is read; while it is handled, a client that closes the connection stops the work done for it.
async fn serve_connection(
    client: Client,
    mut connection: Connection,
    mut stop: watch::Receiver<bool>,
) {
    let mut first = true;
    loop {
        if *stop.borrow() {
            return;
        }
        if !connection.has_buffered_input() {
            client.place.idle();
            let arrived = tokio::select! {
                arrived = connection.await_request(first, || client.place.under_pressure()) => arrived,
                () = client.place.evicted() => false,
                _ = stop.changed() => false,
            };
            // A request that arrived just as the place was given away is not read: the
            // client sees the close, as after any idle timeout.
            if !arrived || !client.place.busy() {
                return;
            }
        }
        first = false;
        // A half-received request is not work in flight: a client stalled mid-request must not
        // hold up a shutdown.
        let read = tokio::select! {
            read = connection.read_head() => read,
            _ = stop.changed() => return,
        };
        let mut request = match read {
            Ok(request) => request,
            Err(error) => return reject(connection, error).await,
        };
        let started = Instant::now();
        let decided = match client.origins.check(&request) {
            Ok(cors) => match routes::admit(&client.engine, &request, &client.address).await {
                Ok(engine) => {
                    // The body, what the handler makes of it and the answer count toward the
                    // user's memory budget, like the statements the request starts; a body
                    // whose declared length the user has no room for is refused unread (a
                    // chunked one is judged once read, below).
                    let memory = engine.request_memory();
                    match memory.admit(request.declared_body_bytes()) {
                        Ok(()) => Ok((engine, memory, cors)),
                        Err(error) => Err(allow_origin(reply::error_response(&error), &cors)),
                    }
                }
                Err(response) => Err(allow_origin(response, &cors)),
            },
            Err(response) => Err(response),
        };
        let (engine, memory, cors) = match decided {
            Ok(admitted) => admitted,
            Err(response) => {
                // Refused on its head: the body is never read, so the connection cannot
                // carry another request after it unless there was none.
                let keep_alive = request.keep_alive && !request.has_body() && !*stop.borrow();
                let status = response.status;
                let sent = connection.send(response, keep_alive, request.http10).await;
                log(&request, status, started, sent.is_err());
                if sent.is_err() {
                    return;
                }
                if !keep_alive {
                    return connection.linger_close().await;
                }
                continue;
            }
        };
        let body = tokio::select! {
            body = memory.run(connection.read_body(&mut request, &client.budget)) => body,
            _ = stop.changed() => return,
        };
        if let Err(error) = body {
            return reject(connection, error).await;
        }
        let response = match memory.admit(0) {
            // Its user ran out of room while the body was read: refused before anything is
            // made of it.
            Err(error) => reply::error_response(&error),
            Ok(()) => {
                // Boxed, so the select below does not copy the handler's large future.
                let handling = Box::pin(memory.run(routes::handle(&engine, &request, &client.mcp)));
                // Watched only once a request has run for a moment: most answer sooner, and
                // watching costs a read of the socket per request.
                let gone = async {
                    tokio::time::sleep(WATCH_AFTER).await;
                    connection.closed().await
                };
                tokio::select! {
                    response = handling => response,
                    // The client left: dropping the handler stops its statement.
                    () = gone => {
                        log(&request, 499, started, true);
                        return;
                    }
                }
            }
        };
        let response = allow_origin(response, &cors);
        let status = response.status;
        // An HTTP/1.0 client learns where a streamed body ends only from the close.
        let keep_alive =
            request.keep_alive && !*stop.borrow() && !(request.http10 && response.is_stream());
        let sent = memory
            .run(connection.send(response, keep_alive, request.http10))
            .await;
        log(&request, status, started, sent.is_err());
        if sent.is_err() || !keep_alive {
            return;
        }
    }
}

/// `response` with the CORS headers that let a page of `cors`, an allowed origin, read it.
fn allow_origin(response: Response, cors: &Option<String>) -> Response {
    match cors {
        Some(origin) => origin::with_cors(response, origin),
        None => response,
    }
}

/// Ends a connection whose request could not be read: a malformed or over-limit one gets its
/// problem response first.
async fn reject(mut connection: Connection, error: ReadError) {
    if let ReadError::Reject(status, detail) = error {
        tracing::info!(status, "rejected request: {detail}");
        let response: Response = reply::problem(status, &detail);
        if connection.send(response, false, false).await.is_ok() {
            connection.linger_close().await;
        }
    }
}

/// The request's log line: method, path, status, milliseconds.
fn log(request: &Request, status: u16, started: Instant, gone: bool) {
    tracing::info!(
        "{} {} {} {:.3} ms{}",
        request.method,
        request.path,
        status,
        started.elapsed().as_secs_f64() * 1000.0,
        if gone { " (client gone)" } else { "" }
    );
}
