"""The knowledge-base benchmark's peers, on the files benches/src/kb.rs wrote: FAISS's HNSW
index (faiss-cpu, IndexHNSWFlat with inner product, the same M and efConstruction) and
sqlite-vec (an exact scan in SQLite). Prints one JSON object per measurement, then a Markdown
table of every engine's index figures (mindlite's read from --with, the Rust side's output).

    python benches/kb_peers.py DIR [--m 16] [--ef-construction 128] [--with FILE]
                               [--sqlite-queries 50]
"""

import argparse
import json
import os
import sqlite3
import statistics
import time

import numpy as np

EFS = (16, 32, 64, 128, 256)


def load(directory, d):
    base = np.fromfile(os.path.join(directory, "base.f32"), dtype="<f4").reshape(-1, d)
    queries = np.fromfile(os.path.join(directory, "queries.f32"), dtype="<f4").reshape(-1, d)
    truth = np.fromfile(os.path.join(directory, "truth.u32"), dtype="<u4").reshape(-1, 10)
    truth10 = np.fromfile(os.path.join(directory, "truth10.u32"), dtype="<u4").reshape(-1, 10)
    return base, queries, truth, truth10


def recall(found, truth):
    hits = sum(len(set(f[:10]) & set(t)) for f, t in zip(found, truth))
    return hits / (len(truth) * 10)


def report(row):
    print(json.dumps(row), flush=True)
    return row


def faiss_side(base, queries, truth, truth10, m, ef_construction):
    import faiss

    rows = []
    d = base.shape[1]
    faiss.omp_set_num_threads(1)
    index = faiss.IndexHNSWFlat(d, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    start = time.perf_counter()
    index.add(base)
    build = time.perf_counter() - start
    rows.append(report({"phase": "index_build", "engine": "faiss", "m": m,
                        "ef_construction": ef_construction, "seconds": build,
                        "vectors_per_s": len(base) / build, "threads": 1}))
    tenth = np.zeros(len(base), dtype=bool)
    tenth[::10] = True
    bitmap = np.packbits(tenth, bitorder="little")  # kept alive: the selector points into it
    selector = faiss.IDSelectorBitmap(len(base), faiss.swig_ptr(bitmap))
    for ef in EFS:
        for name, expected in (("none", truth), ("10%", truth10)):
            params = faiss.SearchParametersHNSW(efSearch=ef)
            if name != "none":
                params.sel = selector
            for threads in (1, 2):
                faiss.omp_set_num_threads(threads)
                # Latency: one query at a time; throughput: all at once, as FAISS batches them.
                times = []
                if threads == 1:
                    for q in queries:
                        t = time.perf_counter()
                        index.search(q.reshape(1, -1), 10, params=params)
                        times.append((time.perf_counter() - t) * 1000)
                start = time.perf_counter()
                _, found = index.search(queries, 10, params=params)
                wall = time.perf_counter() - start
                rows.append(report({
                    "phase": "index_search", "engine": "faiss", "ef": ef, "filter": name,
                    "threads": threads, "recall_at_10": recall(found, expected),
                    "p50_ms": statistics.median(times) if times else None,
                    "qps": len(queries) / wall}))
    return rows


def sqlite_vec_side(base, queries, truth, truth10, count):
    import sqlite_vec

    try:
        # CPython builds without loadable extensions (pyenv's default) need pysqlite3's.
        import pysqlite3 as sqlite  # type: ignore[import-not-found]
    except ImportError:
        sqlite = sqlite3
    rows = []
    d = base.shape[1]
    db = sqlite.connect(":memory:")
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{d}] distance_metric=cosine, "
               "shard integer)")
    start = time.perf_counter()
    with db:
        db.executemany("INSERT INTO v(rowid, embedding, shard) VALUES (?, ?, ?)",
                       ((i, base[i].tobytes(), i % 10) for i in range(len(base))))
    load = time.perf_counter() - start
    rows.append(report({"phase": "load", "engine": "sqlite-vec", "seconds": load,
                        "rows_per_s": len(base) / load}))
    for name, expected, condition in (("none", truth, ""), ("10%", truth10, "AND shard = 0")):
        times, found = [], []
        for q in queries[:count]:
            t = time.perf_counter()
            result = db.execute(
                f"SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10 {condition} "
                "ORDER BY distance", (q.tobytes(),)).fetchall()
            times.append((time.perf_counter() - t) * 1000)
            found.append([r[0] for r in result])
        rows.append(report({
            "phase": "exact_search", "engine": "sqlite-vec", "filter": name, "threads": 1,
            "recall_at_10": recall(found, expected[:count]),
            "ms_per_query": statistics.median(times), "qps": 1000 / statistics.mean(times)}))
    return rows


def table(rows):
    """The index figures side by side: per ef, filter and threads, recall and QPS."""
    searches = [r for r in rows if r.get("phase") == "index_search"]
    engines = sorted({r["engine"] for r in searches})
    print()
    print("| ef | filter | threads | " + " | ".join(
        f"{e} recall@10 | {e} QPS | {e} p50 ms" for e in engines) + " |")
    print("|---|---|---|" + "---|---|---|" * len(engines))
    keys = sorted({(r["ef"], r["filter"], r["threads"]) for r in searches})
    for ef, name, threads in keys:
        cells = []
        for e in engines:
            match = [r for r in searches if (r["engine"], r["ef"], r["filter"], r["threads"])
                     == (e, ef, name, threads)]
            if match:
                r = match[0]
                p50 = f"{r['p50_ms']:.3f}" if r.get("p50_ms") is not None else "–"
                cells.append(f"{r['recall_at_10']:.3f} | {r['qps']:,.0f} | {p50}")
            else:
                cells.append("– | – | –")
        print(f"| {ef} | {name} | {threads} | " + " | ".join(cells) + " |")
    builds = [r for r in rows if r.get("phase") == "index_build"]
    for r in builds:
        print(f"\n{r['engine']}: index build of M={r['m']}, efConstruction={r['ef_construction']}"
              f" in {r['seconds']:.1f} s ({r['vectors_per_s']:,.0f} vectors/s, {r['threads']} thread)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--d", type=int, default=384)
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=128)
    parser.add_argument("--with", dest="with_file")
    parser.add_argument("--sqlite-queries", type=int, default=50)
    args = parser.parse_args()
    base, queries, truth, truth10 = load(args.directory, args.d)
    rows = []
    if args.with_file:
        with open(args.with_file) as f:
            rows.extend(json.loads(line) for line in f if line.startswith("{"))
    rows.extend(faiss_side(base, queries, truth, truth10, args.m, args.ef_construction))
    rows.extend(sqlite_vec_side(base, queries, truth, truth10, args.sqlite_queries))
    table(rows)


if __name__ == "__main__":
    main()
