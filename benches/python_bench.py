"""The Python issue's benchmark: from Python, load 5M rows from a pyarrow Table, then time the
engine-core GROUP BY, on mindlite, DuckDB and sqlite3 with the same rows. Prints one JSON
object per engine, then a Markdown table with ratios to DuckDB.

    python benches/python_bench.py [ROWS] [RUNS]

Run by benches/python.sh, which installs a release build of the package first."""

import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

QUERY = "SELECT category, count(*), avg(value) FROM t GROUP BY category"


def table(rows):
    """The rows of benches/src/groupby.rs: id, splitmix64 value in [0, 1000), 100 categories."""
    i = np.arange(rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = i + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    value = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 1000.0
    names = pa.array([f"category_{c:02}" for c in range(100)])
    category = pa.DictionaryArray.from_arrays(pa.array(i % 100, pa.int32()), names).cast(pa.string())
    return pa.table({"id": pa.array(i.astype(np.int64)), "value": value, "category": category})


def timed_once(run):
    start = time.perf_counter()
    rows = run()
    assert len(rows) == 100, len(rows)
    return (time.perf_counter() - start) * 1000.0


def timed(run, runs):
    return [timed_once(run) for _ in range(runs)]


# mindlite keeps a chunk's decoded arrays from its second read on, so the first two queries
# after the load read the file; they are reported on their own, not in the warm median.
WARMUP = 2


def warm_pair(data, runs, scratch):
    """mindlite and DuckDB loaded with the same rows, then queried warm in turn, `runs` times
    each, so that both see the same machine load."""
    import duckdb
    import mindlite

    con = mindlite.connect(os.path.join(scratch, "bench.redb"))
    start = time.perf_counter()
    con.register("t", data)
    ml_load = time.perf_counter() - start
    cold = timed(lambda: con.sql(QUERY).fetchall(), WARMUP)

    duck = duckdb.connect()
    start = time.perf_counter()
    duck.execute("CREATE TABLE t AS SELECT * FROM data")
    duck_load = time.perf_counter() - start
    timed(lambda: duck.execute(QUERY).fetchall(), WARMUP)
    threads = duck.execute("SELECT current_setting('threads')").fetchone()[0]

    ml_times, arrow_times, duck_times = [], [], []
    for _ in range(runs):
        ml_times.append(timed_once(lambda: con.sql(QUERY).fetchall()))
        duck_times.append(timed_once(lambda: duck.execute(QUERY).fetchall()))
        arrow_times.append(timed_once(lambda: con.sql(QUERY).arrow().to_pylist()))
    con.close()
    return [
        {
            "engine": f"mindlite {mindlite.__version__}",
            "load_s": ml_load,
            "median_ms": statistics.median(ml_times),
            "arrow_median_ms": statistics.median(arrow_times),
            "first_queries_ms": cold,
            "runs_ms": ml_times,
        },
        {
            "engine": f"duckdb {duckdb.__version__} ({threads} threads)",
            "load_s": duck_load,
            "median_ms": statistics.median(duck_times),
            "runs_ms": duck_times,
        },
    ]


def sqlite_report(data, runs):
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (id INTEGER, value REAL, category TEXT)")
    start = time.perf_counter()
    columns = [data.column(name).to_pylist() for name in ("id", "value", "category")]
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", zip(*columns))
    con.commit()
    load = time.perf_counter() - start
    times = timed(lambda: con.execute(QUERY).fetchall(), runs)
    return {"engine": f"sqlite3 {sqlite3.sqlite_version}", "load_s": load,
            "median_ms": statistics.median(times), "runs_ms": times}


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    data = table(rows)
    with tempfile.TemporaryDirectory() as scratch:
        reports = warm_pair(data, runs, scratch)
    reports.append(sqlite_report(data, runs))
    for report in reports:
        print(json.dumps(report))
    duck = reports[1]
    print(f"\n{rows:,} rows, warm, median of {runs} (mindlite and DuckDB in turn); mindlite's "
          f"first {WARMUP} queries after the load: "
          + ", ".join(f"{ms:.0f}" for ms in reports[0]["first_queries_ms"]) + " ms\n")
    print("| engine | load from pyarrow, s | query, ms | query vs DuckDB | load vs DuckDB |")
    print("|---|---|---|---|---|")
    for r in reports:
        print(f"| {r['engine']} | {r['load_s']:.2f} | {r['median_ms']:.1f} | "
              f"{r['median_ms'] / duck['median_ms']:.2f}x | {r['load_s'] / duck['load_s']:.2f}x |")


if __name__ == "__main__":
    main()
