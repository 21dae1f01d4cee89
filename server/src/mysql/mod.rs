//! MindsDB's second door: the MySQL wire protocol (`mysql.port`, 47335 as MindsDB's), which
//! the `mysql` client, BI tools and SQLAlchemy speak. The protocol is opensrv-mysql's
//! (Databend's); this module gives it a socket guarded against what that crate leaves open
//! (`wire`), a session that turns commands into engine requests (`session`), results in
//! MySQL's types (`rows`) and prepared statements' values (`params`). Connections are counted
//! as HTTP's are (`connections`), in a table of their own.

#[cfg(test)]
mod fuzz;
mod params;
mod rows;
mod session;
mod wire;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mindlite::{Config, Engine};
use opensrv_mysql::AsyncMysqlIntermediary;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connections::{Connections, Place, Refusal};
use crate::http::BodyBudget;

/// What serving MySQL connections needs.
pub(crate) struct Door {
    listener: TcpListener,
    engine: Engine,
    connections: Connections,
    limits: wire::Limits,
    budget: BodyBudget,
    max_prepared: usize,
}

/// Binds `mysql.host` (or `http.host`) and `mysql.port`; `None` when the port is 0.
pub(crate) async fn bind(
    engine: &Engine,
    config: &Config,
    budget: BodyBudget,
) -> Result<Option<Door>, String> {
    let mysql = &config.mysql;
    if mysql.port == 0 {
        return Ok(None);
    }
    let host = if mysql.host.is_empty() {
        &config.http.host
    } else {
        &mysql.host
    };
    let address = format!("{host}:{}", mysql.port);
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|e| format!("cannot listen on {address} for MySQL: {e}"))?;
    Ok(Some(Door {
        listener,
        engine: engine.clone(),
        // A session idle for a minute may give its place to a newcomer; one that just
        // answered may not (a login that never completes is never idle).
        connections: Connections::new(mysql.max_connections, mysql.max_connections_per_address())
            .with_min_idle(Duration::from_secs(60)),
        limits: wire::Limits {
            max_packet: mysql.max_packet_mb.max(1) << 20,
            handshake: Duration::from_secs(mysql.handshake_timeout_secs.max(1)),
            idle: Duration::from_secs(mysql.idle_timeout_secs.max(1)),
            command: Duration::from_secs(mysql.command_timeout_secs.max(1)),
            write: Duration::from_secs(mysql.write_timeout_secs.max(1)),
        },
        budget,
        max_prepared: mysql.max_prepared_statements.max(1),
    }))
}

impl Door {
    /// The address listened on.
    pub(crate) fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves connections until `stop`; then lets those in the middle of a command finish it
    /// (for at most `drain`) and closes the rest.
    pub(crate) async fn serve(self, mut stop: watch::Receiver<bool>, drain: Duration) {
        let ids = AtomicU32::new(1);
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((socket, peer)) => match self.connections.admit(peer.ip()) {
                        Ok(place) => {
                            let id = ids.fetch_add(1, Ordering::Relaxed);
                            let connection = Connection {
                                engine: self.engine.clone(),
                                address: peer.ip().to_string(),
                                id,
                                place: Arc::new(place),
                                limits: self.limits,
                                budget: self.budget.clone(),
                                max_prepared: self.max_prepared,
                            };
                            tasks.spawn(connection.serve(socket, stop.clone(), drain));
                        }
                        Err(refusal) => {
                            tracing::warn!("MySQL connection from {peer} refused: {}", refusal_detail(refusal));
                            tokio::spawn(refuse(socket, refusal));
                        }
                    },
                    Err(e) => {
                        tracing::warn!("MySQL accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => break,
            }
            while tasks.try_join_next().is_some() {}
        }
        drop(self.listener);
        let drained =
            tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tasks.shutdown().await;
        }
    }
}

/// One accepted connection.
struct Connection {
    engine: Engine,
    address: String,
    id: u32,
    place: Arc<Place>,
    limits: wire::Limits,
    budget: BodyBudget,
    max_prepared: usize,
}

impl Connection {
    async fn serve(self, socket: TcpStream, mut stop: watch::Receiver<bool>, drain: Duration) {
        let _ = socket.set_nodelay(true);
        let guarded = wire::Guarded::new(socket, self.limits, Arc::clone(&self.place), self.budget);
        let session = match session::Session::new(
            self.engine,
            Arc::clone(&guarded.logged_in),
            Arc::clone(&guarded.multi_statements),
            self.address.clone(),
            self.id,
            self.max_prepared,
        ) {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!("MySQL connection from {}: {e}", self.address);
                return;
            }
        };
        let (reader, writer) = tokio::io::split(guarded);
        // Rows go out in 64 KiB writes, not one per row; opensrv flushes after each command.
        let writer = BufWriter::with_capacity(64 * 1024, writer);
        let run = AsyncMysqlIntermediary::run_on(session, reader, writer);
        tokio::pin!(run);
        let outcome = tokio::select! {
            outcome = &mut run => Some(outcome),
            // Taken for a newcomer while waiting for a command: nothing is in flight.
            () = self.place.evicted() => None,
            _ = stop.changed() => {
                // A command in flight finishes (for at most `drain`); one awaited never comes.
                let finish = async {
                    loop {
                        tokio::select! {
                            outcome = &mut run => return Some(outcome),
                            () = tokio::time::sleep(Duration::from_millis(50)) => {
                                if self.place.is_idle() {
                                    return None;
                                }
                            }
                        }
                    }
                };
                tokio::time::timeout(drain, finish).await.ok().flatten()
            }
        };
        if let Some(Err(e)) = outcome {
            // A client that leaves mid-command, a limit reached, a malformed packet.
            tracing::info!(
                "MySQL connection {} from {} ended: {e}",
                self.id,
                self.address
            );
        }
    }
}

/// Why a connection got no place, for its client and the log.
fn refusal_detail(refusal: Refusal) -> String {
    match refusal {
        Refusal::Full(cap) => format!(
            "The server has {cap} MySQL connections open, its limit (mysql.max_connections), none of them idle; try again shortly"
        ),
        Refusal::AddressFull(share) => format!(
            "This address has {share} MySQL connections open, its share (mysql.max_connections_per_address), none of them idle; try again shortly"
        ),
    }
}

/// Answers a connection that got no place with MySQL's "Too many connections" (1040, SQLSTATE
/// 08004) in place of the server's greeting, as MySQL does, and closes it.
async fn refuse(mut socket: TcpStream, refusal: Refusal) {
    let message = refusal_detail(refusal);
    let mut payload = vec![0xFF];
    payload.extend_from_slice(&1040u16.to_le_bytes());
    payload.extend_from_slice(b"#08004");
    payload.extend_from_slice(message.as_bytes());
    let mut packet = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(0);
    packet.extend_from_slice(&payload);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = socket.write_all(&packet).await;
        let _ = socket.shutdown().await;
    })
    .await;
}
