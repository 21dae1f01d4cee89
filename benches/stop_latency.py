"""What a statement stopped at its deadline still computes: the server's CPU in the seconds
after a runaway nested-loop join (`a.value + b.value = 7` over two 100,000-row series) was
answered with its time-limit error. Work that goes on after the answer takes threads another
user waits for.

    python benches/stop_latency.py target/debug/mindlite-server [--runs 3] [--timeout 2]

Starts the given server (local edition, its own temporary store) on 127.0.0.1.
"""

import argparse
import os
import subprocess
import tempfile
import time

import requests

QUERY = ("SELECT count(*) AS c FROM generate_series(1, 100000) AS a "
         "CROSS JOIN generate_series(1, 100000) AS b WHERE a.value + b.value = 7")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=2, help="the request's time limit, s")
    parser.add_argument("--after", type=float, default=3.0, help="seconds watched after it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        port = 18000 + os.getpid() % 1000
        server = subprocess.Popen([args.server, "--data", f"{data}/bench.redb",
                                   "--host", "127.0.0.1", "--port", str(port), "--mysql-port", "0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    requests.get(url + "/api/util/ping", timeout=1)
                    break
                except requests.ConnectionError:
                    time.sleep(0.1)
            for run in range(1, args.runs + 1):
                started = time.monotonic()
                answer = requests.post(url + "/api/sql/query",
                                       json={"query": QUERY, "timeout": args.timeout},
                                       timeout=120).json()
                answered = time.monotonic() - started
                before = cpu_seconds(server.pid)
                time.sleep(args.after)
                spent = cpu_seconds(server.pid) - before
                print(f"run {run}: answered in {answered:.2f} s "
                      f"({str(answer.get('error_message', answer))[:48]}…); "
                      f"CPU in the {args.after:g} s after: {spent:.2f} s")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
