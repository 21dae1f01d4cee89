//! PostgreSQL datasources: connection settings, the catalog of a remote schema, and reading
//! rows as Arrow batches. Rows arrive in PostgreSQL's binary format and are decoded by column
//! type here, batch by batch, so a scan never holds more than one batch of a result.
//!
//! The client is `tokio-postgres` over plain TCP (no TLS stack, so no OpenSSL in the build),
//! on a socket the engine's egress policy opened (so the host's every address was checked).
//! What the server sends passes through [`Metered`]: no single protocol message may exceed
//! `datasources.max_message_mb` (tokio-postgres buffers a message whole), and batches close
//! early when their rows' bytes reach [`BATCH_BYTES`], so a hostile or broken server bounds
//! what a scan holds. SQL text for pushed-down filters comes from DataFusion's unparser (see
//! [`super::pushdown`]); what this module writes itself is only quoted identifiers and casts.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{CancelToken, Client, NoTls, RowStream};

use super::net::Net;
use crate::error::{Error, ErrorKind, Result};

/// Bytes of rows (as received) after which a batch is closed even if it has fewer rows than
/// the batch size, so wide rows do not make huge batches.
const BATCH_BYTES: u64 = 32 * 1024 * 1024;

/// Columns a table may have: PostgreSQL allows 1,600; more is not a PostgreSQL server.
const MAX_COLUMNS: usize = 1600;

/// The engine name in `CREATE DATABASE … ENGINE = 'postgres'`.
pub(crate) const ENGINE: &str = "postgres";

/// The PARAMETERS keys a PostgreSQL datasource takes.
const KEYS: [&str; 9] = [
    "url",
    "host",
    "port",
    "database",
    "user",
    "password",
    "schema",
    "connect_timeout",
    "push_down",
];

/// How long a connection attempt may take unless `connect_timeout` says otherwise.
const DEFAULT_CONNECT_TIMEOUT: u64 = 10;

/// Checked connection settings of one PostgreSQL datasource.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: String,
    pub(crate) user: String,
    password: String,
    /// The schema whose tables the datasource shows (`public` unless given).
    pub(crate) schema: String,
    connect_timeout: Duration,
    /// Whether filters and limits are sent to PostgreSQL (on unless `push_down` is false; off
    /// is for measuring what push-down saves).
    pub(crate) push_down: bool,
    /// Where connections may go, and what the server may send.
    net: Net,
    /// `hnsw.ef_search` for the session, when a knowledge base search sets it (pgvector
    /// returns at most that many rows from its index).
    ef_search: Option<usize>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs and error messages.
        f.debug_struct("Settings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("schema", &self.schema)
            .finish()
    }
}

impl Settings {
    /// Reads PARAMETERS, refusing values of the wrong kind by name; `net` is how its
    /// connections reach out. Keys it does not read are kept and ignored, as MindsDB keeps
    /// them (clients send `type` and the like), except the TLS settings (`sslmode`, `ssl…`):
    /// ignoring one would connect less safely than asked, so they are refused.
    pub(crate) fn from_parameters(parameters: &Map<String, Value>, net: &Net) -> Result<Self> {
        let from_url;
        let parameters = match parameters.get("url") {
            None => parameters,
            Some(url) => {
                from_url = super::dsn::with_url(
                    "PostgreSQL",
                    &["postgresql", "postgres"],
                    parameters,
                    url,
                )?;
                &from_url
            }
        };
        if let Some(tls) = parameters
            .keys()
            .find(|k| !KEYS.contains(&k.as_str()) && k.starts_with("ssl"))
        {
            return Err(Error::invalid(format!(
                "Unknown PostgreSQL parameter '{tls}': this build connects without TLS, so it takes no TLS settings; the parameters are {}",
                KEYS.join(", ")
            )));
        }
        let text = |key: &str, default: Option<&str>| -> Result<String> {
            match parameters.get(key) {
                Some(Value::String(s)) if !s.is_empty() || default.is_some() => Ok(s.clone()),
                Some(Value::Number(n)) if key != "host" => Ok(n.to_string()),
                Some(Value::String(_)) => Err(Error::invalid(format!(
                    "PostgreSQL parameter '{key}' must not be empty"
                ))),
                Some(other) => Err(Error::invalid(format!(
                    "PostgreSQL parameter '{key}' must be text, got {other}"
                ))),
                None => default.map(str::to_string).ok_or_else(|| {
                    Error::invalid(format!("PostgreSQL parameter '{key}' is required"))
                }),
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
                    "PostgreSQL parameter '{key}' must be a whole number from 1 to {max}"
                ))
            })
        };
        let push_down = match parameters.get("push_down") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "PostgreSQL parameter 'push_down' must be true or false, got {other}"
                )))
            }
        };
        Ok(Settings {
            host: text("host", None)?,
            port: whole("port", 5432, u64::from(u16::MAX))? as u16,
            database: text("database", None)?,
            user: text("user", None)?,
            password: text("password", Some(""))?,
            schema: text("schema", Some("public"))?,
            connect_timeout: Duration::from_secs(whole(
                "connect_timeout",
                DEFAULT_CONNECT_TIMEOUT,
                600,
            )?),
            push_down,
            net: net.clone(),
            ef_search: None,
        })
    }

    /// The same settings with pgvector's `hnsw.ef_search` set for each session.
    pub(crate) fn with_ef_search(mut self, ef_search: usize) -> Settings {
        self.ef_search = Some(ef_search.clamp(1, 1000));
        self
    }

    /// Opens a connection for reading: every transaction on it is READ ONLY, so neither a
    /// native query nor anything an agent sends can change the remote database.
    pub(crate) async fn connect(&self) -> Result<Client> {
        self.open(true).await
    }

    /// Opens a connection that may write (INSERT, CREATE TABLE).
    pub(crate) async fn connect_for_writes(&self) -> Result<Client> {
        self.open(false).await
    }

    /// Opens a connection; its driver runs on the current tokio runtime until the client drops.
    async fn open(&self, read_only: bool) -> Result<Client> {
        Ok(self.open_metered(read_only).await?.0)
    }

    /// Opens a connection under the egress policy, with what the server sends metered.
    async fn open_metered(&self, read_only: bool) -> Result<(Client, Arc<Received>)> {
        let mut config = tokio_postgres::Config::new();
        config
            .dbname(&self.database)
            .user(&self.user)
            .application_name("mindlite")
            // Literals in pushed-down filters are written with standard string escapes, which
            // a server configured otherwise would read differently. No JIT: compiling a large
            // pushed statement took 20 s and a GiB in the server, deaf to cancellation.
            .options(self.startup_options(read_only));
        if !self.password.is_empty() {
            config.password(&self.password);
        }
        let received = Arc::new(Received::default());
        let connecting = async {
            if self.host.starts_with('/') {
                self.net.egress.check_unix_socket("PostgreSQL")?;
                let stream = self.unix_socket().await?;
                self.handshake(&config, stream, &received).await
            } else {
                let stream = self
                    .net
                    .egress
                    .connect_tcp(&self.host, self.port, self.connect_timeout)
                    .await
                    .map_err(|e| self.named(e))?;
                let _ = stream.set_nodelay(true);
                self.handshake(&config, stream, &received).await
            }
        };
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(client) => Ok((client?, received)),
            Err(_) => Err(self.named(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "no answer within {} s (connect_timeout)",
                    self.connect_timeout.as_secs()
                ),
            ))),
        }
    }

    /// The settings every session starts with.
    fn startup_options(&self, read_only: bool) -> String {
        let mut options = String::from("-c standard_conforming_strings=on -c jit=off");
        if read_only {
            options.push_str(" -c default_transaction_read_only=on");
        }
        // A placeholder until pgvector loads, which then takes it (1 to 1,000, its range).
        if let Some(ef) = self.ef_search {
            options.push_str(&format!(" -c hnsw.ef_search={ef}"));
        }
        options
    }

    /// Starts a session over `stream` with what the server sends metered into `received`; the
    /// connection's driver runs on the current runtime until the client drops (or the server
    /// goes away: either way the queries that were waiting see the error).
    async fn handshake<S>(
        &self,
        config: &tokio_postgres::Config,
        stream: S,
        received: &Arc<Received>,
    ) -> Result<Client>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let metered = Metered::new(stream, Arc::clone(received), self.net.max_message_bytes);
        let (client, connection) = config
            .connect_raw(metered, NoTls)
            .await
            .map_err(|e| self.connect_error(&e, received))?;
        crate::memory::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// The socket of a server on this machine (`host` a directory, as libpq takes it).
    async fn unix_socket(&self) -> Result<tokio::net::UnixStream> {
        let path = format!("{}/.s.PGSQL.{}", self.host.trim_end_matches('/'), self.port);
        tokio::net::UnixStream::connect(&path).await.map_err(|e| {
            self.named(Error::new(
                ErrorKind::Unavailable,
                crate::egress::io_reason(&e).to_string(),
            ))
        })
    }

    /// `error` as "Cannot connect to PostgreSQL at host:port (database, user): …".
    fn named(&self, error: Error) -> Error {
        let reason = error
            .message()
            .strip_prefix(&format!("cannot connect to {}:{}: ", self.host, self.port))
            .unwrap_or(error.message())
            .to_string();
        Error::new(
            error.kind(),
            format!(
                "Cannot connect to PostgreSQL at {}:{} (database '{}', user '{}'): {reason}",
                self.host, self.port, self.database, self.user
            ),
        )
    }

    fn connect_error(&self, e: &tokio_postgres::Error, received: &Received) -> Error {
        let reason = received.refusal().unwrap_or_else(|| error_text(e));
        self.named(Error::new(ErrorKind::Unavailable, reason))
    }

    /// Cancels the statement `token` belongs to, over a new connection under the same policy.
    /// Best effort: errors are dropped (the statement's own connection closes either way).
    pub(crate) fn cancel(&self, token: CancelToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let settings = self.clone();
        crate::memory::spawn_detached(&runtime, async move {
            if settings.host.starts_with('/') {
                if let Ok(stream) = settings.unix_socket().await {
                    let _ = token.cancel_query_raw(stream, NoTls).await;
                }
            } else if let Ok(stream) = settings
                .net
                .egress
                .connect_tcp(&settings.host, settings.port, settings.connect_timeout)
                .await
            {
                let _ = token.cancel_query_raw(stream, NoTls).await;
            }
        });
    }

    /// What identifies the server, database, role and schema its statements run in: two
    /// datasources with the same key run one statement over tables of both.
    pub(crate) fn server_key(&self) -> String {
        // Debug quotes and escapes each part, so no two different settings read alike (a
        // `/` in a name cannot shift a part into the next). The password is in it, never shown.
        format!(
            "{:?}",
            (
                &self.user,
                &self.host,
                self.port,
                &self.database,
                &self.schema,
                &self.password
            )
        )
    }

    /// The table `table` of the datasource's schema, quoted.
    pub(crate) fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote(&self.schema), quote(table))
    }
}

/// The server of `knowledge_bases.storage_url` (`postgresql://…`): the operator's, not a
/// tenant's, so reachable whatever the egress policy says of internal addresses.
pub(crate) fn storage_settings(url: &str, net: &Net) -> Result<Settings> {
    let mut parameters = Map::new();
    parameters.insert("url".into(), url.into());
    let net = Net {
        egress: net.egress.with_configured_server(url),
        ..net.clone()
    };
    Settings::from_parameters(&parameters, &net)
        .map_err(|e| Error::invalid(format!("knowledge_bases.storage_url: {}", e.message())))
}

/// A PostgreSQL error as its server message (with detail) or the client's own text, shortened:
/// a server may send anything.
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                text = format!("{text}: {inner}");
                source = inner.source();
            }
            text
        }
    };
    crate::egress::excerpt(&text, 1000)
}

/// A failed remote statement as an error naming the datasource.
pub(crate) fn query_error(e: &tokio_postgres::Error) -> Error {
    let kind = if e.as_db_error().is_some() {
        ErrorKind::InvalidInput
    } else {
        ErrorKind::Unavailable
    };
    Error::new(kind, format!("PostgreSQL: {}", error_text(e)))
}

/// `name` as a PostgreSQL identifier, always quoted (so case and odd characters survive):
/// every `"` doubled. Not sqlparser's `Ident` display, which leaves a `"` after a backslash
/// (MySQL's escape) and a `""` as they are: PostgreSQL reads neither so, and a name holding
/// `\"` would end the identifier early.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The tables and views of the datasource's schema, by name: at most
/// `datasources.max_tables` of them (more is an error, not a silently short list).
pub(crate) async fn table_names(settings: &Settings) -> Result<Vec<String>> {
    let (client, received) = settings.open_metered(true).await?;
    let max = settings.net.max_tables;
    let rows = client
        .query_raw(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 ORDER BY table_name",
            [&settings.schema],
        )
        .await
        .map_err(|e| received.error(&e))?;
    let mut rows = std::pin::pin!(rows);
    let mut names = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.map_err(|e| received.error(&e))?;
        if names.len() == max {
            return Err(Error::invalid(format!(
                "PostgreSQL schema '{}' has more than {max} tables, the most a datasource lists (datasources.max_tables)",
                settings.schema
            )));
        }
        names.push(row.try_get::<_, String>(0).map_err(|e| query_error(&e))?);
    }
    Ok(names)
}

/// How one column's values are read and what Arrow type they become.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Bool,
    Int16,
    Int32,
    Int64,
    /// `oid` and other unsigned 32-bit values, widened.
    Oid,
    Float32,
    Float64,
    /// `numeric(p, s)` with p ≤ 38: exact.
    Decimal(u8, i8),
    /// `numeric` without a precision: as a double.
    Numeric,
    Text,
    /// Text under a non-deterministic collation: equal remotely when it differs here.
    LooseText,
    /// `char(n)`: blank-padded, compared ignoring the padding remotely.
    Bpchar,
    /// `json` and `xml`: text with no `=` of their own remotely.
    Json,
    Jsonb,
    Date,
    Timestamp,
    TimestampTz,
    Uuid,
    Bytes,
    /// Any other type; table scans select it as `::text` (a native query must cast it itself).
    AsText,
}

impl Kind {
    /// The kind for a type (by its oid) and modifier (`atttypmod`, −1 when unknown).
    pub(crate) fn of(ty: &Type, typmod: i32) -> Kind {
        match *ty {
            Type::BOOL => Kind::Bool,
            Type::INT2 => Kind::Int16,
            Type::INT4 => Kind::Int32,
            Type::INT8 => Kind::Int64,
            Type::OID => Kind::Oid,
            Type::FLOAT4 => Kind::Float32,
            Type::FLOAT8 => Kind::Float64,
            Type::NUMERIC => {
                // typmod = ((precision << 16) | scale) + 4
                if typmod >= 4 {
                    let precision = ((typmod - 4) >> 16) & 0xffff;
                    let scale = (typmod - 4) & 0xffff;
                    if (1..=38).contains(&precision) && scale <= precision {
                        return Kind::Decimal(precision as u8, scale as i8);
                    }
                }
                Kind::Numeric
            }
            Type::TEXT | Type::VARCHAR | Type::NAME => Kind::Text,
            Type::BPCHAR => Kind::Bpchar,
            Type::JSON | Type::XML => Kind::Json,
            Type::JSONB => Kind::Jsonb,
            Type::DATE => Kind::Date,
            Type::TIMESTAMP => Kind::Timestamp,
            Type::TIMESTAMPTZ => Kind::TimestampTz,
            Type::UUID => Kind::Uuid,
            Type::BYTEA => Kind::Bytes,
            _ => Kind::AsText,
        }
    }

    /// The Arrow type its values become.
    pub(crate) fn data_type(self) -> DataType {
        match self {
            Kind::Bool => DataType::Boolean,
            Kind::Int16 => DataType::Int16,
            Kind::Int32 => DataType::Int32,
            Kind::Int64 | Kind::Oid => DataType::Int64,
            Kind::Float32 => DataType::Float32,
            Kind::Float64 | Kind::Numeric => DataType::Float64,
            Kind::Decimal(p, s) => DataType::Decimal128(p, s),
            Kind::Text
            | Kind::LooseText
            | Kind::Bpchar
            | Kind::Json
            | Kind::Jsonb
            | Kind::Uuid
            | Kind::AsText => DataType::Utf8,
            Kind::Date => DataType::Date32,
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Kind::Bytes => DataType::Binary,
        }
    }

    /// The kind that reads a value PostgreSQL sends for `data_type`, when a statement casts
    /// its result to [`Kind::type_name`]; `None` for types a computed result is not read as.
    pub(crate) fn for_result(data_type: &DataType) -> Option<Kind> {
        Some(match data_type {
            DataType::Boolean => Kind::Bool,
            DataType::Int16 => Kind::Int16,
            DataType::Int32 => Kind::Int32,
            // Counts and ranks (UInt64 here) are read as bigint and cast back.
            DataType::Int64 | DataType::UInt64 => Kind::Int64,
            DataType::Float64 => Kind::Float64,
            DataType::Decimal128(p, s) if (1..=38).contains(p) && (0..=*p as i8).contains(s) => {
                Kind::Decimal(*p, *s)
            }
            DataType::Utf8 => Kind::Text,
            DataType::Date32 => Kind::Date,
            DataType::Timestamp(TimeUnit::Microsecond, None) => Kind::Timestamp,
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) if tz.as_ref() == "UTC" => {
                Kind::TimestampTz
            }
            _ => return None,
        })
    }

    /// The PostgreSQL type a computed result is cast to so that it is read as this kind
    /// (see [`Kind::for_result`]).
    pub(crate) fn type_name(self) -> String {
        match self {
            Kind::Bool => "boolean".into(),
            Kind::Int16 => "smallint".into(),
            Kind::Int32 => "integer".into(),
            Kind::Int64 => "bigint".into(),
            Kind::Oid => "oid".into(),
            Kind::Float32 => "real".into(),
            Kind::Float64 | Kind::Numeric => "double precision".into(),
            Kind::Decimal(p, s) => format!("numeric({p}, {s})"),
            Kind::Text | Kind::LooseText | Kind::AsText => "text".into(),
            Kind::Bpchar => "bpchar".into(),
            Kind::Json => "json".into(),
            Kind::Jsonb => "jsonb".into(),
            Kind::Date => "date".into(),
            Kind::Timestamp => "timestamp".into(),
            Kind::TimestampTz => "timestamptz".into(),
            Kind::Uuid => "uuid".into(),
            Kind::Bytes => "bytea".into(),
        }
    }

    /// Whether SQL comparing this column in PostgreSQL means what it means in DataFusion: not
    /// for types whose remote operators differ from their Arrow form's (padding, case, no `=`,
    /// unsigned), nor for unbounded numerics read as doubles.
    pub(crate) fn compares_alike(self) -> bool {
        matches!(
            self,
            Kind::Bool
                | Kind::Int16
                | Kind::Int32
                | Kind::Int64
                | Kind::Float32
                | Kind::Float64
                | Kind::Decimal(..)
                | Kind::Text
                | Kind::Date
                | Kind::Timestamp
                | Kind::TimestampTz
        )
    }
}

/// A value sent in PostgreSQL's text format, which the server parses as the type its
/// placeholder has: Arrow's text form of every type we hold is one PostgreSQL reads.
#[derive(Debug)]
pub(crate) struct TextParam<'a>(pub(crate) Option<&'a str>);

impl ToSql for TextParam<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        match self.0 {
            Some(text) => {
                out.extend_from_slice(text.as_bytes());
                Ok(tokio_postgres::types::IsNull::No)
            }
            None => Ok(tokio_postgres::types::IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> tokio_postgres::types::Format {
        tokio_postgres::types::Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A remote column: its name and how it is read.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) nullable: bool,
    /// An unsigned integer (MySQL's): compared alike, but its arithmetic raises where
    /// DataFusion's signed arithmetic goes below zero, so no computed plan reads it.
    pub(crate) unsigned: bool,
}

impl Column {
    /// The select-list item that reads it.
    pub(crate) fn select_item(&self) -> String {
        match self.kind {
            Kind::AsText => format!("{}::text", quote(&self.name)),
            _ => quote(&self.name),
        }
    }
}

/// The columns of `table` in the datasource's schema; `None` when there is no such table.
pub(crate) async fn table_columns(settings: &Settings, table: &str) -> Result<Option<Vec<Column>>> {
    let (client, received) = settings.open_metered(true).await?;
    let rows = client
        .query_raw(
            // A column under a non-deterministic collation (case-insensitive ICU, say) does
            // not compare as its text does; read through `to_jsonb` so servers before 12,
            // which have no such collations, answer too.
            "SELECT a.attname::text, a.atttypid::int8, a.atttypmod, a.attnotnull, \
               COALESCE((SELECT to_jsonb(l) ->> 'collisdeterministic' = 'false' \
                         FROM pg_catalog.pg_collation l WHERE l.oid = a.attcollation), false) \
             FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'v', 'm', 'p', 'f') \
               AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            [&settings.schema as &(dyn ToSql + Sync), &table],
        )
        .await
        .map_err(|e| received.error(&e))?;
    let mut rows = std::pin::pin!(rows);
    let mut columns = Vec::new();
    while let Some(row) = rows.next().await {
        let row = row.map_err(|e| received.error(&e))?;
        if columns.len() == MAX_COLUMNS {
            return Err(Error::invalid(format!(
                "PostgreSQL answered more than {MAX_COLUMNS} columns for table '{table}', more than PostgreSQL allows"
            )));
        }
        let field = |e: tokio_postgres::Error| query_error(&e);
        let oid = row.try_get::<_, i64>(1).map_err(field)? as u32;
        let ty = Type::from_oid(oid).unwrap_or(Type::UNKNOWN);
        let kind = match Kind::of(&ty, row.try_get(2).map_err(field)?) {
            Kind::Text if row.try_get::<_, bool>(4).map_err(field)? => Kind::LooseText,
            kind => kind,
        };
        columns.push(Column {
            name: row.try_get(0).map_err(field)?,
            kind,
            nullable: !row.try_get::<_, bool>(3).map_err(field)?,
            unsigned: false,
        });
    }
    Ok((!columns.is_empty()).then_some(columns))
}

/// The error PostgreSQL gives for reading `table` (none when it reads: the table appeared, or
/// is of a kind the column lookup leaves out).
pub(crate) async fn read_error(settings: &Settings, table: &str) -> Option<Error> {
    let client = match settings.connect().await {
        Ok(client) => client,
        Err(e) => return Some(e),
    };
    let probe = format!("SELECT * FROM {} LIMIT 0", settings.qualified(table));
    client
        .query(probe.as_str(), &[])
        .await
        .err()
        .map(|e| query_error(&e))
}

/// The columns a native query returns, from PostgreSQL's description of the prepared text.
/// Names repeated in the result get `_1`, `_2`… so every column can be addressed.
pub(crate) async fn query_columns(settings: &Settings, sql: &str) -> Result<Vec<Column>> {
    let (client, received) = settings.open_metered(true).await?;
    let statement = client.prepare(sql).await.map_err(|e| received.error(&e))?;
    if statement.columns().len() > MAX_COLUMNS {
        return Err(Error::invalid(format!(
            "The native query returns {} columns; at most {MAX_COLUMNS} are read",
            statement.columns().len()
        )));
    }
    let mut columns: Vec<Column> = Vec::new();
    for c in statement.columns() {
        let kind = Kind::of(c.type_(), -1);
        if kind == Kind::AsText {
            return Err(Error::invalid(format!(
                "Column '{}' of the native query has the PostgreSQL type '{}', which mindlite \
                 cannot read yet; cast it in the query (for example {}::text)",
                c.name(),
                c.type_().name(),
                quote(c.name())
            )));
        }
        let mut name = c.name().to_string();
        let mut n = 0;
        while columns.iter().any(|seen| seen.name == name) {
            n += 1;
            name = format!("{}_{n}", c.name());
        }
        columns.push(Column {
            name,
            kind,
            nullable: true,
            unsigned: false,
        });
    }
    Ok(columns)
}

/// The Arrow schema of `columns`.
pub(crate) fn schema_of(columns: &[Column]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.kind.data_type(), c.nullable))
            .collect::<Vec<_>>(),
    ))
}

/// A value in PostgreSQL's binary format, taken as it comes; decoded by [`Kind`].
struct Raw<'a>(&'a [u8]);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Runs `sql` and yields its rows as batches of up to `batch_size` rows of `schema`, read as
/// `kinds` say. Rows stream from the server; nothing waits for the whole result. Dropping the
/// stream before its end cancels the statement on the server (the client alone would read the
/// rest of the result before closing).
pub(crate) fn read_rows(
    settings: Settings,
    sql: String,
    params: Arc<[Option<String>]>,
    schema: SchemaRef,
    kinds: Vec<Kind>,
    batch_size: usize,
) -> impl Stream<Item = Result<RecordBatch>> + Send {
    enum State {
        Start(Settings, String),
        Reading(Open),
        /// The rows ended (a row stream must not be polled after its end).
        Done,
    }
    let batch_size = batch_size.max(1);
    futures::stream::try_unfold(State::Start(settings, sql), move |state| {
        let schema = Arc::clone(&schema);
        let kinds = kinds.clone();
        let params = Arc::clone(&params);
        async move {
            let mut open = match state {
                State::Start(settings, sql) => {
                    let (client, received) = settings.open_metered(true).await?;
                    // A statement that computes before its first row (an aggregate, a join)
                    // answers nothing until it ends: if the reader goes meanwhile, this guard
                    // cancels it on the server.
                    let mut pending = Pending {
                        cancel: Some((settings.clone(), client.cancel_token())),
                    };
                    let values: Vec<TextParam> =
                        params.iter().map(|p| TextParam(p.as_deref())).collect();
                    let rows = client
                        .query_raw(
                            sql.as_str(),
                            values.iter().map(|v| v as &(dyn ToSql + Sync)),
                        )
                        .await
                        .map_err(|e| received.error(&e))?;
                    pending.cancel = None;
                    Open {
                        client,
                        rows: Box::pin(rows),
                        finished: false,
                        received,
                        settings,
                    }
                }
                State::Reading(open) => open,
                State::Done => return Ok(None),
            };
            // bounded: at most 1,024
            let mut chunk = Vec::with_capacity(batch_size.min(1024));
            let start = open.received.bytes();
            while chunk.len() < batch_size && open.received.bytes() - start < BATCH_BYTES {
                match open.rows.next().await {
                    Some(row) => chunk.push(row.map_err(|e| open.received.error(&e))?),
                    None => {
                        open.finished = true;
                        break;
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

/// A statement sent whose first row has not come: dropped before then, it cancels the
/// statement.
struct Pending {
    cancel: Option<(Settings, CancelToken)>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some((settings, token)) = self.cancel.take() {
            settings.cancel(token);
        }
    }
}

/// A statement whose rows are being read; the client is kept with them (its connection
/// serves them).
struct Open {
    client: Client,
    rows: Pin<Box<RowStream>>,
    finished: bool,
    received: Arc<Received>,
    /// To cancel the statement with, over a connection of its own.
    settings: Settings,
}

impl Drop for Open {
    fn drop(&mut self) {
        if !self.finished {
            self.settings.cancel(self.client.cancel_token());
        }
    }
}

/// What a server has sent on one connection: its bytes, and why the connection was cut if a
/// message broke the limit.
#[derive(Debug, Default)]
pub(crate) struct Received {
    bytes: AtomicU64,
    refused: parking_lot::Mutex<Option<String>>,
}

impl Received {
    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn refusal(&self) -> Option<String> {
        self.refused.lock().clone()
    }

    /// A failed statement as an error, naming the limit when that is why the connection ended.
    pub(crate) fn error(&self, e: &tokio_postgres::Error) -> Error {
        match self.refusal() {
            Some(reason) => Error::new(ErrorKind::Unavailable, format!("PostgreSQL: {reason}")),
            None => query_error(e),
        }
    }
}

/// A socket whose incoming PostgreSQL messages are measured as they arrive: a message longer
/// than the cap ends the connection before it is buffered.
struct Metered<S> {
    inner: S,
    received: Arc<Received>,
    cap: u64,
    /// The header of the message being read (type byte and length), as far as it arrived.
    header: [u8; 5],
    header_len: usize,
    /// Bytes of the current message's body still to come.
    body_left: u64,
}

impl<S> Metered<S> {
    fn new(inner: S, received: Arc<Received>, cap: usize) -> Self {
        Metered {
            inner,
            received,
            cap: cap as u64,
            header: [0; 5],
            header_len: 0,
            body_left: 0,
        }
    }

    /// Walks the message framing over newly read bytes; an error names the broken limit.
    fn measure(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        self.received
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let skip = self.body_left.min(bytes.len() as u64);
                self.body_left -= skip;
                bytes = &bytes[skip as usize..];
                continue;
            }
            let take = (5 - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
            self.header_len += take;
            bytes = &bytes[take..];
            if self.header_len == 5 {
                self.header_len = 0;
                let length = u64::from(u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]));
                if length > self.cap {
                    let reason = format!(
                        "the server sent a message of {} MiB; the limit is {} MiB (datasources.max_message_mb)",
                        length / (1024 * 1024),
                        self.cap / (1024 * 1024)
                    );
                    *self.received.refused.lock() = Some(reason.clone());
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, reason));
                }
                self.body_left = length.saturating_sub(4);
            }
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let fresh = buf.filled()[before..].to_vec();
            self.measure(&fresh)?;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Decodes rows into one batch of `schema`.
fn decode(schema: &SchemaRef, kinds: &[Kind], rows: &[tokio_postgres::Row]) -> Result<RecordBatch> {
    // bounded: one per column of the result
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let mut builder = Builder::new(*kind, rows.len());
        for row in rows {
            let raw: Option<Raw> = row.try_get(i).map_err(|e| query_error(&e))?;
            builder.push(raw.map(|r| r.0)).map_err(|message| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!(
                        "Column '{}' from PostgreSQL: {message}",
                        schema.field(i).name()
                    ),
                )
            })?;
        }
        columns.push(builder.finish());
    }
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

/// Values with no Arrow counterpart are errors rather than NULLs (see `Builder::push`).
const INFINITE: &str =
    "'infinity' has no value here; filter it out or cast it to text in a native query";
const OUT_OF_RANGE: &str = "a time beyond the range mindlite holds";
const NOT_A_NUMBER: &str =
    "NaN, infinity or a number beyond the column's decimal range; cast it to text in a native query";

/// `raw` as the `N` bytes of a fixed-size binary value, or what was wrong.
fn exactly<const N: usize>(raw: &[u8]) -> std::result::Result<[u8; N], String> {
    raw.try_into()
        .map_err(|_| format!("expected {N} bytes, got {}", raw.len()))
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days between 1970-01-01 and 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

/// One column's values as they are decoded.
enum Builder {
    Bool(BooleanBuilder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder, Kind),
    Float32(Float32Builder),
    Float64(Float64Builder, Kind),
    Decimal(Decimal128Builder, i8),
    Text(StringBuilder, Kind),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    Bytes(BinaryBuilder),
}

impl Builder {
    /// A builder for `rows` values, rows already received (each within
    /// `datasources.max_message_mb`), so every capacity below is bounded by memory in use.
    fn new(kind: Kind, rows: usize) -> Builder {
        match kind {
            // bounded: rows already received
            Kind::Bool => Builder::Bool(BooleanBuilder::with_capacity(rows)),
            // bounded: rows already received
            Kind::Int16 => Builder::Int16(Int16Builder::with_capacity(rows)),
            // bounded: rows already received
            Kind::Int32 => Builder::Int32(Int32Builder::with_capacity(rows)),
            // bounded: rows already received
            Kind::Int64 | Kind::Oid => Builder::Int64(Int64Builder::with_capacity(rows), kind),
            // bounded: rows already received
            Kind::Float32 => Builder::Float32(Float32Builder::with_capacity(rows)),
            Kind::Float64 | Kind::Numeric => {
                // bounded: rows already received
                Builder::Float64(Float64Builder::with_capacity(rows), kind)
            }
            Kind::Decimal(p, s) => Builder::Decimal(
                // bounded: rows already received
                Decimal128Builder::with_capacity(rows)
                    .with_precision_and_scale(p, s)
                    .expect("precision 1..=38 and scale ≤ precision were checked"),
                s,
            ),
            Kind::Text
            | Kind::LooseText
            | Kind::Bpchar
            | Kind::Json
            | Kind::Jsonb
            | Kind::Uuid
            | Kind::AsText => {
                // bounded: rows already received
                Builder::Text(StringBuilder::with_capacity(rows, rows * 16), kind)
            }
            // bounded: rows already received
            Kind::Date => Builder::Date(Date32Builder::with_capacity(rows)),
            // bounded: rows already received
            Kind::Timestamp => Builder::Timestamp(TimestampMicrosecondBuilder::with_capacity(rows)),
            Kind::TimestampTz => Builder::Timestamp(
                // bounded: rows already received
                TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC"),
            ),
            // bounded: rows already received
            Kind::Bytes => Builder::Bytes(BinaryBuilder::with_capacity(rows, rows * 16)),
        }
    }

    fn push(&mut self, raw: Option<&[u8]>) -> std::result::Result<(), String> {
        let Some(raw) = raw else {
            match self {
                Builder::Bool(b) => b.append_null(),
                Builder::Int16(b) => b.append_null(),
                Builder::Int32(b) => b.append_null(),
                Builder::Int64(b, _) => b.append_null(),
                Builder::Float32(b) => b.append_null(),
                Builder::Float64(b, _) => b.append_null(),
                Builder::Decimal(b, _) => b.append_null(),
                Builder::Text(b, _) => b.append_null(),
                Builder::Date(b) => b.append_null(),
                Builder::Timestamp(b) => b.append_null(),
                Builder::Bytes(b) => b.append_null(),
            }
            return Ok(());
        };
        match self {
            Builder::Bool(b) => b.append_value(exactly::<1>(raw)?[0] != 0),
            Builder::Int16(b) => b.append_value(i16::from_be_bytes(exactly::<2>(raw)?)),
            Builder::Int32(b) => b.append_value(i32::from_be_bytes(exactly::<4>(raw)?)),
            Builder::Int64(b, Kind::Oid) => {
                b.append_value(i64::from(u32::from_be_bytes(exactly::<4>(raw)?)))
            }
            Builder::Int64(b, _) => b.append_value(i64::from_be_bytes(exactly::<8>(raw)?)),
            Builder::Float32(b) => b.append_value(f32::from_be_bytes(exactly::<4>(raw)?)),
            Builder::Float64(b, Kind::Numeric) => b.append_value(
                numeric(raw)?
                    .to_f64()
                    .ok_or_else(|| NOT_A_NUMBER.to_string())?,
            ),
            Builder::Float64(b, _) => b.append_value(f64::from_be_bytes(exactly::<8>(raw)?)),
            Builder::Decimal(b, scale) => b.append_value(
                numeric(raw)?
                    .to_scaled(*scale)
                    .ok_or_else(|| NOT_A_NUMBER.to_string())?,
            ),
            Builder::Text(b, Kind::Uuid) => {
                let bytes = exactly::<16>(raw)?;
                let hex: String = bytes.iter().map(|x| format!("{x:02x}")).collect();
                b.append_value(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[0..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..32]
                ))
            }
            Builder::Text(b, kind) => {
                // jsonb's binary form is a version byte (1) and the JSON text.
                let text = if *kind == Kind::Jsonb {
                    raw.get(1..).unwrap_or_default()
                } else {
                    raw
                };
                b.append_value(std::str::from_utf8(text).map_err(|e| e.to_string())?)
            }
            Builder::Date(b) => {
                let days = i32::from_be_bytes(exactly::<4>(raw)?);
                // ±infinity have no Arrow date; reading them as NULL would disagree with a
                // pushed-down `IS NULL`, so they are refused.
                if days == i32::MAX || days == i32::MIN {
                    return Err(INFINITE.to_string());
                }
                b.append_value(
                    days.checked_add(PG_EPOCH_DAYS)
                        .ok_or_else(|| OUT_OF_RANGE.to_string())?,
                )
            }
            Builder::Timestamp(b) => {
                let micros = i64::from_be_bytes(exactly::<8>(raw)?);
                if micros == i64::MAX || micros == i64::MIN {
                    return Err(INFINITE.to_string());
                }
                b.append_value(
                    micros
                        .checked_add(PG_EPOCH_MICROS)
                        .ok_or_else(|| OUT_OF_RANGE.to_string())?,
                )
            }
            Builder::Bytes(b) => b.append_value(raw),
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        fn done(mut b: impl ArrayBuilder) -> ArrayRef {
            b.finish()
        }
        match self {
            Builder::Bool(b) => done(b),
            Builder::Int16(b) => done(b),
            Builder::Int32(b) => done(b),
            Builder::Int64(b, _) => done(b),
            Builder::Float32(b) => done(b),
            Builder::Float64(b, _) => done(b),
            Builder::Decimal(b, _) => done(b),
            Builder::Text(b, _) => done(b),
            Builder::Date(b) => done(b),
            Builder::Timestamp(b) => done(b),
            Builder::Bytes(b) => done(b),
        }
    }
}

/// A `numeric` in PostgreSQL's binary form: base-10000 digits, the weight of the first, a sign.
struct Numeric {
    negative: bool,
    /// NaN and ±infinity have no Arrow value.
    special: bool,
    weight: i16,
    digits: Vec<u16>,
}

fn numeric(raw: &[u8]) -> std::result::Result<Numeric, String> {
    let word = |i: usize| -> std::result::Result<u16, String> {
        raw.get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "a truncated numeric".to_string())
    };
    let ndigits = word(0)? as usize;
    let weight = word(1)? as i16;
    let sign = word(2)?;
    let digits = (0..ndigits)
        .map(|i| word(4 + i))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Numeric {
        negative: sign == 0x4000,
        special: sign != 0 && sign != 0x4000,
        weight,
        digits,
    })
}

impl Numeric {
    fn to_f64(&self) -> Option<f64> {
        if self.special {
            return None;
        }
        // Through text, so the double is the correctly rounded one.
        // bounded: the digits of one received value (datasources.max_message_mb)
        let mut text = String::with_capacity(self.digits.len() * 4 + 8);
        if self.negative {
            text.push('-');
        }
        text.push_str("0.");
        for d in &self.digits {
            text.push_str(&format!("{d:04}"));
        }
        text.push_str(&format!("e{}", (i32::from(self.weight) + 1) * 4));
        text.parse().ok()
    }

    fn to_scaled(&self, scale: i8) -> Option<i128> {
        if self.special {
            return None;
        }
        let mut value: i128 = 0;
        // Digit i is worth 10000^(weight - i); scaled by 10^scale.
        for (i, d) in self.digits.iter().enumerate() {
            let exponent = 4 * (i32::from(self.weight) - i as i32) + i32::from(scale);
            let part = if exponent >= 0 {
                i128::from(*d).checked_mul(10i128.checked_pow(exponent as u32)?)?
            } else {
                // Beyond the scale: a numeric(p, s) column holds none, so only truncation of
                // digits PostgreSQL already rounded away.
                i128::from(*d) / 10i128.checked_pow((-exponent) as u32).unwrap_or(i128::MAX)
            };
            value = value.checked_add(part)?;
        }
        Some(if self.negative { -value } else { value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifiers_double_every_quote_whatever_precedes_it() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\\\"b"), "\"a\\\"\"b\"");
        assert_eq!(quote("a\"\"b"), "\"a\"\"\"\"b\"");
        assert_eq!(
            quote("m\\\" text); drop table t; --"),
            "\"m\\\"\" text); drop table t; --\""
        );
    }

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [digits.len() as u16, weight as u16, sign, dscale] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        for d in digits {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_decode_exactly_and_as_doubles() {
        // 12345.678 = 1 2345 . 6780
        let n = numeric(&numeric_bytes(1, 0, 3, &[1, 2345, 6780])).unwrap();
        assert_eq!(n.to_scaled(3), Some(12_345_678));
        assert_eq!(n.to_f64(), Some(12345.678));
        // -0.05 = 0 . 0500 (weight -1)
        let n = numeric(&numeric_bytes(-1, 0x4000, 2, &[500])).unwrap();
        assert_eq!(n.to_scaled(2), Some(-5));
        assert_eq!(n.to_f64(), Some(-0.05));
        let nan = numeric(&numeric_bytes(0, 0xC000, 0, &[])).unwrap();
        assert_eq!(nan.to_f64(), None);
        let zero = numeric(&numeric_bytes(0, 0, 0, &[])).unwrap();
        assert_eq!(zero.to_scaled(2), Some(0));
    }

    #[test]
    fn numeric_modifiers_give_decimals() {
        let typmod = ((10 << 16) | 2) + 4;
        assert_eq!(Kind::of(&Type::NUMERIC, typmod), Kind::Decimal(10, 2));
        assert_eq!(Kind::of(&Type::NUMERIC, -1), Kind::Numeric);
        assert_eq!(Kind::of(&Type::INTERVAL, -1), Kind::AsText);
    }

    #[test]
    fn settings_name_what_is_wrong() {
        let net = Net::new(&crate::Config::default()).unwrap();
        let params = |v: Value| v.as_object().unwrap().clone();
        let err = Settings::from_parameters(&params(json!({"host": "h", "user": "u"})), &net)
            .unwrap_err();
        assert!(err.message().contains("'database' is required"), "{err}");
        let err = Settings::from_parameters(
            &params(json!({"host": "h", "user": "u", "database": "d", "sslmode": "x"})),
            &net,
        )
        .unwrap_err();
        assert!(
            err.message()
                .contains("Unknown PostgreSQL parameter 'sslmode'"),
            "{err}"
        );
        // Other keys are kept and ignored, as MindsDB keeps them.
        assert!(Settings::from_parameters(
            &params(json!({"host": "h", "user": "u", "database": "d", "type": "postgres"})),
            &net,
        )
        .is_ok());
        let err = Settings::from_parameters(
            &params(json!({"host": "h", "user": "u", "database": "d", "port": 70000})),
            &net,
        )
        .unwrap_err();
        assert!(err.message().contains("'port'"), "{err}");
        let ok = Settings::from_parameters(&params(
            json!({"host": "h", "user": "u", "database": "d", "port": "5433", "password": "s3cret"}),
        ), &net)
        .unwrap();
        assert_eq!(
            (ok.port, ok.schema.as_str(), ok.push_down),
            (5433, "public", true)
        );
        assert!(!format!("{ok:?}").contains("s3cret"));
    }

    #[test]
    fn messages_over_the_cap_end_the_connection_wherever_the_bytes_split() {
        let message = |kind: u8, body: usize| {
            let mut bytes = vec![kind];
            bytes.extend_from_slice(&((body + 4) as u32).to_be_bytes());
            bytes.extend(std::iter::repeat_n(b'x', body));
            bytes
        };
        let mut stream = message(b'R', 4);
        stream.extend(message(b'D', 1000));
        stream.extend(message(b'D', 10));
        for split in [1, 3, 5, 7, 64, 4096] {
            let received = Arc::new(Received::default());
            let mut metered = Metered::new((), Arc::clone(&received), 2000);
            for piece in stream.chunks(split) {
                metered.measure(piece).unwrap();
            }
            assert_eq!(received.bytes(), stream.len() as u64);
            let mut tight = Metered::new((), Arc::new(Received::default()), 500);
            let failed = stream
                .chunks(split)
                .try_for_each(|piece| tight.measure(piece));
            let err = failed.unwrap_err();
            assert!(
                err.to_string().contains("datasources.max_message_mb"),
                "{err}"
            );
            assert!(tight.received.refusal().is_some());
        }
    }
}
