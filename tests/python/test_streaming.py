"""Big results stream: bounded Python memory and process RSS while 2M rows go by."""

import gc
import tracemalloc

ROWS = 2_000_000


def rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_two_million_rows_stream_in_bounded_memory(con):
    gc.collect()
    before = rss_mib()
    peak_rss = before
    tracemalloc.start()
    try:
        count = 0
        total = 0
        result = con.sql(f"SELECT value AS id, value * 2 AS twice, 'row ' || value AS label FROM generate_series(1, {ROWS})")
        for row in result:
            count += 1
            total += row[1]
            if count % 100_000 == 0:
                peak_rss = max(peak_rss, rss_mib())
        _, peak_python = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == ROWS
    assert total == ROWS * (ROWS + 1)
    # Held all at once, the rows would be ~250 MB of Python objects.
    assert peak_python < 16 * 1024 * 1024, f"Python peak {peak_python / 2**20:.1f} MiB"
    assert peak_rss - before < 200, f"RSS grew {peak_rss - before:.0f} MiB"
