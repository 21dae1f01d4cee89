//! The MCP sessions the server remembers: who started each (a session is found only by the
//! user that started it, so an id seen by another user opens nothing), the protocol version it
//! agreed, and, for the SSE transport, where its answers go. The table is bounded, in all and
//! per user: a new session past its user's share ends that user's least recently used one, and
//! one past the total ends the least recently used session of the user holding the most (so
//! one user's sessions never push out those of a user holding fewer); the client of an ended
//! session is told to start again, as the protocol provides. A session unused for
//! `mcp.session_idle_timeout_secs` ends. An id is 256 random bits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mindlite::{McpConfig, TenantId};
use tokio::sync::mpsc;

/// Where an SSE session's events go: the stream that sends them to its client.
pub type Outbox = mpsc::Sender<Vec<u8>>;

/// The sessions, shared by every connection.
#[derive(Clone)]
pub struct Sessions {
    table: Arc<Mutex<Table>>,
}

struct Table {
    entries: HashMap<String, Entry>,
    per_user: HashMap<TenantId, usize>,
    max_total: usize,
    max_per_user: usize,
    idle: Duration,
}

struct Entry {
    user: TenantId,
    version: String,
    last_used: Instant,
    outbox: Option<Outbox>,
}

/// A live session, as a request finds it.
pub struct Found {
    /// The protocol version it agreed (the newest this server speaks until it is initialized).
    pub version: String,
    /// Where its answers go, for an SSE session.
    pub outbox: Option<Outbox>,
}

impl Sessions {
    /// An empty table with `config`'s bounds.
    pub fn new(config: &McpConfig) -> Sessions {
        Sessions {
            table: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                per_user: HashMap::new(),
                max_total: config.max_sessions.max(1),
                max_per_user: config.max_sessions_per_user.max(1),
                idle: Duration::from_secs(config.session_idle_timeout_secs.max(1)),
            })),
        }
    }

    /// Starts a session for `user` speaking `version`, making room first; returns its id.
    pub fn start(
        &self,
        user: TenantId,
        version: &str,
        outbox: Option<Outbox>,
    ) -> std::io::Result<String> {
        let id = new_id()?;
        let mut table = self.lock();
        let now = Instant::now();
        table.end_expired(now);
        if table.per_user.get(&user).copied().unwrap_or(0) >= table.max_per_user {
            if let Some(oldest) = table.least_recent(|entry| entry.user == user) {
                table.remove(&oldest);
            }
        }
        if table.entries.len() >= table.max_total {
            // Room comes from the user holding the most sessions (this one first when it holds
            // as many), never from one with fewer: a user cannot end others' sessions by
            // opening its own, only its share of them.
            if let Some(heaviest) = table.heaviest(user) {
                if let Some(oldest) = table.least_recent(|entry| entry.user == heaviest) {
                    table.remove(&oldest);
                }
            }
        }
        table.entries.insert(
            id.clone(),
            Entry {
                user,
                version: version.to_string(),
                last_used: now,
                outbox,
            },
        );
        *table.per_user.entry(user).or_insert(0) += 1;
        Ok(id)
    }

    /// Session `id` of `user`, if it is live; using it starts its idle time again.
    pub fn find(&self, id: &str, user: TenantId) -> Option<Found> {
        let mut table = self.lock();
        let now = Instant::now();
        let idle = table.idle;
        let entry = table.entries.get_mut(id)?;
        if entry.user != user {
            return None;
        }
        if now.duration_since(entry.last_used) >= idle {
            table.remove(id);
            return None;
        }
        entry.last_used = now;
        Some(Found {
            version: entry.version.clone(),
            outbox: entry.outbox.clone(),
        })
    }

    /// Records the version session `id` agreed when it was initialized.
    pub fn agree(&self, id: &str, version: &str) {
        if let Some(entry) = self.lock().entries.get_mut(id) {
            entry.version = version.to_string();
        }
    }

    /// Whether session `id` is live (remembered and not idle too long); one that is not is
    /// ended now.
    pub fn is_live(&self, id: &str) -> bool {
        let mut table = self.lock();
        let idle = table.idle;
        match table.entries.get(id) {
            Some(entry) if entry.last_used.elapsed() < idle => true,
            Some(_) => {
                table.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends session `id` if `user` started it; whether there was one.
    pub fn end(&self, id: &str, user: TenantId) -> bool {
        let mut table = self.lock();
        if table
            .entries
            .get(id)
            .is_some_and(|entry| entry.user == user)
        {
            table.remove(id);
            return true;
        }
        false
    }

    /// Ends session `id`, whoever started it (its SSE stream closed).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Ends every session: the server is stopping, and open SSE streams end with them.
    pub fn end_all(&self) {
        let mut table = self.lock();
        table.entries.clear();
        table.per_user.clear();
    }

    /// How many sessions are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent at every step, so one a panic left locked is still good.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Table {
    fn remove(&mut self, id: &str) {
        if let Some(entry) = self.entries.remove(id) {
            if let Some(count) = self.per_user.get_mut(&entry.user) {
                *count -= 1;
                if *count == 0 {
                    self.per_user.remove(&entry.user);
                }
            }
        }
    }

    /// The user holding the most sessions; `user` when it holds as many as any.
    fn heaviest(&self, user: TenantId) -> Option<TenantId> {
        let own = self.per_user.get(&user).copied().unwrap_or(0);
        let (other, most) = self
            .per_user
            .iter()
            .max_by_key(|(id, count)| (**count, std::cmp::Reverse(**id)))
            .map(|(id, count)| (*id, *count))?;
        Some(if own >= most && own > 0 { user } else { other })
    }

    /// The least recently used session among those `chosen`. A scan: it runs only when the
    /// table is full, and the table is bounded.
    fn least_recent(&self, chosen: impl Fn(&Entry) -> bool) -> Option<String> {
        self.entries
            .iter()
            .filter(|(_, entry)| chosen(entry))
            .min_by_key(|(_, entry)| entry.last_used)
            .map(|(id, _)| id.clone())
    }

    /// Ends the sessions idle too long, when the table is full (otherwise they end when next
    /// asked for).
    fn end_expired(&mut self, now: Instant) {
        if self.entries.len() < self.max_total {
            return;
        }
        let idle = self.idle;
        let expired: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| now.duration_since(entry.last_used) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }
}

/// 256 random bits in hex; an error when the system has no randomness to give (a session id
/// must never be guessable).
fn new_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness for a session id: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(total: usize, per_user: usize) -> Sessions {
        Sessions::new(&McpConfig {
            max_sessions: total,
            max_sessions_per_user: per_user,
            ..McpConfig::default()
        })
    }

    #[test]
    fn a_session_is_found_only_by_the_user_that_started_it() {
        let table = sessions(10, 10);
        let (alice, bob) = (TenantId(1), TenantId(2));
        let id = table.start(alice, "2025-06-18", None).unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(table.find(&id, alice).unwrap().version, "2025-06-18");
        assert!(table.find(&id, bob).is_none());
        assert!(!table.end(&id, bob));
        assert!(table.end(&id, alice));
        assert!(table.find(&id, alice).is_none());
    }

    #[test]
    fn users_filling_the_table_end_their_own_sessions_not_a_light_users() {
        let table = sessions(8, 4);
        let alice = TenantId(1);
        let hers = table.start(alice, "v", None).unwrap();
        for user in [2, 3] {
            for _ in 0..4 {
                table.start(TenantId(user), "v", None).unwrap();
            }
        }
        for _ in 0..20 {
            table.start(TenantId(3), "v", None).unwrap();
            table.start(TenantId(4), "v", None).unwrap();
        }
        assert_eq!(table.len(), 8);
        assert!(table.find(&hers, alice).is_some());
    }

    #[test]
    fn a_full_table_ends_the_least_recently_used_session() {
        let table = sessions(3, 3);
        let user = TenantId(1);
        let ids: Vec<String> = (0..3)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(2));
                table.start(user, "v", None).unwrap()
            })
            .collect();
        // The first is used again: the second is now the least recent.
        std::thread::sleep(Duration::from_millis(2));
        assert!(table.find(&ids[0], user).is_some());
        let fourth = table.start(TenantId(2), "v", None).unwrap();
        assert_eq!(table.len(), 3);
        assert!(table.find(&ids[1], user).is_none());
        assert!(table.find(&ids[0], user).is_some());
        assert!(table.find(&fourth, TenantId(2)).is_some());
    }

    #[test]
    fn one_user_past_its_share_ends_its_own_sessions_not_others() {
        let table = sessions(100, 2);
        let (alice, bob) = (TenantId(1), TenantId(2));
        let bobs = table.start(bob, "v", None).unwrap();
        let first = table.start(alice, "v", None).unwrap();
        for _ in 0..50 {
            table.start(alice, "v", None).unwrap();
        }
        assert_eq!(table.len(), 3);
        assert!(table.find(&bobs, bob).is_some());
        assert!(table.find(&first, alice).is_none());
    }

    #[test]
    fn an_idle_session_ends() {
        let table = Sessions::new(&McpConfig {
            session_idle_timeout_secs: 1,
            ..McpConfig::default()
        });
        let user = TenantId(1);
        let id = table.start(user, "v", None).unwrap();
        assert!(table.is_live(&id));
        std::thread::sleep(Duration::from_millis(1100));
        assert!(!table.is_live(&id));
        assert!(table.find(&id, user).is_none());
        assert_eq!(table.len(), 0);
    }
}
