#!/usr/bin/env python3
"""The standing adversary: a seeded generator of hostile requests against a real
`mindlite-server`, for pytest (test_adversary.py, test_attacks.py) and on its own.

The arena is one hosted server under a memory limit (RLIMIT_AS, see mlserver.MEMORY_LIMIT_MB)
with the hosted edition's default limits but one: `query.statement_timeout_secs` is
STATEMENT_TIMEOUT (10 s, not 300) so that a case ends within the run. Its `[llm]` and
`[embedding]` point at the fake provider (fake_llm.py) on 127.0.0.1, and a small
`knowledge_bases.exact_below` makes searches of the attacker's knowledge base walk its graph.
Two users of the default `free` plan: `mallory`, the attacker, and `watchdog`, another account
that sends `SELECT 1` and a one-row INSERT, one after another, from 127.0.0.2 for the whole run.

Each case is one request made from a 48-bit case seed alone (`generate(seed, ctx)`): random SQL
from a small grammar with extreme sizes (LIMITs up to 2^63, nesting, wide projections, long IN
lists and `:name` list parameters referenced many times, huge literals, repeat/lpad/array
functions with huge counts, generate_series with huge bounds, recursive CTEs, cross joins,
knowledge-base, model, agent and datasource statements), random JSON bodies for every route
(wrong types, huge arrays, deep nesting, unknown keys), random uploads (CSV, JSON, Parquet:
malformed, and bombs such as one zstd page decoding to hundreds of MiB), raw HTTP requests a
web page could send, and clients that leave before the answer. Workers draw case seeds from
`Random(f"{seed}/{worker}")`, so a run is fixed by its seed (the interleaving of workers is not).

A run fails when
- the server dies (its exit status and the log's fatal lines are reported),
- any answer is a 500, or another 5xx than those allowed: 503 whose detail names an `http.*`
  or `query.*` key (a server-wide admission limit such as http.max_connections or
  http.max_buffered_body_mb, or the statement deadline query.statement_timeout_secs, which
  REST routes answer with 503: the documented answers to overload, not faults), and 502 with
  a non-empty detail (a provider's own failure, which a tenant can cause by pointing a model
  at a path the fake does not serve),
- a 4xx or a SQL error has no message,
- a request gets no answer at all, or none within STATEMENT_TIMEOUT + CLIENT_GRACE seconds
  (every path runs under the statement deadline),
- the watchdog gets anything but a prompt success: any of its requests taking longer than
  WATCHDOG_BOUND (5 s, generous for the debug build on 2 cores), or its table not holding
  exactly the rows it inserted at the end.

On failure the report gives the seed, the failing case, the requests that preceded it (each
replayable by its case seed) and, when shrinking is on, the shortest sequence found that
reproduces the failure on a fresh server.

    python tests/http/adversary.py --server target/debug/mindlite-server --seconds 3600 --seed 7
    python tests/http/adversary.py --server BIN --cases 300 --seed 1 --workers 2
    python tests/http/adversary.py --server BIN --replay 3f2a9c01b2d4,91aa0c3e5f60 [--concurrent]
    python tests/http/adversary.py --server BIN --show 3f2a9c01b2d4
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import requests  # noqa: E402
from requests.adapters import HTTPAdapter  # noqa: E402

from fake_llm import FakeLLM, echo  # noqa: E402
from hosted import hosted_server  # noqa: E402
from mlserver import (MEMORY_LIMIT_MB, ConnectionClosed, RawConnection, Server,  # noqa: E402
                      ServerFactory)

STATEMENT_TIMEOUT = 10
# How much longer than the statement deadline an answer may take (sending a large body, the
# debug build's slower paths) before the request counts as having escaped its deadline.
CLIENT_GRACE = 20
# The watchdog's latency bound per request, generous for the debug build on 2 cores.
WATCHDOG_BOUND = 5.0
# Bytes of one answer read at most; a larger streamed one is abandoned (the client leaves).
READ_CAP = 16 * 1024 * 1024
# Bytes one case's request may take, about: sizes are drawn within it, so that the generator
# never builds gigabytes (the server's limit on bodies is 64 MiB in the hosted edition).
CASE_BUDGET = 24 * 1024 * 1024
# The knowledge base searches must walk the graph past this many chunks.
EXACT_BELOW = 20
KB_DOCUMENTS = 60
WATCHDOG_ADDRESS = "127.0.0.2"
ATTACKER = "mallory"
WATCHDOG = "watchdog"


# Parquet files written by hand (no pyarrow): one column, one page, zstd-compressed, with any
# value the header and footer should state, honest or not.

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12


def _thrift_value(kind: int, value) -> bytes:
    """Thrift's compact protocol: ints zigzag varints, strings length-prefixed."""
    if kind in (_I32, _I64):
        return _varint((value << 1) ^ (value >> 63))
    if kind == _BINARY:
        data = value.encode() if isinstance(value, str) else value
        return _varint(len(data)) + data
    if kind == _STRUCT:
        return _thrift_struct(*value)
    element, items = value
    head = (bytes([(len(items) << 4) | element]) if len(items) < 15
            else bytes([0xF0 | element]) + _varint(len(items)))
    return head + b"".join(_thrift_value(element, item) for item in items)


def _thrift_struct(*fields: tuple[int, int, object]) -> bytes:
    out, last = bytearray(), 0
    for field_id, kind, value in fields:
        if value is None:
            continue
        out.append(((field_id - last) << 4) | kind)
        out += _thrift_value(kind, value)
        last = field_id
    return bytes(out + b"\0")


def zstd_runs(pieces: list[bytes | tuple[int, int]]) -> tuple[bytes, int]:
    """A zstd frame of raw blocks (bytes) and RLE blocks ((byte, count): one byte repeated,
    at 4 bytes per 128 KiB), with its honest content size; returns it and that size."""
    block_max = 1 << 17
    blocks = []
    for piece in pieces:
        if isinstance(piece, bytes):
            for at in range(0, len(piece), block_max):
                chunk = piece[at:at + block_max]
                blocks.append((0, len(chunk), chunk))
        else:
            byte, count = piece
            while count > 0:
                n = min(count, block_max)
                blocks.append((1, n, bytes([byte])))
                count -= n
    size = sum(n for _, n, _ in blocks)
    # Magic; 8-byte content size, not single-segment, no checksum; a 128 KiB window.
    out = bytearray(struct.pack("<IBB", 0xFD2FB528, 0xC0, (17 - 10) << 3) + struct.pack("<Q", size))
    for i, (kind, n, payload) in enumerate(blocks):
        out += ((1 if i == len(blocks) - 1 else 0) | (kind << 1) | (n << 3)).to_bytes(3, "little")
        out += payload
    if not blocks:
        out += (1).to_bytes(3, "little")
    return bytes(out), size


def parquet_strings(value_bytes: int, rows: int, *, declared_rows: int | None = None,
                    declared_page_bytes: int | None = None, truncate: int | None = None) -> bytes:
    """A Parquet file of one required UTF8 column `blob` in one zstd page: `rows` values of
    `value_bytes` × 'x'. The page decodes to rows × (value_bytes + 4) bytes while the file
    stays tiny (900 values of 1 MiB: 35 KB). `declared_rows` and `declared_page_bytes` make
    the footer and the page header lie; `truncate` cuts the file to that many bytes."""
    value = [struct.pack("<I", value_bytes), (ord("x"), value_bytes)]  # PLAIN: length, bytes
    page, page_bytes = zstd_runs(value * rows)
    stated_page = page_bytes if declared_page_bytes is None else declared_page_bytes
    stated_rows = rows if declared_rows is None else declared_rows
    header = _thrift_struct(
        (1, _I32, 0),  # DATA_PAGE
        (2, _I32, min(stated_page, 2**31 - 1)),
        (3, _I32, len(page)),
        (5, _STRUCT, ((1, _I32, stated_rows), (2, _I32, 0), (3, _I32, 3), (4, _I32, 3))))
    chunk = header + page
    footer = _thrift_struct(
        (1, _I32, 1),
        (2, _LIST, (_STRUCT, [((4, _BINARY, "schema"), (5, _I32, 1)),
                              ((1, _I32, 6), (3, _I32, 0), (4, _BINARY, "blob"), (6, _I32, 0))])),
        (3, _I64, stated_rows),
        (4, _LIST, (_STRUCT, [(
            (1, _LIST, (_STRUCT, [(
                (2, _I64, 4),
                (3, _STRUCT, ((1, _I32, 6), (2, _LIST, (_I32, [0, 3])),
                              (3, _LIST, (_BINARY, ["blob"])), (4, _I32, 6),
                              (5, _I64, stated_rows), (6, _I64, len(header) + stated_page),
                              (7, _I64, len(chunk)), (9, _I64, 4))),
            )])),
            (2, _I64, len(header) + stated_page),
            (3, _I64, stated_rows),
        )])),
        (6, _BINARY, "mindlite adversary"))
    data = b"PAR1" + chunk + footer + struct.pack("<I", len(footer)) + b"PAR1"
    return data if truncate is None else data[:truncate]


# The watchdog: another tenant whose every request must be answered, promptly.

class SourceAddress(HTTPAdapter):
    """Connections from another loopback address: another client, as the server's
    per-address limits see it."""

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


@dataclass
class WatchedRequest:
    what: str
    started: float  # time.monotonic()
    seconds: float
    problem: str | None  # None: answered as it should be


class Watchdog:
    """A tenant that sends, one after another from `address`, `SELECT 1` and then a one-row
    INSERT into `table` (which must exist), each with a client timeout of three times `bound`,
    until stopped. `failures()` lists its requests that were not answered correctly within
    `bound` seconds; `check_rows()` requires `table` to hold exactly the rows it inserted."""

    def __init__(self, server: Server, key: str, table: str = "mindsdb.watch",
                 bound: float = WATCHDOG_BOUND, address: str = WATCHDOG_ADDRESS,
                 pause: float = 0.05):
        self.server, self.key, self.table, self.bound = server, key, table, bound
        self.session = session_from(address)
        self.pause = pause
        self.requests: list[WatchedRequest] = []
        self.inserted: list[int] = []
        self.uncertain: set[int] = set()  # inserts whose answer never came: maybe stored
        self._next = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "Watchdog":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Watchdog":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3 * self.bound + 5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.once()
            self._stop.wait(self.pause)

    def once(self) -> None:
        """One SELECT 1 and one INSERT, recorded."""
        self._timed("SELECT 1", "SELECT 1 AS one", lambda doc: doc.get("data") == [[1]])
        with self._lock:
            n = self._next
            self._next += 1
        landed = self._timed(f"INSERT {n}", f"INSERT INTO {self.table} VALUES ({n})",
                             lambda doc: doc.get("type") == "ok")
        with self._lock:
            if landed is True:
                self.inserted.append(n)
            elif landed is None:
                self.uncertain.add(n)

    def _timed(self, what: str, query: str, good) -> bool | None:
        """True when answered as `good` says, False when answered otherwise, None when no
        answer came (the statement may or may not have run)."""
        started = time.monotonic()
        problem, answered = None, None
        try:
            response = self.session.post(self.server.url + "/api/sql/query",
                                         json={"query": query},
                                         headers={"Authorization": f"Bearer {self.key}"},
                                         timeout=3 * self.bound)
            try:
                doc = response.json()
            except ValueError:
                doc = {}
            answered = response.status_code == 200 and isinstance(doc, dict) and good(doc)
            if not answered:
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
        except requests.RequestException as e:
            problem = f"no answer: {type(e).__name__}: {str(e)[:200]}"
        seconds = time.monotonic() - started
        if problem is None and seconds > self.bound:
            problem = f"took {seconds:.2f} s (bound {self.bound} s)"
        if problem is not None and server_gone(self.server, problem):
            # The server died: that is the finding, not what it did to this request.
            self._stop.set()
            return None
        with self._lock:
            self.requests.append(WatchedRequest(what, started, seconds, problem))
        return answered

    def failures(self) -> list[WatchedRequest]:
        with self._lock:
            return [r for r in self.requests if r.problem is not None]

    def latencies(self) -> dict[str, float]:
        """Count, median, p99 and max of its requests' seconds."""
        with self._lock:
            seconds = sorted(r.seconds for r in self.requests)
        if not seconds:
            return {"count": 0}
        pick = lambda p: seconds[min(len(seconds) - 1, int(p * len(seconds)))]  # noqa: E731
        return {"count": len(seconds), "median": pick(0.5), "p99": pick(0.99), "max": seconds[-1]}

    def summary(self) -> str:
        stats = self.latencies()
        if stats["count"] == 0:
            return "watchdog: no requests"
        return (f"watchdog: {stats['count']} requests, median {stats['median'] * 1000:.0f} ms, "
                f"p99 {stats['p99'] * 1000:.0f} ms, max {stats['max'] * 1000:.0f} ms")

    def check_rows(self) -> None:
        """The table holds every row whose INSERT succeeded, and no other but those whose
        answer never came."""
        response = requests.post(self.server.url + "/api/sql/query",
                                 json={"query": f"SELECT n FROM {self.table} ORDER BY n"},
                                 headers={"Authorization": f"Bearer {self.key}"}, timeout=30)
        assert response.status_code == 200, response.text
        stored = [row[0] for row in response.json()["data"]]
        with self._lock:
            missing = sorted(set(self.inserted) - set(stored))
            extra = sorted(set(stored) - set(self.inserted) - self.uncertain)
        twice = sorted({a for a, b in zip(stored, stored[1:]) if a == b})  # stored is ordered
        assert not missing and not extra and not twice, \
            (f"the watchdog's table lost rows {missing[:20]}, holds others {extra[:20]} "
             f"or holds some twice {twice[:20]}")


# The arena.

def arena_config(llm: FakeLLM, extra: str = "", statement_timeout: int = STATEMENT_TIMEOUT,
                 llm_timeout: int = 5) -> str:
    """The hosted edition's defaults but the statement deadline, the fake provider as the
    configured LLM and embedding model (so allowed by the egress policy) with a provider
    timeout of `llm_timeout` seconds, and a small exact_below; `extra` is appended."""
    return f"""\
edition = "hosted"

[query]
statement_timeout_secs = {statement_timeout}

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"
timeout_secs = {llm_timeout}

[embedding]
model_name = "fake-embedder"
base_url = "{llm.base_url}"
api_key = "sk-embed"
timeout_secs = 5

[knowledge_bases]
exact_below = {EXACT_BELOW}
{extra}"""


@dataclass
class Arena:
    server: Server
    keys: dict[str, str]
    llm: FakeLLM
    watchdog: Watchdog
    mcp_session: str = ""

    @property
    def attacker(self) -> str:
        return self.keys[ATTACKER]

    def context(self) -> dict:
        return {"llm_port": self.llm.port, "server_port": self.server.port,
                "mcp_session": self.mcp_session}


def sql_as(server: Server, key: str, query: str, **fields) -> dict:
    """A statement that must succeed."""
    response = server.sql(query, token=key, **fields)
    assert response.status_code == 200, (query[:200], response.status_code, response.text[:500])
    doc = response.json()
    assert doc["type"] in ("ok", "table"), (query[:200], doc)
    return doc


def prepare(server: Server, keys: dict[str, str]) -> None:
    """What the cases refer to, made the same way for every run and replay: the attacker's
    table `t` (id, s, f), keyed table `k`, knowledge base `kb` of KB_DOCUMENTS documents (more
    chunks than EXACT_BELOW), LLM-backed model `m`, agent `a` and file `f1`; the watchdog's
    table `watch`."""
    attacker = keys[ATTACKER]
    sql_as(server, keys[WATCHDOG], "CREATE TABLE mindsdb.watch (n INT)")
    sql_as(server, attacker, "CREATE TABLE mindsdb.t (id INT, s VARCHAR, f DOUBLE)")
    sql_as(server, attacker, "INSERT INTO mindsdb.t SELECT value, 'row ' || value, value / 7.0 "
                             "FROM generate_series(1, 200)")
    sql_as(server, attacker, "CREATE TABLE mindsdb.k (id BIGINT PRIMARY KEY, v VARCHAR)")
    sql_as(server, attacker, "INSERT INTO mindsdb.k SELECT value, 'v' || value "
                             "FROM generate_series(1, 100)")
    sql_as(server, attacker, "CREATE KNOWLEDGE_BASE mindsdb.kb")
    sql_as(server, attacker, "INSERT INTO mindsdb.kb (id, content) SELECT value, "
                             "'document ' || value || ' about cats dogs and markets number ' "
                             f"|| value FROM generate_series(1, {KB_DOCUMENTS})")
    sql_as(server, attacker, "CREATE MODEL mindsdb.m PREDICT answer USING engine = 'openai', "
                             "prompt_template = 'say {{q}}'")
    sql_as(server, attacker, "CREATE AGENT mindsdb.a USING data = {\"tables\": [\"mindsdb.t\"]}")
    upload = requests.put(server.url + "/api/files/f1", data="a,b\n1,x\n2,y\n",
                          headers={"Authorization": f"Bearer {attacker}",
                                   "Content-Type": "text/csv"}, timeout=30)
    assert upload.status_code == 200, upload.text


def start_arena(factory: ServerFactory, llm: FakeLLM, extra_config: str = "") -> Arena:
    """A hosted server under the factory's memory limit, prepared; the watchdog not started."""
    llm.fallback(echo("echo: "))
    server, keys = hosted_server(factory, arena_config(llm, extra_config), ATTACKER, WATCHDOG)
    prepare(server, keys)
    return Arena(server, keys, llm, Watchdog(server, keys[WATCHDOG]), mcp_session(server, keys[ATTACKER]))


def mcp_session(server: Server, key: str) -> str:
    """The attacker's MCP session, which the /mcp/ cases name (initialize is not a case: a
    mutated one would end this session to make room for its own)."""
    answer = requests.post(server.url + "/mcp/", timeout=30, headers={"Authorization": f"Bearer {key}"},
                           json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                 "params": {"protocolVersion": "2025-11-25"}})
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


# Cases: one request each, made from its seed alone.

@dataclass
class Case:
    seed: int
    kind: str
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as is on a socket instead (path and body describe it)
    leave_after: float | None = None  # the client goes away after this many seconds
    authenticated: bool = True

    def summary(self, width: int = 300) -> str:
        """One line: the seed, the kind, the request (shortened, control bytes escaped)."""
        body = (self.raw if self.raw is not None else self.body) or b""
        text = one_line(body[:width].decode("utf-8", "replace"))
        more = f"… ({len(body)} bytes)" if len(body) > width else ""
        path = self.path if len(self.path) <= 80 else \
            f"{self.path[:80]}… ({len(self.path)} chars)"
        leave = f" [client leaves after {self.leave_after} s]" if self.leave_after else ""
        return f"{self.seed:012x} {self.kind}: {self.method} {path} {text}{more}{leave}"


def one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


SIZES = [0, 1, 2, 7, 100, 1000, 10**4, 10**5, 10**6, 10**7, 10**8, 5 * 10**8, 10**9,
         2**31 - 1, 2**31, 2**32 + 1, 10**13, 2**63 - 1, -1, -(2**63)]
ODD_WORDS = ["", "x", "'", "''", "\\", "%", "_", "é", "💥", "\0", "NULL", "🙂" * 3, "a b c",
             "; DROP TABLE t; --", "{{q}}", "{{", "}}", "\n", "\t"]


def size(rng: random.Random, low: int | None = None, high: int | None = None) -> int:
    """A count biased to extremes: any of SIZES, or a random one in range."""
    choices = [s for s in SIZES if (low is None or s >= low) and (high is None or s <= high)]
    if rng.random() < 0.7 and choices:
        return rng.choice(choices)
    lo = low if low is not None else -10
    hi = high if high is not None else 10**7
    return rng.randint(lo, hi)


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Sql:
    """Random SQL from a small grammar; `params` collects the `:name` parameters used."""

    def __init__(self, rng: random.Random, ctx: dict):
        self.rng = rng
        self.ctx = ctx
        self.params: dict[str, object] = {}
        self.budget = CASE_BUDGET

    def afford(self, sizes: list[int], per: int = 1) -> int:
        """One of `sizes` (each costing `per` bytes) that fits what is left of the case's
        budget, spent; the smallest when none fits."""
        fitting = [n for n in sizes if n * per <= self.budget] or [min(sizes)]
        n = self.rng.choice(fitting)
        self.budget -= n * per
        return n

    # Expressions.

    def string(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            return quoted("x" * self.afford([10**4, 10**5, 10**6, 3 * 10**6]))
        if roll < 0.4:
            return quoted(rng.choice(ODD_WORDS))
        return quoted("".join(rng.choice("abcxyz ") for _ in range(rng.randint(0, 20))))

    def number(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return str(size(rng))
        if roll < 0.8:
            return rng.choice(["1.5", "-0.0", "1e308", "-1e308", "1e-320", "'NaN'::double",
                               "'inf'::double", "0.1"])
        return str(rng.randint(-100, 100))

    def literal(self) -> str:
        roll = self.rng.random()
        if roll < 0.45:
            return self.number()
        if roll < 0.9:
            return self.string()
        return self.rng.choice(["NULL", "true", "false", "CAST(NULL AS INT)"])

    def param(self) -> str:
        rng = self.rng
        name = rng.choice("abc")
        if name not in self.params:
            roll = rng.random()
            if roll < 0.5:
                n = self.afford([1, 10, 1000, 10**4, 10**5], per=14)
                self.params[name] = list(range(n)) if rng.random() < 0.7 else ["x" * 10] * n
            elif roll < 0.7:
                self.params[name] = "x" * self.afford([10, 10**5, 10**6])
            else:
                self.params[name] = rng.choice([None, 1, -1, 2**63 - 1, 1.5, True, {"k": 1}, []])
        return f":{name}"

    def expr(self, depth: int, cols: list[str]) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.3:
            if cols and rng.random() < 0.5:
                return rng.choice(cols)
            return self.literal() if rng.random() < 0.9 else self.param()
        roll = rng.random()
        sub = lambda: self.expr(depth - 1, cols)  # noqa: E731
        if roll < 0.30:
            return self.function(depth, cols)
        if roll < 0.45:
            op = rng.choice(["+", "-", "*", "/", "%", "||", "=", "<>", "<", "AND", "OR", "LIKE"])
            return f"({sub()} {op} {sub()})"
        if roll < 0.52:
            return f"CASE WHEN {sub()} THEN {sub()} ELSE {sub()} END"
        if roll < 0.58:
            kind = rng.choice(["INT", "BIGINT", "VARCHAR", "DOUBLE", "DATE", "BOOLEAN",
                               "DECIMAL(38, 10)"])
            return f"CAST({sub()} AS {kind})"
        if roll < 0.66:
            return self.in_list(depth, cols)
        if roll < 0.72:
            return f"(SELECT {sub()})"
        if roll < 0.80:
            return self.deep(cols)
        if roll < 0.86:
            return f"{sub()} IN {self.param()}"
        return self.literal()

    def in_list(self, depth: int, cols: list[str]) -> str:
        rng = self.rng
        n = self.afford([1, 100, 10**4, 5 * 10**4, 10**5], per=8)
        item = rng.choice(["1", "'x'", "NULL", "value"])
        values = ", ".join(str(i) if item == "1" else item for i in range(n))
        target = self.expr(depth - 1, cols)
        return f"({target} {'NOT ' if rng.random() < 0.2 else ''}IN ({values}))"

    def deep(self, cols: list[str]) -> str:
        """Nesting the parser and planner recurse through."""
        rng = self.rng
        d = self.afford([50, 200, 1000, 5000, 20000, 100000], per=24)
        shape = rng.randint(0, 5)
        if shape == 0:
            return "(" * d + "1" + ")" * d
        if shape == 1:
            return "upper(" * d + "'x'" + ")" * d
        if shape == 2:
            return " + ".join(["1"] * d)
        if shape == 3:
            return "CASE WHEN true THEN " * d + "1" + " END" * d
        if shape == 4:
            return "(SELECT " * min(d, 2000) + "1" + ")" * min(d, 2000)
        return "-" * d + "1"

    def function(self, depth: int, cols: list[str]) -> str:
        rng = self.rng
        sub = lambda: self.expr(depth - 1, cols)  # noqa: E731
        n = lambda: str(size(rng))  # noqa: E731
        choices = [
            lambda: f"repeat({self.string()}, {n()})",
            lambda: f"repeat({sub()}, {n()})",
            lambda: f"lpad({sub()}, {n()}, {self.string()})",
            lambda: f"rpad({self.string()}, {n()}, 'ab')",
            lambda: f"length({sub()})",
            lambda: f"upper({sub()})",
            lambda: f"md5(CAST({sub()} AS VARCHAR))",
            lambda: f"substr({sub()}, {n()}, {n()})",
            lambda: f"concat({', '.join(sub() for _ in range(rng.randint(1, 5)))})",
            lambda: f"regexp_replace({sub()}, {quoted(self.regex())}, 'y')",
            lambda: f"regexp_like({self.string()}, {quoted(self.regex())})",
            lambda: f"array_repeat({sub()}, {n()})",
            lambda: f"make_array({', '.join(sub() for _ in range(rng.randint(1, 5)))})",
            lambda: f"range({n()})",
            lambda: f"cardinality(range({n()}))",
            lambda: f"array_length(array_repeat(1, {n()}))",
            lambda: f"string_to_array(repeat('a,', {n()}), ',')",
            lambda: f"to_hex({n()})",
            lambda: f"power({n()}, {n()})",
            lambda: f"factorial({rng.choice(['20', '21', '100', '10000'])})",
            lambda: f"left({sub()}, {n()})",
            lambda: f"split_part({sub()}, ',', {n()})",
            lambda: f"overlay({self.string()} placing {self.string()} from {n()} for {n()})",
            lambda: f"translate({sub()}, 'ab', 'cd')",
            lambda: f"encode(CAST({sub()} AS VARCHAR), 'base64')",
            lambda: f"greatest({sub()}, {sub()})",
            lambda: f"coalesce({sub()}, {sub()})",
            lambda: f"chr({n()})",
            lambda: f"array_to_string(array_repeat({self.string()}, {n()}), {self.string()})",
            lambda: f"date_add(now(), INTERVAL '{n()} days')",
            lambda: f"to_timestamp({n()})",
            lambda: f"nullif({sub()}, {sub()})",
            lambda: f"starts_with({sub()}, {sub()})",
            lambda: "uuid()",
        ]
        return rng.choice(choices)()

    def regex(self) -> str:
        return self.rng.choice(["(a+)+$", "x*", r"\w{1000}", r"(?:\w{50}){50}", "[a-", "(",
                                "^.*$", r"(\d+)*x", "a{1000}{1000}", ".{0,65535}", r"\p{L}+",
                                "(?i)" + "a|" * 2000 + "b", ""])

    # Sources and queries.

    def source(self, depth: int) -> tuple[str, list[str]]:
        rng = self.rng
        roll = rng.random()
        n = size(rng, 0)
        if roll < 0.25:
            return "mindsdb.t", ["id", "s", "f"]
        if roll < 0.45:
            return f"generate_series(1, {n}) AS g", ["value"]
        if roll < 0.55:
            return f"generate_series({size(rng)}, {size(rng)}, {size(rng)}) AS g", ["value"]
        if roll < 0.62:
            return ("mindsdb.t AS a CROSS JOIN mindsdb.t AS b CROSS JOIN mindsdb.t AS c",
                    ["a.id", "c.s"])
        if roll < 0.68:
            return f"mindsdb.t CROSS JOIN generate_series(1, {n}) AS g", ["id", "value"]
        if roll < 0.75 and depth > 0:
            inner = self.select(depth - 1)
            return f"({inner}) AS sq", []
        if roll < 0.80:
            return "mindsdb.k", ["id", "v"]
        if roll < 0.85:
            return "files.f1", ["a", "b"]
        if roll < 0.90:
            return rng.choice(["information_schema.columns", "information_schema.tables",
                               "mindsdb.models", "information_schema.knowledge_base_inserts"]), []
        return f"unnest(range({n})) AS u(x)", ["x"]

    def projection(self, depth: int, cols: list[str]) -> str:
        rng = self.rng
        if rng.random() < 0.12:
            width = self.afford([1000, 10**4, 3 * 10**4, 10**5], per=8)
            item = rng.choice(["1", "NULL", "'x'"] + cols[:1])
            return ", ".join([item] * width)
        if rng.random() < 0.1:
            return "*"
        return ", ".join(self.expr(depth, cols) for _ in range(rng.randint(1, 4)))

    def select(self, depth: int = 3) -> str:
        rng = self.rng
        source, cols = self.source(depth)
        distinct = "DISTINCT " if rng.random() < 0.1 else ""
        text = f"SELECT {distinct}{self.projection(depth, cols)} FROM {source}"
        if rng.random() < 0.4:
            text += f" WHERE {self.expr(depth, cols)}"
        if cols and rng.random() < 0.15:
            text += f" GROUP BY {cols[0]}"
        if rng.random() < 0.2:
            text += f" ORDER BY {self.expr(1, cols)}"
        if rng.random() < 0.4:
            text += f" LIMIT {size(rng)}"
        if rng.random() < 0.1:
            text += f" OFFSET {size(rng)}"
        return text

    def statement(self) -> tuple[str, str]:
        """(kind, SQL)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.30:
            return "select", self.select(rng.randint(1, 4))
        if roll < 0.34:
            n = self.afford([10, 1000, 10**4], per=30)
            return "union", " UNION ALL ".join([f"SELECT {i} AS n" for i in range(n)])
        if roll < 0.39:
            bound = size(rng)
            step = rng.choice(["n + 1", "n * 2", "n"])
            body = rng.choice(["SELECT count(*) FROM r", "SELECT max(length(s)) FROM r",
                               "SELECT * FROM r"])
            return "recursive", (f"WITH RECURSIVE r(n, s) AS (SELECT 1, 'x' UNION ALL "
                                 f"SELECT {step}, s || s FROM r WHERE n < {bound}) {body}")
        if roll < 0.44:
            refs = rng.choice([10, 500, 2000])
            name = self.param()
            return "params", ("SELECT count(*) FROM mindsdb.t WHERE "
                              + " OR ".join([f"id IN {name}"] * refs))
        if roll < 0.54:
            return "write", self.write()
        if roll < 0.66:
            return "kb", self.knowledge_base()
        if roll < 0.74:
            return "model", self.model()
        if roll < 0.78:
            return "agent", self.agent()
        if roll < 0.81:
            return "database", self.database()
        if roll < 0.86:
            return "explain", f"EXPLAIN {self.select(2)}"
        if roll < 0.90:
            return "show", rng.choice(["SHOW TABLES", "SHOW DATABASES", "SHOW MODELS",
                                       "SHOW KNOWLEDGE_BASES", "SHOW AGENTS", "DESCRIBE mindsdb.m",
                                       "DESCRIBE KNOWLEDGE_BASE mindsdb.kb", "SHOW FULL TABLES",
                                       "SHOW ML_ENGINES", "SHOW HANDLERS WHERE type = 'ml'",
                                       f"SHOW HANDLERS LIKE {self.string()}",
                                       f"CREATE ML_ENGINE e1 FROM openai USING base_url = {self.string()}",
                                       "DROP ML_ENGINE IF EXISTS e1", "SHOW JOBS",
                                       "CREATE JOB IF NOT EXISTS mindsdb.j1 (SELECT 1) START '2999-01-01'",
                                       "CREATE JOB IF NOT EXISTS j2 (INSERT INTO mindsdb.t SELECT * "
                                       "FROM mindsdb.t WHERE id > LAST) EVERY 1 minute",
                                       f"CREATE JOB j3 ({self.string()}; SELECT 1) EVERY {self.string()}",
                                       "DROP JOB IF EXISTS mindsdb.j1", "DROP JOB IF EXISTS j2"])
        return "garbage", self.garbage()

    def write(self) -> str:
        rng = self.rng
        n = size(rng, 0)
        name = f"mindsdb.x{rng.randint(0, 9)}"
        return rng.choice([
            lambda: f"INSERT INTO mindsdb.t SELECT value, repeat('y', {size(rng, 0, 10**9)}), 0 "
                    f"FROM generate_series(1, {n})",
            lambda: f"INSERT INTO mindsdb.k SELECT value + 1000, 'w' FROM generate_series(1, {n})",
            lambda: "INSERT INTO mindsdb.t VALUES " + ", ".join(
                f"({i}, {self.string()}, {self.number()})"
                for i in range(self.afford([1, 100, 5000], per=40))),
            lambda: f"CREATE TABLE {name} AS {self.select(2)}",
            lambda: f"CREATE OR REPLACE TABLE {name} (id BIGINT PRIMARY KEY, v VARCHAR)",
            lambda: f"CREATE INDEX i{rng.randint(0, 3)} ON mindsdb.t "
                    f"({rng.choice(['s', 'id', 'f', 'nope'])})",
            lambda: f"CREATE UNIQUE INDEX u{rng.randint(0, 3)} ON mindsdb.k (v)",
            lambda: f"UPDATE mindsdb.t SET s = repeat(s, {size(rng, 0, 10**9)}) WHERE id < {n}",
            lambda: f"DELETE FROM mindsdb.t WHERE {self.expr(2, ['id', 's', 'f'])}",
            lambda: f"DROP TABLE IF EXISTS {name}",
            lambda: f"CREATE VIEW mindsdb.v{rng.randint(0, 3)} AS {self.select(2)}",
            lambda: f"CREATE TABLE {name} "
                    f"({', '.join(f'c{i} INT' for i in range(rng.choice([1, 1000, 10**4])))})",
        ])()

    def chunking(self) -> dict:
        rng = self.rng
        config = {}
        if rng.random() < 0.8:
            config["chunk_size"] = rng.choice([1, 2, 0, -1, 10, 10**6, 10**9, 2**63, "x", None,
                                               1.5])
        if rng.random() < 0.6:
            config["chunk_overlap"] = rng.choice([0, 1, 10**9, -1, "x"])
        return {"type": rng.choice(["text_chunking", "text_chunking", "other", 7]),
                "text_chunking_config": config}

    def url(self) -> str:
        return odd_url(self.rng, self.ctx)

    def embedding_model(self) -> dict:
        rng = self.rng
        model = {}
        for key, values in (("provider", ["openai", "local", "ollama", "", "x" * 1000]),
                            ("model_name", ["fake-embedder", "", "../../etc", "x" * 10**4]),
                            ("base_url", None), ("api_key", ["k", "", "x" * 10**5]),
                            ("batch_size", [0, 1, 10**9, -1, "x"]),
                            ("unknown_key", [1, [], {}])):
            if rng.random() < 0.5:
                model[key] = self.url() if values is None else rng.choice(values)
        return model

    def knowledge_base(self) -> str:
        rng = self.rng
        kb = f"mindsdb.kb{rng.randint(0, 3)}"
        roll = rng.random()
        if roll < 0.35:
            extra = rng.choice(["", " AND hybrid_search = true", " AND relevance >= 0.1",
                                " AND hybrid_search_alpha = 0", " AND id = '3'",
                                f" AND hybrid_search_alpha = {self.number()}"])
            return (f"SELECT id, chunk_content, relevance FROM mindsdb.kb WHERE content = "
                    f"{self.string()}{extra} LIMIT {size(rng)}")
        if roll < 0.6:
            using = []
            if rng.random() < 0.7:
                using.append(f"embedding_model = {json.dumps(self.embedding_model())}")
            if rng.random() < 0.7:
                using.append(f"preprocessing = {json.dumps(self.chunking())}")
            if rng.random() < 0.2:
                reranker = {"base_url": self.url(), "model_name": "judge"}
                using.append(f"reranking_model = {json.dumps(reranker)}")
            if rng.random() < 0.2:
                names = ", ".join(quoted(f"m{i}") for i in range(rng.choice([1, 1000])))
                using.append(f"metadata_columns = [{names}]")
            if rng.random() < 0.1:
                using.append(f"nonsense = {self.literal()}")
            return f"CREATE KNOWLEDGE_BASE {kb}" + (" USING " + ", ".join(using) if using else "")
        if roll < 0.85:
            doc = rng.choice([f"repeat('word ', {size(rng, 0, 10**8)})", self.string(),
                              f"repeat('x', {size(rng, 0, 10**9)})"])
            rows = rng.choice([1, 10, 1000, 10**5])
            target = rng.choice([kb, "mindsdb.kb"])
            return (f"INSERT INTO {target} (id, content) SELECT value, {doc} "
                    f"FROM generate_series(1, {rows})")
        if roll < 0.92:
            return f"ALTER KNOWLEDGE_BASE {kb} USING preprocessing = {json.dumps(self.chunking())}"
        return f"DROP KNOWLEDGE_BASE IF EXISTS {kb}"

    def model(self) -> str:
        rng = self.rng
        name = f"mindsdb.mx{rng.randint(0, 3)}"
        roll = rng.random()
        if roll < 0.4:
            width = size(rng, 0, 10**9)
            rows = size(rng, 0, 10**8)
            engine = rng.choice(["", " USING engine = 'builtin'", " USING engine = 'lightwood'",
                                 " USING engine = 'openai', prompt_template = 'x {{a}}'",
                                 " USING engine = 'nope'"])
            return (f"CREATE MODEL {name} FROM mindsdb (SELECT repeat('x', {width}) AS a, "
                    f"value % 7 AS y FROM generate_series(1, {rows})) PREDICT y{engine}")
        if roll < 0.55:
            target = rng.choice(["f", "s", "id", "nope"])
            return f"CREATE MODEL {name} FROM mindsdb (SELECT * FROM t) PREDICT {target}"
        if roll < 0.7:
            return (f"SELECT m.answer FROM (SELECT {self.expr(1, ['value'])} AS q FROM "
                    f"generate_series(1, {size(rng, 0)})) AS src JOIN mindsdb.m AS m")
        if roll < 0.8:
            return f"SELECT answer FROM mindsdb.m WHERE q = {self.string()}"
        if roll < 0.9:
            return f"DROP MODEL IF EXISTS {name}"
        return f"RETRAIN {name}"

    def agent(self) -> str:
        rng = self.rng
        if rng.random() < 0.5:
            return f"SELECT answer FROM mindsdb.a WHERE question = {self.string()}"
        model = json.dumps({"provider": "openai", "model_name": "m", "api_key": "k",
                            "base_url": self.url()})
        return (f"CREATE AGENT mindsdb.ax{rng.randint(0, 3)} USING model = {model}, "
                f"prompt_template = {self.string()}")

    def database(self) -> str:
        rng = self.rng
        host = rng.choice(["10.0.0.1", "169.254.169.254", "127.0.0.1", "localhost",
                           "/var/run/postgresql", "::1", "0.0.0.0", "x" * 300])
        port = rng.choice([5432, self.ctx["llm_port"], 1, 0, 70000, -1])
        params = json.dumps({"host": host, "port": port, "database": "d", "user": "u",
                             "password": "p"})
        engine = rng.choice(["postgres", "postgres", "files", "mysql", "x"])
        return (f"CREATE DATABASE d{rng.randint(0, 3)} WITH ENGINE = '{engine}', "
                f"PARAMETERS = {params}")

    def garbage(self) -> str:
        rng = self.rng
        return rng.choice([
            lambda: "(" * self.afford([10**3, 10**5]),
            lambda: "SELECT " + "'" * rng.randint(1, 5),
            lambda: " ".join(rng.choice(["SELECT", "FROM", "(", ")", ",", "WHERE", "1", "'a'",
                                         "JOIN", "ON", "UNION", "*", ";", "--", "/*"])
                             for _ in range(rng.randint(1, 300))),
            lambda: "SELECT 1; " * self.afford([2, 100, 10**4], per=10),
            lambda: "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 200))),
            lambda: "",
            lambda: "/*" * 10**4,
        ])()


def odd_url(rng: random.Random, ctx: dict) -> str:
    """A URL for a provider or receiver; every one either reaches the fake on 127.0.0.1 or is
    refused before any connection (internal literals, bad schemes): no traffic leaves the
    machine."""
    port = ctx["llm_port"]
    return rng.choice([
        f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/evil/v1",
        f"http://localhost:{port}/v1", f"http://127.0.0.1:{port}", "http://127.0.0.1:1/v1",
        "http://10.0.0.1/v1", "http://169.254.169.254/latest/meta-data", "http://[::1]:1/",
        "http://0.0.0.0:1/", "http://2130706433/", f"http://[::ffff:127.0.0.1]:{port}/v1",
        "ftp://127.0.0.1/", "file:///etc/passwd", "not a url", "", "http://",
        "http://" + "a" * 10**4, f"http://user:pass@127.0.0.1:{port}/v1", "unix:/var/run/x",
        "http://100.64.0.1/", "http://[fd00::1]/", "http://224.0.0.1/",
    ])


# JSON bodies for every route (server/src/routes.rs, minds.rs, callbacks.rs).

ROUTES = [
    ("POST", "/api/sql/query"), ("GET", "/api/status"), ("GET", "/api/util/ping"),
    ("GET", "/api/projects"), ("GET", "/api/projects/mindsdb"), ("POST", "/api/login"),
    ("POST", "/api/logout"), ("POST", "/cloud/login"),
    ("GET", "/api/projects/mindsdb/agents"), ("POST", "/api/projects/mindsdb/agents"),
    ("GET", "/api/projects/mindsdb/agents/a"), ("PUT", "/api/projects/mindsdb/agents/a"),
    ("DELETE", "/api/projects/mindsdb/agents/ax1"),
    ("POST", "/api/projects/mindsdb/agents/a/completions"),
    ("POST", "/api/projects/mindsdb/agents/a/completions/stream"),
    ("GET", "/api/projects/mindsdb/knowledge_bases"),
    ("POST", "/api/projects/mindsdb/knowledge_bases"),
    ("GET", "/api/projects/mindsdb/knowledge_bases/kb"),
    ("PUT", "/api/projects/mindsdb/knowledge_bases/kb"),
    ("PUT", "/api/projects/mindsdb/knowledge_bases/kb1"),
    ("DELETE", "/api/projects/mindsdb/knowledge_bases/kb2"),
    ("GET", "/api/projects/mindsdb/models"), ("POST", "/api/projects/mindsdb/models"),
    ("GET", "/api/projects/mindsdb/models/m"), ("DELETE", "/api/projects/mindsdb/models/mx1"),
    ("POST", "/api/projects/mindsdb/models/m/predict"),
    ("GET", "/api/projects/mindsdb/models/m/describe"),
    ("GET", "/api/files"), ("PUT", "/api/files/j1"), ("DELETE", "/api/files/u1"),
    ("GET", "/api/v1/minds"), ("POST", "/api/v1/minds"), ("GET", "/api/v1/minds/mind1"),
    ("PUT", "/api/v1/minds/mind1"), ("DELETE", "/api/v1/minds/mind2"),
    ("GET", "/api/v1/datasources"), ("POST", "/api/v1/datasources"),
    ("PUT", "/api/v1/datasources/ds1"), ("DELETE", "/api/v1/datasources/ds1"),
    ("POST", "/api/v1/chat/completions"), ("POST", "/api/v1/responses"),
    ("GET", "/limits/"), ("GET", "/api/limits"),
    ("GET", "/cloud/callback/model_status"), ("POST", "/cloud/callback/model_status"),
    ("PUT", "/cloud/callback/model_status/1"), ("GET", "/cloud/callback/model_status/1/deliveries"),
    ("GET", "/api/projects/%ff%fe/models"), ("GET", "/api/projects/" + "p" * 5000),
    ("PATCH", "/api/sql/query"), ("GET", "/api/projects/mindsdb/nothing/here"),
    ("GET", "/api/databases"), ("POST", "/api/databases"), ("POST", "/api/databases/status"),
    ("GET", "/api/databases/mindsdb"), ("PUT", "/api/databases/db1"),
    ("DELETE", "/api/databases/db2"), ("GET", "/api/databases/mindsdb/tables"),
    ("POST", "/api/databases/mindsdb/tables"), ("GET", "/api/databases/files/tables/t"),
    ("DELETE", "/api/databases/mindsdb/tables/t1"),
    ("GET", "/api/projects/mindsdb/views"), ("POST", "/api/projects/mindsdb/views"),
    ("PUT", "/api/projects/mindsdb/views/v1"), ("DELETE", "/api/projects/mindsdb/views/v2"),
    ("GET", "/api/tree"), ("GET", "/api/tree/mindsdb"), ("GET", "/api/util/ping_native"),
    ("POST", "/api/projects/mindsdb/chatbots"), ("GET", "/api/handlers"),
    ("GET", "/api/handlers/openai"), ("GET", "/api/projects/mindsdb/jobs"),
    ("POST", "/api/projects/mindsdb/jobs"), ("GET", "/api/projects/mindsdb/jobs/j1/history"),
    ("DELETE", "/api/projects/mindsdb/jobs/j1"),
    ("POST", "/api/sql/query/utils/parametrize_constants"),
    ("GET", "/api/config"), ("PUT", "/api/config"),
    ("POST", "/mcp/"), ("POST", "/mcp/"), ("POST", "/mcp/messages/"), ("GET", "/mcp/status"),
]

MCP_URIS = ["schema://databases", "schema://knowledge_bases", "schema://databases/mindsdb/tables",
            "schema://databases/mindsdb/tables/t/columns", "schema://databases/files/tables/f1/columns",
            "schema://databases/%2e%2e/tables", "schema://databases//tables", "schema://databases/"
            + "x" * 10**5 + "/tables", "schema://databases/mindsdb/tables/kb/columns"]


def route_template(rng: random.Random, method: str, path: str, ctx: dict) -> object:
    """A plausible body for the route, for mutations to start from."""
    sql = Sql(rng, ctx)
    messages = [{"role": "user", "content": sql.string().strip("'")}]
    if path.startswith("/mcp/"):
        method_name, params = rng.choice([
            ("tools/call", {"name": "query", "arguments": {"query": sql.statement()[1],
                                                           "context": {"db": "mindsdb"}}}),
            ("tools/call", {"name": "search_knowledge_base",
                            "arguments": {"knowledge_base": "kb", "query": sql.string().strip("'"),
                                          "limit": rng.choice([1, 10, 10**6, 2**63]),
                                          "filters": {"id": list(range(rng.choice([1, 100, 10**4])))}}}),
            ("tools/call", {"name": "ask_agent", "arguments": {"agent": "a", "question": "hi"}}),
            ("resources/read", {"uri": rng.choice(MCP_URIS)}),
            ("completion/complete", {"ref": {"type": "ref/prompt", "name": "sample_table"},
                                     "argument": {"name": "table_name", "value": sql.string().strip("'")},
                                     "context": {"arguments": {"database_name": "mindsdb"}}}),
            ("prompts/get", {"name": "sample_table",
                             "arguments": {"database_name": "mindsdb", "table_name": "x" * size(rng, 1, 10**5)}}),
            (rng.choice(["tools/list", "resources/list", "resources/templates/list", "prompts/list", "ping",
                         "notifications/initialized", "logging/setLevel"]), {}),
        ])
        message = {"jsonrpc": "2.0", "method": method_name, "params": params}
        if not method_name.startswith("notifications/"):
            message["id"] = rng.choice([1, "x", 2**70, -1])
        return message
    if path == "/api/sql/query/utils/parametrize_constants":
        return {"query": sql.statement()[1]}
    if path == "/api/config":
        return {"auth": {"http_auth_enabled": False},
                rng.choice(["default_llm", "default_embedding_model"]): rng.choice([
                    None, {"base_url": odd_url(rng, ctx), "api_key": "******"},
                    {"model_name": sql.string().strip("'"), "provider": "openai"}])}
    if path == "/api/sql/query":
        kind, query = sql.statement()
        body = {"query": query}
        if sql.params:
            body["params"] = sql.params
        if rng.random() < 0.3:
            body["response_format"] = rng.choice([None, "jsonlines", "sse", "xml"])
        if rng.random() < 0.2:
            body["context"] = {"db": rng.choice(["mindsdb", "files", "nope", "information_schema"])}
        if rng.random() < 0.2:
            body["timeout"] = rng.choice([0, 1, -1, 10**9, "1"])
        return body
    if path.endswith("/login"):
        return {"username": rng.choice([ATTACKER, "admin", "x" * 10**5]),
                "password": rng.choice(["x", "", "y" * 10**5])}
    if path.endswith("/agents"):
        return {"agent": {"name": f"ax{rng.randint(0, 3)}",
                          "model": {"provider": "openai", "model_name": "m", "api_key": "k",
                                    "base_url": odd_url(rng, ctx)},
                          "data": {"tables": ["mindsdb.t"], "knowledge_bases": ["mindsdb.kb"]},
                          "prompt_template": "answer"}}
    if "/completions" in path:
        copies = sql.afford([1, 1, 100, 10**4], per=len(json.dumps(messages)))
        return {"messages": messages * copies}
    if path.endswith("/knowledge_bases"):
        return {"knowledge_base": {"name": f"kb{rng.randint(0, 3)}",
                                   "embedding_model": sql.embedding_model(),
                                   "params": {"preprocessing": sql.chunking()}}}
    if "/knowledge_bases/" in path:
        roll = rng.random()
        if roll < 0.4:
            length = sql.afford([4, 10**4, 10**6])
            rows = [{"id": i, "content": "x" * length}
                    for i in range(sql.afford([1, 10, 1000], per=length + 20))]
            return {"knowledge_base": {"rows": rows}}
        if roll < 0.8:
            return {"knowledge_base": {"query": sql.select(2)}}
        return {"knowledge_base": {"params": {"preprocessing": sql.chunking()}}}
    if path.endswith("/models"):
        return {"query": sql.model()}
    if path.endswith("/predict"):
        return {"data": [{"q": f"x{i}"} for i in range(rng.choice([1, 10, 1000, 10**5]))]}
    if "/minds" in path:
        return {"name": "mind1", "model_name": "fake-model", "provider": "openai",
                "datasources": [{"name": "ds1", "tables": ["t"]}],
                "parameters": {"prompt_template": "x"}}
    if "/datasources" in path:
        return {"name": "ds1", "engine": "postgres",
                "connection_data": {"host": rng.choice(["10.0.0.1", "127.0.0.1", "localhost"]),
                                    "port": rng.choice([5432, ctx["llm_port"]]),
                                    "database": "d", "user": "u", "password": "p"}}
    if path.endswith("/chat/completions"):
        return {"model": "mind1", "messages": messages, "stream": rng.random() < 0.5}
    if path.endswith("/responses"):
        return {"model": "mind1", "input": messages[0]["content"], "stream": rng.random() < 0.5}
    if "/callback/" in path:
        return {"url": odd_url(rng, ctx), "filter": {"model_name": sql.regex()},
                "attempt": {"count": rng.choice([1, 0, 10**9]), "interval": 1, "http_timeout": 1}}
    return {}


def random_json(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([None, True, 0, -1, 2**64, 1e308, 1.5, "", "x", "x" * 1000, [], {}])
    if roll < 0.7:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "name", "query", "rows", "params", "__proto__", "x" * 100]):
            random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def mutate(rng: random.Random, value, depth: int = 0):
    """The value with one random change somewhere inside: a wrong type, a huge array or
    string, deep nesting, an unknown key, a missing key."""
    if isinstance(value, dict) and value and rng.random() < 0.7 and depth < 5:
        key = rng.choice(list(value))
        changed = dict(value)
        roll = rng.random()
        if roll < 0.15:
            del changed[key]
        elif roll < 0.3:
            changed["unknown_" + str(rng.randint(0, 9))] = random_json(rng)
        else:
            changed[key] = mutate(rng, value[key], depth + 1)
        return changed
    if isinstance(value, list) and value and rng.random() < 0.5 and depth < 5:
        i = rng.randrange(len(value))
        return value[:i] + [mutate(rng, value[i], depth + 1)] + value[i + 1:]
    roll = rng.random()
    if roll < 0.25:
        return random_json(rng)
    if roll < 0.4:
        fits = max(1, CASE_BUDGET // max(1, len(json.dumps(value))))
        return [value] * min(rng.choice([1000, 10**5]), fits)
    if roll < 0.5:
        return "x" * rng.choice([10**5, 10**6, 10**7])
    if roll < 0.6:
        return rng.choice([2**63, -(2**63) - 1, 10**30, -1, 0, 0.5, float("1e308")])
    return value


def deep_json(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def json_case(rng: random.Random, ctx: dict) -> tuple[str, str, bytes, dict]:
    method, path = rng.choice(ROUTES)
    roll = rng.random()
    if roll < 0.1:
        body = deep_json(rng.choice([100, 10**4, 10**6]), rng.choice(["array", "object"]))
    elif roll < 0.15:
        body = rng.choice([b"", b"{", b"null", b"[]", b'"x"', b"\xff\xfe",
                           b"{" + b'"a":1,' * 10**5 + b'"a":2}',
                           b'{"query": "SELECT 1", "query": "SELECT 2"}', b"1e999999", b"-" * 1000])
    else:
        template = route_template(rng, method, path, ctx)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            template = mutate(rng, template)
        body = json.dumps(template).encode()
    content_type = "application/json" if rng.random() < 0.9 else rng.choice(
        ["text/plain", "application/x-www-form-urlencoded", "",
         "application/json; charset=latin-1"])
    headers = {"Content-Type": content_type} if content_type else {}
    if path.startswith("/mcp/") and rng.random() < 0.9:
        if path == "/mcp/messages/":
            path += "?session_id=" + ctx["mcp_session"]
        else:
            headers["Mcp-Session-Id"] = ctx["mcp_session"]
        if rng.random() < 0.2:
            headers["MCP-Protocol-Version"] = rng.choice(["2025-06-18", "1999-01-01", "x" * 1000])
    return method, path, body, headers


# Uploads.

def csv_body(rng: random.Random) -> bytes:
    shape = rng.randint(0, 8)
    if shape == 0:
        return b"a,b\n" + b"x" * rng.choice([10**6, 10**7, 3 * 10**7]) + b",1\n"
    if shape == 1:
        cols = rng.choice([1000, 10**4, 10**5])
        return (",".join(f"c{i}" for i in range(cols)) + "\n" + ",".join(["1"] * cols)
                + "\n").encode()
    if shape == 2:
        return b"n\n" + b"1\n" * rng.choice([10**5, 10**6, 10**7])
    if shape == 3:
        return b'a,b\n"' + b'""' * rng.choice([10**3, 10**6]) + b"\n"
    if shape == 4:
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([10, 1000, 10**5])))
    if shape == 5:
        return b"a,b\n1\n1,2,3\n,,\n\0\0\n"
    if shape == 6:
        return b"\xef\xbb\xbfa,a,a\n1,2,3\n"
    if shape == 7:
        return b""
    return b"a,b\n" + b"1,2\n" * 1000 + b"3\n"


def json_upload(rng: random.Random) -> bytes:
    shape = rng.randint(0, 5)
    if shape == 0:
        pad = "x" * rng.choice([1, 100])
        rows = rng.choice([10, 10**4, 10**5])
        return json.dumps([{"a": i, "b": pad} for i in range(rows)]).encode()
    if shape == 1:
        return deep_json(rng.choice([100, 10**5]), "array")
    if shape == 2:
        return json.dumps([{f"k{i}": i for i in range(rng.choice([1000, 10**5]))}]).encode()
    if shape == 3:
        return json.dumps([{"a": 1}, {"a": "x"}, {"a": [1, 2]}, {"b": {"c": None}}, 7]).encode()
    if shape == 4:
        return json.dumps({"not": "a list"}).encode()
    return json.dumps([{"s": "x" * 10**7}]).encode()


def parquet_upload(rng: random.Random) -> bytes:
    """A Parquet file of at most a few hundred KB whose page decodes to up to 2 GiB."""
    value_bytes, rows = rng.choice([(1, 10**4), (1000, 10**4),
                                    (1 << 20, rng.choice([64, 300, 900])), (16 << 20, 50),
                                    (256 << 20, 3), ((1 << 31) - 100, 1)])
    lie = rng.random()
    if lie < 0.6:
        return parquet_strings(value_bytes, rows)
    if lie < 0.75:
        return parquet_strings(value_bytes, rows, declared_rows=rng.choice([0, 1, 2**31 - 1]))
    if lie < 0.9:
        return parquet_strings(value_bytes, rows,
                               declared_page_bytes=rng.choice([0, 10, 2**31 - 1]))
    data = parquet_strings(value_bytes, rows)
    return parquet_strings(value_bytes, rows, truncate=rng.randint(0, len(data)))


def upload_case(rng: random.Random) -> tuple[str, bytes, dict]:
    name = f"/api/files/u{rng.randint(0, 3)}"
    kind = rng.choice(["csv", "csv", "json", "parquet", "parquet"])
    body = {"csv": csv_body, "json": json_upload, "parquet": parquet_upload}[kind](rng)
    content_type = {"csv": "text/csv", "json": "application/json",
                    "parquet": "application/vnd.apache.parquet"}[kind]
    if rng.random() < 0.15:
        content_type = rng.choice(["text/csv", "application/json", "application/vnd.apache.parquet",
                                   "application/octet-stream", "image/png"])
    if rng.random() < 0.25:
        boundary = "adversary-boundary"
        filename = rng.choice([f"f.{kind}", "f", "../../x.csv", "x" * 1000 + ".csv"])
        part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n")
        body = part.encode() + body + f"\r\n--{boundary}--\r\n".encode()
        content_type = f"multipart/form-data; boundary={boundary}"
    return name, body, {"Content-Type": content_type}


# Raw requests a web page (or a broken client) could send.

def raw_case(rng: random.Random, ctx: dict, key: str) -> tuple[str, bytes]:
    port = ctx["server_port"]
    query = rng.choice(["SELECT 1", "CREATE TABLE mindsdb.webpage (n INT)"])
    body = json.dumps({"query": query}).encode()
    sql = "POST /api/sql/query HTTP/1.1\r\n"
    auth = f"Authorization: Bearer {key}\r\n" if rng.random() < 0.7 else ""
    shape = rng.randint(0, 6)
    if shape == 0:
        head = f"{sql}Host: 127.0.0.1:{port}\r\n{auth}Content-Type: text/plain\r\n"
    elif shape == 1:
        head = f"{sql}Host: evil.example:{port}\r\n{auth}Content-Type: application/json\r\n"
    elif shape == 2:
        head = (f"{sql}Host: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n"
                f"{auth}Content-Type: application/json\r\n")
    elif shape == 3:
        head = f"{sql}Host: 127.0.0.1\r\n{auth}" + "X-A: b\r\n" * rng.choice([10, 200, 5000])
    elif shape == 4:
        host = "h" * rng.choice([10, 10**4, 10**5])
        head = f"GET /api/projects HTTP/1.1\r\nHost: {host}\r\n{auth}"
        body = b""
    elif shape == 5:
        head = (f"{sql}Host: 127.0.0.1\r\n{auth}Transfer-Encoding: chunked\r\n"
                "Content-Type: application/json\r\n\r\n")
        chunk_size = rng.choice(["ffffffffffffffff", "7fffffff", "-1", "0x10", "10"])
        return "chunked", head.encode() + chunk_size.encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    else:
        length = rng.choice(["-1", "1e3", "99999999999999999999", "1, 2"])
        head = f"{sql}Host: 127.0.0.1\r\n{auth}Content-Length: {length}\r\n\r\n"
        return "length", head.encode() + body
    return f"raw{shape}", (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def generate(seed: int, ctx: dict, key: str = "") -> Case:
    """The case of `seed`: the same request for the same seed and context."""
    rng = random.Random(seed)
    roll = rng.random()
    leave = rng.choice([0.2, 1.0, 3.0]) if rng.random() < 0.08 else None
    if roll < 0.55:
        sql = Sql(rng, ctx)
        kind, query = sql.statement()
        body = {"query": query}
        if sql.params:
            body["params"] = sql.params
        if rng.random() < 0.15:
            body["response_format"] = "jsonlines"
        return Case(seed, f"sql:{kind}", "POST", "/api/sql/query", json.dumps(body).encode(),
                    {"Content-Type": "application/json"}, leave_after=leave)
    if roll < 0.80:
        method, path, body, headers = json_case(rng, ctx)
        sends_body = method in ("POST", "PUT", "PATCH")
        return Case(seed, "route", method, path, body if sends_body else None, headers,
                    leave_after=leave)
    if roll < 0.94:
        path, body, headers = upload_case(rng)
        return Case(seed, "upload", "PUT", path, body, headers, leave_after=leave)
    kind, raw = raw_case(rng, ctx, key)
    return Case(seed, f"raw:{kind}", "RAW", "/", raw=raw)


# Judging answers.

def message_of(doc) -> str | None:
    """The error message in a JSON answer: problem+json's detail, a SQL error's message, an
    OpenAI-style error."""
    if not isinstance(doc, dict):
        return None
    for key in ("detail", "error_message", "message"):
        if isinstance(doc.get(key), str):
            return doc[key]
    error = doc.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    return None


def judge_answer(status: int, content_type: str, body: bytes, complete: bool) -> str | None:
    """What is wrong with an answer, or None."""
    try:
        doc = json.loads(body) if complete and body and "json" in content_type and \
            "jsonl" not in content_type else None
    except ValueError:
        doc = None
    detail = message_of(doc)
    if status == 500:
        return f"500: {body[:500]!r}"
    if status >= 500:
        if status == 503 and detail and re.search(r"\b(?:http|query)\.[a-z_]+", detail):
            return None
        if status == 502 and detail and detail.strip():
            return None
        # What this server does not serve (the chatbot routes) says so, naming why.
        if status == 501 and detail and "chat service" in detail:
            return None
        return f"{status} not allowed: {body[:500]!r}"
    if status >= 400:
        if not (detail and detail.strip()):
            return f"{status} without a message: {body[:500]!r}"
        return None
    if isinstance(doc, dict) and doc.get("type") == "error":
        if not (isinstance(doc.get("error_message"), str) and doc["error_message"].strip()):
            return f"SQL error without a message: {body[:500]!r}"
    if "text/event-stream" in content_type or "jsonl" in content_type:
        for line in body.split(b"\n"):
            line = line.strip()
            if line.startswith(b"data:"):
                line = line[5:].strip()
            if not line.startswith(b"{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (event.get("error") or event.get("type") == "error"):
                text = message_of(event) or event.get("error_message")
                if not (isinstance(text, str) and text.strip()):
                    return f"an error event without a message: {line[:300]!r}"
    return None


@dataclass
class Sent:
    """One case as sent (its seed and summary: the body is made again from the seed when
    needed, not kept) and what came of it."""
    seed: int
    summary: str
    worker: int
    sent: float  # seconds since the run started
    done: float = 0.0
    outcome: str = ""
    problem: str | None = None

    @staticmethod
    def of(case: Case, worker: int, at: float) -> "Sent":
        return Sent(case.seed, case.summary(200), worker, at)


def send(case: Case, arena: Arena, session: requests.Session,
         deadline: float) -> tuple[str, str | None]:
    """Sends the case as the attacker; returns (outcome, problem)."""
    if case.raw is not None:
        return send_raw(case, arena.server.port, deadline)
    headers = dict(case.headers)
    if case.authenticated:
        headers["Authorization"] = f"Bearer {arena.attacker}"
    leave = case.leave_after
    try:
        response = session.request(case.method, arena.server.url + case.path, data=case.body,
                                   headers=headers, stream=True,
                                   timeout=(10, leave if leave else deadline))
    except requests.Timeout:
        if leave:
            return "left before the answer", None
        return "no answer", f"no answer within {deadline} s"
    except requests.RequestException as e:
        return "no answer", f"no answer: {type(e).__name__}: {str(e)[:200]}"
    with response:
        started = time.monotonic()
        body, complete = b"", True
        try:
            for piece in response.iter_content(65536):
                body += piece
                spent = time.monotonic() - started
                if len(body) > READ_CAP or (leave and spent > leave) or spent > deadline:
                    complete = False
                    break
        except requests.RequestException as e:
            if leave:
                return f"{response.status_code}, left while reading", None
            return (f"{response.status_code} cut off",
                    f"answer cut off: {type(e).__name__}: {str(e)[:200]}")
    content_type = response.headers.get("content-type", "")
    problem = judge_answer(response.status_code, content_type, body, complete)
    return describe(response.status_code, content_type, body, complete), problem


def send_raw(case: Case, port: int, deadline: float) -> tuple[str, str | None]:
    try:
        with RawConnection(port, timeout=deadline) as conn:
            conn.send(case.raw)
            answer = conn.read_response()
    except ConnectionClosed:
        return "closed", None  # a request the server could not parse may simply be dropped
    except socket.timeout:
        return "no answer", f"no answer within {deadline} s"
    except (OSError, AssertionError, ValueError) as e:
        return "unreadable answer", f"unreadable answer: {type(e).__name__}: {str(e)[:200]}"
    content_type = answer.header("content-type") or ""
    problem = judge_answer(answer.status, content_type, answer.body, True)
    return describe(answer.status, content_type, answer.body, True), problem


def describe(status: int, content_type: str, body: bytes, complete: bool) -> str:
    try:
        one_document = complete and "json" in content_type and "jsonl" not in content_type
        doc = json.loads(body) if one_document else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("type") == "error":
        return f"{status} SQL error: {str(doc.get('error_message'))[:160]}"
    detail = message_of(doc)
    if status >= 400 and detail:
        return f"{status}: {detail[:160]}"
    return f"{status}{'' if complete else ' (stopped reading)'}"


# Running.

@dataclass
class Report:
    seed: int
    sent: list[Sent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    death: str | None = None
    watchdog: str = ""
    seconds: float = 0.0
    failing: list[Sent] = field(default_factory=list)
    # The case whose answer the server's death cut off (the last one sent when several were).
    died_during: Sent | None = None

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.death)

    @property
    def culprit(self) -> Sent | None:
        """The case to start from when looking for what failed."""
        return self.died_during or (self.failing[0] if self.failing else None)

    def preceding(self, failure: Sent, count: int = 20) -> list[Sent]:
        """The cases sent before `failure` finished, oldest first, `failure` last."""
        before = [s for s in self.sent if s.sent <= failure.done and s is not failure]
        return before[-count:] + [failure]

    def text(self, binary: str = "BIN") -> str:
        lines = [f"adversary seed {self.seed}: {len(self.sent)} cases in {self.seconds:.0f} s; "
                 f"{self.watchdog}"]
        if self.death:
            lines.append(f"THE SERVER DIED: {self.death}")
        for problem in self.problems[:10]:
            lines.append(f"PROBLEM: {problem}")
        if len(self.problems) > 10:
            lines.append(f"… and {len(self.problems) - 10} more problems")
        # After a death, other failures are mostly its consequences: show its context alone.
        contexts = [self.died_during] if self.died_during else self.failing[:3]
        for failure in contexts:
            lines.append(f"-- the cases sent before the one answered at +{failure.done:.1f} s, "
                         f"oldest first (each replayable with --replay SEED):")
            for s in self.preceding(failure):
                lines.append(f"  +{s.sent:6.1f}..{s.done:6.1f} s w{s.worker} {s.summary}"
                             f"\n      -> {s.outcome}" + (f"  !! {s.problem}" if s.problem else ""))
            seeds = ",".join(f"{s.seed:012x}" for s in self.preceding(failure))
            lines.append(f"  replay all: python tests/http/adversary.py --server {binary} "
                         f"--replay {seeds}")
        return "\n".join(lines)

    def finding(self) -> str:
        """What failed, without the numbers that differ from run to run (for grouping)."""
        what = self.death or (self.problems[0].split(" -> ", 1)[-1] if self.problems else "")
        return re.sub(r"\d+", "N", what)[:160]


def server_gone(server: Server, problem: str | None) -> bool:
    """Whether the server died, given what went wrong with a request: a lost connection may
    come a moment before the exit of a server that aborts."""
    lost = problem is not None and any(mark in problem for mark in
                                       ("no answer", "cut off", "unreadable"))
    return server.exited_within(3) if lost else not server.running


def run(arena: Arena, seed: int, *, cases: int | None = None, seconds: float | None = None,
        workers: int = 2, max_problems: int = 3, skip: tuple[str, ...] = (),
        log=None) -> Report:
    """Sends cases from `workers` threads until `cases` are sent or `seconds` pass, with the
    watchdog running; stops early when the server dies, the watchdog is not answered in
    time, or `max_problems` answers were wrong (later cases would mostly report the same
    stall again). Cases whose kind starts with one of `skip` are drawn but not sent (to look
    past a known failure; the other cases stay those of the seed). Returns what happened."""
    assert cases is not None or seconds is not None
    report = Report(seed)
    started = time.monotonic()
    deadline = STATEMENT_TIMEOUT + CLIENT_GRACE
    lock = threading.Lock()
    counter = iter(range(cases if cases is not None else 1 << 62))
    stop = threading.Event()
    ctx = arena.context()

    def worker(w: int) -> None:
        rng = random.Random(f"{seed}/{w}")
        session = requests.Session()
        while not stop.is_set():
            with lock:
                if next(counter, None) is None:
                    return
            if seconds is not None and time.monotonic() - started > seconds:
                return
            if arena.watchdog.failures() or len(report.problems) >= max_problems:
                stop.set()
                return
            case = generate(rng.getrandbits(48), ctx, arena.attacker)
            if case.kind.startswith(skip):
                continue
            sent = Sent.of(case, w, time.monotonic() - started)
            with lock:
                report.sent.append(sent)
            sent.outcome, sent.problem = send(case, arena, session, deadline)
            sent.done = time.monotonic() - started
            dead = server_gone(arena.server, sent.problem)
            if dead:
                sent.problem = None  # the death is the finding, not what it did to this request
            if log:
                log(f"+{sent.done:6.1f} w{w} {case.summary(120)} -> {sent.outcome}"
                    + (f" !! {sent.problem}" if sent.problem else ""))
            with lock:
                if sent.problem:
                    report.failing.append(sent)
                    report.problems.append(f"{case.summary(300)} -> {sent.problem}")
                if dead and (report.died_during is None or report.died_during.sent < sent.sent):
                    report.died_during = sent
            if dead:
                stop.set()
                return
            arena.llm.forget()  # nothing reads them; a long run would keep every prompt

    arena.watchdog.start()
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(worker, w) for w in range(workers)]:
                future.result()
    finally:
        arena.watchdog.stop()
    finish(arena, report, started)
    return report


def finish(arena: Arena, report: Report, started: float) -> None:
    """The run's end: how the server is, the watchdog's failures (with the attacker's cases
    running at the time) and its rows."""
    report.seconds = time.monotonic() - started
    report.death = arena.server.death()
    report.watchdog = arena.watchdog.summary()
    for stalled in arena.watchdog.failures():
        at = stalled.started - started
        during = [s for s in report.sent
                  if s.sent <= at + stalled.seconds and (s.done or 1e9) >= at]
        report.problems.append(f"watchdog {stalled.what} at +{at:.1f} s: {stalled.problem}; "
                               f"attacker cases running then: "
                               + "; ".join(s.summary[:100] for s in during[:4]))
        if during and during[0] not in report.failing:
            report.failing.append(during[0])
    if report.death is None:
        try:
            arena.watchdog.check_rows()
        except (AssertionError, requests.RequestException) as e:
            report.problems.append(f"watchdog rows: {e}")


# Replaying and shrinking.

def replay(arena: Arena, seeds: list[int], concurrent: bool = False, log=None) -> Report:
    """Sends these cases (in order, or all at once) with the watchdog running."""
    report = Report(0)
    started = time.monotonic()
    ctx = arena.context()
    deadline = STATEMENT_TIMEOUT + CLIENT_GRACE
    lock = threading.Lock()

    def one(seed: int, w: int) -> None:
        case = generate(seed, ctx, arena.attacker)
        sent = Sent.of(case, w, time.monotonic() - started)
        sent.outcome, sent.problem = send(case, arena, requests.Session(), deadline)
        sent.done = time.monotonic() - started
        dead = server_gone(arena.server, sent.problem)
        if dead:
            sent.problem = None
        if log:
            log(f"replay w{w} {case.summary(160)} -> {sent.outcome}"
                + (f" !! {sent.problem}" if sent.problem else ""))
        with lock:
            report.sent.append(sent)
            if sent.problem:
                report.problems.append(f"{case.summary(300)} -> {sent.problem}")
                report.failing.append(sent)
            if dead and report.died_during is None:
                report.died_during = sent

    arena.watchdog.start()
    try:
        if concurrent:
            with ThreadPoolExecutor(max_workers=len(seeds)) as pool:
                list(pool.map(lambda ws: one(ws[1], ws[0]), enumerate(seeds)))
        else:
            for seed in seeds:
                one(seed, 0)
                if not arena.server.running:
                    break
        time.sleep(0.5)
    finally:
        arena.watchdog.stop()
    finish(arena, report, started)
    return report


def signature(report: Report) -> str | None:
    """The class of a report's failure, to tell whether a replay reproduced it."""
    if report.death:
        return "death"
    for problem in report.problems:
        for mark in ("500", "not allowed", "without a message", "no answer", "cut off", "watchdog"):
            if mark in problem:
                return mark
    return "other" if report.problems else None


def fresh_replay(binary: Path, workdir: Path, seeds: list[int], concurrent: bool,
                 log=None) -> tuple[Report, list[str]]:
    """The cases replayed on a new server (under the memory limit) with a new fake
    provider; returns the report and the cases' summaries."""
    factory = ServerFactory(binary, workdir, memory_limit=MEMORY_LIMIT_MB << 20)
    try:
        with FakeLLM() as llm:
            arena = start_arena(factory, llm)
            report = replay(arena, seeds, concurrent, log)
            ctx = arena.context()
            return report, [generate(seed, ctx).summary(300) for seed in seeds]
    finally:
        for server in factory.servers:
            if server.running:
                server.process.kill()
                server.process.wait()


def shrink(binary: Path, workdir: Path, report: Report, budget: float, log=None) -> str:
    """The shortest sequence of the cases before the failure that reproduces it on a fresh
    server, found within `budget` seconds: each case alone that was still running when it
    happened, and each of the last four, then the last 2, 4, 8, … in order, then the last 2,
    4, 8 at once."""
    wanted = signature(report)
    culprit = report.culprit
    if wanted is None or culprit is None:
        return "nothing to shrink"
    preceding = report.preceding(culprit, 64)
    history = [s.seed for s in preceding]
    running = [s.seed for s in preceding if s.done >= culprit.done - 0.5]
    suspects = list(dict.fromkeys(list(reversed(running)) + list(reversed(history[-4:]))))
    attempts = [([seed], False) for seed in suspects]
    n = 2
    while n <= len(history):
        attempts.append((history[-n:], False))
        n *= 2
    attempts += [(history[-n:], True) for n in (2, 4, 8) if n <= len(history)]
    ends = time.monotonic() + budget
    for number, (seeds, concurrent) in enumerate(attempts):
        if time.monotonic() > ends:
            return f"not reproduced within the {budget:.0f} s budget ({number} sequences tried)"
        again, summaries = fresh_replay(binary, workdir / f"shrink{number}", seeds, concurrent, log)
        if signature(again) == wanted:
            how = "at once" if concurrent else "in order"
            listing = "\n".join(f"  {summary}" for summary in summaries)
            return (f"reproduced by {len(seeds)} case(s) sent {how} on a fresh server "
                    f"(--replay {','.join(f'{s:012x}' for s in seeds)}"
                    f"{' --concurrent' if concurrent else ''}): "
                    f"{again.death or again.problems[0]}\n{listing}")
    return "not reproduced by replaying the preceding cases (it depends on timing)"


# Standalone.

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the mindlite-server binary")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, help="stop after this many seconds")
    parser.add_argument("--cases", type=int, help="cases per run (default 200, or unbounded "
                                                  "with --seconds)")
    parser.add_argument("--keep-going", action="store_true",
                        help="after a failing run, start a fresh server with the next seed "
                             "(until --seconds), and list the distinct findings at the end")
    parser.add_argument("--skip", default="", help="comma-separated case kinds (or prefixes: "
                                                   "sql:union, upload) not to send")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-mb", type=int, default=MEMORY_LIMIT_MB)
    parser.add_argument("--replay", help="comma-separated case seeds (hex) to send instead")
    parser.add_argument("--concurrent", action="store_true", help="replay the cases all at once")
    parser.add_argument("--show", help="print the cases of these seeds (hex) and exit")
    parser.add_argument("--shrink-seconds", type=float, default=300)
    parser.add_argument("--quiet", action="store_true", help="no line per case")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    binary = Path(args.server).resolve()
    log = None if args.quiet else (lambda line: print(line, flush=True))
    if args.show:
        ctx = {"llm_port": 1, "server_port": 2}
        for text in args.show.split(","):
            print(generate(int(text, 16), ctx, "KEY").summary(5000))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="adversary-"))
    findings: dict[str, list[str]] = {}
    failed = False
    ends = time.monotonic() + args.seconds if args.seconds else None
    seed = args.seed
    try:
        while True:
            run_dir = workdir / f"seed{seed}"
            if args.replay:
                seeds = [int(s, 16) for s in args.replay.split(",")]
                report, _ = fresh_replay(binary, run_dir, seeds, args.concurrent, log)
            else:
                factory = ServerFactory(binary, run_dir, memory_limit=args.memory_mb << 20)
                with FakeLLM() as llm:
                    arena = start_arena(factory, llm)
                    print(f"seed {seed}: server pid {arena.server.pid} on {arena.server.url}, "
                          f"log {arena.server.log_path}", flush=True)
                    left = None if ends is None else max(1.0, ends - time.monotonic())
                    cases = args.cases if args.cases else (None if left else 200)
                    skip = tuple(kind for kind in args.skip.split(",") if kind)
                    report = run(arena, seed, cases=cases, seconds=left, workers=args.workers,
                                 skip=skip, log=log)
                    for server in factory.servers:
                        if server.running:
                            server.process.kill()
                            server.process.wait()
            print(report.text(str(binary)), flush=True)
            failed = failed or report.failed
            if report.failed and not args.replay and args.shrink_seconds > 0:
                shrunk = shrink(binary, run_dir, report, args.shrink_seconds, log)
                print(f"shrinking: {shrunk}", flush=True)
                findings.setdefault(report.finding(), []).append(f"seed {seed}: {shrunk}")
            seed += 1
            if not (args.keep_going and report.failed and ends and time.monotonic() < ends):
                break
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    if findings:
        print(f"\n{len(findings)} distinct finding(s):")
        for what, where in findings.items():
            print(f"* {what}\n  " + "\n  ".join(where))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
