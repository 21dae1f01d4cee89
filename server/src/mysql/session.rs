//! One MySQL connection's session: its login, its current database and its prepared
//! statements, and each command turned into a request to the engine. What a statement means
//! is the engine's to decide (MindsDB's statements and the MySQL clients' `SHOW`s and `SET`s
//! among them); this only translates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use mindlite::{Engine, Positional, QueryContext, QueryRequest};
use opensrv_mysql::{
    AsyncMysqlShim, ErrorKind as Code, InitWriter, ParamParser, QueryResultWriter,
    StatementMetaWriter,
};
use tokio::io::AsyncWrite;

use super::rows;

/// The server version clients see: MySQL 8's, which the clients' feature checks expect, and
/// whose server this is.
const VERSION: &str = concat!("8.0.17-mindlite-", env!("CARGO_PKG_VERSION"));

/// One connection's session.
pub(super) struct Session {
    /// The server's engine, which checks the login.
    root: Engine,
    /// The engine acting for whoever logged in.
    engine: OnceLock<Engine>,
    /// Told when the login succeeded (the connection's guard then starts its idle timer).
    logged_in: Arc<AtomicBool>,
    /// Whether the client's handshake allows several statements in one query (as the guard
    /// read it); without it, a query is one statement, as MySQL takes it (stacked statements
    /// are how an injection does more than it was given).
    multi_statements: Arc<AtomicBool>,
    /// The client's address, for the rate of failed logins.
    address: String,
    id: u32,
    nonce: [u8; 20],
    /// The current database; the engine's default project until `USE`.
    db: Option<String>,
    prepared: HashMap<u32, Positional>,
    next_statement: u32,
    max_prepared: usize,
}

impl Session {
    pub(super) fn new(
        root: Engine,
        logged_in: Arc<AtomicBool>,
        multi_statements: Arc<AtomicBool>,
        address: String,
        id: u32,
        max_prepared: usize,
    ) -> std::io::Result<Session> {
        Ok(Session {
            root,
            engine: OnceLock::new(),
            logged_in,
            multi_statements,
            address,
            id,
            nonce: nonce()?,
            db: None,
            prepared: HashMap::new(),
            next_statement: 1,
            max_prepared,
        })
    }

    fn context(&self) -> QueryContext {
        QueryContext {
            db: self.db.clone(),
            show_secrets: false,
        }
    }

    fn request(&self, query: String) -> QueryRequest {
        QueryRequest {
            query,
            context: self.context(),
            // Clients of a server share its store: a transaction one opened would hold up
            // every other's writes, and outlive its connection. MindsDB's door commits every
            // statement too.
            autocommit: true,
            one_statement: !self.multi_statements.load(Ordering::Relaxed),
            ..Default::default()
        }
    }
}

/// Runs `request` and sends its result (`binary`: as the binary protocol's rows), keeping the
/// database it leaves current in `db`. The work and the result's rows being sent count toward
/// the user's memory, as an HTTP request's do.
async fn run<W: AsyncWrite + Send + Unpin>(
    engine: &Engine,
    request: QueryRequest,
    results: QueryResultWriter<'_, W>,
    binary: bool,
    db: &mut Option<String>,
) -> std::io::Result<()> {
    let memory = engine.request_memory();
    if let Err(e) = memory.admit(0) {
        return results.error(rows::code(&e), e.message().as_bytes()).await;
    }
    memory
        .run(async {
            let result = engine.query(request).await;
            *db = Some(result.context.db.clone());
            rows::answer(result, results, binary).await
        })
        .await
}

/// 20 random bytes for the login's challenge, as MySQL makes them: printable, no NUL (which
/// ends the handshake's field) and no `$`.
fn nonce() -> std::io::Result<[u8; 20]> {
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    for b in &mut bytes {
        *b = 0x21 + *b % 94;
        if *b == b'$' {
            *b += 1;
        }
    }
    Ok(bytes)
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin> AsyncMysqlShim<W> for Session {
    type Error = std::io::Error;

    fn version(&self) -> String {
        VERSION.to_string()
    }

    fn connect_id(&self) -> u32 {
        self.id
    }

    fn salt(&self) -> [u8; 20] {
        self.nonce
    }

    async fn authenticate(
        &self,
        _plugin: &str,
        username: &[u8],
        nonce: &[u8],
        answer: &[u8],
    ) -> bool {
        let username = String::from_utf8_lossy(username);
        // A login is a request without credentials: counted against the address's rate
        // (http.unauthenticated_per_minute), as HTTP's logins are, before it is checked.
        if self.root.auth_required() {
            if let Err(e) = self.root.throttle_unauthenticated(&self.address) {
                tracing::info!(
                    "MySQL login of '{username}' from {} refused: {e}",
                    self.address
                );
                return false;
            }
        }
        match self.root.authenticate_scrambled(&username, nonce, answer) {
            Ok(engine) => {
                let _ = self.engine.set(engine);
                self.logged_in.store(true, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::info!(
                    "MySQL login of '{username}' from {} refused: {e}",
                    self.address
                );
                false
            }
        }
    }

    async fn on_init<'a>(
        &'a mut self,
        db: &'a str,
        writer: InitWriter<'a, W>,
    ) -> std::io::Result<()> {
        let Some(engine) = self.engine.get() else {
            return writer
                .error(Code::ER_ACCESS_DENIED_ERROR, b"Not logged in")
                .await;
        };
        // Connector/Python names an empty database when it was given none.
        if db.is_empty() {
            return writer.ok().await;
        }
        // `USE` is the engine's statement: it knows which databases there are.
        let quoted = format!("USE `{}`", db.replace('`', "``"));
        let result = engine.query(self.request(quoted)).await;
        match result.outcome {
            mindlite::Outcome::Error(e) => {
                writer.error(rows::code(&e), e.message().as_bytes()).await
            }
            _ => {
                self.db = Some(result.context.db);
                writer.ok().await
            }
        }
    }

    async fn on_query<'a>(
        &'a mut self,
        query: &'a str,
        results: QueryResultWriter<'a, W>,
    ) -> std::io::Result<()> {
        let Some(engine) = self.engine.get().cloned() else {
            return results
                .error(Code::ER_ACCESS_DENIED_ERROR, b"Not logged in")
                .await;
        };
        let request = self.request(query.to_string());
        run(&engine, request, results, false, &mut self.db).await
    }

    async fn on_prepare<'a>(
        &'a mut self,
        query: &'a str,
        info: StatementMetaWriter<'a, W>,
    ) -> std::io::Result<()> {
        if self.engine.get().is_none() {
            return info
                .error(Code::ER_ACCESS_DENIED_ERROR, b"Not logged in")
                .await;
        }
        if self.prepared.len() >= self.max_prepared {
            let message = format!(
                "This connection holds {} prepared statements, the most it may (mysql.max_prepared_statements); close some",
                self.prepared.len()
            );
            return info
                .error(Code::ER_MAX_PREPARED_STMT_COUNT_REACHED, message.as_bytes())
                .await;
        }
        // Reading the text is CPU work as long as the text: off the async workers.
        let text = query.to_string();
        let parsed = tokio::task::spawn_blocking(move || Positional::parse(&text)).await;
        let positional = match parsed {
            Ok(Ok(positional)) => positional,
            Ok(Err(e)) => return info.error(rows::code(&e), e.message().as_bytes()).await,
            Err(e) => {
                let message = format!("Preparing the statement stopped: {e}");
                return info.error(Code::ER_UNKNOWN_ERROR, message.as_bytes()).await;
            }
        };
        let id = self.next_statement;
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        let params: Vec<opensrv_mysql::Column> = (0..positional.count())
            .map(|i| opensrv_mysql::Column {
                table: String::new(),
                column: format!("?{}", i + 1),
                coltype: opensrv_mysql::ColumnType::MYSQL_TYPE_VAR_STRING,
                colflags: opensrv_mysql::ColumnFlags::empty(),
            })
            .collect();
        self.prepared.insert(id, positional);
        // The result's columns are told with each execution's rows.
        info.reply(id, &params, &[]).await
    }

    async fn on_execute<'a>(
        &'a mut self,
        id: u32,
        params: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> std::io::Result<()> {
        let Some(engine) = self.engine.get().cloned() else {
            return results
                .error(Code::ER_ACCESS_DENIED_ERROR, b"Not logged in")
                .await;
        };
        let Some(prepared) = self.prepared.get(&id) else {
            let message = format!("Unknown prepared statement {id}");
            return results
                .error(Code::ER_UNKNOWN_STMT_HANDLER, message.as_bytes())
                .await;
        };
        let request = super::params::values(params)
            .and_then(|values| prepared.request(self.context(), values));
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                return results
                    .error(Code::ER_WRONG_ARGUMENTS, e.message().as_bytes())
                    .await
            }
        };
        run(&engine, request, results, true, &mut self.db).await
    }

    async fn on_close<'a>(&'a mut self, id: u32)
    where
        W: 'async_trait,
    {
        self.prepared.remove(&id);
    }
}
