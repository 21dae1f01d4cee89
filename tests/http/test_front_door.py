"""The front door: what the server lets in before any route runs. Connections are shared
fairly (a per-address share of http.max_connections, idle connections closed first to make
room, a deadline for a request's first byte, a deadline on writes a client does not read);
the local server answers only its own origin (Host in http.allowed_hosts, Origin in
http.allowed_origins, JSON bodies declared as such); and /api/status is no free way to test
credentials. Every attack is one a web page or a local process could make against a server
on 127.0.0.1; each test checks that the attack ran nothing and that others are still served.
All traffic goes to 127.0.0.1, some of it from 127.0.0.2 (another loopback address: another
client to the per-address limits).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import requests

from hosted import PROBLEM, hosted_server, problem, sql
from mlserver import AUTH_CONFIG, RawConnection, Server, bearer, http_request, sql_request

# Every test here is bounded; a hung server fails its test instead of the run.
pytestmark = pytest.mark.timeout(90)

# The defaults the first test relies on (docs/security.md).
MAX_CONNECTIONS = 1024
ADDRESS_SHARE = MAX_CONNECTIONS // 4
FIRST_BYTE_TIMEOUT = 10


# Helpers.

def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


def is_open(sock: socket.socket) -> bool:
    """False once the server has closed `sock` (whatever it sent first is read and dropped).
    Asks without waiting: a socket with a timeout would first wait that long to be readable."""
    timeout = sock.gettimeout()
    sock.settimeout(None)
    try:
        while True:
            if not sock.recv(65536, socket.MSG_DONTWAIT):
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(timeout)


def kept_alive(port: int, source: str = "127.0.0.1") -> RawConnection:
    """A connection that has been answered a ping and now waits for its next request."""
    conn = RawConnection(port, source=source)
    conn.send(http_request("GET", "/api/util/ping", port=port))
    answer = conn.read_response()
    assert answer.status == 200, (answer.status, answer.body)
    return conn


def all_threads_waiting(pid: int) -> bool:
    """Whether every thread of process `pid` is asleep (state S in /proc): none running, ready
    to run, or in the kernel on its way somewhere (R, D)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that has just ended
            continue
        # The state follows the thread's name, which is in parentheses and may hold any.
        if stat.rsplit(")", 1)[1].split()[0] != "S":
            return False
    return True


def wait_until_settled(server: Server) -> None:
    """Waits until the server has nothing left to run: all its threads asleep in two looks
    50 ms apart. The server counts a kept-alive connection idle, the state that lets it be
    closed for a newcomer, only after it has sent the answer (serve_connection in
    server/src/main.rs), so a client that has read the answer can be ahead of it; and a closed
    connection keeps its place until the server has read the close. Nothing the server serves
    tells either, but a connection's task has no wait between the two, so once no thread runs,
    every answered connection is counted idle and every closed one is gone. Two looks because
    one reads the threads one after another: one read asleep may be woken by one read later."""
    looks_asleep = 0

    def settled() -> bool:
        nonlocal looks_asleep
        looks_asleep = looks_asleep + 1 if all_threads_waiting(server.pid) else 0
        return looks_asleep >= 2

    wait_until(settled, 10, "the server to have nothing left to run")


def ping_again(conn: RawConnection, port: int) -> int:
    conn.send(http_request("GET", "/api/util/ping", port=port))
    return conn.read_response().status


def answered_within(port: int, source: str, seconds: float) -> None:
    """A new connection from `source` runs SELECT 1 within `seconds`."""
    started = time.monotonic()
    with RawConnection(port, source=source) as conn:
        conn.send(sql_request("SELECT 1 AS one", port))
        answer = conn.read_response()
    elapsed = time.monotonic() - started
    assert answer.status == 200 and answer.json()["data"] == [[1]], (answer.status, answer.body)
    assert elapsed < seconds, f"a client from {source} waited {elapsed:.2f} s"


def exists(server: Server, table: str) -> bool:
    doc = server.sql(f"SELECT * FROM mindsdb.{table}").json()
    if doc["type"] == "error":
        assert table in doc["error_message"], doc
        return False
    return True


def raw_sql(port: int, query: str, headers: dict[str, str]):
    """POST /api/sql/query with exactly these headers (Host and Content-Type among them)."""
    body = ('{"query": "%s"}' % query).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with RawConnection(port) as conn:
        conn.send(f"POST /api/sql/query HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n"
                  .encode() + body)
        return conn.read_response()


# 1. Connections.

def test_a_thousand_silent_sockets_from_one_address_lock_out_no_one(start_server):
    """1,030 sockets from 127.0.0.1 that send nothing, more than http.max_connections (1,024),
    against a server with default limits: that address keeps at most its share (a quarter,
    256) open, a client from 127.0.0.2 and a new one from 127.0.0.1 are each answered within
    2 s (long before any timeout frees a place), and every silent socket is closed by
    http.first_byte_timeout_secs (10 s) plus 5 s."""
    server = start_server()
    silent = []
    try:
        for _ in range(1030):
            silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        opened = time.monotonic()
        answered_within(server.port, "127.0.0.2", 2.0)
        answered_within(server.port, "127.0.0.1", 2.0)
        time.sleep(0.5)
        still_open = sum(is_open(sock) for sock in silent)
        assert time.monotonic() - opened < FIRST_BYTE_TIMEOUT - 2, "measured before the timeout"
        assert 0 < still_open <= ADDRESS_SHARE, still_open
        wait_until(lambda: not any(is_open(sock) for sock in silent), FIRST_BYTE_TIMEOUT + 5,
                   "every silent socket to be closed")
    finally:
        for sock in silent:
            sock.close()
    answered_within(server.port, "127.0.0.1", 2.0)


def test_a_newcomer_to_a_full_server_takes_the_place_of_the_longest_idle_connection(
        start_server):
    """http.max_connections = 4, 3 per address: three kept-alive connections from 127.0.0.1
    and one from 127.0.0.3 fill the server, all waiting for their next request. A newcomer
    from 127.0.0.2 is served at once; the connection closed for it is the longest-idle one
    of the address holding the most, and the others still answer."""
    server = start_server("[http]\nmax_connections = 4\nmax_connections_per_address = 3\n")
    # Which connection is the longest idle is decided by when the server counted each one
    # idle, which it does a moment after sending the answer the client reads: each must be
    # counted before the next is opened, and the readiness check's connection be gone (else
    # the hog's place, or the newcomer's, may go to another).
    wait_until_settled(server)
    hog = []
    for _ in range(3):
        hog.append(kept_alive(server.port))
        wait_until_settled(server)
    other = kept_alive(server.port, "127.0.0.3")
    wait_until_settled(server)
    try:
        answered_within(server.port, "127.0.0.2", 2.0)
        assert hog[0].closed_by_peer(timeout=2), "the longest idle made room"
        assert [ping_again(conn, server.port) for conn in (hog[1], hog[2], other)] == [200] * 3
    finally:
        for conn in hog + [other]:
            conn.close()


def test_a_silent_connection_is_closed_at_the_first_byte_timeout(start_server):
    """http.first_byte_timeout_secs = 1: a new connection that sends nothing is closed after
    1 s (not before 0.8 s, and within 3 s). A kept-alive connection waits its idle timeout
    (60 s) while the server is quiet, but once half its address's share is open (4 of 8)
    kept-alive ones are closed after 1 s too, until fewer than that are open."""
    server = start_server("[http]\nfirst_byte_timeout_secs = 1\nmax_connections = 8\n")
    with RawConnection(server.port) as silent:
        started = time.monotonic()
        assert silent.closed_by_peer(timeout=5)
        closed_after = time.monotonic() - started
    assert 0.8 <= closed_after < 3, f"closed after {closed_after:.2f} s"

    with kept_alive(server.port) as quiet:
        time.sleep(2.5)
        assert ping_again(quiet, server.port) == 200, "no pressure: it may wait"

    crowd = [kept_alive(server.port) for _ in range(6)]
    try:
        wait_until(lambda: sum(is_open(conn.sock) for conn in crowd) <= 3, 4,
                   "kept-alive connections to be closed under pressure")
        time.sleep(2)
        survivors = [conn for conn in crowd if is_open(conn.sock)]
        assert 1 <= len(survivors) <= 3, len(survivors)
        assert [ping_again(conn, server.port) for conn in survivors] == [200] * len(survivors)
    finally:
        for conn in crowd:
            conn.close()


def test_a_client_that_never_reads_is_cut_off_and_its_statement_stops(start_server):
    """http.write_timeout_secs = 2, a plan of one running statement: mallory streams an
    endless result and stops reading after its head. While its writes stall the statement
    holds her one place (another is refused naming max_running_statements); once no write
    has progressed for 2 s the connection is closed and the statement stopped, so her next
    statement runs, within 15 s of the start (filling the socket buffers takes a moment)."""
    config = ('edition = "hosted"\n[http]\nwrite_timeout_secs = 2\n'
              '[hosted]\ndefault_plan = "tenant"\n'
              '[hosted.plans.tenant]\nmax_running_statements = 1\n')
    server, keys = hosted_server(start_server, config, "mallory")
    mallory = keys["mallory"]
    endless = "SELECT value, 'padding padding padding' AS p FROM generate_series(1, 1000000000)"
    conn = RawConnection(server.port)
    try:
        started = time.monotonic()
        conn.send(sql_request(endless, server.port, headers=bearer(mallory),
                              response_format="jsonlines"))
        status, _headers = conn.read_head()
        assert status == 200
        held = sql(server, mallory, "SELECT 2")
        assert held["type"] == "error" and "max_running_statements" in held["error_message"], held
        wait_until(lambda: sql(server, mallory, "SELECT 1 AS one")["type"] == "table", 15,
                   "the unread statement to be stopped")
        assert time.monotonic() - started < 15
        assert conn.closed_by_peer(timeout=10), "the connection is closed"
    finally:
        conn.close()


# 2. The local server answers only its own origin.

@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", None])
def test_a_sql_body_not_declared_json_gets_415_and_runs_nothing(server, content_type):
    """What a web page can send without a preflight (text/plain, a form) or a body with no
    type at all is refused before it is read, naming application/json; the statement in it
    never runs. The same body as application/json (with a charset) runs."""
    headers = {"Host": f"127.0.0.1:{server.port}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    refused = raw_sql(server.port, "CREATE TABLE mindsdb.planted (a INT)", headers)
    assert refused.status == 415, (refused.status, refused.body)
    assert refused.header("content-type") == PROBLEM
    detail = refused.json()["detail"]
    assert "application/json" in detail and (content_type or "none") in detail, detail
    assert not exists(server, "planted")
    accepted = raw_sql(server.port, "CREATE TABLE mindsdb.planted (a INT)",
                       {**headers, "Content-Type": "application/json; charset=utf-8"})
    assert accepted.status == 200 and accepted.json()["type"] == "ok", accepted.body
    assert exists(server, "planted")


def test_uploads_and_bodiless_requests_need_no_json(server):
    """A raw CSV upload keeps its own type, and DELETE has no body to declare."""
    url = server.url + "/api/files/plain"
    put = requests.put(url, data=b"a,b\n1,2\n", headers={"Content-Type": "text/csv"}, timeout=30)
    assert put.status_code == 200, put.text
    assert requests.delete(url, timeout=30).status_code == 200


@pytest.mark.parametrize("host", [
    "attacker.example:{port}", "attacker.example", "localhost.attacker.example:{port}",
    "127.0.0.1.nip.io:{port}"])
def test_a_request_naming_a_foreign_host_is_refused_and_runs_nothing(server, host):
    """DNS rebinding: a page at attacker.example whose name now resolves to 127.0.0.1 sends
    its requests with its own name as Host. They are refused with 403 naming
    http.allowed_hosts, the statement never runs, and reads are refused too."""
    host = host.format(port=server.port)
    refused = raw_sql(server.port, "CREATE TABLE mindsdb.rebound (a INT)",
                      {"Host": host, "Content-Type": "application/json"})
    assert refused.status == 403, (refused.status, refused.body)
    assert refused.header("content-type") == PROBLEM
    assert "http.allowed_hosts" in refused.json()["detail"], refused.body
    with RawConnection(server.port) as conn:
        conn.send(b"GET /api/projects HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
        assert conn.read_response().status == 403
    assert not exists(server, "rebound")


@pytest.mark.parametrize("host", ["localhost", "localhost:{port}", "127.0.0.1:{port}",
                                  "[::1]:{port}", "LocalHost:{port}"])
def test_the_server_answers_its_own_names(server, host):
    with RawConnection(server.port) as conn:
        conn.send(b"GET /api/util/ping HTTP/1.1\r\nHost: "
                  + host.format(port=server.port).encode() + b"\r\n\r\n")
        assert conn.read_response().json() == {"status": "ok"}


def test_a_server_for_other_machines_answers_the_names_it_is_given(start_server):
    """allowed_hosts replaces the defaults: the listed names are answered (127.0.0.1 is
    listed for the test's readiness check), localhost is not."""
    server = start_server('[http]\nallowed_hosts = ["mindlite.lan", "127.0.0.1"]\n')
    ok = raw_sql(server.port, "SELECT 1 AS one",
                 {"Host": f"mindlite.lan:{server.port}", "Content-Type": "application/json"})
    assert ok.status == 200 and ok.json()["data"] == [[1]], ok.body
    refused = raw_sql(server.port, "SELECT 1 AS one",
                      {"Host": "localhost", "Content-Type": "application/json"})
    assert refused.status == 403, refused.body


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://localhost:3000"])
def test_a_request_from_a_foreign_origin_is_refused_and_runs_nothing(server, origin):
    """A page the user visits makes the browser send a request carrying its Origin (here
    even a JSON one, and a GET): 403 naming http.allowed_origins, which is empty by default,
    and the statement never runs; a preflight from it is refused too."""
    headers = {"Origin": origin}
    refused = requests.post(server.url + "/api/sql/query", headers=headers, timeout=10,
                            json={"query": "CREATE TABLE mindsdb.from_page (a INT)"})
    problem(refused, 403, "http.allowed_origins", origin)
    assert "access-control-allow-origin" not in refused.headers
    read = requests.get(server.url + "/api/projects", headers=headers, timeout=10)
    assert read.status_code == 403, read.text
    preflight = requests.options(server.url + "/api/sql/query", timeout=10, headers={
        **headers, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 403
    assert not exists(server, "from_page")


def test_an_allowed_origin_gets_its_preflight_answered_and_reads_its_results(start_server):
    """http.allowed_origins = ["http://localhost:3000"]: the browser's preflight for a JSON
    POST is answered 204 with the methods and headers allowed; the POST itself runs and its
    answer names the origin (Access-Control-Allow-Origin) so the page can read it. Another
    origin is still refused."""
    app = "http://localhost:3000"
    server = start_server(f'[http]\nallowed_origins = ["{app}"]\n')
    preflight = requests.options(server.url + "/api/sql/query", timeout=10, headers={
        "Origin": app, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == app
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed_headers = preflight.headers["access-control-allow-headers"]
    assert "content-type" in allowed_headers and "authorization" in allowed_headers
    answer = requests.post(server.url + "/api/sql/query", headers={"Origin": app}, timeout=10,
                           json={"query": "CREATE TABLE mindsdb.from_app (a INT)"})
    assert answer.status_code == 200 and answer.json()["type"] == "ok", answer.text
    assert answer.headers["access-control-allow-origin"] == app
    assert "Origin" in answer.headers["vary"]
    assert exists(server, "from_app")
    other = requests.get(server.url + "/api/projects", headers={"Origin": "http://localhost:4000"},
                         timeout=10)
    assert other.status_code == 403


# 3. Credentials on /api/status.

def test_wrong_credentials_on_status_are_throttled_like_failed_logins(start_server):
    """Auth on, http.unauthenticated_per_minute = 5: five status requests with a wrong bearer
    token are answered (unconfirmed); from then on wrong credentials there (bearer or
    X-Api-Key) get 429 with Retry-After naming the limit, so status is no faster a way to test
    keys than a login. Status without credentials still answers, and another address
    (127.0.0.2) is not throttled."""
    server = start_server(AUTH_CONFIG + "[http]\nunauthenticated_per_minute = 5\n")
    status = server.url + "/api/status"
    for i in range(5):
        answer = requests.get(status, headers=bearer(f"pat_wrong{i}"), timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json()["auth"]["confirmed"] is False
    for headers in (bearer("pat_wrong"), {"X-Api-Key": "mlk_wrong"}):
        refused = requests.get(status, headers=headers, timeout=10)
        problem(refused, 429, "http.unauthenticated_per_minute")
        assert 1 <= int(refused.headers["retry-after"]) <= 60, dict(refused.headers)
    assert requests.get(status, timeout=10).status_code == 200
    with RawConnection(server.port, source="127.0.0.2") as conn:
        conn.send(http_request("GET", "/api/status", headers=bearer("pat_wrong"),
                               port=server.port))
        assert conn.read_response().status == 200
