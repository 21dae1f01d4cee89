"""The routes besides SQL results: status, ping, projects, unknown paths and methods, and the
400 answers to malformed SQL request bodies. Compared with MindsDB captures where one exists."""

import json
import re
import signal
import subprocess
import time

import pytest
import requests

from mlserver import child_environment, load_capture

PROBLEM = "application/problem+json"


def get(server, path, **kwargs):
    return requests.get(server.url + path, timeout=10, allow_redirects=False, **kwargs)


def assert_problem(response, status, *, detail_mentions=()):
    """A problem+json answer: `{"title": str, "detail": str, ...}` naming what was wrong."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers.get("Content-Type") == PROBLEM, dict(response.headers)
    body = response.json()
    assert isinstance(body.get("title"), str) and body["title"], body
    assert isinstance(body.get("detail"), str) and body["detail"], body
    for word in detail_mentions:
        assert word.lower() in body["detail"].lower(), f"detail should mention {word!r}: {body}"
    return body


def test_help_exits_zero_and_shows_the_options(server_bin):
    done = subprocess.run([str(server_bin), "--help"], capture_output=True, text=True,
                          timeout=30, env=child_environment())
    assert done.returncode == 0, done.stderr
    for option in ("--config", "--data", "--host", "--port"):
        assert option in done.stdout + done.stderr


def test_status_reports_auth_off_like_mindsdb(server):
    capture = load_capture("status")
    response = get(server, "/api/status")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    body, expected = response.json(), json.loads(capture.body)
    assert list(body) == list(expected), body
    assert body["environment"] == "local"
    assert isinstance(body["mindsdb_version"], str) and body["mindsdb_version"]
    assert body["auth"] == expected["auth"] == {
        "confirmed": True, "http_auth_enabled": False, "provider": "disabled"}


def test_ping_answers_ok_like_mindsdb(server):
    capture = load_capture("util_ping")
    response = get(server, "/api/util/ping")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == capture.content_type
    assert response.content == capture.body == b'{"status":"ok"}'


@pytest.mark.parametrize("path", ["/api/projects", "/api/projects/"])
def test_projects_list_answers_directly_with_and_without_trailing_slash(server, path):
    server.sql_ok("CREATE PROJECT p_wire")
    server.sql_ok("CREATE PROJECT IF NOT EXISTS p_wire2")
    capture = load_capture("projects_list_slash")
    response = get(server, path)
    assert response.status_code == 200, "no redirect: clients call both forms"
    assert response.headers["Content-Type"] == capture.content_type
    assert response.content == capture.body


def test_projects_list_on_a_fresh_server_holds_only_mindsdb(server):
    assert get(server, "/api/projects/").json() == [{"name": "mindsdb"}]


def test_dropped_project_leaves_the_projects_list(server):
    server.sql_ok("CREATE PROJECT gone")
    server.sql_ok("DROP PROJECT gone")
    assert get(server, "/api/projects").json() == [{"name": "mindsdb"}]


def test_project_get_answers_its_name_like_mindsdb(server):
    capture = load_capture("project_get")
    response = get(server, "/api/projects/mindsdb")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == capture.content_type
    assert response.content == capture.body


def test_project_get_decodes_a_percent_encoded_name(server):
    assert get(server, "/api/projects/mind%73db").json() == {"name": "mindsdb"}


def test_project_get_finds_a_created_project(server):
    server.sql_ok("CREATE PROJECT analytics")
    assert get(server, "/api/projects/analytics").json() == {"name": "analytics"}


def test_project_get_of_a_missing_project_is_404_naming_it(server):
    assert_problem(get(server, "/api/projects/nosuch"), 404, detail_mentions=["nosuch"])


def test_cloud_login_is_404_so_the_sdk_falls_back_to_api_login(server):
    response = requests.post(server.url + "/cloud/login",
                             json={"email": "a@b.c", "password": "x"}, timeout=10)
    assert response.status_code == 404


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/v1/minds/"),
    ("POST", "/api/v1/chat/completions"),
    ("GET", "/cloud/callback/model_status"),
])
def test_the_hosted_editions_apis_are_404_on_a_local_server_naming_the_edition(server, method, path):
    response = requests.request(method, server.url + path, json={}, timeout=10)
    assert_problem(response, 404, detail_mentions=["hosted edition"])


def test_unknown_path_is_404_problem_like_mindsdb(server):
    capture = load_capture("unknown_path")
    body = assert_problem(get(server, "/api/nosuch"), 404)
    expected = json.loads(capture.body)
    assert (body["title"], body["detail"]) == (expected["title"], expected["detail"])


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/nosuch"),
    ("GET", "/nosuch"),
    ("GET", "/api/projects/mindsdb/nosuch"),
])
def test_other_unknown_paths_are_404_problems(server, method, path):
    assert_problem(requests.request(method, server.url + path, timeout=10), 404)


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/sql/query"),
    ("DELETE", "/api/status"),
    ("POST", "/api/util/ping"),
    ("PUT", "/api/projects/"),
    ("DELETE", "/api/projects/mindsdb"),
    ("GET", "/api/login"),
])
def test_known_path_with_the_wrong_method_is_405_problem(server, method, path):
    assert_problem(requests.request(method, server.url + path, timeout=10), 405)


def test_query_string_does_not_change_the_route(server):
    assert get(server, "/api/util/ping?x=1").json() == {"status": "ok"}


# Malformed bodies for POST /api/sql/query: 400 problem+json whose detail names the problem.

def post_sql_raw(server, body: bytes):
    return requests.post(server.url + "/api/sql/query", data=body,
                         headers={"Content-Type": "application/json"}, timeout=10)


def test_sql_body_that_is_not_json_is_400(server):
    assert_problem(post_sql_raw(server, b"notjson"), 400, detail_mentions=["JSON"])


def test_empty_sql_body_is_400(server):
    assert_problem(post_sql_raw(server, b""), 400)


@pytest.mark.parametrize("body", [b"[1, 2]", b'"SELECT 1"', b"null", b"42"])
def test_sql_body_that_is_not_an_object_is_400(server, body):
    assert_problem(post_sql_raw(server, body), 400, detail_mentions=["object"])


def test_sql_body_without_query_is_400_naming_query(server):
    # MindsDB answers 500 KeyError here; mindlite deliberately answers 400 (captures README).
    assert_problem(post_sql_raw(server, b'{"q":"SELECT 1"}'), 400, detail_mentions=["query"])


@pytest.mark.parametrize("query", [1, None, ["SELECT 1"], {"sql": "SELECT 1"}])
def test_sql_body_with_non_string_query_is_400_naming_query(server, query):
    response = post_sql_raw(server, json.dumps({"query": query}).encode())
    assert_problem(response, 400, detail_mentions=["query"])


@pytest.mark.parametrize("response_format", ["csv", "JSONLINES", "", 5, True])
def test_unknown_response_format_is_400_naming_response_format(server, response_format):
    response = post_sql_raw(
        server, json.dumps({"query": "SELECT 1", "response_format": response_format}).encode())
    assert_problem(response, 400, detail_mentions=["response_format"])


def test_invalid_utf8_sql_body_is_400(server):
    assert_problem(post_sql_raw(server, b'{"query":"SELECT \xff"}'), 400)


def test_server_keeps_serving_after_bad_bodies(server):
    post_sql_raw(server, b"notjson")
    post_sql_raw(server, b'{"q":1}')
    assert server.sql_ok("SELECT 1")["data"] == [[1]]


def test_sigint_stops_the_server_cleanly_and_its_data_survives(server):
    assert server.data.is_file(), "--data creates the file and its directory"
    server.sql_ok("CREATE TABLE kept (x BIGINT)")
    server.sql_ok("INSERT INTO kept VALUES (1), (2)")
    server.stop(signal.SIGINT)
    server.start()
    assert server.sql_ok("SELECT sum(x) FROM kept")["data"] == [[3]]


def test_each_request_logs_one_line_with_its_method_path_and_status(server):
    get(server, "/api/projects/")
    server.sql("SELECT 1")
    get(server, "/api/nosuch")
    requests.delete(server.url + "/api/status", timeout=10)
    expected = [("GET", "/api/projects/", "200"), ("POST", "/api/sql/query", "200"),
                ("GET", "/api/nosuch", "404"), ("DELETE", "/api/status", "405")]
    # A line is written once its response has gone out, so it may trail the response a little.
    deadline = time.monotonic() + 5
    while True:
        lines = server.log_text().splitlines()
        found = {(m, p): [line for line in lines if f"{m} {p} " in line] for m, p, _ in expected}
        if all(found.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for method, path, status in expected:
        matching = found[(method, path)]
        assert len(matching) == 1, f"{method} {path}: {matching}"
        assert status in matching[0].split(path, 1)[1], matching[0]


def test_port_0_listens_on_a_free_port(server_bin, tmp_path):
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(server_bin), "--data", str(tmp_path / "db" / "m.redb"), "--port", "0",
             "--mysql-port", "0"],
            stdout=log, stderr=log, env=child_environment())
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            found = re.search(r"127\.0\.0\.1:(\d+)", log_path.read_text())
            port = int(found.group(1)) if found and found.group(1) != "0" else None
            assert process.poll() is None, log_path.read_text()
            time.sleep(0.05)
        assert port, f"no listening address in the log:\n{log_path.read_text()}"
        response = requests.get(f"http://127.0.0.1:{port}/api/util/ping", timeout=10)
        assert response.json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, log_path.read_text()
