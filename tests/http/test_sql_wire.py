"""`POST /api/sql/query` against MindsDB 26.1's own bytes (core/tests/captures): the body, the
Content-Type and the framing (Content-Length for the JSON document, chunked for jsonlines and
SSE) must match; Date, Server and Vary are not compared. Then `:name` parameters."""

import json

import pytest
import requests

from mlserver import load_capture

IGNORED_HEADERS = {"date", "server", "vary"}


def send_capture_request(server, capture) -> requests.Response:
    return requests.post(server.url + "/api/sql/query", json=capture.request, timeout=30)


def assert_framing(response: requests.Response, chunked: bool) -> None:
    headers = response.headers
    if chunked:
        assert headers.get("Transfer-Encoding", "").lower() == "chunked", dict(headers)
        assert "Content-Length" not in headers, dict(headers)
    else:
        assert "Transfer-Encoding" not in headers, dict(headers)
        assert headers.get("Content-Length") == str(len(response.content)), dict(headers)


def assert_answers_like_capture(server, name: str, adjust=lambda body: body) -> None:
    """Sends the capture's request and compares status, Content-Type, framing and body bytes;
    `adjust` maps MindsDB's body to mindlite's where mindlite deliberately differs."""
    capture = load_capture(name)
    response = send_capture_request(server, capture)
    assert response.status_code == capture.status, response.text
    assert response.headers.get("Content-Type") == capture.content_type
    assert_framing(response, capture.chunked)
    assert response.content.decode() == adjust(capture.body).decode(), f"capture {name}"


@pytest.mark.parametrize("name", ["sql_select1", "sql_select1_jsonlines", "sql_select1_sse"])
def test_select_1_matches_mindsdb_in_each_format(server, name):
    assert_answers_like_capture(server, name)


@pytest.mark.parametrize(
    "name", ["sql_error_nosuch", "sql_error_nosuch_jsonlines", "sql_error_nosuch_sse"])
def test_missing_table_is_an_http_200_error_result_in_each_format(server, name):
    assert_answers_like_capture(server, name)


@pytest.mark.parametrize("name", ["sql_ok_type", "sql_ok_type_jsonlines"])
def test_create_project_answers_an_ok_result_like_mindsdb(server, name):
    assert_answers_like_capture(server, name)


def without_midnight(body: bytes) -> bytes:
    # MindsDB renders a DATE through pandas as a midnight timestamp; mindlite deliberately sends
    # `YYYY-MM-DD` (core/tests/wire.rs). Every other byte is MindsDB's.
    return body.replace(b" 00:00:00.000000", b"")


@pytest.mark.parametrize("name", ["sql_types", "sql_types_jsonlines"])
def test_cell_types_encode_like_mindsdb_except_dates(server, name):
    assert_answers_like_capture(server, name, without_midnight)


def test_context_db_is_echoed_in_the_result(server):
    assert_answers_like_capture(server, "sql_context_db")


def test_show_databases_lists_the_builtin_databases_like_mindsdb(server):
    assert_answers_like_capture(server, "sql_show_databases")


def test_streamed_error_is_one_item_and_no_table_header(server):
    # A value error met while the rows are computed (division by zero is NULL, as in DuckDB).
    response = server.sql("SELECT CAST(column1 AS INT) AS x FROM (VALUES ('abc'))",
                          response_format="sse")
    assert response.status_code == 200
    frames = response.content.decode().split("\n\n")
    assert frames[-1] == "" and len(frames) == 2, response.content
    item = json.loads(frames[0].removeprefix("data: "))
    assert item["type"] == "error" and item["error_code"] == 0, item


def test_empty_result_streams_only_the_table_header(server):
    response = server.sql("SELECT 1 WHERE false", response_format="jsonlines")
    assert response.content == b'{"type":"table","column_names":["1"]}\n'
    assert_framing(response, chunked=True)


def test_use_changes_the_context_db_of_the_result(server):
    server.sql_ok("CREATE PROJECT other")
    doc = server.sql("USE other").json()
    assert doc["context"] == {"show_secrets": False, "db": "other"}, doc


def test_rows_stored_by_one_request_are_read_by_the_next(server):
    server.sql_ok("CREATE TABLE t (id BIGINT, name VARCHAR)")
    inserted = server.sql_ok("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    assert inserted == {"type": "ok", "affected_rows": 2,
                        "context": {"show_secrets": False, "db": "mindsdb"}}
    doc = server.sql_ok("SELECT id, name FROM mindsdb.t ORDER BY id")
    assert doc["data"] == [[1, "one"], [2, "two"]]
    assert doc["column_names"] == ["id", "name"]


@pytest.mark.parametrize("statement", ["BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK"])
def test_the_http_api_stays_autocommit_as_mindsdb_does(server, statement):
    doc = server.sql(statement).json()
    if statement in ("COMMIT", "ROLLBACK"):
        # Nothing is open to end: they do nothing, as MySQL's do with autocommit on.
        assert doc["type"] == "ok", doc
    else:
        assert doc["type"] == "error", doc
        assert "not supported over HTTP" in doc["error_message"], doc
    # Nothing was left open: the next write is committed and seen at once.
    server.sql_ok("CREATE TABLE IF NOT EXISTS autocommit_t (id BIGINT)")
    server.sql_ok("INSERT INTO autocommit_t VALUES (1)")
    assert server.sql_ok("SELECT count(*) AS n FROM autocommit_t")["data"][0][0] >= 1


def test_jsonlines_rows_arrive_as_arrays_of_row_arrays(server):
    response = server.sql("SELECT value AS n FROM generate_series(1, 20000)",
                          response_format="jsonlines")
    lines = response.content.decode().splitlines()
    assert json.loads(lines[0]) == {"type": "table", "column_names": ["n"]}
    rows = [row for line in lines[1:] for row in json.loads(line)]
    assert sorted(r[0] for r in rows) == list(range(1, 20001))


# Parameters: `:name` placeholders bound as values from `params`.

def test_null_parameter_binds_sql_null(server):
    doc = server.sql_ok("SELECT :a AS a, :b IS NULL AS b_is_null", params={"a": None, "b": None})
    assert doc["data"] == [[None, True]], doc


def test_list_parameter_binds_an_in_list(server):
    server.sql_ok("CREATE TABLE t (id BIGINT)")
    server.sql_ok("INSERT INTO t VALUES (1), (2), (3), (4)")
    doc = server.sql_ok("SELECT id FROM t WHERE id IN :ids ORDER BY id", params={"ids": [2, 4]})
    assert doc["data"] == [[2], [4]], doc


QUOTED = "it's \"quoted\" \\ back\\slash '; DROP TABLE t; --"


def test_string_parameter_with_quotes_and_backslashes_round_trips(server):
    doc = server.sql_ok("SELECT :s AS s", params={"s": QUOTED})
    assert doc["data"] == [[QUOTED]], doc


def test_string_parameter_is_stored_as_a_value_never_spliced_as_sql(server):
    server.sql_ok("CREATE TABLE t (id BIGINT, s VARCHAR)")
    server.sql_ok("INSERT INTO t VALUES (:id, :s)", params={"id": 1, "s": QUOTED})
    doc = server.sql_ok("SELECT s FROM t WHERE s = :s", params={"s": QUOTED})
    assert doc["data"] == [[QUOTED]], doc
    assert server.sql_ok("SELECT count(*) AS n FROM t")["data"] == [[1]]


def test_parameters_work_in_the_streaming_formats(server):
    response = server.sql("SELECT :n AS n, :s AS s", params={"n": 7, "s": "x"},
                          response_format="jsonlines")
    assert response.content == b'{"type":"table","column_names":["n","s"]}\n[[7,"x"]]\n'


def test_unknown_parameter_is_an_error_result_naming_it(server):
    response = server.sql("SELECT :missing AS m", params={"other": 1})
    assert response.status_code == 200
    doc = response.json()
    assert doc["type"] == "error" and "missing" in doc["error_message"], doc


def test_what_a_mysql_client_asks_on_connect_is_answered_like_mindsdb(server):
    """The statements MySQL clients and MindsDB's editor send on connect, over HTTP as MindsDB
    answers them there too (MindsDB's own test_http.py sends the same list)."""
    def table(sql):
        body = server.sql(sql).json()
        assert body["type"] == "table", (sql, body)
        return body["column_names"], body["data"]

    names, data = table("SHOW VARIABLES LIKE 'version%'")
    assert names == ["Variable_name", "Value"]
    assert data == [["version_comment", "(MindsDB)"], ["version", "8.0.17"]]
    assert table("SELECT @@version, @@session.auto_increment_increment") == (
        ["@@version", "@@session.auto_increment_increment"], [["8.0.17", 1]])
    assert len(table("SHOW SESSION VARIABLES")[1]) == 3
    assert table("SELECT VERSION(), DATABASE()")[1] == [["8.0.17", "mindsdb"]]
    assert table("SHOW COLLATION WHERE charset = 'utf8'")[1] == [
        ["utf8_general_ci", "utf8", 33, "Yes", "Yes", 1, "PAD SPACE"]]
    assert table("SHOW FUNCTION STATUS")[1] == []
    assert table("SHOW WARNINGS") == (["Level", "Code", "Message"], [])
    for setting in ("SET NAMES utf8mb4", "SET autocommit = 1",
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"):
        body = server.sql(setting).json()
        assert body["type"] == "ok", (setting, body)
