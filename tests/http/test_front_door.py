"""The front door: what the server lets in before any route runs. Connections are shared
fairly (a per-address share of http.max_connections, idle connections closed first to make
room, a deadline for a request's first byte, a deadline on writes a client does not read).
Every attack is one a local process could make against a server on 127.0.0.1; each test
checks that others are still served. All traffic goes to 127.0.0.1, some of it from
127.0.0.2 (another loopback address: another client to the per-address limits).
"""

from __future__ import annotations

import socket
import time

import pytest

from hosted import hosted_server, sql
from mlserver import RawConnection, bearer, http_request, sql_request

# Every test here is bounded; a hung server fails its test instead of the run.
pytestmark = pytest.mark.timeout(90)

# The defaults the first test relies on (README, Limits and defences).
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
    hog = [kept_alive(server.port) for _ in range(3)]
    other = kept_alive(server.port, "127.0.0.3")
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
