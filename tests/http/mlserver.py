"""Running the real `mindlite-server` binary, reading MindsDB captures, and raw HTTP/1.1.

Every server gets its own data file under pytest's tmp_path, a free port on 127.0.0.1 and a log
file with its stderr; a failing test prints the logs of the servers it used. Teardown stops each
server with SIGTERM and requires exit status 0 within STOP_TIMEOUT seconds.

The binary is `$MLSERVER_BIN` if set, else `<repo>/target/debug/mindlite-server`.

A server may run under a memory limit (`memory_limit`, RLIMIT_AS as `prlimit --as` sets it):
an allocation past it fails inside the server, which then aborts, so a request that would
exhaust the machine fails its test (`Server.death()` says how the process ended) instead of
reaching the kernel's OOM killer.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
# MindsDB 26.1 captures of the SQL route, shared with the engine's own wire tests.
CORE_CAPTURES = REPO_ROOT / "core" / "tests" / "captures"
# Captures of the other routes, copied from the MindsDB captures `docs/mindsdb-wire.md` names.
HTTP_CAPTURES = Path(__file__).resolve().parent / "captures"

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
LOG_TAIL_LINES = 200

# The address space a server under a memory limit may map, in MiB: room for the debug build's
# normal work (its threads' stacks and allocator arenas included; idle it maps about 200 MiB),
# far below the machine's memory. MLSERVER_MEMORY_LIMIT_MB changes it.
MEMORY_LIMIT_MB = int(os.environ.get("MLSERVER_MEMORY_LIMIT_MB", "3072"))
# What the Rust runtime prints when it gives up, for `Server.death()`.
FATAL_LINE = re.compile(r"memory allocation of \d+ bytes failed|panicked at|fatal runtime error|"
                        r"thread caused non-unwinding panic|stack overflow|SIGSEGV|Aborted")

AUTH_CONFIG = """\
[auth]
username = "admin"
password = "secret"
"""


def server_binary() -> Path:
    configured = os.environ.get("MLSERVER_BIN")
    path = Path(configured) if configured else REPO_ROOT / "target" / "debug" / "mindlite-server"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"mindlite-server binary not found at {path}: build it first with "
            "`cargo build -p mindlite-server` (or point MLSERVER_BIN at it)",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_environment() -> dict[str, str]:
    """The test runner's environment without MINDLITE_* variables: the server reads those as
    configuration overrides and refuses unknown ones, so a stray one would stop every test."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MINDLITE_")}


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the test runner dies, so no server outlives a killed run."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _child_setup(memory_limit: int | None):
    """The child's setup before exec: die with the parent, and map at most `memory_limit`
    bytes when one is given."""
    def setup() -> None:
        _die_with_parent()
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    return setup


def describe_exit(code: int) -> str:
    """`exit status 3`, or `killed by SIGABRT` for a negative Popen return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Server:
    """One `mindlite-server` process over a data file that outlives restarts."""

    def __init__(self, binary: Path, workdir: Path, config_text: str | None = None,
                 memory_limit: int | None = None):
        self.binary = binary
        # Bytes of address space the process may map (RLIMIT_AS); None: no limit.
        self.memory_limit = memory_limit
        self.workdir = workdir
        self.data = workdir / "db" / "mindlite.redb"
        self.log_path = workdir / "server.log"
        self.config_path: Path | None = None
        if config_text is not None:
            self.config_path = workdir / "config.toml"
            self.config_path.write_text(config_text)
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.mysql_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def start(self) -> "Server":
        assert self.process is None, "the server is already running"
        for _attempt in range(3):
            self.port = free_port()
            # Every server opens its MySQL door too, on a port of its own.
            self.mysql_port = free_port()
            args = [str(self.binary), "--data", str(self.data), "--host", "127.0.0.1",
                    "--port", str(self.port), "--mysql-port", str(self.mysql_port)]
            if self.config_path is not None:
                args += ["--config", str(self.config_path)]
            with open(self.log_path, "ab") as log:
                log.write(f"---- start: {' '.join(args)}\n".encode())
                log.flush()
                log_offset = log.tell()
                self.process = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=child_environment(), cwd=self.workdir,
                    preexec_fn=_child_setup(self.memory_limit),
                )
            if self._wait_ready(log_offset):
                return self
            # Another process took the port between probing and binding: try a new one.
            self.process = None
        pytest.fail(f"mindlite-server could not bind a port\n{self.log_tail()}", pytrace=False)

    def _wait_ready(self, log_offset: int) -> bool:
        """True once the server answers a ping; False if it exited because the port was taken."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                if b"cannot listen" in self.log_path.read_bytes()[log_offset:]:
                    return False
                pytest.fail(f"mindlite-server exited with status {code} during startup\n"
                            f"{self.log_tail()}", pytrace=False)
            try:
                if requests.get(self.url + "/api/util/ping", timeout=1).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.process.kill()
        self.process.wait()
        self.process = None
        pytest.fail(f"mindlite-server did not answer /api/util/ping within {START_TIMEOUT} s\n"
                    f"{self.log_tail()}", pytrace=False)

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.process is not None, "the server is not running"
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        """Waits for the process to end; kills it and fails if it takes longer than `timeout`."""
        assert self.process is not None, "the server is not running"
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.process = None
            pytest.fail(f"mindlite-server did not exit within {timeout} s of SIGTERM\n"
                        f"{self.log_tail()}", pytrace=False)
        self.process = None
        return code

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stops the server with `signum` and requires a clean exit (status 0)."""
        self.send_signal(signum)
        code = self.wait_exit()
        assert code == 0, f"mindlite-server exited with status {code}\n{self.log_tail()}"

    def restart(self) -> "Server":
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited_within(self, seconds: float) -> bool:
        """Whether the process ends within `seconds` (an abort writes its backtrace before it
        ends, so a connection it dropped comes a moment before its exit)."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def death(self) -> str | None:
        """None while the process runs; else how it ended (`killed by SIGABRT`) and the lines
        of its log that say why (an allocation that failed, a panic)."""
        if self.process is None or self.process.poll() is None:
            return None
        fatal = [line for line in self.log_text().splitlines() if FATAL_LINE.search(line)]
        why = "; ".join(line.strip()[:300] for line in fatal[-3:]) or "no fatal line in its log"
        return f"{describe_exit(self.process.returncode)} ({why})"

    def assert_alive(self) -> None:
        """Fails, saying how the server died, unless it still runs and answers a ping."""
        try:
            ping = requests.get(self.url + "/api/util/ping", timeout=10)
        except requests.RequestException as e:
            # An abort takes a moment (the backtrace is written first): let it finish.
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            died = self.death()
            assert died is None, f"mindlite-server died: {died}"
            raise AssertionError(f"mindlite-server does not answer a ping: {e}") from e
        died = self.death()
        assert died is None, f"mindlite-server died: {died}"
        assert ping.status_code == 200, (ping.status_code, ping.text)

    def peak_rss_bytes(self) -> int:
        """VmHWM: the highest resident set size the process has had."""
        return _proc_status_kib(self.pid, "VmHWM") * 1024

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self) -> str:
        lines = self.log_text().splitlines()[-LOG_TAIL_LINES:]
        return f"--- {self.log_path} (last {len(lines)} lines) ---\n" + "\n".join(lines)

    # Small helpers used across the suite.

    def sql(self, query: str, *, token: str | None = None, **fields) -> requests.Response:
        body = {"query": query, **fields}
        return requests.post(self.url + "/api/sql/query", json=body,
                             headers=bearer(token), timeout=60)

    def sql_ok(self, query: str, **fields) -> dict:
        """Runs a statement and requires a non-error result."""
        response = self.sql(query, **fields)
        assert response.status_code == 200, response.text
        doc = response.json()
        assert doc["type"] in ("ok", "table"), doc
        return doc


def _proc_status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class ServerFactory:
    """Starts servers for one test and stops them all (cleanly) afterwards."""

    binary: Path
    tmp_path: Path
    servers: list[Server] = field(default_factory=list)
    # The address space each server may map, in bytes (None: no limit); see MEMORY_LIMIT_MB.
    memory_limit: int | None = None

    def __call__(self, config_text: str | None = None, *, workdir: Path | None = None) -> Server:
        return self.new(config_text, workdir=workdir).start()

    def new(self, config_text: str | None = None, *, workdir: Path | None = None) -> Server:
        """A server not yet started (for setup that needs the data file alone: users), stopped
        and shown with the others."""
        if workdir is None:
            workdir = self.tmp_path / f"server{len(self.servers)}"
        workdir.mkdir(parents=True, exist_ok=True)
        server = Server(self.binary, workdir, config_text, self.memory_limit)
        self.servers.append(server)
        return server

    def stop_all(self) -> None:
        failures = []
        for server in self.servers:
            if server.process is None:
                continue
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait_exit()
            except pytest.fail.Exception as hung:
                failures.append(str(hung))
                continue
            if code != 0:
                failures.append(f"{describe_exit(code)}\n{server.log_tail()}")
        assert not failures, "mindlite-server did not stop cleanly on SIGTERM:\n" + "\n".join(failures)


# Captures: `### REQUEST`, `### RESPONSE HEADERS`, `### RESPONSE BODY`, `### BODY repr`.

@dataclass
class Capture:
    name: str
    request: dict | None
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers["content-type"]

    @property
    def chunked(self) -> bool:
        return self.headers.get("transfer-encoding", "").lower() == "chunked"


def load_capture(name: str) -> Capture:
    for directory in (CORE_CAPTURES, HTTP_CAPTURES):
        path = directory / f"{name}.txt"
        if path.exists():
            break
    else:
        raise AssertionError(f"capture {name}.txt is in neither {CORE_CAPTURES} nor {HTTP_CAPTURES}")
    text = path.read_text()
    request_part = text.split("### REQUEST", 1)[1].split("### RESPONSE HEADERS", 1)[0]
    request_json = next((line for line in request_part.splitlines() if line.startswith("{")), None)
    head_part = text.split("### RESPONSE HEADERS", 1)[1].split("### RESPONSE BODY", 1)[0]
    # Some captures followed a redirect: the last response head is the one the body belongs to.
    head_lines = [line for line in head_part.strip().split("\n\n")[-1].splitlines() if line]
    status = int(head_lines[0].split()[1])
    headers = {}
    for line in head_lines[1:]:
        name_, _, value = line.partition(":")
        headers[name_.strip().lower()] = value.strip()
    body = ast.literal_eval(text.split("### BODY repr", 1)[1].strip())
    assert isinstance(body, bytes)
    return Capture(name, json.loads(request_json) if request_json else None, status, headers, body)


# Raw HTTP/1.1 over a socket, for what `requests` hides: framing, pipelining, interim responses.

class ConnectionClosed(Exception):
    """The server closed (or reset) the connection."""


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    chunked: bool

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n == name.lower()), None)

    def json(self):
        return json.loads(self.body)


class RawConnection:
    """One client socket to 127.0.0.1 with a read buffer; every read is bounded by `timeout`.
    `source` is the loopback address it connects from (127.0.0.2 is another client to the
    server's per-address limits)."""

    def __init__(self, port: int, timeout: float = 10.0, source: str | None = None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.buffer = b""

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionClosed(str(e)) from e
        if not chunk:
            raise ConnectionClosed("EOF")
        self.buffer += chunk

    def read_until(self, marker: bytes, limit: int = 1 << 20) -> bytes:
        while marker not in self.buffer:
            if len(self.buffer) > limit:
                raise AssertionError(f"no {marker!r} within {limit} bytes")
            self._fill()
        data, self.buffer = self.buffer.split(marker, 1)
        return data + marker

    def read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_head(self) -> tuple[int, list[tuple[str, str]]]:
        head = self.read_until(b"\r\n\r\n", limit=256 * 1024).decode("latin-1")
        lines = head.split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        assert version == "HTTP/1.1", lines[0]
        headers = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.append((name.strip().lower(), value.strip()))
        return int(status), headers

    def read_response(self) -> RawResponse:
        status, headers = self.read_head()
        lookup = dict(headers)
        if lookup.get("transfer-encoding", "").lower() == "chunked":
            assert "content-length" not in lookup, headers
            body = b""
            while True:
                size = int(self.read_until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    # No trailers expected from this server: the body ends with an empty line.
                    assert self.read_exact(2) == b"\r\n"
                    return RawResponse(status, headers, body, True)
                body += self.read_exact(size)
                assert self.read_exact(2) == b"\r\n", "chunk not followed by CRLF"
        if 100 <= status < 200 or status in (204, 304):
            return RawResponse(status, headers, b"", False)
        assert "content-length" in lookup, f"no framing in {headers}"
        return RawResponse(status, headers, self.read_exact(int(lookup["content-length"])), False)

    def read_to_eof(self) -> bytes:
        """Everything until the server closes the connection."""
        try:
            while True:
                self._fill()
        except ConnectionClosed:
            pass
        data, self.buffer = self.buffer, b""
        return data

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection within `timeout` (extra bytes are read
        and dropped), False when it stays open."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self._fill()
                self.buffer = b""
        except ConnectionClosed:
            return True
        except socket.timeout:
            return False
        return False


def http_request(method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None, port: int | None = None) -> bytes:
    """The bytes of one HTTP/1.1 request with a Content-Length body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port or 0}"]
    all_headers = dict(headers or {})
    if body is not None:
        all_headers.setdefault("Content-Type", "application/json")
        all_headers.setdefault("Content-Length", str(len(body)))
    lines += [f"{name}: {value}" for name, value in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def sql_request(query: str, port: int, headers: dict[str, str] | None = None, **fields) -> bytes:
    return http_request("POST", "/api/sql/query", json.dumps({"query": query, **fields}).encode(),
                        headers, port)
