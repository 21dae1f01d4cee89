"""Logins and bearer tokens (`docs/mindsdb-wire.md` §1, captures auth_* and login_*): with a username and
password configured every route but status, login, logout and ping needs a live token; tokens
survive restarts and expire; without them configured everything is open and login fails."""

import json
import time

import pytest
import requests

from mlserver import bearer, load_capture

PROBLEM = "application/problem+json"
UNAUTHORIZED_DETAIL = "Authorization is required to complete the request"

PROTECTED = [
    ("POST", "/api/sql/query", {"query": "SELECT 1"}),
    ("GET", "/api/projects", None),
    ("GET", "/api/projects/", None),
    ("GET", "/api/projects/mindsdb", None),
]


def login(server, username="admin", password="secret") -> requests.Response:
    return requests.post(server.url + "/api/login",
                         json={"username": username, "password": password}, timeout=10)


def token_of(server) -> str:
    response = login(server)
    assert response.status_code == 200, response.text
    return response.json()["token"]


def call(server, method, path, body=None, token=None) -> requests.Response:
    return requests.request(method, server.url + path, json=body, headers=bearer(token),
                            timeout=10)


def assert_unauthorized(response):
    capture = load_capture("auth_sql_unauth")
    assert response.status_code == 401, (response.status_code, response.text)
    assert response.headers.get("Content-Type") == capture.content_type == PROBLEM
    assert response.json()["detail"] == json.loads(capture.body)["detail"] == UNAUTHORIZED_DETAIL


def select_1(server, token) -> requests.Response:
    return call(server, "POST", "/api/sql/query", {"query": "SELECT 1"}, token)


# Auth on.

def test_login_with_the_configured_credentials_returns_a_pat_token(auth_server):
    response = login(auth_server)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["token"]
    assert body["token"].startswith("pat_") and len(body["token"]) >= 4 + 22, body


def test_each_login_issues_a_different_token(auth_server):
    assert token_of(auth_server) != token_of(auth_server)


@pytest.mark.parametrize("body", [
    {"username": "admin", "password": ""},
    {"username": "", "password": "secret"},
    {"username": "admin"},
    {"password": "secret"},
    {},
    {"username": "admin", "password": 123},
    {"username": ["admin"], "password": "secret"},
])
def test_login_with_missing_empty_or_non_string_fields_is_400(auth_server, body):
    capture = load_capture("auth_login_empty_pw")
    response = requests.post(auth_server.url + "/api/login", json=body, timeout=10)
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == PROBLEM
    assert response.json()["detail"] == json.loads(capture.body)["detail"]


@pytest.mark.parametrize("username, password", [
    ("admin", "nope"), ("root", "secret"), ("Admin", "secret"), ("admin", "secret ")])
def test_login_with_wrong_credentials_is_401(auth_server, username, password):
    capture = load_capture("auth_login_wrong")
    response = login(auth_server, username, password)
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == PROBLEM
    assert response.json()["detail"] == json.loads(capture.body)["detail"]


def test_login_body_that_is_not_json_is_400(auth_server):
    response = requests.post(auth_server.url + "/api/login", data=b"user=admin",
                             headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 400
    assert response.headers["Content-Type"] == PROBLEM


@pytest.mark.parametrize("method, path, body", PROTECTED)
def test_protected_route_without_a_token_is_401(auth_server, method, path, body):
    assert_unauthorized(call(auth_server, method, path, body))


@pytest.mark.parametrize("method, path, body", PROTECTED)
def test_protected_route_with_a_wrong_token_is_401(auth_server, method, path, body):
    token_of(auth_server)
    assert_unauthorized(call(auth_server, method, path, body, token="pat_wrong"))


@pytest.mark.parametrize("authorization", [
    "Basic YWRtaW46c2VjcmV0", "Bearer", "Bearer ", "pat_x", "Token pat_x"])
def test_malformed_authorization_header_is_401(auth_server, authorization):
    response = requests.post(auth_server.url + "/api/sql/query", json={"query": "SELECT 1"},
                             headers={"Authorization": authorization}, timeout=10)
    assert_unauthorized(response)


@pytest.mark.parametrize("method, path, body", PROTECTED)
def test_protected_route_with_a_live_token_answers(auth_server, method, path, body):
    response = call(auth_server, method, path, body, token_of(auth_server))
    assert response.status_code == 200, response.text


def test_sql_with_a_token_answers_like_mindsdb(auth_server):
    capture = load_capture("sql_select1")
    response = select_1(auth_server, token_of(auth_server))
    assert response.content == capture.body


def test_unprotected_routes_answer_without_a_token(auth_server):
    status = call(auth_server, "GET", "/api/status")
    assert status.status_code == 200
    assert status.json()["auth"]["http_auth_enabled"] is True
    assert status.json()["auth"]["provider"] == "local"
    assert call(auth_server, "GET", "/api/util/ping").json() == {"status": "ok"}
    assert login(auth_server).status_code == 200
    assert call(auth_server, "POST", "/api/logout").status_code == 200


def test_unprotected_routes_ignore_a_wrong_token(auth_server):
    assert call(auth_server, "GET", "/api/status", token="pat_wrong").status_code == 200
    assert call(auth_server, "GET", "/api/util/ping", token="pat_wrong").status_code == 200
    assert call(auth_server, "POST", "/api/login", {"username": "admin", "password": "secret"},
                token="pat_wrong").status_code == 200


def test_status_is_unconfirmed_without_a_token_and_confirmed_with_one(auth_server):
    anon = json.loads(load_capture("auth_status_anon").body)["auth"]
    with_token = json.loads(load_capture("auth_status_bearer").body)["auth"]
    assert call(auth_server, "GET", "/api/status").json()["auth"] == anon
    token = token_of(auth_server)
    assert call(auth_server, "GET", "/api/status", token=token).json()["auth"] == with_token


def test_logout_revokes_the_token(auth_server):
    token = token_of(auth_server)
    other = token_of(auth_server)
    assert select_1(auth_server, token).status_code == 200
    capture = load_capture("auth_logout_bearer")
    logout = call(auth_server, "POST", "/api/logout", token=token)
    assert logout.status_code == 200
    assert logout.content == capture.body == b'""'
    assert_unauthorized(select_1(auth_server, token))
    assert select_1(auth_server, other).status_code == 200, "only the logged-out token is revoked"


def test_token_stays_valid_after_a_server_restart(auth_server):
    token = token_of(auth_server)
    revoked = token_of(auth_server)
    assert call(auth_server, "POST", "/api/logout", token=revoked).status_code == 200
    auth_server.restart()
    assert select_1(auth_server, token).status_code == 200
    assert_unauthorized(select_1(auth_server, revoked))


def test_tokens_are_not_stored_in_clear_in_the_data_file(auth_server):
    token = token_of(auth_server)
    auth_server.stop()
    assert token.encode() not in auth_server.data.read_bytes()
    assert token[4:].encode() not in auth_server.data.read_bytes()


def test_token_expires_after_its_lifetime(start_server):
    server = start_server('[auth]\nusername = "admin"\npassword = "secret"\n'
                          "token_lifetime_secs = 2\n")
    token = token_of(server)
    assert select_1(server, token).status_code == 200
    time.sleep(2.5)
    assert_unauthorized(select_1(server, token))
    assert select_1(server, token_of(server)).status_code == 200, "a new login works again"


def test_config_with_only_a_username_leaves_auth_off(start_server):
    server = start_server('[auth]\nusername = "admin"\n')
    assert select_1(server, None).status_code == 200
    assert call(server, "GET", "/api/status").json()["auth"]["http_auth_enabled"] is False


# Auth off: the same routes need nothing; login behaves as MindsDB's with its empty default password.

@pytest.mark.parametrize("method, path, body", PROTECTED)
def test_without_auth_every_route_answers_without_credentials(server, method, path, body):
    assert call(server, method, path, body).status_code == 200


def test_without_auth_a_bearer_token_is_not_checked(server):
    assert select_1(server, "pat_anything").status_code == 200


@pytest.mark.parametrize("name", ["login_noauth_default_creds", "login_noauth_empty_body"])
def test_without_auth_login_with_empty_fields_is_400_like_mindsdb(server, name):
    capture = load_capture(name)
    response = requests.post(server.url + "/api/login", json=capture.request, timeout=10)
    assert response.status_code == capture.status == 400
    assert response.headers["Content-Type"] == capture.content_type
    assert response.json()["detail"] == json.loads(capture.body)["detail"]


def test_without_auth_login_with_any_credentials_is_401_like_mindsdb(server):
    capture = load_capture("login_noauth_wrong")
    response = requests.post(server.url + "/api/login", json=capture.request, timeout=10)
    assert response.status_code == capture.status == 401
    assert response.headers["Content-Type"] == capture.content_type
    assert response.json()["detail"] == json.loads(capture.body)["detail"]


def test_without_auth_logout_answers_200(server):
    assert call(server, "POST", "/api/logout").status_code == 200
