//! The socket under a MySQL connection, guarded. opensrv-mysql reads whole packets into one
//! buffer, however long their headers say they are (a chain of 16 MiB parts has no end), keeps
//! every part of a prepared statement's long data without limit, and waits for a client as
//! long as it likes. This stream sits under it and sees every byte first: it follows the
//! packet headers and refuses a command longer than `mysql.max_packet_mb` and long data past
//! that size per statement, takes a large command's bytes from the server's budget of bodies
//! being received before they are read, gives a connection `mysql.handshake_timeout_secs` to
//! log in, `mysql.idle_timeout_secs` between commands and `mysql.command_timeout_secs` to send
//! one whole, marks the connection idle between commands (so a newcomer may take its place),
//! and ends a write that makes no progress for `mysql.write_timeout_secs`.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use crate::connections::Place;
use crate::http::BodyBudget;

/// A packet's payload is at most this long; a longer command comes in parts of exactly this
/// length, ended by a shorter one.
const PART: usize = 0xFF_FFFF;
/// Commands up to this size are read without taking from the budget.
const SMALL: u64 = 64 * 1024;
/// How long a large command waits for room in the budget before the connection ends.
const BUDGET_WAIT: Duration = Duration::from_secs(5);
/// `COM_STMT_EXECUTE`, `COM_STMT_SEND_LONG_DATA`, `COM_STMT_CLOSE`, `COM_STMT_RESET`.
const EXECUTE: u8 = 0x17;
const LONG_DATA: u8 = 0x18;
const CLOSE: u8 = 0x19;
const RESET: u8 = 0x1a;
/// `COM_CHANGE_USER`, which opensrv-mysql answers OK without checking or changing anything.
const CHANGE_USER: u8 = 0x11;
/// The handshake's capability flag for several statements in one query.
const MULTI_STATEMENTS: u32 = 0x0001_0000;

/// The limits a connection is held to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_packet: u64,
    pub(super) handshake: Duration,
    pub(super) idle: Duration,
    pub(super) command: Duration,
    pub(super) write: Duration,
}

/// The guarded socket.
pub(super) struct Guarded {
    socket: TcpStream,
    limits: Limits,
    place: Arc<Place>,
    budget: BodyBudget,
    /// Set (by the session) once the client has logged in.
    pub(super) logged_in: Arc<AtomicBool>,
    /// Set when the client's handshake allows several statements in one query.
    pub(super) multi_statements: Arc<AtomicBool>,
    /// Whether the login has been seen here (the idle timer then starts).
    login_seen: bool,
    /// Whether the client's handshake response has been read (its flags taken).
    handshake_read: bool,
    /// The sequence number of the last packet header read (an answer takes the next).
    sequence: u8,
    /// The next packet's header, as far as read; `None` inside a payload.
    header: Option<([u8; 4], usize)>,
    /// Payload bytes of the packet being read still to come, and its length.
    payload_left: usize,
    payload_length: usize,
    /// Bytes of the command being read so far, over its parts.
    command_bytes: u64,
    /// The command's first five bytes (its kind and a statement id), for long data.
    command_head: Vec<u8>,
    /// Long data sent per prepared statement id and not yet used, and the budget it holds.
    long_data: HashMap<u32, u64>,
    long_held: HashMap<u32, OwnedSemaphorePermit>,
    /// Budget held for the command being read or handled, and how much.
    held: Option<OwnedSemaphorePermit>,
    held_bytes: u64,
    /// Waiting for room in the budget: until when, and the next try.
    budget_until: Option<Instant>,
    budget_retry: Option<Pin<Box<Sleep>>>,
    /// When reading must have made progress by, and what is awaited.
    read_timer: Pin<Box<Sleep>>,
    waiting_for: &'static str,
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    pub(super) fn new(
        socket: TcpStream,
        limits: Limits,
        place: Arc<Place>,
        budget: BodyBudget,
    ) -> Self {
        Guarded {
            socket,
            limits,
            place,
            budget,
            logged_in: Arc::new(AtomicBool::new(false)),
            multi_statements: Arc::new(AtomicBool::new(false)),
            login_seen: false,
            handshake_read: false,
            sequence: 0,
            header: Some(([0; 4], 0)),
            payload_left: 0,
            payload_length: 0,
            command_bytes: 0,
            command_head: Vec::new(),
            long_data: HashMap::new(),
            long_held: HashMap::new(),
            held: None,
            held_bytes: 0,
            budget_until: None,
            budget_retry: None,
            read_timer: Box::pin(tokio::time::sleep(limits.handshake)),
            waiting_for: "to log in (mysql.handshake_timeout_secs)",
            write_timer: None,
        }
    }

    /// The timer for what is awaited now.
    fn arm(&mut self, wait: Duration, why: &'static str) {
        self.read_timer.as_mut().reset(Instant::now() + wait);
        self.waiting_for = why;
    }

    /// Whether the next byte read starts a command (a header, not a continuation part's).
    fn between_commands(&self) -> bool {
        self.header == Some(([0; 4], 0)) && self.command_bytes == 0
    }

    /// Takes `bytes`, just read, into account: headers, sizes, deadlines, the connection's place.
    fn account(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.between_commands() {
                // A new command begins: the one before is done with. (Before the login, the
                // handshake's deadline holds for all of it.)
                self.held = None;
                self.held_bytes = 0;
                if self.login_seen {
                    if !self.place.busy() {
                        return Err(refused("its place was given to a newer connection"));
                    }
                    self.arm(
                        self.limits.command,
                        "to send a whole command (mysql.command_timeout_secs)",
                    );
                }
            }
            if let Some((mut header, have)) = self.header {
                let take = (4 - have).min(bytes.len());
                header[have..have + take].copy_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if have + take < 4 {
                    self.header = Some((header, have + take));
                    continue;
                }
                let length = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
                self.sequence = header[3];
                self.command_bytes += length as u64;
                if self.command_bytes > self.limits.max_packet {
                    return Err(self.refuse(PACKET_TOO_LARGE, too_large(self.limits.max_packet)));
                }
                self.header = None;
                self.payload_left = length;
                self.payload_length = length;
                if length == 0 {
                    self.end_payload()?;
                }
                continue;
            }
            let take = self.payload_left.min(bytes.len());
            if self.command_head.len() < 5 {
                let want = (5 - self.command_head.len()).min(take);
                self.command_head.extend_from_slice(&bytes[..want]);
            }
            self.payload_left -= take;
            bytes = &bytes[take..];
            if self.payload_left == 0 {
                self.end_payload()?;
            }
        }
        Ok(())
    }

    /// A packet's payload has been read: a command ends with a part shorter than the longest.
    fn end_payload(&mut self) -> io::Result<()> {
        self.header = Some(([0; 4], 0));
        if self.payload_length == PART {
            return Ok(());
        }
        self.command_long_data()?;
        self.command_bytes = 0;
        self.command_head.clear();
        if self.login_seen {
            self.idle();
        }
        Ok(())
    }

    /// Waiting for the next command: the place may be taken, the idle timer runs.
    fn idle(&mut self) {
        self.place.idle();
        self.arm(
            self.limits.idle,
            "between commands (mysql.idle_timeout_secs)",
        );
    }

    /// What a whole command means beyond its size. Before the login, the handshake says
    /// whether several statements may come in one query. After it: long data is kept per
    /// statement, as opensrv keeps it (grown by `COM_STMT_SEND_LONG_DATA`, let go by the
    /// statement's execution, reset or close), within `mysql.max_packet_mb` and held from
    /// the budget of bodies being received, as large commands are; `COM_CHANGE_USER` ends the
    /// connection, as opensrv would answer it OK and change nothing.
    fn command_long_data(&mut self) -> io::Result<()> {
        let head = &self.command_head;
        if !self.login_seen {
            // The first packet is the handshake response; an auth switch's answer may follow.
            if !self.handshake_read && head.len() >= 4 {
                self.handshake_read = true;
                let capabilities = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
                self.multi_statements
                    .store(capabilities & MULTI_STATEMENTS != 0, Ordering::Relaxed);
            }
            return Ok(());
        }
        if head.first() == Some(&CHANGE_USER) {
            let why = refused("COM_CHANGE_USER is not supported: connect again as the other user");
            return Err(self.refuse(NOT_SUPPORTED, why));
        }
        if head.len() < 5 {
            return Ok(());
        }
        let statement = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        match head[0] {
            LONG_DATA => {
                let total: u64 = self.long_data.values().sum::<u64>() + self.command_bytes;
                if total > self.limits.max_packet {
                    return Err(self.refuse(PACKET_TOO_LARGE, too_large(self.limits.max_packet)));
                }
                let Some(permit) = self.budget.try_take(self.command_bytes) else {
                    let why = refused(
                        "the server is receiving too much at once (http.max_buffered_body_mb)",
                    );
                    return Err(self.refuse(OUT_OF_RESOURCES, why));
                };
                match self.long_held.get_mut(&statement) {
                    Some(held) => held.merge(permit),
                    None => {
                        self.long_held.insert(statement, permit);
                    }
                }
                *self.long_data.entry(statement).or_insert(0) += self.command_bytes;
            }
            EXECUTE | RESET | CLOSE => {
                self.long_data.remove(&statement);
                self.long_held.remove(&statement);
            }
            _ => {}
        }
        Ok(())
    }

    /// Room in the budget for the command being read once it is large: what its headers
    /// announced so far is taken before its payload is read.
    fn poll_budget(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let announced = self.command_bytes;
        if self.header.is_some() || announced <= SMALL || announced <= self.held_bytes {
            return Poll::Ready(Ok(()));
        }
        loop {
            if let Some(permit) = self.budget.try_take(announced - self.held_bytes) {
                match self.held.as_mut() {
                    Some(held) => held.merge(permit),
                    None => self.held = Some(permit),
                }
                self.held_bytes = announced;
                self.budget_until = None;
                self.budget_retry = None;
                return Poll::Ready(Ok(()));
            }
            let until = *self
                .budget_until
                .get_or_insert_with(|| Instant::now() + BUDGET_WAIT);
            if Instant::now() >= until {
                return Poll::Ready(Err(refused(
                    "the server is receiving too many large commands at once (http.max_buffered_body_mb)",
                )));
            }
            let retry = self
                .budget_retry
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(20))));
            ready!(retry.as_mut().poll(cx));
            self.budget_retry = None;
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.login_seen && this.logged_in.load(Ordering::Relaxed) && this.between_commands() {
            this.login_seen = true;
            this.idle();
        }
        ready!(this.poll_budget(cx))?;
        // Never past the end of the packet being read: opensrv-mysql 0.7's reader keeps a
        // packet as a view of its buffer, and replaces that buffer when a read brought the
        // start of the next packet too, so the packet it returns points into freed memory
        // (a client that sends two commands at once: COM_STMT_CLOSE and the next query, as
        // Connector/Python does). One packet per read leaves it nothing to replace.
        let left = match this.header {
            Some((_, have)) => 4 - have,
            None => this.payload_left,
        };
        let mut limited = buf.take(left.max(1));
        match Pin::new(&mut this.socket).poll_read(cx, &mut limited) {
            Poll::Ready(Ok(())) => {
                let read = limited.filled().to_vec();
                let n = read.len();
                // SAFETY: the `n` bytes were just written by the read into `limited`, which
                // is `buf`'s unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                this.account(&read)?;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if this.read_timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client waited too long {}", this.waiting_for),
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.socket).poll_write(cx, buf);
        this.check_write(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.socket).poll_write_vectored(cx, bufs);
        this.check_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.socket).poll_flush(cx);
        this.check_write(cx, flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

impl Guarded {
    /// A write that made progress resets the write timer; one that waits past it fails.
    fn check_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match outcome {
            Poll::Pending => {
                let limit = self.limits.write;
                let timer = self
                    .write_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client read nothing for mysql.write_timeout_secs",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.write_timer = None;
                ready
            }
        }
    }
}

/// Error codes and SQLSTATEs of the refusals a client is told of.
const PACKET_TOO_LARGE: (u16, &[u8; 5]) = (1153, b"08S01");
const OUT_OF_RESOURCES: (u16, &[u8; 5]) = (1041, b"HY000");
const NOT_SUPPORTED: (u16, &[u8; 5]) = (1235, b"42000");

impl Guarded {
    /// `why`, after telling the client in an error packet (best effort: what the socket takes
    /// now), so it sees the limit rather than a reset.
    fn refuse(&mut self, (code, state): (u16, &[u8; 5]), why: io::Error) -> io::Error {
        let mut payload = vec![0xFF];
        payload.extend_from_slice(&code.to_le_bytes());
        payload.push(b'#');
        payload.extend_from_slice(state);
        payload.extend_from_slice(why.to_string().as_bytes());
        let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
        packet.push(self.sequence.wrapping_add(1));
        packet.extend_from_slice(&payload);
        let _ = self.socket.try_write(&packet);
        why
    }
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "a command of more than {} MiB (mysql.max_packet_mb)",
            max >> 20
        ),
    )
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, why.to_string())
}
