"""MindsDB's own Python SDK (`mindsdb_sdk` 3.5.0, unmodified) against mindlite-server: connect
with and without a login, projects, tables stored in a project, inserts and fetches as pandas
DataFrames, and SQL errors. The SDK's traffic is listed in `docs/mindsdb-wire.md` §1 and §7."""

import mindsdb_sdk
import pandas as pd
import pytest
import requests
from mindsdb_sdk.databases import Database
from mindsdb_sdk.query import Query

from mlserver import AUTH_CONFIG


def project_names(con) -> list[str]:
    return [project.name for project in con.list_projects()]


def mindsdb_project_tables(con) -> Database:
    # The SDK reaches tables through a Database; mindlite stores tables in projects, so the
    # default project is addressed as one (its SQL: `mindsdb.<table>`).
    return Database(con, "mindsdb")


def sorted_frame(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    return frame.sort_values(by).reset_index(drop=True)


def test_sdk_connects_without_credentials_and_lists_the_default_project(server):
    con = mindsdb_sdk.connect(server.url)
    assert project_names(con) == ["mindsdb"]
    assert con.get_project("mindsdb").name == "mindsdb"


def test_sdk_reads_the_server_status(server):
    status = mindsdb_sdk.connect(server.url).status()
    assert status["auth"]["http_auth_enabled"] is False


def test_sdk_creates_and_drops_a_project(server):
    con = mindsdb_sdk.connect(server.url)
    created = con.create_project("sdk_project")
    assert created.name == "sdk_project"
    assert sorted(project_names(con)) == ["mindsdb", "sdk_project"]
    assert requests.get(server.url + "/api/projects/sdk_project", timeout=10).status_code == 200
    con.drop_project("sdk_project")
    assert project_names(con) == ["mindsdb"]
    with pytest.raises(AttributeError):
        con.get_project("sdk_project")


def test_sdk_lists_the_files_database(server):
    con = mindsdb_sdk.connect(server.url)
    assert "files" in [db.name for db in con.list_databases()]


def test_sdk_creates_a_table_from_a_query_inserts_and_fetches_a_dataframe(server):
    con = mindsdb_sdk.connect(server.url)
    db = mindsdb_project_tables(con)
    table = db.tables.create(
        "people", Query(con.api, "SELECT 1 AS id, 'ann' AS name, 1.5 AS score"))
    assert "people" in [t.name for t in db.tables.list()]

    table.insert(pd.DataFrame({"id": [2, 3], "name": ["bob", "cy"], "score": [2.5, 3.5]}))

    frame = table.fetch()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["id", "name", "score"]
    assert sorted_frame(frame, "id").values.tolist() == [
        [1, "ann", 1.5], [2, "bob", 2.5], [3, "cy", 3.5]]

    filtered = table.filter(name="bob").fetch()
    assert filtered.values.tolist() == [[2, "bob", 2.5]]
    assert len(table.limit(2).fetch()) == 2


def test_sdk_updates_and_deletes_rows(server):
    con = mindsdb_sdk.connect(server.url)
    db = mindsdb_project_tables(con)
    table = db.tables.create("t", Query(con.api, "SELECT 1 AS id, 'a' AS v"))
    table.insert(pd.DataFrame({"id": [2, 3], "v": ["b", "c"]}))
    table.update({"v": "bee"}, filters={"id": 2})
    table.delete(id=1)
    assert sorted_frame(table.fetch(), "id").values.tolist() == [[2, "bee"], [3, "c"]]


def test_sdk_drops_a_table(server):
    con = mindsdb_sdk.connect(server.url)
    db = mindsdb_project_tables(con)
    db.tables.create("tmp", Query(con.api, "SELECT 1 AS x"))
    db.tables.drop("tmp")
    assert "tmp" not in [t.name for t in db.tables.list()]
    with pytest.raises(RuntimeError, match="tmp"):
        db.tables.get("tmp").fetch()


def test_sdk_inserts_text_with_quotes_and_backslashes(server):
    # The SDK renders these as "it's" (double quotes) and 'back\\slash' (backslash-escaped).
    con = mindsdb_sdk.connect(server.url)
    db = mindsdb_project_tables(con)
    table = db.tables.create("notes", Query(con.api, "SELECT 0 AS id, 'plain' AS text"))
    table.insert(pd.DataFrame({"id": [1, 2], "text": ["it's", "back\\slash"]}))
    frame = sorted_frame(table.fetch(), "id")
    assert frame["text"].tolist() == ["plain", "it's", "back\\slash"]
    assert table.filter(text="it's").fetch()["id"].tolist() == [1]


def test_sdk_project_query_runs_in_that_project(server):
    con = mindsdb_sdk.connect(server.url)
    project = con.create_project("proj")
    project.query("CREATE TABLE t (x BIGINT)").fetch()
    project.query("INSERT INTO t VALUES (7)").fetch()
    assert project.query("SELECT x FROM t").fetch()["x"].tolist() == [7]
    assert con.query("SELECT x FROM proj.t").fetch()["x"].tolist() == [7]


def test_sdk_raises_the_sql_error_message(server):
    con = mindsdb_sdk.connect(server.url)
    with pytest.raises(RuntimeError, match="Table 'nosuch' not found in database: mindsdb"):
        con.query("SELECT * FROM nosuch").fetch()


def test_sdk_query_with_parameters_through_the_rest_route(server):
    # mindsdb_sdk has no parameter API; its REST route takes `params` (`docs/mindsdb-wire.md` §2).
    con = mindsdb_sdk.connect(server.url)
    con.query("CREATE TABLE items (id BIGINT, name VARCHAR)").fetch()
    mindsdb_project_tables(con).tables.get("items").insert(
        pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    response = con.api.session.post(server.url + "/api/sql/query", json={
        "query": "SELECT name FROM items WHERE id IN :ids AND name <> :skip ORDER BY id",
        "params": {"ids": [1, 2, 3], "skip": "b"}, "context": {"db": "mindsdb"}}, timeout=10)
    assert response.json()["data"] == [["a"], ["c"]]


# With auth: connect() logs in through /cloud/login (404) then /api/login and sends the token.

def test_sdk_logs_in_through_the_cloud_login_fallback(start_server):
    server = start_server(AUTH_CONFIG)
    con = mindsdb_sdk.connect(server.url, login="admin", password="secret")
    assert con.api.session.headers["Authorization"].startswith("Bearer pat_")
    assert project_names(con) == ["mindsdb"]
    assert con.query("SELECT 1 AS one").fetch()["one"].tolist() == [1]
    log = server.log_text()
    assert log.index("/cloud/login") < log.index("/api/login"), "cloud login tried first"


def test_sdk_with_auth_creates_tables_and_fetches(start_server):
    con = mindsdb_sdk.connect(start_server(AUTH_CONFIG).url, login="admin", password="secret")
    db = mindsdb_project_tables(con)
    table = db.tables.create("t", Query(con.api, "SELECT 1 AS id"))
    table.insert(pd.DataFrame({"id": [2]}))
    assert sorted(table.fetch()["id"].tolist()) == [1, 2]


def test_sdk_with_wrong_password_fails_to_connect(start_server):
    server = start_server(AUTH_CONFIG)
    with pytest.raises(requests.HTTPError) as failure:
        mindsdb_sdk.connect(server.url, login="admin", password="wrong")
    assert failure.value.response.status_code == 401


def test_sdk_logs_in_again_when_its_token_was_revoked(start_server):
    server = start_server(AUTH_CONFIG)
    con = mindsdb_sdk.connect(server.url, login="admin", password="secret")
    old = con.api.session.headers["Authorization"]
    revoked = requests.post(server.url + "/api/logout", headers={"Authorization": old}, timeout=10)
    assert revoked.status_code == 200
    assert project_names(con) == ["mindsdb"]
    assert con.api.session.headers["Authorization"] != old


def test_sdk_without_credentials_against_an_auth_server_gets_401(start_server):
    con = mindsdb_sdk.connect(start_server(AUTH_CONFIG).url)
    with pytest.raises(requests.HTTPError) as failure:
        con.list_projects()
    assert failure.value.response.status_code == 401
