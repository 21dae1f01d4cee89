#!/usr/bin/env python3
"""Hostile-tenant benchmark (run on demand by benches/hostile.sh, not in CI).

A hosted mindlite-server on 127.0.0.1 with two users of the same plan: `alice`, the second
tenant whose latency is measured, and `mallory`, who attacks. The server runs with the default
limits except `query.statement_timeout_secs = 5` (so runaway statements end within the run) and
one plan tier written out in full (`pro`, both users). `[llm]` points at a hostile fake provider
served by this script on 127.0.0.1 (raw byte replies, which tests/http/fake_llm.py has no reply
kind for).

  phase 1, idle:   alice alone, on one keep-alive connection: `SELECT 1` as fast as she can, every
                   10th request a one-row INSERT; each request's latency is recorded.
  phase 2, attack: the same loop while mallory, from another process, repeats every attack
                   until the phase ends: runaway recursive queries (answered, and abandoned after
                   0.5 s on a raw socket), memory-heavy sorts and aggregations, 2M-row CREATE OR
                   REPLACE TABLE writes, agents whose provider streams a tool-call index of
                   4,000,000,000,000 or answers 20 MB, a Parquet decompression bomb, slowloris
                   heads, 200 idle connections, endless bodies, SSRF attempts (callback, agent
                   base_url, CREATE DATABASE), a callback-registration flood and a logout flood
                   without credentials.

The server's VmRSS and VmHWM are sampled from /proc throughout (VmHWM is reset through
/proc/<pid>/clear_refs when the attack starts, so it is the attack's own peak). Prints a Markdown
table (alice's latencies idle and under attack, peak RSS, crashes), a table of the attack
outcomes and a line against the goals: alice's p99 under attack < 50 ms, peak RSS < 512 MiB,
no crash. Exits 0 when it measured (a missed goal is printed as MISSED), non-zero when the server
crashed, did not stop cleanly on SIGTERM, or the setup failed.

Usage: hostile_bench.py [BINARY] [--seconds N] [--attacks a,b,…] [--settle N] [--keep]
  BINARY     default target/release/mindlite-server
  --seconds  length of each phase (default 30)
  --attacks  only these of mallory's attacks (to find which one hurts); default all
  --settle   seconds watched after the attack for work still running (default 5)
  --keep     keep the work directory (data file, server log)
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
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

GOAL_P99_MS = 50.0
GOAL_PEAK_RSS_MIB = 512.0
WRITE_EVERY = 10  # alice's every 10th request is a one-row INSERT
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

# What the hostile provider answers, by the model name an agent asks for.
CRASH_FRAME = b'data: {"choices":[{"delta":{"tool_calls":[{"index":4000000000000}]}}]}\n\n'
HUGE_REPLY_BYTES = 20 * 1024 * 1024


# The hostile fake provider (runs in the main process, on its own threads).

class HostileLLM:
    """OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1: model "crash" gets the raw SSE
    stream of a tool call with index 4e12 (whether it asked to stream or not), "huge" a 20 MB
    reply, anything else a short text answer."""

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
                model = body.get("model", "")
                stream = bool(body.get("stream"))
                owner.requests[model] += 1
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


def config_text(llm, extra=""):
    return f"""\
edition = "hosted"
egress.allow = ["127.0.0.1:{llm.port}"]

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"

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
max_running_statements = 16
max_running_trainings = 4
max_callbacks = 100
max_pending_deliveries = 1000
"""


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
                     "--host", "127.0.0.1", "--port", str(self.port)],
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

CONFIG_KEY = re.compile(r"\b((?:query|http|llm|files|agents|hosted|egress|callbacks|datasources)\.[a-z_]+)")


def reason_of(message):
    """A short, groupable reason from an error message: the config key it names, else its gist."""
    if not message:
        return ""
    key = CONFIG_KEY.search(message)
    if key:
        return key.group(1)
    for gist in ("egress policy", "Resources exhausted", "Limit reached", "must either specify a row count"):
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


# Alice: the second tenant, one keep-alive connection, in her own process.

def alice(port, key, start_at, seconds, first_id, results):
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    select_ms, write_ms, errors = [], [], Counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
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
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
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
    def __init__(self, port, key, start_at, seconds, bomb_path):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.key = key
        self.auth = {"Authorization": f"Bearer {key}"}
        self.start_at = start_at
        self.deadline = start_at + seconds
        self.bomb_path = bomb_path
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

    def call(self, attack, session, method, path, **kwargs):
        """One request; its outcome recorded under `attack` (a timeout at the phase end is
        recorded as abandoned)."""
        started = time.monotonic()
        try:
            response = session.request(method, self.url + path, headers=self.auth,
                                       timeout=(5, self.remaining() + 1), **kwargs)
            self.record(attack, outcome_of(response), time.monotonic() - started)
            return response
        except requests.Timeout:
            self.record(attack, "abandoned at the phase end" if self.over() else "client timeout")
        except requests.RequestException as e:
            self.record(attack, f"connection error: {type(e).__name__}")
            time.sleep(0.05)
        return None

    def sql(self, attack, session, query):
        return self.call(attack, session, "POST", "/api/sql/query", json={"query": query})

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
                    readable, _, _ = select.select([sock], [], [], 0.5)
                    if readable:  # answered (refused) within 0.5 s
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
                    readable, _, _ = select.select([sock], [], [], 0)
                    if readable:
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
            readable, _, _ = select.select(list(opened), [], [], min(0.5, self.remaining()))
            for sock in readable:
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
                    readable, _, _ = select.select([sock], [], [], 0)
                    if readable:
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

    def callback_flood(self):
        with requests.Session() as s:
            while not self.over():
                self.call("callback registration flood", s, "POST", "/cloud/callback/model_status",
                          json={"url": "https://example.com/hook"})

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
}


def mallory(port, key, start_at, seconds, bomb_path, chosen, results):
    attacks = Attacks(port, key, start_at, seconds, bomb_path)
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


def setup_requests(server, keys):
    def must(response, what):
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{what}: {response.status_code} {response.text}")
        doc = response.json() if response.content else None
        if isinstance(doc, dict) and doc.get("type") == "error":
            raise RuntimeError(f"{what}: {doc}")
    alice_auth = {"Authorization": f"Bearer {keys['alice']}"}
    mallory_auth = {"Authorization": f"Bearer {keys['mallory']}"}
    must(requests.post(server.url + "/api/sql/query", headers=alice_auth, timeout=60,
                       json={"query": "CREATE TABLE mindsdb.notes (id INT, note TEXT)"}), "create mindsdb.notes")
    for name in ("crash", "huge"):
        must(requests.post(server.url + "/api/projects/mindsdb/agents", headers=mallory_auth, timeout=60,
                           json={"agent": {"name": name, "model": {"provider": "openai", "model_name": name,
                                                                   "api_key": "sk-mallory"}}}),
             f"create agent {name}")


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
    """Seconds of the phase alice spent in requests slower than the goal's p99, and how many."""
    slow = [ms for ms in result["select_ms"] + result["write_ms"] if ms > GOAL_P99_MS]
    return f"{sum(slow) / 1000:.2f} s of {result['elapsed']:.0f} s ({len(slow)} requests)"


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
    server = Server(binary, workdir, config_text(llm, options.query))
    sampler = None
    crashed = False
    try:
        keys = {}
        for name in ("mallory", "alice"):
            server.users("create", name, "--plan", "pro")
            keys[name] = server.users("key", name)["key"]
        bomb_path = os.path.join(workdir, "bomb.parquet")
        bomb_bytes = make_bomb(bomb_path)
        server.start()
        setup_requests(server, keys)
        sampler = Sampler(server)
        pid = server.process.pid

        idle = run_phase(ctx, "idle", sampler, options.seconds,
                         [(alice, (server.port, keys["alice"], 1_000_000))])[0]
        if not server.alive:
            raise RuntimeError("the server died during the idle phase")
        idle_rss = proc_status(pid)["VmRSS"]
        peak_reset = reset_peak(pid)

        results = run_phase(ctx, "attack", sampler, options.seconds,
                            [(alice, (server.port, keys["alice"], 2_000_000)),
                             (mallory, (server.port, keys["mallory"], bomb_path, chosen))])
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
            (f"alice's time in requests slower than {GOAL_P99_MS:g} ms", stalled(idle), stalled(attacked)),
            ("alice's failed requests", str(sum(idle["errors"].values())), str(sum(attacked["errors"].values()))),
            ("server RSS", f"{mib(idle_rss)} (at the end of the phase)",
             f"peak {mib(peak)}" + ("" if peak_reset else " (sampled every 20 ms)")),
            ("crashes", "0", "0" if not crashed else "1"),
        ]
        print(f"Hostile-tenant benchmark: {options.seconds:g} s per phase, {binary}, "
              f"statement_timeout_secs = 5, other limits default"
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
        print(f"- bomb file: {bomb_bytes:,} bytes, {BOMB_ROWS:,} rows of a 10 KiB string; "
              f"the hostile provider was asked {dict(llm.requests)}")
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

        p99 = percentile(attacked["select_ms"], 99)
        goals = [
            (f"second tenant `SELECT 1` p99 under attack {p99:.1f} ms < {GOAL_P99_MS:g} ms", p99 < GOAL_P99_MS),
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
