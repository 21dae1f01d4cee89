"""Streaming keeps the server's memory flat: a stored table is streamed as jsonlines from a fresh
server process, read incrementally, while the process's peak RSS (VmHWM) may grow by no more
than a fixed bound, the same for 200k and 1M rows. Also: every row arrives, the JSON document
counts right, and SIGTERM lets a stream in flight finish."""

import json
import socket
import time

import pytest
import requests

from mlserver import Server

MIB = 1024 * 1024
PEAK_RSS_GROWTH_BOUND = 64 * MIB

# Stored tables: id 1..rows, built by one server process and streamed by fresh ones.
TABLES = {"mid": 200_000, "big": 1_000_000}


@pytest.fixture(scope="module")
def stored_tables(server_bin, tmp_path_factory):
    """A data directory holding the TABLES, written by a server that has since stopped."""
    workdir = tmp_path_factory.mktemp("stored")
    builder = Server(server_bin, workdir).start()
    try:
        for table, rows in TABLES.items():
            doc = builder.sql_ok(
                f"CREATE TABLE {table} AS SELECT value AS id, value * 0.5 AS x, "
                f"'row ' || value AS s FROM generate_series(1, {rows})")
            assert doc["affected_rows"] == rows, doc
    finally:
        builder.stop()
    return workdir


class RowCheck:
    """Marks ids 1..rows as seen, so a missing, repeated or foreign row is caught."""

    def __init__(self, rows: int):
        self.rows = rows
        self.seen = bytearray(rows + 1)
        self.count = 0

    def add(self, row) -> None:
        row_id, x, s = row
        assert 1 <= row_id <= self.rows and not self.seen[row_id], row
        assert x == row_id * 0.5 and s == f"row {row_id}", row
        self.seen[row_id] = 1
        self.count += 1

    def assert_complete(self) -> None:
        assert self.count == self.rows, f"{self.count} rows arrived, expected {self.rows}"
        assert self.seen[self.rows] == 1, f"the last id {self.rows} is missing"


def stream_jsonlines(server, query: str, check: RowCheck, on_line=None) -> int:
    """Reads a jsonlines response line by line; returns the number of row lines."""
    body = {"query": query, "response_format": "jsonlines"}
    with requests.post(server.url + "/api/sql/query", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"] == "application/jsonlines"
        assert r.headers.get("Transfer-Encoding") == "chunked"
        lines = r.iter_lines(chunk_size=64 * 1024)
        assert json.loads(next(lines)) == {"type": "table", "column_names": ["id", "x", "s"]}
        row_lines = 0
        for line in lines:
            for row in json.loads(line):
                check.add(row)
            row_lines += 1
            if on_line is not None:
                on_line(row_lines)
    return row_lines


@pytest.mark.parametrize("table", list(TABLES))
def test_jsonlines_stream_of_a_stored_table_keeps_peak_rss_bounded(start_server, stored_tables,
                                                                    table):
    rows = TABLES[table]
    server = start_server(workdir=stored_tables)
    # A small query over the same table first: the baseline includes opening it.
    assert len(server.sql_ok(f"SELECT * FROM {table} LIMIT 1")["data"]) == 1
    baseline = server.peak_rss_bytes()

    check = RowCheck(rows)
    row_lines = stream_jsonlines(server, f"SELECT * FROM {table}", check)
    check.assert_complete()
    assert row_lines > 1, "rows come in several lines (one per batch), not one document"

    growth = server.peak_rss_bytes() - baseline
    print(f"{table}: {rows} rows, peak RSS {baseline / MIB:.1f} MiB + {growth / MIB:.1f} MiB")
    assert growth < PEAK_RSS_GROWTH_BOUND, (
        f"streaming {rows} rows grew the server's peak RSS by {growth / MIB:.1f} MiB "
        f"(bound {PEAK_RSS_GROWTH_BOUND / MIB:.0f} MiB, baseline {baseline / MIB:.1f} MiB)")


def test_sse_stream_of_a_stored_table_delivers_every_row(start_server, stored_tables):
    server = start_server(workdir=stored_tables)
    check = RowCheck(TABLES["mid"])
    body = {"query": "SELECT * FROM mid", "response_format": "sse"}
    with requests.post(server.url + "/api/sql/query", json=body, stream=True, timeout=60) as r:
        assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        events = [line for line in r.iter_lines(chunk_size=64 * 1024) if line]
    assert all(event.startswith(b"data: ") for event in events)
    assert json.loads(events[0][6:]) == {"type": "table", "column_names": ["id", "x", "s"]}
    for event in events[1:]:
        for row in json.loads(event[6:]):
            check.add(row)
    check.assert_complete()


def test_json_document_of_200k_rows_holds_every_row(start_server, stored_tables):
    server = start_server(workdir=stored_tables)
    response = server.sql("SELECT * FROM mid")
    assert response.headers["Content-Length"] == str(len(response.content))
    doc = response.json()
    assert doc["type"] == "table" and doc["column_names"] == ["id", "x", "s"]
    check = RowCheck(TABLES["mid"])
    for row in doc["data"]:
        check.add(row)
    check.assert_complete()


def test_stored_tables_survive_a_restart(start_server, stored_tables):
    server = start_server(workdir=stored_tables)
    doc = server.sql_ok("SELECT count(*) AS n, max(id) AS last FROM big")
    assert doc["data"] == [[TABLES["big"], TABLES["big"]]]


def connection_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True


def test_sigterm_finishes_the_stream_in_flight_then_exits_0(start_server, stored_tables):
    server = start_server(workdir=stored_tables)
    check = RowCheck(TABLES["big"])
    signalled = []

    def after_first_line(row_lines):
        if row_lines == 1:
            server.send_signal()
            signalled.append(time.monotonic())
            deadline = time.monotonic() + 10
            while not connection_refused(server.port):
                assert time.monotonic() < deadline, "still accepting connections after SIGTERM"
                time.sleep(0.05)

    stream_jsonlines(server, "SELECT * FROM big", check, on_line=after_first_line)
    assert signalled, "the stream ended before its second line"
    check.assert_complete()
    assert server.wait_exit() == 0

    # The data file was closed cleanly: a new process opens it and sees every row.
    server.start()
    assert server.sql_ok("SELECT count(*) FROM big")["data"] == [[TABLES["big"]]]
