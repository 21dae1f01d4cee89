//! Fuzz target for the MySQL door: a real door on 127.0.0.1 over an in-memory engine, given
//! logged-in connections whose commands (queries, `USE`, prepared statements executed with
//! parameters, long data, multi-part packets) are mutated byte by byte. A connection ends in
//! answers, an error packet or a close; the door keeps answering others, and nothing panics
//! but what opensrv-mysql's parameter and packet decoding does, which the door contains.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mindlite::{Config, Engine};
use mindlite_fuzz::{mutate, note, Target};

use super::{wire, Door};
use crate::connections::Connections;
use crate::http::BodyBudget;

/// The door every case talks to, served by a runtime of its own.
static DOOR: OnceLock<(tokio::runtime::Runtime, u16)> = OnceLock::new();

fn door() -> u16 {
    DOOR.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let engine = Engine::open_in_memory(Config::default()).expect("an engine");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let door = Door {
            listener,
            engine,
            connections: Connections::new(64, 64),
            limits: wire::Limits {
                max_packet: 64 * 1024,
                handshake: Duration::from_secs(5),
                idle: Duration::from_secs(5),
                command: Duration::from_secs(5),
                write: Duration::from_secs(5),
            },
            budget: BodyBudget::new(16 << 20),
            max_prepared: 8,
        };
        let (_stop, stop) = tokio::sync::watch::channel(false);
        // The sender lives as long as the door: leaked with it, for the process.
        std::mem::forget(_stop);
        runtime.spawn(door.serve(stop, Duration::from_secs(1)));
        (runtime, port)
    })
    .1
}

/// A packet: its length, sequence number and payload.
fn packet(sequence: u8, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    bytes.push(sequence);
    bytes.extend_from_slice(payload);
    bytes
}

/// A HandshakeResponse41 of user `mindsdb` without a password, `mysql_native_password`.
fn login() -> Vec<u8> {
    // CLIENT_PROTOCOL_41 | SECURE_CONNECTION | PLUGIN_AUTH | MULTI_STATEMENTS | DEPRECATE_EOF
    let capabilities: u32 = 0x0200 | 0x8000 | 0x0008_0000 | 0x0001_0000 | 0x0100_0000;
    let mut payload = capabilities.to_le_bytes().to_vec();
    payload.extend_from_slice(&(16u32 << 20).to_le_bytes());
    payload.push(33);
    payload.extend_from_slice(&[0; 23]);
    payload.extend_from_slice(b"mindsdb\0");
    payload.push(0);
    payload.extend_from_slice(b"mysql_native_password\0");
    packet(1, &payload)
}

/// Commands a client sends once logged in, each its own packet.
fn commands() -> Vec<u8> {
    let mut stream = Vec::new();
    let mut command = |payload: Vec<u8>| stream.extend_from_slice(&packet(0, &payload));
    command([&[0x03][..], b"SELECT 1 AS one, 'x' AS s"].concat());
    command([&[0x02][..], b"mindsdb"].concat());
    command([&[0x16][..], b"SELECT ? + ?, ?"].concat());
    // EXECUTE statement 1: flags, iteration count, null bitmap, new-params flag, types, values.
    let mut execute = vec![0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0b100, 1];
    execute.extend_from_slice(&[0x08, 0x00, 0x08, 0x00, 0xfd, 0x00]);
    execute.extend_from_slice(&7i64.to_le_bytes());
    execute.extend_from_slice(&(-2i64).to_le_bytes());
    command(execute);
    command(vec![0x18, 1, 0, 0, 0, 0, 0, b'a', b'b']);
    command(vec![0x19, 1, 0, 0, 0]);
    command(vec![0x0e]);
    command([&[0x03][..], b"SHOW DATABASES; SELECT 2"].concat());
    stream
}

/// Sends `stream` on a logged-in connection and reads until the door closes it.
fn exchange(stream: &[u8]) -> Option<Vec<u8>> {
    let mut socket = TcpStream::connect(("127.0.0.1", door())).ok()?;
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let mut greeting = [0u8; 512];
    let _ = socket.read(&mut greeting).ok()?;
    socket.write_all(&login()).ok()?;
    let _ = socket.write_all(stream);
    // The door answers what it read, then sees the end of the commands and closes.
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let mut answers = Vec::new();
    let _ = socket.read_to_end(&mut answers);
    Some(answers)
}

/// Whether the door answers a plain query on a new connection.
fn answers() -> bool {
    let query = packet(0, &[&[0x03][..], b"SELECT 41 + 1"].concat());
    exchange(&query).is_some_and(|answer| answer.windows(2).any(|w| w == b"42"))
}

#[test]
fn mutated_commands_end_their_connection_only() {
    assert!(answers(), "the door answers before any case");
    // Twice: the second login and query arrive in one read, which opensrv-mysql alone reads
    // into freed memory (see `wire`).
    assert!(answers(), "the door answers twice");
    let seed = commands();
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    Target::new(3000)
        .contained_panics_from(&["opensrv_mysql"])
        .run(|u| {
            let stream = mutate(u, &seed)?;
            note("commands", &stream);
            exchange(&stream);
            let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_multiple_of(50) {
                assert!(answers(), "the door stopped answering after a case");
            }
            Ok(())
        });
    assert!(answers(), "the door answers after every case");
}
