#!/usr/bin/env python3
"""Samples a running mindlite-server every 20 ms and prints one line a second (run on demand
beside benches/hostile_bench.py; not in CI):

- its runnable threads by kind: the runtime's first four threads are its workers, its later
  ones (also named `mindlite`) blocking threads, `mindlite-cpu-N` the planning pool;
- its VmRSS and the tracking allocator's live bytes (`mindlite_memory::LIVE`, read from
  /proc/PID/mem at the symbol's address, so the binary must keep its symbol table, as a
  `cargo build --release` one does): how far the process's memory is above what is allocated
  (code, stacks, and what the C library keeps of freed blocks).

Usage: server_sampler.py BINARY SECONDS
  BINARY   the server binary the benchmark runs (the process is found by its name)
Linux only; reading another process's memory needs the same user (or ptrace rights).
"""

import collections
import os
import struct
import subprocess
import sys
import time


def live_offset(binary):
    """The LIVE symbol's offset in the binary (its address minus the load address)."""
    listing = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        if line.endswith(" mindlite_memory::LIVE"):
            return int(line.split()[0], 16)
    raise SystemExit(f"{binary} has no symbol mindlite_memory::LIVE (stripped?)")


def load_address(pid, binary):
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5] == binary and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16)
    return None


def sample(pid, binary, address):
    """(runnable threads by kind, VmRSS bytes, live bytes)."""
    runnable = collections.Counter()
    named = 0
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name == "mindlite":
            named += 1
            name = "worker" if named <= 4 else "blocking"
        elif name.startswith("mindlite-cpu"):
            name = "planning"
        if stat[stat.rindex(")") + 2] == "R":
            runnable[name] += 1
    rss = next(int(l.split()[1]) * 1024 for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS"))
    with open(f"/proc/{pid}/mem", "rb") as memory:
        memory.seek(address)
        live = struct.unpack("<q", memory.read(8))[0]
    return runnable, rss, live


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary = os.path.realpath(sys.argv[1])
    end = time.time() + float(sys.argv[2])
    offset = live_offset(binary)
    pid = address = second = None
    rows = []
    peak = [0, 0]

    def flush():
        if not rows:
            return
        kinds = collections.Counter()
        for runnable, _, _ in rows:
            kinds.update(runnable)
        mean = {kind: round(count / len(rows), 1) for kind, count in kinds.most_common()}
        rss = max(r for _, r, _ in rows) >> 20
        live = max(l for _, _, l in rows) >> 20
        print(f"{time.strftime('%H:%M:%S', time.localtime(second))} runnable "
              f"{sum(kinds.values()) / len(rows):.1f} {mean} rss {rss} MiB live {live} MiB", flush=True)

    while time.time() < end:
        if pid is None or not os.path.exists(f"/proc/{pid}"):
            found = subprocess.run(["pgrep", "-x", os.path.basename(binary)[:15]],
                                   capture_output=True, text=True).stdout.split()
            pid = found[0] if found else None
            address = load_address(pid, binary) if pid else None
            if address is None:
                pid = None
                time.sleep(0.2)
                continue
        try:
            runnable, rss, live = sample(pid, binary, address + offset)
        except (OSError, StopIteration):
            pid = None
            continue
        now = int(time.time())
        if now != second:
            flush()
            second, rows = now, []
        rows.append((runnable, rss, live))
        peak = [max(peak[0], rss), max(peak[1], live)]
        time.sleep(0.02)
    flush()
    print(f"peak rss {peak[0] >> 20} MiB, peak live {peak[1] >> 20} MiB")


if __name__ == "__main__":
    main()
