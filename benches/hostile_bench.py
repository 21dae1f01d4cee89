#!/usr/bin/env python3
"""Hostile-tenant benchmark (run on demand by benches/hostile.sh, not in CI).

A hosted mindlite-server on 127.0.0.1 with two users of the same plan: `alice`, the second
tenant whose latency is measured, and `mallory`, who attacks. The server runs with the default
limits except `query.statement_timeout_secs = 5` (so runaway statements end within the run) and
one plan tier written out in full (`pro`, both users; 32 statements at once and 200 callbacks,
so that every attack loop's statement runs rather than waiting behind the plan's cap). `[llm]`
and `[embedding]` point at a hostile fake provider served by this script on 127.0.0.1 (raw byte
replies, which tests/http/fake_llm.py has no reply kind for; embeddings of hashed words; a
model that answers after 8 s), `knowledge_bases.exact_below = 20` (so a search of mallory's
60-chunk knowledge base walks its graph) and `http.allowed_hosts` the local edition's names (so
DNS-rebinding requests meet the Host check the local edition has by default). Every request goes
to 127.0.0.1.

  phase 1, idle:   alice alone, on one keep-alive connection from 127.0.0.2 (another client
                   address than mallory's): `SELECT 1` as fast as she can, every 10th request a
                   one-row INSERT; each request's latency is recorded.
  phase 2, attack: the same loop while mallory, from another process, repeats every attack
                   until the phase ends (the --attacks name in brackets):
    the hostile-tenant suite's: runaway recursive queries [runaway], also abandoned after 0.5 s
      on a raw socket [runaway-gone]; memory-heavy sorts and aggregations [memory]; 2M-row
      CREATE OR REPLACE TABLE writes [write]; agents whose provider streams a tool-call index of
      4,000,000,000,000 or answers 20 MB [llm]; a Parquet bomb of 4M dictionary-coded 10 KiB
      strings [bomb]; slowloris heads [slowloris]; 200 idle connections [idle]; endless bodies
      [endless]; SSRF attempts: callback, agent base_url, CREATE DATABASE, a knowledge base's
      IP-literal embedding URL, an agent at the provider's host under another path [ssrf]; a
      callback-registration flood [callbacks] and a logout flood without credentials [logout];
    these (tests/http/test_attacks.py has each as a regression test):
      a KB search with LIMIT 10,000,000,000,000 on a KB of more than exact_below chunks
      [kb-limit]; a 100,000-value list parameter referenced 2,000 times as `IN :a`
      [list-param]; CREATE MODEL over 50 rows of repeat('x', 100000000) [model-rows]; four
      Parquet uploads at once whose one zstd page decodes to 900 MiB, footer honest
      [page-bomb]; `SELECT length(s)` over repeat('x', 500000000) twice at once [repeat]; one
      20 MB document into a KB with chunk_size = 1, by SQL and REST [chunks]; a 2M-row INSERT
      into a PRIMARY KEY table [keyed-insert]; CREATE INDEX over a 2M-row table
      [create-index]; model completions with 100 callbacks of costly filters registered
      [costly-callbacks]; four `SELECT 1, 1, …` of 30,000 columns at once [wide]; 1,030
      sockets from 127.0.0.3 that send nothing, topped up every 5 s as the server closes them
      [silent]; cross-origin text/plain POSTs, a foreign Origin and DNS-rebinding Host
      headers [web-page]; questions abandoned once the (8 s) provider has them, by a client
      that leaves and by a 1 s request timeout [abandoned]; a REST KB insert whose query
      computes for hours, a REST prediction of the 8 s provider and a training dropped while
      it runs [deadlines]; a flood of GET /api/status with wrong credentials [status-flood].
    and one-row ON CONFLICT DO UPDATE, OR REPLACE and DO NOTHING inserts into a 2M-row
      PRIMARY KEY table, which resolve against the whole table [upsert] (the engine's test:
      sql::dml, conflicting_inserts_resolve_before_the_writer_lock_…);
    and INSERT OVERWRITE, a DELETE with a subquery and TRUNCATE, in turn, of a 2M-row
      PRIMARY KEY table [replace] (sql::dml, rows_that_replace_a_table_land_…).

The server's VmRSS and VmHWM are sampled from /proc throughout (VmHWM is reset through
/proc/<pid>/clear_refs when the attack starts, so it is the attack's own peak). Prints a Markdown
table (alice's latencies idle and under attack, peak RSS, crashes), a table of the attack
outcomes and a line against the goals: alice's `SELECT 1` p99 under attack < 50 ms, her one-row
INSERT p99 under attack < 100 ms, server peak RSS < 512 MiB, no crash. Exits 0 when it measured
(a missed goal is printed as MISSED), non-zero when the server crashed, did not stop cleanly on
SIGTERM, or the setup failed.

Usage: hostile_bench.py [BINARY] [--seconds N] [--attacks a,b,…] [--settle N] [--keep]
                        [--plan-memory-mb N] [--query TOML]
  BINARY     default target/release/mindlite-server
  --seconds  length of each phase (default 30)
  --attacks  only these of mallory's attacks (to find which one hurts); default all
  --settle   seconds watched after the attack for work still running (default 5)
  --keep     keep the work directory (data file, server log)
  --plan-memory-mb  the plan's max_memory_mb (default 256): the server's peak follows it,
             since what each user's requests and statements hold counts toward it
  --query    more [query] settings, as TOML lines
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import io
import json
import math
import multiprocessing
import os
import re
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

GOAL_SELECT_P99_MS = 50.0
GOAL_INSERT_P99_MS = 100.0
GOAL_PEAK_RSS_MIB = 512.0
WRITE_EVERY = 10  # alice's every 10th request is a one-row INSERT
ALICE_ADDRESS = "127.0.0.2"  # another client address than mallory's (connection shares are per address)
# The silent sockets' own client address: the server closes an address's idle connections past its
# share, which from mallory's address would be her other attacks' kept-alive ones.
SILENT_ADDRESS = "127.0.0.3"
IDLE_CONNECTIONS = 200
SLOWLORIS_SOCKETS = 4
ENDLESS_BODIES = 3
ENDLESS_LENGTH = 50 * 1024 * 1024  # announced, never sent
BOMB_ROWS = 4_000_000  # of one 10 KiB string: 40 GB once decoded
LOG_TAIL_LINES = 60

# The attacks' statements.
RUNAWAY = "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n+1 FROM r) SELECT count(*) FROM r"
MEMORY_HEAVY = [
    # (label, statement). The brief's form: a top-1 over 50M random keys.
    ("top-1 of 50M random keys", "SELECT * FROM generate_series(1, 50000000) ORDER BY random() LIMIT 1"),
    # A full sort of 50M rows carrying a column: must spill under query.memory_limit_mb.
    ("full sort of 50M rows", "SELECT sum(v) FROM (SELECT value AS v, row_number() OVER (ORDER BY random()) AS rn "
                              "FROM generate_series(1, 50000000)) WHERE rn % 2 = 0"),
    # The same sort with no column but its key (the projection is empty).
    ("full sort of 50M rows, no column", "SELECT max(rn) FROM (SELECT row_number() OVER (ORDER BY random()) AS rn "
                                         "FROM generate_series(1, 50000000))"),
    # A hash aggregation with 50M groups.
    ("50M-group aggregation", "SELECT count(*) FROM (SELECT value, count(*) FROM generate_series(1, 50000000) "
                              "GROUP BY value)"),
]
LONG_WRITE = ("CREATE OR REPLACE TABLE mindsdb.big AS SELECT value AS id, repeat('x', 100) AS pad "
              "FROM generate_series(1, 2000000)")

# The attacks tests/http/test_attacks.py keeps as regression tests, sent as it sends them.
EXACT_BELOW = 20  # knowledge_bases.exact_below: searches of more chunks walk the HNSW graph
KB_DOCUMENTS = 60
KB_SEARCHES = [f"SELECT id FROM mindsdb.kb WHERE {condition} LIMIT 10000000000000"
               for condition in ("content = 'x'", "content = 'cats markets'",
                                 "content = 'cats' AND hybrid_search = true")]
LIST_PARAM_QUERY = "SELECT count(*) FROM mindsdb.kept WHERE " + " OR ".join(["n IN :a"] * 2000)
LIST_PARAM_VALUES = 100_000
MODEL_ROWS = ("CREATE MODEL mindsdb.{name} FROM mindsdb (SELECT repeat('x', 100000000) AS a, "
              "value AS y FROM generate_series(1, 50)) PREDICT y")
PAGE_BOMB_UPLOADS = 4  # at once: four aborted the server
PAGE_BOMB_VALUES = (1 << 20, 900)  # 900 values of 1 MiB in one zstd page: 35 KB on disk
REPEAT_HUGE = "SELECT length(s) FROM (SELECT repeat('x', 500000000) AS s FROM generate_series(1, 4))"
CHUNKS_SQL = "INSERT INTO mindsdb.tiny (id, content) VALUES ({id}, repeat('abcd ', 4000000))"
CHUNKS_DOCUMENT = "abcd " * 4_000_000  # 20 MB
KEYED_ROWS = 2_000_000
INDEXED_ROWS = 2_000_000
UPSERT_ROWS = 2_000_000
REPLACED_ROWS = 2_000_000
INDEXED_STEP = 200_000  # rows per setup statement (each within the 5 s deadline on a debug build)
COSTLY_FILTER = r"\w{1,20}"  # near the 1 MiB compiled-size limit of a callback filter
COSTLY_CALLBACKS = 100
WIDE_QUERY = "SELECT " + ", ".join(["1"] * 30_000)
WIDE_AT_ONCE = 4
SILENT_SOCKETS = 1030  # more than http.max_connections (1,024)
SLOW_REPLY_SECS = 8  # the "slow" model: past the 5 s statement deadline
ABANDON_AFTER_SECS = 1.0
# Work for hours that needs little memory: 10^10 pairs compared.
ENDLESS = ("SELECT count(*) AS c FROM generate_series(1, 100000) AS a "
           "CROSS JOIN generate_series(1, 100000) AS b WHERE a.value + b.value = 7")

# What the hostile provider answers, by the model name an agent asks for.
CRASH_FRAME = b'data: {"choices":[{"delta":{"tool_calls":[{"index":4000000000000}]}}]}\n\n'
HUGE_REPLY_BYTES = 20 * 1024 * 1024
EMBEDDING_DIMENSIONS = 64


# The hostile fake provider (runs in the main process, on its own threads).

def word_vector(text):
    """The fake embedding of `text`, as tests/http/fake_llm.py makes it: its words (over two
    letters) counted, each hashed (FNV-1a) to one of EMBEDDING_DIMENSIONS places."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
        if len(word) <= 2:
            continue
        h = 0xcbf29ce484222325
        for b in word.encode():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        vector[h % EMBEDDING_DIMENSIONS] += 1.0
    return vector


class HostileLLM:
    """OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1: model "crash" gets the raw SSE
    stream of a tool call with index 4e12 (whether it asked to stream or not), "huge" a 20 MB
    reply, "slow" a short text answer after SLOW_REPLY_SECS, anything else a short text answer
    at once. `POST /v1/embeddings` answers each input with its words hashed into
    EMBEDDING_DIMENSIONS places (texts sharing words are near); any other path (callback
    deliveries) an empty 200. `requests` counts completions by model and the rest by path."""

    def __init__(self):
        self.requests = Counter()
        huge_text = b"x" * HUGE_REPLY_BYTES
        self.huge_json = (b'{"id":"chatcmpl-huge","object":"chat.completion","choices":[{"index":0,'
                          b'"message":{"role":"assistant","content":"' + huge_text +
                          b'"},"finish_reason":"stop"}]}')
        self.huge_stream = (b'data: {"choices":[{"index":0,"delta":{"content":"' + huge_text +
                            b'"}}]}\n\n')
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60

            def do_POST(self):  # noqa: N802
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                except ValueError:
                    body = {}
                if not isinstance(body, dict):
                    body = {}
                path = self.path.split("?", 1)[0].rstrip("/")
                if path != "/v1/chat/completions":
                    owner.requests[path] += 1
                    try:
                        if path == "/v1/embeddings":
                            inputs = body.get("input") or []
                            inputs = [inputs] if isinstance(inputs, str) else inputs
                            data = [{"object": "embedding", "index": i, "embedding": word_vector(str(t))}
                                    for i, t in enumerate(inputs)]
                            reply = {"object": "list", "data": data, "model": body.get("model")}
                            self._raw(200, "application/json", [json.dumps(reply).encode()])
                        else:
                            self._raw(200, "application/json", [b"{}"])
                    except OSError:
                        self.close_connection = True
                    return
                model = body.get("model", "")
                stream = bool(body.get("stream"))
                owner.requests[model] += 1
                if model == "slow":
                    time.sleep(SLOW_REPLY_SECS)
                try:
                    if model == "crash":
                        self._raw(200, "text/event-stream", [CRASH_FRAME, b"data: [DONE]\n\n"])
                    elif model == "huge":
                        if stream:
                            self._raw(200, "text/event-stream", [owner.huge_stream, b"data: [DONE]\n\n"])
                        else:
                            self._raw(200, "application/json", [owner.huge_json])
                    elif stream:
                        chunk = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                                              "finish_reason": "stop"}]}
                        self._raw(200, "text/event-stream",
                                  [f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"])
                    else:
                        done = {"id": "chatcmpl-ok", "object": "chat.completion", "model": model,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                        self._raw(200, "application/json", [json.dumps(done).encode()])
                except OSError:
                    self.close_connection = True

            def _raw(self, status, content_type, frames):
                """Each frame its own HTTP chunk, flushed, as providers stream."""
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for frame in frames:
                    self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    super().handle()
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# The server.

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    """VmRSS and VmHWM in bytes, or None when the process is gone."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) * 1024
    except OSError:
        return None
    if "VmRSS" not in values:
        return None  # a zombie
    return values


def cpu_seconds(pid):
    """User + system CPU time the process has used, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def die_with_parent():
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def server_environment(workdir):
    """This environment without MINDLITE_* variables (the server reads them as configuration
    and refuses unknown ones); temporary files (spills, staged writes) in the work directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINDLITE_")}
    env["TMPDIR"] = os.path.join(workdir, "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def config_text(llm, extra="", plan_memory_mb=None):
    plan_memory = "" if plan_memory_mb is None else f"max_memory_mb = {plan_memory_mb}\n"
    return f"""\
edition = "hosted"

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"

[embedding]
model_name = "fake-embedder"
base_url = "{llm.base_url}"
api_key = "sk-embed"
timeout_secs = 5

[knowledge_bases]
exact_below = {EXACT_BELOW}

[http]
allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]

[query]
statement_timeout_secs = 5
{extra}

[hosted]
default_plan = "pro"

[hosted.plans.pro]
max_minds = 50
max_datasources = 50
questions_per_window = 100000
window_secs = 86400
callbacks = true
model_calls_per_window = 100000
max_running_statements = 32
max_running_trainings = 4
max_callbacks = 200
max_pending_deliveries = 1000
{plan_memory}"""


class Server:
    def __init__(self, binary, workdir, config):
        self.binary = binary
        self.workdir = workdir
        self.data = os.path.join(workdir, "db", "mindlite.redb")
        self.config = os.path.join(workdir, "config.toml")
        self.log = os.path.join(workdir, "server.log")
        with open(self.config, "w") as f:
            f.write(config)
        self.env = server_environment(workdir)
        self.process = None
        self.port = None

    def users(self, *args):
        done = subprocess.run([self.binary, "users", *args, "--data", self.data, "--config", self.config],
                              capture_output=True, text=True, timeout=60, env=self.env, cwd=self.workdir)
        if done.returncode != 0:
            raise RuntimeError(f"users {' '.join(args)} failed: {done.stderr}")
        return json.loads(done.stdout)

    def start(self):
        for _attempt in range(3):
            self.port = free_port()
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [self.binary, "--config", self.config, "--data", self.data,
                     "--host", "127.0.0.1", "--port", str(self.port), "--mysql-port", "0"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env,
                    cwd=self.workdir, preexec_fn=die_with_parent)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    if requests.get(self.url + "/api/util/ping", timeout=1).status_code == 200:
                        return
                except requests.RequestException:
                    pass
                time.sleep(0.05)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"the server did not answer /api/util/ping within 30 s\n{self.log_tail()}")
            if "cannot listen" not in self.log_tail():
                raise RuntimeError(f"the server exited with status {self.process.returncode} "
                                   f"during startup\n{self.log_tail()}")
        raise RuntimeError(f"the server could not bind a port\n{self.log_tail()}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self):
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines=LOG_TAIL_LINES):
        """The log's warnings, errors and panics, then its last lines."""
        try:
            with open(self.log, errors="replace") as f:
                text = f.read().splitlines()
        except OSError:
            text = []
        notable = [line for line in text if re.search(r"WARN|ERROR|panick|RUST_BACKTRACE", line)][-lines:]
        tail = text[-lines:]
        return (f"--- {self.log}: {len(notable)} warning/error/panic lines ---\n" + "\n".join(notable) +
                f"\n--- {self.log} (last {len(tail)} lines) ---\n" + "\n".join(tail))

    def stop(self):
        """SIGTERM; the exit status (None when it had to be killed after 60 s)."""
        if not self.alive:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


class Sampler:
    """Samples the server's VmRSS and VmHWM every 20 ms into the current phase's list and
    notices the moment the process exits."""

    def __init__(self, server):
        self.server = server
        self.phase = "setup"
        self.samples = defaultdict(list)  # phase -> [(VmRSS, VmHWM)]
        self.died_at = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.is_set():
            if not self.server.alive:
                if self.died_at is None:
                    self.died_at = (self.phase, time.monotonic())
            else:
                status = proc_status(self.server.process.pid)
                if status:
                    self.samples[self.phase].append((status["VmRSS"], status["VmHWM"]))
            self.stopping.wait(0.02)

    def stop(self):
        self.stopping.set()
        self.thread.join()


def reset_peak(pid):
    """Resets VmHWM to the current RSS (Linux: 5 > /proc/<pid>/clear_refs); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# Outcomes: a short name for what a request got back.

CONFIG_KEY = re.compile(r"\b((?:query|http|llm|embedding|knowledge_bases|files|agents|hosted|egress|callbacks|"
                        r"datasources)\.[a-z_]+)")


def reason_of(message):
    """A short, groupable reason from an error message: the config key it names, else its gist."""
    if not message:
        return ""
    key = CONFIG_KEY.search(message)
    if key:
        return key.group(1)
    for gist in ("egress policy", "Resources exhausted", "Limit reached", "must either specify a row count",
                 "Content-Type: application/json"):
        if gist in message:
            if gist == "Limit reached":
                return re.sub(r"\(limit.*", "", message).strip()
            return gist
    text = re.sub(r"\d+", "N", message)
    return text[:70]


def outcome_of(response):
    """`200`, `200 SQL error: <reason>`, `429 <reason>`… for a requests.Response."""
    status = response.status_code
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        if doc.get("type") == "error":
            return f"{status} SQL error: {reason_of(doc.get('error_message'))}"
        if status >= 400 and isinstance(doc.get("detail"), str):
            return f"{status} {reason_of(doc['detail'])}"
    if status == 200 and "text/event-stream" in response.headers.get("content-type", ""):
        errors = [line for line in response.text.split("\n") if line.startswith("data:") and '"error"' in line]
        if errors:
            try:
                return f"200 stream error event: {reason_of(json.loads(errors[0][5:]).get('error'))}"
            except ValueError:
                return "200 stream error event"
    return str(status)


def raw_request(method, path, key, body=b"", content_type="application/json", extra=""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}\r\n")
    return head.encode() + body


def first_line(data):
    line = data.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = line.split(" ", 2)
    return parts[1] if len(parts) > 1 and parts[0].startswith("HTTP/") else (line[:40] or "EOF")


def readable(socks, timeout):
    """Those of `socks` with something to read (or closed) within `timeout` seconds; poll(),
    not select(), since mallory's descriptors go past select's 1,024 while the silent sockets
    are open."""
    poller = select.poll()
    by_fd = {}
    for sock in socks:
        poller.register(sock.fileno(), select.POLLIN)
        by_fd[sock.fileno()] = sock
    return [by_fd[fd] for fd, _event in poller.poll(max(0, int(timeout * 1000)))]


def json_of(response):
    """The response's JSON document, or None."""
    if response is None:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def kb_search_outcome(response):
    """outcome_of, with whether an answered search kept within the knowledge base's size."""
    outcome = outcome_of(response)
    doc = json_of(response)
    if outcome == "200" and isinstance(doc, dict) and doc.get("type") == "table":
        rows = len(doc.get("data") or [])
        return f"200, {rows} rows (more than the KB holds)" if rows > KB_DOCUMENTS else f"200, ≤ {KB_DOCUMENTS} rows"
    return outcome


# Alice: the second tenant, one keep-alive connection from ALICE_ADDRESS, in her own process.

def alice(port, key, start_at, seconds, first_id, results):
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    select_ms, write_ms, errors = [], [], Counter()
    def connect():
        return http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(ALICE_ADDRESS, 0))

    conn = connect()
    select_body = json.dumps({"query": "SELECT 1"})
    next_id = first_id
    while time.monotonic() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    count = 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        count += 1
        is_write = count % WRITE_EVERY == 0
        if is_write:
            body = json.dumps({"query": f"INSERT INTO mindsdb.notes VALUES ({next_id}, 'x')"})
            next_id += 1
        else:
            body = select_body
        started = time.perf_counter()
        try:
            conn.request("POST", "/api/sql/query", body, headers)
            response = conn.getresponse()
            data = response.read()
            elapsed = (time.perf_counter() - started) * 1000
            ok = response.status == 200 and b'"type":"error"' not in data
            if not ok:
                errors[f"{response.status} {data[:120].decode(errors='replace')}"] += 1
        except (OSError, http.client.HTTPException) as e:
            elapsed = (time.perf_counter() - started) * 1000
            errors[f"connection: {type(e).__name__}: {e}"[:120]] += 1
            conn.close()
            conn = connect()
            if isinstance(e, ConnectionRefusedError):
                time.sleep(0.05)  # no server (it died): nothing to time
                continue
        # Every request's latency counts, failed ones included.
        (write_ms if is_write else select_ms).append(elapsed)
    conn.close()
    results.put({"select_ms": select_ms, "write_ms": write_ms, "errors": dict(errors),
                 "elapsed": time.monotonic() - start_at})


# Mallory: every attack in a loop on its own threads, in her own process.

class Attacks:
    def __init__(self, port, key, start_at, seconds, assets):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.key = key
        self.auth = {"Authorization": f"Bearer {key}"}
        self.start_at = start_at
        self.deadline = start_at + seconds
        self.bomb_path = assets["bomb"]
        self.page_bomb_path = assets["page_bomb"]
        self.llm_port = assets["llm_port"]
        self.lock = threading.Lock()
        self.outcomes = defaultdict(Counter)  # attack -> outcome -> count
        self.slowest = defaultdict(float)  # attack -> slowest answer, s
        self.counter = 0

    def over(self):
        return time.monotonic() >= self.deadline

    def remaining(self):
        return max(0.2, self.deadline - time.monotonic())

    def record(self, attack, outcome, seconds=None):
        with self.lock:
            self.outcomes[attack][outcome] += 1
            if seconds is not None:
                self.slowest[attack] = max(self.slowest[attack], seconds)

    def next_id(self):
        with self.lock:
            self.counter += 1
            return self.counter

    def call(self, attack, session, method, path, headers=None, outcome=outcome_of, **kwargs):
        """One request; its outcome (`outcome(response)`) recorded under `attack` (a timeout at
        the phase end is recorded as abandoned). `headers` join (or replace) the credentials."""
        started = time.monotonic()
        try:
            response = session.request(method, self.url + path, headers={**self.auth, **(headers or {})},
                                       timeout=(5, self.remaining() + 1), **kwargs)
            self.record(attack, outcome(response), time.monotonic() - started)
            return response
        except requests.Timeout:
            self.record(attack, "abandoned at the phase end" if self.over() else "client timeout")
        except requests.RequestException as e:
            self.record(attack, f"connection error: {type(e).__name__}")
            time.sleep(0.05)
        return None

    def sql(self, attack, session, query, outcome=outcome_of, **fields):
        """The SQL route with `query` (`fields` join the body: `params`, `timeout`)."""
        return self.call(attack, session, "POST", "/api/sql/query", outcome=outcome,
                         json={"query": query, **fields})

    def quiet_sql(self, session, query):
        """A statement whose outcome is not the attack's (setting up or cleaning after one);
        its answer document, or None."""
        try:
            response = session.post(self.url + "/api/sql/query", json={"query": query}, headers=self.auth,
                                    timeout=(5, self.remaining() + 10))
            return response.json()
        except (requests.RequestException, ValueError):
            return None

    def wait_model(self, session, name):
        """The model's [status, error] once complete or failed, or None at the phase end."""
        while not self.over():
            doc = self.quiet_sql(session, f"SELECT status, error FROM mindsdb.models WHERE name = '{name}'")
            rows = (doc or {}).get("data") or []
            if rows and rows[0][0] in ("complete", "error"):
                return rows[0]
            time.sleep(0.2)
        return None

    # The loops.

    def runaway(self):
        with requests.Session() as s:
            while not self.over():
                self.sql("runaway query", s, RUNAWAY)

    def runaway_gone(self):
        body = json.dumps({"query": RUNAWAY}).encode()
        while not self.over():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    sock.sendall(raw_request("POST", "/api/sql/query", self.key, body))
                    if readable([sock], 0.5):  # answered (refused) within 0.5 s
                        self.record("runaway query, client gone after 0.5 s",
                                    f"answered first: {first_line(sock.recv(4096))}")
                    else:
                        self.record("runaway query, client gone after 0.5 s", "sent, then closed")
            except OSError as e:
                self.record("runaway query, client gone after 0.5 s", f"connection error: {type(e).__name__}")
                time.sleep(0.05)

    def memory_heavy(self, offset):
        with requests.Session() as s:
            i = offset
            while not self.over():
                label, query = MEMORY_HEAVY[i % len(MEMORY_HEAVY)]
                i += 1
                self.sql(f"memory-heavy: {label}", s, query)

    def long_write(self):
        with requests.Session() as s:
            while not self.over():
                self.sql("long write (2M rows)", s, LONG_WRITE)

    def llm(self):
        asks = [("crash", "completions"), ("crash", "completions/stream"), ("huge", "completions"),
                ("huge", "completions/stream")]
        message = {"messages": [{"role": "user", "content": "hi"}]}
        with requests.Session() as s:
            i = 0
            while not self.over():
                agent, route = asks[i % len(asks)]
                i += 1
                self.call(f"LLM {agent} agent /{route}", s, "POST",
                          f"/api/projects/mindsdb/agents/{agent}/{route}", json=message)

    def bomb(self):
        with open(self.bomb_path, "rb") as f:
            data = f.read()
        headers = {"Content-Type": "application/vnd.apache.parquet"}
        with requests.Session() as s:
            s.headers.update(headers)
            while not self.over():
                self.call("Parquet bomb upload", s, "PUT", f"/api/files/bomb_{self.next_id()}", data=data)

    def slowloris(self):
        """A few sockets sending a request head one byte per 0.5 s; when the server closes one,
        what it answered and after how long is recorded, and a new one is opened."""
        head = (f"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.key}\r\n"
                "X-Slow: " + "a" * 100000).encode()
        socks = []
        while not self.over():
            while len(socks) < SLOWLORIS_SOCKETS:
                try:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    sock.setblocking(False)
                    socks.append([sock, 0, time.monotonic()])
                except OSError as e:
                    self.record("slowloris (1 byte / 0.5 s)", f"connect error: {type(e).__name__}")
                    break
            for entry in list(socks):
                sock, sent, opened = entry
                closed, answer = False, b""
                try:
                    if readable([sock], 0):
                        answer = sock.recv(4096)
                        closed = True
                    else:
                        sock.send(head[sent:sent + 1])
                        entry[1] += 1
                except OSError:
                    closed = True
                if closed:
                    sock.close()
                    socks.remove(entry)
                    self.record("slowloris (1 byte / 0.5 s)",
                                f"closed by server: {first_line(answer) if answer else 'no answer'}",
                                time.monotonic() - opened)
            time.sleep(0.5)
        for sock, _sent, _opened in socks:
            self.record("slowloris (1 byte / 0.5 s)", "still open at the phase end")
            sock.close()

    def idle_connections(self):
        """200 connections opened at the start and held, silent, for the whole phase; when the
        server closes one, what it answered and after how long is recorded."""
        attack = f"{IDLE_CONNECTIONS} idle connections"
        opened = {}
        for _ in range(IDLE_CONNECTIONS):
            try:
                opened[socket.create_connection(("127.0.0.1", self.port), timeout=5)] = time.monotonic()
            except OSError as e:
                self.record(attack, f"connect error: {type(e).__name__}")
        while opened and not self.over():
            for sock in readable(list(opened), min(0.5, self.remaining())):
                try:
                    data = sock.recv(4096)
                    outcome = f"closed by server: {first_line(data) if data else 'no answer'}"
                except OSError as e:
                    outcome = f"closed by server: {type(e).__name__}"
                self.record(attack, outcome, time.monotonic() - opened.pop(sock))
                sock.close()
        while not self.over():
            time.sleep(min(0.5, self.remaining()))
        for sock in opened:
            self.record(attack, "still open at the phase end")
            sock.close()

    def endless_bodies(self):
        """Heads announcing 50 MB, then 100 bytes of body every 0.5 s."""
        head = (f"PUT /api/files/endless_{{n}} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.key}\r\n"
                f"Content-Type: text/csv\r\nContent-Length: {ENDLESS_LENGTH}\r\n\r\na,b\n")
        attack = "endless body (50 MB announced, 200 B/s)"
        socks = []
        while not self.over():
            while len(socks) < ENDLESS_BODIES:
                try:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    sock.sendall(head.replace("{n}", str(self.next_id())).encode())
                    sock.setblocking(False)
                    socks.append((sock, time.monotonic()))
                except OSError as e:
                    self.record(attack, f"connect error: {type(e).__name__}")
                    break
            for entry in list(socks):
                sock, opened = entry
                closed, answer = False, b""
                try:
                    if readable([sock], 0):
                        answer = sock.recv(4096)
                        closed = True
                    else:
                        sock.send(b"1,2\n" * 25)
                except OSError:
                    closed = True
                if closed:
                    sock.close()
                    socks.remove(entry)
                    self.record(attack, f"closed by server: {first_line(answer) if answer else 'no answer'}",
                                time.monotonic() - opened)
            time.sleep(0.5)
        for sock, _opened in socks:
            self.record(attack, "still open at the phase end")
            sock.close()

    def ssrf(self):
        with requests.Session() as s:
            while not self.over():
                n = self.next_id()
                self.call("SSRF: callback to 169.254.169.254", s, "POST", "/cloud/callback/model_status",
                          json={"url": "http://169.254.169.254/latest/meta-data/"})
                self.call("SSRF: agent base_url 10.0.0.1", s, "POST", "/api/projects/mindsdb/agents",
                          json={"agent": {"name": f"ssrf_{n}", "model": {
                              "provider": "openai", "model_name": "x", "api_key": "sk",
                              "base_url": "http://10.0.0.1/v1"}}})
                self.sql("SSRF: CREATE DATABASE 127.0.0.1:1", s,
                         f"CREATE DATABASE ssrf_{n} WITH ENGINE = 'postgres', PARAMETERS = "
                         '{"host": "127.0.0.1", "port": 1, "database": "x", "user": "u", "password": "p"}')
                embedding = {"provider": "openai", "model_name": "e", "api_key": "k",
                             "base_url": "http://10.0.0.1/v1"}
                self.sql("SSRF: KB embedding base_url 10.0.0.1", s,
                         f"CREATE KNOWLEDGE_BASE mindsdb.ssrf_kb_{n} USING embedding_model = {json.dumps(embedding)}")
                # The configured provider's host and port, under another path than its URL's.
                made = self.call("SSRF: agent at the provider's host, other path", s, "POST",
                                 "/api/projects/mindsdb/agents",
                                 json={"agent": {"name": f"sideways_{n}", "model": {
                                     "provider": "openai", "model_name": "x", "api_key": "sk",
                                     "base_url": f"http://127.0.0.1:{self.llm_port}/elsewhere/v1"}}})
                if made is not None and made.status_code == 201:
                    self.call("SSRF: agent at the provider's host, other path (asked)", s, "POST",
                              f"/api/projects/mindsdb/agents/sideways_{n}/completions",
                              json={"messages": [{"role": "user", "content": "hi"}]})

    def callback_flood(self):
        # Hooks on the fake provider (under its configured path, so allowed): the model attacks'
        # status changes deliver to them, and nothing leaves 127.0.0.1.
        hook = f"http://127.0.0.1:{self.llm_port}/v1/flood"
        with requests.Session() as s:
            while not self.over():
                self.call("callback registration flood", s, "POST", "/cloud/callback/model_status",
                          json={"url": hook})

    def logout_flood(self):
        with requests.Session() as s:
            while not self.over():
                started = time.monotonic()
                try:
                    response = s.post(self.url + "/api/logout", timeout=(5, self.remaining() + 1),
                                      headers={"Authorization": f"Bearer bogus-{self.next_id()}"})
                    self.record("logout flood (bogus tokens)", outcome_of(response), time.monotonic() - started)
                except requests.RequestException as e:
                    self.record("logout flood (bogus tokens)", f"connection error: {type(e).__name__}")
                    time.sleep(0.05)

    # The attacks of tests/http/test_attacks.py.

    def kb_limit(self):
        with requests.Session() as s:
            i = 0
            while not self.over():
                query = KB_SEARCHES[i % len(KB_SEARCHES)]
                i += 1
                self.sql(f"KB search LIMIT 10^13 ({KB_DOCUMENTS} chunks > exact_below)", s, query,
                         outcome=kb_search_outcome)

    def list_param(self):
        body = json.dumps({"query": LIST_PARAM_QUERY, "params": {"a": list(range(LIST_PARAM_VALUES))}})
        with requests.Session() as s:
            while not self.over():
                self.call("list parameter of 100,000 values × 2,000 uses", s, "POST", "/api/sql/query",
                          data=body, headers={"Content-Type": "application/json"})

    def model_rows(self):
        attack = "CREATE MODEL over 50 rows of 100 MB"
        with requests.Session() as s:
            while not self.over():
                name = f"huge_{self.next_id()}"
                doc = json_of(self.sql(attack, s, MODEL_ROWS.format(name=name)))
                if isinstance(doc, dict) and doc.get("type") in ("ok", "table"):
                    status = self.wait_model(s, name)
                    if status is None:
                        self.record(f"{attack}: its training", "still training at the phase end")
                    else:
                        self.record(f"{attack}: its training",
                                    f"{status[0]}: {reason_of(status[1])}" if status[1] else status[0])
                self.quiet_sql(s, f"DROP MODEL IF EXISTS mindsdb.{name}")

    def page_bomb(self):
        with open(self.page_bomb_path, "rb") as f:
            data = f.read()
        with requests.Session() as s:
            while not self.over():
                self.call(f"Parquet page decoding to 900 MiB ({PAGE_BOMB_UPLOADS} at once)", s, "PUT",
                          f"/api/files/page_bomb_{self.next_id()}", data=data,
                          headers={"Content-Type": "application/vnd.apache.parquet"})

    def repeat_huge(self):
        with requests.Session() as s:
            while not self.over():
                self.sql("repeat('x', 500000000) × 4 rows (2 at once)", s, REPEAT_HUGE)

    def chunks(self):
        rest = json.dumps({"knowledge_base": {"rows": [{"id": 2, "content": CHUNKS_DOCUMENT}]}})
        with requests.Session() as s:
            i = 0
            while not self.over():
                i += 1
                if i % 2:
                    self.sql("KB of chunk_size 1, a 20 MB document (SQL)", s,
                             CHUNKS_SQL.format(id=self.next_id()))
                else:
                    self.call("KB of chunk_size 1, a 20 MB document (REST)", s, "PUT",
                              "/api/projects/mindsdb/knowledge_bases/tiny", data=rest,
                              headers={"Content-Type": "application/json"})
            doc = self.quiet_sql(s, "SELECT count(*) FROM mindsdb.tiny")
            rows = (doc or {}).get("data") if isinstance(doc, dict) else None
            self.record("KB of chunk_size 1: chunks stored at the phase end",
                        str(rows[0][0]) if rows else f"count failed: {str(doc)[:80]}")

    def keyed_insert(self):
        attack = f"{KEYED_ROWS // 1_000_000}M-row INSERT into a PRIMARY KEY table"
        with requests.Session() as s:
            while not self.over():
                self.quiet_sql(s, "DROP TABLE IF EXISTS mindsdb.keyed")
                made = self.quiet_sql(s, "CREATE TABLE mindsdb.keyed (id BIGINT PRIMARY KEY, v VARCHAR)")
                if not isinstance(made, dict) or made.get("type") == "error":
                    why = reason_of(made.get("error_message")) if isinstance(made, dict) else "no answer"
                    self.record(attack, f"CREATE TABLE before it failed: {why}")
                    time.sleep(0.5)
                    continue
                self.sql(attack, s, f"INSERT INTO mindsdb.keyed SELECT value, 'v' || value "
                                    f"FROM generate_series(1, {KEYED_ROWS})")

    def create_index(self):
        with requests.Session() as s:
            while not self.over():
                self.sql(f"CREATE INDEX over {INDEXED_ROWS // 1_000_000}M rows", s,
                         "CREATE INDEX indexed_s ON mindsdb.indexed (s)")
                self.quiet_sql(s, "DROP INDEX indexed_s")

    def upsert(self):
        """One-row inserts whose key may be taken: each reads every chunk of the 2M-row table
        to find the rows it conflicts with."""
        attack = f"one-row upserts into a {UPSERT_ROWS // 1_000_000}M-row keyed table"
        forms = [
            "INSERT INTO mindsdb.upserted VALUES ({k}, 1) ON CONFLICT (id) DO UPDATE SET v = upserted.v + 1",
            "INSERT OR REPLACE INTO mindsdb.upserted VALUES ({k}, 2)",
            "INSERT INTO mindsdb.upserted VALUES ({k}, 3) ON CONFLICT DO NOTHING",
        ]
        with requests.Session() as s:
            i = 0
            while not self.over():
                i += 1
                self.sql(attack, s, forms[i % len(forms)].format(k=i % 1000))

    def replace(self):
        """Writes that replace every row of a 2M-row keyed table: each used to remove the old
        rows' entries and write the new ones while holding the writer lock."""
        attack = f"whole-table replacements of a {REPLACED_ROWS // 1_000_000}M-row keyed table"
        forms = [
            f"INSERT OVERWRITE mindsdb.replaced SELECT value, value % 7 FROM generate_series(1, {REPLACED_ROWS})",
            "DELETE FROM mindsdb.replaced WHERE id IN (SELECT value FROM generate_series(1, 10))",
            "TRUNCATE TABLE mindsdb.replaced",
        ]
        with requests.Session() as s:
            i = 0
            while not self.over():
                self.sql(attack, s, forms[i % len(forms)])
                i += 1

    def costly_callbacks(self):
        attack = f"model completions, {COSTLY_CALLBACKS} callbacks of costly filters"
        with requests.Session() as s:
            while not self.over():
                name = f"done_{self.next_id()}"
                started = time.monotonic()
                doc = json_of(self.sql(attack, s, f"CREATE MODEL mindsdb.{name} PREDICT answer USING "
                                                  "engine = 'openai', prompt_template = 'say {{q}}'"))
                if isinstance(doc, dict) and doc.get("type") in ("ok", "table"):
                    status = self.wait_model(s, name)
                    self.record(f"{attack}: model status", status[0] if status else "not complete at the phase end",
                                time.monotonic() - started if status else None)
                self.quiet_sql(s, f"DROP MODEL IF EXISTS mindsdb.{name}")

    def wide(self):
        with requests.Session() as s:
            while not self.over():
                self.sql(f"SELECT 1, 1, … of 30,000 columns ({WIDE_AT_ONCE} at once)", s, WIDE_QUERY)

    def silent_sockets(self):
        """SILENT_SOCKETS connections from SILENT_ADDRESS that send nothing, topped up every 5 s
        as the server closes them (each past the address's share takes the place of one of its
        own); when the server closes one, what it answered and after how long is recorded."""
        attack = f"{SILENT_SOCKETS:,} silent sockets"
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = SILENT_SOCKETS + 1024
        if soft < want:
            limit = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        opened = {}
        topped = 0.0
        while not self.over():
            if time.monotonic() - topped >= 5:
                topped = time.monotonic()
                while len(opened) < SILENT_SOCKETS and not self.over():
                    try:
                        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                        source_address=(SILENT_ADDRESS, 0))
                        opened[sock] = time.monotonic()
                    except OSError as e:
                        self.record(attack, f"connect error: {type(e).__name__}")
                        break
            for sock in readable(list(opened), min(0.5, self.remaining())):
                try:
                    data = sock.recv(4096)
                    outcome = f"closed by server: {first_line(data) if data else 'no answer'}"
                except OSError as e:
                    outcome = f"closed by server: {type(e).__name__}"
                self.record(attack, outcome, time.monotonic() - opened.pop(sock))
                sock.close()
        for sock in opened:
            self.record(attack, "still open at the phase end")
            sock.close()

    def web_page(self):
        """What a page the user visits could make a browser send (with mallory's key, so that
        only the Content-Type, Origin and Host checks stand between them and the statement)."""
        foreign_host = f"evil.example:{self.port}"
        with requests.Session() as s:
            while not self.over():
                n = self.next_id()
                self.call("web page: text/plain POST of SQL", s, "POST", "/api/sql/query",
                          data=json.dumps({"query": f"CREATE TABLE mindsdb.pwned_{n} (n INT)"}),
                          headers={"Content-Type": "text/plain"})
                self.call("web page: foreign Origin", s, "POST", "/api/sql/query",
                          data=json.dumps({"query": f"CREATE TABLE mindsdb.crossed_{n} (n INT)"}),
                          headers={"Content-Type": "application/json", "Origin": "http://evil.example"})
                self.call("web page: DNS-rebinding Host (POST)", s, "POST", "/api/sql/query",
                          data=json.dumps({"query": f"CREATE TABLE mindsdb.rebound_{n} (n INT)"}),
                          headers={"Content-Type": "application/json", "Host": foreign_host})
                self.call("web page: DNS-rebinding Host (GET)", s, "GET", "/api/projects",
                          headers={"Host": foreign_host})
            doc = self.quiet_sql(s, "SHOW TABLES FROM mindsdb")
            if isinstance(doc, dict) and doc.get("type") == "table":
                ran = [row[0] for row in doc["data"] if re.match(r"(pwned|crossed|rebound)_", str(row[0]))]
                self.record("web page: statements that ran anyway", f"{len(ran)} tables made")

    def abandoned(self):
        """Questions to the agent whose provider answers after SLOW_REPLY_SECS: a client that
        leaves after ABANDON_AFTER_SECS (the provider has been called by then), and a SQL question
        with a request timeout of 1 s. Whether they were charged: GET /limits/, in the report."""
        body = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()
        left = f"question, client gone after {ABANDON_AFTER_SECS:g} s"
        with requests.Session() as s:
            i = 0
            while not self.over():
                i += 1
                if i % 2:
                    try:
                        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                            sock.sendall(raw_request("POST", "/api/projects/mindsdb/agents/slow/completions",
                                                     self.key, body))
                            if readable([sock], ABANDON_AFTER_SECS):
                                self.record(left, f"answered first: {first_line(sock.recv(4096))}")
                            else:
                                self.record(left, "sent, then closed")
                    except OSError as e:
                        self.record(left, f"connection error: {type(e).__name__}")
                        time.sleep(0.05)
                else:
                    self.sql("question, SQL with a 1 s request timeout", s,
                             "SELECT answer FROM mindsdb.slow WHERE question = 'hello'", timeout=1)

    def deadlines(self):
        kb_insert = {"knowledge_base": {"query": f"SELECT c AS id, 'text' AS content FROM ({ENDLESS})"}}
        with requests.Session() as s:
            i = 0
            while not self.over():
                step = i % 3
                i += 1
                if step == 0:
                    self.call("REST KB insert of an endless query", s, "PUT",
                              "/api/projects/mindsdb/knowledge_bases/kb", json=kb_insert)
                elif step == 1:
                    self.call(f"REST prediction, provider answers after {SLOW_REPLY_SECS} s", s, "POST",
                              "/api/projects/mindsdb/models/slowm/predict", json={"data": [{"q": "x"}]})
                else:
                    name = f"endless_{self.next_id()}"
                    doc = json_of(self.sql("training over an endless query", s,
                                           f"CREATE MODEL mindsdb.{name} FROM mindsdb "
                                           f"(SELECT c % 7 AS x, c AS y FROM ({ENDLESS})) PREDICT y"))
                    if isinstance(doc, dict) and doc.get("type") in ("ok", "table"):
                        time.sleep(1)
                        self.sql("DROP MODEL of a model in training", s, f"DROP MODEL mindsdb.{name}")

    def status_flood(self):
        with requests.Session() as s:
            while not self.over():
                self.call("GET /api/status with wrong credentials", s, "GET", "/api/status",
                          headers={"Authorization": f"Bearer mlk_guess{self.next_id()}"})


# Each attack's name (for --attacks) and its loops, each loop one thread.
ATTACKS = {
    "runaway": lambda a: [a.runaway, a.runaway],
    "runaway-gone": lambda a: [a.runaway_gone],
    "memory": lambda a: [lambda: a.memory_heavy(0), lambda: a.memory_heavy(2)],
    "write": lambda a: [a.long_write],
    "llm": lambda a: [a.llm],
    "bomb": lambda a: [a.bomb],
    "slowloris": lambda a: [a.slowloris],
    "idle": lambda a: [a.idle_connections],
    "endless": lambda a: [a.endless_bodies],
    "ssrf": lambda a: [a.ssrf],
    "callbacks": lambda a: [a.callback_flood],
    "logout": lambda a: [a.logout_flood],
    "kb-limit": lambda a: [a.kb_limit],
    "list-param": lambda a: [a.list_param],
    "model-rows": lambda a: [a.model_rows],
    "page-bomb": lambda a: [a.page_bomb] * PAGE_BOMB_UPLOADS,
    "repeat": lambda a: [a.repeat_huge, a.repeat_huge],
    "chunks": lambda a: [a.chunks],
    "keyed-insert": lambda a: [a.keyed_insert],
    "create-index": lambda a: [a.create_index],
    "upsert": lambda a: [a.upsert],
    "replace": lambda a: [a.replace],
    "costly-callbacks": lambda a: [a.costly_callbacks],
    "wide": lambda a: [a.wide] * WIDE_AT_ONCE,
    "silent": lambda a: [a.silent_sockets],
    "web-page": lambda a: [a.web_page],
    "abandoned": lambda a: [a.abandoned],
    "deadlines": lambda a: [a.deadlines],
    "status-flood": lambda a: [a.status_flood],
}


def mallory(port, key, start_at, seconds, assets, chosen, results):
    attacks = Attacks(port, key, start_at, seconds, assets)
    loops = [loop for name in chosen for loop in ATTACKS[name](attacks)]
    while time.monotonic() < start_at:
        time.sleep(0.001)
    def guarded(loop):
        try:
            loop()
        except Exception as e:  # noqa: BLE001 (a bug here must show in the report, not end quietly)
            attacks.record("(mallory's own failures)", f"{type(e).__name__}: {e}"[:120])

    threads = [threading.Thread(target=guarded, args=(loop,), daemon=True) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, attacks.deadline + 15 - time.monotonic()))
    with attacks.lock:
        results.put({"outcomes": {k: dict(v) for k, v in attacks.outcomes.items()},
                     "slowest": dict(attacks.slowest),
                     "stuck_threads": sum(t.is_alive() for t in threads)})


# Setup done once.

def make_bomb(path):
    """A Parquet file of BOMB_ROWS copies of one 10 KiB string: dictionary-encoded and zstd, a few
    KiB on disk, 40 GB once decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    values = pa.DictionaryArray.from_arrays(pa.array(np.zeros(BOMB_ROWS, dtype=np.int32)),
                                            pa.array(["y" * 10240]))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"s": values}), buffer, use_dictionary=True, compression="zstd")
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
    return len(buffer.getvalue())


# A Parquet file written by hand, as tests/http/adversary.py writes it (pyarrow cannot write a
# 900 MiB page without holding it): one column, one zstd page of RLE blocks, an honest footer.

def _varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12


def _thrift_value(kind, value):
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


def _thrift_struct(*fields):
    out, last = bytearray(), 0
    for field_id, kind, value in fields:
        out.append(((field_id - last) << 4) | kind)
        out += _thrift_value(kind, value)
        last = field_id
    return bytes(out + b"\0")


def _zstd_runs(pieces):
    """A zstd frame of raw blocks (bytes) and RLE blocks ((byte, count): 4 bytes per 128 KiB)
    with its honest content size; returns it and that size."""
    block_max = 1 << 17
    blocks = []
    for piece in pieces:
        if isinstance(piece, bytes):
            blocks.append((0, len(piece), piece))  # the pieces given are a few bytes
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
    return bytes(out), size


def make_page_bomb(path):
    """A Parquet file of one required UTF8 column in one zstd page: 900 values of 1 MiB of 'x'.
    The page decodes to 900 MiB; the file is 35 KB; header and footer state the truth."""
    value_bytes, rows = PAGE_BOMB_VALUES
    page, page_bytes = _zstd_runs([struct.pack("<I", value_bytes), (ord("x"), value_bytes)] * rows)
    header = _thrift_struct(
        (1, _I32, 0),  # DATA_PAGE
        (2, _I32, page_bytes),
        (3, _I32, len(page)),
        (5, _STRUCT, ((1, _I32, rows), (2, _I32, 0), (3, _I32, 3), (4, _I32, 3))))
    chunk = header + page
    footer = _thrift_struct(
        (1, _I32, 1),
        (2, _LIST, (_STRUCT, [((4, _BINARY, "schema"), (5, _I32, 1)),
                              ((1, _I32, 6), (3, _I32, 0), (4, _BINARY, "blob"), (6, _I32, 0))])),
        (3, _I64, rows),
        (4, _LIST, (_STRUCT, [(
            (1, _LIST, (_STRUCT, [(
                (2, _I64, 4),
                (3, _STRUCT, ((1, _I32, 6), (2, _LIST, (_I32, [0, 3])),
                              (3, _LIST, (_BINARY, ["blob"])), (4, _I32, 6),
                              (5, _I64, rows), (6, _I64, len(header) + page_bytes),
                              (7, _I64, len(chunk)), (9, _I64, 4))),
            )])),
            (2, _I64, len(header) + page_bytes),
            (3, _I64, rows),
        )])),
        (6, _BINARY, "mindlite hostile bench"))
    data = b"PAR1" + chunk + footer + struct.pack("<I", len(footer)) + b"PAR1"
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def setup_requests(server, keys, chosen, llm):
    """What alice's loop and mallory's chosen attacks need, made before the idle phase."""
    def must(response, what):
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{what}: {response.status_code} {response.text[:500]}")
        doc = response.json() if response.content else None
        if isinstance(doc, dict) and doc.get("type") == "error":
            raise RuntimeError(f"{what}: {str(doc)[:500]}")
        return doc

    alice_auth = {"Authorization": f"Bearer {keys['alice']}"}
    mallory_auth = {"Authorization": f"Bearer {keys['mallory']}"}

    def sql(auth, query):
        return must(requests.post(server.url + "/api/sql/query", headers=auth, timeout=60, json={"query": query}),
                    query[:80])

    def post(path, body, what):
        return must(requests.post(server.url + path, headers=mallory_auth, timeout=60, json=body), what)

    def agent(name):
        post("/api/projects/mindsdb/agents",
             {"agent": {"name": name, "model": {"provider": "openai", "model_name": name, "api_key": "sk-mallory"}}},
             f"create agent {name}")

    def complete(name):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = sql(mallory_auth, f"SELECT status, error FROM mindsdb.models WHERE name = '{name}'")["data"]
            if rows and rows[0][0] in ("complete", "error"):
                if rows[0][0] != "complete":
                    raise RuntimeError(f"model {name}: {rows[0]}")
                return
            time.sleep(0.2)
        raise RuntimeError(f"model {name} did not complete within 60 s")

    sql(alice_auth, "CREATE TABLE mindsdb.notes (id INT, note TEXT)")
    if "llm" in chosen:
        for name in ("crash", "huge"):
            agent(name)
    if "list-param" in chosen:
        sql(mallory_auth, "CREATE TABLE mindsdb.kept (n INT, name VARCHAR)")
        sql(mallory_auth, "INSERT INTO mindsdb.kept VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    if "kb-limit" in chosen or "deadlines" in chosen:
        sql(mallory_auth, "CREATE KNOWLEDGE_BASE mindsdb.kb")
        sql(mallory_auth, "INSERT INTO mindsdb.kb (id, content) SELECT value, 'document ' || value || "
                          f"' about cats and markets' FROM generate_series(1, {KB_DOCUMENTS})")
    if "chunks" in chosen:
        sql(mallory_auth, 'CREATE KNOWLEDGE_BASE mindsdb.tiny USING preprocessing = {"text_chunking_config": '
                          '{"chunk_size": 1, "chunk_overlap": 0}}')
    if "create-index" in chosen:
        sql(mallory_auth, "CREATE TABLE mindsdb.indexed (id BIGINT, s VARCHAR)")
        for offset in range(0, INDEXED_ROWS, INDEXED_STEP):
            sql(mallory_auth, f"INSERT INTO mindsdb.indexed SELECT value + {offset}, "
                              f"'row ' || ((value + {offset}) % 100000) FROM generate_series(1, {INDEXED_STEP})")
    if "upsert" in chosen:
        sql(mallory_auth, "CREATE TABLE mindsdb.upserted (id BIGINT PRIMARY KEY, v BIGINT)")
        for offset in range(0, UPSERT_ROWS, INDEXED_STEP):
            sql(mallory_auth, f"INSERT INTO mindsdb.upserted SELECT value + {offset}, 0 "
                              f"FROM generate_series(1, {INDEXED_STEP})")
    if "replace" in chosen:
        sql(mallory_auth, "CREATE TABLE mindsdb.replaced (id BIGINT PRIMARY KEY, v BIGINT)")
        for offset in range(0, REPLACED_ROWS, INDEXED_STEP):
            sql(mallory_auth, f"INSERT INTO mindsdb.replaced SELECT value + {offset}, 0 "
                              f"FROM generate_series(1, {INDEXED_STEP})")
    if "costly-callbacks" in chosen:
        # Under the configured provider's path: only that prefix of its host is reachable.
        hook = f"http://127.0.0.1:{llm.port}/v1/hook"
        for i in range(COSTLY_CALLBACKS):
            post("/cloud/callback/model_status",
                 {"url": hook, "filter": {"model_name": COSTLY_FILTER, "project_name": COSTLY_FILTER}},
                 f"register costly callback {i}")
    if "abandoned" in chosen:
        agent("slow")
    if "deadlines" in chosen:
        sql(mallory_auth, "CREATE MODEL mindsdb.slowm PREDICT answer USING engine = 'openai', "
                          "model_name = 'slow', prompt_template = 'say {{q}}'")
        complete("slowm")


# Report.

def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)  # nearest rank
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def latency(values):
    if not values:
        return "no requests"
    return (f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f} / {max(values):.2f}")


def stalled(result):
    """Seconds of the phase alice spent in requests slower than their goal's p99 (`SELECT 1`s
    over GOAL_SELECT_P99_MS, INSERTs over GOAL_INSERT_P99_MS), and how many."""
    slow = ([ms for ms in result["select_ms"] if ms > GOAL_SELECT_P99_MS] +
            [ms for ms in result["write_ms"] if ms > GOAL_INSERT_P99_MS])
    return f"{sum(slow) / 1000:.2f} s of {result['elapsed']:.0f} s ({len(slow)} requests)"


def questions_used(server, key):
    """The questions charged to the user of `key` in the current window (GET /limits/), or None."""
    try:
        doc = requests.get(server.url + "/limits/", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
        return doc["questions"]["used"]
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def mib(value):
    return f"{value / 2**20:.1f} MiB"


def run_phase(ctx, name, sampler, seconds, target_args):
    """Runs alice (and mallory when `target_args` has her) from a common start; their results."""
    queue = ctx.Queue()
    start_at = time.monotonic() + 1.5  # spawned interpreters need a moment to import
    processes = []
    for target, args in target_args:
        process = ctx.Process(target=target, args=(*args[:2], start_at, seconds, *args[2:], queue), daemon=True)
        process.start()
        processes.append(process)
    while time.monotonic() < start_at:
        time.sleep(0.001)
    sampler.phase = name
    results = []
    deadline = start_at + seconds + 60
    while len(results) < len(processes):
        try:
            results.append(queue.get(timeout=max(0.1, deadline - time.monotonic())))
        except Exception:  # noqa: BLE001 (queue.Empty)
            raise RuntimeError(f"a client process of phase {name} did not report within 60 s of its end")
    sampler.phase = f"after {name}"
    for process in processes:
        process.join(timeout=10)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", nargs="?", default="target/release/mindlite-server")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase (default 30)")
    parser.add_argument("--attacks", default=",".join(ATTACKS),
                        help=f"comma-separated subset of mallory's attacks (default all: {','.join(ATTACKS)})")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds watched after the attack for work left running (default 5)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (server log, data)")
    parser.add_argument("--plan-memory-mb", type=int, default=None,
                        help="the users' plan's max_memory_mb (default: the plan default, 256)")
    parser.add_argument("--query", default="",
                        help="more [query] settings, as TOML lines (e.g. 'worker_threads = 4')")
    options = parser.parse_args()
    chosen = [name.strip() for name in options.attacks.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in ATTACKS]
    if unknown:
        parser.error(f"unknown attacks {unknown}; known: {', '.join(ATTACKS)}")
    binary = os.path.abspath(options.binary)
    if not os.access(binary, os.X_OK):
        sys.exit(f"no executable mindlite-server at {binary}")

    ctx = multiprocessing.get_context("spawn")
    workdir = tempfile.mkdtemp(prefix="mindlite-hostile-")
    llm = HostileLLM()
    server = Server(binary, workdir, config_text(llm, options.query, options.plan_memory_mb))
    sampler = None
    crashed = False
    try:
        keys = {}
        for name in ("mallory", "alice"):
            server.users("create", name, "--plan", "pro")
            keys[name] = server.users("key", name)["key"]
        assets = {"bomb": os.path.join(workdir, "bomb.parquet"),
                  "page_bomb": os.path.join(workdir, "page_bomb.parquet"), "llm_port": llm.port}
        bomb_bytes = make_bomb(assets["bomb"])
        page_bomb_bytes = make_page_bomb(assets["page_bomb"])
        server.start()
        setup_started = time.monotonic()
        setup_requests(server, keys, chosen, llm)
        setup_secs = time.monotonic() - setup_started
        sampler = Sampler(server)
        pid = server.process.pid

        idle = run_phase(ctx, "idle", sampler, options.seconds,
                         [(alice, (server.port, keys["alice"], 1_000_000))])[0]
        if not server.alive:
            raise RuntimeError("the server died during the idle phase")
        idle_rss = proc_status(pid)["VmRSS"]
        questions_before = questions_used(server, keys["mallory"])
        peak_reset = reset_peak(pid)

        results = run_phase(ctx, "attack", sampler, options.seconds,
                            [(alice, (server.port, keys["alice"], 2_000_000)),
                             (mallory, (server.port, keys["mallory"], assets, chosen))])
        attacked = next(r for r in results if "select_ms" in r)
        attack = next(r for r in results if "outcomes" in r)
        status = proc_status(pid) if server.alive else None
        attack_samples = sampler.samples["attack"] + sampler.samples["after attack"]
        sampled_peak = max((rss for rss, _ in attack_samples), default=0)
        peak = max(status["VmHWM"], sampled_peak) if (status and peak_reset) else sampled_peak

        # Whether the server is itself again: alice's SELECT 1 right after, and RSS once settled.
        after = None
        if server.alive:
            started = time.perf_counter()
            try:
                ok = requests.post(server.url + "/api/sql/query", json={"query": "SELECT 1"}, timeout=60,
                                   headers={"Authorization": f"Bearer {keys['alice']}"}).status_code == 200
            except requests.RequestException:
                ok = False
            after = ((time.perf_counter() - started) * 1000, ok)
        # Work left running after the attackers' clients went: server CPU seconds and RSS over
        # the settle time.
        cpu_before = cpu_seconds(pid)
        time.sleep(options.settle)
        settled = proc_status(pid)
        cpu_after = cpu_seconds(pid)
        busy = (cpu_after - cpu_before) if (cpu_before is not None and cpu_after is not None) else None
        questions_after = questions_used(server, keys["mallory"]) if server.alive else None
        sampler.stop()

        crashed = not server.alive
        exit_code = server.stop()
        if exit_code != 0 and not crashed:
            print(f"the server did not exit 0 on SIGTERM: "
                  f"{'killed after 60 s' if exit_code is None else f'status {exit_code}'}\n{server.log_tail()}")
        log_text = open(server.log, errors="replace").read()
        client_gone = log_text.count("(client gone)")
        panics = log_text.count("panicked")

        rows = [
            ("`SELECT 1` p50 / p99 / max (ms)", latency(idle["select_ms"]), latency(attacked["select_ms"])),
            ("`SELECT 1` requests/s", f"{len(idle['select_ms']) / idle['elapsed']:,.0f}",
             f"{len(attacked['select_ms']) / attacked['elapsed']:,.0f}"),
            ("one-row INSERT p50 / p99 / max (ms)", latency(idle["write_ms"]), latency(attacked["write_ms"])),
            (f"alice's time in requests slower than their goal ({GOAL_SELECT_P99_MS:g} / {GOAL_INSERT_P99_MS:g} ms)",
             stalled(idle), stalled(attacked)),
            ("alice's failed requests", str(sum(idle["errors"].values())), str(sum(attacked["errors"].values()))),
            ("server RSS", f"{mib(idle_rss)} (at the end of the phase)",
             f"peak {mib(peak)}" + ("" if peak_reset else " (sampled every 20 ms)")),
            ("crashes", "0", "0" if not crashed else "1"),
        ]
        print(f"Hostile-tenant benchmark: {options.seconds:g} s per phase, {binary}, "
              f"statement_timeout_secs = 5, exact_below = {EXACT_BELOW}, allowed_hosts the local names"
              + ("" if options.plan_memory_mb is None else f", plan max_memory_mb = {options.plan_memory_mb}")
              + ", other limits default"
              + ("" if len(chosen) == len(ATTACKS) else f"; attacks: {', '.join(chosen)}") + "\n")
        print("| measure | idle | under attack |\n|---|---|---|")
        for name, a, b in rows:
            print(f"| {name} | {a} | {b} |")
        print()
        print(f"| attack | requests | outcomes | slowest answer |\n|---|---|---|---|")
        for name in sorted(attack["outcomes"]):
            counts = attack["outcomes"][name]
            outcomes = ", ".join(f"{n}× {o}" for o, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            slowest = attack["slowest"].get(name)
            print(f"| {name} | {sum(counts.values())} | {outcomes} | "
                  f"{f'{slowest:.2f} s' if slowest is not None else ''} |")
        print()
        for phase, result in (("idle", idle), ("under attack", attacked)):
            for error, n in result["errors"].items():
                print(f"- alice's failure {phase}: {n}× {error}")
        print(f"- setup (mallory's tables, knowledge bases, callbacks, agents): {setup_secs:.1f} s; "
              f"bomb file: {bomb_bytes:,} bytes, {BOMB_ROWS:,} rows of a 10 KiB string; page bomb: "
              f"{page_bomb_bytes:,} bytes, one page of {PAGE_BOMB_VALUES[1]} × {PAGE_BOMB_VALUES[0]:,} bytes")
        print(f"- the hostile provider was asked (completions by model, the rest by path): {dict(llm.requests)}")
        if questions_before is not None and questions_after is not None:
            print(f"- mallory's questions charged during the attack (GET /limits/): "
                  f"{questions_after - questions_before}; her agents' provider calls: "
                  + ", ".join(f"{model} {llm.requests[model]}" for model in ("crash", "huge", "slow")))
        print(f"- server log: {client_gone} requests ended with the client gone, {panics} panics; "
              f"mallory's loops still busy 15 s after the phase: {attack['stuck_threads']}")
        if after:
            print(f"- alice's first `SELECT 1` after the attack: {after[0]:.1f} ms ({'ok' if after[1] else 'FAILED'}); "
                  f"in the {options.settle:g} s after it the server used "
                  f"{f'{busy:.1f} s of CPU' if busy is not None else 'n/a'}, RSS at their end "
                  f"{mib(settled['VmRSS']) if settled else 'n/a'}")
        if not crashed:
            print(f"- SIGTERM at the end: "
                  f"{'exit 0' if exit_code == 0 else ('killed after 60 s' if exit_code is None else f'exit {exit_code}')}")

        select_p99 = percentile(attacked["select_ms"], 99)
        insert_p99 = percentile(attacked["write_ms"], 99)
        goals = [
            (f"second tenant `SELECT 1` p99 under attack {select_p99:.1f} ms < {GOAL_SELECT_P99_MS:g} ms",
             select_p99 < GOAL_SELECT_P99_MS),
            (f"second tenant one-row INSERT p99 under attack {insert_p99:.1f} ms < {GOAL_INSERT_P99_MS:g} ms",
             insert_p99 < GOAL_INSERT_P99_MS),
            (f"peak RSS {peak / 2**20:.0f} MiB < {GOAL_PEAK_RSS_MIB:g} MiB", peak / 2**20 < GOAL_PEAK_RSS_MIB),
            (f"crashes {int(crashed)} = 0", not crashed),
        ]
        print("\nGoals: " + "; ".join(f"{text}: {'met' if met else 'MISSED'}" for text, met in goals))
        if crashed:
            phase, _ = sampler.died_at or ("?", 0)
            print(f"\nthe server died (phase: {phase}, exit status {server.process.returncode})\n{server.log_tail()}")
            return 1
        return 0 if exit_code == 0 else 1
    except RuntimeError as e:
        if sampler is not None:
            sampler.stop()
        if server.process is not None and not server.alive:
            print(f"the server died (exit status {server.process.returncode})\n{server.log_tail()}")
        else:
            print(f"setup failed: {e}")
        return 1
    finally:
        if server.alive:
            server.stop()
        llm.stop()
        if options.keep:
            print(f"(work directory kept: {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
