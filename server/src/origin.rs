//! Who may address the server: a request's `Host` must be one of `http.allowed_hosts`, so a
//! web page whose own name was rebound to this machine (DNS rebinding) is refused, and a
//! request carrying an `Origin` must come from one of `http.allowed_origins`, so a page the
//! user visits cannot make the browser send it requests (not even CORS "simple" ones, which
//! need no preflight). Pages of an allowed origin get the CORS headers that let them read the
//! answers.

use mindlite::Config;

use crate::http::{Request, Response};
use crate::reply::problem;

/// The headers a page of an allowed origin may send (beyond the CORS-safelisted ones).
const ALLOWED_HEADERS: &str =
    "authorization, content-type, x-api-key, mcp-session-id, mcp-protocol-version, last-event-id";

/// How long a browser may reuse a preflight's answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// The allowed hosts and origins, read once from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origins {
    /// Host names (lower case) with the port they are limited to; `None`: any host.
    hosts: Option<Vec<(String, Option<u16>)>>,
    /// Origins (lower case, no trailing slash); `None`: any origin.
    origins: Option<Vec<String>>,
}

impl Origins {
    /// The allow-lists `config` describes (`Config::allowed_hosts`, `http.allowed_origins`);
    /// entries were checked by `Config::validate`, and one that does not parse allows nothing.
    pub fn new(config: &Config) -> Origins {
        let hosts = config.allowed_hosts();
        let origins = &config.http.allowed_origins;
        Origins {
            hosts: (!hosts.iter().any(|h| h == "*"))
                .then(|| hosts.iter().filter_map(|h| host_and_port(h)).collect()),
            origins: (!origins.iter().any(|o| o == "*"))
                .then(|| origins.iter().map(|o| normal_origin(o)).collect()),
        }
    }

    /// Judges `request` by its `Host` and `Origin` headers: `Ok` with the origin to name in
    /// CORS headers when it carries an allowed one, `Ok(None)` when it carries none (not a
    /// browser's cross-origin request), else the 400 or 403 to answer.
    pub fn check(&self, request: &Request) -> Result<Option<String>, Response> {
        let hosts: Vec<&[u8]> = request
            .headers
            .iter()
            .filter(|(name, _)| name == "host")
            .map(|(_, value)| value.as_slice())
            .collect();
        match hosts.as_slice() {
            // No browser omits it; HTTP/1.0 clients may.
            [] => {}
            [host] => self.check_host(host)?,
            _ => return Err(problem(400, "The request has more than one Host header")),
        }
        let Some(origin) = request.headers.iter().find(|(name, _)| name == "origin") else {
            return Ok(None);
        };
        let origin = String::from_utf8_lossy(&origin.1).trim().to_string();
        let allowed = match &self.origins {
            None => true,
            Some(origins) => origins.contains(&normal_origin(&origin)),
        };
        if allowed {
            Ok(Some(origin))
        } else {
            Err(problem(
                403,
                &format!(
                    "Requests from web pages at '{origin}' are refused: that origin is not in http.allowed_origins"
                ),
            ))
        }
    }

    fn check_host(&self, value: &[u8]) -> Result<(), Response> {
        let Some(hosts) = &self.hosts else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(value);
        let allowed = host_and_port(text.trim()).is_some_and(|(name, port)| {
            hosts
                .iter()
                .any(|(allowed, only)| *allowed == name && only.is_none_or(|p| Some(p) == port))
        });
        if allowed {
            Ok(())
        } else {
            Err(problem(
                403,
                &format!(
                    "This server does not answer to the name '{}' (http.allowed_hosts); to serve it under that name, add it there",
                    text.trim()
                ),
            ))
        }
    }
}

/// Adds the headers that let a page of `origin` (an allowed one) read `response`.
pub fn with_cors(response: Response, origin: &str) -> Response {
    response
        .with_header("access-control-allow-origin", origin)
        .with_header("vary", "Origin")
        // An MCP client in a page reads its session id from this header.
        .with_header("access-control-expose-headers", "mcp-session-id")
}

/// The answer to a browser's preflight (`OPTIONS` with `Access-Control-Request-Method`) for a
/// route that takes `methods`: what the actual request may use. The origin is named by
/// [`with_cors`], as on every response to an allowed origin.
pub fn preflight(methods: &[&str]) -> Response {
    Response::no_content()
        .with_header("access-control-allow-methods", methods.join(", "))
        .with_header("access-control-allow-headers", ALLOWED_HEADERS)
        .with_header("access-control-max-age", PREFLIGHT_MAX_AGE)
}

/// Whether `request` is a browser's CORS preflight.
pub fn is_preflight(request: &Request) -> bool {
    request.method == "OPTIONS"
        && request.header("origin").is_some()
        && request.header("access-control-request-method").is_some()
}

/// A `Host` value's name (lower case; an IPv6 address in its brackets) and port, if it is one.
fn host_and_port(value: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = match value.find(']') {
        Some(end) if value.starts_with('[') => value.split_at(end + 1),
        _ => value.split_at(value.find(':').unwrap_or(value.len())),
    };
    let port = match port {
        "" => None,
        _ => Some(port.strip_prefix(':')?.parse().ok()?),
    };
    (!name.is_empty()).then(|| (name.to_ascii_lowercase(), port))
}

/// An origin as compared: lower case, without a trailing slash.
fn normal_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(config: &str) -> Origins {
        let config = Config::parse(config).expect("a test config");
        config.validate().expect("a valid test config");
        Origins::new(&config)
    }

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut raw = String::from("GET /api/status HTTP/1.1\r\n");
        for (name, value) in headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("\r\n");
        Request::parse_for_test(raw.as_bytes())
    }

    fn status(result: Result<Option<String>, Response>) -> u16 {
        match result {
            Ok(_) => 200,
            Err(response) => response.status,
        }
    }

    #[test]
    fn the_local_server_answers_its_own_names_with_any_port() {
        let local = origins("");
        for host in [
            "localhost",
            "LOCALHOST:47334",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:47334",
        ] {
            assert_eq!(
                status(local.check(&request(&[("Host", host)]))),
                200,
                "{host}"
            );
        }
        assert_eq!(status(local.check(&request(&[]))), 200, "no Host at all");
    }

    #[test]
    fn foreign_and_malformed_hosts_are_refused() {
        let local = origins("");
        for host in [
            "attacker.example",
            "attacker.example:47334",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "localhost:notaport",
            "[::1",
            "",
        ] {
            assert_eq!(
                status(local.check(&request(&[("Host", host)]))),
                403,
                "{host}"
            );
        }
        let two = request(&[("Host", "localhost"), ("Host", "attacker.example")]);
        assert_eq!(status(local.check(&two)), 400);
    }

    #[test]
    fn a_listed_host_with_a_port_allows_that_port_only_and_star_allows_any() {
        let listed = origins("[http]\nallowed_hosts = [\"mindlite.lan:8080\"]");
        assert_eq!(
            status(listed.check(&request(&[("Host", "mindlite.lan:8080")]))),
            200
        );
        assert_eq!(
            status(listed.check(&request(&[("Host", "mindlite.lan:9090")]))),
            403
        );
        assert_eq!(
            status(listed.check(&request(&[("Host", "localhost")]))),
            403
        );
        let any = origins("[http]\nallowed_hosts = [\"*\"]");
        assert_eq!(
            status(any.check(&request(&[("Host", "anything.example")]))),
            200
        );
        let hosted = origins("edition = \"hosted\"");
        assert_eq!(
            status(hosted.check(&request(&[("Host", "api.example")]))),
            200
        );
    }

    #[test]
    fn an_origin_must_be_listed_and_a_listed_one_is_named_for_cors() {
        let local = origins("");
        let from_page = request(&[("Host", "localhost"), ("Origin", "https://evil.example")]);
        match local.check(&from_page) {
            Err(response) => assert_eq!(response.status, 403),
            Ok(_) => panic!("a foreign origin must be refused"),
        }
        let null = request(&[("Host", "localhost"), ("Origin", "null")]);
        assert_eq!(status(local.check(&null)), 403);
        let listed = origins("[http]\nallowed_origins = [\"http://localhost:3000/\"]");
        let app = request(&[("Host", "localhost"), ("Origin", "http://LOCALHOST:3000")]);
        assert_eq!(
            listed.check(&app).ok().flatten().as_deref(),
            Some("http://LOCALHOST:3000")
        );
        let any = origins("[http]\nallowed_origins = [\"*\"]");
        assert_eq!(status(any.check(&from_page)), 200);
    }
}
