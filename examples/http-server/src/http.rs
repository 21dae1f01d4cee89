//! HTTP/1.1 on one connection: requests parsed by `httparse` (heads and chunk sizes), bodies by
//! Content-Length or chunked framing, responses with a fixed length or chunked for streams,
//! keep-alive and pipelining, and limits on head size, body size and idle time.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use mindlite::WireStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most headers one request may carry; more is answered with 431.
const MAX_HEADERS: usize = 100;

/// Limits a connection enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: u64,
    /// How long to wait for the next request, or for more bytes of the current one.
    pub idle_timeout: Duration,
}

/// A parsed request.
pub struct Request {
    /// The method as sent (`GET`, `POST`, …).
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// Headers with lower-cased names.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body (bounded by [`Limits::max_body_bytes`]).
    pub body: Vec<u8>,
    /// Whether the client wants the connection kept open after the response.
    pub keep_alive: bool,
    /// Whether the client speaks HTTP/1.0, which has no chunked framing: a streamed body then
    /// runs to the end of the connection.
    pub http10: bool,
}

impl Request {
    /// The first header called `name` (lower case), if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
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
    /// The socket failed or timed out in the middle of a request: just drop the connection.
    Io,
}

/// One client connection: the socket and the bytes read ahead of the current request.
pub struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
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
            limits,
        }
    }

    /// Whether bytes of a next request have already arrived (pipelining).
    pub fn has_buffered_input(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Waits until the socket has something to read (or is closed), without consuming it;
    /// false when the idle timeout passed first.
    pub async fn readable(&self) -> bool {
        tokio::time::timeout(self.limits.idle_timeout, self.stream.readable())
            .await
            .is_ok()
    }

    /// Reads the next request.
    pub async fn read_request(&mut self) -> Result<Request, ReadError> {
        let (head_len, mut request, framing, expects_continue) = loop {
            if !self.buffer.is_empty() {
                if let Some(parsed) = self.parse_head()? {
                    break parsed;
                }
            }
            if self.buffer.len() > self.limits.max_header_bytes {
                return Err(header_too_large(self.limits.max_header_bytes));
            }
            let was_empty = self.buffer.is_empty();
            match self.fill().await {
                Ok(0) if was_empty => return Err(ReadError::Closed),
                Ok(0) => return Err(ReadError::Io),
                Ok(_) => {}
                Err(_) if was_empty => return Err(ReadError::Closed),
                Err(_) => return Err(ReadError::Io),
            }
        };
        self.buffer.drain(..head_len);
        if let Framing::Length(length) = framing {
            if length > self.limits.max_body_bytes {
                return Err(body_too_large(self.limits.max_body_bytes));
            }
        }
        if expects_continue && framing != Framing::Length(0) {
            self.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|_| ReadError::Io)?;
        }
        request.body = match framing {
            Framing::Length(length) => {
                let length = usize::try_from(length).map_err(|_| body_too_large(0))?;
                self.read_exact_into_body(length).await?
            }
            Framing::Chunked => self.read_chunked_body().await?,
        };
        Ok(request)
    }

    /// Parses the head at the start of the buffer; `None` when more bytes are needed.
    #[allow(clippy::type_complexity)]
    fn parse_head(&mut self) -> Result<Option<(usize, Request, Framing, bool)>, ReadError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        let head_len = match parsed.parse(&self.buffer) {
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
        if head_len > self.limits.max_header_bytes {
            return Err(header_too_large(self.limits.max_header_bytes));
        }
        let version = parsed.version.unwrap_or(1);
        let method = parsed.method.unwrap_or_default().to_string();
        let target = parsed.path.unwrap_or_default();
        let path = target.split('?').next().unwrap_or_default().to_string();
        let headers: Vec<(String, Vec<u8>)> = parsed
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        let mut request = Request {
            method,
            path,
            headers,
            body: Vec::new(),
            keep_alive: version == 1,
            http10: version == 0,
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
        let framing = framing(&request)?;
        let expects_continue = request
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
        Ok(Some((head_len, request, framing, expects_continue)))
    }

    async fn read_exact_into_body(&mut self, length: usize) -> Result<Vec<u8>, ReadError> {
        while self.buffer.len() < length {
            match self.fill().await {
                Ok(0) | Err(_) => return Err(ReadError::Io),
                Ok(_) => {}
            }
        }
        let rest = self.buffer.split_off(length);
        Ok(std::mem::replace(&mut self.buffer, rest))
    }

    /// Decodes a chunked body; chunk-size lines are parsed by `httparse`, trailers are skipped.
    async fn read_chunked_body(&mut self) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let (line_len, size) = loop {
                match httparse::parse_chunk_size(&self.buffer) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if self.buffer.len() > 1024 => {
                        return Err(ReadError::Reject(400, "Malformed chunk size line".into()))
                    }
                    Ok(httparse::Status::Partial) => self.fill_or_fail().await?,
                    Err(_) => {
                        return Err(ReadError::Reject(400, "Malformed chunk size line".into()))
                    }
                }
            };
            self.buffer.drain(..line_len);
            if size == 0 {
                return self.skip_trailers().await.map(|()| body);
            }
            if (body.len() as u64).saturating_add(size) > self.limits.max_body_bytes {
                return Err(body_too_large(self.limits.max_body_bytes));
            }
            let size = size as usize;
            while self.buffer.len() < size + 2 {
                self.fill_or_fail().await?;
            }
            if &self.buffer[size..size + 2] != b"\r\n" {
                return Err(ReadError::Reject(
                    400,
                    "A chunk is longer than its size line says".into(),
                ));
            }
            body.extend_from_slice(&self.buffer[..size]);
            self.buffer.drain(..size + 2);
        }
    }

    /// Skips trailer fields after the last chunk, up to the empty line that ends the body.
    async fn skip_trailers(&mut self) -> Result<(), ReadError> {
        let mut skipped = 0;
        loop {
            match self.buffer.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.buffer.drain(..2);
                    return Ok(());
                }
                Some(end) => {
                    skipped += end + 2;
                    self.buffer.drain(..end + 2);
                }
                None => self.fill_or_fail().await?,
            }
            if skipped > self.limits.max_header_bytes {
                return Err(header_too_large(self.limits.max_header_bytes));
            }
        }
    }

    async fn fill_or_fail(&mut self) -> Result<(), ReadError> {
        match self.fill().await {
            Ok(0) | Err(_) => Err(ReadError::Io),
            Ok(_) => Ok(()),
        }
    }

    /// Reads more bytes into the buffer, waiting at most the idle timeout.
    async fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let read = tokio::time::timeout(self.limits.idle_timeout, self.stream.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        self.buffer.extend_from_slice(&chunk[..read]);
        Ok(read)
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

    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        tokio::time::timeout(self.limits.idle_timeout, self.stream.write_all(bytes))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
    }

    /// Closes after an error response: stops writing, then reads and discards what the client
    /// is still sending for a moment, so it sees the response instead of a reset.
    pub async fn linger_close(mut self) {
        let _ = self.stream.shutdown().await;
        let mut sink = [0u8; 16 * 1024];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut drained = 0usize;
        while drained < 64 * 1024 * 1024 {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }
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
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
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
