#!/usr/bin/env python3
"""Writes the list of functions mindlite-server runs first (run by scripts/release.sh).

The linker places the functions named in the list at the start of the code, in the list's order
(MINDLITE_HOT_SYMBOLS, see server/build.rs). Without it, the code that starting
and answering a query runs is spread over the binary's 100 MB of machine code; the kernel maps
64 KiB around every page the process touches, so a few thousand small functions kept about 50 MiB
of code resident in an idle server. Packed together they take about 5 MiB.

The functions are found by running the release server under valgrind's callgrind, twice:
  1. start, then the requests a client's first minute sends (status, projects, `SELECT 1`,
     `SHOW DATABASES`): listed first, so an idle server holds only these pages;
  2. the same, then tables written and read in all three formats, joins, aggregates, sorts and
     the errors they meet: listed after, so a big query's code sits together too.
Symbol names carry hashes of the toolchain, the dependencies and the build profile, so the list is
written from the very build it orders, each time (scripts/release.sh), and never kept.

Usage: hot_code.py SERVER_BINARY OUTPUT_FILE
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROWS = 20_000

FIRST = [
    ("GET", "/api/status", None),
    ("GET", "/api/util/ping", None),
    ("GET", "/api/projects", None),
    ("POST", "/api/sql/query", {"query": "SELECT 1"}),
    ("POST", "/api/sql/query", {"query": "SHOW DATABASES"}),
]

LATER = [
    ("POST", "/api/sql/query", {"query": (
        "CREATE TABLE big AS SELECT value AS id, value * 0.5 AS x, 'row ' || value AS s, "
        f"CAST(value % 7 AS INT) AS k FROM generate_series(1, {ROWS})")}),
    ("POST", "/api/sql/query", {"query": "CREATE TABLE small (k INT, name TEXT, at TIMESTAMP, day DATE)"}),
    ("POST", "/api/sql/query", {"query": (
        "INSERT INTO small VALUES (1, 'one', '2026-01-02 03:04:05', '2026-01-02'), "
        "(2, 'two', NULL, NULL), (3, NULL, '2026-02-03 04:05:06', '2026-02-03')")}),
    ("POST", "/api/sql/query", {"query": "SELECT * FROM big"}),
    ("POST", "/api/sql/query", {"query": "SELECT * FROM big", "response_format": "jsonlines"}),
    ("POST", "/api/sql/query", {"query": "SELECT * FROM big", "response_format": "sse"}),
    ("POST", "/api/sql/query", {"query": "SELECT * FROM big WHERE id < 100 ORDER BY x DESC LIMIT 5"}),
    ("POST", "/api/sql/query", {"query": (
        "SELECT k, count(*) AS n, sum(x) AS total, avg(id), min(s), max(s) FROM big "
        "GROUP BY k ORDER BY k")}),
    ("POST", "/api/sql/query", {"query": (
        "SELECT b.id, s.name, s.at, s.day FROM big b JOIN small s ON b.k = s.k "
        "WHERE b.id < 50 ORDER BY b.id")}),
    ("POST", "/api/sql/query", {"query": "SELECT upper(name), length(name), name LIKE 'o%' FROM small"}),
    ("POST", "/api/sql/query", {"query": "UPDATE small SET name = 'three' WHERE k = 3"}),
    ("POST", "/api/sql/query", {"query": "DELETE FROM small WHERE k = 2"}),
    ("POST", "/api/sql/query", {"query": "SELECT * FROM missing_table"}),
    ("POST", "/api/sql/query", {"query": "SELEC broken"}),
    ("POST", "/api/sql/query", {"query": "SHOW TABLES"}),
    ("POST", "/api/sql/query", {"query": "CREATE PROJECT p"}),
    ("GET", "/api/projects/p", None),
    ("POST", "/api/sql/query", {"query": "DROP PROJECT p"}),
    ("POST", "/api/sql/query", {"query": "DROP TABLE small"}),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as response:
            response.read()
    except urllib.error.HTTPError as e:
        e.read()


def functions_run(server, requests, workdir):
    """Names of the functions callgrind saw run while the server started and answered `requests`."""
    port = free_port()
    out = os.path.join(workdir, f"callgrind-{port}.out")
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--demangle=no",
         "--dump-line=no", "--compress-strings=no", "--compress-pos=no",
         server, "--data", os.path.join(workdir, f"{port}.redb"), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                request(port, "GET", "/api/status", None)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the server did not start under valgrind")
                time.sleep(0.2)
        for method, path, body in requests:
            request(port, method, path, body)
    finally:
        process.terminate()
        process.wait(timeout=300)
    names = []
    with open(out) as f:
        for line in f:
            if line.startswith("fn="):
                names.append(line[3:].strip())
    return names


def text_symbols(binary):
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    return {parts[2] for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3 and parts[1] in "tTwW"}


def main():
    server, output = sys.argv[1], sys.argv[2]
    symbols = text_symbols(server)
    with tempfile.TemporaryDirectory(prefix="mindlite-hot-code-") as workdir:
        first = functions_run(server, FIRST, workdir)
        later = functions_run(server, FIRST + LATER, workdir)
    ordered, seen = [], set()
    for name in first + later:
        if name in symbols and name not in seen:
            seen.add(name)
            ordered.append(name)
    with open(output, "w") as f:
        f.write("\n".join(ordered) + "\n")
    print(f"{output}: {len(ordered)} functions "
          f"({len({n for n in first if n in symbols})} run by start-up and the first requests)")


if __name__ == "__main__":
    main()
