"""HTTP/1.1 on raw sockets: bad bytes, oversized heads and bodies, chunked request bodies,
keep-alive, pipelining, `Connection: close`, `Expect: 100-continue` and a client vanishing in
the middle of a stream. After each, the server still answers a ping on a new connection."""

import json
import socket
import struct
import time

import pytest
import requests

from mlserver import ConnectionClosed, RawConnection, http_request, sql_request

MAX_BODY = 4096
MAX_HEADER = 8192
LIMITED_CONFIG = f"""\
[http]
max_body_bytes = {MAX_BODY}
max_header_bytes = {MAX_HEADER}
"""

SELECT_1 = b'{"type":"table","data":[[1]],"column_names":["1"],"context":{"show_secrets":false,"db":"mindsdb"}}'


@pytest.fixture
def limited(start_server):
    """A server with small body and head limits."""
    return start_server(LIMITED_CONFIG)


def assert_still_serving(server):
    response = requests.get(server.url + "/api/util/ping", timeout=10,
                            headers={"Connection": "close"})
    assert response.json() == {"status": "ok"}
    assert server.running


def response_or_close(conn: RawConnection):
    """The response the server sent before closing, or None if it just closed."""
    try:
        return conn.read_response()
    except ConnectionClosed:
        return None


def assert_problem(response, status):
    assert response is not None, f"expected {status}, the connection was closed without an answer"
    assert response.status == status, (response.status, response.body)
    assert response.header("content-type") == "application/problem+json"
    assert response.json()["detail"]


@pytest.mark.parametrize("garbage", [
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n",
                 id="tls-hello"),
    pytest.param(b"HELLO\r\n\r\n", id="no-request-line"),
    pytest.param(b"\x00" * 64 + b"\r\n\r\n", id="nul-bytes"),
    pytest.param(b"GET / HTTP/9.9\r\n\r\n", id="bad-version"),
    pytest.param(b"GET /api/util/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
                 id="header-without-colon"),
    pytest.param(b"GET /api/util/ping HTTP/1.1\r\nHo st: x\r\n\r\n", id="space-in-header-name"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                 id="content-length-not-a-number"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
                 b"hello!", id="conflicting-content-lengths"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                 id="negative-content-length"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                 id="unsupported-transfer-encoding"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n0\r\n\r\n", id="bad-chunk-size"),
    pytest.param(b"POST /api/sql/query HTTP/1.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
                 id="chunk-longer-than-its-size"),
])
def test_garbage_gets_400_or_a_closed_connection_and_the_server_keeps_serving(server, garbage):
    with RawConnection(server.port) as conn:
        conn.send(garbage)
        response = response_or_close(conn)
        if response is not None:
            assert_problem(response, 400)
            assert conn.closed_by_peer(), "the connection is closed after a malformed request"
    assert_still_serving(server)


def test_request_smuggling_shape_is_refused(server):
    # Both framings at once (RFC 9112 §6.3): refuse rather than guess which one ends the body.
    body = b'{"query":"SELECT 1"}'
    raw = (b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + body)
    with RawConnection(server.port) as conn:
        conn.send(raw)
        response = response_or_close(conn)
        if response is not None:
            assert_problem(response, 400)
    assert_still_serving(server)


def test_head_larger_than_the_limit_is_431(limited):
    with RawConnection(limited.port) as conn:
        conn.send(http_request("GET", "/api/util/ping", headers={"X-Big": "a" * (2 * MAX_HEADER)}))
        assert_problem(conn.read_response(), 431)
    assert_still_serving(limited)


def test_head_that_never_ends_is_431_once_past_the_limit(limited):
    with RawConnection(limited.port) as conn:
        conn.send(b"GET /api/util/ping HTTP/1.1\r\nX-Endless: ")
        try:
            for _ in range(4 * MAX_HEADER // 1024):
                conn.send(b"a" * 1024)
                time.sleep(0.002)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert_problem(response_or_close(conn), 431)
    assert_still_serving(limited)


def test_default_head_limit_is_64_kib(server):
    with RawConnection(server.port) as conn:
        conn.send(http_request("GET", "/api/util/ping", headers={"X-Big": "a" * 70_000}))
        assert_problem(conn.read_response(), 431)
    with RawConnection(server.port) as conn:
        conn.send(http_request("GET", "/api/util/ping", headers={"X-Big": "a" * 60_000}))
        assert conn.read_response().json() == {"status": "ok"}


def test_content_length_over_the_limit_is_413_before_the_body_is_sent(limited):
    with RawConnection(limited.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1))
        assert_problem(conn.read_response(), 413)
    assert_still_serving(limited)


def padded_select_1(size: int) -> bytes:
    body = b'{"query":"SELECT 1"}'
    return body[:-1] + b" " * (size - len(body)) + b"}"


def test_body_of_exactly_the_limit_is_accepted(limited):
    body = padded_select_1(MAX_BODY)
    assert len(body) == MAX_BODY
    with RawConnection(limited.port) as conn:
        conn.send(http_request("POST", "/api/sql/query", body))
        response = conn.read_response()
    assert (response.status, response.body) == (200, SELECT_1)


def test_body_over_the_limit_is_413_even_when_sent_whole(limited):
    with RawConnection(limited.port) as conn:
        conn.send(http_request("POST", "/api/sql/query", padded_select_1(MAX_BODY + 100)))
        assert_problem(response_or_close(conn), 413)
    assert_still_serving(limited)


def chunk(data: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), extension, data)


def test_chunked_body_growing_past_the_limit_is_413(limited):
    with RawConnection(limited.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(4 * MAX_BODY // 1000):
            try:
                conn.send(chunk(b" " * 1000))
            except (BrokenPipeError, ConnectionResetError):
                break
        response = response_or_close(conn)
        assert_problem(response, 413)
    assert_still_serving(limited)


def test_chunked_request_body_is_decoded(server):
    query = json.dumps({"query": "SELECT 'héllo wörld' AS greeting"}, ensure_ascii=False).encode()
    split = query.index("é".encode()) + 1  # inside the two bytes of é
    pieces = [query[:5], query[5:split], query[split:]]
    raw = (b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"
           + chunk(pieces[0]) + chunk(pieces[1], b";note=split") + chunk(pieces[2])
           + b"0\r\nX-Trailer: ignored\r\n\r\n")
    with RawConnection(server.port) as conn:
        conn.send(raw)
        response = conn.read_response()
        assert response.status == 200
        assert response.json()["data"] == [["héllo wörld"]]
        # The connection stays usable after a chunked body.
        conn.send(http_request("GET", "/api/util/ping"))
        assert conn.read_response().json() == {"status": "ok"}


def test_chunked_body_sent_a_byte_at_a_time_is_decoded(server):
    body = b'{"query":"SELECT 41 + 1 AS answer"}'
    raw = b"".join(chunk(body[i:i + 1]) for i in range(len(body))) + b"0\r\n\r\n"
    with RawConnection(server.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(raw), 7):
            conn.send(raw[i:i + 7])
            time.sleep(0.001)
        assert conn.read_response().json()["data"] == [[42]]


def test_three_requests_on_one_kept_alive_connection(server):
    with RawConnection(server.port) as conn:
        conn.send(http_request("GET", "/api/util/ping"))
        first = conn.read_response()
        conn.send(sql_request("SELECT 1", server.port, response_format="jsonlines"))
        second = conn.read_response()
        conn.send(sql_request("SELECT 1", server.port))
        third = conn.read_response()
    assert first.json() == {"status": "ok"}
    assert (second.chunked, second.body) == (True, b'{"type":"table","column_names":["1"]}\n[[1]]\n')
    assert (third.chunked, third.body) == (False, SELECT_1)
    for response in (first, second, third):
        assert response.status == 200
        assert (response.header("connection") or "").lower() != "close"


def test_pipelined_requests_are_answered_in_order(server):
    with RawConnection(server.port) as conn:
        conn.send(sql_request("SELECT 1", server.port, response_format="sse")
                  + http_request("GET", "/api/nosuch")
                  + sql_request("SELECT 2 AS two", server.port)
                  + http_request("GET", "/api/util/ping"))
        responses = [conn.read_response() for _ in range(4)]
    assert responses[0].body == b'data: {"type":"table","column_names":["1"]}\n\ndata: [[1]]\n\n'
    assert responses[1].status == 404
    assert responses[2].json()["data"] == [[2]]
    assert responses[3].json() == {"status": "ok"}


def test_connection_close_is_honoured(server):
    with RawConnection(server.port) as conn:
        conn.send(http_request("GET", "/api/util/ping", headers={"Connection": "close"}))
        response = conn.read_response()
        assert response.json() == {"status": "ok"}
        assert (response.header("connection") or "").lower() == "close"
        assert conn.closed_by_peer(), "the server closes after answering Connection: close"


def test_connection_close_after_a_stream(server):
    with RawConnection(server.port) as conn:
        conn.send(sql_request("SELECT 1", server.port, headers={"Connection": "close"},
                              response_format="jsonlines"))
        assert conn.read_response().body == b'{"type":"table","column_names":["1"]}\n[[1]]\n'
        assert conn.closed_by_peer()


def test_http_1_0_request_is_answered_and_closed(server):
    with RawConnection(server.port) as conn:
        conn.send(b"GET /api/util/ping HTTP/1.0\r\n\r\n")
        head = conn.read_until(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0]
        assert conn.closed_by_peer(), "HTTP/1.0 without keep-alive closes after the response"


def test_http_1_0_stream_is_not_sent_chunked(server):
    # RFC 9112 §6.1: no Transfer-Encoding in a response to an HTTP/1.0 request; the end of the
    # body is the end of the connection instead.
    body = json.dumps({"query": "SELECT 1", "response_format": "jsonlines"}).encode()
    with RawConnection(server.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.0\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        head = conn.read_until(b"\r\n\r\n").lower()
        assert b" 200 " in head.split(b"\r\n")[0], head
        assert b"transfer-encoding" not in head, head
        assert conn.read_to_eof() == b'{"type":"table","column_names":["1"]}\n[[1]]\n'


def test_request_line_longer_than_the_head_limit_is_431(limited):
    with RawConnection(limited.port) as conn:
        conn.send(http_request("GET", "/api/projects/" + "p" * (2 * MAX_HEADER)))
        response = conn.read_response()
    assert response.status in (414, 431), response.status
    assert_still_serving(limited)


def test_expect_100_continue_gets_100_before_the_body(server):
    body = b'{"query":"SELECT 1"}'
    with RawConnection(server.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = conn.read_response()
        assert interim.status == 100
        conn.send(body)
        final = conn.read_response()
    assert (final.status, final.body) == (200, SELECT_1)


def test_expect_100_continue_with_an_oversized_body_is_413_without_100(limited):
    with RawConnection(limited.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (10 * MAX_BODY))
        assert_problem(conn.read_response(), 413)
    assert_still_serving(limited)


def test_idle_half_sent_request_does_not_block_other_clients(server):
    with RawConnection(server.port) as stalled:
        stalled.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        for _ in range(3):
            assert_still_serving(server)
        assert server.sql_ok("SELECT 1")["data"] == [[1]]


def test_client_vanishing_mid_stream_leaves_the_server_serving(server):
    for reset in (False, True):
        conn = RawConnection(server.port)
        conn.send(sql_request("SELECT value AS id, 'padding padding' AS p "
                              "FROM generate_series(1, 3000000)", server.port,
                              response_format="jsonlines"))
        status, _headers = conn.read_head()
        assert status == 200
        received = len(conn.buffer)
        while received < 256 * 1024:
            piece = conn.sock.recv(65536)
            assert piece, "the server ended the stream early"
            received += len(piece)
        if reset:
            # SO_LINGER 0: the close sends a reset instead of a FIN.
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        assert_still_serving(server)
    # The abandoned queries are dropped, not left running: a full query still answers promptly.
    started = time.monotonic()
    response = server.sql("SELECT count(*) FROM generate_series(1, 100000)")
    assert response.json()["data"] == [[100000]]
    assert time.monotonic() - started < 10


def test_default_body_limit_is_64_mib(server):
    with RawConnection(server.port) as conn:
        conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (64 * 1024 * 1024 + 1))
        assert_problem(conn.read_response(), 413)
    assert_still_serving(server)


def test_idle_connection_is_closed_after_the_idle_timeout(start_server):
    server = start_server("[http]\nidle_timeout_secs = 1\n")
    with RawConnection(server.port) as idle, RawConnection(server.port) as half:
        half.send(b"GET /api/util/ping HTTP/1.1\r\n")
        started = time.monotonic()
        assert idle.closed_by_peer(timeout=10), "an idle connection is closed"
        assert half.closed_by_peer(timeout=10), "a request that stops halfway is dropped"
        assert time.monotonic() - started < 8
    assert_still_serving(server)


def test_sigterm_does_not_wait_for_idle_keep_alive_connections(server):
    with RawConnection(server.port) as idle:
        idle.send(http_request("GET", "/api/util/ping"))
        assert idle.read_response().status == 200
        started = time.monotonic()
        server.send_signal()
        assert server.wait_exit() == 0
        assert time.monotonic() - started < 5
        assert idle.closed_by_peer(timeout=1)


def test_sigterm_does_not_wait_for_a_client_stalled_mid_request(server):
    # A client that sent half a request and went quiet is not work in flight: shutdown must not
    # wait for it (here the idle timeout is the default 60 s).
    with RawConnection(server.port) as stalled:
        stalled.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        time.sleep(0.2)
        started = time.monotonic()
        server.send_signal()
        assert server.wait_exit() == 0
        assert time.monotonic() - started < 5
