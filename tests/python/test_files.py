"""Uploaded files from Python: bytes, text or a path become the table files.<name>, listed,
queried and removed through the engine (the same core as PUT /api/files)."""

import pytest

import mindlite


@pytest.fixture
def con():
    con = mindlite.connect()
    yield con
    con.close()


def test_files_from_bytes_text_and_paths(con, tmp_path):
    assert con.upload_file("scores", b"who,points\nana,3\nbo,5\n") == 2
    assert con.upload_file("cities", '[{"city": "Oslo", "temp": 4.5}, {"city": "Rome"}]') == 2
    path = tmp_path / "rows.csv"
    path.write_text("a;b\n1;2\n")
    assert con.upload_file("semi", path, format="csv") == 1  # one column named "a;b"
    assert con.upload_file("lines", '{"x": 1}\n{"x": 2}\n', format="json") == 2
    listed = {f["name"]: (f["row_count"], f["columns"]) for f in con.files()}
    assert listed == {"cities": (2, ["city", "temp"]), "lines": (2, ["x"]),
                      "scores": (2, ["who", "points"]), "semi": (1, ["a;b"])}
    cur = con.execute("SELECT who, points FROM files.scores ORDER BY points DESC")
    assert cur.fetchall() == [("bo", 5), ("ana", 3)]
    con.delete_file("scores")
    assert "scores" not in {f["name"] for f in con.files()}


def test_file_errors_are_clear(con):
    con.upload_file("t", b"a\n1\n")
    with pytest.raises(mindlite.ProgrammingError, match="already exists"):
        con.upload_file("t", b"a\n1\n")
    with pytest.raises(mindlite.ProgrammingError, match="Unknown file format 'xml'"):
        con.upload_file("u", b"<a/>", format="xml")
    with pytest.raises(mindlite.ProgrammingError, match="not an object"):
        con.upload_file("u", "[1, 2]")
    with pytest.raises(mindlite.ProgrammingError, match="'nope'"):
        con.delete_file("nope")
    assert [f["name"] for f in con.files()] == ["t"]


def test_parquet_files_keep_their_types(con, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "measures.parquet"
    pq.write_table(pa.table({"at": pa.array([1, 2], pa.int16()), "value": [0.5, None]}), path)
    assert con.upload_file("measures", path) == 2
    assert con.upload_file("measures_bytes", path.read_bytes(), format="parquet") == 2
    for name in ("measures", "measures_bytes"):
        cur = con.execute(f"SELECT at, value, arrow_typeof(at) FROM files.{name} ORDER BY at")
        assert cur.fetchall() == [(1, 0.5, "Int16"), (2, None, "Int16")]


def test_documents_and_files_from_urls(con, tmp_path):
    import http.server
    import threading

    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\n" + "A line of notes. " * 60)
    assert con.upload_file("notes", notes) >= 2
    cur = con.execute("SELECT content, metadata FROM files.notes")
    rows = cur.fetchall()
    assert rows[0][0].startswith("# Notes") and '"file_format":"md"' in rows[0][1]
    assert con.upload_file("page", b"<p>Hello <b>there</b></p>", format="html") == 1
    assert con.execute("SELECT content FROM files.page").fetchall() == [("Hello there",)]

    class Serve(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b"k,v\n1,one\n2,two\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{host.server_address[1]}/pairs.csv"
        assert con.upload_url("pairs", url) == 2
        with pytest.raises(mindlite.ProgrammingError, match="already exists"):
            con.upload_url("pairs", url)
    finally:
        host.shutdown()
    assert con.execute("SELECT v FROM files.pairs ORDER BY k").fetchall() == [("one",), ("two",)]
