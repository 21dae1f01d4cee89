"""`/api/config`, MindsDB's settings route: the login switch and the default models read and
changed at run time, kept across restarts; keys stay with the URL they were given for and are
never shown; the hosted edition's settings are its operator's."""

from __future__ import annotations

import requests

from fake_llm import FakeLLM, text
from hosted import hosted_server, problem
from mlserver import bearer

PASSWORD = "pa ss'w\"ord"


def llm_config(base_url: str) -> str:
    return f"""\
[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{base_url}"
api_key = "sk-file"
"""


def get(server, token=None) -> dict:
    response = requests.get(server.url + "/api/config", headers=bearer(token), timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def put(server, body, token=None) -> requests.Response:
    return requests.put(server.url + "/api/config", json=body, headers=bearer(token), timeout=10)


def ask(server, agent: str) -> str:
    response = requests.post(
        f"{server.url}/api/projects/mindsdb/agents/{agent}/completions",
        json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["message"]["content"]


def make_agent(server, name: str) -> None:
    response = requests.post(server.url + "/api/projects/mindsdb/agents",
                             json={"agent": {"name": name}}, timeout=10)
    assert response.status_code == 201, response.text


def test_get_shows_mindsdbs_shape_without_secrets(start_server):
    with FakeLLM() as llm:
        server = start_server(llm_config(llm.base_url))
        shown = get(server)
    assert shown["auth"] == {"http_auth_enabled": False}
    assert shown["default_llm"] == {"provider": "openai", "model_name": "fake-model",
                                    "base_url": llm.base_url, "api_key": "******"}
    assert shown["default_embedding_model"]["api_key"] == ""
    assert shown["knowledge_bases"]["storage"] == "file"
    assert shown["api"]["http"]["running"] is True
    assert "sk-file" not in str(shown)


def test_auth_turned_on_at_run_time_holds_across_a_restart(server):
    missing = put(server, {"auth": {"http_auth_enabled": True}})
    body = problem(missing, 400, "username and a password")
    assert body["title"] == "Wrong arguments"
    assert server.sql("SELECT 1").status_code == 200, "a refused change changes nothing"

    changed = put(server, {"auth": {"http_auth_enabled": True, "username": "ada",
                                    "password": PASSWORD}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["auth"] == {"http_auth_enabled": True}
    assert server.sql("SELECT 1").status_code == 401
    status = requests.get(server.url + "/api/status", timeout=10).json()
    assert status["auth"]["http_auth_enabled"] is True

    def login(password):
        return requests.post(server.url + "/api/login",
                             json={"username": "ada", "password": password}, timeout=10)

    assert login("wrong").status_code == 401
    token = login(PASSWORD).json()["token"]
    assert server.sql("SELECT 1", token=token).status_code == 200

    server.restart()
    assert server.sql("SELECT 1").status_code == 401
    assert PASSWORD.encode() not in server.data.read_bytes(), "the password is kept hashed"
    token = login(PASSWORD).json()["token"]
    # New credentials end the sessions of the old ones.
    assert put(server, {"auth": {"password": "second"}}, token).status_code == 200
    assert server.sql("SELECT 1", token=token).status_code == 401
    token = login("second").json()["token"]
    assert put(server, {"auth": {"http_auth_enabled": False}}).status_code == 401
    assert put(server, {"auth": {"http_auth_enabled": False}}, token).status_code == 200
    assert server.sql("SELECT 1").status_code == 200


def test_unknown_settings_and_bad_values_are_refused_by_name(server):
    for body, mention in [
        ({"logging": {}}, "'logging'"),
        ({"auth": {"http_auth_type": "token"}}, "auth.http_auth_type"),
        ({"auth": {"http_auth_enabled": "yes"}}, "auth.http_auth_enabled"),
        ({"default_llm": {"temperature": 0.2}}, "default_llm.temperature"),
        ({"default_llm": {"base_url": "ftp://x"}}, "default_llm.base_url"),
        ({"default_llm": "gpt-4o"}, "default_llm must be an object"),
        ({"knowledge_bases": {"storage": "pgvector"}}, "knowledge_bases"),
        ([], "JSON object"),
    ]:
        body = problem(put(server, body), 400, mention)
        assert body["title"] == "Wrong arguments", body
    assert get(server)["default_llm"]["model_name"] == "gpt-4o"


def test_the_default_llm_changes_and_its_key_never_follows_a_new_url(start_server):
    with FakeLLM() as first, FakeLLM() as second:
        server = start_server(llm_config(first.base_url))
        make_agent(server, "before")
        first.script(text("from the first"))
        assert ask(server, "before") == "from the first"
        assert first.headers[-1]["authorization"] == "Bearer sk-file"

        # A new URL without a key: the file's key does not go there.
        moved = put(server, {"default_llm": {"base_url": second.base_url, "model_name": "m2"}})
        assert moved.status_code == 200, moved.text
        assert moved.json()["default_llm"]["api_key"] == ""
        make_agent(server, "after")
        second.script(text("from the second"))
        assert ask(server, "after") == "from the second"
        assert "authorization" not in second.headers[-1], second.headers[-1]
        assert second.requests[-1]["model"] == "m2"

        # Its own key goes with it; the mask sent back keeps it for the same URL only.
        assert put(server, {"default_llm": {"base_url": second.base_url,
                                            "api_key": "sk-two"}}).status_code == 200
        second.script(text("keyed"))
        assert ask(server, "after") == "keyed"
        assert second.headers[-1]["authorization"] == "Bearer sk-two"
        shown = get(server)["default_llm"]
        assert shown["api_key"] == "******"
        assert put(server, {"default_llm": shown}).status_code == 200
        second.script(text("still keyed"))
        assert ask(server, "after") == "still keyed"
        assert second.headers[-1]["authorization"] == "Bearer sk-two"
        with FakeLLM() as third:
            assert put(server, {"default_llm": {**shown, "base_url": third.base_url}}
                       ).status_code == 200
            third.script(text("third"))
            assert ask(server, "after") == "third"
            assert "authorization" not in third.headers[-1]

        # A password in the URL is not shown either; the URL as shown is the URL in use.
        userinfo = second.base_url.replace("http://", "http://u:pw@")
        assert put(server, {"default_llm": {"base_url": userinfo, "api_key": "sk-u"}}
                   ).status_code == 200
        shown = get(server)["default_llm"]
        assert ":pw@" not in shown["base_url"] and "******" in shown["base_url"], shown
        assert put(server, {"default_llm": shown}).status_code == 200
        second.script(text("with userinfo"))
        assert ask(server, "after") == "with userinfo"
        assert second.headers[-1]["authorization"] == "Bearer sk-u"

        # Kept across a restart; null goes back to the config file's, key and all.
        assert put(server, {"default_llm": {"base_url": second.base_url,
                                            "api_key": "sk-two"}}).status_code == 200
        server.restart()
        assert get(server)["default_llm"]["base_url"] == second.base_url
        assert put(server, {"default_llm": None}).status_code == 200
        assert get(server)["default_llm"]["base_url"] == first.base_url
        first.script(text("back"))
        assert ask(server, "after") == "back"
        assert first.headers[-1]["authorization"] == "Bearer sk-file"


def test_the_hosted_edition_shows_no_url_or_key_and_refuses_changes(start_server):
    with FakeLLM() as llm:
        config = 'edition = "hosted"\n' + llm_config(llm.base_url)
        server, keys = hosted_server(start_server, config, "alice")
        response = requests.get(server.url + "/api/config", headers=bearer(keys["alice"]),
                                timeout=10)
        assert response.status_code == 200, response.text
        shown = response.json()
        assert shown["default_llm"] == {"provider": "openai", "model_name": "fake-model"}
        assert shown["auth"] == {"http_auth_enabled": True}
        assert llm.base_url not in response.text
        problem(put(server, {"default_llm": {"base_url": "http://127.0.0.1:9/v1"}},
                    keys["alice"]), 403, "operator")
