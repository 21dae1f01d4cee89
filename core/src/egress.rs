//! Where the engine may connect. Every outbound connection (LLM providers, callback receivers,
//! PostgreSQL, anything added later) goes through [`Egress`]: the host is resolved here and every
//! address it resolves to is checked when the connection is made, so a URL whose text looks
//! harmless (a name that resolves to 127.0.0.1, a rebinding DNS server, `[::ffff:10.0.0.1]`,
//! `http://2130706433/`) cannot reach the operator's network. HTTP clients follow no redirects
//! and use no proxy, so the address checked is the address connected to.
//!
//! The policy: addresses on the `deny` list are always refused; addresses and names on the
//! `allow` list are reachable; internal addresses (loopback, private, link-local, CGNAT,
//! unique-local, multicast, unspecified, reserved, and IPv6 forms that embed an IPv4 address)
//! are refused when `deny_internal` is on (the hosted edition's default); everything else is
//! reachable. The operator's configured model endpoints (`llm.base_url`, `embedding.base_url`)
//! are reachable at their URLs' path prefixes only, through a client of their own: another
//! path on the same host and port is judged like any other URL, so a tenant cannot use an
//! internal endpoint for anything but what the operator configured it for.
//!
//! Every refusal says the same words and names the host as the caller wrote it, whatever the
//! reason (a denied address, any internal range, a port or path not allowed): telling the
//! reasons apart, or showing the address a name resolved to, would map the operator's network
//! and DNS for whoever asked.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// How long a name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks that the base URL in the setting `name` is http(s) with a host, so a typo fails
/// when the agent or model is saved rather than when it is first asked.
pub(crate) fn check_http_url(name: &str, url: &str) -> Result<()> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
            Ok(())
        }
        _ => Err(Error::invalid(format!(
            "'{name}' must be an http or https URL with a host, like http://127.0.0.1:11434/v1; got '{url}'"
        ))),
    }
}

/// Characters of an outside party's text (an error body, a server message) shown at most.
pub(crate) const EXCERPT_CHARS: usize = 300;

/// What the policy is made from: the `egress` configuration and the configured model endpoints.
pub(crate) struct EgressSettings<'a> {
    /// Refuse internal addresses (`egress.deny_internal`, or the edition's default).
    pub(crate) deny_internal: bool,
    /// `egress.allow` entries.
    pub(crate) allow: &'a [String],
    /// `egress.deny` entries.
    pub(crate) deny: &'a [String],
    /// `llm.base_url` and `embedding.base_url`, reachable at their path prefixes.
    pub(crate) configured_urls: [&'a str; 2],
}

/// A network: an address and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    addr: IpAddr,
    bits: u8,
}

impl Net {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_matches(
                u128::from(u32::from(net)) << 96,
                u128::from(u32::from(ip)) << 96,
                self.bits,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_matches(u128::from(net), u128::from(ip), self.bits)
            }
            _ => false,
        }
    }
}

fn prefix_matches(a: u128, b: u128, bits: u8) -> bool {
    if bits == 0 {
        return true;
    }
    let mask = u128::MAX << (128 - u32::from(bits));
    a & mask == b & mask
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// What one `allow` or `deny` entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Net(Net),
    /// A host name, lower case, without a trailing dot.
    Host(String),
}

/// One `allow` or `deny` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    target: Target,
    /// Only this port, when given (addresses only).
    port: Option<u16>,
}

/// The entries of `egress.allow` or `egress.deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rules(Vec<Rule>);

impl Rules {
    /// Reads the entries of the config key `key`; an entry that is neither a network, an
    /// address nor a host name (either with a port or not) is an error naming it.
    pub(crate) fn parse(entries: &[String], key: &str) -> Result<Rules> {
        entries
            .iter()
            .map(|entry| {
                parse_rule(entry.trim()).ok_or_else(|| {
                    Error::invalid(format!(
                        "{key}: '{entry}' is not a network (10.0.0.0/8), an address (127.0.0.1, \
                         [::1]:8080) or a host name (llm.internal, llm.internal:11434)"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Rules)
    }

    /// [`Rules::parse`] for a deny list, which names addresses: a host name would be resolved
    /// at the moment of connecting, by a DNS its owner controls, so it cannot deny anything.
    pub(crate) fn parse_addresses(entries: &[String], key: &str) -> Result<Rules> {
        let rules = Rules::parse(entries, key)?;
        if let Some(rule) = rules.0.iter().find(|r| matches!(r.target, Target::Host(_))) {
            let Target::Host(name) = &rule.target else {
                unreachable!("found as a host")
            };
            return Err(Error::invalid(format!(
                "{key}: '{name}' is a host name; deny networks or addresses"
            )));
        }
        Ok(rules)
    }

    /// Whether an entry covers the address `ip` on `port`. `None` as the port means it is not
    /// known (a name being resolved): then an entry with a port matches only if `unknown_matches`
    /// (a deny list errs on refusing, an allow list on not allowing).
    fn covers(&self, ip: IpAddr, port: Option<u16>, unknown_matches: bool) -> bool {
        self.0.iter().any(|rule| match &rule.target {
            Target::Net(net) => {
                net.contains(ip)
                    && match (rule.port, port) {
                        (None, _) => true,
                        (Some(_), None) => unknown_matches,
                        (Some(wanted), Some(port)) => wanted == port,
                    }
            }
            Target::Host(_) => false,
        })
    }

    /// Whether an entry names the host `name` on `port` (`None`: the port is not known, as
    /// while a name resolves; any entry for the name counts then, since a URL's port was
    /// checked before its name was resolved, see [`check_url`]).
    fn names(&self, name: &str, port: Option<u16>) -> bool {
        let name = normal_name(name);
        self.0.iter().any(|rule| match &rule.target {
            Target::Host(host) => {
                *host == name && (port.is_none() || rule.port.is_none() || rule.port == port)
            }
            Target::Net(_) => false,
        })
    }

    /// The ports `name` is allowed on when every entry naming it has a port; `None` when an
    /// entry allows it on any port, or none names it.
    fn only_ports_of(&self, name: &str) -> Option<Vec<u16>> {
        let name = normal_name(name);
        let mut ports = Vec::new();
        for rule in &self.0 {
            if let Target::Host(host) = &rule.target {
                if *host == name {
                    ports.push(rule.port?);
                }
            }
        }
        (!ports.is_empty()).then_some(ports)
    }
}

fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn parse_rule(entry: &str) -> Option<Rule> {
    if entry.is_empty() {
        return None;
    }
    if let Some((addr, bits)) = entry.split_once('/') {
        let addr: IpAddr = addr.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        return (bits <= max).then_some(Rule {
            target: Target::Net(Net {
                addr: canonical(addr),
                bits: if addr.is_ipv4() || canonical(addr).is_ipv6() {
                    bits
                } else {
                    bits.saturating_sub(96)
                },
            }),
            port: None,
        });
    }
    let host = |addr: IpAddr, port| Rule {
        target: Target::Net(Net {
            addr: canonical(addr),
            bits: if canonical(addr).is_ipv4() { 32 } else { 128 },
        }),
        port,
    };
    if let Ok(addr) = entry.parse::<IpAddr>() {
        return Some(host(addr, None));
    }
    if let Ok(socket) = entry.parse::<SocketAddr>() {
        return Some(host(socket.ip(), Some(socket.port())));
    }
    // A host name, with a port or not: letters, digits, '-' and '.', as DNS names are written.
    let (entry, port) = match entry.rsplit_once(':') {
        Some((name, port)) => (name, Some(port.parse::<u16>().ok()?)),
        None => (entry, None),
    };
    let valid = entry.len() <= 253
        && entry
            .split('.')
            .filter(|label| !label.is_empty())
            .all(|label| {
                label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
        && entry.bytes().any(|b| b.is_ascii_alphabetic());
    valid.then(|| Rule {
        target: Target::Host(normal_name(entry)),
        port,
    })
}

/// The range an internal address falls in, if it is one (never shown to callers: see
/// [`refusal`]).
fn internal_range(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "an unspecified ('this network') address",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a carrier-grade NAT address",
        (127, _, _) => "a loopback address",
        (169, 254, _) => "a link-local address",
        (192, 0, 0) => "an IETF protocol address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, _, _) => "a multicast address",
        (240..=255, _, _) => "a reserved address",
        _ => return None,
    })
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    let embedded = |high: u32| {
        let bits = u128::from(ip);
        Ipv4Addr::from(((bits >> (128 - high - 32)) & 0xffff_ffff) as u32)
    };
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    match segments {
        // IPv4-compatible (deprecated): the last 32 bits are an IPv4 address.
        [0, 0, 0, 0, 0, 0, _, _] => internal_v4(embedded(96)).or(Some("a reserved address")),
        // NAT64 (RFC 6052): the well-known prefix reaches the IPv4 address it embeds.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => internal_v4(embedded(96)),
        [0x64, 0xff9b, 1, ..] => Some("a local NAT64 address"),
        // 6to4: bits 16..48 are the IPv4 address of the relay's far side.
        [0x2002, ..] => internal_v4(embedded(16)),
        // Teredo tunnels to an IPv4 address hidden in the suffix.
        [0x2001, 0, ..] => Some("a Teredo tunnel address"),
        [0x2001, 0xdb8, ..] => Some("a documentation address"),
        [0x100, 0, 0, 0, ..] => Some("a discard-only address"),
        [first, ..] if first & 0xfe00 == 0xfc00 => Some("a unique-local address"),
        [first, ..] if first & 0xffc0 == 0xfe80 => Some("a link-local address"),
        [first, ..] if first & 0xffc0 == 0xfec0 => Some("a site-local address"),
        [first, ..] if first & 0xff00 == 0xff00 => Some("a multicast address"),
        _ => None,
    }
}

/// The policy one engine connects under.
#[derive(Debug)]
pub(crate) struct Policy {
    deny_internal: bool,
    allow: Rules,
    deny: Rules,
}

/// Why a connection was refused; found in error chains by [`refusal_in`].
#[derive(Debug, Clone)]
pub(crate) struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl From<Refused> for Error {
    fn from(refused: Refused) -> Error {
        Error::new(ErrorKind::Forbidden, refused.0)
    }
}

/// What every refusal says: the same words whatever the reason, naming the host as the caller
/// wrote it.
fn refusal(host: &str) -> Refused {
    Refused(format!(
        "refused by the egress policy: this server does not connect to '{host}'"
    ))
}

impl Policy {
    /// The policy of the `egress` settings (the configured endpoints are [`Endpoints`]').
    pub(crate) fn new(settings: &EgressSettings<'_>) -> Result<Policy> {
        Ok(Policy {
            deny_internal: settings.deny_internal,
            allow: Rules::parse(settings.allow, "egress.allow")?,
            deny: Rules::parse_addresses(settings.deny, "egress.deny")?,
        })
    }

    /// This policy with the hosts and ports of `endpoints` allowed too: the policy of the
    /// client that only ever sends to URLs under an endpoint's prefix.
    fn with_endpoints(&self, endpoints: &Endpoints) -> Policy {
        let mut allow = self.allow.clone();
        for endpoint in &endpoints.0 {
            allow.0.push(match &endpoint.host {
                url::Host::Ipv4(v4) => address_rule(IpAddr::V4(*v4), endpoint.port),
                url::Host::Ipv6(v6) => address_rule(IpAddr::V6(*v6), endpoint.port),
                url::Host::Domain(name) => Rule {
                    target: Target::Host(normal_name(name)),
                    port: endpoint.port,
                },
            });
        }
        Policy {
            deny_internal: self.deny_internal,
            allow,
            deny: self.deny.clone(),
        }
    }

    /// Checks the address `ip`, reached as `host` (as the caller wrote it) on `port` (when
    /// known); `named` says whether `host` is an allow-listed name.
    fn check(
        &self,
        host: &str,
        ip: IpAddr,
        port: Option<u16>,
        named: bool,
    ) -> std::result::Result<(), Refused> {
        let literal = host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok();
        // An entry with a port covers a host that writes the address, never a name that
        // resolves to it: the name's owner decides what it resolves to.
        let port = if literal { port } else { None };
        if self.deny.covers(ip, port, true) {
            return Err(refusal(host));
        }
        if named || self.allow.covers(ip, port, false) {
            return Ok(());
        }
        match internal_range(ip) {
            Some(_) if self.deny_internal => Err(refusal(host)),
            _ => Ok(()),
        }
    }

    /// Checks every address `host` resolved to; all must pass, so a name that mixes a public
    /// address with an internal one is refused outright.
    fn check_all(
        &self,
        host: &str,
        addrs: &[SocketAddr],
        port: Option<u16>,
    ) -> std::result::Result<(), Refused> {
        if addrs.is_empty() {
            return Err(Refused(format!("'{host}' has no address")));
        }
        let named = self.allow.names(host, port);
        for addr in addrs {
            self.check(host, addr.ip(), port, named)?;
        }
        Ok(())
    }

    /// Resolves `host` and checks each address; a literal address is checked as it is.
    pub(crate) async fn resolve(
        &self,
        host: &str,
        port: Option<u16>,
    ) -> std::result::Result<Vec<SocketAddr>, ResolveError> {
        let bare = host.trim_matches(['[', ']']);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let addr = SocketAddr::new(ip, port.unwrap_or(0));
            self.check(host, ip, port, false)?;
            return Ok(vec![addr]);
        }
        let looked_up = tokio::time::timeout(
            RESOLVE_TIMEOUT,
            tokio::net::lookup_host((bare, port.unwrap_or(0))),
        )
        .await;
        let addrs: Vec<SocketAddr> = match looked_up {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(_)) => return Err(ResolveError::Unknown(host.to_string())),
            Err(_) => return Err(ResolveError::Timeout(host.to_string())),
        };
        self.check_all(host, &addrs, port)?;
        Ok(addrs)
    }

    /// Whether Unix sockets (the server machine's own services) may be used.
    pub(crate) fn allows_unix_sockets(&self) -> bool {
        !self.deny_internal
    }
}

fn address_rule(ip: IpAddr, port: Option<u16>) -> Rule {
    let ip = canonical(ip);
    Rule {
        target: Target::Net(Net {
            addr: ip,
            bits: if ip.is_ipv4() { 32 } else { 128 },
        }),
        port,
    }
}

/// Why a name gave no address to connect to.
#[derive(Debug)]
pub(crate) enum ResolveError {
    Refused(Refused),
    Unknown(String),
    Timeout(String),
}

impl From<Refused> for ResolveError {
    fn from(refused: Refused) -> Self {
        ResolveError::Refused(refused)
    }
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::Refused(refused) => refused.fmt(f),
            ResolveError::Unknown(host) => write!(f, "the host name '{host}' cannot be resolved"),
            ResolveError::Timeout(host) => {
                write!(f, "the host name '{host}' did not resolve in time")
            }
        }
    }
}

impl std::error::Error for ResolveError {}

impl From<ResolveError> for Error {
    fn from(error: ResolveError) -> Error {
        match error {
            ResolveError::Refused(refused) => refused.into(),
            other => Error::new(ErrorKind::Unavailable, other.to_string()),
        }
    }
}

/// The operator's configured model endpoints (`llm.base_url`, `embedding.base_url`): each
/// reachable, internal or not, at its URL's scheme, host, port and path prefix.
#[derive(Debug, Clone, Default)]
struct Endpoints(Vec<Endpoint>);

#[derive(Debug, Clone)]
struct Endpoint {
    scheme: String,
    host: url::Host<String>,
    port: Option<u16>,
    /// The URL's path without its trailing `/`: a URL is under it when its path is this, or
    /// this followed by `/` and more.
    path: String,
}

impl Endpoints {
    /// The endpoints of `urls`; one that does not parse as a URL with a host is none.
    fn of(urls: &[&str]) -> Endpoints {
        let endpoints = urls
            .iter()
            .filter_map(|url| {
                let url = reqwest::Url::parse(url).ok()?;
                Some(Endpoint {
                    scheme: url.scheme().to_string(),
                    host: url.host()?.to_owned(),
                    port: url.port_or_known_default(),
                    path: url.path().trim_end_matches('/').to_string(),
                })
            })
            .collect();
        Endpoints(endpoints)
    }

    /// Whether `url` is under one of the endpoints. The URL is as parsed, so `..` segments
    /// and their percent-encoded forms are resolved already: what is checked is what is sent.
    fn cover(&self, url: &reqwest::Url) -> bool {
        self.0.iter().any(|endpoint| {
            url.scheme() == endpoint.scheme
                && url
                    .host()
                    .is_some_and(|host| host.to_owned() == endpoint.host)
                && url.port_or_known_default() == endpoint.port
                && url
                    .path()
                    .strip_prefix(endpoint.path.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

/// Outbound connections of one engine, under its [`Policy`].
#[derive(Debug, Clone)]
pub(crate) struct Egress {
    policy: Arc<Policy>,
    /// The policy with the configured endpoints' hosts allowed, for URLs under them.
    endpoint_policy: Arc<Policy>,
    endpoints: Arc<Endpoints>,
}

impl Egress {
    /// The engine's egress, from its `egress` settings (see `Config::egress`).
    pub(crate) fn new(settings: &EgressSettings<'_>) -> Result<Egress> {
        let policy = Policy::new(settings)?;
        let endpoints = Endpoints::of(&settings.configured_urls);
        Ok(Egress {
            endpoint_policy: Arc::new(policy.with_endpoints(&endpoints)),
            policy: Arc::new(policy),
            endpoints: Arc::new(endpoints),
        })
    }

    /// This egress with the host (and port) of `url` reachable: a server the operator
    /// configured (`knowledge_bases.storage_url`), trusted as the model endpoints are.
    pub(crate) fn with_configured_server(&self, url: &str) -> Egress {
        let mut policy = Policy {
            deny_internal: self.policy.deny_internal,
            allow: self.policy.allow.clone(),
            deny: self.policy.deny.clone(),
        };
        // A URL of another scheme than http(s) keeps its host as written (an address too).
        if let Some(url) = url::Url::parse(url).ok().filter(|u| u.has_host()) {
            let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
            policy.allow.0.push(match host.parse::<IpAddr>() {
                Ok(ip) => address_rule(ip, url.port()),
                Err(_) => Rule {
                    target: Target::Host(normal_name(host)),
                    port: url.port(),
                },
            });
        }
        Egress {
            policy: Arc::new(policy),
            endpoint_policy: Arc::clone(&self.endpoint_policy),
            endpoints: Arc::clone(&self.endpoints),
        }
    }

    /// An HTTP client whose every connection is checked: names resolve here, URLs that
    /// write an address are checked before sending, no redirect is followed and no proxy used.
    pub(crate) fn http_client(&self, user_agent: &str) -> Result<HttpClient> {
        let client = |policy: &Arc<Policy>| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                // A request's head and body go out at once: with Nagle's algorithm the body
                // waits for the server's delayed ACK of the head, 40 ms on Linux.
                .tcp_nodelay(true)
                .user_agent(user_agent)
                .dns_resolver(Arc::new(Resolver(Arc::clone(policy))))
                .build()
                .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))
        };
        Ok(HttpClient {
            client: client(&self.policy)?,
            endpoint_client: client(&self.endpoint_policy)?,
            egress: self.clone(),
        })
    }

    /// The policy `url` is judged by: the endpoints' for a URL under one, else the general one.
    fn policy_for(&self, url: &reqwest::Url) -> &Arc<Policy> {
        if self.endpoints.cover(url) {
            &self.endpoint_policy
        } else {
            &self.policy
        }
    }

    /// Opens a TCP connection to `host`:`port` within `timeout`, trying each address the host
    /// resolves to (all of which must pass the policy). The configured model endpoints are
    /// HTTP URLs: they allow nothing here.
    pub(crate) async fn connect_tcp(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<tokio::net::TcpStream> {
        let attempt = async {
            let addrs = self.policy.resolve(host, Some(port)).await?;
            let mut last = None;
            for addr in addrs {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = Some(e),
                }
            }
            Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "cannot connect to {host}:{port}: {}",
                    last.as_ref().map_or("no address", io_reason)
                ),
            ))
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(connected) => connected,
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "cannot connect to {host}:{port}: no answer within {} s",
                    timeout.as_secs()
                ),
            )),
        }
    }

    /// Refuses Unix sockets where the policy keeps connections off the server's own machine.
    pub(crate) fn check_unix_socket(&self, what: &str) -> Result<()> {
        if self.policy.allows_unix_sockets() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Forbidden,
            format!(
                "refused by the egress policy: {what} over a Unix socket reaches the server's own machine; give a network host"
            ),
        ))
    }

    /// Checks what can be checked of `url` before it is stored (a callback, a model's
    /// `base_url`): an address written in it must pass. Names are checked when connecting.
    pub(crate) fn check_url_text(&self, url: &str) -> Result<()> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| Error::invalid(format!("'{url}' is not a URL: {e}")))?;
        check_url(self.policy_for(&parsed), &parsed).map_err(Error::from)
    }
}

/// Checks what the HTTP client's resolver cannot: a URL whose host is an address (connected to
/// without resolving), and the port of a name allowed on some ports only (the resolver is
/// told the name, never the port).
fn check_url(policy: &Policy, url: &reqwest::Url) -> std::result::Result<(), Refused> {
    let port = url.port_or_known_default();
    match url.host() {
        Some(url::Host::Ipv4(v4)) => policy.check(&v4.to_string(), IpAddr::V4(v4), port, false),
        Some(url::Host::Ipv6(v6)) => policy.check(&format!("[{v6}]"), IpAddr::V6(v6), port, false),
        Some(url::Host::Domain(name)) => match policy.allow.only_ports_of(name) {
            Some(ports) if !port.is_some_and(|p| ports.contains(&p)) => Err(refusal(name)),
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

/// An HTTP client under the egress policy. Requests are only made through it.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: reqwest::Client,
    /// Sends only to URLs under a configured endpoint, whose hosts its resolver allows.
    endpoint_client: reqwest::Client,
    egress: Egress,
}

impl HttpClient {
    /// A POST to `url`, refused when the URL writes an address the policy refuses; names are
    /// checked as they resolve. A URL under a configured endpoint goes through the client
    /// that may reach it; any other, through the one that judges it like every URL.
    pub(crate) fn post(&self, url: &str) -> std::result::Result<reqwest::RequestBuilder, Refused> {
        self.request(reqwest::Method::POST, url)
    }

    /// A GET of `url`, judged as [`HttpClient::post`] judges its URL.
    pub(crate) fn get(&self, url: &str) -> std::result::Result<reqwest::RequestBuilder, Refused> {
        self.request(reqwest::Method::GET, url)
    }

    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> std::result::Result<reqwest::RequestBuilder, Refused> {
        let Ok(parsed) = reqwest::Url::parse(url) else {
            // reqwest refuses it as it does any text that is no URL.
            return Ok(self.client.request(method, url));
        };
        let policy = self.egress.policy_for(&parsed);
        check_url(policy, &parsed)?;
        if Arc::ptr_eq(policy, &self.egress.endpoint_policy) {
            Ok(self.endpoint_client.request(method, parsed))
        } else {
            Ok(self.client.request(method, parsed))
        }
    }
}

/// reqwest's resolver: names resolve here and every address is checked.
struct Resolver(Arc<Policy>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.0);
        Box::pin(async move {
            let addrs = policy.resolve(name.as_str(), None).await?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The refusal in `error`'s chain of causes, if the policy refused it.
pub(crate) fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused.0.clone());
        }
        if let Some(ResolveError::Refused(refused)) = e.downcast_ref::<ResolveError>() {
            return Some(refused.0.clone());
        }
        if let Some(other) = e.downcast_ref::<ResolveError>() {
            return Some(other.to_string());
        }
        current = e.source();
    }
    None
}

/// A short reason for an HTTP failure that names no address and quotes no one: the policy's
/// refusal, or what kind of failure it was.
pub(crate) fn http_reason(error: &reqwest::Error) -> String {
    if let Some(refusal) = refusal_in(error) {
        return refusal;
    }
    if error.is_timeout() {
        return "timed out".to_string();
    }
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io_reason(io).to_string();
        }
        current = e.source();
    }
    if error.is_connect() {
        "cannot connect".to_string()
    } else if error.is_body() || error.is_decode() {
        "the answer broke off".to_string()
    } else if error.is_request() {
        "the request could not be sent".to_string()
    } else {
        "the connection failed".to_string()
    }
}

/// What kind of I/O failure `error` is, in words that name no address.
pub(crate) fn io_reason(error: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match error.kind() {
        K::ConnectionRefused => "connection refused",
        K::ConnectionReset => "connection reset",
        K::ConnectionAborted => "connection aborted",
        K::TimedOut => "timed out",
        K::HostUnreachable => "host unreachable",
        K::NetworkUnreachable => "network unreachable",
        K::AddrNotAvailable => "address not available",
        K::UnexpectedEof => "the connection closed early",
        K::BrokenPipe => "the connection closed",
        _ => "the connection failed",
    }
}

/// At most `max` characters of an outside party's text, control characters as spaces, so a
/// reply cannot smuggle lines or terminal codes into messages and logs.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(deny_internal: bool, allow: &[&str], deny: &[&str]) -> Policy {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Policy {
            deny_internal,
            allow: Rules::parse(&strings(allow), "egress.allow").unwrap(),
            deny: Rules::parse(&strings(deny), "egress.deny").unwrap(),
        }
    }

    fn refused(policy: &Policy, host: &str, port: Option<u16>) -> bool {
        let ip: IpAddr = host.trim_matches(['[', ']']).parse().unwrap();
        policy.check(host, ip, port, false).is_err()
    }

    #[test]
    fn every_internal_range_is_refused_when_hosted() {
        let hosted = policy(true, &[], &[]);
        for host in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378::1",
            "2001:db8::1",
            "100::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(refused(&hosted, host, Some(80)), "{host} must be refused");
        }
        let local = policy(false, &[], &[]);
        assert!(!refused(&local, "127.0.0.1", Some(80)));
        assert!(!refused(&local, "::ffff:10.0.0.1", None));
    }

    #[test]
    fn public_addresses_pass() {
        let hosted = policy(true, &[], &[]);
        for host in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!refused(&hosted, host, Some(443)), "{host} must pass");
        }
    }

    #[test]
    fn allow_and_deny_lists_with_ports_and_mapped_forms() {
        let p = policy(
            true,
            &[
                "10.1.0.0/16",
                "127.0.0.1:8080",
                "[::1]:9000",
                "llm.internal",
            ],
            &["8.8.4.4", "192.0.2.0/24"],
        );
        assert!(!refused(&p, "10.1.2.3", Some(5432)));
        assert!(
            !refused(&p, "::ffff:10.1.2.3", Some(5432)),
            "mapped form of an allowed address"
        );
        assert!(refused(&p, "10.2.0.1", Some(5432)));
        assert!(!refused(&p, "127.0.0.1", Some(8080)));
        assert!(
            refused(&p, "127.0.0.1", Some(8081)),
            "another port of an address allowed with a port"
        );
        assert!(
            refused(&p, "127.0.0.1", None),
            "a name resolving to it: the port is not known"
        );
        assert!(!refused(&p, "[::1]", Some(9000)));
        assert!(refused(&p, "[::1]", Some(9001)));
        assert!(refused(&p, "8.8.4.4", Some(53)), "denied though public");
        assert!(
            refused(&p, "::ffff:8.8.4.4", Some(53)),
            "mapped form of a denied address"
        );
        // A denied address stays denied in the local edition too.
        let local = policy(false, &[], &["169.254.169.254"]);
        assert!(refused(&local, "169.254.169.254", Some(80)));
        assert!(!refused(&local, "10.0.0.1", Some(80)));
        // Allowed names reach internal addresses; denied addresses even through them.
        let addrs = |list: &[&str]| -> Vec<SocketAddr> {
            list.iter()
                .map(|a| SocketAddr::new(a.parse().unwrap(), 0))
                .collect()
        };
        assert!(p
            .check_all("llm.internal", &addrs(&["10.9.9.9"]), None)
            .is_ok());
        assert!(p
            .check_all("LLM.Internal.", &addrs(&["10.9.9.9"]), None)
            .is_ok());
        assert!(p
            .check_all("llm.internal", &addrs(&["8.8.4.4"]), None)
            .is_err());
        // A name resolving to an address allowed with a port is not allowed by that entry,
        // even when connecting to that very port.
        assert!(p
            .check_all("localhost", &addrs(&["127.0.0.1"]), Some(8080))
            .is_err());
        // A name allowed on one port: other ports are refused before anything resolves.
        let ported = policy(true, &["ollama.internal:11434"], &[]);
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(check_url(&ported, &url("http://ollama.internal:11434/v1")).is_ok());
        let other = check_url(&ported, &url("http://ollama.internal:22/")).unwrap_err();
        assert_eq!(
            other.0,
            "refused by the egress policy: this server does not connect to 'ollama.internal'"
        );
        assert!(ported
            .check_all("ollama.internal", &addrs(&["10.0.0.7"]), Some(11434))
            .is_ok());
        assert!(ported
            .check_all("ollama.internal", &addrs(&["10.0.0.7"]), Some(5432))
            .is_err());
    }

    #[test]
    fn names_resolving_to_several_addresses_pass_only_if_all_do() {
        let p = policy(true, &[], &[]);
        let addrs = |list: &[&str]| -> Vec<SocketAddr> {
            list.iter()
                .map(|a| SocketAddr::new(a.parse().unwrap(), 443))
                .collect()
        };
        assert!(p
            .check_all(
                "example.com",
                &addrs(&["93.184.215.14", "2606:2800::1"]),
                None
            )
            .is_ok());
        let mixed = p
            .check_all(
                "rebind.example",
                &addrs(&["93.184.215.14", "127.0.0.1"]),
                None,
            )
            .unwrap_err();
        assert_eq!(
            mixed.0,
            "refused by the egress policy: this server does not connect to 'rebind.example'"
        );
        assert!(
            !mixed.0.contains("127.0.0.1"),
            "the resolved address is not shown: {mixed}"
        );
        assert!(p.check_all("empty.example", &[], None).is_err());
    }

    #[tokio::test]
    async fn literal_urls_are_checked_before_sending_and_names_when_resolving() {
        let p = Arc::new(policy(true, &[], &[]));
        for url in [
            "http://127.0.0.1:1/v1",
            "http://[::1]/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.1/",
        ] {
            let parsed = reqwest::Url::parse(url).unwrap();
            assert!(check_url(&p, &parsed).is_err(), "{url} must be refused");
        }
        assert!(check_url(&p, &reqwest::Url::parse("http://example.com/").unwrap()).is_ok());
        let refused = p.resolve("localhost", Some(80)).await.unwrap_err();
        assert!(
            refused.to_string().contains("refused by the egress policy"),
            "{refused}"
        );
        let egress = Egress {
            policy: Arc::clone(&p),
            endpoint_policy: Arc::clone(&p),
            endpoints: Arc::default(),
        };
        let err = egress
            .connect_tcp("127.0.0.1", 5432, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Forbidden);
        assert!(egress.check_unix_socket("PostgreSQL").is_err());
        // Through the HTTP client, a name resolving to loopback never connects.
        let client = egress.http_client("test").unwrap();
        let sent = client
            .post("http://localhost:9/v1")
            .unwrap()
            .send()
            .await
            .unwrap_err();
        assert!(
            http_reason(&sent).contains("refused by the egress policy"),
            "{sent:?}"
        );
        assert!(client.post("http://127.0.0.1:9/").is_err());
    }

    #[test]
    fn every_refusal_says_the_same_whatever_the_range_and_however_the_host_is_written() {
        let p = policy(true, &["ollama.internal:11434"], &["8.8.4.4"]);
        let said = |host: &str, ip: &str| {
            p.check(host, ip.parse().unwrap(), Some(80), false)
                .unwrap_err()
                .0
        };
        let expected = |host: &str| {
            format!("refused by the egress policy: this server does not connect to '{host}'")
        };
        for (host, ip) in [
            ("127.0.0.1", "127.0.0.1"),
            ("10.0.0.1", "10.0.0.1"),
            ("169.254.169.254", "169.254.169.254"),
            ("240.0.0.1", "240.0.0.1"),
            ("[::1]", "::1"),
            ("[fe80::1]", "fe80::1"),
            ("8.8.4.4", "8.8.4.4"),
            ("loopback.example", "127.0.0.1"),
            ("private.example", "10.0.0.1"),
            ("metadata.example", "169.254.169.254"),
            ("reserved.example", "240.0.0.1"),
            ("denied.example", "8.8.4.4"),
        ] {
            assert_eq!(said(host, ip), expected(host), "{host} as {ip}");
        }
        let url = reqwest::Url::parse("http://ollama.internal:22/").unwrap();
        assert_eq!(
            check_url(&p, &url).unwrap_err().0,
            expected("ollama.internal")
        );
    }

    #[tokio::test]
    async fn configured_endpoints_are_reachable_at_their_path_prefixes_only() {
        // Bound, never answered: a request let through waits, and times out.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let embed = format!("http://localhost:{port}/embed/v1/");
        let settings = EgressSettings {
            deny_internal: true,
            allow: &[],
            deny: &[],
            configured_urls: ["http://127.0.0.1:11434/v1", &embed],
        };
        let egress = Egress::new(&settings).unwrap();
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://127.0.0.1:11434/v1/chat/completions",
        ] {
            assert!(egress.check_url_text(url).is_ok(), "{url}");
        }
        let refused = |host: &str| {
            format!("refused by the egress policy: this server does not connect to '{host}'")
        };
        for url in [
            "http://127.0.0.1:11434/api/pull",
            "http://127.0.0.1:11434/v1beta/models",
            "http://127.0.0.1:11434/v1/../api/delete",
            "http://127.0.0.1:11434/v1/%2e%2e/api/delete",
            "http://127.0.0.1:11435/v1/chat/completions",
            "https://127.0.0.1:11434/v1/chat/completions",
        ] {
            let err = egress.check_url_text(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Forbidden, "{url}");
            assert_eq!(err.message(), refused("127.0.0.1"), "{url}");
        }
        // Under the prefix, the endpoint's name resolves to loopback and is let through (and
        // waits for an answer that never comes); elsewhere on it, it is refused.
        let client = egress.http_client("test").unwrap();
        let under = client
            .post(&format!("{embed}embeddings"))
            .unwrap()
            .timeout(Duration::from_millis(300))
            .send()
            .await
            .unwrap_err();
        assert!(!http_reason(&under).contains("egress policy"), "{under:?}");
        let elsewhere = client
            .post(&format!("http://localhost:{port}/admin"))
            .unwrap()
            .send()
            .await
            .unwrap_err();
        assert_eq!(http_reason(&elsewhere), refused("localhost"));
        assert!(client.post("http://127.0.0.1:11434/api/pull").is_err());
        // Nor do the endpoints open anything but HTTP to their path.
        let tcp = egress
            .connect_tcp("127.0.0.1", 11434, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(tcp.message(), refused("127.0.0.1"));
    }

    #[test]
    fn entries_that_are_nothing_are_named() {
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "exa mple.com",
            "host.example:99999",
            "1.2.3.4:99999",
        ] {
            let err = Rules::parse(&[bad.to_string()], "egress.allow").unwrap_err();
            assert!(err.message().contains("egress.allow"), "{bad}: {err}");
        }
        let err = Rules::parse_addresses(&["evil.example".to_string()], "egress.deny").unwrap_err();
        assert!(err.message().contains("host name"), "{err}");
    }

    #[test]
    fn excerpts_are_short_and_single_line() {
        assert_eq!(excerpt("a\nb\r\x1b[31mc", 100), "a b  [31mc");
        assert_eq!(excerpt(&"x".repeat(500), 3), "xxx…");
    }

    #[test]
    fn base_urls_must_be_http_with_a_host() {
        assert!(check_http_url("base_url", "http://127.0.0.1:8080/v1").is_ok());
        assert!(check_http_url("base_url", "https://api.openai.com/v1").is_ok());
        for bad in ["ftp://x/v1", "127.0.0.1:8080", "http://", ""] {
            assert!(check_http_url("base_url", bad).is_err(), "{bad}");
        }
    }
}
