"""Times the engine-core GROUP BY benchmark on DuckDB and SQLite over the CSV that
`groupby --csv` wrote, so all engines see the same rows. Prints one JSON object per engine."""

import json
import sqlite3
import statistics
import sys
import time

QUERY = "SELECT category, count(*), avg(value) FROM t GROUP BY category"


def timed(run, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        rows = run()
        times.append((time.perf_counter() - start) * 1000.0)
        assert len(rows) == 100, len(rows)
    return times


def duckdb_report(csv, runs):
    import duckdb

    con = duckdb.connect()
    start = time.perf_counter()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM read_csv(?, header = true, "
        "columns = {'id': 'BIGINT', 'value': 'DOUBLE', 'category': 'VARCHAR'})",
        [csv],
    )
    load = time.perf_counter() - start
    times = timed(lambda: con.execute(QUERY).fetchall(), runs)
    return {"engine": f"duckdb {duckdb.__version__}", "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
            "load_s": load, "median_ms": statistics.median(times), "runs_ms": times}


def sqlite_report(csv, runs):
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (id INTEGER, value REAL, category TEXT)")
    start = time.perf_counter()
    with open(csv) as f:
        next(f)
        rows = (line.rstrip("\n").split(",") for line in f)
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", ((int(i), float(v), c) for i, v, c in rows))
    con.commit()
    load = time.perf_counter() - start
    times = timed(lambda: con.execute(QUERY).fetchall(), runs)
    return {"engine": f"sqlite {sqlite3.sqlite_version}", "load_s": load, "median_ms": statistics.median(times), "runs_ms": times}


def main():
    csv = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(json.dumps(duckdb_report(csv, runs)))
    print(json.dumps(sqlite_report(csv, runs)))


if __name__ == "__main__":
    main()
