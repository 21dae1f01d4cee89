#!/usr/bin/env python3
"""HTTP server benchmark (run on demand by benches/http.sh, not in CI).

Measures, against a release build of mindlite-server on 127.0.0.1:
  - time from process start to the first answered `SELECT 1`, and idle RSS after it;
  - requests/s and p50/p99 latency of `SELECT 1` with keep-alive at 1, 4 and 16 connections (wrk),
    and at 4 connections with the plan cache off (every request parsed, planned and optimized);
  - time and server peak-RSS growth for a 1M-row result, as the JSON document and as jsonlines.
Prints a Markdown table of the figures.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVER = sys.argv[1] if len(sys.argv) > 1 else "target/release/mindlite-server"
ROWS = 1_000_000
WRK_SECONDS = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def post(port, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/sql/query",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return response.read()


def anonymous_rss(pid):
    """Private memory: RSS without the pages of the binary and libraries mapped from files."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise KeyError("Anonymous")


class Server:
    def __init__(self, data, log, env=None):
        self.port = free_port()
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [SERVER, "--data", data, "--port", str(self.port), "--mysql-port", "0"],
            stderr=open(log, "ab"),
            env={**os.environ, **(env or {})},
        )
        self.first_answer = self._wait_first_answer()

    def _wait_first_answer(self):
        request = (
            b"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 20\r\nConnection: close\r\n\r\n{"query":"SELECT 1"}'
        )
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                    s.sendall(request)
                    answer = b""
                    while chunk := s.recv(65536):
                        answer += chunk
                if b'"data":[[1]]' in answer:
                    return time.perf_counter() - self.started
            except OSError:
                time.sleep(0.0005)
        raise RuntimeError("server did not answer within 30 s")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


def wrk(port, connections):
    script = os.path.join(tempfile.gettempdir(), "mindlite_select1.lua")
    with open(script, "w") as f:
        f.write(
            'wrk.method = "POST"\n'
            "wrk.body = '{\"query\":\"SELECT 1\"}'\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
        )
    threads = min(connections, 2)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{WRK_SECONDS}s", "--latency", "-s", script,
         f"http://127.0.0.1:{port}/api/sql/query"],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def percentile(p):
        value, unit = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out).groups()
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return rps, percentile(50), percentile(99)


def big_result(data, log, response_format):
    server = Server(data, log)
    try:
        post(server.port, {"query": "SELECT 1"})
        before = proc_status(server.process.pid, "VmHWM")
        started = time.perf_counter()
        body = {"query": "SELECT * FROM big"}
        if response_format:
            body["response_format"] = response_format
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/api/sql/query",
            data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
        )
        size = 0
        with urllib.request.urlopen(request) as response:
            while chunk := response.read(1 << 20):
                size += len(chunk)
        elapsed = time.perf_counter() - started
        growth = proc_status(server.process.pid, "VmHWM") - before
        return elapsed, growth, size
    finally:
        server.stop()


def hot_code_coverage():
    """How much of the hot-code list scripts/release.sh wrote beside the binary's folder
    (<target>/hot-symbols.txt) names functions of this binary."""
    listed = os.path.join(os.path.dirname(os.path.abspath(SERVER)), "..", "hot-symbols.txt")
    if not os.path.exists(listed):
        return "none (build with scripts/release.sh)"
    with open(listed) as f:
        wanted = {line.strip() for line in f if line.strip()}
    out = subprocess.run(["nm", "--defined-only", SERVER], capture_output=True, text=True,
                         check=True).stdout
    present = {line.split()[-1] for line in out.splitlines()}
    found = len(wanted & present)
    note = "" if found >= 0.9 * len(wanted) else " (stale: build with scripts/release.sh)"
    return f"{found} of {len(wanted)} functions found{note}"


def main():
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    workdir = tempfile.mkdtemp(prefix="mindlite-http-bench-")
    data = os.path.join(workdir, "bench.redb")
    log = os.path.join(workdir, "server.log")
    rows = []

    starts = []
    for _ in range(5):
        fresh = os.path.join(workdir, f"start-{len(starts)}.redb")
        server = Server(fresh, log)
        starts.append(server.first_answer)
        idle_rss = proc_status(server.process.pid, "VmRSS")
        idle_anon = anonymous_rss(server.process.pid)
        server.stop()
    starts.sort()
    rows.append(("start to first answered `SELECT 1` (median of 5, new file)", f"{starts[2] * 1000:.1f} ms"))
    rows.append(("idle RSS after the first query", f"{idle_rss / 2**20:.1f} MiB "
                 f"({idle_anon / 2**20:.1f} MiB anonymous, the rest the binary's code pages)"))

    server = Server(data, log)
    try:
        for connections in (1, 4, 16):
            rps, p50, p99 = wrk(server.port, connections)
            rows.append((f"`SELECT 1`, keep-alive, {connections} connection(s)",
                         f"{rps:,.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms"))
        post(server.port, {"query": (
            f"CREATE TABLE big AS SELECT value AS id, value * 0.5 AS x, 'row ' || value AS s "
            f"FROM generate_series(1, {ROWS})")})
    finally:
        server.stop()
    server = Server(data, log, {"MINDLITE_QUERY_PLAN_CACHE_ENTRIES": "0"})
    try:
        rps, p50, p99 = wrk(server.port, 4)
        rows.append(("`SELECT 1`, keep-alive, 4 connections, plan cache off",
                     f"{rps:,.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms"))
    finally:
        server.stop()

    for name, response_format in (("JSON document", None), ("jsonlines", "jsonlines")):
        elapsed, growth, size = big_result(data, log, response_format)
        rows.append((f"1M rows (3 columns) as {name}",
                     f"{elapsed:.2f} s, {size / 2**20:.0f} MiB body, peak RSS +{growth / 2**20:.1f} MiB"))

    rows.append(("hot-code list (<target>/hot-symbols.txt)", hot_code_coverage()))
    print("| measure | mindlite-server |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
