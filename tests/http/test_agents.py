"""Agents over HTTP, as MindsDB serves them (`docs/mindsdb-wire.md` §0 and §3, the agent_*/agents_*
captures): the REST routes with MindsDB's codes and bodies, answers worked out with a fake
OpenAI-compatible provider on 127.0.0.1 (fake_llm.py) that calls the `sql_query` tool, the
read-only sandbox that tool runs in, provider failures turned into 502s that never hang, the SSE
stream, the SQL statements, and MindsDB's own `mindsdb_sdk` 3.5.0 agents API, unmodified.

Every server here gets `[llm]` pointing at the fake (its default model, "fake-model" with key
"sk-test") and `[agents]` limits, plus two tables: `mindsdb.sales` (three rows, amounts summing
to 60) and `mindsdb.secrets` holding "TOPSECRET-42", which no agent is given and no model may see.
"""

from __future__ import annotations

import json
import re
import socket
import time

import mindsdb_sdk
import pytest
import requests

from fake_llm import FakeLLM, error, hang, text, tool_call, tool_calls

TIMEOUT_SECS = 5
MAX_STEPS = 6
ROW_LIMIT = 100
SECRET = "TOPSECRET-42"
PROBLEM = "application/problem+json"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")
# MindsDB's agent body: these first, in this order (agent_create_localmock capture), then the
# optional ones, each left out when empty.
HEAD_KEYS = ["id", "name", "project_id", "updated_at", "created_at"]
OPTIONAL_KEYS = ["data", "model", "prompt_template", "params"]

SALES_TOTAL_SQL = "SELECT sum(amount) AS total FROM mindsdb.sales"


def config_for(base_url: str) -> str:
    return f"""\
[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{base_url}"
api_key = "sk-test"
timeout_secs = {TIMEOUT_SECS}

[agents]
max_steps = {MAX_STEPS}
row_limit = {ROW_LIMIT}
sql_timeout_secs = 10
sample_rows = 3
"""


@pytest.fixture
def llm():
    """The fake provider, stopped after the test (which also wakes any reply that hangs)."""
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def agent_server(start_server, llm):
    """A server whose default model is the fake, with the sales and secrets tables."""
    server = start_server(config_for(llm.base_url))
    server.sql_ok("CREATE TABLE mindsdb.sales (region VARCHAR, amount INT)")
    server.sql_ok("INSERT INTO mindsdb.sales VALUES ('north', 10), ('south', 20), ('north', 30)")
    server.sql_ok("CREATE TABLE mindsdb.secrets (k VARCHAR)")
    server.sql_ok(f"INSERT INTO mindsdb.secrets VALUES ('{SECRET}')")
    return server


# Helpers.

def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def agents_url(server, *parts: str, project: str = "mindsdb") -> str:
    return "/".join([server.url, "api/projects", project, "agents", *parts])


def create(server, agent: dict, project: str = "mindsdb") -> requests.Response:
    return requests.post(agents_url(server, project=project), json={"agent": agent}, timeout=30)


def created(server, agent: dict, project: str = "mindsdb") -> dict:
    response = create(server, agent, project)
    assert response.status_code == 201, response.text
    return response.json()


def get(server, name: str, project: str = "mindsdb") -> requests.Response:
    return requests.get(agents_url(server, name, project=project), timeout=10)


def put(server, name: str, agent: dict) -> requests.Response:
    return requests.put(agents_url(server, name), json={"agent": agent}, timeout=30)


def ask(server, name: str, question: str, project: str = "mindsdb",
        timeout: float = 30) -> requests.Response:
    body = {"messages": [{"role": "user", "content": question}]}
    return requests.post(agents_url(server, name, "completions", project=project), json=body,
                         timeout=timeout)


def ask_stream(server, name: str, question: str) -> requests.Response:
    body = {"messages": [{"role": "user", "content": question}]}
    return requests.post(agents_url(server, name, "completions", "stream"), json=body, timeout=30)


def answer_of(response: requests.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["message"]["content"]


def problem(response: requests.Response, status: int, title: str | None = None,
            detail: str | None = None, mentions: tuple[str, ...] = ()) -> dict:
    """A problem+json error (`docs/mindsdb-wire.md` §0): status, title, detail, timestamp."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers.get("content-type") == PROBLEM, dict(response.headers)
    body = response.json()
    assert list(body) == ["title", "detail", "timestamp"], body
    assert TIMESTAMP.match(body["timestamp"]), body
    assert isinstance(body["title"], str) and body["title"], body
    assert isinstance(body["detail"], str) and body["detail"], body
    if title is not None:
        assert body["title"] == title, body
    if detail is not None:
        assert body["detail"] == detail, body
    for word in mentions:
        assert word in body["detail"], f"detail should mention {word!r}: {body}"
    return body


def system_message(request: dict) -> str:
    messages = request["messages"]
    assert messages[0]["role"] == "system", messages
    return messages[0]["content"]


def tool_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m.get("role") == "tool"]


def sse_events(response: requests.Response) -> list[dict]:
    """The JSON of each `data: <json>\\n\\n` frame; fails on anything else."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream"), dict(response.headers)
    frames = response.content.decode().split("\n\n")
    assert frames[-1] == "", f"the stream must end with a complete frame: {frames[-1]!r}"
    assert all(f.startswith("data: ") for f in frames[:-1]), frames
    return [json.loads(f[len("data: "):]) for f in frames[:-1]]


def table_unchanged(server) -> None:
    rows = server.sql_ok("SELECT count(*) AS n, sum(amount) AS s FROM mindsdb.sales")["data"]
    assert rows == [[3, 60]], rows
    assert server.sql_ok("SELECT k FROM mindsdb.secrets")["data"] == [[SECRET]]


# The fake itself: the tests below are only as good as its OpenAI framing.

def test_fake_llm_speaks_openais_wire_in_both_modes(llm):
    """A tool call comes back whole without streaming, and streamed as OpenAI streams it: name
    and id first, the arguments in pieces, finish_reason, [DONE]."""
    url = llm.base_url + "/chat/completions"
    args = {"query": SALES_TOTAL_SQL}
    llm.script(tool_call("sql_query", args, id="call_x"), tool_call("sql_query", args), text("A B C D"))
    whole = requests.post(url, json={"model": "m", "messages": []}, timeout=10).json()
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    call = whole["choices"][0]["message"]["tool_calls"][0]
    assert call["id"] == "call_x" and json.loads(call["function"]["arguments"]) == args
    streamed = requests.post(url, json={"model": "m", "messages": [], "stream": True}, timeout=10)
    frames = [f[len("data: "):] for f in streamed.text.split("\n\n") if f]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["tool_calls"][0]["function"] == {"name": "sql_query", "arguments": ""}
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:-1]]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == args
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    texts = requests.post(url, json={"model": "m", "messages": [], "stream": True}, timeout=10)
    deltas = [json.loads(f[len("data: "):])["choices"][0]["delta"]
              for f in texts.text.split("\n\n") if f and f != "data: [DONE]"]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "A B C D"
    assert answer_text(requests.post(url, json={"messages": []}, timeout=10)) == "no scripted reply"
    assert len(llm.requests) == 4


def answer_text(response: requests.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


# REST: records.

def test_list_is_empty_at_first_then_lists_what_was_created(agent_server):
    """`GET /agents` is `[]` (agents_list_empty capture), then the created agents, each in
    the same body GET and POST answer."""
    listed = requests.get(agents_url(agent_server), timeout=10)
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    assert listed.content == b"[]"
    first = created(agent_server, {"name": "a1", "prompt_template": "one"})
    second = created(agent_server, {"name": "a2", "prompt_template": "two"})
    listed = requests.get(agents_url(agent_server), timeout=10).json()
    assert sorted(listed, key=lambda a: a["name"]) == [first, second]
    assert first["id"] != second["id"]


def test_create_answers_201_with_mindsdbs_agent_body(agent_server, llm):
    """201 and the body of the agent_create_localmock capture: keys in MindsDB's order, the
    model (API key included) echoed as given, timestamps `YYYY-MM-DD HH:MM:SS.ffffff`."""
    spec = {"name": "a1",
            "model": {"provider": "openai", "model_name": "gpt-4o", "api_key": "sk-x",
                      "base_url": llm.base_url},
            "data": {"tables": ["mindsdb.sales"]}, "prompt_template": "hi",
            "params": {"timeout": 30}}
    response = create(agent_server, spec)
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == HEAD_KEYS + OPTIONAL_KEYS, list(body)
    assert isinstance(body["id"], int) and isinstance(body["project_id"], int)
    assert body["name"] == "a1"
    assert TIMESTAMP.match(body["created_at"]) and TIMESTAMP.match(body["updated_at"]), body
    assert body["data"] == {"tables": ["mindsdb.sales"]}
    assert body["model"] == spec["model"]
    assert body["prompt_template"] == "hi"
    assert body["params"] == {"timeout": 30}
    got = get(agent_server, "a1")
    assert got.status_code == 200 and got.json() == body
    got = get(agent_server, "A1")  # names are case-insensitive, kept as given
    assert got.status_code == 200 and got.json() == body
    assert "sk-x" not in agent_server.log_text()  # API keys are never logged


def test_empty_fields_are_left_out_of_the_body(agent_server):
    """`data`, `prompt_template` and `params` are omitted when empty, also when sent as null or
    `{}` the way mindsdb_sdk sends them."""
    body = created(agent_server, {"name": "bare", "data": None, "prompt_template": None,
                                  "params": {}})
    assert list(body)[:5] == HEAD_KEYS, list(body)
    assert set(body) - set(HEAD_KEYS) <= {"model"}, body
    assert list(get(agent_server, "bare").json()) == list(body)


def test_create_without_agent_or_name_is_400(agent_server):
    """The agent_create_missing_agent_key and agent_create_missing_name captures."""
    no_agent = requests.post(agents_url(agent_server), json={"name": "a2"}, timeout=10)
    problem(no_agent, 400, "Missing parameter", 'Must provide "agent" parameter in POST body')
    problem(create(agent_server, {"prompt_template": "x"}), 400, "Missing field",
            'Missing "name" field for agent')
    assert requests.get(agents_url(agent_server), timeout=10).json() == []


def test_create_duplicate_is_409(agent_server):
    """The agent_create_duplicate capture; the first agent is left as it was."""
    first = created(agent_server, {"name": "a1", "prompt_template": "first"})
    problem(create(agent_server, {"name": "a1", "prompt_template": "second"}), 409,
            "Agent already exists", "Agent with name a1 already exists. Please choose a different one.")
    assert get(agent_server, "a1").json() == first


def test_unknown_project_is_404_on_every_route(agent_server):
    """agents_list_unknown_project and agent_create_unknown_project: 404 "Project not found"."""
    detail = "Project with name nosuchproj does not exist"
    p = "nosuchproj"
    problem(requests.get(agents_url(agent_server, project=p), timeout=10), 404,
            "Project not found", detail)
    problem(create(agent_server, {"name": "a1"}, project=p), 404, "Project not found", detail)
    problem(get(agent_server, "a1", project=p), 404, "Project not found", detail)
    problem(ask(agent_server, "a1", "hi", project=p), 404, "Project not found", detail)


def test_unknown_parameters_are_rejected_with_400(agent_server):
    """MindsDB validates agent params against a closed schema; we answer 400 naming the key,
    at the top level, inside `params` and inside `data`, on create and on update."""
    bad = problem(create(agent_server, {"name": "a", "foo": 1}), 400)
    assert "Parameter 'foo' is not allowed" in bad["detail"], bad
    bad = problem(create(agent_server, {"name": "a", "params": {"colour": "red"}}), 400)
    assert "colour" in bad["detail"] and "not allowed" in bad["detail"], bad
    bad = problem(create(agent_server, {"name": "a", "data": {"tables": [], "views": ["x"]}}), 400)
    assert "views" in bad["detail"], bad
    assert requests.get(agents_url(agent_server), timeout=10).json() == []
    created(agent_server, {"name": "a"})
    bad = problem(put(agent_server, "a", {"foo": 1}), 400)
    assert "Parameter 'foo' is not allowed" in bad["detail"], bad


@pytest.mark.parametrize("entry, named", [("mindsdb.nope", "nope"), ("nodb.sales", "nodb")])
def test_data_tables_must_exist(agent_server, entry, named):
    """A `data.tables` entry naming a missing table or database is a 400 that names it."""
    bad = problem(create(agent_server, {"name": "a", "data": {"tables": [entry]}}), 400)
    assert named in bad["detail"], bad
    assert requests.get(agents_url(agent_server), timeout=10).json() == []


def test_get_missing_agent_is_404(agent_server):
    """The agent_get_missing capture."""
    problem(get(agent_server, "nosuch"), 404, "Agent not found",
            "Agent with name nosuch does not exist")


def test_put_merges_shallowly_and_null_drops_a_key(agent_server):
    """PUT merges the given keys into the agent (agent_put_partial capture), a null removes
    one, created_at stays and updated_at moves on."""
    first = created(agent_server, {"name": "a1", "prompt_template": "one",
                                   "data": {"tables": ["mindsdb.sales"]}})
    changed = put(agent_server, "a1", {"prompt_template": "hello again"})
    assert changed.status_code == 200, changed.text
    assert changed.headers["content-type"] == "application/json"
    body = changed.json()
    assert body["prompt_template"] == "hello again"
    assert body["data"] == {"tables": ["mindsdb.sales"]}
    assert (body["id"], body["name"], body["created_at"]) == (first["id"], "a1", first["created_at"])
    assert TIMESTAMP.match(body["updated_at"]) and body["updated_at"] >= first["updated_at"]
    assert get(agent_server, "a1").json() == body
    replaced = put(agent_server, "a1", {"data": {"tables": ["mindsdb.secrets"]}}).json()
    assert replaced["data"] == {"tables": ["mindsdb.secrets"]}  # shallow: data is replaced whole
    dropped = put(agent_server, "a1", {"prompt_template": None})
    assert dropped.status_code == 200, dropped.text
    assert "prompt_template" not in dropped.json()
    assert dropped.json()["data"] == {"tables": ["mindsdb.secrets"]}
    assert "prompt_template" not in get(agent_server, "a1").json()


def test_put_with_another_name_renames_and_409_when_taken(agent_server):
    """A different `name` in the PUT body renames the agent (same id); onto an existing one
    it is a 409 and nothing changes."""
    a1 = created(agent_server, {"name": "a1", "prompt_template": "p"})
    b = created(agent_server, {"name": "b"})
    problem(put(agent_server, "a1", {"name": "b"}), 409, "Agent already exists")
    assert get(agent_server, "a1").json() == a1 and get(agent_server, "b").json() == b
    renamed = put(agent_server, "a1", {"name": "c"})
    assert renamed.status_code == 200, renamed.text
    assert (renamed.json()["name"], renamed.json()["id"]) == ("c", a1["id"])
    assert renamed.json()["prompt_template"] == "p"
    problem(get(agent_server, "a1"), 404, "Agent not found", "Agent with name a1 does not exist")
    assert get(agent_server, "c").json() == renamed.json()


def test_put_never_creates_and_needs_an_agent_body(agent_server):
    """The agent_put_missing capture: no upsert; a body without `agent` is a 400."""
    problem(put(agent_server, "nosuch", {"prompt_template": "x"}), 400, "Creation is not allowed",
            "Creation of an agent using the PUT method is not allowed.")
    problem(get(agent_server, "nosuch"), 404, "Agent not found")
    created(agent_server, {"name": "a1"})
    no_agent = requests.put(agents_url(agent_server, "a1"), json={"prompt_template": "x"}, timeout=10)
    problem(no_agent, 400)


def test_delete_is_204_with_an_empty_body_then_404(agent_server):
    """DELETE answers 204 with nothing; the agent is gone for GET, the list and a 2nd DELETE."""
    created(agent_server, {"name": "a1"})
    deleted = requests.delete(agents_url(agent_server, "a1"), timeout=10)
    assert deleted.status_code == 204, deleted.text
    assert deleted.content == b""
    problem(get(agent_server, "a1"), 404, "Agent not found", "Agent with name a1 does not exist")
    assert requests.get(agents_url(agent_server), timeout=10).json() == []
    problem(requests.delete(agents_url(agent_server, "a1"), timeout=10), 404, "Agent not found")
    created(agent_server, {"name": "a1"})  # the name is free again
    wrong = requests.patch(agents_url(agent_server, "a1"), json={}, timeout=10)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, PUT, DELETE", wrong.headers


def test_legacy_model_name_and_provider_become_the_model(agent_server, llm):
    """Top-level `model_name` + `provider` (older clients) are stored as `model`, and used."""
    body = created(agent_server, {"name": "legacy", "model_name": "legacy-model",
                                  "provider": "openai"})
    assert body["model"] == {"model_name": "legacy-model", "provider": "openai"}
    assert get(agent_server, "legacy").json()["model"] == body["model"]
    llm.script(text("hi from legacy"))
    assert answer_of(ask(agent_server, "legacy", "hello?")) == "hi from legacy"
    assert llm.requests[-1]["model"] == "legacy-model"


def test_default_model_comes_from_the_config(agent_server, llm):
    """An agent created without a model asks `[llm]`'s model at `[llm]`'s URL with its key."""
    created(agent_server, {"name": "plain"})
    llm.script(text("hello"))
    assert answer_of(ask(agent_server, "plain", "hi")) == "hello"
    assert llm.paths == ["/v1/chat/completions"]
    assert llm.requests[0]["model"] == "fake-model"
    assert llm.headers[0]["authorization"] == "Bearer sk-test"
    assert llm.headers[0]["content-type"].startswith("application/json")


def test_an_agents_model_overrides_the_default(agent_server, llm):
    """`model.model_name`, `model.api_key` and `model.base_url` replace the defaults."""
    created(agent_server, {"name": "own", "model": {"provider": "openai", "model_name": "own-model",
                                                    "api_key": "sk-own", "base_url": llm.base_url}})
    llm.script(text("own answer"))
    assert answer_of(ask(agent_server, "own", "hi")) == "own answer"
    assert llm.requests[0]["model"] == "own-model"
    assert llm.headers[0]["authorization"] == "Bearer sk-own"


# REST: completions.

def test_completion_answers_in_mindsdbs_shape(agent_server, llm):
    """`{"message": {"content", "role": "assistant", "trace_id"}}`, and the question reaches the
    model as the last user message after the system message."""
    created(agent_server, {"name": "a1", "prompt_template": "Be nice."})
    llm.script(text("Hello, human."))
    response = ask(agent_server, "a1", "Who are you?")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["message"]
    message = body["message"]
    assert message["content"] == "Hello, human." and message["role"] == "assistant"
    assert isinstance(message["trace_id"], str) and message["trace_id"]
    sent = llm.requests[0]["messages"]
    assert sent[0]["role"] == "system" and "Be nice." in sent[0]["content"]
    assert sent[-1] == {"role": "user", "content": "Who are you?"}


def test_completion_accepts_mindsdbs_legacy_question_answer_messages(agent_server, llm):
    """`[{"question", "answer"}]` (the SDK's documented form): answered pairs become history,
    the one with a null answer is the question."""
    created(agent_server, {"name": "a1"})
    llm.script(text("Second answer."))
    body = {"messages": [{"question": "First?", "answer": "First answer."},
                         {"question": "Second?", "answer": None}]}
    response = requests.post(agents_url(agent_server, "a1", "completions"), json=body, timeout=30)
    assert answer_of(response) == "Second answer."
    sent = llm.requests[0]["messages"]
    assert sent[-3:] == [{"role": "user", "content": "First?"},
                         {"role": "assistant", "content": "First answer."},
                         {"role": "user", "content": "Second?"}]


def test_completion_needs_messages_and_a_known_agent(agent_server, llm):
    """No `messages` is a 400, an unknown agent a 404; neither reaches the model."""
    created(agent_server, {"name": "a1"})
    missing = requests.post(agents_url(agent_server, "a1", "completions"), json={}, timeout=10)
    problem(missing, 400)
    problem(ask(agent_server, "nosuch", "hi"), 404, "Agent not found",
            "Agent with name nosuch does not exist")
    assert llm.requests == []


def test_an_answer_that_needed_sql(agent_server, llm):
    """The model asks for SQL, gets the result as a tool message, and answers from it; the
    first request's system message carries the instruction and the table's schema."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]},
                           "prompt_template": "You answer questions about sales."})
    llm.script(tool_call("sql_query", {"query": SALES_TOTAL_SQL}, id="call_total"),
               text("The total is 60"))
    assert answer_of(ask(agent_server, "analyst", "What is the total?")) == "The total is 60"
    assert len(llm.requests) == 2
    system = system_message(llm.requests[0])
    assert "You answer questions about sales." in system
    for word in ("sales", "region", "amount"):
        assert word in system, system
    assert "south" in system, f"sample rows should be shown: {system}"
    assert SECRET not in system and "secrets" not in system
    second = llm.requests[1]["messages"]
    calls = [m for m in second if m.get("role") == "assistant" and m.get("tool_calls")]
    assert calls and calls[-1]["tool_calls"][0]["id"] == "call_total", second
    assert json.loads(calls[-1]["tool_calls"][0]["function"]["arguments"]) == {"query": SALES_TOTAL_SQL}
    tools = tool_messages(llm.requests[1])
    assert len(tools) == 1 and tools[0]["tool_call_id"] == "call_total", second
    assert isinstance(tools[0]["content"], str) and "60" in tools[0]["content"], tools
    assert second.index(calls[-1]) < second.index(tools[0])


def test_the_model_is_offered_the_sql_query_tool(agent_server, llm):
    """Every request offers one function tool `sql_query` taking a string `query`."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(text("ok"))
    answer_of(ask(agent_server, "analyst", "hi"))
    tools = llm.requests[0]["tools"]
    sql_tools = [t for t in tools if t["type"] == "function" and t["function"]["name"] == "sql_query"]
    assert len(sql_tools) == 1, tools
    parameters = sql_tools[0]["function"]["parameters"]
    assert parameters["type"] == "object"
    assert parameters["properties"]["query"]["type"] == "string"


def test_parallel_tool_calls_each_get_their_own_tool_message(agent_server, llm):
    """OpenAI rejects a conversation where a tool call has no answer: two calls in one message
    get two tool messages, matched by id."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(tool_calls(
        tool_call("sql_query", {"query": "SELECT count(*) AS n FROM mindsdb.sales"}, id="call_n"),
        tool_call("sql_query", {"query": "SELECT max(amount) AS m FROM mindsdb.sales"}, id="call_m")),
        text("3 sales, the largest 30"))
    assert answer_of(ask(agent_server, "analyst", "count and max?")) == "3 sales, the largest 30"
    tools = {m["tool_call_id"]: m["content"] for m in tool_messages(llm.requests[1])}
    assert set(tools) == {"call_n", "call_m"}, tools
    assert "3" in tools["call_n"] and "30" in tools["call_m"], tools


SNEAKY_READS = [
    "SELECT * FROM mindsdb.secrets",
    "SELECT * FROM secrets",
    'SELECT * FROM "mindsdb"."secrets"',
    "SELECT * FROM MINDSDB.SECRETS",
    "SELECT s.region, x.k FROM mindsdb.sales s CROSS JOIN mindsdb.secrets x",
    "SELECT region FROM mindsdb.sales WHERE region NOT IN (SELECT k FROM mindsdb.secrets)",
    "WITH x AS (SELECT k FROM mindsdb.secrets) SELECT * FROM x",
    "SELECT region FROM mindsdb.sales UNION ALL SELECT k FROM mindsdb.secrets",
    "SELECT table_name FROM information_schema.tables",
]


@pytest.mark.parametrize("query", SNEAKY_READS)
def test_reading_outside_data_tables_is_refused_and_leaks_nothing(agent_server, llm, query):
    """The sandbox only reads the agent's `data.tables`: any other table, however it is
    named or reached, is refused, and the secret never reaches the model."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(tool_call("sql_query", {"query": query}), text("I cannot see that."))
    assert answer_of(ask(agent_server, "analyst", "What are the secrets?")) == "I cannot see that."
    tools = tool_messages(llm.requests[1])
    assert len(tools) == 1, llm.requests[1]
    assert "refused" in tools[0]["content"].lower(), tools[0]
    assert SECRET not in tools[0]["content"]
    assert SECRET not in json.dumps(llm.requests)


def test_a_db_star_entry_grants_every_table_of_that_db(agent_server, llm):
    """`data.tables: ["mindsdb.*"]` lets the agent read all of mindsdb's tables (and shows
    them in the system message)."""
    created(agent_server, {"name": "all", "data": {"tables": ["mindsdb.*"]}})
    llm.script(tool_call("sql_query", {"query": "SELECT k FROM mindsdb.secrets"}), text("found it"))
    assert answer_of(ask(agent_server, "all", "secrets?")) == "found it"
    system = system_message(llm.requests[0])
    assert "sales" in system and "secrets" in system, system
    content = tool_messages(llm.requests[1])[0]["content"]
    assert SECRET in content and "refused" not in content.lower(), content


WRITES = [
    "INSERT INTO mindsdb.sales VALUES ('east', 1)",
    "INSERT INTO mindsdb.sales SELECT * FROM mindsdb.sales",
    "UPDATE mindsdb.sales SET amount = 0",
    "DELETE FROM mindsdb.sales",
    "DROP TABLE mindsdb.sales",
    "CREATE TABLE mindsdb.copy AS SELECT * FROM mindsdb.sales",
    "SELECT 1; DROP TABLE mindsdb.sales",
    "DROP TABLE mindsdb.secrets",
]


@pytest.mark.parametrize("statement", WRITES)
def test_writes_through_the_tool_are_refused_and_change_nothing(agent_server, llm, statement):
    """The tool runs SELECT only, even over the agent's own tables: anything else is refused
    and the tables are exactly as before."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(tool_call("sql_query", {"query": statement}), text("I did not change anything."))
    assert answer_of(ask(agent_server, "analyst", "Change the data")) == "I did not change anything."
    content = tool_messages(llm.requests[1])[0]["content"]
    assert "refused" in content.lower(), content
    table_unchanged(agent_server)
    assert agent_server.sql("SELECT * FROM mindsdb.copy").json()["type"] == "error"


def test_tool_results_are_cut_at_the_row_limit(agent_server, llm):
    """`[agents] row_limit = 100`: a query over 150 rows hands the model the first 100 only."""
    agent_server.sql_ok("CREATE TABLE mindsdb.big (v VARCHAR)")
    values = ", ".join(f"('r{i:03d}')" for i in range(1, 151))
    agent_server.sql_ok(f"INSERT INTO mindsdb.big VALUES {values}")
    created(agent_server, {"name": "big", "data": {"tables": ["mindsdb.big"]}})
    llm.script(tool_call("sql_query", {"query": "SELECT v FROM mindsdb.big ORDER BY v"}), text("many"))
    assert answer_of(ask(agent_server, "big", "list them")) == "many"
    content = tool_messages(llm.requests[1])[0]["content"]
    assert "r001" in content and "r100" in content, content[:500]
    assert "r101" not in content and "r150" not in content, content[-500:]


def test_the_loop_stops_after_max_steps(agent_server, llm):
    """A model that never stops calling tools gets at most `[agents] max_steps` calls, and the
    client still gets an answer (no loop, no hang)."""
    created(agent_server, {"name": "loop", "data": {"tables": ["mindsdb.sales"]}})
    scripted = 2 * MAX_STEPS
    llm.script(*[tool_call("sql_query", {"query": "SELECT count(*) AS n FROM mindsdb.sales"})
                 for _ in range(scripted)], text("too late"))
    response = ask(agent_server, "loop", "loop forever", timeout=60)
    assert 1 <= len(llm.requests) <= MAX_STEPS, len(llm.requests)
    assert llm.pending >= scripted + 1 - MAX_STEPS
    if response.status_code == 200:
        assert response.json()["message"]["content"] != "too late"
    else:
        problem(response, response.status_code)


# Provider failures: 502 problem+json, in bounded time.

def test_provider_down_is_a_quick_502(agent_server):
    """Nothing listening at the model's URL: a 502 at once, saying where it could not connect."""
    port = closed_port()
    created(agent_server, {"name": "down", "model": {
        "provider": "openai", "model_name": "m", "api_key": "k",
        "base_url": f"http://127.0.0.1:{port}/v1"}})
    started = time.monotonic()
    response = ask(agent_server, "down", "hi", timeout=TIMEOUT_SECS + 15)
    elapsed = time.monotonic() - started
    body = problem(response, 502)
    assert elapsed < 5, elapsed
    detail = body["detail"].lower()
    assert str(port) in detail or any(w in detail for w in ("connect", "reach", "refused")), body


def test_provider_too_slow_is_a_502_within_the_timeout(agent_server, llm):
    """A provider that never answers costs `[llm] timeout_secs`, not a hung request."""
    created(agent_server, {"name": "slow"})
    llm.fallback(hang(TIMEOUT_SECS + 10))
    started = time.monotonic()
    response = ask(agent_server, "slow", "hi", timeout=TIMEOUT_SECS + 20)
    elapsed = time.monotonic() - started
    body = problem(response, 502)
    assert elapsed < TIMEOUT_SECS + 5, elapsed
    detail = body["detail"].lower()
    assert any(w in detail for w in ("time", "within", f"{TIMEOUT_SECS} s")), body
    assert len(llm.requests) >= 1


@pytest.mark.parametrize("status, message", [
    (500, "The server had an error while processing your request. Sorry about that!"),
    (401, "Incorrect API key provided: sk-t***st."),
    (429, "Rate limit reached for fake-model in organization org-fake on requests per min."),
])
def test_provider_http_error_is_a_502_carrying_its_message(agent_server, llm, status, message):
    """An HTTP error from the provider is a 502 whose detail carries OpenAI's `error.message`
    (every retry, if any, fails the same way)."""
    created(agent_server, {"name": "a1"})
    llm.fallback(error(status, message))
    started = time.monotonic()
    body = problem(ask(agent_server, "a1", "hi", timeout=TIMEOUT_SECS + 20), 502)
    assert time.monotonic() - started < TIMEOUT_SECS + 5
    assert message in body["detail"], body


# The stream.

def test_stream_reports_sql_its_result_and_the_answer_then_end(agent_server, llm):
    """`/completions/stream`: the SQL the model ran, its result as a markdown table, the answer
    in one or more text pieces, and `{"type": "end"}` last."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    query = "SELECT region, sum(amount) AS total FROM mindsdb.sales GROUP BY region ORDER BY region"
    answer = "North sold 40 and south sold 20."
    llm.script(tool_call("sql_query", {"query": query}), text(answer))
    events = sse_events(ask_stream(agent_server, "analyst", "Sales by region?"))
    assert events[-1] == {"type": "end"}, events
    assert not [e for e in events if "error" in e], events
    sqls = [i for i, e in enumerate(events) if e.get("type") == "sql"]
    assert [events[i]["content"] for i in sqls] == [query], events
    tables = [i for i, e in enumerate(events) if e.get("type") == "data" and "content" in e]
    assert len(tables) == 1, events
    table = events[tables[0]]["content"]
    assert table.lstrip().startswith("|"), table
    for cell in ("region", "total", "north", "40", "south", "20"):
        assert cell in table, table
    pieces = [(i, e["text"]) for i, e in enumerate(events) if e.get("type") == "data" and "text" in e]
    assert "".join(p for _, p in pieces) == answer, events
    first_text = next(i for i, p in pieces if p)
    assert sqls[0] < tables[0] < first_text < len(events) - 1, events
    assert len(llm.requests) == 2


def test_a_stream_that_fails_still_ends_with_end(agent_server, llm):
    """The provider fails after a tool call: the stream says so in an `{"error"}` event carrying
    the provider's message, then ends with `{"type": "end"}`, at HTTP 200."""
    created(agent_server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(tool_call("sql_query", {"query": SALES_TOTAL_SQL}))
    llm.fallback(error(500, "The model exploded halfway"))
    events = sse_events(ask_stream(agent_server, "analyst", "total?"))
    assert events[-1] == {"type": "end"}, events
    assert [e["content"] for e in events if e.get("type") == "sql"] == [SALES_TOTAL_SQL], events
    errors = [i for i, e in enumerate(events) if "error" in e]
    assert errors and "The model exploded halfway" in events[errors[0]]["error"], events
    assert errors[-1] < len(events) - 1


def test_a_stream_to_a_provider_that_is_down_ends_with_end(agent_server):
    """Nothing listening: an error event, then end, promptly."""
    port = closed_port()
    created(agent_server, {"name": "down", "model": {"provider": "openai", "model_name": "m",
                                                     "base_url": f"http://127.0.0.1:{port}/v1"}})
    started = time.monotonic()
    events = sse_events(ask_stream(agent_server, "down", "hi"))
    assert time.monotonic() - started < 5
    assert events[-1] == {"type": "end"}, events
    assert any("error" in e and e["error"] for e in events), events


def test_stream_errors_before_streaming_are_plain_4xx(agent_server, llm):
    """An unknown agent or a body without `messages` is refused before any event is sent."""
    created(agent_server, {"name": "a1"})
    problem(ask_stream(agent_server, "nosuch", "hi"), 404, "Agent not found")
    missing = requests.post(agents_url(agent_server, "a1", "completions", "stream"), json={},
                            timeout=10)
    problem(missing, 400)
    assert llm.requests == []


# SQL.

SALES_DATA = '{"tables": ["mindsdb.sales"]}'


def model_literal(llm, model_name: str = "m", api_key: str = "k") -> str:
    return (f'{{"provider": "openai", "model_name": "{model_name}", '
            f'"base_url": "{llm.base_url}", "api_key": "{api_key}"}}')


def test_sql_create_agent_with_model_and_data_objects(agent_server, llm):
    """`CREATE AGENT p.a USING model = {...}, data = {...}, prompt_template = '...'` makes the
    same agent REST shows; a second CREATE of the name is an error."""
    agent_server.sql_ok(f"CREATE AGENT mindsdb.a1 USING model = {model_literal(llm)}, "
                        f"data = {SALES_DATA}, prompt_template = 'You answer about sales'")
    body = get(agent_server, "a1").json()
    assert body["model"] == {"provider": "openai", "model_name": "m", "base_url": llm.base_url,
                             "api_key": "k"}
    assert body["data"] == {"tables": ["mindsdb.sales"]}
    assert body["prompt_template"] == "You answer about sales"
    again = agent_server.sql(f"CREATE AGENT mindsdb.a1 USING model = {model_literal(llm)}").json()
    assert again["type"] == "error" and again["error_message"], again


def test_sql_create_agent_flat_form(agent_server):
    """`CREATE AGENT a USING provider = '...', model_name = '...', prompt_template = '...'`."""
    agent_server.sql_ok("CREATE AGENT a2 USING provider = 'openai', model_name = 'flat-model', "
                        "prompt_template = 'Be flat'")
    body = get(agent_server, "a2").json()
    assert body["model"]["model_name"] == "flat-model" and body["model"]["provider"] == "openai"
    assert body["prompt_template"] == "Be flat"


def test_sql_show_agents_and_information_schema(agent_server, llm):
    """SHOW AGENTS [FROM p] and information_schema.agents list NAME, PROJECT, MODEL, PARAMS,
    per project."""
    agent_server.sql_ok(f"CREATE AGENT mindsdb.a1 USING model = {model_literal(llm, 'model-one')}")
    agent_server.sql_ok("CREATE AGENT a2 USING provider = 'openai', model_name = 'model-two'")
    agent_server.sql_ok("CREATE DATABASE proj2 ENGINE = 'mindsdb'")
    agent_server.sql_ok("CREATE AGENT proj2.other USING provider = 'openai', "
                        "model_name = 'model-three'")
    columns = ["NAME", "PROJECT", "MODEL", "PARAMS"]
    for query in ("SHOW AGENTS", "SHOW AGENTS FROM mindsdb"):
        shown = agent_server.sql_ok(query)
        assert shown["column_names"] == columns, shown
        rows = {r[0]: r for r in shown["data"]}
        assert set(rows) == {"a1", "a2"}, (query, shown)
        assert rows["a1"][1] == "mindsdb" and "model-one" in str(rows["a1"][2]), rows
        assert "model-two" in str(rows["a2"][2]), rows
    other = agent_server.sql_ok("SHOW AGENTS FROM proj2")
    assert [r[:2] for r in other["data"]] == [["other", "proj2"]], other
    info = agent_server.sql_ok("SELECT * FROM information_schema.agents")
    assert info["column_names"] == columns, info
    assert sorted((r[0], r[1]) for r in info["data"]) == [
        ("a1", "mindsdb"), ("a2", "mindsdb"), ("other", "proj2")], info
    assert [a["name"] for a in requests.get(agents_url(agent_server, project="proj2"),
                                            timeout=10).json()] == ["other"]


def test_sql_alter_agent_merges_like_put(agent_server, llm):
    """ALTER AGENT changes the given key and keeps the rest."""
    agent_server.sql_ok(f"CREATE AGENT mindsdb.a1 USING model = {model_literal(llm)}, "
                        f"data = {SALES_DATA}, prompt_template = 'old'")
    before = get(agent_server, "a1").json()
    agent_server.sql_ok("ALTER AGENT a1 USING prompt_template = 'You answer tersely'")
    after = get(agent_server, "a1").json()
    assert after["prompt_template"] == "You answer tersely"
    assert after["data"] == before["data"] and after["model"] == before["model"]
    assert after["created_at"] == before["created_at"]


def test_sql_select_answer_where_question(agent_server, llm):
    """`SELECT answer FROM p.a WHERE question = '...'` runs the agent: one row, column
    `answer`, worked out with SQL through the agent's model."""
    model = model_literal(llm, "sql-model", "sk-sql")
    agent_server.sql_ok(f"CREATE AGENT mindsdb.a1 USING model = {model}, data = {SALES_DATA}, "
                        "prompt_template = 'You count rows'")
    llm.script(tool_call("sql_query", {"query": "SELECT count(*) AS n FROM mindsdb.sales"}),
               text("There are 3 rows."))
    result = agent_server.sql_ok("SELECT answer FROM mindsdb.a1 WHERE question = 'How many rows?'")
    assert result["type"] == "table" and result["column_names"] == ["answer"], result
    assert result["data"] == [["There are 3 rows."]]
    assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "How many rows?"}
    assert llm.requests[0]["model"] == "sql-model"
    assert llm.headers[0]["authorization"] == "Bearer sk-sql"
    assert "3" in tool_messages(llm.requests[1])[0]["content"]


def test_sql_select_answer_with_the_provider_down_is_an_error(agent_server):
    """The SQL route reports a provider failure as MindsDB reports SQL errors: HTTP 200,
    `{"type": "error"}` with a message saying what failed."""
    port = closed_port()
    model = json.dumps({"provider": "openai", "model_name": "m",
                        "base_url": f"http://127.0.0.1:{port}/v1"})
    agent_server.sql_ok(f"CREATE AGENT down USING model = {model}")
    started = time.monotonic()
    response = agent_server.sql("SELECT answer FROM mindsdb.down WHERE question = 'hi'")
    assert time.monotonic() - started < 5
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["type"] == "error", doc
    message = doc["error_message"].lower()
    assert str(port) in message or any(w in message for w in ("connect", "reach", "refused")), doc


def test_sql_drop_agent_and_if_exists(agent_server):
    """DROP AGENT removes it (REST 404 after); again is an error, unless IF EXISTS."""
    agent_server.sql_ok("CREATE AGENT a1 USING provider = 'openai', model_name = 'm'")
    agent_server.sql_ok("DROP AGENT a1")
    problem(get(agent_server, "a1"), 404, "Agent not found")
    assert agent_server.sql_ok("SHOW AGENTS")["data"] == []
    agent_server.sql_ok("DROP AGENT IF EXISTS a1")
    again = agent_server.sql("DROP AGENT a1").json()
    assert again["type"] == "error" and again["error_message"], again


# MindsDB's own SDK.

def test_mindsdb_sdk_creates_lists_gets_updates_and_drops_agents(agent_server, llm):
    """`con.agents` of mindsdb_sdk 3.5.0 unmodified: it sends every key (nulls included) and
    parses name, created_at, updated_at, model, data, prompt_template, params."""
    con = mindsdb_sdk.connect(agent_server.url)
    model = {"provider": "openai", "model_name": "sdk-model", "api_key": "sk-sdk",
             "base_url": llm.base_url}
    agent = con.agents.create("sdk_agent", model=model, data={"tables": ["mindsdb.sales"]},
                              prompt_template="You answer about sales.")
    assert agent.name == "sdk_agent" and agent.model == model
    assert agent.data == {"tables": ["mindsdb.sales"]}
    assert agent.prompt_template == "You answer about sales."
    assert TIMESTAMP.match(agent.created_at) and TIMESTAMP.match(agent.updated_at)
    assert [a.name for a in con.agents.list()] == ["sdk_agent"]
    fetched = con.agents.get("sdk_agent")
    assert fetched == agent
    fetched.prompt_template = "Be brief."
    fetched.data["tables"].append("mindsdb.secrets")
    updated = con.agents.update("sdk_agent", fetched)
    assert updated.prompt_template == "Be brief."
    assert updated.data == {"tables": ["mindsdb.sales", "mindsdb.secrets"]}
    assert updated.model == model and updated.created_at == agent.created_at
    updated.name = "renamed"
    renamed = con.agents.update("sdk_agent", updated)
    assert renamed.name == "renamed"
    assert [a.name for a in con.agents.list()] == ["renamed"]
    con.agents.drop("renamed")
    assert con.agents.list() == []
    with pytest.raises(requests.HTTPError) as missing:
        con.agents.get("renamed")
    assert missing.value.response.status_code == 404


def test_mindsdb_sdk_completion_and_stream(agent_server, llm):
    """`agent.completion(...)` returns `.content`; `completion_stream` yields the decoded
    events, the last one `{"type": "end"}`."""
    con = mindsdb_sdk.connect(agent_server.url)
    agent = con.agents.create("sdk_agent", model={"provider": "openai", "model_name": "sdk-model",
                                                  "base_url": llm.base_url, "api_key": "sk-sdk"},
                              data={"tables": ["mindsdb.sales"]})
    llm.script(tool_call("sql_query", {"query": "SELECT max(amount) AS m FROM mindsdb.sales"}),
               text("The largest sale is 30."))
    completion = agent.completion([{"question": "Largest sale?", "answer": None}])
    assert completion.content == "The largest sale is 30."
    assert llm.requests[0]["model"] == "sdk-model"
    assert llm.headers[0]["authorization"] == "Bearer sk-sdk"
    assert "30" in tool_messages(llm.requests[1])[0]["content"]
    llm.script(text("Streaming works."))
    chunks = list(agent.completion_stream([{"role": "user", "content": "stream?"}]))
    assert chunks[-1] == {"type": "end"}, chunks
    assert "".join(c.get("text", "") for c in chunks if c.get("type") == "data") == "Streaming works."
    assert con.agents.completion("sdk_agent", [{"role": "user", "content": "again?"}]).content == \
        "no scripted reply"
