//! HTTP/1.1 on one connection: requests parsed by `httparse` (heads and chunk sizes), bodies by
//! Content-Length or chunked framing, responses with a fixed length or chunked for streams,
//! keep-alive and pipelining. A request is read in two steps, so the server can refuse one
//! (unknown route, no credentials, over a rate) before its body is read: [`Connection::read_head`],
//! then [`Connection::read_body`]. Limits on head and body size, deadlines for a request's first
//! byte, a whole head and a whole body (a client trickling bytes is cut off), a budget of body
//! bytes buffered across all connections, an idle time between requests, and a deadline on
//! writes that make no progress (a client that does not read) keep one client from holding
//! the server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mindlite::WireStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Most headers one request may carry; more is answered with 431.
const MAX_HEADERS: usize = 100;

/// How long a body waits for room in the shared budget before it is refused with 503.
const BUDGET_WAIT: Duration = Duration::from_secs(5);

/// Bodies up to this size need no room in the budget: at most one per connection, they are
/// bounded by the connection cap, and an ordinary request never waits behind large uploads.
const SMALL_BODY: u64 = 64 * 1024;

/// The budget is taken in steps of this size as a large body's bytes arrive, so a client that
/// announces a large body and trickles it holds only what it has sent.
const BUDGET_STEP: u64 = 1024 * 1024;

/// Bytes consumed from the front of the buffer before it is compacted.
const COMPACT_AT: usize = 64 * 1024;

/// Limits a connection enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: u64,
    /// How long to wait for the next request on a kept-alive connection, or for any byte of
    /// the current one.
    pub idle_timeout: Duration,
    /// How long a new connection may take to send its first byte; also the wait for a next
    /// request while the server is under pressure.
    pub first_byte_timeout: Duration,
    /// How long a response write may make no progress.
    pub write_timeout: Duration,
    /// How long a whole request head may take to arrive, from its first byte.
    pub head_timeout: Duration,
    /// How long a whole request body may take to arrive, from the end of its head.
    pub body_timeout: Duration,
}

/// The bytes of request bodies being received or handled, over all connections.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    /// One permit per KiB.
    permits: Arc<Semaphore>,
    total: u32,
}

impl BodyBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> BodyBudget {
        let total = u32::try_from((bytes / 1024).max(1)).unwrap_or(u32::MAX);
        BodyBudget {
            permits: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Room for `bytes` more if there is some now (`None` otherwise).
    pub fn try_take(&self, bytes: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total);
        Arc::clone(&self.permits).try_acquire_many_owned(kib).ok()
    }

    /// Room for `bytes` more. Taken when free; otherwise tried again now and then (not in
    /// line: one large body waiting must not hold up smaller ones behind it) until `until`,
    /// then 503.
    async fn take(&self, bytes: u64, until: Instant) -> Result<OwnedSemaphorePermit, ReadError> {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total);
        loop {
            if let Ok(permit) = Arc::clone(&self.permits).try_acquire_many_owned(kib) {
                return Ok(permit);
            }
            if Instant::now() >= until {
                return Err(ReadError::Reject(
                    503,
                    "The server is receiving too many request bodies at once (http.max_buffered_body_mb); try again shortly".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A large body's share of the [`BodyBudget`], taken as its bytes arrive.
struct Reserved<'a> {
    budget: &'a BodyBudget,
    bytes: u64,
}

impl Reserved<'_> {
    /// Grows the request's share to cover `bytes` bytes of its body.
    async fn cover(&mut self, request: &mut Request, bytes: u64) -> Result<(), ReadError> {
        if bytes <= SMALL_BODY || bytes <= self.bytes {
            return Ok(());
        }
        let more = (bytes - self.bytes).max(BUDGET_STEP);
        let permit = self.budget.take(more, Instant::now() + BUDGET_WAIT).await?;
        self.bytes += more;
        match request.budget.as_mut() {
            Some(held) => held.merge(permit),
            None => request.budget = Some(permit),
        }
        Ok(())
    }
}

/// A parsed request.
pub struct Request {
    /// The method as sent (`GET`, `POST`, …).
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string, after the `?` (empty when there is none), not decoded.
    pub query: String,
    /// Headers with lower-cased names.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body (bounded by [`Limits::max_body_bytes`]); empty until
    /// [`Connection::read_body`] has read it.
    pub body: Vec<u8>,
    /// Whether the client wants the connection kept open after the response.
    pub keep_alive: bool,
    /// Whether the client speaks HTTP/1.0, which has no chunked framing: a streamed body then
    /// runs to the end of the connection.
    pub http10: bool,
    /// How the body is framed, and whether the client waits for `100 Continue` before sending it.
    framing: Framing,
    expects_continue: bool,
    /// The body's share of the [`BodyBudget`], given back when the request is dropped.
    budget: Option<OwnedSemaphorePermit>,
}

impl Request {
    /// The value of the query string's parameter `name`, percent-decoded; `None` when absent
    /// or not UTF-8.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then(|| decode(value).ok()).flatten()
        })
    }

    /// The first header called `name` (lower case), if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The body's length as its head declares it; 0 for a chunked one, whose length is known
    /// only once read.
    pub fn declared_body_bytes(&self) -> u64 {
        match self.framing {
            Framing::Length(length) => length,
            Framing::Chunked => 0,
        }
    }

    /// Whether a body follows the head.
    pub fn has_body(&self) -> bool {
        self.framing != Framing::Length(0)
    }
}

/// What a response carries.
pub enum Body {
    /// A body of known length.
    Full(Vec<u8>),
    /// A body produced piece by piece, sent with chunked framing.
    Stream(Box<dyn Chunks>),
}

/// A source of body pieces, ending with `None`.
pub trait Chunks: Send {
    /// The next piece of the body.
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>>;
}

impl Chunks for WireStream {
    fn next_chunk(&mut self) -> Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send + '_>> {
        Box::pin(WireStream::next_chunk(self))
    }
}

/// A response to send.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The Content-Type header value (none for an empty body).
    pub content_type: Option<&'static str>,
    /// Other headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Body,
}

impl Response {
    /// 204 with no body (what MindsDB answers to a DELETE).
    pub fn no_content() -> Response {
        Response {
            status: 204,
            content_type: None,
            headers: Vec::new(),
            body: Body::Full(Vec::new()),
        }
    }

    /// Whether the body is streamed (its length unknown until the end).
    pub fn is_stream(&self) -> bool {
        matches!(self.body, Body::Stream(_))
    }

    /// A response with a body of known length.
    pub fn full(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type: Some(content_type),
            headers: Vec::new(),
            body: Body::Full(body),
        }
    }

    /// Replaces the Content-Type.
    pub fn with_content_type(mut self, content_type: &'static str) -> Response {
        self.content_type = Some(content_type);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

/// Why no request could be read.
pub enum ReadError {
    /// The peer closed the connection, or went quiet for too long, between requests.
    Closed,
    /// The request is malformed or over a limit: answer with this status and detail, then close.
    Reject(u16, String),
    /// The socket failed in the middle of a request: just drop the connection.
    Io,
}

/// One client connection: the socket and the bytes read ahead of the current request.
pub struct Connection {
    stream: TcpStream,
    /// Bytes read; those before `start` are consumed.
    buffer: Vec<u8>,
    start: usize,
    limits: Limits,
}

impl Connection {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream, limits: Limits) -> Connection {
        // Responses are written whole; Nagle's delay would only add latency to keep-alive traffic.
        let _ = stream.set_nodelay(true);
        Connection {
            stream,
            buffer: Vec::with_capacity(4096),
            start: 0,
            limits,
        }
    }

    /// Bytes read and not yet consumed.
    fn unread(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    /// Marks `n` unread bytes consumed; the buffer is compacted now and then, so consuming
    /// costs nothing per byte (a body of many tiny chunks decodes in linear time).
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buffer.len() {
            self.buffer.clear();
            self.start = 0;
        } else if self.start >= COMPACT_AT && self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
    }

    /// Whether bytes of a next request have already arrived (pipelining).
    pub fn has_buffered_input(&self) -> bool {
        !self.unread().is_empty()
    }

    /// Waits for the first bytes of a request and reads them; false when the client closed the
    /// connection or stayed silent too long. A new connection's `first` request must start
    /// within the first-byte timeout; a next one within the idle timeout, or the first-byte
    /// timeout while `pressed` says the server is under pressure (asked each time that much
    /// has passed, so pressure that builds up while it waits counts too). Reading, not only
    /// waiting for readiness, which may be reported falsely, keeps a silent client to these.
    pub async fn await_request(&mut self, first: bool, pressed: impl Fn() -> bool) -> bool {
        // Never longer than the idle timeout, which bounds any wait for a client.
        let short = self.limits.first_byte_timeout.min(self.limits.idle_timeout);
        let give_up = Instant::now()
            + if first {
                short
            } else {
                self.limits.idle_timeout
            };
        loop {
            let check = (Instant::now() + short).min(give_up);
            // Room for a small head; a larger one grows the buffer once it is being read, so a
            // waiting connection holds no more than this.
            self.buffer.reserve(4096);
            // Cancel-safe: a select that drops this loses no bytes.
            match tokio::time::timeout_at(check, self.stream.read_buf(&mut self.buffer)).await {
                Ok(Ok(0) | Err(_)) => return false,
                Ok(Ok(_)) => return true,
                Err(_) if Instant::now() >= give_up || pressed() => return false,
                Err(_) => {}
            }
        }
    }

    /// Completes when the client closes the connection (or it fails) while a request is being
    /// handled, so the work for a client that is gone can stop. Bytes of pipelined requests
    /// read meanwhile are kept for later (up to the head limit; then reading pauses).
    pub async fn closed(&mut self) {
        loop {
            if self.unread().len() > self.limits.max_header_bytes {
                return std::future::pending().await;
            }
            self.buffer.reserve(4096);
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Reads the next request's head; its body is read by [`Connection::read_body`]. The first
    /// byte may take the idle timeout to come; from it, the whole head must arrive within the
    /// head timeout.
    pub async fn read_head(&mut self) -> Result<Request, ReadError> {
        if self.unread().is_empty() {
            match self.fill(Instant::now() + self.limits.idle_timeout).await {
                Ok(0) | Err(_) => return Err(ReadError::Closed),
                Ok(_) => {}
            }
        }
        let deadline = Instant::now() + self.limits.head_timeout;
        let (head_len, request) = loop {
            if !self.unread().is_empty() {
                if let Some(parsed) = self.parse_head()? {
                    break parsed;
                }
            }
            if self.unread().len() > self.limits.max_header_bytes {
                return Err(header_too_large(self.limits.max_header_bytes));
            }
            let was_empty = self.unread().is_empty();
            match self.fill(deadline).await {
                Ok(0) if was_empty => return Err(ReadError::Closed),
                Ok(0) => return Err(ReadError::Io),
                Ok(_) => {}
                Err(Stall::Deadline) if !was_empty => {
                    return Err(ReadError::Reject(
                        408,
                        format!(
                            "The request head did not arrive within {} s (http.head_timeout_secs)",
                            self.limits.head_timeout.as_secs()
                        ),
                    ))
                }
                Err(_) if was_empty => return Err(ReadError::Closed),
                Err(_) => return Err(ReadError::Io),
            }
        };
        self.consume(head_len);
        if let Framing::Length(length) = request.framing {
            if length > self.limits.max_body_bytes {
                return Err(body_too_large(self.limits.max_body_bytes));
            }
        }
        Ok(request)
    }

    /// Reads the body of `request` (whose head [`Connection::read_head`] read), taking its
    /// share of `budget` first; the whole body must arrive within the body timeout.
    pub async fn read_body(
        &mut self,
        request: &mut Request,
        budget: &BodyBudget,
    ) -> Result<(), ReadError> {
        let deadline = Instant::now() + self.limits.body_timeout;
        let mut reserved = Reserved { budget, bytes: 0 };
        if request.expects_continue && request.has_body() {
            self.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|_| ReadError::Io)?;
        }
        request.body = match request.framing {
            Framing::Length(length) => {
                let length = usize::try_from(length).map_err(|_| body_too_large(0))?;
                self.read_exact_into_body(request, length, &mut reserved, deadline)
                    .await?
            }
            Framing::Chunked => {
                self.read_chunked_body(request, &mut reserved, deadline)
                    .await?
            }
        };
        Ok(())
    }

    /// Parses the head at the start of the unread bytes; `None` when more bytes are needed.
    fn parse_head(&self) -> Result<Option<(usize, Request)>, ReadError> {
        parse_head(self.unread(), self.limits.max_header_bytes)
    }

    async fn read_exact_into_body(
        &mut self,
        request: &mut Request,
        length: usize,
        reserved: &mut Reserved<'_>,
        deadline: Instant,
    ) -> Result<Vec<u8>, ReadError> {
        while self.unread().len() < length {
            // Room for what has arrived and the next read's worth.
            let arrived = (self.unread().len() as u64 + 16 * 1024).min(length as u64);
            reserved.cover(request, arrived).await?;
            self.fill_body(deadline).await?;
        }
        reserved.cover(request, length as u64).await?;
        let body = self.unread()[..length].to_vec();
        self.consume(length);
        Ok(body)
    }

    /// Decodes a chunked body; chunk-size lines are parsed by `httparse`, trailers are skipped.
    /// The body takes its share of the budget as it grows.
    async fn read_chunked_body(
        &mut self,
        request: &mut Request,
        reserved: &mut Reserved<'_>,
        deadline: Instant,
    ) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let (line_len, size) = loop {
                match httparse::parse_chunk_size(self.unread()) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if self.unread().len() > 1024 => {
                        return Err(ReadError::Reject(400, "Malformed chunk size line".into()))
                    }
                    Ok(httparse::Status::Partial) => self.fill_body(deadline).await?,
                    Err(_) => {
                        return Err(ReadError::Reject(400, "Malformed chunk size line".into()))
                    }
                }
            };
            self.consume(line_len);
            if size == 0 {
                return self.skip_trailers(deadline).await.map(|()| body);
            }
            let total = (body.len() as u64).saturating_add(size);
            if total > self.limits.max_body_bytes {
                return Err(body_too_large(self.limits.max_body_bytes));
            }
            reserved.cover(request, total).await?;
            let size = size as usize;
            while self.unread().len() < size + 2 {
                self.fill_body(deadline).await?;
            }
            if &self.unread()[size..size + 2] != b"\r\n" {
                return Err(ReadError::Reject(
                    400,
                    "A chunk is longer than its size line says".into(),
                ));
            }
            body.extend_from_slice(&self.unread()[..size]);
            self.consume(size + 2);
        }
    }

    /// Skips trailer fields after the last chunk, up to the empty line that ends the body.
    async fn skip_trailers(&mut self, deadline: Instant) -> Result<(), ReadError> {
        let mut skipped = 0;
        loop {
            match self.unread().windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.consume(2);
                    return Ok(());
                }
                Some(end) => {
                    skipped += end + 2;
                    self.consume(end + 2);
                }
                None => self.fill_body(deadline).await?,
            }
            if skipped > self.limits.max_header_bytes {
                return Err(header_too_large(self.limits.max_header_bytes));
            }
        }
    }

    /// More bytes of a body before `deadline`; 408 past it, and a dropped connection when the
    /// client goes quiet for the idle timeout or closes.
    async fn fill_body(&mut self, deadline: Instant) -> Result<(), ReadError> {
        match self.fill(deadline).await {
            Ok(0) | Err(Stall::Io) | Err(Stall::Idle) => Err(ReadError::Io),
            Ok(_) => Ok(()),
            Err(Stall::Deadline) => Err(ReadError::Reject(
                408,
                format!(
                    "The request body did not arrive within {} s (http.body_timeout_secs)",
                    self.limits.body_timeout.as_secs()
                ),
            )),
        }
    }

    /// Reads more bytes into the buffer, waiting at most the idle timeout and never past
    /// `deadline`.
    async fn fill(&mut self, deadline: Instant) -> Result<usize, Stall> {
        let idle = Instant::now() + self.limits.idle_timeout;
        let (until, stall) = if deadline < idle {
            (deadline, Stall::Deadline)
        } else {
            (idle, Stall::Idle)
        };
        // Straight into the buffer's spare room: no stack buffer to zero and copy per read.
        self.buffer.reserve(16 * 1024);
        tokio::time::timeout_at(until, self.stream.read_buf(&mut self.buffer))
            .await
            .map_err(|_| stall)?
            .map_err(|_| Stall::Io)
    }

    /// Sends `response`; for a stream, pulls and sends one piece at a time, chunked, or for an
    /// HTTP/1.0 client (`http10`) unframed, which only works when the connection closes after
    /// it, so the caller must not keep it alive then. An error means the client is gone (the
    /// stream, and the query behind it, is dropped).
    pub async fn send(
        &mut self,
        response: Response,
        keep_alive: bool,
        http10: bool,
    ) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(b"HTTP/1.1 ");
        head.extend_from_slice(response.status.to_string().as_bytes());
        head.push(b' ');
        head.extend_from_slice(reason(response.status).as_bytes());
        head.extend_from_slice(b"\r\nserver: mindlite/");
        head.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
        head.extend_from_slice(b"\r\ndate: ");
        head.extend_from_slice(http_date().as_bytes());
        if let Some(content_type) = response.content_type {
            head.extend_from_slice(b"\r\ncontent-type: ");
            head.extend_from_slice(content_type.as_bytes());
        }
        for (name, value) in &response.headers {
            head.extend_from_slice(format!("\r\n{name}: {value}").as_bytes());
        }
        if !keep_alive {
            head.extend_from_slice(b"\r\nconnection: close");
        }
        match response.body {
            Body::Full(body) => {
                // RFC 9110 §8.6: no Content-Length on a 204.
                if response.status != 204 {
                    head.extend_from_slice(b"\r\ncontent-length: ");
                    head.extend_from_slice(body.len().to_string().as_bytes());
                }
                head.extend_from_slice(b"\r\n\r\n");
                head.extend_from_slice(&body);
                self.write_all(&head).await
            }
            Body::Stream(mut stream) if http10 => {
                head.extend_from_slice(b"\r\n\r\n");
                self.write_all(&head).await?;
                while let Some(piece) = stream.next_chunk().await {
                    self.write_all(&piece).await?;
                }
                Ok(())
            }
            Body::Stream(mut stream) => {
                head.extend_from_slice(b"\r\ntransfer-encoding: chunked\r\n\r\n");
                self.write_all(&head).await?;
                while let Some(piece) = stream.next_chunk().await {
                    if piece.is_empty() {
                        continue;
                    }
                    // bounded: a piece of the body in memory
                    let mut framed = Vec::with_capacity(piece.len() + 12);
                    framed.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    framed.extend_from_slice(&piece);
                    framed.extend_from_slice(b"\r\n");
                    self.write_all(&framed).await?;
                }
                self.write_all(b"0\r\n\r\n").await
            }
        }
    }

    /// Writes all of `bytes`; fails when a write makes no progress for the write timeout (a
    /// client that stopped reading), however long the whole takes while bytes keep moving.
    async fn write_all(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let written = tokio::time::timeout(self.limits.write_timeout, self.stream.write(bytes))
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[written..];
        }
        Ok(())
    }

    /// Closes after an error response: stops writing, then reads and discards what the client
    /// is still sending for a moment, so it sees the response instead of a reset.
    pub async fn linger_close(mut self) {
        let _ = self.stream.shutdown().await;
        // On the heap: in the future, 16 KiB would be copied with it at every move.
        let mut sink = vec![0u8; 16 * 1024];
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut drained = 0usize;
        while drained < 64 * 1024 * 1024 {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }
}

/// A percent-encoded path segment, decoded.
pub(crate) fn decode(segment: &str) -> mindlite::Result<String> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            mindlite::Error::invalid(format!("The path segment '{segment}' is not valid UTF-8"))
        })
}

/// Parses the request head at the start of `bytes`; `None` when more bytes are needed.
fn parse_head(
    bytes: &[u8],
    max_header_bytes: usize,
) -> Result<Option<(usize, Request)>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ReadError::Reject(
                431,
                format!("The request has more than {MAX_HEADERS} headers"),
            ))
        }
        Err(e) => {
            return Err(ReadError::Reject(
                400,
                format!("Malformed HTTP request: {e}"),
            ))
        }
    };
    if head_len > max_header_bytes {
        return Err(header_too_large(max_header_bytes));
    }
    let version = parsed.version.unwrap_or(1);
    let method = parsed.method.unwrap_or_default().to_string();
    let target = parsed.path.unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (path, query) = (path.to_string(), query.to_string());
    let headers: Vec<(String, Vec<u8>)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let mut request = Request {
        method,
        path,
        query,
        headers,
        body: Vec::new(),
        keep_alive: version == 1,
        http10: version == 0,
        framing: Framing::Length(0),
        expects_continue: false,
        budget: None,
    };
    let mut keep_alive = request.keep_alive;
    if let Some(connection) = request.header("connection") {
        for token in connection.split(',').map(str::trim) {
            if token.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if token.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        }
    }
    request.keep_alive = keep_alive;
    request.framing = framing(&request)?;
    request.expects_continue = request
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    Ok(Some((head_len, request)))
}

/// Why a read stopped without bytes.
enum Stall {
    /// The request's own deadline passed.
    Deadline,
    /// Nothing arrived for the idle timeout.
    Idle,
    Io,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
}

/// How the body is delimited (RFC 9112 §6.3): chunked, a single Content-Length, or none.
fn framing(request: &Request) -> Result<Framing, ReadError> {
    let mut lengths = request
        .headers
        .iter()
        .filter(|(name, _)| name == "content-length");
    let transfer_encoding = request.header("transfer-encoding");
    if request
        .headers
        .iter()
        .any(|(name, _)| name == "transfer-encoding")
    {
        if lengths.next().is_some() {
            return Err(ReadError::Reject(
                400,
                "A request may not have both Transfer-Encoding and Content-Length".into(),
            ));
        }
        let last = transfer_encoding
            .and_then(|te| te.rsplit(',').next())
            .map(str::trim);
        return match last {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
            _ => Err(ReadError::Reject(
                400,
                "Unsupported Transfer-Encoding: only chunked is accepted".into(),
            )),
        };
    }
    let Some((_, first)) = lengths.next() else {
        return Ok(Framing::Length(0));
    };
    if lengths.any(|(_, other)| other != first) {
        return Err(ReadError::Reject(
            400,
            "Conflicting Content-Length headers".into(),
        ));
    }
    std::str::from_utf8(first)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse().ok())
        .map(Framing::Length)
        .ok_or_else(|| ReadError::Reject(400, "Invalid Content-Length header".into()))
}

fn header_too_large(limit: usize) -> ReadError {
    ReadError::Reject(
        431,
        format!("The request head is larger than the limit of {limit} bytes"),
    )
}

fn body_too_large(limit: u64) -> ReadError {
    ReadError::Reject(
        413,
        format!("The request body is larger than the limit of {limit} bytes"),
    )
}

/// The reason phrase for the status codes this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// The current time as an HTTP-date (`Sun, 22 Nov 2026 10:00:00 GMT`).
fn http_date() -> String {
    chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

#[cfg(test)]
impl Request {
    /// The request whose head is `bytes`, for tests of what judges requests by their heads.
    pub(crate) fn parse_for_test(bytes: &[u8]) -> Request {
        match parse_head(bytes, 64 * 1024) {
            Ok(Some((_, request))) => request,
            _ => panic!(
                "not a whole request head: {}",
                String::from_utf8_lossy(bytes)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(write_timeout: Duration) -> Limits {
        Limits {
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1024,
            idle_timeout: Duration::from_secs(60),
            first_byte_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            write_timeout,
        }
    }

    /// A connection to a client socket on 127.0.0.1 that the test holds (and may never read).
    async fn pair(limits: Limits) -> (Connection, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Connection::new(server, limits), client)
    }

    #[tokio::test]
    async fn a_write_to_a_client_that_never_reads_fails_at_the_write_timeout() {
        let (mut connection, _client) = pair(limits(Duration::from_millis(300))).await;
        let started = std::time::Instant::now();
        // Far more than the socket buffers on both sides hold.
        let err = connection
            .write_all(&vec![b'x'; 256 * 1024 * 1024])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        // Generous: filling the buffers takes a moment, the stall then 0.3 s.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_gets_the_whole_response() {
        let (mut connection, mut client) = pair(limits(Duration::from_millis(300))).await;
        let total = 64 * 1024 * 1024;
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut piece = vec![0u8; 512 * 1024];
            while got < total {
                // At most 50 MB/s: the whole takes longer than the write timeout, but no write
                // waits that long.
                tokio::time::sleep(Duration::from_millis(10)).await;
                got += client.read(&mut piece).await.unwrap();
            }
            got
        });
        let started = std::time::Instant::now();
        connection.write_all(&vec![b'x'; total]).await.unwrap();
        assert_eq!(reader.await.unwrap(), total);
        assert!(
            started.elapsed() > Duration::from_millis(300),
            "it did take longer"
        );
    }

    #[tokio::test]
    async fn a_new_connection_that_sends_nothing_is_given_up_at_the_first_byte_timeout() {
        let mut limits = limits(Duration::from_secs(10));
        limits.first_byte_timeout = Duration::from_millis(200);
        let (mut connection, mut client) = pair(limits).await;
        let started = std::time::Instant::now();
        assert!(!connection.await_request(true, || false).await);
        assert!(started.elapsed() < Duration::from_secs(5));
        // A kept-alive one waits its idle timeout unless the server is under pressure.
        let waited = tokio::time::timeout(
            Duration::from_millis(600),
            connection.await_request(false, || false),
        )
        .await;
        assert!(waited.is_err(), "no pressure: still waiting after 0.6 s");
        assert!(!connection.await_request(false, || true).await);
        client.write_all(b"GET /").await.unwrap();
        assert!(connection.await_request(false, || true).await);
        assert!(
            connection.has_buffered_input(),
            "what arrived is kept for the head"
        );
    }
}

#[cfg(test)]
mod fuzz;
