"""The index benchmark: from Python, load 10M rows from a pyarrow Table into a database file,
then time a point lookup on a column without an index (a full scan), build a secondary index
(CREATE INDEX t_id ON t (id)) and time point, IN (3 values) and 100-row range lookups through
it, on mindlite, DuckDB and sqlite3 with the same rows. Prints one JSON object per engine, then
a Markdown table with the indexed point lookup's speed-up over the full scan.

    python benches/index_bench.py [ROWS] [LOOKUPS] [--engines mindlite,duckdb,sqlite]
                                  [--sqlite-rows N] [--scans N] [--runs N]

Run by benches/index.sh, which runs mindlite's side as a release-built Rust binary
(benches/src/index.rs: the same phases on a table of the same shape) and passes its report in
with --with; `--engines mindlite` runs it through the Python package instead, when installed."""

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 20240601
ENGINES = ("mindlite", "duckdb", "sqlite")
COLUMNS = ("id", "k", "value", "name")


def table(rows):
    """`id`: a permutation of 0..rows (fixed seed), so ids are not in storage order and no
    min/max statistics help; `k`: the same values, left without an index; `value`: a double;
    `name`: "name_<id>"."""
    rng = np.random.default_rng(SEED)
    ids = pa.array(rng.permutation(rows).astype(np.int64))
    value = rng.random(rows)
    name = pc.binary_join_element_wise("name_", pc.cast(ids, pa.string()), "")
    return pa.table({"id": ids, "k": ids, "value": value, "name": name})


def probes(rows, lookups, runs, scans):
    """The values looked up, all existing ids, the same for every engine with the same rows:
    the full scans', the point lookups', the IN lists' (3 distinct ids) and the ranges' starts
    (v..v+99 all exist)."""
    rng = np.random.default_rng(SEED + 1)
    pick = lambda n, high: [int(v) for v in rng.integers(0, high, n)]
    ins = [[int(v) for v in rng.choice(rows, 3, replace=False)] for _ in range(runs + 1)]
    return {
        "scan": pick(scans + 1, rows),
        "point": pick(lookups + 1, rows),
        "in3": ins,
        "range": pick(runs + 1, rows - 99),
    }


def timed(query, statements, expect):
    """Runs each statement, the first as an untimed warm-up; checks every result's row count
    (and, for one-row results, the id) and returns the others' times in ms."""
    times = []
    for i, (sql, first_id) in enumerate(statements):
        start = time.perf_counter()
        rows = query(sql)
        elapsed = (time.perf_counter() - start) * 1000.0
        assert len(rows) == expect, (sql, len(rows))
        if expect == 1:
            assert rows[0][0] == first_id, (sql, rows[0])
        if i > 0:
            times.append(elapsed)
    return times


def measure(engine, rows, query, load, create_index, lookups, runs, scans, path):
    """The phases every engine goes through: load, full-scan lookups on `k`, index build on
    `id`, then point, IN and range lookups on `id`."""
    values = probes(rows, lookups, runs, scans)
    load_s = load()
    scan = timed(query, [(f"SELECT * FROM t WHERE k = {v}", v) for v in values["scan"]], 1)
    start = time.perf_counter()
    create_index()
    index_s = time.perf_counter() - start
    point = timed(query, [(f"SELECT * FROM t WHERE id = {v}", v) for v in values["point"]], 1)
    in3 = timed(query, [(f"SELECT * FROM t WHERE id IN ({a}, {b}, {c})", None)
                        for a, b, c in values["in3"]], 3)
    ranged = timed(query, [(f"SELECT * FROM t WHERE id BETWEEN {v} AND {v + 99}", None)
                           for v in values["range"]], 100)
    return {
        "engine": engine,
        "rows": rows,
        "load_s": load_s,
        "index_build_s": index_s,
        "scan_lookup_ms": statistics.median(scan),
        "point_p50_ms": float(np.percentile(point, 50)),
        "point_p95_ms": float(np.percentile(point, 95)),
        "point_qps": len(point) / (sum(point) / 1000.0),
        "in3_ms": statistics.median(in3),
        "range100_ms": statistics.median(ranged),
        "db_mb": size(path) / 1e6,
        "scan_runs_ms": scan,
    }


def size(path):
    """Bytes in the scratch directory: the database file with any journal or WAL."""
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())


def mindlite_report(data, lookups, runs, scans):
    import mindlite

    with tempfile.TemporaryDirectory() as scratch:
        con = mindlite.connect(os.path.join(scratch, "bench.redb"))

        def load():
            start = time.perf_counter()
            con.register("t", data)
            return time.perf_counter() - start

        report = measure(
            f"mindlite {mindlite.__version__}", data.num_rows,
            lambda sql: con.sql(sql).fetchall(), load,
            lambda: con.execute("CREATE INDEX t_id ON t (id)"),
            lookups, runs, scans, scratch)
        con.close()
    return report


def duckdb_report(data, lookups, runs, scans):
    import duckdb

    with tempfile.TemporaryDirectory() as scratch:
        con = duckdb.connect(os.path.join(scratch, "bench.duckdb"), config={"threads": 2})

        def load():
            con.register("data", data)
            start = time.perf_counter()
            con.execute("CREATE TABLE t AS SELECT * FROM data")
            con.execute("CHECKPOINT")
            load_s = time.perf_counter() - start
            con.unregister("data")
            return load_s

        def create_index():
            con.execute("CREATE INDEX t_id ON t (id)")
            con.execute("CHECKPOINT")

        threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
        report = measure(
            f"duckdb {duckdb.__version__} ({threads} threads)", data.num_rows,
            lambda sql: con.execute(sql).fetchall(), load, create_index,
            lookups, runs, scans, scratch)
        con.close()
    return report


def sqlite_report(data, lookups, runs, scans):
    with tempfile.TemporaryDirectory() as scratch:
        con = sqlite3.connect(os.path.join(scratch, "bench.sqlite"))
        con.execute("CREATE TABLE t (id INTEGER, k INTEGER, value REAL, name TEXT)")

        def load():
            start = time.perf_counter()
            # Batches, so the Python objects of only one batch are alive at a time; one
            # transaction for the whole load.
            for batch in data.to_batches(max_chunksize=100_000):
                columns = [batch.column(name).to_pylist() for name in COLUMNS]
                con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", zip(*columns))
            con.commit()
            return time.perf_counter() - start

        def create_index():
            con.execute("CREATE INDEX t_id ON t (id)")
            con.commit()

        report = measure(
            f"sqlite3 {sqlite3.sqlite_version}", data.num_rows,
            lambda sql: con.execute(sql).fetchall(), load, create_index,
            lookups, runs, scans, scratch)
        con.close()
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="?", type=int, default=10_000_000, help="rows (10M)")
    parser.add_argument("lookups", nargs="?", type=int, default=1000,
                        help="indexed point lookups timed (1000)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="comma-separated, of mindlite,duckdb,sqlite (all)")
    parser.add_argument("--sqlite-rows", type=int, default=None,
                        help="rows for sqlite3, whose load is slow (ROWS)")
    parser.add_argument("--scans", type=int, default=5, help="full-scan lookups timed (5)")
    parser.add_argument("--runs", type=int, default=20,
                        help="IN (3) and 100-row range lookups timed (20)")
    parser.add_argument("--with", dest="with_reports", action="append", default=[],
                        help="a file of JSON reports made elsewhere (benches/src/index.rs) to "
                             "put in the table first")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")
    if args.rows < 100 or (args.sqlite_rows is not None and args.sqlite_rows < 100):
        parser.error("the 100-row range lookups need at least 100 rows")

    data = table(args.rows)
    run = {"mindlite": mindlite_report, "duckdb": duckdb_report, "sqlite": sqlite_report}
    reports = []
    for path in args.with_reports:
        with open(path) as lines:
            reports.extend(json.loads(line) for line in lines if line.strip())
    for engine in engines:
        rows = args.rows
        if engine == "sqlite" and args.sqlite_rows is not None:
            rows = args.sqlite_rows
        engine_data = data if rows == args.rows else table(rows)
        report = run[engine](engine_data, args.lookups, args.runs, args.scans)
        print(json.dumps(report), flush=True)
        reports.append(report)

    print(f"\n{args.rows:,} rows; lookups by literal in the SQL text: full scan on k median of "
          f"{args.scans}, point on id over {args.lookups}, IN (3) and range 100 median of "
          f"{args.runs}\n")
    print("| engine | rows | load, s | CREATE INDEX, s | scan lookup (k), ms | point p50, ms | "
          "point p95, ms | point lookups/s | IN (3), ms | range 100, ms | point vs scan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        print(f"| {r['engine']} | {r['rows']:,} | {r['load_s']:.2f} | {r['index_build_s']:.2f} | "
              f"{r['scan_lookup_ms']:.2f} | {r['point_p50_ms']:.3f} | {r['point_p95_ms']:.3f} | "
              f"{r['point_qps']:,.0f} | {r['in3_ms']:.3f} | {r['range100_ms']:.3f} | "
              f"{r['scan_lookup_ms'] / r['point_p50_ms']:,.1f}x |")


if __name__ == "__main__":
    main()
