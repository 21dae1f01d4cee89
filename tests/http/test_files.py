"""Uploaded files (`docs/mindsdb-wire.md` §7, the files_* captures): `PUT /api/files/{name}` as a
multipart form (as MindsDB's clients send it) or as the raw CSV / JSON / Parquet body, `GET /api/files`,
`DELETE /api/files/{name}`; an uploaded file is the table `files.<name>` in SQL."""

from __future__ import annotations

import io
import json

import mindsdb_sdk
import pyarrow as pa
import pyarrow.parquet as pq
import requests

CSV = "x,y,name\n" + "".join(f"{i},{2 * i},{chr(96 + i)}\n" for i in range(1, 11))


def files_url(server, name: str | None = None) -> str:
    return f"{server.url}/api/files" + (f"/{name}" if name is not None else "")


def test_a_multipart_upload_becomes_a_table_listed_queried_and_deleted(server):
    put = requests.put(files_url(server, "t"), timeout=30,
                       files={"file": ("t.csv", CSV, "text/csv")},
                       data={"original_file_name": "t.csv", "source_type": "file"})
    assert put.status_code == 200 and put.json() == "", put.text
    for url in (files_url(server), files_url(server) + "/"):
        listed = requests.get(url, timeout=10)
        assert listed.status_code == 200
        assert listed.json() == [{"name": "t", "row_count": 10, "columns": ["x", "y", "name"]}]
    selected = server.sql_ok("SELECT * FROM files.t LIMIT 3")
    assert selected["column_names"] == ["x", "y", "name"]
    assert selected["data"] == [[1, 2, "a"], [2, 4, "b"], [3, 6, "c"]]
    assert server.sql_ok("SELECT sum(y) FROM files.t")["data"] == [[110]]
    assert server.sql_ok("SHOW TABLES FROM files")["data"] == [["t"]]
    described = server.sql_ok("SELECT table_name, table_rows FROM information_schema.tables "
                              "WHERE table_schema = 'files'")
    assert described["data"] == [["t", 10]]
    columns = server.sql_ok("SELECT column_name FROM information_schema.columns "
                            "WHERE table_schema = 'files' AND table_name = 't'")
    assert [r[0] for r in columns["data"]] == ["x", "y", "name"]

    again = requests.put(files_url(server, "t"), timeout=30,
                         files={"file": ("t.csv", CSV, "text/csv")})
    assert again.status_code == 400, again.text
    assert again.json()["title"] == "File already exists"
    assert again.json()["detail"] == "File with name 't' already exists"

    # A model learns from an uploaded file like from any table.
    created = server.sql_ok("CREATE MODEL mindsdb.from_file FROM files (SELECT x, y FROM t) PREDICT y")
    assert created["data"][0][5] == "generating"

    deleted = requests.delete(files_url(server, "t"), timeout=10)
    assert deleted.status_code == 200 and deleted.json() == ""
    # MindsDB answers a missing file's DELETE with 400 "Error deleting file".
    gone = requests.delete(files_url(server, "t"), timeout=10)
    assert gone.status_code == 400 and gone.json()["title"] == "Error deleting file"
    assert requests.get(files_url(server), timeout=10).json() == []
    missing = server.sql("SELECT * FROM files.t").json()
    assert missing["type"] == "error" and "not found" in missing["error_message"], missing


def test_raw_csv_and_json_bodies(server):
    raw_csv = requests.put(files_url(server, "c"), data=CSV.encode(), timeout=30,
                           headers={"Content-Type": "text/csv"})
    assert raw_csv.status_code == 200, raw_csv.text
    rows = [{"city": "Oslo", "temp": 4.5, "sunny": False}, {"city": "Rome", "temp": 18.0}]
    as_json = requests.put(files_url(server, "j"), json=rows, timeout=30)
    assert as_json.status_code == 200, as_json.text
    lines = "\n".join(json.dumps(r) for r in rows).encode()
    as_lines = requests.put(files_url(server, "l"), data=lines, timeout=30,
                            headers={"Content-Type": "application/x-ndjson"})
    assert as_lines.status_code == 200, as_lines.text
    for name in ("j", "l"):
        got = server.sql_ok(f"SELECT * FROM files.{name} ORDER BY temp")
        # The file's column order, not an alphabetical one; a missing key is NULL.
        assert got["column_names"] == ["city", "temp", "sunny"]
        assert got["data"] == [["Oslo", 4.5, False], ["Rome", 18.0, None]]
    listed = {f["name"]: f["row_count"] for f in requests.get(files_url(server), timeout=10).json()}
    assert listed == {"c": 10, "j": 2, "l": 2}
    joined = server.sql_ok("SELECT count(*) FROM files.c AS c JOIN files.j AS j ON c.x < 3")
    assert joined["data"] == [[4]]
    # SQL removes a file as MindsDB does, but writes none.
    server.sql_ok("DROP TABLE files.c")
    assert sorted(f["name"] for f in requests.get(files_url(server), timeout=10).json()) == ["j", "l"]
    again = server.sql("DROP TABLE files.c").json()
    assert again["type"] == "error" and "'c' not found in database: files" in again["error_message"]
    server.sql_ok("DROP TABLE IF EXISTS files.c")


def test_sql_writes_files_as_mindsdb_does(server):
    """CREATE TABLE files.t (SELECT …), INSERT INTO files.t and DROP TABLE files.t make, fill
    and remove files, which the files API then lists (mindsdb_sdk's table workflow)."""
    server.sql_ok("CREATE TABLE files.made (SELECT 1 AS id, 'Oslo' AS city)")
    server.sql_ok("INSERT INTO files.made (id, city) VALUES (2, 'Paris')")
    got = server.sql_ok("SELECT id, city FROM files.made ORDER BY id")
    assert got["data"] == [[1, "Oslo"], [2, "Paris"]], got
    listed = {f["name"]: f["row_count"] for f in requests.get(files_url(server), timeout=10).json()}
    assert listed.get("made") == 2, listed
    con = mindsdb_sdk.connect(server.url)
    files = con.get_database("files")
    files.create_table("from_sdk", con.query("SELECT 3 AS n"))
    assert server.sql_ok("SELECT n FROM files.from_sdk")["data"] == [[3]]
    server.sql_ok("DROP TABLE files.made")
    server.sql_ok("DROP TABLE files.from_sdk")
    assert "made" not in {f["name"] for f in requests.get(files_url(server), timeout=10).json()}
    refused = server.sql("INSERT INTO information_schema.tables SELECT * FROM information_schema.tables").json()
    assert refused["type"] == "error" and "read-only" in refused["error_message"], refused


def test_parquet_uploads_keep_their_column_types(server):
    table = pa.table({"id": pa.array([1, 2, 3], pa.int32()),
                      "price": [1.5, None, 3.25],
                      "label": ["a", "b", None]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    body = buffer.getvalue()
    multipart = requests.put(files_url(server, "pq"), timeout=30,
                             files={"file": ("prices.parquet", body, "application/octet-stream")})
    assert multipart.status_code == 200, multipart.text
    raw = requests.put(files_url(server, "pq_raw"), data=body, timeout=30,
                       headers={"Content-Type": "application/vnd.apache.parquet"})
    assert raw.status_code == 200, raw.text
    for name in ("pq", "pq_raw"):
        got = server.sql_ok(f"SELECT id, price, label, arrow_typeof(id) FROM files.{name} ORDER BY id")
        assert got["data"] == [[1, 1.5, "a", "Int32"], [2, None, "b", "Int32"], [3, 3.25, None, "Int32"]]
    listed = {f["name"]: f["columns"] for f in requests.get(files_url(server), timeout=10).json()}
    assert listed["pq"] == ["id", "price", "label"]


def test_bad_uploads_are_refused_by_name_and_store_nothing(server):
    cases = [
        (b"", "text/csv", "empty"),
        (b"a,b\n1,2\n3\n", "text/csv", "CSV"),
        (b'[{"a": 1}, 2]', "application/json", "not an object"),
        (b"a,A\n1,2\n", "text/csv", "two columns named 'A'"),
        (b"PAR1\x00\x00", "application/octet-stream", "Parquet"),
    ]
    for body, content_type, named in cases:
        r = requests.put(files_url(server, "bad"), data=body, timeout=10,
                         headers={"Content-Type": content_type})
        assert r.status_code == 400 and named in r.json()["detail"], (body, r.text)
    url = requests.put(files_url(server, "bad"), timeout=10,
                       json={"source_type": "url", "source": "http://127.0.0.1:9/x.csv"})
    assert url.status_code == 400 and url.json()["title"] == "Error getting file", url.text
    no_file = requests.put(files_url(server, "bad"), timeout=10,
                           files={"original_file_name": (None, "x.csv")})
    assert no_file.status_code == 400 and "'file'" in no_file.json()["detail"]
    # What MindsDB does not take is its 400 "Invalid request parameters", naming it.
    other = requests.put(files_url(server, "bad"), timeout=10,
                         files={"other": ("x.csv", CSV, "text/csv")})
    assert other.status_code == 400, other.text
    assert other.json()["title"] == "Invalid request parameters" and "other" in other.json()["detail"]
    extra = requests.put(files_url(server, "bad"), timeout=10,
                         files={"file": ("x.csv", CSV, "text/csv")}, data={"separator": ";"})
    assert extra.json()["title"] == "Invalid request parameters", extra.text
    # A JSON object body is the upload's parameters, never the file.
    for body, title in (({"source_type": "file"}, "File field is missed"),
                        ({"a": 1, "b": 2}, "Invalid request parameters"),
                        ({"source_type": "ftp"}, "Wrong file source type")):
        r = requests.put(files_url(server, "bad"), json=body, timeout=10)
        assert r.status_code == 400 and r.json()["title"] == title, (body, r.text)
    # A large one is a file (a one-row JSON table), never parsed as parameters.
    big = requests.put(files_url(server, "big_object"), json={"a": "x" * 70_000}, timeout=10)
    assert big.status_code == 200, big.text
    assert server.sql_ok("SELECT length(a) FROM files.big_object")["data"] == [[70_000]]
    assert requests.delete(files_url(server, "big_object"), timeout=10).status_code == 200
    bad_name = requests.put(files_url(server, "no%20good"), data=CSV.encode(), timeout=10,
                            headers={"Content-Type": "text/csv"})
    assert bad_name.status_code == 400, bad_name.text
    assert requests.get(files_url(server), timeout=10).json() == []
    wrong_method = requests.post(files_url(server, "bad"), data=CSV.encode(), timeout=10)
    assert wrong_method.status_code == 405 and "PUT" in wrong_method.headers["allow"]
