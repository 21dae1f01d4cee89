//! Fuzz targets for request reading: heads (`httparse`), framing by Content-Length or
//! chunked, chunk-size lines, trailers, pipelining and the limits, through a real connection
//! on 127.0.0.1 (the code runs as it does in the server: bytes arrive in pieces, a read may end
//! anywhere). Requests from a generator are read back exactly; random and mutated bytes end
//! in a request, a clean close, or a 4xx/503 with a message, never a panic.

use std::time::Duration;

use mindlite_fuzz::{extreme_number, mutate, note, Target, Unstructured};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::{BodyBudget, Connection, Limits, ReadError};

type Draw<T> = mindlite_fuzz::arbitrary::Result<T>;

/// Small limits, so that generated requests cross them often.
const LIMITS: Limits = Limits {
    max_header_bytes: 2048,
    max_body_bytes: 16 * 1024,
    idle_timeout: Duration::from_secs(10),
    first_byte_timeout: Duration::from_secs(10),
    write_timeout: Duration::from_secs(10),
    head_timeout: Duration::from_secs(10),
    body_timeout: Duration::from_secs(10),
};

/// One runtime and one listening socket for every case of a target: a listener per case
/// would take a port per case, and a long run would run out of them.
static LOOPBACK: std::sync::OnceLock<(tokio::runtime::Runtime, std::net::TcpListener)> =
    std::sync::OnceLock::new();

/// The most requests read from one connection.
const MAX_REQUESTS: usize = 16;

/// A request as the generator wrote it, to compare with what was read.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// What reading a connection gave: the requests read, then how it ended.
#[derive(Debug)]
struct Read {
    requests: Vec<Sent>,
    end: End,
}

#[derive(Debug, PartialEq)]
enum End {
    Closed,
    Io,
    Reject(u16, String),
}

#[test]
fn request_reading_survives_random_bytes() {
    Target::new(30_000).run(|u| {
        let bytes: Vec<u8> = u.arbitrary()?;
        let pieces = pieces(u, bytes.len())?;
        let read = read_connection(&bytes, &pieces);
        check_sane(&read);
        Ok(())
    });
}

#[test]
fn generated_requests_are_read_back_exactly() {
    Target::new(15_000).run(|u| {
        let mut stream = Vec::new();
        let mut sent = Vec::new();
        // Requests up to the first one that is not clean must be read back exactly.
        let mut trusted = None;
        for i in 0..u.int_in_range(1..=3)? {
            let request = request(u)?;
            stream.extend_from_slice(&request.bytes);
            if !request.clean && trusted.is_none() {
                trusted = Some(i);
            }
            sent.push(request.sent);
        }
        let pieces = pieces(u, stream.len())?;
        let read = read_connection(&stream, &pieces);
        check_sane(&read);
        match trusted {
            None => {
                assert_eq!(
                    read.requests, sent,
                    "the requests read differ from those sent"
                );
                assert_eq!(read.end, End::Closed, "a clean stream did not end cleanly");
            }
            Some(first_unclean) => {
                let checked = read.requests.len().min(first_unclean);
                assert_eq!(
                    read.requests[..checked],
                    sent[..checked],
                    "the requests read differ from those sent"
                );
                assert!(
                    read.requests.len() >= first_unclean,
                    "a clean request was not read"
                );
            }
        }
        Ok(())
    });
}

#[test]
fn mutated_requests_are_read_or_refused() {
    Target::new(15_000).run(|u| {
        let mut stream = Vec::new();
        for _ in 0..u.int_in_range(1..=2)? {
            stream.extend_from_slice(&request(u)?.bytes);
        }
        let stream = mutate(u, &stream)?;
        let pieces = pieces(u, stream.len())?;
        let read = read_connection(&stream, &pieces);
        check_sane(&read);
        Ok(())
    });
}

/// What any stream must give: bodies within the limit, paths without their query, and a
/// refusal with a status the server sends for a bad request and a message.
fn check_sane(read: &Read) {
    for request in &read.requests {
        assert!(request.body.len() as u64 <= LIMITS.max_body_bytes);
        assert!(!request.path.contains('?'));
    }
    if let End::Reject(status, message) = &read.end {
        assert!(
            matches!(status, 400 | 408 | 413 | 431 | 503),
            "refused with {status}: {message}"
        );
        assert!(
            !message.trim().is_empty(),
            "refused with {status} and no message"
        );
    }
}

/// Writes `bytes` in `pieces` to a connection on 127.0.0.1 and reads requests from it as the
/// server does, until it ends.
fn read_connection(bytes: &[u8], pieces: &[usize]) -> Read {
    note("bytes", &String::from_utf8_lossy(bytes));
    note("pieces", &pieces);
    let (runtime, listener) = LOOPBACK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        (runtime, listener)
    });
    runtime.block_on(async {
        let listener = listener.try_clone().expect("the listener's handle");
        let listener = TcpListener::from_std(listener).expect("the listener on the runtime");
        let address = listener.local_addr().expect("its address");
        // The handshake completes in the backlog, so connecting first cannot wait on accept.
        let mut client = TcpStream::connect(address).await.expect("a connection");
        let (server, _) = listener.accept().await.expect("accepted");
        let owned = bytes.to_vec();
        let pieces = pieces.to_vec();
        let writer = tokio::spawn(async move {
            let mut at = 0;
            for piece in pieces {
                let end = (at + piece).min(owned.len());
                if client.write_all(&owned[at..end]).await.is_err() {
                    return;
                }
                at = end;
                // Let the reader see this piece alone.
                tokio::task::yield_now().await;
            }
            if at < owned.len() && client.write_all(&owned[at..]).await.is_err() {
                return;
            }
            let _ = client.shutdown().await;
            // Kept open (and its input drained) until the reader is done.
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut client, &mut sink).await;
        });
        let read = read_requests(Connection::new(server, LIMITS)).await;
        writer.abort();
        read
    })
}

async fn read_requests(mut connection: Connection) -> Read {
    let budget = BodyBudget::new(64 * 1024 * 1024);
    let mut requests = Vec::new();
    let end = loop {
        if requests.len() == MAX_REQUESTS {
            break End::Closed;
        }
        // As the server does: wait for a request's first bytes, then read its head.
        if !connection.has_buffered_input()
            && !connection
                .await_request(requests.is_empty(), || false)
                .await
        {
            break End::Closed;
        }
        let mut request = match connection.read_head().await {
            Ok(request) => request,
            Err(e) => break end_of(e),
        };
        if request.has_body() {
            if let Err(e) = connection.read_body(&mut request, &budget).await {
                break end_of(e);
            }
        }
        let keep_alive = request.keep_alive;
        requests.push(Sent {
            method: request.method.clone(),
            path: request.path.clone(),
            body: std::mem::take(&mut request.body),
        });
        if !keep_alive {
            break End::Closed;
        }
    };
    Read { requests, end }
}

fn end_of(error: ReadError) -> End {
    match error {
        ReadError::Closed => End::Closed,
        ReadError::Io => End::Io,
        ReadError::Reject(status, message) => End::Reject(status, message),
    }
}

/// How the bytes are cut into writes: each piece 1 byte to all of them.
fn pieces(u: &mut Unstructured<'_>, len: usize) -> Draw<Vec<usize>> {
    let mut pieces = Vec::new();
    let mut left = len;
    while left > 0 && pieces.len() < 32 {
        let piece = if u.ratio(1, 3)? {
            u.int_in_range(1..=8)?
        } else {
            u.int_in_range(1..=left.max(1))?
        };
        pieces.push(piece);
        left = left.saturating_sub(piece);
    }
    Ok(pieces)
}

/// One generated request: its bytes, what reading it must give, and whether it is clean
/// (well formed and within the limits, so it must be read back exactly).
struct Generated {
    bytes: Vec<u8>,
    sent: Sent,
    clean: bool,
}

fn request(u: &mut Unstructured<'_>) -> Draw<Generated> {
    let mut clean = true;
    let method = if u.ratio(9, 10)? {
        (*u.choose(&["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])?).to_string()
    } else {
        clean = false;
        (*u.choose(&["", "G T", "GET\0", "ÉTÉ", "get"])?).to_string()
    };
    let path = (*u.choose(&[
        "/",
        "/api/sql/query",
        "/api/projects/p/models/m.2",
        "/%2e%2e/x",
        "/a b",
    ])?)
    .to_string();
    let query = *u.choose(&["", "", "?a=1", "?", "?x?y"])?;
    if path.contains(' ') {
        clean = false;
    }
    let version = if u.ratio(1, 8)? {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    };
    let body_len = if u.ratio(1, 10)? {
        u.int_in_range(0..=20_000)?
    } else {
        u.int_in_range(0..=64)?
    };
    let body: Vec<u8> = (0..body_len).map(|i| (i % 251) as u8).collect();
    if body.len() as u64 > LIMITS.max_body_bytes {
        clean = false;
    }
    let chunked = u.arbitrary()?;
    let mut head = format!("{method} {path}{query} {version}\r\n");
    let mut headers: Vec<String> = Vec::new();
    if chunked {
        let te = if u.ratio(7, 8)? {
            "chunked"
        } else {
            clean = false;
            *u.choose(&["gzip, chunked", "chunked, gzip", "identity", "", "CHUNKED"])?
        };
        headers.push(format!("Transfer-Encoding: {te}"));
    } else if body_len > 0 || u.arbitrary()? {
        headers.push(format!("Content-Length: {body_len}"));
    }
    if u.ratio(1, 6)? {
        clean = false;
        let odd = *u.choose(&[
            "Content-Length: 99999999999999999999",
            "Content-Length: -1",
            "Content-Length: +5",
            "Content-Length: 5, 5",
            "Content-Length: 3",
            "Transfer-Encoding: chunked",
            "Content-Length:",
        ])?;
        headers.push(odd.to_string());
    }
    if u.ratio(1, 4)? {
        headers.push("Expect: 100-continue".to_string());
    }
    // Closing connections end the stream, so a clean run keeps them open.
    if u.ratio(1, 4)? {
        headers.push("Connection: keep-alive".to_string());
    }
    for _ in 0..u.int_in_range(0..=3)? {
        headers.push(format!("X-Fuzz: {}", "v".repeat(u.int_in_range(0..=100)?)));
    }
    if u.ratio(1, 20)? {
        // Past the header count or the head size.
        clean = false;
        let many = u.int_in_range(90..=130)?;
        headers.extend((0..many).map(|i| format!("X-{i}: {i}")));
    }
    let http10 = version == "HTTP/1.0";
    if http10 && !headers.iter().any(|h| h == "Connection: keep-alive") {
        clean = false;
    }
    for header in &headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    if head.len() > LIMITS.max_header_bytes {
        clean = false;
    }
    let mut bytes = head.into_bytes();
    if chunked {
        let mut at = 0;
        while at < body.len() {
            let size = (extreme_number(u)? as usize).clamp(1, body.len() - at);
            let line = match u.int_in_range(0..=5u8)? {
                0 => format!("{size:X}"),
                1 => format!("000{size:x}"),
                2 => format!("{size:x};name=value"),
                _ => format!("{size:x}"),
            };
            bytes.extend_from_slice(line.as_bytes());
            bytes.extend_from_slice(b"\r\n");
            bytes.extend_from_slice(&body[at..at + size]);
            bytes.extend_from_slice(b"\r\n");
            at += size;
        }
        bytes.extend_from_slice(b"0\r\n");
        if u.ratio(1, 4)? {
            bytes.extend_from_slice(b"X-Trailer: yes\r\n");
        }
        bytes.extend_from_slice(b"\r\n");
    } else if body_len > 0 {
        bytes.extend_from_slice(&body);
    }
    Ok(Generated {
        bytes,
        sent: Sent { method, path, body },
        clean,
    })
}
