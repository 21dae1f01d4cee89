"""MindsDB's database, table, view and tree routes (`/api/databases…`, `/api/projects/{p}/views…`,
`/api/tree…`), `/api/util/ping_native` and the chatbot routes, against a real server: codes,
bodies and titles as MindsDB's `mindsdb/api/http/namespaces/` answers them, and `mindsdb_sdk`'s
views, which list through the tree. The PostgreSQL side of these routes is in
test_datasources.py."""

import json
import time

import mindsdb_sdk
import requests

PROBLEM = "application/problem+json"


def call(server, method, path, body=None):
    return requests.request(method, server.url + path, json=body, timeout=30)


def problem(response, status, title):
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"] == PROBLEM, response.headers
    body = response.json()
    assert body["title"] == title, body
    assert body["detail"], body
    return body


def with_objects(server):
    """A project with a stored table, a view, a trained model and a knowledge base."""
    server.sql_ok("CREATE TABLE mindsdb.homes (rooms INT, price DOUBLE)")
    rows = ", ".join(f"({i % 5}, {3 * (i % 5) + 1})" for i in range(60))
    server.sql_ok(f"INSERT INTO mindsdb.homes VALUES {rows}")
    server.sql_ok("CREATE VIEW mindsdb.cheap AS SELECT * FROM homes WHERE price < 5")
    server.sql_ok("CREATE MODEL mindsdb.pricer FROM mindsdb (SELECT * FROM homes) PREDICT price")
    deadline = time.monotonic() + 60
    while server.sql_ok("SELECT status FROM mindsdb.models WHERE name = 'pricer'")["data"][0][0] \
            not in ("complete", "error"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    server.sql_ok("CREATE KNOWLEDGE_BASE mindsdb.notes")
    return server


def test_databases_are_listed_and_read_as_mindsdb_lists_them(server):
    server.sql_ok("CREATE PROJECT proj")
    listed = call(server, "GET", "/api/databases").json()
    by_name = {d["name"]: d for d in listed}
    assert by_name["information_schema"] == {
        "name": "information_schema", "type": "system", "id": None, "engine": None,
        "visible": True, "deletable": False}
    assert by_name["mindsdb"]["type"] == "project" and by_name["mindsdb"]["deletable"] is False
    assert by_name["proj"]["type"] == "project" and by_name["proj"]["deletable"] is True
    assert isinstance(by_name["proj"]["id"], int)
    assert by_name["files"]["type"] == "data" and by_name["files"]["engine"] == "files"
    assert by_name["files"]["deletable"] is False

    one = call(server, "GET", "/api/databases/PROJ")
    assert one.status_code == 200 and one.json()["name"] == "proj"
    problem(call(server, "GET", "/api/databases/nope"), 404, "Database not found")


def test_deleting_databases_follows_mindsdbs_rules(server):
    server.sql_ok("CREATE PROJECT gone")
    server.sql_ok("CREATE TABLE gone.t (a INT)")
    assert call(server, "DELETE", "/api/databases/gone").status_code == 204
    assert "gone" not in {d["name"] for d in call(server, "GET", "/api/databases").json()}
    problem(call(server, "DELETE", "/api/databases/gone"), 404, "Database not found")
    for system in ("information_schema", "log", "mindsdb", "files"):
        problem(call(server, "DELETE", f"/api/databases/{system}"), 400, "Error")


def test_creating_a_database_checks_its_body_and_its_engine(server):
    problem(call(server, "POST", "/api/databases", {}), 400, "Wrong argument")
    problem(call(server, "POST", "/api/databases", {"database": {"engine": "postgres"}}),
            400, "Wrong argument")
    no_engine = problem(call(server, "POST", "/api/databases", {"database": {"name": "x"}}),
                        400, "Wrong argument")
    assert "/api/projects" in no_engine["detail"]
    taken = call(server, "POST", "/api/databases",
                 {"database": {"name": "mindsdb", "engine": "postgres"}})
    problem(taken, 409, "Name conflict")
    # An engine this build lacks is refused; with check_connection it is MindsDB's 200 body.
    unknown = {"database": {"name": "x", "engine": "nosuch", "parameters": {}}}
    problem(call(server, "POST", "/api/databases", unknown), 400, "Bad Request")
    checked = call(server, "POST", "/api/databases", {**unknown, "check_connection": True})
    assert checked.status_code == 200
    assert checked.json()["status"] == "connection_error"
    assert "nosuch" in checked.json()["detail"]
    status = call(server, "POST", "/api/databases/status", {"engine": "nosuch"})
    assert status.status_code == 200 and status.json()["status"] == "connection_error"
    problem(call(server, "POST", "/api/databases/status", {}), 400, "Wrong argument")


def test_a_projects_tables_list_every_object_that_reads_as_one(server):
    with_objects(server)
    tables = call(server, "GET", "/api/databases/mindsdb/tables").json()
    assert {t["name"]: t["type"] for t in tables} == {
        "homes": "data", "cheap": "view", "pricer": "model", "models": "data",
        "notes": "knowledge base"}
    assert call(server, "GET", "/api/databases/mindsdb/tables/PRICER").json() == {
        "name": "pricer", "type": "model"}
    problem(call(server, "GET", "/api/databases/mindsdb/tables/nope"), 404, "Table not found")
    problem(call(server, "GET", "/api/databases/nope/tables"), 404, "Database not found")

    shown = server.sql_ok("SHOW FULL TABLES FROM mindsdb")
    assert dict(shown["data"]) == {
        "homes": "BASE TABLE", "cheap": "VIEW", "pricer": "MODEL", "models": "BASE TABLE",
        "notes": "KNOWLEDGE BASE"}

    tree = {n["name"]: n for n in call(server, "GET", "/api/tree/mindsdb").json()}
    assert tree["pricer"] == {"name": "pricer", "schema": None, "class": "table",
                              "type": "model", "engine": "builtin", "deletable": True}
    assert tree["homes"]["type"] == "table" and tree["models"]["deletable"] is False
    assert tree["notes"]["type"] == "knowledge_base"
    roots = {n["name"]: n for n in call(server, "GET", "/api/tree").json()}
    assert roots["mindsdb"] == {"name": "mindsdb", "class": "db", "type": "project",
                                "engine": None, "deletable": False, "visible": True}
    problem(call(server, "GET", "/api/tree/nope"), 400, "Error")
    system = call(server, "GET", "/api/tree/information_schema").json()
    assert {"name": "tables", "schema": None, "class": "table", "type": "system view",
            "engine": None, "deletable": False} in system


def test_tables_are_made_from_a_select_and_dropped(server):
    with_objects(server)
    made = call(server, "POST", "/api/databases/mindsdb/tables",
                {"table": {"name": "big", "select": "SELECT * FROM mindsdb.homes WHERE rooms > 2"}})
    assert made.status_code == 201, made.text
    assert made.json() == {"name": "big", "type": "data"}
    assert server.sql_ok("SELECT count(*) FROM mindsdb.big")["data"] == [[24]]
    again = {"table": {"name": "big", "select": "SELECT 1 AS one"}}
    problem(call(server, "POST", "/api/databases/mindsdb/tables", again), 409, "Name conflict")
    again["table"]["replace"] = True
    assert call(server, "POST", "/api/databases/mindsdb/tables", again).status_code == 201
    assert server.sql_ok("SELECT * FROM mindsdb.big")["data"] == [[1]]
    for body in ({}, {"table": {"select": "SELECT 1"}}, {"table": {"name": "x"}}):
        problem(call(server, "POST", "/api/databases/mindsdb/tables", body), 400, "Wrong argument")
    bad = {"table": {"name": "x", "select": "SELECT * FROM nowhere"}}
    problem(call(server, "POST", "/api/databases/mindsdb/tables", bad), 400, "Error")
    # An odd name is a name, never SQL: refused as a name.
    odd = {"table": {"name": "a`b; DROP TABLE homes", "select": "SELECT 2 AS two"}}
    refused = problem(call(server, "POST", "/api/databases/mindsdb/tables", odd), 400, "Error")
    assert "Invalid table name" in refused["detail"], refused
    assert server.sql_ok("SELECT count(*) FROM mindsdb.homes")["data"] == [[60]]

    assert call(server, "DELETE", "/api/databases/mindsdb/tables/big").status_code == 204
    problem(call(server, "DELETE", "/api/databases/mindsdb/tables/big"), 404, "Table not found")
    # A project's other objects have their own routes.
    for name in ("pricer", "cheap", "models"):
        problem(call(server, "DELETE", f"/api/databases/mindsdb/tables/{name}"), 400, "Error")
    assert server.sql_ok("SELECT count(*) FROM mindsdb.cheap")["data"][0][0] > 0


def test_views_are_created_read_changed_and_deleted(server):
    with_objects(server)
    base = "/api/projects/mindsdb/views"
    made = call(server, "POST", base, {"view": {"name": "two", "query": "SELECT * FROM homes WHERE rooms = 2"}})
    assert made.status_code == 201, made.text
    assert made.json() == {"id": None, "name": "two", "query": "SELECT * FROM homes WHERE rooms = 2"}
    assert {v["name"] for v in call(server, "GET", base).json()} == {"cheap", "two"}
    assert call(server, "GET", f"{base}/two").json()["name"] == "two"
    problem(call(server, "POST", base, {"view": {"name": "two", "query": "SELECT 1"}}),
            409, "Name conflict")
    problem(call(server, "POST", base, {"view": {"name": "x"}}), 400, "Wrong argument")
    problem(call(server, "POST", base, {}), 400, "Wrong argument")
    problem(call(server, "POST", base, {"view": {"name": "x", "query": "SELECT * FROM nowhere"}}),
            400, "Error")

    changed = call(server, "PUT", f"{base}/two", {"view": {"query": "SELECT rooms FROM homes WHERE rooms = 3"}})
    assert changed.status_code == 200 and "rooms = 3" in changed.json()["query"]
    assert server.sql_ok("SELECT DISTINCT rooms FROM mindsdb.two")["data"] == [[3]]
    created = call(server, "PUT", f"{base}/three", {"view": {"query": "SELECT 3 AS n"}})
    assert created.status_code == 201
    problem(call(server, "PUT", f"{base}/four", {"view": {}}), 400, "Wrong argument")

    assert call(server, "DELETE", f"{base}/two").status_code == 204
    problem(call(server, "GET", f"{base}/two"), 404, "View not found")
    problem(call(server, "DELETE", f"{base}/two"), 404, "View not found")
    problem(call(server, "GET", "/api/projects/nope/views"), 404, "Project not found")


def test_mindsdb_sdk_lists_creates_and_drops_views(server):
    with_objects(server)
    project = mindsdb_sdk.connect(server.url).get_project("mindsdb")
    assert [v.name for v in project.views.list()] == ["cheap"]
    project.views.create("rich", "SELECT * FROM mindsdb.homes WHERE price > 10")
    assert sorted(v.name for v in project.views.list()) == ["cheap", "rich"]
    assert len(project.views.get("rich").fetch()) == 12
    project.views.drop("rich")
    assert [v.name for v in project.views.list()] == ["cheap"]
    tree = mindsdb_sdk.connect(server.url).tree()
    assert {"information_schema", "mindsdb", "files"} <= {node.name for node in tree}


def test_ping_native_says_what_runs_and_chatbots_are_not_served(server):
    assert call(server, "GET", "/api/util/ping_native").json() == {
        "learn": False, "predict": False, "analyse": False}
    for method, path in (("GET", "/api/projects/mindsdb/chatbots"),
                         ("POST", "/api/projects/mindsdb/chatbots"),
                         ("DELETE", "/api/projects/mindsdb/chatbots/bot")):
        body = problem(call(server, method, path, {} if method == "POST" else None),
                       501, "Not implemented")
        assert "chat service" in body["detail"]


def test_parametrize_constants_turns_literals_into_named_parameters(server):
    """MindsDB's editor utility: the statement back with `:name` for each literal, the
    parameters, and the databases and tables it names; nothing is run."""
    r = call(server, "POST", "/api/sql/query/utils/parametrize_constants", {
        "query": "SELECT name, 3 AS three FROM pg.people WHERE age > 30 AND city = 'Oslo'"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "query": "SELECT name, :three AS three FROM pg.people WHERE age > :age AND city = :city",
        "parameters": [{"name": "three", "value": 3, "type": "int"},
                       {"name": "age", "value": 30, "type": "int"},
                       {"name": "city", "value": "Oslo", "type": "str"}],
        "databases": {"pg": ["people"]}}
    for body in ({}, {"query": "SELEC 1"}, {"query": "CREATE PROJECT x"}, {"query": "SELECT 1; SELECT 2"}):
        bad = call(server, "POST", "/api/sql/query/utils/parametrize_constants", body)
        assert bad.status_code == 400 and bad.json()["detail"], (body, bad.text)
    assert server.sql_ok("SHOW DATABASES")["data"].count(["x"]) == 0


def test_request_params_and_set_variables_fill_parameters(server, tmp_path):
    """MindsDB's `@name` in PARAMETERS: the request's `params` first, then `SET @name`."""
    (tmp_path / "t.csv").write_text("x\n1\n2\n")
    create = 'CREATE DATABASE f ENGINE = "files" PARAMETERS = {"path": @dir}'
    missing = server.sql(create).json()
    assert missing["type"] == "error" and "@dir" in missing["error_message"], missing
    assert server.sql_ok(create, params={"dir": str(tmp_path)})["type"] == "ok"
    shown = server.sql_ok("SELECT connection_data FROM information_schema.databases "
                          "WHERE name = 'f'")["data"][0][0]
    assert json.loads(shown)["path"] == str(tmp_path)

    assert server.sql_ok(f"SET @dir = '{tmp_path}'")["type"] == "ok"
    server.restart()
    assert server.sql_ok(create.replace(" f ", " g "))["type"] == "ok"
    assert server.sql_ok("SELECT sum(x) AS s FROM g.t")["data"] == [[3]]
