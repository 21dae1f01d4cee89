//! The open connections, counted in all and per client address, and which of them are idle
//! (waiting for a request). A newcomer over its address's share
//! (`http.max_connections_per_address`) takes the place of that address's longest-idle
//! connection, and one over `http.max_connections` the place of the longest-idle connection of
//! the address holding the most; only when none is idle is it refused. So sockets that send
//! nothing, however many one client opens, cannot lock anyone else out.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The connection table and its limits.
#[derive(Clone)]
pub struct Connections {
    table: Arc<Mutex<Table>>,
}

struct Table {
    max_total: usize,
    max_per_address: usize,
    /// How long a connection must have waited before it may be closed to make room.
    min_idle: std::time::Duration,
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_address: HashMap<IpAddr, usize>,
}

struct Entry {
    address: IpAddr,
    /// Since when it waits for a request; `None` while one is read or answered.
    idle_since: Option<Instant>,
    /// Told when the connection is closed to make room.
    evict: Arc<Notify>,
}

/// Why a new connection got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `http.max_connections` are open, none of them idle.
    Full(usize),
    /// Its address has its share open (`http.max_connections_per_address`), none idle.
    AddressFull(usize),
}

/// A connection's place among the open ones; dropping it gives the place back.
pub struct Place {
    table: Arc<Mutex<Table>>,
    id: u64,
    address: IpAddr,
    evict: Arc<Notify>,
}

impl Connections {
    /// A table for at most `max_total` connections, `max_per_address` of them from one address.
    pub fn new(max_total: usize, max_per_address: usize) -> Connections {
        Connections {
            table: Arc::new(Mutex::new(Table {
                max_total: max_total.max(1),
                max_per_address: max_per_address.clamp(1, max_total.max(1)),
                min_idle: std::time::Duration::ZERO,
                next_id: 0,
                open: HashMap::new(),
                per_address: HashMap::new(),
            })),
        }
    }

    /// This table, closing only connections that have waited at least `wait` to make room: a
    /// MySQL session carries state (its database, its prepared statements) that a client
    /// pool does not expect to lose the moment it stops, as an HTTP keep-alive may.
    pub fn with_min_idle(self, wait: std::time::Duration) -> Connections {
        lock(&self.table).min_idle = wait;
        self
    }

    /// A place for a connection from `peer`, made by closing an idle connection when the
    /// address or the server is full (the newcomer starts busy: it is about to send).
    pub fn admit(&self, peer: IpAddr) -> Result<Place, Refusal> {
        let address = client_address(peer);
        let mut table = lock(&self.table);
        // A share as large as the whole is no share: the server is simply full then.
        let shared = table.max_per_address < table.max_total;
        if shared && table.count(address) >= table.max_per_address {
            let victim = table.longest_idle(|entry| entry.address == address);
            table
                .evict(victim)
                .ok_or(Refusal::AddressFull(table.max_per_address))?;
        }
        if table.open.len() >= table.max_total {
            let counts = &table.per_address;
            let settled = table.settled();
            let victim = table
                .open
                .iter()
                .filter_map(|(id, entry)| {
                    let held = counts.get(&entry.address).copied().unwrap_or(0);
                    let since = entry.idle_since.filter(|since| *since <= settled)?;
                    Some((held, std::cmp::Reverse((since, *id))))
                })
                // The address holding the most first, then its longest idle.
                .max()
                .map(|(_, std::cmp::Reverse((_, id)))| id);
            table.evict(victim).ok_or(Refusal::Full(table.max_total))?;
        }
        let id = table.next_id;
        table.next_id += 1;
        let evict = Arc::new(Notify::new());
        table.open.insert(
            id,
            Entry {
                address,
                idle_since: None,
                evict: Arc::clone(&evict),
            },
        );
        *table.per_address.entry(address).or_insert(0) += 1;
        Ok(Place {
            table: Arc::clone(&self.table),
            id,
            address,
            evict,
        })
    }
}

impl Table {
    fn count(&self, address: IpAddr) -> usize {
        self.per_address.get(&address).copied().unwrap_or(0)
    }

    /// Connections idle since before this may be closed to make room.
    fn settled(&self) -> Instant {
        let now = Instant::now();
        now.checked_sub(self.min_idle).unwrap_or(now)
    }

    /// The idle connection among those `chosen` that has waited longest.
    fn longest_idle(&self, chosen: impl Fn(&Entry) -> bool) -> Option<u64> {
        let settled = self.settled();
        self.open
            .iter()
            .filter(|(_, entry)| chosen(entry))
            // Ties (one clock tick) go to the older connection.
            .filter_map(|(id, entry)| Some((entry.idle_since.filter(|s| *s <= settled)?, *id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Takes `victim` out of the table at once (its place is the newcomer's) and tells its
    /// task to close it; `None` when there is no victim.
    fn evict(&mut self, victim: Option<u64>) -> Option<()> {
        let entry = self.remove(victim?)?;
        entry.evict.notify_one();
        Some(())
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(count) = self.per_address.get_mut(&entry.address) {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&entry.address);
            }
        }
        Some(entry)
    }
}

impl Place {
    /// Marks the connection as waiting for a request: from now on it may be closed to make room.
    pub fn idle(&self) {
        if let Some(entry) = lock(&self.table).open.get_mut(&self.id) {
            entry.idle_since = Some(Instant::now());
        }
    }

    /// Marks the connection as reading or answering a request; false when it was closed to
    /// make room meanwhile (its place is gone: the connection must end).
    pub fn busy(&self) -> bool {
        match lock(&self.table).open.get_mut(&self.id) {
            Some(entry) => {
                entry.idle_since = None;
                true
            }
            None => false,
        }
    }

    /// Whether the connection waits for a request (or was closed to make room).
    pub fn is_idle(&self) -> bool {
        lock(&self.table)
            .open
            .get(&self.id)
            .is_none_or(|entry| entry.idle_since.is_some())
    }

    /// Completes when the connection has been chosen to make room.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// Whether half of `http.max_connections`, or half of this address's share, are open:
    /// kept-alive connections then wait only the first-byte timeout for their next request.
    pub fn under_pressure(&self) -> bool {
        let table = lock(&self.table);
        table.open.len() * 2 >= table.max_total
            || table.count(self.address) * 2 >= table.max_per_address
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.table).remove(self.id);
    }
}

/// The address a client is counted by: an IPv4 address (also when written IPv4-mapped), or
/// an IPv6 client's /64, which one subscriber holds whole.
pub fn client_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        },
    }
}

/// The table's lock; nothing panics while holding it, but a poisoned one is still consistent.
fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("a test address")
    }

    #[test]
    fn a_table_with_a_minimum_wait_closes_only_connections_that_waited_it() {
        let connections =
            Connections::new(1, 1).with_min_idle(std::time::Duration::from_secs(3600));
        let idle = connections.admit(ip("127.0.0.1")).unwrap();
        idle.idle();
        assert_eq!(
            connections.admit(ip("127.0.0.2")).err(),
            Some(Refusal::Full(1))
        );
        assert!(idle.busy(), "it kept its place");
    }

    #[test]
    fn an_address_over_its_share_replaces_its_own_longest_idle_connection() {
        let connections = Connections::new(10, 2);
        let first = connections.admit(ip("127.0.0.1")).unwrap();
        let second = connections.admit(ip("127.0.0.1")).unwrap();
        first.idle();
        second.idle();
        let third = connections.admit(ip("127.0.0.1")).unwrap();
        assert!(!first.busy(), "the longest idle gave its place");
        assert!(second.busy());
        assert!(third.busy());
        // Both busy now: the next from that address is refused, another address is not.
        let refused = connections.admit(ip("127.0.0.1")).err();
        assert_eq!(refused, Some(Refusal::AddressFull(2)));
        assert!(connections.admit(ip("127.0.0.2")).is_ok());
    }

    #[test]
    fn a_full_server_closes_an_idle_connection_of_the_address_holding_the_most() {
        let connections = Connections::new(4, 3);
        let quiet = connections.admit(ip("10.0.0.1")).unwrap();
        quiet.idle();
        let hog: Vec<Place> = (0..3)
            .map(|_| connections.admit(ip("10.0.0.2")).unwrap())
            .collect();
        hog[2].idle();
        let newcomer = connections.admit(ip("10.0.0.3")).unwrap();
        assert!(quiet.busy(), "the address with one connection keeps it");
        assert!(
            !hog[2].busy(),
            "the idle one of the address with three gave its place"
        );
        assert!(hog[0].busy() && hog[1].busy() && newcomer.busy());
        assert_eq!(
            connections.admit(ip("10.0.0.4")).err(),
            Some(Refusal::Full(4)),
            "no idle connection left to close"
        );
    }

    #[test]
    fn places_come_back_when_connections_close() {
        let connections = Connections::new(2, 2);
        let first = connections.admit(ip("::1")).unwrap();
        let _second = connections.admit(ip("::1")).unwrap();
        assert_eq!(
            connections.admit(ip("::1")).err(),
            Some(Refusal::Full(2)),
            "a share as large as the whole is reported as the whole"
        );
        drop(first);
        assert!(connections.admit(ip("::1")).is_ok());
    }

    #[test]
    fn an_evicted_connection_is_told_even_when_not_yet_waiting() {
        use futures::FutureExt;
        let connections = Connections::new(1, 1);
        let idle = connections.admit(ip("127.0.0.1")).unwrap();
        idle.idle();
        let _newcomer = connections.admit(ip("127.0.0.1")).unwrap();
        assert!(
            idle.evicted().now_or_never().is_some(),
            "the eviction is remembered until awaited"
        );
        // Its drop must not free the newcomer's place.
        drop(idle);
        assert!(connections.admit(ip("127.0.0.1")).is_err());
    }

    #[test]
    fn pressure_starts_at_half_the_connections_or_half_an_address_share() {
        let connections = Connections::new(8, 4);
        let first = connections.admit(ip("127.0.0.1")).unwrap();
        assert!(!first.under_pressure());
        let _second = connections.admit(ip("127.0.0.1")).unwrap();
        assert!(first.under_pressure(), "two of its four");
        let other = connections.admit(ip("127.0.0.2")).unwrap();
        assert!(!other.under_pressure());
        let _more = connections.admit(ip("127.0.0.3")).unwrap();
        assert!(other.under_pressure(), "four of eight");
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            client_address(ip("2001:db8:1:2:aaaa::1")),
            client_address(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            client_address(ip("2001:db8:1:2::1")),
            client_address(ip("2001:db8:1:3::1"))
        );
        assert_eq!(client_address(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }
}
