"""The hostile tenant: one hosted server where mallory tries every way a tenant can hurt the
others (a provider that crashes its stream or floods its reply, bodies and heads that never
finish, a 50 MB body behind a bad key, runaway and recursive queries with and without a client,
a long CREATE TABLE AS, a Parquet decompression bomb, hundreds of idle connections, SSRF through
every outbound path, callback, logout and statement floods, metered model calls, an oversized
PostgreSQL row) while alice keeps working. Each attack must end in a clear 4xx or SQL error
naming the limit that stopped it, and alice's requests must still succeed, promptly, afterwards.

The shared server has small limits (below) and an egress allow-list of exactly two entries,
the fake LLM's and PostgreSQL's `127.0.0.1:PORT`: 127.0.0.1 on any other port, a name that
resolves to it, and every internal range are refused before any connection is made, so no
refused target (169.254.169.254, 10.0.0.1, ...) is ever contacted. Tests that need other limits
(max_connections, the body budget) or a server of their own (a data file nothing else writes
to, CPU time nothing else spends) start a small one. All traffic goes to 127.0.0.1 (the logout
flood comes from 127.0.0.2, still loopback, to show that its rate is per client address).

PostgreSQL is the one in PGTEST_URL (started by the test command); the tests that need it are
skipped without it.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from requests.adapters import HTTPAdapter

from fake_llm import FakeLLM, echo, huge, raw, text, tool_call, tool_calls
from hosted import PROBLEM, TIMESTAMP, call, hosted_server, problem, sql, sql_ok
from mlserver import (ConnectionClosed, RawConnection, RawResponse, Server, ServerFactory,
                      bearer, http_request, sql_request)

# Every test here is bounded; a hung server fails its test instead of the run.
pytestmark = pytest.mark.timeout(60)

PG_URL = os.environ.get("PGTEST_URL")
if PG_URL is None and os.environ.get("CI") == "true":
    raise RuntimeError("PGTEST_URL is not set: scripts/test.sh starts PostgreSQL for these tests")
needs_postgres = pytest.mark.skipif(PG_URL is None, reason="PGTEST_URL is not set")

# The shared server's limits.
STATEMENT_TIMEOUT = 5
HEAD_TIMEOUT = 2
BODY_TIMEOUT = 3
UNAUTHENTICATED_PER_MINUTE = 30
MAX_REPLY_KB = 64
MAX_TOOL_CALLS = 8
MAX_MESSAGE_MB = 4
MAX_DECODED_MB = 64
MAX_ROWS = 100_000
MAX_DOCUMENT_MB = 8
MAX_CALLBACKS = 20
MAX_RUNNING_STATEMENTS = 4
MODEL_CALLS = 50
WINDOW_SECS = 3600

CALLBACKS = "/cloud/callback/model_status"
AGENTS = "/api/projects/mindsdb/agents"
REFUSED = "refused by the egress policy"
# Never ends: each round adds a row. Only a time limit (or a client that leaves) stops it.
RUNAWAY = "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def pg_port() -> int | None:
    return urlparse(PG_URL).port if PG_URL else None


def arena_config(llm: FakeLLM) -> str:
    allow = [f"127.0.0.1:{llm.port}"] + ([f"127.0.0.1:{pg_port()}"] if PG_URL else [])
    return f"""\
edition = "hosted"

[egress]
# Only these two services, by address and port: nothing else on this machine is reachable.
allow = {json.dumps(allow)}

[query]
statement_timeout_secs = {STATEMENT_TIMEOUT}
max_document_mb = {MAX_DOCUMENT_MB}

[http]
head_timeout_secs = {HEAD_TIMEOUT}
body_timeout_secs = {BODY_TIMEOUT}
unauthenticated_per_minute = {UNAUTHENTICATED_PER_MINUTE}

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"
timeout_secs = 5
max_reply_kb = {MAX_REPLY_KB}
max_tool_calls = {MAX_TOOL_CALLS}

[agents]
max_steps = 4
sql_timeout_secs = 10
sample_rows = 3

[datasources]
max_message_mb = {MAX_MESSAGE_MB}

[files]
max_rows = {MAX_ROWS}
max_decoded_mb = {MAX_DECODED_MB}

[hosted]
default_plan = "tenant"

[hosted.plans.tenant]
max_minds = 10
max_datasources = 10
questions_per_window = 1000
window_secs = {WINDOW_SECS}
callbacks = true
model_calls_per_window = {MODEL_CALLS}
max_running_statements = {MAX_RUNNING_STATEMENTS}
max_running_trainings = 2
max_callbacks = {MAX_CALLBACKS}
max_pending_deliveries = 100
"""


# The arena: one server, two tenants, one fake provider, for the whole module.

@dataclass
class Arena:
    server: Server
    alice: str
    mallory: str
    llm: FakeLLM
    # What alice inserted into mindsdb.ledger, in order: the table must hold exactly this.
    alice_rows: list[int] = field(default_factory=list)
    # Names of mallory's objects whose creation was refused: none may exist afterwards.
    refused: dict[str, set[str]] = field(default_factory=lambda: {
        "agents": set(), "models": set(), "databases": set(), "files": set(), "tables": set()})
    numbers: itertools.count = field(default_factory=lambda: itertools.count(1))


@pytest.fixture(scope="module")
def llm():
    with FakeLLM() as fake:
        yield fake


@pytest.fixture(scope="module")
def arena_servers(server_bin: Path, tmp_path_factory) -> ServerFactory:
    """The module's servers, stopped cleanly (exit 0) after its last test; their logs are
    printed for any test that fails (it holds this fixture through `arena`)."""
    factory = ServerFactory(server_bin, tmp_path_factory.mktemp("hostile"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def arena(arena_servers: ServerFactory, llm: FakeLLM) -> Arena:
    server, keys = hosted_server(arena_servers, arena_config(llm), "alice", "mallory")
    sql_ok(server, keys["alice"], "CREATE TABLE mindsdb.ledger (n INT, note VARCHAR)")
    return Arena(server, keys["alice"], keys["mallory"], llm)


@pytest.fixture(autouse=True)
def fresh_script(llm: FakeLLM):
    """Each test starts with the shared fake's script empty and its default fallback."""
    llm.reset()
    yield
    llm.reset()


# Helpers.

def alice_still_works(arena: Arena, within: float = 2.0) -> None:
    """Alice inserts a row into her ledger and reads it back, the two within `within` seconds."""
    n = next(arena.numbers)
    started = time.monotonic()
    sql_ok(arena.server, arena.alice, f"INSERT INTO mindsdb.ledger VALUES ({n}, 'row {n}')")
    arena.alice_rows.append(n)
    got = sql_ok(arena.server, arena.alice, f"SELECT note FROM mindsdb.ledger WHERE n = {n}")
    assert got["data"] == [[f"row {n}"]], got
    elapsed = time.monotonic() - started
    assert elapsed < within, f"alice's insert and read took {elapsed:.2f} s"


def sql_error(server: Server, key: str, query: str, *mentions: str, **fields) -> str:
    """A statement that fails (HTTP 200, `type: error`) with a message naming `mentions`."""
    response = server.sql(query, token=key, **fields)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["type"] == "error", f"{query[:80]} should fail: {doc}"
    for word in mentions:
        assert word in doc["error_message"], f"error should mention {word!r}: {doc}"
    return doc["error_message"]


def column(server: Server, key: str, query: str) -> list:
    return [row[0] for row in sql_ok(server, key, query)["data"]]


def limits(server: Server, key: str) -> dict:
    response = call(server, "GET", "/limits/", key)
    assert response.status_code == 200, response.text
    return response.json()


def sse_events(response: requests.Response) -> list[dict]:
    """The JSON of each `data: <json>` frame of an agent's stream."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream"), dict(response.headers)
    frames = response.content.decode().split("\n\n")
    assert frames[-1] == "", f"the stream must end with a complete frame: {frames[-1][-200:]!r}"
    return [json.loads(f[len("data: "):]) for f in frames[:-1]]


def ask_agent(server: Server, key: str, agent: str, question: str, stream: bool = False):
    path = f"{AGENTS}/{agent}/completions" + ("/stream" if stream else "")
    return call(server, "POST", path, key, {"messages": [{"role": "user", "content": question}]})


def create_agent(server: Server, key: str, name: str, base_url: str | None = None):
    agent = {"name": name}
    if base_url is not None:
        agent["model"] = {"provider": "openai", "model_name": "m", "api_key": "k",
                          "base_url": base_url}
    return call(server, "POST", AGENTS, key, {"agent": agent})


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the whole process (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


def wait_model(server: Server, key: str, name: str, status: str = "complete") -> None:
    def reached() -> bool:
        rows = sql_ok(server, key, "SELECT name, status FROM mindsdb.models")["data"]
        return [name, status] in rows
    wait_until(reached, 10, f"model {name} to be {status}")


def create_llm_model(server: Server, key: str, name: str, **using: str) -> None:
    """An LLM-backed model (complete at once: the provider is asked only to predict)."""
    extra = "".join(f", {k} = '{v}'" for k, v in using.items())
    sql_ok(server, key, f"CREATE MODEL mindsdb.{name} PREDICT answer USING engine = 'openai', "
                        f"prompt_template = 'say {{{{q}}}}'{extra}")
    wait_model(server, key, name)


def assert_408(response: RawResponse | None, config_key: str) -> None:
    assert response is not None, "the connection was closed without a 408"
    assert response.status == 408, (response.status, response.body)
    assert response.header("content-type") == PROBLEM, response.headers
    assert config_key in response.json()["detail"], response.body


def pg_parameters(host: str = "127.0.0.1", port: int | None = None) -> dict:
    url = urlparse(PG_URL) if PG_URL else None
    return {"host": host, "port": port or (url.port if url else 5432),
            "database": url.path.lstrip("/") if url else "postgres",
            "user": url.username if url else "mindlite", "password": "pw-not-checked-by-trust"}


class SourceAddress(HTTPAdapter):
    """Connections from another loopback address (127.0.0.2): another client, as the
    server's per-address limits see it."""

    def __init__(self, address: str):
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def session_from(address: str) -> requests.Session:
    session = requests.Session()
    session.mount("http://", SourceAddress(address))
    return session


# 1. A hostile model provider.

def test_a_provider_that_crashes_its_stream_or_floods_its_reply_fails_the_question_by_name(arena):
    """Mallory's agent asks the fake provider, which streams a tool call with index
    4,000,000,000,000 (a list grown to it would exhaust memory), makes more tool calls than
    llm.max_tool_calls, or sends a 50 MB reply: each question fails at once naming the limit
    (502 plain, an error event then `end` streamed), no more than llm.max_reply_kb of text is
    passed on, and the questions stay counted (the provider did answer). Alice's agent then
    answers normally."""
    server, mallory, llm = arena.server, arena.mallory, arena.llm
    made = create_agent(server, mallory, "evil_provider", llm.base_url)
    assert made.status_code == 201, made.text
    asked_before = limits(server, mallory)["questions"]["used"]
    crash = b'data: {"choices":[{"delta":{"tool_calls":[{"index":4000000000000}]}}]}\n\n'

    llm.script(raw(200, "text/event-stream; charset=utf-8", [crash, b"data: [DONE]\n\n"]))
    started = time.monotonic()
    events = sse_events(ask_agent(server, mallory, "evil_provider", "crash", stream=True))
    assert time.monotonic() - started < 5
    assert events[-1] == {"type": "end"}, events
    errors = [e["error"] for e in events if "error" in e]
    assert errors and "llm.max_tool_calls" in errors[0], events

    llm.script(tool_calls(*[tool_call("sql_query", {"query": "SELECT 1"})] * (MAX_TOOL_CALLS + 1)))
    problem(ask_agent(server, mallory, "evil_provider", "many calls"), 502, "llm.max_tool_calls")

    llm.script(huge(50_000_000))
    started = time.monotonic()
    problem(ask_agent(server, mallory, "evil_provider", "flood"), 502, "llm.max_reply_kb")
    assert time.monotonic() - started < 5

    llm.script(huge(50_000_000))
    events = sse_events(ask_agent(server, mallory, "evil_provider", "flood", stream=True))
    assert events[-1] == {"type": "end"}, events[-3:]
    errors = [e["error"] for e in events if "error" in e]
    assert errors and "llm.max_reply_kb" in errors[0], [e for e in events if "text" not in e]
    passed_on = sum(len(e.get("text") or "") for e in events)
    assert passed_on <= MAX_REPLY_KB * 1024, f"{passed_on} characters of the flood passed on"

    assert limits(server, mallory)["questions"]["used"] == asked_before + 4, \
        "a question the provider answered stays counted, however it failed"

    made = create_agent(server, arena.alice, "helper")
    assert made.status_code == 201, made.text
    llm.script(text("All is well."))
    answered = ask_agent(server, arena.alice, "helper", "How are things?")
    assert answered.status_code == 200, answered.text
    assert answered.json()["message"]["content"] == "All is well."
    alice_still_works(arena)


# 2. Bodies and heads that never finish.

def trickle(conn: RawConnection, data: bytes, every: float, stop: threading.Event) -> None:
    """Sends `data` a byte at a time, `every` seconds apart, until done, stopped or cut off."""
    for byte in data:
        if stop.wait(every):
            return
        try:
            conn.sock.sendall(bytes([byte]))
        except OSError:
            return


def slow_request(port: int, sent_at_once: bytes, trickled: bytes,
                 every: float) -> tuple[RawResponse | None, float, float | None]:
    """Sends `sent_at_once`, then `trickled` byte by byte; returns the response the server
    sent, seconds until it came, and seconds until the connection was closed (None if not
    within 5 s more)."""
    with RawConnection(port, timeout=15) as conn:
        started = time.monotonic()
        conn.send(sent_at_once)
        stop = threading.Event()
        sender = threading.Thread(target=trickle, args=(conn, trickled, every, stop))
        sender.start()
        try:
            try:
                response = conn.read_response()
            except ConnectionClosed:
                return None, time.monotonic() - started, time.monotonic() - started
            answered = time.monotonic() - started
            stop.set()
            closed = time.monotonic() - started if conn.closed_by_peer(timeout=5) else None
            return response, answered, closed
        finally:
            stop.set()
            sender.join()


def test_bodies_and_heads_that_never_finish_get_408_and_lose_their_connection(arena):
    """At once: a body announced as 1,000 bytes sent one byte every 0.2 s, a chunked body
    whose last chunk never comes (both: 408 naming http.body_timeout_secs after 3 s), and a
    head sent one byte every 0.1 s (slowloris: 408 naming http.head_timeout_secs after 2 s);
    each connection is then closed. Alice's requests meanwhile are served at once."""
    server, port = arena.server, arena.server.port
    auth = f"Authorization: Bearer {arena.mallory}\r\n".encode()
    trickled_body = (b"POST /api/sql/query HTTP/1.1\r\nHost: x\r\n" + auth
                     + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    unfinished_chunks = (b"POST /api/sql/query HTTP/1.1\r\nHost: x\r\n" + auth
                         + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b'9\r\n{"query":\r\n')
    slow_head = (b"POST /api/sql/query HTTP/1.1\r\nHost: x\r\n" + auth
                 + b"X-Padding: " + b"a" * 200 + b"\r\n\r\n")
    with ThreadPoolExecutor(max_workers=3) as pool:
        body = pool.submit(slow_request, port, trickled_body, b" " * 1000, 0.2)
        chunks = pool.submit(slow_request, port, unfinished_chunks, b"", 0.2)
        head = pool.submit(slow_request, port, b"", slow_head, 0.1)
        time.sleep(0.5)
        alice_still_works(arena)
        results = {"body": body.result(), "chunks": chunks.result(), "head": head.result()}

    for name, config_key, limit in (("body", "http.body_timeout_secs", BODY_TIMEOUT),
                                    ("chunks", "http.body_timeout_secs", BODY_TIMEOUT),
                                    ("head", "http.head_timeout_secs", HEAD_TIMEOUT)):
        response, answered, closed = results[name]
        assert_408(response, config_key)
        assert limit - 0.2 <= answered <= limit + 1.5, f"{name}: 408 after {answered:.2f} s"
        assert closed is not None and closed <= limit + 3, f"{name}: closed after {closed} s"
    alice_still_works(arena)


# 3. Credentials before the body.

def test_bad_credentials_get_401_before_a_50_mb_body_is_sent(arena):
    """A request with an unknown key (or none) announcing a 50 MB body is answered 401 from
    its head alone, at once, without a byte of the body sent; the connection is then closed
    (the body was never read, so it cannot carry another request)."""
    for credentials in ("Authorization: Bearer mlk_not-a-key\r\n", ""):
        with RawConnection(arena.server.port, timeout=10) as conn:
            started = time.monotonic()
            conn.send(b"POST /api/sql/query HTTP/1.1\r\nHost: x\r\n" + credentials.encode()
                      + b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n")
            response = conn.read_response()
            assert time.monotonic() - started < 2
            assert response.status == 401, (response.status, response.body)
            assert response.header("content-type") == PROBLEM
            assert conn.closed_by_peer(timeout=5), "the unread body ends the connection"
    alice_still_works(arena)


# 4. Runaway queries.

def test_a_runaway_recursive_query_is_stopped_at_its_time_limit(arena):
    """An endless WITH RECURSIVE with its client waiting stops after
    query.statement_timeout_secs (5 s) with an error that says so; a request's `timeout`
    (1 s) lowers the limit. Alice's requests meanwhile are answered at once."""
    server, mallory = arena.server, arena.mallory

    def timed(query: str, **fields) -> tuple[str, float]:
        started = time.monotonic()
        message = sql_error(server, mallory, query, "its time limit", **fields)
        return message, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=2) as pool:
        configured = pool.submit(timed, RUNAWAY)
        lowered = pool.submit(timed, RUNAWAY, timeout=1)
        message, elapsed = lowered.result()
        assert "after running 1 s" in message and "'timeout'" in message, message
        assert 0.9 <= elapsed < 3, elapsed
        alice_still_works(arena)
        message, elapsed = configured.result()
    assert f"after running {STATEMENT_TIMEOUT} s" in message, message
    assert "query.statement_timeout_secs" in message, message
    assert STATEMENT_TIMEOUT - 0.1 <= elapsed < STATEMENT_TIMEOUT + 3, elapsed
    alice_still_works(arena)


def test_writes_over_a_runaway_query_stop_at_the_time_limit_and_leave_nothing(start_server):
    """CREATE TABLE AS and INSERT ... SELECT over the endless query, each with a 1 s
    `timeout`: both fail naming the time limit, no table is made and no row written, and the
    rows they were computing stop being computed: the server's CPU time stops growing. (On a
    server of its own: it measures that server's CPU.)"""
    config = f'edition = "hosted"\n[query]\nstatement_timeout_secs = {STATEMENT_TIMEOUT}\n'
    server, keys = hosted_server(start_server, config, "mallory")
    mallory = keys["mallory"]
    sql_ok(server, mallory, "CREATE TABLE mindsdb.target (n BIGINT)")
    for statement in (f"CREATE TABLE mindsdb.half_table AS {RUNAWAY}",
                      f"INSERT INTO mindsdb.target {RUNAWAY}"):
        started = time.monotonic()
        message = sql_error(server, mallory, statement, "its time limit", timeout=1)
        assert "after running 1 s" in message, message
        assert time.monotonic() - started < 3
    assert column(server, mallory, "SHOW TABLES FROM mindsdb") == ["models", "target"]
    assert sql_ok(server, mallory, "SELECT count(*) FROM mindsdb.target")["data"] == [[0]]
    time.sleep(1.0)
    settled = cpu_seconds(server.pid)
    time.sleep(1.5)
    busy = cpu_seconds(server.pid) - settled
    assert busy < 0.15, (f"the server used {busy:.2f} s of CPU in 1.5 s after both statements "
                         "were stopped: their rows are still being computed")


def test_a_runaway_query_whose_client_left_stops_using_the_cpu(arena):
    """The same endless query from a raw socket closed after a moment: the server's CPU time
    (/proc/<pid>/stat) grows while it runs and stops growing within a second of the close,
    long before the 5 s limit; the log line says 499 (client gone)."""
    server = arena.server
    conn = RawConnection(server.port)
    conn.send(sql_request(RUNAWAY, server.port, headers=bearer(arena.mallory)))
    started = time.monotonic()
    time.sleep(0.2)
    before = cpu_seconds(server.pid)
    time.sleep(1.0)
    busy = cpu_seconds(server.pid) - before
    assert busy > 0.1, f"the query should be running: {busy:.2f} s of CPU in 1 s"
    conn.close()
    time.sleep(1.0)
    settled = cpu_seconds(server.pid)
    time.sleep(1.5)
    idle = cpu_seconds(server.pid) - settled
    assert time.monotonic() - started < STATEMENT_TIMEOUT, "measured before the time limit"
    assert idle < 0.15, f"the server used {idle:.2f} s of CPU in 1.5 s after the client left"
    wait_until(lambda: any(" 499 " in line and line.endswith("(client gone)")
                           for line in server.log_text().splitlines()), 5,
               "the log line of the abandoned statement")
    alice_still_works(arena)


def test_a_result_too_large_for_one_document_must_be_streamed(arena):
    """A 10 MB result as one JSON document is refused naming query.max_document_mb (8); the
    same query as jsonlines streams every row."""
    query = "SELECT value, repeat('x', 1000) AS pad FROM generate_series(1, 10000)"
    sql_error(arena.server, arena.mallory, query, "query.max_document_mb", "jsonlines")
    streamed = requests.post(arena.server.url + "/api/sql/query", headers=bearer(arena.mallory),
                             json={"query": query, "response_format": "jsonlines"}, timeout=30)
    assert streamed.status_code == 200, streamed.text[:300]
    lines = streamed.content.splitlines()
    assert json.loads(lines[0]) == {"type": "table", "column_names": ["value", "pad"]}
    assert sum(len(json.loads(line)) for line in lines[1:]) == 10_000
    alice_still_works(arena)


# 5. Long writes.

def test_a_long_create_table_as_does_not_hold_up_another_tenants_inserts(arena):
    """Mallory's CREATE TABLE AS over 3 million generated rows with string work (a second or
    more of computing) runs while alice's small INSERTs each finish in well under 2 s: the
    rows are computed before the single writer lock is taken. Afterwards both tables are
    complete."""
    server = arena.server
    ctas = ("CREATE TABLE mindsdb.mallory_ctas AS SELECT value % 1000 AS k, count(*) AS n, "
            "max(md5(CAST(value AS VARCHAR))) AS h FROM generate_series(1, 3000000) "
            "GROUP BY value % 1000")
    during = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        started = time.monotonic()
        running = pool.submit(sql, server, arena.mallory, ctas)
        time.sleep(0.2)
        while not running.done():
            n = next(arena.numbers)
            began = time.monotonic()
            sql_ok(server, arena.alice, f"INSERT INTO mindsdb.ledger VALUES ({n}, 'row {n}')")
            arena.alice_rows.append(n)
            if not running.done():
                during.append(time.monotonic() - began)
            time.sleep(0.05)
        done = running.result()
        ctas_secs = time.monotonic() - started
    assert done["type"] == "ok" and done["affected_rows"] == 1000, done
    assert len(during) >= 3, f"the CTAS ({ctas_secs:.2f} s) should outlast a few inserts: {during}"
    assert max(during) < 2, f"alice's inserts while the CTAS ran took {during}"
    made = sql_ok(server, arena.mallory, "SELECT count(*), sum(n), count(DISTINCT h) "
                                         "FROM mindsdb.mallory_ctas")
    assert made["data"] == [[1000, 3_000_000, 1000]], made
    present = column(server, arena.alice, "SELECT n FROM mindsdb.ledger ORDER BY n")
    assert set(arena.alice_rows) <= set(present)
    alice_still_works(arena)


# 6. Uploads.

def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, use_dictionary=True, compression="zstd")
    return buffer.getvalue()


def file_names(server: Server, key: str) -> list[str]:
    listed = call(server, "GET", "/api/files", key)
    assert listed.status_code == 200, listed.text
    return [f["name"] for f in listed.json()]


def test_a_parquet_bomb_and_too_many_rows_are_refused_and_store_nothing(arena):
    """A Parquet file of a few KB (one 10 KB string repeated 20,000 times, dictionary
    encoded and zstd compressed) decodes to about 200 MB: refused 400 naming
    files.max_decoded_mb (64), raw or multipart. One row over files.max_rows (100,000), as
    Parquet or CSV: refused 400 naming files.max_rows. None of them is listed afterwards or
    queryable; a file of exactly 100,000 rows is accepted."""
    server, mallory = arena.server, arena.mallory
    bomb = parquet_bytes(pa.table({"blob": ["b" * 10_000] * 20_000}))
    assert len(bomb) < 64 * 1024, len(bomb)
    too_long = parquet_bytes(pa.table({"n": pa.array([1] * (MAX_ROWS + 1), pa.int32())}))
    too_long_csv = "n\n" + "1\n" * (MAX_ROWS + 1)
    parquet = {"Content-Type": "application/vnd.apache.parquet", **bearer(mallory)}
    attempts = [
        ("bomb_raw", "files.max_decoded_mb", dict(data=bomb, headers=parquet)),
        ("bomb_form", "files.max_decoded_mb",
         dict(files={"file": ("bomb.parquet", bomb, "application/octet-stream")},
              headers=bearer(mallory))),
        ("rows_parquet", "files.max_rows", dict(data=too_long, headers=parquet)),
        ("rows_csv", "files.max_rows",
         dict(files={"file": ("rows.csv", too_long_csv, "text/csv")}, headers=bearer(mallory))),
    ]
    for name, config_key, upload in attempts:
        arena.refused["files"].add(name)
        started = time.monotonic()
        response = requests.put(f"{server.url}/api/files/{name}", timeout=60, **upload)
        problem(response, 400, config_key, "nothing was stored")
        assert time.monotonic() - started < 10, name
        assert name not in file_names(server, mallory)
        sql_error(server, mallory, f"SELECT count(*) FROM files.{name}", "not found")
        alice_still_works(arena)

    at_limit = requests.put(f"{server.url}/api/files/at_limit", timeout=60,
                            headers={"Content-Type": "text/csv", **bearer(mallory)},
                            data="n\n" + "1\n" * MAX_ROWS)
    assert at_limit.status_code == 200, at_limit.text
    assert sql_ok(server, mallory, "SELECT count(*) FROM files.at_limit")["data"] == [[MAX_ROWS]]
    assert call(server, "DELETE", "/api/files/at_limit", mallory).status_code == 200
    assert file_names(server, mallory) == []


# 7. Connections.

def test_two_hundred_idle_connections_do_not_starve_other_clients(arena):
    """Mallory opens 200 connections and sends nothing on them; alice's requests on new
    connections are still answered at once."""
    idle = []
    try:
        for _ in range(200):
            idle.append(socket.create_connection(("127.0.0.1", arena.server.port), timeout=5))
        time.sleep(0.3)
        for _ in range(3):
            alice_still_works(arena)
        ping = requests.get(arena.server.url + "/api/util/ping", timeout=5)
        assert ping.status_code == 200, ping.text
    finally:
        for sock in idle:
            sock.close()
    alice_still_works(arena)


def test_a_connection_over_max_connections_gets_503(start_server):
    """With http.max_connections = 5 and five connections busy (each streaming a result it
    does not read, so none is idle and none can be closed to make room), the sixth is
    answered 503 naming the limit, with Retry-After, and closed; once one of the five
    closes, a new connection is served. (Idle connections make room instead:
    test_front_door.py.)"""
    server = start_server("[http]\nmax_connections = 5\n")
    endless = "SELECT value FROM generate_series(1, 1000000000)"

    def hold() -> RawConnection:
        # The fixture's readiness check closed its connection just before; the server frees
        # that place when it reads the close, which may be a moment after this test connects.
        for _ in range(50):
            conn = RawConnection(server.port)
            conn.send(sql_request(endless, server.port, response_format="jsonlines"))
            status, _headers = conn.read_head()
            if status == 200:
                return conn
            conn.close()
            time.sleep(0.05)
        raise AssertionError("five connections were never served at once")

    held = []
    try:
        for _ in range(5):
            held.append(hold())
        with RawConnection(server.port) as sixth:
            refused = sixth.read_response()
            assert refused.status == 503, (refused.status, refused.body)
            assert refused.header("content-type") == PROBLEM
            assert "http.max_connections" in refused.json()["detail"], refused.body
            assert refused.header("retry-after") == "1"
            assert sixth.closed_by_peer()
        held.pop().close()

        def served() -> bool:
            try:
                with RawConnection(server.port) as conn:
                    conn.send(http_request("GET", "/api/util/ping", port=server.port))
                    return conn.read_response().status == 200
            except ConnectionClosed:
                return False
        wait_until(served, 5, "a connection to be served once a place was free")
    finally:
        for conn in held:
            conn.close()


def test_a_body_that_hogs_the_buffer_budget_refuses_large_bodies_but_not_small_ones(
        start_server):
    """http.max_buffered_body_mb = 1: one client announces a 1 MiB body and sends half of it,
    which takes the whole budget (room is taken as bytes arrive). Small requests (bodies up to
    64 KiB need no room) are served at once meanwhile; another large body gets no room within
    5 s and is answered 503 naming the limit. Once the first connection is gone, large bodies
    are read again."""
    server = start_server("[http]\nmax_buffered_body_mb = 1\n")
    big = json.dumps({"query": "SELECT 1 AS one -- " + "x" * 200_000}).encode()
    big_request = (b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"Content-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(big)) + big
    with RawConnection(server.port) as hog:
        hog.send(b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: 1048576\r\n\r\n" + b" " * 524288)
        time.sleep(0.3)
        started = time.monotonic()
        assert server.sql_ok("SELECT 1")["data"] == [[1]]
        assert time.monotonic() - started < 2, "a small body never waits for room"
        started = time.monotonic()
        with RawConnection(server.port) as other:
            other.send(big_request)
            refused = other.read_response()
        waited = time.monotonic() - started
    assert refused.status == 503, (refused.status, refused.body)
    assert "http.max_buffered_body_mb" in refused.json()["detail"], refused.body
    assert 4 <= waited < 8, waited

    def served() -> bool:
        with RawConnection(server.port) as again:
            again.send(big_request)
            answer = again.read_response()
        return answer.status == 200 and json.loads(answer.body)["data"] == [[1]]
    wait_until(served, 10, "large bodies to be read again")


# 8. SSRF.

LITERAL_TARGETS = {
    # 127.0.0.1 on a port that is not allow-listed; PostgreSQL is asked on the same port.
    # (URL host, the host as refusals name it, PostgreSQL host)
    "loopback_port": ("127.0.0.1:{port}", "127.0.0.1", "127.0.0.1"),
    "metadata": ("169.254.169.254", "169.254.169.254", "169.254.169.254"),
    "private": ("10.0.0.1", "10.0.0.1", "10.0.0.1"),
    "reserved": ("240.0.0.1", "240.0.0.1", "240.0.0.1"),
    "mapped": ("[::ffff:127.0.0.1]:{port}", "[::ffff:127.0.0.1]", "::ffff:127.0.0.1"),
}
# Words that would tell one internal range from another: no refusal may hold any.
RANGE_WORDS = ("loopback", "private", "link-local", "reserved", "unspecified", "multicast",
               "carrier", "unique-local", "resolves to", "denied")


def refusal(host: str) -> str:
    """The one refusal text, for `host` as the caller wrote it."""
    return f"{REFUSED}: this server does not connect to '{host}'"


def says_only_refused(message: str, host: str) -> None:
    assert message.endswith(refusal(host)), message
    assert not any(word in message for word in RANGE_WORDS), message


@pytest.mark.parametrize("target", list(LITERAL_TARGETS))
def test_ssrf_to_an_internal_address_is_refused_on_every_outbound_path(arena, target):
    """A callback URL, an agent's model.base_url, an LLM model's base_url, a PostgreSQL host
    by SQL and by the Minds API, each aimed at an internal address: refused (403 or a SQL
    error) before anything is stored or connected to, every refusal with the same words
    ("refused by the egress policy: this server does not connect to '<host>'"), whatever the
    range; nothing by that name exists afterwards."""
    server, mallory = arena.server, arena.mallory
    port = closed_port()
    url_template, url_shown, pg_host = LITERAL_TARGETS[target]
    url_host = url_template.format(port=port)
    name = f"ssrf_{target}"
    pg = json.dumps(pg_parameters(pg_host, port if "{port}" in url_template else 5432))
    callbacks_before = call(server, "GET", CALLBACKS, mallory).json()

    messages = [
        problem(call(server, "POST", CALLBACKS, mallory, {"url": f"http://{url_host}/hook"}),
                403)["detail"],
        problem(create_agent(server, mallory, name, f"http://{url_host}/v1"), 403)["detail"],
        sql_error(server, mallory, f"CREATE MODEL mindsdb.{name} PREDICT answer USING "
                                   f"engine = 'openai', prompt_template = 'say {{{{q}}}}', "
                                   f"base_url = 'http://{url_host}/v1'", REFUSED),
        sql_error(server, mallory, f"CREATE DATABASE {name} WITH ENGINE = 'postgres', "
                                   f"PARAMETERS = {pg}", REFUSED),
        problem(call(server, "POST", "/api/v1/datasources", mallory,
                     {"name": name + "_api", "engine": "postgres",
                      "connection_data": json.loads(pg)}), 403)["detail"],
    ]
    for message in messages[:3]:
        says_only_refused(message, url_shown)
    for message in messages[3:]:
        says_only_refused(message, pg_host)
    assert len(messages) == 5
    for kind, names in (("agents", [name]), ("models", [name]),
                        ("databases", [name, name + "_api"])):
        arena.refused[kind].update(names)

    assert call(server, "GET", CALLBACKS, mallory).json() == callbacks_before
    assert name not in [a["name"] for a in call(server, "GET", AGENTS, mallory).json()]
    assert name not in column(server, mallory, "SELECT name FROM mindsdb.models")
    databases = column(server, mallory, "SHOW DATABASES")
    assert name not in databases and name + "_api" not in databases, databases
    alice_still_works(arena)


def test_ssrf_through_a_name_is_refused_when_connecting_without_showing_the_address(arena):
    """`localhost` passes the checks made when a URL is stored (a name is resolved only when
    connecting) but every connection to it is refused: the agent's question (403, and an
    error event streamed; the question is given back since no provider was reached), the LLM
    model's prediction, PostgreSQL by SQL and the Minds API, and a callback's delivery
    (logged as refused). It is refused even on the fake LLM's and PostgreSQL's allow-listed
    ports: an address-with-port entry covers URLs that write that address, not names that
    resolve to it. No message shows the address the name resolved to."""
    server, mallory, llm = arena.server, arena.mallory, arena.llm
    asked_before = len(llm.requests)

    def hides_the_address(message: str) -> None:
        says_only_refused(message, "localhost")
        assert "127.0.0.1" not in message and "::1" not in message, message

    registered = call(server, "POST", CALLBACKS, mallory, {
        "url": f"http://localhost:{llm.port}/hook", "filter": {"model_name": "^ssrf_"},
        "attempt": {"count": 1, "interval": 1, "http_timeout": 1}})
    assert registered.status_code == 200, registered.text
    callback = registered.json()["id"]
    try:
        made = create_agent(server, mallory, "ssrf_by_name", f"http://localhost:{llm.port}/v1")
        assert made.status_code == 201, made.text
        questions = limits(server, mallory)["questions"]["used"]
        hides_the_address(problem(ask_agent(server, mallory, "ssrf_by_name", "hi"), 403)["detail"])
        events = sse_events(ask_agent(server, mallory, "ssrf_by_name", "hi", stream=True))
        assert events[-1] == {"type": "end"}, events
        hides_the_address(next(e["error"] for e in events if "error" in e))
        assert limits(server, mallory)["questions"]["used"] == questions, \
            "a question refused before reaching any provider is given back"

        create_llm_model(server, mallory, "ssrf_by_name_model",
                         base_url=f"http://localhost:{llm.port}/v1")
        hides_the_address(sql_error(server, mallory,
                                    "SELECT answer FROM mindsdb.ssrf_by_name_model WHERE q = 'hi'"))

        # The model's creation (complete at once) was an event for the callback to deliver.
        def logged() -> list[dict]:
            response = call(server, "GET", f"{CALLBACKS}/{callback}/deliveries", mallory)
            assert response.status_code == 200, response.text
            return response.json()
        wait_until(lambda: len(logged()) >= 1, 10, "the callback's delivery to be logged")
        for attempt in logged():
            assert attempt["delivered"] is False and attempt["status"] is None, attempt
            hides_the_address(attempt["error"])

        # PostgreSQL's default port, then the port allow-listed as 127.0.0.1:PORT.
        for port in (5432, pg_port() or 5432):
            pg = pg_parameters("localhost", port)
            by_sql, by_api = f"ssrf_by_name_{port}_sql", f"ssrf_by_name_{port}_api"
            arena.refused["databases"].update({by_sql, by_api})
            hides_the_address(sql_error(server, mallory, f"CREATE DATABASE {by_sql} WITH "
                                        f"ENGINE = 'postgres', PARAMETERS = {json.dumps(pg)}"))
            hides_the_address(problem(call(server, "POST", "/api/v1/datasources", mallory,
                                           {"name": by_api, "engine": "postgres",
                                            "connection_data": pg}), 403)["detail"])
    finally:
        assert call(server, "DELETE", f"{CALLBACKS}/{callback}", mallory).status_code in (200, 204)
        # A datasource made despite the policy has failed this test already; it goes, so that
        # the last test does not report the same failure again.
        for name in arena.refused["databases"] & set(column(server, mallory, "SHOW DATABASES")):
            if name.startswith("ssrf_by_name_"):
                sql_ok(server, mallory, f"DROP DATABASE {name}")
    assert len(llm.requests) == asked_before, "nothing reached the provider through the name"
    alice_still_works(arena)


# 9. Callback floods.

def delete_all_callbacks(server: Server, key: str) -> None:
    for callback in call(server, "GET", CALLBACKS, key).json():
        deleted = call(server, "DELETE", f"{CALLBACKS}/{callback['id']}", key)
        assert deleted.status_code in (200, 204), deleted.text
    assert call(server, "GET", CALLBACKS, key).json() == []


def test_callback_registrations_stop_at_max_callbacks_even_in_bursts(arena):
    """Registering one after another: the 21st is 429 naming the callbacks quota (limit 20).
    After deleting them, 60 registrations at once from 20 threads: exactly 20 succeed and the
    list holds exactly those. Alice's own registrations are not affected."""
    server, mallory = arena.server, arena.mallory
    # Filters that match no model: these receivers are never sent anything.
    body = lambda i: {"url": f"http://localhost:9/flood/{i}", "filter": {"model_name": "^never$"}}
    delete_all_callbacks(server, mallory)
    try:
        statuses = []
        for i in range(MAX_CALLBACKS + 3):
            response = call(server, "POST", CALLBACKS, mallory, body(i))
            statuses.append(response.status_code)
            if response.status_code == 429:
                problem(response, 429, "callbacks", f"limit {MAX_CALLBACKS}")
        assert statuses == [200] * MAX_CALLBACKS + [429] * 3, statuses
        mine = call(server, "POST", CALLBACKS, arena.alice, body("alice"))
        assert mine.status_code == 200, mine.text
        delete_all_callbacks(server, arena.alice)

        delete_all_callbacks(server, mallory)
        url, headers = server.url + CALLBACKS, bearer(mallory)
        with ThreadPoolExecutor(max_workers=20) as pool:
            burst = list(pool.map(lambda i: requests.post(url, json=body(i), headers=headers,
                                                          timeout=30), range(3 * MAX_CALLBACKS)))
        assert Counter(r.status_code for r in burst) == {200: MAX_CALLBACKS,
                                                         429: 2 * MAX_CALLBACKS}
        accepted = sorted(r.json()["id"] for r in burst if r.status_code == 200)
        listed = sorted(c["id"] for c in call(server, "GET", CALLBACKS, mallory).json())
        assert listed == accepted
        alice_still_works(arena)
    finally:
        delete_all_callbacks(server, mallory)


# 10. Logout floods.

def test_logout_floods_write_nothing_and_are_rate_limited_per_address(start_server):
    """From 127.0.0.2, mallory posts /api/logout with bogus tokens (and none): each answers
    200 "" and the data file stays byte for byte the same; past
    http.unauthenticated_per_minute (30) they get 429 with Retry-After naming it, as do her
    failed credentials from that address. Alice, from 127.0.0.1, is unaffected: her key, her
    login, her token and her logout all work."""
    config = ('edition = "hosted"\n[http]\n'
              f"unauthenticated_per_minute = {UNAUTHENTICATED_PER_MINUTE}\n")
    server, keys = hosted_server(start_server, config, "alice")
    alice = keys["alice"]
    mallory = session_from("127.0.0.2")
    logout = server.url + "/api/logout"

    def data_file() -> tuple[int, str]:
        contents = server.data.read_bytes()
        return len(contents), hashlib.sha256(contents).hexdigest()

    before = data_file()
    answers = [mallory.post(logout, headers=bearer(f"pat_bogus{i}") if i % 3 else {}, timeout=10)
               for i in range(UNAUTHENTICATED_PER_MINUTE)]
    assert [(a.status_code, a.json()) for a in answers] == [(200, "")] * len(answers)
    assert data_file() == before, "a logout of nothing wrote to the data file"

    for i in range(5):
        refused = mallory.post(logout, headers=bearer(f"pat_more{i}"), timeout=10)
        problem(refused, 429, "http.unauthenticated_per_minute")
        assert 1 <= int(refused.headers["retry-after"]) <= 60, dict(refused.headers)
    guessed = mallory.post(server.url + "/api/sql/query", json={"query": "SELECT 1"},
                           headers=bearer("mlk_guess"), timeout=10)
    problem(guessed, 429, "http.unauthenticated_per_minute")
    assert data_file() == before

    assert sql_ok(server, alice, "SELECT 1 AS one")["data"] == [[1]]
    login = call(server, "POST", "/api/login", None, {"username": "alice", "password": alice})
    assert login.status_code == 200, login.text
    token = login.json()["token"]
    assert sql_ok(server, token, "SELECT 2 AS two")["data"] == [[2]]
    assert call(server, "POST", "/api/logout", token).status_code == 200
    problem(server.sql("SELECT 1", token=token), 401)


# 11. Statements at once.

def test_statements_running_at_once_are_capped_per_user(arena):
    """Mallory holds four streamed statements open (their results unread, so they stay
    running): every further statement of hers is refused naming max_running_statements while
    alice's run as usual. Once mallory's connections close, her statements run again."""
    server, mallory = arena.server, arena.mallory
    endless = "SELECT value, 'padding padding padding' AS p FROM generate_series(1, 100000000)"
    held = []
    try:
        for _ in range(MAX_RUNNING_STATEMENTS):
            conn = RawConnection(server.port)
            held.append(conn)
            conn.send(sql_request(endless, server.port, headers=bearer(mallory),
                                  response_format="jsonlines"))
            status, _headers = conn.read_head()
            assert status == 200
        with ThreadPoolExecutor(max_workers=6) as pool:
            refused = list(pool.map(lambda i: sql(server, mallory, f"SELECT {i}"), range(6)))
        for doc in refused:
            assert doc["type"] == "error", doc
            assert "max_running_statements" in doc["error_message"], doc
            assert f"limit {MAX_RUNNING_STATEMENTS}" in doc["error_message"], doc
        alice_still_works(arena)
        assert sql_ok(server, arena.alice, "SELECT count(*) FROM mindsdb.ledger")["data"]
    finally:
        for conn in held:
            conn.close()

    def runs_again() -> bool:
        return sql(server, mallory, "SELECT 1 AS one")["type"] == "table"
    wait_until(runs_again, 5, "mallory's statements to be admitted again")
    alice_still_works(arena)


# 12. Metered model calls.

def test_llm_model_calls_are_metered_per_window(arena):
    """An LLM-backed model calls its provider once per row, counted against
    model_calls_per_window (50) before any call is made: 10 rows are predicted and counted;
    100 more are refused naming model_calls (a SELECT, a CREATE TABLE AS that then leaves no
    table, the REST predict route with 429) without a call; /limits/ shows the window.
    Alice's own model is metered apart."""
    server, mallory, llm = arena.server, arena.mallory, arena.llm
    llm.fallback(echo("echo: "))
    create_llm_model(server, mallory, "metered")
    used = limits(server, mallory)["model_calls"]["used"]
    calls = len(llm.requests)

    rows = "SELECT 'x' || value AS q FROM generate_series(1, {n})"
    join = "SELECT m.answer FROM ({rows}) AS t JOIN mindsdb.metered AS m"
    answered = sql_ok(server, mallory, join.format(rows=rows.format(n=10)))["data"]
    assert answered == [[f"echo: say x{i}"] for i in range(1, 11)], answered
    assert len(llm.requests) == calls + 10
    assert limits(server, mallory)["model_calls"]["used"] == used + 10

    sql_error(server, mallory, join.format(rows=rows.format(n=100)), "model_calls",
              f"limit {MODEL_CALLS}")
    arena.refused["tables"].add("unpaid_answers")
    sql_error(server, mallory, "CREATE TABLE mindsdb.unpaid_answers AS "
                               + join.format(rows=rows.format(n=100)), "model_calls")
    predicted = call(server, "POST", "/api/projects/mindsdb/models/metered/predict", mallory,
                     {"data": [{"q": f"y{i}"} for i in range(100)]})
    problem(predicted, 429, "model_calls")
    assert len(llm.requests) == calls + 10, "refused calls are never made"
    window = limits(server, mallory)["model_calls"]
    assert (window["limit"], window["used"], window["remaining"], window["window_secs"]) == \
        (MODEL_CALLS, used + 10, MODEL_CALLS - used - 10, WINDOW_SECS), window
    assert TIMESTAMP.match(window["resets_at"]), window

    create_llm_model(server, arena.alice, "alices_model")
    assert limits(server, arena.alice)["model_calls"]["used"] == 0
    mine = sql_ok(server, arena.alice, join.replace("metered", "alices_model")
                  .format(rows=rows.format(n=5)))["data"]
    assert len(mine) == 5, mine
    assert limits(server, arena.alice)["model_calls"]["used"] == 5
    alice_still_works(arena)


# 13. PostgreSQL.

@needs_postgres
def test_a_postgres_row_over_max_message_mb_ends_the_statement(arena):
    """A native query whose one row is 20 MB (a PostgreSQL message over
    datasources.max_message_mb = 4) fails naming the limit, as does a CREATE TABLE AS over it
    (which leaves no table); the datasource still answers small queries afterwards."""
    server, mallory = arena.server, arena.mallory
    sql_ok(server, mallory, "CREATE DATABASE big_rows WITH ENGINE = 'postgres', "
                            f"PARAMETERS = {json.dumps(pg_parameters())}")
    try:
        started = time.monotonic()
        sql_error(server, mallory, "SELECT * FROM big_rows (SELECT repeat('x', 20000000) AS big)",
                  "datasources.max_message_mb")
        assert time.monotonic() - started < STATEMENT_TIMEOUT
        arena.refused["tables"].add("big_copy")
        sql_error(server, mallory, "CREATE TABLE mindsdb.big_copy AS SELECT * FROM big_rows "
                                   "(SELECT repeat('x', 20000000) AS big)",
                  "datasources.max_message_mb")
        assert "big_copy" not in column(server, mallory, "SHOW TABLES FROM mindsdb")
        assert sql_ok(server, mallory, "SELECT * FROM big_rows (SELECT 41 + 1 AS answer)")["data"] \
            == [[42]]
        alice_still_works(arena)
    finally:
        sql_ok(server, mallory, "DROP DATABASE big_rows")


# 14. Afterwards.

def test_after_every_attack_the_server_lives_and_keeps_only_what_was_accepted(arena):
    """Last: the server answers a ping and its process runs; alice's ledger holds exactly
    the rows she inserted; nothing mallory was refused exists (no half-made table, no bomb
    file, no agent, model or datasource named after a refused one). The module's teardown
    then requires a clean exit on SIGTERM."""
    server, mallory = arena.server, arena.mallory
    assert server.running
    assert requests.get(server.url + "/api/util/ping", timeout=5).json() == {"status": "ok"}
    alice_still_works(arena)
    assert column(server, arena.alice, "SELECT n FROM mindsdb.ledger ORDER BY n") == \
        sorted(arena.alice_rows)

    refused = arena.refused
    assert not refused["tables"] & set(column(server, mallory, "SHOW TABLES FROM mindsdb"))
    assert not refused["files"] & set(file_names(server, mallory))
    agents = {a["name"] for a in call(server, "GET", AGENTS, mallory).json()}
    assert not refused["agents"] & agents, agents
    models = set(column(server, mallory, "SELECT name FROM mindsdb.models"))
    assert not refused["models"] & models, models
    databases = set(column(server, mallory, "SHOW DATABASES"))
    datasources = {d["name"] for d in call(server, "GET", "/api/v1/datasources", mallory).json()}
    assert not refused["databases"] & (databases | datasources), (databases, datasources)
    assert limits(server, mallory)["datasources"]["used"] == len(datasources)
