"""PostgreSQL datasources through the server: MindsDB's SDK (`mindsdb_sdk`, unmodified) creates,
lists, updates and drops one and queries its tables; the SQL route masks its password. The
test command starts PostgreSQL (scripts/postgres.sh) and passes its URL in PGTEST_URL."""

import json
import os
import subprocess
from urllib.parse import urlparse

import mindsdb_sdk
import pytest
import requests

PG_URL = os.environ.get("PGTEST_URL")
if PG_URL is None and os.environ.get("CI") == "true":
    raise RuntimeError("PGTEST_URL is not set: scripts/test.sh starts PostgreSQL for these tests")
pytestmark = pytest.mark.skipif(PG_URL is None, reason="PGTEST_URL is not set")


def psql(sql: str) -> str:
    """Runs `sql` on the test server directly (unaligned, tuples only)."""
    done = subprocess.run(
        ["psql", PG_URL, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def connection_args() -> dict:
    url = urlparse(PG_URL)
    return {
        "host": url.hostname,
        "port": url.port,
        "database": url.path.lstrip("/"),
        "user": url.username,
        "password": "pw-not-checked-by-trust",
    }


def sql(server, query: str, **context) -> dict:
    body = {"query": query, "context": context} if context else {"query": query}
    return requests.post(f"{server.url}/api/sql/query", json=body, timeout=30).json()


def test_sdk_creates_lists_queries_updates_and_drops_a_postgres_database(server):
    psql(
        "DROP TABLE IF EXISTS sdk_people; "
        "CREATE TABLE sdk_people (id int PRIMARY KEY, name text, born date); "
        "INSERT INTO sdk_people VALUES (1, 'Ada', '1815-12-10'), (2, 'Alan', '1912-06-23'), (3, 'Grace', NULL);"
    )
    con = mindsdb_sdk.connect(server.url)
    db = con.databases.create("pgsdk", engine="postgres", connection_args=connection_args())
    assert db.name == "pgsdk"

    listed = {d.name: d for d in con.databases.list()}
    assert "pgsdk" in listed
    assert listed["pgsdk"].engine == "postgres"
    # The SDK shows CONNECTION_DATA as the server sent it: the password masked.
    params = listed["pgsdk"].params
    params = json.loads(params) if isinstance(params, str) else params
    assert params["password"] == "******"
    assert params["port"] == connection_args()["port"]

    db = con.databases.get("pgsdk")
    assert "sdk_people" in [t.name for t in db.tables.list()]
    frame = db.query("SELECT id, name FROM sdk_people WHERE id >= 2 ORDER BY id").fetch()
    assert frame["name"].tolist() == ["Alan", "Grace"]
    frame = db.get_table("sdk_people").filter(name="Ada").fetch()
    assert frame["id"].tolist() == [1]

    # A native query, in PostgreSQL's own syntax, through the SQL route.
    answer = sql(server, "SELECT * FROM pgsdk (SELECT name, born::text AS born FROM sdk_people WHERE born IS NOT NULL ORDER BY id)")
    assert answer["type"] == "table", answer
    assert answer["data"] == [["Ada", "1815-12-10"], ["Alan", "1912-06-23"]]

    # Secrets are shown only when the request asks.
    query = "SELECT CONNECTION_DATA FROM information_schema.databases WHERE NAME = 'pgsdk'"
    assert json.loads(sql(server, query)["data"][0][0])["password"] == "******"
    shown = sql(server, query, show_secrets=True)
    assert json.loads(shown["data"][0][0])["password"] == "pw-not-checked-by-trust"
    assert shown["context"]["show_secrets"] is True

    # update: the SDK sends ALTER DATABASE pgsdk parameters={…}; a bad port is refused.
    bad = dict(connection_args(), port=1)
    with pytest.raises(Exception) as refused:
        con.databases.update("pgsdk", connection_args=bad)
    assert "127.0.0.1:1" in str(refused.value)
    changed = dict(connection_args(), password="another")
    con.databases.update("pgsdk", connection_args=changed)
    assert json.loads(sql(server, query, show_secrets=True)["data"][0][0])["password"] == "another"

    # Writes go through: INSERT and CREATE TABLE … (SELECT …).
    answer = sql(server, "INSERT INTO pgsdk.sdk_people (id, name) VALUES (4, 'Edsger')")
    assert answer["type"] == "ok", answer
    assert psql("SELECT name FROM sdk_people WHERE id = 4") == "Edsger"
    answer = sql(server, "CREATE OR REPLACE TABLE pgsdk.sdk_names (SELECT name FROM pgsdk.sdk_people WHERE id < 3)")
    assert answer["type"] == "ok", answer
    assert psql("SELECT string_agg(name, ',' ORDER BY name) FROM sdk_names") == "Ada,Alan"

    con.databases.drop("pgsdk")
    assert "pgsdk" not in [d.name for d in con.databases.list()]
    answer = sql(server, "SELECT * FROM pgsdk.sdk_people")
    assert answer["type"] == "error"


def test_an_unreachable_postgres_is_refused_with_host_and_port(server):
    args = dict(connection_args(), port=1)
    answer = sql(
        server,
        f"CREATE DATABASE down ENGINE = 'postgres', PARAMETERS = {json.dumps(args)}",
    )
    assert answer["type"] == "error", answer
    assert "Cannot connect to PostgreSQL at 127.0.0.1:1" in answer["error_message"]
    names = [row[0] for row in sql(server, "SHOW DATABASES")["data"]]
    assert "down" not in names


def test_mindsdbs_database_routes_create_read_list_tables_and_delete_a_postgres(server):
    """`/api/databases` and `/api/databases/{db}/tables` over a real PostgreSQL, with MindsDB's
    bodies and codes (mindsdb/api/http/namespaces/databases.py)."""
    psql("DROP TABLE IF EXISTS rest_src, rest_copy; CREATE TABLE rest_src (id int, name text); "
         "INSERT INTO rest_src VALUES (1, 'a'), (2, 'b'), (3, 'c');")
    url = server.url + "/api/databases"
    made = requests.post(url, json={"database": {"name": "pgrest", "engine": "postgres",
                                                 "parameters": connection_args()}}, timeout=30)
    assert made.status_code == 201, made.text
    record = made.json()
    assert (record["name"], record["type"], record["engine"]) == ("pgrest", "data", "postgres")
    assert record["connection_data"]["password"] != connection_args()["password"]
    assert requests.get(f"{url}/pgrest", timeout=30).json()["connection_data"]["host"] == \
        connection_args()["host"]

    tables = requests.get(f"{url}/pgrest/tables", timeout=30).json()
    assert {"name": "rest_src", "type": "data"} in tables
    copied = requests.post(f"{url}/pgrest/tables", timeout=30, json={
        "table": {"name": "rest_copy", "select": "SELECT id FROM pgrest.rest_src WHERE id > 1"}})
    assert copied.status_code == 201, copied.text
    assert psql("SELECT string_agg(id::text, ',' ORDER BY id) FROM rest_copy") == "2,3"
    assert requests.delete(f"{url}/pgrest/tables/rest_copy", timeout=30).status_code == 204
    assert psql("SELECT count(*) FROM pg_tables WHERE tablename = 'rest_copy'") == "0"

    # A refused change is MindsDB's 400 "Connection error"; the datasource keeps working.
    bad = {**connection_args(), "port": 1}
    refused = requests.put(f"{url}/pgrest", json={"database": {"parameters": bad}}, timeout=30)
    assert refused.status_code == 400 and refused.json()["title"] == "Connection error"
    assert sql(server, "SELECT count(*) AS n FROM pgrest.rest_src")["data"] == [[3]]
    changed = requests.put(f"{url}/pgrest", timeout=30,
                           json={"database": {"parameters": {**connection_args(), "schema": "public"}}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["connection_data"]["schema"] == "public"
    ok = requests.post(f"{url}/status", json={"engine": "postgres", **connection_args()}, timeout=30)
    assert ok.json() == {"status": "success"}
    down = requests.post(f"{url}/status", json={"engine": "postgres", **bad}, timeout=30)
    assert down.status_code == 200 and down.json()["status"] == "connection_error"

    assert requests.delete(f"{url}/pgrest", timeout=30).status_code == 204
    assert requests.get(f"{url}/pgrest", timeout=30).status_code == 404


def test_three_part_names_pass_through_errors_and_keep_unknown_parameters(server):
    """`pg.schema.table` reads another schema of the datasource (MindsDB's three-part names),
    a table PostgreSQL lacks is PostgreSQL's own error (never the engine's catalog name), and a
    PARAMETERS key the engine does not read is kept and ignored, as MindsDB keeps it."""
    psql("CREATE SCHEMA IF NOT EXISTS side; DROP TABLE IF EXISTS side.odd; "
         "CREATE TABLE side.odd (n int); INSERT INTO side.odd VALUES (41), (42);")
    args = {**connection_args(), "type": "postgres", "note": "kept"}
    made = sql(server, f"CREATE DATABASE pg3 ENGINE = 'postgres', PARAMETERS = {json.dumps(args)}")
    assert made["type"] == "ok", made
    shown = sql(server, "SELECT connection_data FROM information_schema.databases WHERE name = 'pg3'")
    assert json.loads(shown["data"][0][0])["type"] == "postgres"

    assert sql(server, "SELECT n FROM pg3.side.odd ORDER BY n")["data"] == [[41], [42]]
    joined = sql(server, "SELECT count(*) FROM pg3.side.odd AS a JOIN pg3.side.odd AS b ON a.n = b.n")
    assert joined["data"] == [[2]]

    for query, says in (("SELECT * FROM pg3.nosuch", 'relation "public.nosuch" does not exist'),
                        ("SELECT * FROM pg3.side.nosuch", 'relation "side.nosuch" does not exist'),
                        ("SELECT * FROM pg3.noschema.t", 'relation "noschema.t" does not exist')):
        failed = sql(server, query)
        assert failed["type"] == "error", failed
        assert says in failed["error_message"] and "mindlite." not in failed["error_message"], failed

    tls = {**connection_args(), "sslmode": "require"}
    refused = sql(server, f"CREATE DATABASE pg4 ENGINE = 'postgres', PARAMETERS = {json.dumps(tls)}")
    assert refused["type"] == "error" and "TLS" in refused["error_message"], refused
    sql(server, "DROP DATABASE pg3")
