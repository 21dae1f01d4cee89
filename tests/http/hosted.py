"""Tenants of the hosted edition for the tests that need them (test_hosted.py, test_callbacks.py).

Users are made with the `mindlite-server users` CLI while the server is stopped, since the CLI owns
the data file then; requests carry a user's API key as a Bearer token. Errors outside SQL are
problem+json documents.
"""

from __future__ import annotations

import json
import re
import subprocess

import requests

from mlserver import Server, ServerFactory, bearer, child_environment

PROBLEM = "application/problem+json"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")


# Users: the CLI owns the data file while the server is stopped.

def users_command(server: Server, *args: str) -> subprocess.CompletedProcess:
    """`mindlite-server users ARGS --data … [--config …]` on the server's data file."""
    command = [str(server.binary), "users", *args, "--data", str(server.data)]
    if server.config_path is not None:
        command += ["--config", str(server.config_path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30,
                          env=child_environment(), cwd=server.workdir)


def users_json(server: Server, *args: str):
    """Runs a `users` command that must succeed and returns the JSON it printed."""
    done = users_command(server, *args)
    assert done.returncode == 0, f"users {' '.join(args)} failed: {done.stderr}"
    return json.loads(done.stdout)


def hosted_server(factory: ServerFactory, config: str,
                  *users: str | tuple[str, str]) -> tuple[Server, dict[str, str]]:
    """A started hosted server with `users` (a name, or (name, plan)), each with one API key;
    returns the server and each user's key."""
    server = factory.new(config)  # stopped and its log shown like any other
    keys = {}
    for user in users:
        name, plan = (user, None) if isinstance(user, str) else user
        users_json(server, "create", name, *(["--plan", plan] if plan else []))
        keys[name] = users_json(server, "key", name)["key"]
    return server.start(), keys


# Requests.

def call(server: Server, method: str, path: str, key: str | None = None,
         body=None) -> requests.Response:
    return requests.request(method, server.url + path, json=body, headers=bearer(key), timeout=30)


def sql(server: Server, key: str, query: str) -> dict:
    response = server.sql(query, token=key)
    assert response.status_code == 200, response.text
    return response.json()


def sql_ok(server: Server, key: str, query: str) -> dict:
    doc = sql(server, key, query)
    assert doc["type"] in ("ok", "table"), (query, doc)
    return doc


def problem(response: requests.Response, status: int, *mentions: str) -> dict:
    """A problem+json error with `status` whose detail mentions each of `mentions`."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers.get("content-type") == PROBLEM, dict(response.headers)
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    for word in mentions:
        assert word in body["detail"], f"detail should mention {word!r}: {body}"
    return body
