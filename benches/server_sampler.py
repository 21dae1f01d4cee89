#!/usr/bin/env python3
"""Samples a running mindlite-server every 20 ms and prints one line a second (run on demand
beside benches/hostile_bench.py; not in CI):

- its runnable threads by kind: the runtime's first four threads are its workers, its later
  ones (also named `mindlite`) blocking threads, `mindlite-cpu-N` the planning pool;
- its VmRSS and the tracking allocator's live bytes (`mindlite_memory::LIVE`, read from
  /proc/PID/mem at the symbol's address, so the binary must keep its symbol table, as a
  `cargo build --release` one does): how far the process's memory is above what is allocated
  (code, stacks, and what the C library keeps of freed blocks);
- of the live bytes, those no open account counts (`UNTAGGED`: made for no account;
  `ORPHANED`: made for an account closed since): memory outside every budget.

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


COUNTERS = ("LIVE", "UNTAGGED", "ORPHANED")


def counter_offsets(binary):
    """The counters' offsets in the binary (their addresses minus the load address)."""
    listing = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        for name in COUNTERS:
            if line.endswith(f" mindlite_memory::{name}"):
                found[name] = int(line.split()[0], 16)
    missing = [name for name in COUNTERS if name not in found]
    if missing:
        raise SystemExit(f"{binary} has no symbol mindlite_memory::{missing[0]} (stripped?)")
    return [found[name] for name in COUNTERS]


def load_address(pid, binary):
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5] == binary and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16)
    return None


def sample(pid, addresses):
    """(runnable threads by kind, VmRSS bytes, (live, untagged, orphaned) bytes)."""
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
    counts = []
    with open(f"/proc/{pid}/mem", "rb") as memory:
        for address in addresses:
            memory.seek(address)
            counts.append(struct.unpack("<q", memory.read(8))[0])
    return runnable, rss, tuple(counts)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    binary = os.path.realpath(sys.argv[1])
    end = time.time() + float(sys.argv[2])
    offsets = counter_offsets(binary)
    pid = address = second = None
    rows = []
    # The highest RSS, and the counters when live bytes were highest.
    peak = [0, (0, 0, 0)]

    def flush():
        if not rows:
            return
        kinds = collections.Counter()
        for runnable, _, _ in rows:
            kinds.update(runnable)
        mean = {kind: round(count / len(rows), 1) for kind, count in kinds.most_common()}
        rss = max(r for _, r, _ in rows) >> 20
        live, untagged, orphaned = max(c for _, _, c in rows)
        print(f"{time.strftime('%H:%M:%S', time.localtime(second))} runnable "
              f"{sum(kinds.values()) / len(rows):.1f} {mean} rss {rss} MiB live {live >> 20} MiB "
              f"(untagged {untagged >> 20}, orphaned {orphaned >> 20})", flush=True)

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
            runnable, rss, counts = sample(pid, [address + offset for offset in offsets])
        except (OSError, StopIteration):
            pid = None
            continue
        now = int(time.time())
        if now != second:
            flush()
            second, rows = now, []
        rows.append((runnable, rss, counts))
        peak = [max(peak[0], rss), max(peak[1], counts)]
        time.sleep(0.02)
    flush()
    live, untagged, orphaned = peak[1]
    print(f"peak rss {peak[0] >> 20} MiB, peak live {live >> 20} MiB "
          f"(then untagged {untagged >> 20} MiB, orphaned {orphaned >> 20} MiB)")


if __name__ == "__main__":
    main()
