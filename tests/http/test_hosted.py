"""The hosted edition (`edition = "hosted"`): users made with `mindlite-server users …` while
the server is stopped, each a tenant reached with its API key (Bearer or `X-Api-Key`) or a
login token; the Minds API under `/api/v1` driven by minds-sdk 2.0.1 and the `openai` client,
both unmodified; plan quotas (minds at once under 200 concurrent creates, questions per window
with `Retry-After`, failed questions given back) and `/limits`; tenants that cannot see one
another's objects through any route or SQL; and the local edition without any of it.

Every hosted server asks the fake OpenAI-compatible provider of fake_llm.py (its default model
"fake-model", key "sk-test"). Datasources need the PostgreSQL in PGTEST_URL (started by the test
command, see test_datasources.py); the tests that create one are skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import mindsdb_sdk
import openai
import pytest
import requests
from minds.client import Client
from minds.exceptions import ObjectNotFound, UnknownError

from fake_llm import FakeLLM, error, text
from hosted import (TIMESTAMP, call, hosted_server, problem, sql, sql_ok, users_command,
                    users_json)
from mlserver import Server, bearer

PG_URL = os.environ.get("PGTEST_URL")
if PG_URL is None and os.environ.get("CI") == "true":
    raise RuntimeError("PGTEST_URL is not set: scripts/test.sh starts PostgreSQL for these tests")
needs_postgres = pytest.mark.skipif(PG_URL is None, reason="PGTEST_URL is not set")

MINDS_API = "/api/v1"
LIMITS_PATHS = ["/limits", "/limits/", "/api/limits/", "/api/v1/limits", "/api/v1/limits/"]


def hosted_config(llm_url: str, plans: str = "", allow: bool = True) -> str:
    """A hosted server whose default model and embedding model are the fake at `llm_url`;
    `plans` (TOML tables) replace the default tiers. With `allow`, 127.0.0.1 is allow-listed
    (the fake provider and PostgreSQL run on this machine, which the hosted egress policy
    refuses otherwise); without it, only the configured endpoints' URLs are reachable there."""
    return f"""\
edition = "hosted"
egress.allow = {'["127.0.0.1"]' if allow else '[]'}

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm_url}"
api_key = "sk-test"
timeout_secs = 5

[embedding]
model_name = "fake-embedder"
base_url = "{llm_url}"

[agents]
max_steps = 4
sql_timeout_secs = 10
sample_rows = 3
{plans}"""


def one_plan(name: str = "tier", *, max_minds: int = 10, max_datasources: int = 10,
             questions_per_window: int = 100, window_secs: int = 3600,
             callbacks: bool = False, max_storage_mb: int = 1024) -> str:
    """`[hosted]` with a single plan tier, the default one."""
    return f"""
[hosted]
default_plan = "{name}"

[hosted.plans.{name}]
max_minds = {max_minds}
max_datasources = {max_datasources}
questions_per_window = {questions_per_window}
window_secs = {window_secs}
callbacks = {str(callbacks).lower()}
max_storage_mb = {max_storage_mb}
"""


@pytest.fixture
def llm():
    with FakeLLM() as fake:
        yield fake


# Users: the CLI owns the data file while the server is stopped.

def while_stopped(server: Server, *commands: tuple[str, ...]) -> list:
    """Stops the server, runs `users` commands, starts it again; their JSON in order."""
    server.stop()
    results = [users_json(server, *command) for command in commands]
    server.start()
    return results


# Requests.

def sql_error(server: Server, key: str, query: str, *mentions: str) -> str:
    doc = sql(server, key, query)
    assert doc["type"] == "error", f"{query} should fail for this tenant: {doc}"
    for word in mentions:
        assert word in doc["error_message"], f"{query}: error should mention {word!r}: {doc}"
    return doc["error_message"]


def column(server: Server, key: str, query: str) -> list:
    return [row[0] for row in sql_ok(server, key, query)["data"]]


def create_mind(server: Server, key: str, body: dict) -> dict:
    response = call(server, "POST", MINDS_API + "/minds", key, body)
    assert response.status_code == 201, response.text
    return response.json()


def ask(server: Server, key: str, mind: str, question: str, stream: bool = False):
    body = {"model": mind, "messages": [{"role": "user", "content": question}], "stream": stream}
    return call(server, "POST", MINDS_API + "/chat/completions", key, body)


def answer_of(response: requests.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def limits(server: Server, key: str, path: str = "/api/v1/limits") -> dict:
    response = call(server, "GET", path, key)
    assert response.status_code == 200, (path, response.status_code, response.text)
    return response.json()


def files_put(server: Server, key: str, name: str, csv: str) -> None:
    response = requests.put(f"{server.url}/api/files/{name}", headers=bearer(key), timeout=30,
                            files={"file": (f"{name}.csv", csv, "text/csv")})
    assert response.status_code == 200, response.text


def psql(statements: str) -> str:
    done = subprocess.run(["psql", PG_URL, "-v", "ON_ERROR_STOP=1", "-At", "-c", statements],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def pg_connection_data() -> dict:
    url = urlparse(PG_URL)
    return {"host": url.hostname, "port": url.port, "database": url.path.lstrip("/"),
            "user": url.username, "password": "pw-not-checked-by-trust"}


def create_datasource(server: Server, key: str, name: str) -> dict:
    body = {"name": name, "engine": "postgres", "connection_data": pg_connection_data()}
    response = call(server, "POST", MINDS_API + "/datasources", key, body)
    assert response.status_code == 201, response.text
    return response.json()


def sse_data(response: requests.Response) -> list[str]:
    """The `data:` payloads of a server-sent event stream, in order."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream"), dict(response.headers)
    return [line[len("data: "):] for line in response.text.split("\n") if line.startswith("data: ")]


# minds-sdk and openai, unmodified.

@needs_postgres
def test_minds_sdk_manages_datasources_and_minds_and_asks_them(start_server, llm):
    """minds-sdk 2.0.1: datasources create/list/get/update/drop over PostgreSQL, minds
    create/list/get/update, add and remove a datasource, completion plain and streamed, drop,
    and ObjectNotFound for what is not there."""
    psql("DROP TABLE IF EXISTS hosted_people; "
         "CREATE TABLE hosted_people (id int PRIMARY KEY, name text); "
         "INSERT INTO hosted_people VALUES (1, 'Ada'), (2, 'Alan'), (3, 'Grace');")
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    client = Client(keys["alice"], base_url=server.url + MINDS_API)

    source = client.datasources.create("people_db", engine="postgres", description="People",
                                       connection_data=pg_connection_data())
    assert (source.name, source.engine, source.description) == ("people_db", "postgres", "People")
    assert source.connection_data["password"] == "******", "secrets are masked"
    assert TIMESTAMP.match(source.created_at), source
    assert [d.name for d in client.datasources.list()] == ["people_db"]
    assert client.datasources.get("people_db") == source
    updated = client.datasources.update("people_db", description="Famous people")
    assert updated.description == "Famous people" and updated.created_at == source.created_at
    assert client.datasources.get("people_db").description == "Famous people"

    people = [{"name": "people_db", "tables": ["hosted_people"]}]
    mind = client.minds.create("helper", datasources=people,
                               parameters={"prompt_template": "You know people."})
    assert (mind.name, mind.status) == ("helper", "COMPLETED")
    assert (mind.model_name, mind.provider) == ("fake-model", "openai"), "the configured model"
    assert mind.datasources == people and mind.parameters == {"prompt_template": "You know people."}
    assert [m.name for m in client.minds.list()] == ["helper"]
    changed = client.minds.update("helper", parameters={"prompt_template": "Be brief."})
    assert changed.parameters == {"prompt_template": "Be brief."} and changed.datasources == people
    assert changed.created_at == mind.created_at
    fetched = client.minds.get("helper")
    fetched.remove_datasource("people_db")
    assert fetched.datasources == [] and client.minds.get("helper").datasources == []
    fetched.add_datasource("people_db", tables=["hosted_people"])
    assert client.minds.get("helper").datasources == people

    llm.script(text("Ada, Alan and Grace."))
    assert fetched.completion("Who is there?") == "Ada, Alan and Grace."
    asked = llm.requests[-1]
    assert asked["model"] == "fake-model"
    assert asked["messages"][-1] == {"role": "user", "content": "Who is there?"}
    system = asked["messages"][0]["content"]
    assert "Be brief." in system and "hosted_people" in system and "Grace" in system, system
    llm.script(text("Streaming from a mind works."))
    pieces = list(fetched.completion("Stream it", stream=True))
    assert len(pieces) > 1 and "".join(p or "" for p in pieces) == "Streaming from a mind works."

    with pytest.raises(UnknownError, match="used by"):
        client.datasources.drop("people_db")  # 409 while the mind reads it
    client.minds.drop("helper")
    assert client.minds.list() == []
    with pytest.raises(ObjectNotFound):
        client.minds.get("helper")
    with pytest.raises(ObjectNotFound):
        client.minds.drop("helper")
    client.datasources.drop("people_db")
    assert client.datasources.list() == []
    with pytest.raises(ObjectNotFound):
        client.datasources.get("people_db")


def test_openai_client_asks_a_mind_by_chat_completions_and_responses(start_server, llm):
    """The `openai` client pointed at /api/v1: a mind is a model; chat completions and the
    Responses API, each plain and streamed; an unknown mind is NotFoundError."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    create_mind(server, keys["alice"], {"name": "oracle"})
    client = openai.OpenAI(api_key=keys["alice"], base_url=server.url + MINDS_API, max_retries=0)
    question = [{"role": "user", "content": "Meaning of life?"}]

    llm.script(text("Forty-two."))
    completion = client.chat.completions.create(model="oracle", messages=question)
    assert completion.choices[0].message.content == "Forty-two."
    assert (completion.model, completion.choices[0].finish_reason) == ("oracle", "stop")
    assert llm.requests[-1]["messages"][-1] == question[0]

    llm.script(text("A streamed answer in several pieces."))
    chunks = list(client.chat.completions.create(model="oracle", messages=question, stream=True))
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        "A streamed answer in several pieces."
    assert chunks[-1].choices[0].finish_reason == "stop"

    llm.script(text("Responses work."))
    response = client.responses.create(model="oracle", input="Hello?")
    assert (response.output_text, response.status) == ("Responses work.", "completed")
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "Hello?"}

    llm.script(text("Responses stream too."))
    events = list(client.responses.create(model="oracle", input="Stream?", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.output_item.added",
                         "response.content_part.added"], kinds
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"], kinds
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas and "".join(deltas) == "Responses stream too."
    assert events[-4].text == "Responses stream too."
    assert events[-1].response.output_text == "Responses stream too."

    # The client's stream helper, which checks that every delta belongs to an opened item.
    llm.script(text("Helped along."))
    with client.responses.stream(model="oracle", input="Helper?") as stream:
        pieces = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(pieces) == "Helped along." and final.output_text == "Helped along."

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nosuch", messages=question)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nosuch", input="hi")


def test_a_streamed_chat_completion_ends_with_done(start_server, llm):
    """On the wire: one `chat.completion.chunk` per `data:` frame, then `data: [DONE]`."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    create_mind(server, keys["alice"], {"name": "oracle"})
    llm.script(text("Framed."))
    frames = sse_data(ask(server, keys["alice"], "oracle", "hi", stream=True))
    assert frames[-1] == "[DONE]", frames
    chunks = [json.loads(f) for f in frames[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}, chunks
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Framed."


# The Minds API's codes.

def test_minds_api_codes_for_create_duplicate_missing_invalid_and_delete(start_server, llm):
    """201 create, 409 duplicate, 404 missing, 422 invalid body or unknown datasource, 204
    delete with an empty body; with and without a trailing slash."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    key = keys["alice"]
    mind = create_mind(server, key, {"name": "m1", "parameters": {"prompt_template": "Hi"}})
    assert set(mind) == {"name", "model_name", "provider", "datasources", "knowledge_bases",
                         "parameters", "created_at", "modified_at", "status"}, mind
    assert mind["knowledge_bases"] == []
    assert TIMESTAMP.match(mind["created_at"]) and TIMESTAMP.match(mind["modified_at"]), mind
    for path in (MINDS_API + "/minds", MINDS_API + "/minds/"):
        listed = call(server, "GET", path, key)
        assert listed.status_code == 200 and listed.json() == [mind], (path, listed.text)
    assert call(server, "GET", MINDS_API + "/minds/m1/", key).json() == mind
    problem(call(server, "POST", MINDS_API + "/minds", key, {"name": "m1"}), 409, "m1")
    problem(call(server, "GET", MINDS_API + "/minds/nosuch", key), 404, "nosuch")
    problem(call(server, "PUT", MINDS_API + "/minds/nosuch", key, {"model_name": "x"}), 404)
    problem(call(server, "POST", MINDS_API + "/minds", key, {"model_name": "x"}), 422, "name")
    problem(call(server, "POST", MINDS_API + "/minds", key,
                 {"name": "m2", "datasources": [{"name": "nowhere"}]}), 422, "nowhere")
    problem(call(server, "POST", MINDS_API + "/datasources", key,
                 {"name": "d", "engine": "files", "connection_data": {"path": "/"}}), 403, "files")
    deleted = call(server, "DELETE", MINDS_API + "/minds/m1", key)
    assert deleted.status_code == 204 and deleted.content == b"", deleted.text
    problem(call(server, "DELETE", MINDS_API + "/minds/m1", key), 404)
    problem(ask(server, key, "m1", "hi"), 404, "m1")
    assert llm.requests == [], "nothing reached the model"


# Quotas.

def test_minds_quota_never_overruns_under_200_concurrent_creates(start_server, llm):
    """A plan of 7 minds, 200 creates at once from 50 threads: exactly 7 are 201 and the
    other 193 are 429 naming the minds quota; deleting one frees exactly one slot."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, one_plan(max_minds=7)),
                                 "alice")
    url, headers = server.url + MINDS_API + "/minds", bearer(keys["alice"])
    per_thread = threading.local()

    def create(i: int) -> requests.Response:
        if not hasattr(per_thread, "session"):
            per_thread.session = requests.Session()
        return per_thread.session.post(url, json={"name": f"m{i:03d}"}, headers=headers,
                                       timeout=60)

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(create, range(200)))
    assert Counter(r.status_code for r in responses) == {201: 7, 429: 193}
    for refused in (r for r in responses if r.status_code == 429):
        problem(refused, 429, "minds", "limit 7")
    created = sorted(r.json()["name"] for r in responses if r.status_code == 201)
    listed = call(server, "GET", MINDS_API + "/minds", keys["alice"]).json()
    assert sorted(m["name"] for m in listed) == created
    assert limits(server, keys["alice"])["minds"] == {"limit": 7, "used": 7, "remaining": 0}

    deleted = call(server, "DELETE", f"{MINDS_API}/minds/{created[0]}", keys["alice"])
    assert deleted.status_code == 204, deleted.text
    create_mind(server, keys["alice"], {"name": "latecomer"})
    problem(call(server, "POST", MINDS_API + "/minds", keys["alice"], {"name": "one_more"}), 429,
            "minds")


def test_questions_are_limited_per_window_with_retry_after(start_server, llm):
    """Two questions per 2 s window: the third is 429 naming the questions quota with a
    Retry-After of 1 or 2 s and never reaches the model; /limits shows the window; once it has
    passed, asking works again in a new window."""
    plan = one_plan(questions_per_window=2, window_secs=2)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    key = keys["alice"]
    create_mind(server, key, {"name": "oracle"})
    fresh = limits(server, key)["questions"]
    assert fresh == {"limit": 2, "used": 0, "remaining": 2, "window_secs": 2, "resets_at": None}

    assert answer_of(ask(server, key, "oracle", "one")) == "no scripted reply"
    assert answer_of(ask(server, key, "oracle", "two")) == "no scripted reply"
    refused = ask(server, key, "oracle", "three")
    problem(refused, 429, "questions")
    retry_after = int(refused.headers.get("retry-after", "0"))
    assert 1 <= retry_after <= 2, dict(refused.headers)
    assert len(llm.requests) == 2, "a refused question never reaches the model"
    spent = limits(server, key)["questions"]
    assert (spent["used"], spent["remaining"]) == (2, 0), spent
    assert spent["resets_at"] is not None and TIMESTAMP.match(spent["resets_at"]), spent

    time.sleep(retry_after + 0.1)
    assert answer_of(ask(server, key, "oracle", "four")) == "no scripted reply"
    assert limits(server, key)["questions"]["used"] == 1


def test_questions_quota_never_overruns_under_concurrent_asks(start_server, llm):
    """Three questions per window, 20 asked at once: exactly 3 answered, 17 refused."""
    plan = one_plan(questions_per_window=3)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    create_mind(server, keys["alice"], {"name": "oracle"})
    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(lambda i: ask(server, keys["alice"], "oracle", f"q{i}"),
                                  range(20)))
    assert Counter(r.status_code for r in responses) == {200: 3, 429: 17}
    assert len(llm.requests) == 3
    assert limits(server, keys["alice"])["questions"]["used"] == 3


def test_agent_questions_count_against_the_same_quota(start_server, llm):
    """An agent's completion (REST or SQL) is a question like a mind's."""
    plan = one_plan(questions_per_window=2)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    key = keys["alice"]
    create_mind(server, key, {"name": "oracle"})
    agent = call(server, "POST", "/api/projects/mindsdb/agents", key, {"agent": {"name": "helper"}})
    assert agent.status_code == 201, agent.text
    answer_of(ask(server, key, "oracle", "one"))
    asked = call(server, "POST", "/api/projects/mindsdb/agents/helper/completions", key,
                 {"messages": [{"role": "user", "content": "two"}]})
    assert asked.status_code == 200, asked.text
    assert limits(server, key)["questions"]["used"] == 2
    sql_error(server, key, "SELECT answer FROM mindsdb.helper WHERE question = 'three'",
              "questions")
    problem(ask(server, key, "oracle", "four"), 429, "questions")
    assert len(llm.requests) == 2


def test_a_question_the_provider_answered_counts_even_when_it_failed(start_server, llm):
    """A provider error (plain: a 5xx answer; streamed: an error frame) still cost a provider
    call, so the question stays counted (one refused before any call is given back: see the
    hostile-tenant suite)."""
    plan = one_plan(questions_per_window=5)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    key = keys["alice"]
    create_mind(server, key, {"name": "oracle"})
    assert answer_of(ask(server, key, "oracle", "counted")) == "no scripted reply"
    before = limits(server, key)["questions"]
    assert before["used"] == 1, before

    llm.fallback(error(500, "The model exploded"))
    failed = ask(server, key, "oracle", "fails")
    assert failed.status_code != 200, failed.text
    assert "The model exploded" in failed.text, failed.text
    assert limits(server, key)["questions"]["used"] == 2, "the provider was called"
    frames = sse_data(ask(server, key, "oracle", "fails streamed", stream=True))
    assert frames[-1] == "[DONE]" and any("The model exploded" in f for f in frames), frames
    assert limits(server, key)["questions"]["used"] == 3, "the provider was called"

    llm.fallback(text("back again"))
    assert answer_of(ask(server, key, "oracle", "works")) == "back again"
    assert limits(server, key)["questions"]["used"] == 4


def test_limits_show_the_plan_and_count_minds_on_every_path(start_server, llm):
    """/limits, /limits/, /api/limits/, /api/v1/limits[/]: the plan's figures, and minds
    counted as they are created and deleted."""
    plan = one_plan("team", max_minds=4, max_datasources=3, questions_per_window=10,
                    window_secs=3600, callbacks=True)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    key = keys["alice"]
    expected = {"plan": "team",
                "minds": {"limit": 4, "used": 0, "remaining": 4},
                "datasources": {"limit": 3, "used": 0, "remaining": 3},
                "questions": {"limit": 10, "used": 0, "remaining": 10, "window_secs": 3600,
                              "resets_at": None},
                "model_calls": {"limit": 1000, "used": 0, "remaining": 1000,
                                "window_secs": 3600, "resets_at": None},
                "callbacks": True,
                "storage_bytes": {"limit": 1024 ** 3, "used": 0, "remaining": 1024 ** 3}}
    for path in LIMITS_PATHS:
        assert limits(server, key, path) == expected, path
    create_mind(server, key, {"name": "m1"})
    create_mind(server, key, {"name": "m2"})
    expected["minds"] = {"limit": 4, "used": 2, "remaining": 2}
    for path in LIMITS_PATHS:
        assert limits(server, key, path) == expected, path
    assert call(server, "DELETE", MINDS_API + "/minds/m1", key).status_code == 204
    assert limits(server, key)["minds"] == {"limit": 4, "used": 1, "remaining": 3}


def test_default_plans_are_free_and_pro(start_server, llm):
    """Without `[hosted]`: users get `free` unless created with `--plan pro`."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url),
                                 "alice", ("bob", "pro"))
    free, pro = limits(server, keys["alice"]), limits(server, keys["bob"])
    assert (free["plan"], free["callbacks"]) == ("free", False), free
    assert (pro["plan"], pro["callbacks"]) == ("pro", True), pro
    assert pro["minds"]["limit"] > free["minds"]["limit"], (free, pro)


def test_storage_quota_refuses_writes_whole_and_limits_show_the_bytes(start_server, llm):
    """A plan of 1 MiB stored: a CREATE TABLE AS past it is a SQL error naming
    `hosted.plans.tight.max_storage_mb`, an upload and a knowledge-base insert are 429
    problem+json naming it, and none leaves anything behind; another user on the same plan
    writes on; `/limits` counts the bytes and gives them back when tables, files and
    knowledge bases are dropped."""
    plan = one_plan("tight", max_storage_mb=1)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice", "bob")
    alice, bob = keys["alice"], keys["bob"]
    key_name = "hosted.plans.tight.max_storage_mb"

    def used(key: str) -> int:
        figures = limits(server, key)["storage_bytes"]
        assert figures["limit"] == 1024 ** 2, figures
        assert figures["remaining"] == max(0, figures["limit"] - figures["used"]), figures
        return figures["used"]

    assert used(alice) == 0
    big = ("SELECT value AS id, md5(CAST(value AS VARCHAR)) AS h "
           "FROM generate_series(1, 100000)")
    sql_error(server, alice, f"CREATE TABLE big AS {big}", key_name, "nothing was written")
    assert "big" not in column(server, alice, "SHOW TABLES")
    assert used(alice) == 0

    lines = [f"{n},{n * 7919:032x}\n" for n in range(100_000)]
    response = requests.put(f"{server.url}/api/files/big", headers=bearer(alice), timeout=60,
                            files={"file": ("big.csv", "id,h\n" + "".join(lines), "text/csv")})
    problem(response, 429, key_name)
    assert call(server, "GET", "/api/files", alice).json() == []

    kb = "/api/projects/mindsdb/knowledge_bases"
    made = call(server, "POST", kb, alice, {"knowledge_base": {"name": "notes"}})
    assert made.status_code == 201, made.text
    documents = [{"id": n, "content": f"note {n} about {n * 7919:032x}"} for n in range(5000)]
    problem(call(server, "PUT", kb + "/notes", alice, {"knowledge_base": {"rows": documents}}),
            429, key_name)
    assert sql_ok(server, alice, "SELECT count(*) FROM mindsdb.notes")["data"] == [[0]]
    assert used(alice) == 0

    # Within the limit everything is counted, and dropped bytes come back.
    sql_ok(server, alice, f"CREATE TABLE small AS {big.replace('100000', '2000')}")
    files_put(server, alice, "few", "id,h\n" + "".join(lines[:500]))
    put = call(server, "PUT", kb + "/notes", alice, {"knowledge_base": {"rows": documents[:100]}})
    assert put.status_code == 200, put.text
    with_all = used(alice)
    assert 0 < with_all <= 1024 ** 2, with_all
    sql_ok(server, bob, f"CREATE TABLE mine AS {big.replace('100000', '2000')}")
    assert used(alice) == with_all and used(bob) > 0
    sql_ok(server, alice, "DROP TABLE small")
    assert call(server, "DELETE", "/api/files/few", alice).status_code in (200, 204)
    assert call(server, "DELETE", kb + "/notes", alice).status_code == 204
    # What the drops left is removed by the sweeper after them, the bytes given back as it goes.
    deadline = time.monotonic() + 30
    while used(alice) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used(alice) == 0


def test_the_configured_provider_is_reachable_at_its_path_only(start_server, llm):
    """No `egress.allow` entry covers the fake provider on 127.0.0.1: its configured URL's path
    (`/v1/…`) is reachable (a mind answers through it, an agent or model may name it), any
    other path there, or the port by PostgreSQL, is refused with the one refusal text."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, allow=False), "alice")
    key = keys["alice"]
    llm.fallback(text("through the configured endpoint"))
    create_mind(server, key, {"name": "m"})
    assert answer_of(ask(server, key, "m", "hi")) == "through the configured endpoint"

    root = llm.base_url.removesuffix("/v1")
    refusal = "refused by the egress policy: this server does not connect to '127.0.0.1'"
    agents = "/api/projects/mindsdb/agents"

    def agent(name: str, base_url: str) -> requests.Response:
        return call(server, "POST", agents, key, {"agent": {
            "name": name, "model": {"provider": "openai", "model_name": "fake-model",
                                    "base_url": base_url}}})

    assert agent("fine", llm.base_url).status_code == 201
    for path in ("/admin", "/api/pull", "/v1beta", "/v1/../api/delete"):
        assert problem(agent("elsewhere", root + path), 403)["detail"].endswith(refusal), path
    sql_error(server, key, "CREATE MODEL mindsdb.sideways PREDICT answer USING engine = 'openai', "
                           f"prompt_template = 'say {{{{q}}}}', base_url = '{root}/internal'",
              refusal)
    port = int(root.rsplit(":", 1)[1])
    pg = {"host": "127.0.0.1", "port": port, "database": "x", "user": "x", "password": "x"}
    sql_error(server, key, "CREATE DATABASE sideways WITH ENGINE = 'postgres', "
                           f"PARAMETERS = {json.dumps(pg)}", refusal)
    assert "elsewhere" not in [a["name"] for a in call(server, "GET", agents, key).json()]


@needs_postgres
def test_datasources_from_sql_and_the_minds_api_share_one_quota(start_server, llm):
    """A datasource made by `CREATE DATABASE … ENGINE 'postgres'` is the Minds API's
    datasource: listed there and in information_schema.databases, counted in /limits, and
    over the plan's limit either way is refused naming the datasources quota."""
    plan = one_plan(max_datasources=2)
    server, keys = hosted_server(start_server, hosted_config(llm.base_url, plan), "alice")
    key = keys["alice"]
    assert limits(server, key)["datasources"] == {"limit": 2, "used": 0, "remaining": 2}
    parameters = json.dumps(pg_connection_data())
    sql_ok(server, key, f"CREATE DATABASE from_sql ENGINE = 'postgres', PARAMETERS = {parameters}")
    create_datasource(server, key, "from_api")
    assert limits(server, key)["datasources"] == {"limit": 2, "used": 2, "remaining": 0}
    listed = call(server, "GET", MINDS_API + "/datasources", key).json()
    assert sorted(d["name"] for d in listed) == ["from_api", "from_sql"], listed
    databases = column(server, key, "SELECT NAME FROM information_schema.databases")
    assert {"from_api", "from_sql"} <= set(databases), databases

    body = {"name": "third", "engine": "postgres", "connection_data": pg_connection_data()}
    problem(call(server, "POST", MINDS_API + "/datasources", key, body), 429, "datasources")
    sql_error(server, key, f"CREATE DATABASE third ENGINE = 'postgres', PARAMETERS = {parameters}",
              "datasources")
    sql_error(server, key, "CREATE DATABASE local_files ENGINE = 'files', "
                           "PARAMETERS = {\"path\": \"/\"}", "files")
    sql_ok(server, key, "DROP DATABASE from_sql")
    assert limits(server, key)["datasources"]["used"] == 1
    create_datasource(server, key, "third")


@needs_postgres
def test_datasource_updates_keep_masked_secrets_and_renames_move_minds(start_server, llm):
    """minds-sdk's `datasources.update`: connection data sent back as GET showed it (password
    masked) keeps the stored password; a new name renames the datasource, the minds that read
    it follow, and SQL `DROP DATABASE` of it is refused like DELETE (409) while they do."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    key = keys["alice"]
    client = Client(key, base_url=server.url + MINDS_API)
    shown = client.datasources.create("old_name", engine="postgres",
                                      connection_data=pg_connection_data())
    client.datasources.update("old_name", connection_data=shown.connection_data)
    query = "SELECT CONNECTION_DATA FROM information_schema.databases WHERE NAME = 'old_name'"
    stored = requests.post(server.url + "/api/sql/query", headers=bearer(key), timeout=30,
                           json={"query": query, "context": {"show_secrets": True}}).json()
    assert json.loads(stored["data"][0][0])["password"] == "pw-not-checked-by-trust", stored

    client.minds.create("reader", datasources=[{"name": "old_name", "tables": None}])
    sql_error(server, key, "DROP DATABASE old_name", "reader")
    renamed = client.datasources.update("old_name", new_name="new_name")
    assert renamed.name == "new_name"
    assert [d.name for d in client.datasources.list()] == ["new_name"]
    assert client.minds.get("reader").datasources == [{"name": "new_name", "tables": None}]
    with pytest.raises(UnknownError, match="used by"):
        client.datasources.drop("new_name")


# Tenants.

def sql_names(server: Server, key: str) -> set[str]:
    """Every name the tenant's SQL lists: databases, tables, uploaded files, agents."""
    listings = ["SHOW DATABASES", "SELECT NAME FROM information_schema.databases",
                "SELECT table_name FROM information_schema.tables", "SHOW TABLES FROM files",
                "SHOW AGENTS"]
    return {name.lower() for query in listings for name in column(server, key, query)}


def test_a_tenant_sees_nothing_of_another_through_any_route_or_sql(start_server, llm):
    """Alice's project, table, agent, file, mind (and datasource, with PostgreSQL) answer Bob
    as if they did not exist, on every route and in SQL; Bob can create objects of the same
    names (no 409 telling him otherwise) and each then sees only their own rows."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice", "bob")
    alice, bob = keys["alice"], keys["bob"]

    sql_ok(server, alice, "CREATE PROJECT vault")
    sql_ok(server, alice, "CREATE TABLE vault.notes (note VARCHAR)")
    sql_ok(server, alice, "INSERT INTO vault.notes VALUES ('alice note')")
    sql_ok(server, alice, "CREATE TABLE mindsdb.ledger (owner VARCHAR, amount INT)")
    sql_ok(server, alice, "INSERT INTO mindsdb.ledger VALUES ('alice', 100)")
    agent = call(server, "POST", "/api/projects/mindsdb/agents", alice, {"agent": {"name": "spy"}})
    assert agent.status_code == 201, agent.text
    files_put(server, alice, "report", "who,amount\nalice,100\n")
    create_mind(server, alice, {"name": "advisor"})
    alices_names = {"vault", "notes", "ledger", "spy", "report", "advisor"}
    if PG_URL is not None:
        create_datasource(server, alice, "warehouse")
        alices_names.add("warehouse")

    # Routes.
    problem(call(server, "GET", "/api/projects/vault", bob), 404, "vault")
    for path in ("/api/projects", "/api/projects/"):
        assert call(server, "GET", path, bob).json() == [{"name": "mindsdb"}], path
    assert call(server, "GET", "/api/projects/mindsdb/agents", bob).json() == []
    problem(call(server, "GET", "/api/projects/mindsdb/agents/spy", bob), 404, "spy")
    problem(call(server, "PUT", "/api/projects/mindsdb/agents/spy", bob,
                 {"agent": {"prompt_template": "x"}}), 400)
    problem(call(server, "DELETE", "/api/projects/mindsdb/agents/spy", bob), 404)
    problem(call(server, "POST", "/api/projects/mindsdb/agents/spy/completions", bob,
                 {"messages": [{"role": "user", "content": "hi"}]}), 404)
    assert call(server, "GET", "/api/files", bob).json() == []
    problem(call(server, "DELETE", "/api/files/report", bob), 400, "does not exist")
    assert call(server, "GET", MINDS_API + "/minds", bob).json() == []
    for method, body in (("GET", None), ("PUT", {"model_name": "x"}), ("DELETE", None)):
        problem(call(server, method, MINDS_API + "/minds/advisor", bob, body), 404, "advisor")
    problem(ask(server, bob, "advisor", "hi"), 404, "advisor")
    problem(call(server, "POST", MINDS_API + "/responses", bob,
                 {"model": "advisor", "input": "hi"}), 404, "advisor")
    assert call(server, "GET", MINDS_API + "/datasources", bob).json() == []
    for method, body in (("GET", None), ("PUT", {"description": "x"}), ("DELETE", None)):
        problem(call(server, method, MINDS_API + "/datasources/warehouse", bob, body), 404)
    bobs_limits = limits(server, bob)
    assert (bobs_limits["minds"]["used"], bobs_limits["datasources"]["used"]) == (0, 0), bobs_limits
    assert llm.requests == [], "nothing of alice's was asked"

    # SQL.
    sql_error(server, bob, "SELECT * FROM mindsdb.ledger", "not found")
    sql_error(server, bob, "SELECT * FROM vault.notes")
    sql_error(server, bob, "SELECT * FROM files.report", "not found")
    sql_error(server, bob, "INSERT INTO mindsdb.ledger VALUES ('bob', 1)")
    sql_error(server, bob, "DROP TABLE mindsdb.ledger")
    sql_error(server, bob, "DROP PROJECT vault")
    sql_error(server, bob, "SELECT answer FROM mindsdb.spy WHERE question = 'hi'")
    if PG_URL is not None:
        sql_error(server, bob, "SELECT * FROM warehouse.hosted_people")
    assert alices_names - {"advisor"} <= sql_names(server, alice), "the listings are complete"
    leaked = sql_names(server, bob) & alices_names
    assert not leaked, f"bob's SQL lists alice's {sorted(leaked)}"

    # The same names for bob, then each tenant's own values.
    sql_ok(server, bob, "CREATE PROJECT vault")
    sql_ok(server, bob, "CREATE TABLE vault.notes (note VARCHAR)")
    sql_ok(server, bob, "INSERT INTO vault.notes VALUES ('bob note')")
    sql_ok(server, bob, "CREATE TABLE mindsdb.ledger (owner VARCHAR, amount INT)")
    sql_ok(server, bob, "INSERT INTO mindsdb.ledger VALUES ('bob', 7)")
    agent = call(server, "POST", "/api/projects/mindsdb/agents", bob,
                 {"agent": {"name": "spy", "prompt_template": "bob's"}})
    assert agent.status_code == 201, agent.text
    files_put(server, bob, "report", "who,amount\nbob,7\n")
    create_mind(server, bob, {"name": "advisor", "parameters": {"prompt_template": "bob's"}})
    if PG_URL is not None:
        create_datasource(server, bob, "warehouse")
    for key, owner, amount in ((alice, "alice", 100), (bob, "bob", 7)):
        assert sql_ok(server, key, "SELECT owner, amount FROM mindsdb.ledger")["data"] == \
            [[owner, amount]], owner
        assert column(server, key, "SELECT note FROM vault.notes") == [f"{owner} note"], owner
        assert sql_ok(server, key, "SELECT who, amount FROM files.report")["data"] == \
            [[owner, amount]], owner
    assert "prompt_template" not in call(server, "GET", "/api/projects/mindsdb/agents/spy",
                                         alice).json()
    assert call(server, "GET", MINDS_API + "/minds/advisor", alice).json()["parameters"] == {}
    assert call(server, "DELETE", MINDS_API + "/minds/advisor", alice).status_code == 204
    assert call(server, "GET", MINDS_API + "/minds/advisor", bob).json()["parameters"] == \
        {"prompt_template": "bob's"}, "deleting alice's mind leaves bob's"


# Credentials.

def test_every_route_but_status_ping_and_login_needs_credentials(start_server, llm):
    """No credentials or an unknown key or token: 401 problem. A key as Bearer or as
    X-Api-Key, or a login token got with name + key (/api/login or /cloud/login), works."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice", "bob")
    key = keys["alice"]
    assert key.startswith("mlk_"), key
    for method, path, body in (("GET", MINDS_API + "/minds", None), ("GET", "/limits/", None),
                               ("POST", "/api/sql/query", {"query": "SELECT 1"}),
                               ("GET", "/api/projects", None), ("GET", "/api/files", None)):
        problem(call(server, method, path, None, body), 401)
        problem(call(server, method, path, "mlk_not-a-key", body), 401)
        problem(call(server, method, path, "pat_not-a-token", body), 401)
    assert call(server, "GET", "/api/status").status_code == 200
    assert call(server, "GET", "/api/util/ping").status_code == 200

    by_header = requests.get(server.url + MINDS_API + "/minds", headers={"X-Api-Key": key},
                             timeout=10)
    assert by_header.status_code == 200 and by_header.json() == [], by_header.text
    assert sql_ok(server, key, "SELECT 1 AS one")["data"] == [[1]]

    for path, field in (("/api/login", "username"), ("/api/login", "email"),
                        ("/cloud/login", "email")):
        login = call(server, "POST", path, None, {field: "alice", "password": key})
        assert login.status_code == 200, (path, field, login.text)
        token = login.json()["token"]
        assert token and not token.startswith("mlk_"), token
        assert sql_ok(server, token, "SELECT 1 AS one")["data"] == [[1]], (path, field)
    problem(call(server, "POST", "/api/login", None, {"username": "bob", "password": key}), 401)
    problem(call(server, "POST", "/api/login", None,
                 {"username": "alice", "password": "mlk_wrong"}), 401)


def test_a_disabled_user_is_403_and_a_revoked_key_401(start_server, llm):
    """`users disable` refuses the user's keys and tokens with 403 (others are untouched) until
    `users enable`; `users revoke` refuses that one key with 401, not the user's others."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice", "bob")
    alice = keys["alice"]
    token = call(server, "POST", "/api/login", None,
                 {"username": "alice", "password": alice}).json()["token"]
    create_mind(server, alice, {"name": "kept"})

    while_stopped(server, ("disable", "alice"))
    for credential in (alice, token):
        problem(call(server, "GET", MINDS_API + "/minds", credential), 403)
        problem(server.sql("SELECT 1", token=credential), 403)
    problem(call(server, "POST", "/api/login", None, {"username": "alice", "password": alice}),
            403)
    assert call(server, "GET", MINDS_API + "/minds", keys["bob"]).status_code == 200

    server.stop()
    users_json(server, "enable", "alice")
    second = users_json(server, "key", "alice")
    first_id = next(k["id"] for k in users_json(server, "show", "alice")["api_keys"]
                    if k["id"] != second["id"])
    revoked = users_json(server, "revoke", "alice", str(first_id))
    assert [k["id"] for k in revoked["api_keys"]] == [second["id"]], revoked
    server.start()
    problem(call(server, "GET", MINDS_API + "/minds", alice), 401)
    kept = call(server, "GET", MINDS_API + "/minds", second["key"])
    assert kept.status_code == 200 and [m["name"] for m in kept.json()] == ["kept"], kept.text


def test_mindsdb_sdk_logs_in_with_the_users_name_and_key(start_server, llm):
    """mindsdb_sdk 3.5.0, unmodified: `connect(login=name, password=key)` logs in through
    /cloud/login and queries as that user; `connect(api_key=key)` sends X-Api-Key."""
    server, keys = hosted_server(start_server, hosted_config(llm.base_url), "alice")
    sql_ok(server, keys["alice"], "CREATE TABLE mindsdb.mine (x INT)")
    sql_ok(server, keys["alice"], "INSERT INTO mindsdb.mine VALUES (5)")
    con = mindsdb_sdk.connect(server.url, login="alice", password=keys["alice"])
    assert con.api.session.headers["Authorization"].startswith("Bearer ")
    assert con.query("SELECT x FROM mindsdb.mine").fetch()["x"].tolist() == [5]
    assert [p.name for p in con.list_projects()] == ["mindsdb"]
    assert "/cloud/login" in server.log_text()
    by_key = mindsdb_sdk.connect(server.url, api_key=keys["alice"])
    assert by_key.query("SELECT x FROM mindsdb.mine").fetch()["x"].tolist() == [5]
    with pytest.raises(requests.HTTPError) as refused:
        mindsdb_sdk.connect(server.url, login="alice", password="mlk_wrong")
    assert refused.value.response.status_code == 401


# The local edition and the CLI.

@pytest.mark.parametrize("method, path", [
    ("GET", "/api/v1/minds"), ("GET", "/api/v1/minds/"), ("GET", "/api/v1/minds/m1"),
    ("GET", "/api/v1/datasources"), ("POST", "/api/v1/chat/completions"),
    ("POST", "/api/v1/responses"), ("GET", "/limits"), ("GET", "/limits/"),
    ("GET", "/api/limits/"), ("GET", "/api/v1/limits")])
def test_the_local_edition_has_no_minds_api(server, method, path):
    problem(call(server, method, path, None, {"model": "m1", "input": "hi"}), 404)


def test_users_cli_refuses_a_duplicate_and_an_unknown_plan(server_bin: Path, tmp_path: Path):
    """`users create` of a taken name (in any case) or on a plan the config lacks fails with
    a message naming it; `users plan` likewise; nothing is created by a failure."""
    server = Server(server_bin, tmp_path, hosted_config("http://127.0.0.1:9/v1", one_plan("basic")))
    user = users_json(server, "create", "alice")
    assert (user["name"], user["plan"], user["disabled"], user["api_keys"]) == \
        ("alice", "basic", False, []), user
    for name in ("alice", "ALICE"):
        again = users_command(server, "create", name)
        assert again.returncode != 0 and "already exists" in again.stderr, again
    unknown = users_command(server, "create", "bob", "--plan", "platinum")
    assert unknown.returncode != 0 and "platinum" in unknown.stderr, unknown
    moved = users_command(server, "plan", "alice", "platinum")
    assert moved.returncode != 0 and "platinum" in moved.stderr, moved
    assert [u["name"] for u in users_json(server, "list")] == ["alice"]
    assert users_json(server, "show", "alice")["plan"] == "basic"
    issued = users_json(server, "key", "alice")
    assert set(issued) == {"id", "user", "key", "created_at"}, issued
    assert issued["user"] == "alice" and issued["key"].startswith("mlk_"), issued
    assert issued["key"] not in json.dumps(users_json(server, "show", "alice")), \
        "a key's text is shown once"


def test_trusted_tenant_headers_choose_the_tenant_only_when_the_operator_says_so(
        start_server, server_bin, tmp_path):
    """MindsDB's `company-id` / `user-id` headers, set by a proxy in front: each company (and
    user in it) is a tenant of its own, made on its first request; off (the default) a request
    carrying them is refused; the local edition refuses the setting."""
    import subprocess

    from mlserver import child_environment

    server = start_server('edition = "hosted"\n[http]\ntrusted_tenant_headers = true\n')

    def as_(company=None, user=None):
        headers = {}
        if company is not None:
            headers["company-id"] = company
        if user is not None:
            headers["user-id"] = user
        return headers

    def run(query, **who):
        return requests.post(server.url + "/api/sql/query", json={"query": query},
                             headers=as_(**who), timeout=30)

    assert run("CREATE TABLE mindsdb.secret (x INT)", company="1").json()["type"] == "ok"
    assert run("INSERT INTO mindsdb.secret VALUES (7)", company="1").json()["type"] == "ok"
    assert run("SELECT x FROM mindsdb.secret", company="1").json()["data"] == [[7]]
    for other in ({"company": "2"}, {"company": "1", "user": "9"}):
        missing = run("SELECT x FROM mindsdb.secret", **other).json()
        assert missing["type"] == "error" and "secret" in missing["error_message"], (other, missing)
    projects = requests.get(server.url + "/api/projects", headers=as_("2"), timeout=10)
    assert projects.json() == [{"name": "mindsdb"}]
    # Without the headers, the hosted edition still wants a key.
    assert run("SELECT 1").status_code == 401
    for bad, status in (({"company": "a b"}, 400), ({"company": "x" * 33}, 400), ({"user": "1"}, 400)):
        assert run("SELECT 1", **bad).status_code == status, bad

    off, keys = hosted_server(start_server, 'edition = "hosted"\n', "alice")
    refused = requests.post(off.url + "/api/sql/query", json={"query": "SELECT 1"},
                            headers={"company-id": "1", "Authorization": f"Bearer {keys['alice']}"},
                            timeout=10)
    assert refused.status_code == 403 and "trusted_tenant_headers" in refused.json()["detail"]

    config = tmp_path / "local.toml"
    config.write_text("[http]\ntrusted_tenant_headers = true\n")
    done = subprocess.run([str(server_bin), "--config", str(config), "--data", str(tmp_path / "db"),
                           "--port", "0", "--mysql-port", "0"], capture_output=True, text=True, timeout=60,
                          env=child_environment())
    assert done.returncode != 0 and "trusted_tenant_headers" in done.stderr, done
