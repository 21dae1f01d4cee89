//! MySQL and MariaDB datasources: connection settings, the client, the catalog of a remote
//! database, reading rows as Arrow batches, and writes.
//!
//! **The client is our own**, on `mysql_common`'s packet types and password scrambles, over a
//! socket the egress policy opened (every address of the host checked). `mysql_async` was
//! measured first and not taken: it connects by address itself (no socket of ours, so the
//! policy could be checked only before, not at, the connection), and it sizes a vector by the
//! column count a server declares (`Vec::with_capacity` of a 64-bit number), so one answer of a
//! hostile server aborts the process. Here every size a server sends is checked before
//! anything is allocated: a packet is read only up to `datasources.max_message_mb`, a result
//! has at most [`MAX_COLUMNS`] columns, and values are sliced out of the packet that holds
//! them. Batches close early when their rows' bytes reach [`BATCH_BYTES`].
//!
//! What the client speaks: the protocol 4.1 handshake with `mysql_native_password` and
//! `caching_sha2_password` (its fast path, and its full path with the server's RSA key, as
//! MySQL 8 asks over plain TCP), text-protocol queries (`COM_QUERY`), and prepared statements
//! for the values of writes (`COM_STMT_PREPARE`/`EXECUTE`, values bound, never spliced into
//! SQL). It asks for no `LOCAL INFILE` (a server that asks anyway is refused) and no
//! multiple statements or results. There is no TLS stack in the build, so `ssl` options are
//! refused rather than ignored.
//!
//! Reading connections run `SET SESSION TRANSACTION READ ONLY` and every session runs in UTC
//! (`time_zone = '+00:00'`) with `utf8mb4`, so `TIMESTAMP` columns read as UTC instants.
//! A statement whose reader goes away before its end is stopped with `KILL QUERY` over a
//! connection of its own (the protocol has no other way).

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, RecordBatch, RecordBatchOptions, StringBuilder,
};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::util::display::FormatOptions;
use futures::Stream;
use mysql_common::constants::{CapabilityFlags, ColumnFlags, ColumnType};
use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthPlugin, Column as WireColumn, HandshakePacket, HandshakeResponse};
use mysql_common::proto::MySerialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::net::Net;
use super::postgres::{Column, Kind};
use crate::error::{Error, ErrorKind, Result};

/// The engine names in `CREATE DATABASE … ENGINE = 'mysql'` (or `'mariadb'`): one client
/// serves both.
pub(crate) const ENGINE: &str = "mysql";
/// MariaDB's engine name, kept as the user gave it.
pub(crate) const MARIADB: &str = "mariadb";

/// Columns a result may have: MySQL allows 4,096 per table; a server declaring more is not one.
pub(crate) const MAX_COLUMNS: usize = 4096;

/// Bytes of rows (as received) after which a batch is closed even if it has fewer rows than
/// the batch size, so wide rows do not make huge batches.
const BATCH_BYTES: usize = 32 * 1024 * 1024;

/// The PARAMETERS keys a MySQL datasource takes (MindsDB's, less its TLS ones).
const KEYS: [&str; 8] = [
    "url",
    "host",
    "port",
    "database",
    "user",
    "password",
    "connect_timeout",
    "push_down",
];

/// How long a connection attempt may take unless `connect_timeout` says otherwise.
const DEFAULT_CONNECT_TIMEOUT: u64 = 10;

/// Bytes of the RSA key (PEM) a server may send for `caching_sha2_password` (8,192 bits).
const MAX_RSA_KEY: usize = 2048;

/// How long a packet may stay half-received: once a packet has begun, its bytes flow.
const PACKET_IDLE: Duration = Duration::from_secs(30);

/// Error codes meaning "no such table" (`ER_NO_SUCH_TABLE`, `ER_BAD_TABLE_ERROR`).
const NO_SUCH_TABLE: [u16; 2] = [1146, 1051];

/// Checked connection settings of one MySQL or MariaDB datasource.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The database whose tables the datasource shows.
    pub(crate) database: String,
    pub(crate) user: String,
    password: String,
    connect_timeout: Duration,
    /// Whether filters and limits are sent (on unless `push_down` is false).
    pub(crate) push_down: bool,
    net: Net,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs and error messages.
        f.debug_struct("Settings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("user", &self.user)
            .finish()
    }
}

impl Settings {
    /// Reads PARAMETERS, refusing values of the wrong kind by name. Keys it does not read are
    /// kept and ignored, as MindsDB keeps them, except TLS settings (`ssl`, `ssl_ca`, …): this
    /// build has no TLS, and ignoring one would connect less safely than asked. `ssl: false`
    /// asks for nothing and is accepted.
    pub(crate) fn from_parameters(parameters: &Map<String, Value>, net: &Net) -> Result<Self> {
        let from_url;
        let parameters = match parameters.get("url") {
            None => parameters,
            Some(url) => {
                from_url = super::dsn::with_url("MySQL", &["mysql", "mariadb"], parameters, url)?;
                &from_url
            }
        };
        if let Some(tls) = parameters.iter().find(|(k, v)| {
            k.starts_with("ssl") && !(k.as_str() == "ssl" && matches!(v, Value::Bool(false)))
        }) {
            return Err(Error::invalid(format!(
                "MySQL parameter '{}': this build connects without TLS, so it takes no TLS settings; the parameters are {}",
                tls.0,
                KEYS.join(", ")
            )));
        }
        let text = |key: &str, default: Option<&str>| -> Result<String> {
            match parameters.get(key) {
                Some(Value::String(s)) if !s.is_empty() || default.is_some() => Ok(s.clone()),
                Some(Value::Number(n)) if key != "host" => Ok(n.to_string()),
                Some(Value::String(_)) => Err(Error::invalid(format!(
                    "MySQL parameter '{key}' must not be empty"
                ))),
                Some(other) => Err(Error::invalid(format!(
                    "MySQL parameter '{key}' must be text, got {other}"
                ))),
                None => default
                    .map(str::to_string)
                    .ok_or_else(|| Error::invalid(format!("MySQL parameter '{key}' is required"))),
            }
        };
        let whole = |key: &str, default: u64, max: u64| -> Result<u64> {
            let value = match parameters.get(key) {
                None => return Ok(default),
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.trim().parse().ok(),
                Some(_) => None,
            };
            value.filter(|v| (1..=max).contains(v)).ok_or_else(|| {
                Error::invalid(format!(
                    "MySQL parameter '{key}' must be a whole number from 1 to {max}"
                ))
            })
        };
        let push_down = match parameters.get("push_down") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "MySQL parameter 'push_down' must be true or false, got {other}"
                )))
            }
        };
        let host = text("host", None)?;
        if host.starts_with('/') {
            return Err(Error::invalid(
                "MySQL parameter 'host' must be a host name or address: this build reaches MySQL over TCP only",
            ));
        }
        Ok(Settings {
            host,
            port: whole("port", 3306, u64::from(u16::MAX))? as u16,
            database: text("database", None)?,
            user: text("user", None)?,
            password: text("password", Some(""))?,
            connect_timeout: Duration::from_secs(whole(
                "connect_timeout",
                DEFAULT_CONNECT_TIMEOUT,
                600,
            )?),
            push_down,
            net: net.clone(),
        })
    }

    /// Opens a session for reading: its transactions are READ ONLY, so neither a native query
    /// nor anything an agent sends can change the remote database.
    pub(crate) async fn connect(&self) -> Result<Conn> {
        self.open(true).await
    }

    /// Opens a session that may write.
    pub(crate) async fn connect_for_writes(&self) -> Result<Conn> {
        self.open(false).await
    }

    /// Opens a reading session for a catalog lookup, which waits for no lock longer than
    /// `connect_timeout` (MySQL's own default is a day, behind an ALTER or LOCK TABLES).
    async fn connect_for_lookups(&self) -> Result<Conn> {
        let mut conn = self.open(true).await?;
        conn.execute(&format!(
            "SET SESSION lock_wait_timeout = {}",
            self.connect_timeout.as_secs().max(1)
        ))
        .await?;
        Ok(conn)
    }

    /// `lookup` (a catalog question, asked while planning on a shared pool) within
    /// `connect_timeout`: a server that does not answer must not hold a planning thread.
    async fn lookup<T>(&self, lookup: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        // Connecting has its own bound; the question gets as long again.
        match tokio::time::timeout(self.connect_timeout * 2, lookup).await {
            Ok(answer) => answer,
            Err(_) => Err(self.named(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "no answer to a catalog lookup within {} s (twice connect_timeout)",
                    self.connect_timeout.as_secs() * 2
                ),
            ))),
        }
    }

    async fn open(&self, read_only: bool) -> Result<Conn> {
        let connecting = async {
            let stream = self
                .net
                .egress
                .connect_tcp(&self.host, self.port, self.connect_timeout)
                .await
                .map_err(|e| self.named(e))?;
            let _ = stream.set_nodelay(true);
            let mut conn = Conn {
                stream: BufReader::new(stream),
                seq: 0,
                cap: self.net.max_message_bytes.max(1024),
                id: 0,
            };
            conn.handshake(self).await.map_err(|e| self.named(e))?;
            let mut setup = vec!["SET NAMES utf8mb4", "SET time_zone = '+00:00'"];
            if read_only {
                setup.push("SET SESSION TRANSACTION READ ONLY");
            }
            for statement in setup {
                conn.execute(statement).await?;
            }
            Ok(conn)
        };
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(conn) => conn,
            Err(_) => Err(self.named(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "no answer within {} s (connect_timeout)",
                    self.connect_timeout.as_secs()
                ),
            ))),
        }
    }

    /// `error` as "Cannot connect to MySQL at host:port (database, user): …".
    fn named(&self, error: Error) -> Error {
        let reason = error
            .message()
            .strip_prefix(&format!("cannot connect to {}:{}: ", self.host, self.port))
            .unwrap_or(error.message())
            .to_string();
        Error::new(
            error.kind(),
            format!(
                "Cannot connect to MySQL at {}:{} (database '{}', user '{}'): {reason}",
                self.host, self.port, self.database, self.user
            ),
        )
    }

    /// Stops the statement running on connection `id`, over a new connection under the same
    /// policy. Best effort: errors are dropped (the statement's own connection closes anyway),
    /// and the attempt gives up after `connect_timeout`: a server that never answers must not
    /// keep a task and a socket for every statement stopped.
    fn kill(&self, id: u32) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let settings = self.clone();
        crate::memory::spawn_detached(&runtime, async move {
            let killing = async {
                if let Ok(mut conn) = settings.open(false).await {
                    let _ = conn.execute(&format!("KILL QUERY {id}")).await;
                }
            };
            let _ = tokio::time::timeout(settings.connect_timeout, killing).await;
        });
    }

    /// What identifies the server, database and account its statements run as: two
    /// datasources with the same key run one statement over tables of both.
    pub(crate) fn server_key(&self) -> String {
        // Debug quotes each part, so no two different settings read alike; the password is in
        // it, never shown.
        format!(
            "{:?}",
            (
                "mysql",
                &self.user,
                &self.host,
                self.port,
                &self.database,
                &self.password
            )
        )
    }

    /// The table `table` of the datasource's database, quoted.
    pub(crate) fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote(&self.database), quote(table))
    }
}

/// `name` as a MySQL identifier, always quoted with backticks (doubled inside), which every
/// `sql_mode` reads alike.
pub(crate) fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A remote error as "MySQL: message", shortened: a server may send anything.
fn server_error(code: u16, message: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "MySQL: {} (error {code})",
            crate::egress::excerpt(message, 1000)
        ),
    )
}

/// A broken exchange: the server sent what the protocol does not allow, or went away.
fn broken(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, format!("MySQL: {what}"))
}

/// One session with a MySQL server.
pub(crate) struct Conn {
    stream: BufReader<TcpStream>,
    /// The sequence number the next packet carries.
    seq: u8,
    /// `datasources.max_message_mb`: the most one packet (after joining its parts) may hold.
    cap: usize,
    /// The server's id for this session (for `KILL QUERY`).
    id: u32,
}

/// The answer to a statement: rows to read, or what it changed.
enum Answer {
    Rows(Vec<WireColumn>),
    Done { affected: u64 },
}

impl Conn {
    /// Reads one packet (joining the parts of one over 16 MiB), checking its size before
    /// holding it.
    async fn read(&mut self) -> Result<Vec<u8>> {
        let mut payload = Vec::new();
        loop {
            let mut header = [0u8; 4];
            self.stream
                .read_exact(&mut header)
                .await
                .map_err(|e| broken(crate::egress::io_reason(&e)))?;
            let length = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            if payload.len() + length > self.cap {
                return Err(broken(format!(
                    "the server sent a packet of over {} MiB; the limit is {} MiB (datasources.max_message_mb)",
                    (payload.len() + length) / (1024 * 1024),
                    self.cap / (1024 * 1024)
                )));
            }
            self.seq = header[3].wrapping_add(1);
            // Grown as bytes arrive (a server that declares 16 MiB and stalls holds what it
            // sent, not what it declared), and given up when it stalls mid-packet.
            let mut left = length;
            while left > 0 {
                let start = payload.len();
                // bounded: within the length checked against datasources.max_message_mb
                payload.resize(start + left.min(64 * 1024), 0);
                let read =
                    tokio::time::timeout(PACKET_IDLE, self.stream.read(&mut payload[start..]))
                        .await
                        .map_err(|_| {
                            broken(format!(
                                "the server stopped sending for {} s in the middle of a packet",
                                PACKET_IDLE.as_secs()
                            ))
                        })?
                        .map_err(|e| broken(crate::egress::io_reason(&e)))?;
                if read == 0 {
                    return Err(broken("the server closed the connection"));
                }
                payload.truncate(start + read);
                left -= read;
            }
            if length < 0xff_ffff {
                return Ok(payload);
            }
        }
    }

    /// Writes `payload` as the next packet(s) of the exchange.
    async fn write(&mut self, payload: &[u8]) -> Result<()> {
        // bounded: the statement or values being sent, already in memory
        let mut out = Vec::with_capacity(payload.len() + 4 + payload.len() / 0xff_ffff * 4);
        // Parts of 16 MiB - 1; a payload that fills its last part (or is empty) ends with an
        // empty one.
        let mut rest = payload;
        loop {
            let part = &rest[..rest.len().min(0xff_ffff)];
            out.extend_from_slice(&(part.len() as u32).to_le_bytes()[..3]);
            out.push(self.seq);
            self.seq = self.seq.wrapping_add(1);
            out.extend_from_slice(part);
            rest = &rest[part.len()..];
            if part.len() < 0xff_ffff {
                break;
            }
        }
        self.stream
            .get_mut()
            .write_all(&out)
            .await
            .map_err(|e| broken(crate::egress::io_reason(&e)))
    }

    /// Starts a command: a new exchange, its first packet.
    async fn command(&mut self, code: u8, body: &[u8]) -> Result<()> {
        self.seq = 0;
        // bounded: the statement being sent, already in memory
        let mut payload = Vec::with_capacity(body.len() + 1);
        payload.push(code);
        payload.extend_from_slice(body);
        self.write(&payload).await
    }

    /// Logs in.
    async fn handshake(&mut self, settings: &Settings) -> Result<()> {
        let greeting = self.read().await?;
        if greeting.first() == Some(&0xff) {
            return Err(error_packet(&greeting));
        }
        let handshake: HandshakePacket = ParseBuf(&greeting)
            .parse(())
            .map_err(|e| broken(format!("an unreadable greeting ({e})")))?;
        if !handshake
            .capabilities()
            .contains(CapabilityFlags::CLIENT_PROTOCOL_41)
        {
            return Err(broken("the server is older than MySQL 4.1"));
        }
        self.id = handshake.connection_id();
        let nonce = handshake.nonce();
        let mut plugin = match handshake.auth_plugin() {
            Some(AuthPlugin::CachingSha2Password) => AuthPlugin::CachingSha2Password,
            _ => AuthPlugin::MysqlNativePassword,
        };
        let password = (!settings.password.is_empty()).then_some(settings.password.as_str());
        let first = scramble(&plugin, password, &nonce)?;
        let capabilities = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_LONG_FLAG
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_CONNECT_WITH_DB;
        let response = HandshakeResponse::new(
            Some(first.as_slice()),
            handshake.server_version_parsed().unwrap_or((5, 5, 3)),
            Some(settings.user.as_bytes()),
            Some(settings.database.as_bytes()),
            Some(plugin.clone()),
            capabilities,
            None,
            self.cap as u32,
        );
        let mut buf = Vec::new();
        response.serialize(&mut buf);
        self.write(&buf).await?;
        let mut nonce = nonce;
        // At most a switch of method and a key exchange: a server that asks for more is not
        // logging in.
        for _ in 0..6 {
            let packet = self.read().await?;
            match packet.first() {
                Some(0x00) => return Ok(()),
                Some(0xff) => return Err(error_packet(&packet)),
                Some(0xfe) => {
                    // A switch of method, with a new nonce.
                    let rest = &packet[1..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    plugin = match &rest[..end] {
                        b"mysql_native_password" => AuthPlugin::MysqlNativePassword,
                        b"caching_sha2_password" => AuthPlugin::CachingSha2Password,
                        other => {
                            return Err(broken(format!(
                                "the server asks for the login method '{}', which this build does not speak (it speaks mysql_native_password and caching_sha2_password)",
                                crate::egress::excerpt(&String::from_utf8_lossy(other), 64)
                            )))
                        }
                    };
                    let data = rest.get(end + 1..).unwrap_or_default();
                    nonce = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
                    self.write(&scramble(&plugin, password, &nonce)?).await?;
                }
                Some(0x01) if plugin == AuthPlugin::CachingSha2Password => match packet.get(1) {
                    // Fast path: the server had the password cached; its OK follows.
                    Some(0x03) => {}
                    // Full path over plain TCP: ask for the server's key, send the password
                    // encrypted with it.
                    Some(0x04) => self.write(&[0x02]).await?,
                    _ => {
                        let key = &packet[1..];
                        // A 4,096-bit key's PEM is about 800 bytes. Larger ones are refused
                        // before any arithmetic: RSA with a server's modulus and exponent of
                        // any size is work of any length.
                        if key.len() > MAX_RSA_KEY {
                            return Err(broken(format!(
                                "the server sent an RSA key of {} bytes; at most {MAX_RSA_KEY} are taken",
                                key.len()
                            )));
                        }
                        let mut secret = settings.password.as_bytes().to_vec();
                        secret.push(0);
                        for (i, b) in secret.iter_mut().enumerate() {
                            *b ^= nonce.get(i % nonce.len().max(1)).copied().unwrap_or(0);
                        }
                        let key = key.to_vec();
                        // The key is the server's: a malformed one must not take us down.
                        let encrypted = std::panic::catch_unwind(move || {
                            mysql_common::crypto::encrypt(&secret, &key)
                        })
                        .map_err(|_| broken("the server sent an unreadable RSA key"))?;
                        self.write(&encrypted).await?;
                    }
                },
                _ => return Err(broken("an unexpected answer while logging in")),
            }
        }
        Err(broken("the login did not end"))
    }

    /// Runs `sql` and reads its answer's head: columns (rows follow) or the rows it changed.
    async fn query(&mut self, sql: &str) -> Result<Answer> {
        self.command(0x03, sql.as_bytes()).await?;
        self.answer().await
    }

    /// Runs a statement that returns no rows (rows it returns anyway are read and dropped).
    pub(crate) async fn execute(&mut self, sql: &str) -> Result<u64> {
        match self.query(sql).await? {
            Answer::Done { affected } => Ok(affected),
            Answer::Rows(_) => {
                while self.row().await?.is_some() {}
                Ok(0)
            }
        }
    }

    /// The head of an answer.
    async fn answer(&mut self) -> Result<Answer> {
        let packet = self.read().await?;
        match packet.first() {
            Some(0x00) => Ok(Answer::Done {
                affected: ParseBuf(&packet[1..]).lenenc().unwrap_or(0),
            }),
            Some(0xff) => Err(error_packet(&packet)),
            // We did not offer LOCAL INFILE; a server asking for a file of ours is refused.
            Some(0xfb) => Err(broken("the server asked for a local file; refused")),
            _ => {
                let count = ParseBuf(&packet).lenenc().unwrap_or(u64::MAX);
                if count == 0 || count > MAX_COLUMNS as u64 {
                    return Err(broken(format!(
                        "the server declared {count} columns; a result has 1 to {MAX_COLUMNS}"
                    )));
                }
                let columns = self.columns(count as usize).await?;
                Ok(Answer::Rows(columns))
            }
        }
    }

    /// Reads `count` column definitions and the EOF after them.
    async fn columns(&mut self, count: usize) -> Result<Vec<WireColumn>> {
        // bounded: at most MAX_COLUMNS (checked by every caller)
        let mut columns = Vec::with_capacity(count);
        for _ in 0..count {
            let packet = self.read().await?;
            columns.push(
                ParseBuf(&packet)
                    .parse::<WireColumn>(())
                    .map_err(|e| broken(format!("an unreadable column definition ({e})")))?,
            );
        }
        self.eof().await?;
        Ok(columns)
    }

    async fn eof(&mut self) -> Result<()> {
        let packet = self.read().await?;
        match packet.first() {
            Some(0xfe) if packet.len() < 9 => Ok(()),
            Some(0xff) => Err(error_packet(&packet)),
            _ => Err(broken("a column list without its end")),
        }
    }

    /// The next row of a text-protocol result (its packet), `None` at its end.
    async fn row(&mut self) -> Result<Option<Vec<u8>>> {
        let packet = self.read().await?;
        match packet.first() {
            Some(0xfe) if packet.len() < 9 => {
                // status flags after the warning count: SERVER_MORE_RESULTS_EXISTS (0x0008)
                // was not asked for.
                let status = packet
                    .get(3..5)
                    .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]));
                if status & 0x0008 != 0 {
                    return Err(broken("the server sent more results than asked"));
                }
                Ok(None)
            }
            Some(0xff) => Err(error_packet(&packet)),
            _ => Ok(Some(packet)),
        }
    }

    /// Prepares `sql`: its statement id, its parameters' count and its result's columns.
    async fn prepare(&mut self, sql: &str) -> Result<(u32, usize, Vec<WireColumn>)> {
        self.command(0x16, sql.as_bytes()).await?;
        let packet = self.read().await?;
        match packet.first() {
            Some(0x00) if packet.len() >= 12 => {}
            Some(0xff) => return Err(error_packet(&packet)),
            _ => return Err(broken("an unreadable answer to PREPARE")),
        }
        let id = u32::from_le_bytes([packet[1], packet[2], packet[3], packet[4]]);
        let columns = usize::from(u16::from_le_bytes([packet[5], packet[6]]));
        let params = usize::from(u16::from_le_bytes([packet[7], packet[8]]));
        if columns > MAX_COLUMNS {
            return Err(broken(format!(
                "the server declared {columns} columns; a result has at most {MAX_COLUMNS}"
            )));
        }
        if params > 0 {
            // Parameter definitions (counted in 16 bits): read and dropped one by one.
            for _ in 0..params {
                self.read().await?;
            }
            self.eof().await?;
        }
        let columns = match columns {
            0 => Vec::new(),
            n => self.columns(n).await?,
        };
        Ok((id, params, columns))
    }

    /// Runs prepared statement `id` with `values` (text or bytes, NULL when `None`), which the
    /// server converts to its columns' types. Returns the rows it changed.
    async fn execute_prepared(&mut self, id: u32, values: &[Option<&[u8]>]) -> Result<u64> {
        // bounded: the values of one statement, already in memory
        let mut body = Vec::with_capacity(
            16 + values.len() * 3 + values.iter().flatten().map(|v| v.len() + 9).sum::<usize>(),
        );
        body.extend_from_slice(&id.to_le_bytes());
        body.push(0); // no cursor
        body.extend_from_slice(&1u32.to_le_bytes()); // iteration count
        if !values.is_empty() {
            // bounded: one bit per value of one statement, already in memory
            let mut nulls = vec![0u8; values.len().div_ceil(8)];
            for (i, v) in values.iter().enumerate() {
                if v.is_none() {
                    nulls[i / 8] |= 1 << (i % 8);
                }
            }
            body.extend_from_slice(&nulls);
            body.push(1); // types follow
            for _ in values {
                // MYSQL_TYPE_STRING: the server converts the text to the column's type.
                body.extend_from_slice(&[ColumnType::MYSQL_TYPE_STRING as u8, 0]);
            }
            for v in values.iter().flatten() {
                put_lenenc(&mut body, v.len() as u64);
                body.extend_from_slice(v);
            }
        }
        self.command(0x17, &body).await?;
        match self.answer().await? {
            Answer::Done { affected } => Ok(affected),
            Answer::Rows(_) => {
                // A prepared statement's rows come in the binary protocol; writes return none.
                Err(broken("a write returned rows"))
            }
        }
    }

    /// Frees prepared statement `id` (no answer comes).
    async fn close_prepared(&mut self, id: u32) -> Result<()> {
        self.command(0x19, &id.to_le_bytes()).await
    }
}

/// Length-encoded integers, as MySQL writes counts and lengths.
trait LenEnc {
    fn lenenc(&mut self) -> Option<u64>;
}

impl LenEnc for ParseBuf<'_> {
    fn lenenc(&mut self) -> Option<u64> {
        let (value, used) = read_lenenc(self.0)?;
        self.0 = &self.0[used..];
        value
    }
}

/// The length-encoded integer at the start of `bytes` (`None` for NULL, 0xfb) and the bytes
/// it took; `None` when `bytes` ends first.
fn read_lenenc(bytes: &[u8]) -> Option<(Option<u64>, usize)> {
    let le = |n: usize| -> Option<u64> {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(bytes.get(1..1 + n)?);
        Some(u64::from_le_bytes(v))
    };
    Some(match *bytes.first()? {
        0xfb => (None, 1),
        0xfc => (Some(le(2)?), 3),
        0xfd => (Some(le(3)?), 4),
        0xfe => (Some(le(8)?), 9),
        b => (Some(u64::from(b)), 1),
    })
}

fn put_lenenc(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// The values of one text-protocol row, sliced out of its packet (NULL as `None`).
fn row_values(packet: &[u8], columns: usize) -> Result<Vec<Option<&[u8]>>> {
    // bounded: at most MAX_COLUMNS
    let mut values = Vec::with_capacity(columns);
    let mut rest = packet;
    for _ in 0..columns {
        let (length, used) =
            read_lenenc(rest).ok_or_else(|| broken("a row shorter than its columns"))?;
        rest = &rest[used..];
        match length {
            None => values.push(None),
            Some(n) => {
                let n = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= rest.len())
                    .ok_or_else(|| broken("a value longer than its row"))?;
                values.push(Some(&rest[..n]));
                rest = &rest[n..];
            }
        }
    }
    if !rest.is_empty() {
        return Err(broken("a row with more values than its columns"));
    }
    Ok(values)
}

/// An ERR packet as the error it carries.
fn error_packet(packet: &[u8]) -> Error {
    let code = packet
        .get(1..3)
        .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
    let mut message = packet.get(3..).unwrap_or_default();
    // "#" and a five-character SQL state, in protocol 4.1.
    if message.first() == Some(&b'#') {
        message = message.get(6..).unwrap_or_default();
    }
    server_error(code, &String::from_utf8_lossy(message))
}

/// What a login method sends for `password` and the server's `nonce`.
fn scramble(plugin: &AuthPlugin<'_>, password: Option<&str>, nonce: &[u8]) -> Result<Vec<u8>> {
    let Some(password) = password else {
        return Ok(Vec::new());
    };
    let nonce = nonce.strip_suffix(&[0]).unwrap_or(nonce);
    Ok(match plugin {
        AuthPlugin::CachingSha2Password => {
            mysql_common::scramble::scramble_sha256(nonce, password.as_bytes()).map(|s| s.to_vec())
        }
        _ => {
            mysql_common::scramble::scramble_native(nonce, password.as_bytes()).map(|s| s.to_vec())
        }
    }
    .unwrap_or_default())
}

/// How a result column is read, from what the server says of it.
fn kind_of(column: &WireColumn) -> Kind {
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    // Character set 63 is `binary`: bytes, not text.
    let binary = column.character_set() == 63;
    match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY | ColumnType::MYSQL_TYPE_YEAR => Kind::Int16,
        ColumnType::MYSQL_TYPE_SHORT if unsigned => Kind::Int32,
        ColumnType::MYSQL_TYPE_SHORT => Kind::Int16,
        ColumnType::MYSQL_TYPE_INT24 => Kind::Int32,
        ColumnType::MYSQL_TYPE_LONG if unsigned => Kind::Int64,
        ColumnType::MYSQL_TYPE_LONG => Kind::Int32,
        ColumnType::MYSQL_TYPE_LONGLONG if unsigned => Kind::Decimal(20, 0),
        ColumnType::MYSQL_TYPE_LONGLONG => Kind::Int64,
        ColumnType::MYSQL_TYPE_FLOAT => Kind::Float32,
        ColumnType::MYSQL_TYPE_DOUBLE => Kind::Float64,
        ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => {
            // The display length counts a point when there is a scale, and a sign unless
            // unsigned.
            let scale = column.decimals();
            let precision =
                column.column_length() as i64 - i64::from(scale > 0) - i64::from(!unsigned);
            if (1..=38).contains(&precision) && i64::from(scale) <= precision {
                Kind::Decimal(precision as u8, scale as i8)
            } else {
                Kind::Numeric
            }
        }
        ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE => Kind::Date,
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_DATETIME2 => Kind::Timestamp,
        ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => Kind::TimestampTz,
        ColumnType::MYSQL_TYPE_JSON => Kind::Json,
        ColumnType::MYSQL_TYPE_BIT | ColumnType::MYSQL_TYPE_GEOMETRY => Kind::Bytes,
        ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_STRING
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
            if binary =>
        {
            Kind::Bytes
        }
        // Text compares under a collation (case-insensitive, trailing spaces ignored by
        // default): equal remotely where it differs here, so conditions on it are sent
        // comparing its bytes (`dialect`).
        ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_STRING
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
        | ColumnType::MYSQL_TYPE_ENUM
        | ColumnType::MYSQL_TYPE_SET => Kind::LooseText,
        // TIME (a duration up to ±838 hours) and anything newer: as the server writes it.
        _ => Kind::AsText,
    }
}

/// Columns named as the result names them, repeated names suffixed `_1`, `_2`… so every
/// column can be addressed.
fn columns_of(wire: &[WireColumn]) -> Vec<Column> {
    // bounded: at most MAX_COLUMNS
    let mut columns: Vec<Column> = Vec::with_capacity(wire.len());
    // Names taken so far, and the next suffix to try for each base name: linear in the
    // columns however many share a name.
    let mut taken = std::collections::HashSet::new();
    let mut next = std::collections::HashMap::<String, usize>::new();
    for c in wire {
        let base = c.name_str().to_string();
        let mut name = base.clone();
        while taken.contains(&name) {
            let n = next.entry(base.clone()).or_insert(0);
            *n += 1;
            name = format!("{base}_{n}");
        }
        taken.insert(name.clone());
        columns.push(Column {
            name,
            kind: kind_of(c),
            nullable: !c.flags().contains(ColumnFlags::NOT_NULL_FLAG),
            unsigned: c.flags().contains(ColumnFlags::UNSIGNED_FLAG),
        });
    }
    columns
}

/// The tables and views of the datasource's database, by name: at most
/// `datasources.max_tables` of them.
pub(crate) async fn table_names(settings: &Settings) -> Result<Vec<String>> {
    settings.lookup(list_tables(settings)).await
}

async fn list_tables(settings: &Settings) -> Result<Vec<String>> {
    let mut conn = settings.connect_for_lookups().await?;
    let sql = format!(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = {} ORDER BY table_name",
        text_literal(&settings.database)
    );
    let Answer::Rows(columns) = conn.query(&sql).await? else {
        return Err(broken("the table list returned no rows"));
    };
    let max = settings.net.max_tables;
    let mut names = Vec::new();
    while let Some(row) = conn.row().await? {
        if names.len() == max {
            return Err(Error::invalid(format!(
                "MySQL database '{}' has more than {max} tables, the most a datasource lists (datasources.max_tables)",
                settings.database
            )));
        }
        if let Some(Some(name)) = row_values(&row, columns.len())?.first() {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(names)
}

/// `text` as a string literal every `sql_mode` reads alike: hexadecimal, so neither quotes
/// nor backslashes (which `NO_BACKSLASH_ESCAPES` changes) can matter. Used only for names in
/// catalog lookups; values of writes are bound.
fn text_literal(text: &str) -> String {
    if text.is_empty() {
        return "''".to_string();
    }
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    format!("CONVERT(0x{hex} USING utf8mb4)")
}

/// The columns of `table`; `None` when the database has no such table.
pub(crate) async fn table_columns(settings: &Settings, table: &str) -> Result<Option<Vec<Column>>> {
    settings.lookup(describe_table(settings, table)).await
}

async fn describe_table(settings: &Settings, table: &str) -> Result<Option<Vec<Column>>> {
    let mut conn = settings.connect_for_lookups().await?;
    // The server's own description of the table's result: the types a read gets.
    let sql = format!("SELECT * FROM {} LIMIT 0", settings.qualified(table));
    match conn.query(&sql).await {
        Ok(Answer::Rows(wire)) => {
            while conn.row().await?.is_some() {}
            Ok(Some(columns_of(&wire)))
        }
        Ok(Answer::Done { .. }) => Ok(None),
        Err(e)
            if NO_SUCH_TABLE
                .iter()
                .any(|c| e.message().ends_with(&format!("(error {c})"))) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The error MySQL gives for reading `table`.
pub(crate) async fn read_error(settings: &Settings, table: &str) -> Option<Error> {
    settings
        .lookup(async {
            let mut conn = settings.connect_for_lookups().await?;
            let probe = format!("SELECT * FROM {} LIMIT 0", settings.qualified(table));
            conn.execute(&probe).await
        })
        .await
        .err()
}

/// The columns a native query returns, from the server's description of it prepared
/// (nothing runs).
pub(crate) async fn query_columns(settings: &Settings, sql: &str) -> Result<Vec<Column>> {
    // MariaDB runs the text of `/*M! … */` and MySQL of `/*! … */`, which mindlite's parser
    // reads as comments: `SET STATEMENT tx_read_only=0 FOR …` inside one would write through
    // the read-only session.
    if sql.contains("/*!") || sql.contains("/*M!") || sql.contains("/*m!") {
        return Err(Error::invalid(
            "A MySQL native query may not hold executable comments (/*! … */, /*M! … */): their text would run outside the read-only session",
        ));
    }
    settings.lookup(describe_query(settings, sql)).await
}

async fn describe_query(settings: &Settings, sql: &str) -> Result<Vec<Column>> {
    let mut conn = settings.connect_for_lookups().await?;
    let (id, params, wire) = conn.prepare(sql).await?;
    conn.close_prepared(id).await?;
    if params > 0 {
        return Err(Error::invalid(
            "The native query has placeholders ('?'); write its values into it",
        ));
    }
    if wire.is_empty() {
        return Err(Error::invalid(
            "The native query returns no rows; only a query that returns rows can be read",
        ));
    }
    Ok(columns_of(&wire))
}

/// The select-list item that reads `column` of a table.
pub(crate) fn select_item(column: &Column) -> String {
    match column.kind {
        // Types without a reading of their own come as the server writes them.
        Kind::AsText => format!("CAST({} AS CHAR)", quote(&column.name)),
        _ => quote(&column.name),
    }
}

/// Runs `sql` and yields its rows as batches of up to `batch_size` rows of `schema`, read as
/// `kinds` say. Rows stream from the server. Dropping the stream before its end stops the
/// statement on the server (`KILL QUERY`): the session alone would read the rest first.
pub(crate) fn read_rows(
    settings: Settings,
    sql: String,
    schema: SchemaRef,
    kinds: Vec<Kind>,
    batch_size: usize,
) -> impl Stream<Item = Result<RecordBatch>> + Send {
    enum State {
        Start(Settings, String),
        Reading(Open),
        Done,
    }
    let batch_size = batch_size.max(1);
    futures::stream::try_unfold(State::Start(settings, sql), move |state| {
        let schema = Arc::clone(&schema);
        let kinds = kinds.clone();
        async move {
            let mut open = match state {
                State::Start(settings, sql) => {
                    let conn = settings.connect().await?;
                    let mut open = Open {
                        conn,
                        settings,
                        finished: false,
                    };
                    // Until its head comes, a statement that computes first (an aggregate)
                    // answers nothing: dropped meanwhile, `open` stops it.
                    match open.conn.query(&sql).await {
                        Ok(Answer::Rows(columns)) if columns.len() == kinds.len() => {}
                        Ok(Answer::Rows(columns)) => {
                            open.finished = true;
                            return Err(broken(format!(
                                "the statement returned {} columns where {} were described",
                                columns.len(),
                                kinds.len()
                            )));
                        }
                        Ok(Answer::Done { .. }) => {
                            open.finished = true;
                            return Ok(None);
                        }
                        Err(e) => {
                            open.finished = true;
                            return Err(e);
                        }
                    }
                    open
                }
                State::Reading(open) => open,
                State::Done => return Ok(None),
            };
            // bounded: at most 1,024
            let mut chunk: Vec<Vec<u8>> = Vec::with_capacity(batch_size.min(1024));
            let mut bytes = 0;
            while chunk.len() < batch_size && bytes < BATCH_BYTES {
                match open.conn.row().await {
                    Ok(Some(row)) => {
                        bytes += row.len();
                        chunk.push(row);
                    }
                    Ok(None) => {
                        open.finished = true;
                        break;
                    }
                    Err(e) => {
                        open.finished = true;
                        return Err(e);
                    }
                }
            }
            if chunk.is_empty() {
                return Ok(None);
            }
            let batch = decode(&schema, &kinds, &chunk)?;
            let next = if open.finished {
                State::Done
            } else {
                State::Reading(open)
            };
            Ok(Some((batch, next)))
        }
    })
}

/// A statement whose answer is being read; dropped before its end, it stops the statement.
struct Open {
    conn: Conn,
    settings: Settings,
    finished: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        if !self.finished {
            self.settings.kill(self.conn.id);
        }
    }
}

/// Decodes text-protocol rows into one batch of `schema`: each value as the server wrote it,
/// then cast to the column's type by Arrow's parsers, strictly (a value that does not parse
/// is an error naming the column, never a NULL).
fn decode(schema: &SchemaRef, kinds: &[Kind], rows: &[Vec<u8>]) -> Result<RecordBatch> {
    let values: Vec<Vec<Option<&[u8]>>> = rows
        .iter()
        .map(|r| row_values(r, kinds.len()))
        .collect::<Result<_>>()?;
    let strict = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    // bounded: one per column of the result
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let field = schema.field(i);
        let named = |message: String| {
            Error::new(
                ErrorKind::InvalidData,
                format!("Column '{}' from MySQL: {message}", field.name()),
            )
        };
        let array: ArrayRef = if *kind == Kind::Bytes {
            // bounded: rows already received
            let mut b = BinaryBuilder::with_capacity(rows.len(), 0);
            for row in &values {
                b.append_option(row[i]);
            }
            Arc::new(b.finish())
        } else {
            // bounded: rows already received
            let mut b = StringBuilder::with_capacity(rows.len(), 0);
            for row in &values {
                match row[i] {
                    None => b.append_null(),
                    Some(raw) => {
                        b.append_value(std::str::from_utf8(raw).map_err(|e| named(e.to_string()))?)
                    }
                }
            }
            let text = Arc::new(b.finish()) as ArrayRef;
            match field.data_type() {
                DataType::Utf8 => text,
                target => cast_with_options(&text, target, &strict)
                    .map_err(|e| named(zero_date_hint(e.to_string())))?,
            }
        };
        columns.push(array);
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

/// Arrow's parse error, with what to do about MySQL's zero dates.
fn zero_date_hint(message: String) -> String {
    if message.contains("0000-00-00") {
        format!("{message}: a zero date has no value here; filter it out or convert it in a native query")
    } else {
        message
    }
}

/// Values per INSERT statement: the protocol counts placeholders in 16 bits.
const MAX_PARAMS: usize = 65_535;
/// Rows per INSERT statement.
const ROWS_PER_INSERT: usize = 1_000;

/// The MySQL column type for an Arrow type, for `CREATE TABLE my.t (SELECT …)`.
pub(crate) fn remote_type(data_type: &DataType) -> Result<String> {
    use datafusion::arrow::datatypes::TimeUnit;
    Ok(match data_type {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 | DataType::UInt8 => "SMALLINT".into(),
        DataType::Int32 | DataType::UInt16 => "INT".into(),
        DataType::Int64 | DataType::UInt32 => "BIGINT".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) if *p <= 65 && *s >= 0 => {
            format!("DECIMAL({p}, {s})")
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
            "LONGTEXT".into()
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "LONGBLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        // DATETIME holds 1000–9999 (TIMESTAMP only 1970–2038); instants are written in UTC.
        DataType::Timestamp(TimeUnit::Second, _) => "DATETIME".into(),
        DataType::Timestamp(_, _) => "DATETIME(6)".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME(6)".into(),
        other => {
            return Err(Error::invalid(format!(
                "A column of type {other} cannot be stored in MySQL by mindlite"
            )))
        }
    })
}

/// `array`'s values as text or bytes MySQL converts to its columns' types: booleans as 1/0,
/// times in UTC without a zone, bytes as they are.
fn wire_values(array: &dyn datafusion::arrow::array::Array) -> Result<Vec<Option<Vec<u8>>>> {
    use datafusion::arrow::array::{Array, BinaryArray, BooleanArray, StringArray};
    use datafusion::arrow::datatypes::TimeUnit;
    let out = match array.data_type() {
        DataType::Boolean => {
            let b = array
                .as_any()
                .downcast_ref::<BooleanArray>()
                .expect("a Boolean array");
            b.iter()
                .map(|v| v.map(|v| if v { b"1".to_vec() } else { b"0".to_vec() }))
                .collect()
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let bytes = cast_with_options(array, &DataType::Binary, &CastOptions::default())?;
            let bytes = bytes
                .as_any()
                .downcast_ref::<BinaryArray>()
                .expect("a cast to Binary gives a BinaryArray");
            bytes.iter().map(|v| v.map(<[u8]>::to_vec)).collect()
        }
        other => {
            // Instants as UTC wall time, which is how the session (time_zone +00:00) reads it.
            let array = match other {
                DataType::Timestamp(unit, Some(_)) => cast_with_options(
                    array,
                    &DataType::Timestamp(*unit, None),
                    &CastOptions::default(),
                )?,
                _ => datafusion::arrow::array::make_array(array.to_data()),
            };
            let text = cast_with_options(&array, &DataType::Utf8, &CastOptions::default())?;
            let text = text
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("a cast to Utf8 gives a StringArray");
            let is_time = matches!(
                array.data_type(),
                DataType::Timestamp(
                    TimeUnit::Second
                        | TimeUnit::Millisecond
                        | TimeUnit::Microsecond
                        | TimeUnit::Nanosecond,
                    None
                )
            );
            (0..text.len())
                .map(|i| {
                    (!text.is_null(i)).then(|| {
                        let v = text.value(i);
                        // MySQL reads '2024-01-02 03:04:05', not Arrow's 'T'.
                        if is_time {
                            v.replacen('T', " ", 1).into_bytes()
                        } else {
                            v.as_bytes().to_vec()
                        }
                    })
                })
                .collect()
        }
    };
    Ok(out)
}

/// Inserts every batch of `data` into `table` (qualified) on `conn`, columns by name from
/// `schema`; returns the rows written. The caller holds the transaction.
async fn insert_batches(
    conn: &mut Conn,
    table: &str,
    schema: &SchemaRef,
    mut data: datafusion::execution::SendableRecordBatchStream,
) -> Result<u64> {
    use futures::StreamExt;
    let names: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
    let width = names.len().max(1);
    let per_statement = ROWS_PER_INSERT.min(MAX_PARAMS / width).max(1);
    let statement_for = |rows: usize| {
        // bounded: one per column of the table
        let row = format!("({})", vec!["?"; names.len()].join(", "));
        format!(
            "INSERT INTO {table} ({}) VALUES {}",
            names.join(", "),
            // bounded: at most ROWS_PER_INSERT
            vec![row; rows].join(", ")
        )
    };
    let mut full: Option<u32> = None;
    let mut written = 0u64;
    while let Some(batch) = data.next().await {
        let batch = batch?;
        let columns: Vec<Vec<Option<Vec<u8>>>> = batch
            .columns()
            .iter()
            .map(|c| wire_values(c.as_ref()))
            .collect::<Result<_>>()?;
        let mut start = 0;
        while start < batch.num_rows() {
            let rows = per_statement.min(batch.num_rows() - start);
            let id = match (rows == per_statement, full) {
                (true, Some(id)) => id,
                (true, None) => *full.insert(conn.prepare(&statement_for(rows)).await?.0),
                (false, _) => conn.prepare(&statement_for(rows)).await?.0,
            };
            // bounded: one per cell of a batch in memory
            let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(rows * width);
            for r in start..start + rows {
                for column in &columns {
                    values.push(column[r].as_deref());
                }
            }
            written += conn.execute_prepared(id, &values).await?;
            if Some(id) != full {
                conn.close_prepared(id).await?;
            }
            start += rows;
        }
    }
    if let Some(id) = full {
        conn.close_prepared(id).await?;
    }
    Ok(written)
}

/// `INSERT INTO my.t [(columns)] …`: the rows of `data` into `table`, in one remote
/// transaction (so a failure leaves none of them). Returns the rows written.
pub(crate) async fn insert(
    settings: &Settings,
    table: &str,
    data: datafusion::execution::SendableRecordBatchStream,
) -> Result<u64> {
    let schema = data.schema();
    let mut conn = settings.connect_for_writes().await?;
    conn.execute("START TRANSACTION").await?;
    let written = insert_batches(&mut conn, &settings.qualified(table), &schema, data).await?;
    conn.execute("COMMIT").await?;
    Ok(written)
}

/// Drops `table` (`DROP TABLE my.t`); MySQL's error when it does not exist, unless `if_exists`.
pub(crate) async fn drop_table(settings: &Settings, table: &str, if_exists: bool) -> Result<()> {
    let qualified = settings.qualified(table);
    let mut conn = settings.connect_for_writes().await?;
    let statement = match if_exists {
        true => format!("DROP TABLE IF EXISTS {qualified}"),
        false => format!("DROP TABLE {qualified}"),
    };
    conn.execute(&statement).await.map(|_| ())
}

/// Makes `table` with the query's columns and fills it (`CREATE [OR REPLACE] TABLE my.t
/// (SELECT …)`; `exists` says whether it is there to be replaced). MySQL commits every CREATE
/// and DROP by itself, so the table is built under a new name, filled in one transaction, and
/// renamed into place by one atomic `RENAME TABLE` (which also moves an existing table aside):
/// a failure before the rename leaves the old table as it was (the new one is dropped).
/// Returns the rows written.
pub(crate) async fn create_table(
    settings: &Settings,
    table: &str,
    exists: bool,
    data: datafusion::execution::SendableRecordBatchStream,
) -> Result<u64> {
    let schema = data.schema();
    // bounded: one per column of the table
    let mut definitions = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        definitions.push(format!(
            "{} {}",
            quote(field.name()),
            remote_type(field.data_type())?
        ));
    }
    let mut conn = settings.connect_for_writes().await?;
    // A name of this statement's own: a leftover of another (a crash) cannot block it.
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let building = format!("{table}__mindlite_{}_{n}", std::process::id());
    let building_qualified = settings.qualified(&building);
    conn.execute(&format!(
        "CREATE TABLE {building_qualified} ({})",
        definitions.join(", ")
    ))
    .await?;
    // Dropped unfinished (the statement cancelled mid-fill), it drops the new table.
    let mut guard = Building {
        settings: settings.clone(),
        table: building_qualified.clone(),
        done: false,
    };
    let filled = fill(&mut conn, settings, table, exists, &building, data).await;
    if filled.is_err() {
        // On this session, which holds the new table's lock: another would wait for it.
        let cleaned = async {
            conn.execute("ROLLBACK").await?;
            conn.execute(&format!("DROP TABLE IF EXISTS {building_qualified}"))
                .await
        }
        .await;
        guard.done = cleaned.is_ok();
    } else {
        guard.done = true;
    }
    filled
}

/// Fills the table being built and renames it into place (see [`create_table`]).
async fn fill(
    conn: &mut Conn,
    settings: &Settings,
    table: &str,
    exists: bool,
    building: &str,
    data: datafusion::execution::SendableRecordBatchStream,
) -> Result<u64> {
    let schema = data.schema();
    let qualified = settings.qualified(table);
    let old = settings.qualified(&format!("{building}_old"));
    let building = settings.qualified(building);
    conn.execute("START TRANSACTION").await?;
    let written = insert_batches(conn, &building, &schema, data).await?;
    conn.execute("COMMIT").await?;
    if exists {
        conn.execute(&format!(
            "RENAME TABLE {qualified} TO {old}, {building} TO {qualified}"
        ))
        .await?;
        conn.execute(&format!("DROP TABLE {old}")).await?;
    } else {
        conn.execute(&format!("RENAME TABLE {building} TO {qualified}"))
            .await?;
    }
    Ok(written)
}

/// A table being built for `CREATE TABLE my.t (SELECT …)`; dropped before it is done, it
/// drops the table over a new session (the statement's own closes with it, releasing its
/// locks).
struct Building {
    settings: Settings,
    table: String,
    done: bool,
}

impl Drop for Building {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let settings = self.settings.clone();
        let statement = format!("DROP TABLE IF EXISTS {}", self.table);
        crate::memory::spawn_detached(&runtime, async move {
            if let Ok(mut conn) = settings.connect_for_writes().await {
                let _ = conn.execute(&statement).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lengths_and_rows_are_read_within_their_packet() {
        assert_eq!(read_lenenc(&[5]), Some((Some(5), 1)));
        assert_eq!(read_lenenc(&[0xfb]), Some((None, 1)));
        assert_eq!(read_lenenc(&[0xfc, 0x10, 0x01]), Some((Some(0x110), 3)));
        assert_eq!(read_lenenc(&[0xfe, 1, 2]), None);
        let mut out = Vec::new();
        for n in [0u64, 250, 251, 0xffff, 0x1_0000, 0xff_ffff, 0x100_0000] {
            out.clear();
            put_lenenc(&mut out, n);
            assert_eq!(read_lenenc(&out), Some((Some(n), out.len())));
        }
        let row = [2, b'a', b'b', 0xfb, 1, b'c'];
        assert_eq!(
            row_values(&row, 3).unwrap(),
            vec![Some(&b"ab"[..]), None, Some(&b"c"[..])]
        );
        // A declared length past the packet is refused, not allocated.
        let err =
            row_values(&[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], 1).unwrap_err();
        assert!(err.message().contains("longer than its row"), "{err}");
        assert!(row_values(&[1, b'a'], 2).is_err());
    }

    #[test]
    fn settings_name_what_is_wrong() {
        let net = Net::new(&crate::Config::default()).unwrap();
        let params = |v: Value| v.as_object().unwrap().clone();
        let err = Settings::from_parameters(&params(json!({"host": "h", "user": "u"})), &net)
            .unwrap_err();
        assert!(err.message().contains("'database' is required"), "{err}");
        let err = Settings::from_parameters(
            &params(json!({"host": "h", "user": "u", "database": "d", "ssl_ca": "/x"})),
            &net,
        )
        .unwrap_err();
        assert!(err.message().contains("'ssl_ca'"), "{err}");
        let ok = Settings::from_parameters(
            &params(json!({"host": "h", "user": "u", "database": "d", "ssl": false, "password": "s3cret"})),
            &net,
        )
        .unwrap();
        assert_eq!((ok.port, ok.push_down), (3306, true));
        assert!(!format!("{ok:?}").contains("s3cret"));
        let by_url = Settings::from_parameters(
            &params(json!({"url": "mysql://ann:p%40ss@db.example:3307/sales"})),
            &net,
        )
        .unwrap();
        assert_eq!(
            (
                by_url.host.as_str(),
                by_url.port,
                by_url.user.as_str(),
                by_url.password.as_str(),
                by_url.database.as_str()
            ),
            ("db.example", 3307, "ann", "p@ss", "sales")
        );
        assert!(Settings::from_parameters(
            &params(json!({"host": "/var/run/mysqld", "user": "u", "database": "d"})),
            &net
        )
        .is_err());
    }

    #[test]
    fn names_are_quoted_and_literals_hex() {
        assert_eq!(quote("a`b"), "`a``b`");
        assert_eq!(text_literal("a'\\"), "CONVERT(0x61275c USING utf8mb4)");
    }
}
