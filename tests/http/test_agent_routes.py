"""Agents over HTTP: MindsDB's REST routes with their codes and bodies (wire reference §3 and the
agent_* captures), answers through a fake OpenAI-compatible provider on 127.0.0.1 (tool calls
into the read-only SQL sandbox, streaming, provider failures), the SQL statements, and the real
`mindsdb_sdk` agents API unmodified."""

from __future__ import annotations

import json
import re
import socket
import time

import mindsdb_sdk
import pytest
import requests

from llmfake import FakeLLM, fail, hang, sql, text

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")
PROVIDER_TIMEOUT = 3


@pytest.fixture
def llm():
    fake = FakeLLM()
    yield fake
    fake.close()


@pytest.fixture
def server(start_server, llm):
    """A server whose default model is the fake provider, with a sales and a secrets table."""
    srv = start_server(f"""
[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"
timeout_secs = {PROVIDER_TIMEOUT}
""")
    srv.sql_ok("CREATE TABLE sales (region VARCHAR, amount INT)")
    srv.sql_ok("INSERT INTO sales VALUES ('north', 10), ('south', 20), ('north', 30)")
    srv.sql_ok("CREATE TABLE secrets (k VARCHAR)")
    srv.sql_ok("INSERT INTO secrets VALUES ('TOPSECRET-42')")
    return srv


def agents_url(server, *rest: str, project: str = "mindsdb") -> str:
    return "/".join([server.url, "api/projects", project, "agents", *rest])


def create(server, agent: dict, project: str = "mindsdb") -> requests.Response:
    return requests.post(agents_url(server, project=project), json={"agent": agent}, timeout=30)


def ask(server, name: str, question: str) -> requests.Response:
    body = {"messages": [{"role": "user", "content": question}]}
    return requests.post(agents_url(server, name, "completions"), json=body, timeout=60)


def problem(response: requests.Response, status: int, title: str, detail: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert list(body) == ["title", "detail", "timestamp"], body
    assert body["title"] == title, body
    assert TIMESTAMP.match(body["timestamp"]), body
    if detail is not None:
        assert body["detail"] == detail, body
    return body


def test_create_answers_201_with_mindsdbs_agent_shape(server):
    spec = {"name": "a1", "model": {"provider": "openai", "model_name": "gpt-4o", "api_key": "sk-x",
                                    "base_url": "http://127.0.0.1:18080/v1"},
            "data": {"tables": ["files.*"]}, "prompt_template": "hi"}
    response = create(server, spec)
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["id", "name", "project_id", "updated_at", "created_at", "data", "model",
                          "prompt_template"]
    assert (body["id"], body["name"], body["project_id"]) == (1, "a1", 1)
    assert TIMESTAMP.match(body["created_at"]) and TIMESTAMP.match(body["updated_at"])
    assert body["data"] == {"tables": ["files.*"]}
    assert body["model"] == spec["model"]  # the API key is echoed as given, as MindsDB does
    assert body["prompt_template"] == "hi"
    listed = requests.get(agents_url(server), timeout=10)
    assert listed.status_code == 200 and listed.json() == [body]
    got = requests.get(agents_url(server, "A1"), timeout=10)
    assert got.status_code == 200 and got.json() == body
    assert "sk-x" not in server.log_text()


def test_create_errors_have_mindsdbs_codes_and_bodies(server):
    assert create(server, {"name": "a1"}).status_code == 201
    problem(create(server, {"name": "a1"}), 409, "Agent already exists",
            "Agent with name a1 already exists. Please choose a different one.")
    no_agent = requests.post(agents_url(server), json={"name": "a2"}, timeout=10)
    problem(no_agent, 400, "Missing parameter", 'Must provide "agent" parameter in POST body')
    problem(create(server, {"prompt_template": "x"}), 400, "Missing field", 'Missing "name" field for agent')
    problem(create(server, {"name": "a3"}, project="nosuchproj"), 404, "Project not found",
            "Project with name nosuchproj does not exist")
    problem(requests.get(agents_url(server, project="nosuchproj"), timeout=10), 404, "Project not found")
    bad = problem(create(server, {"name": "a4", "foo": 1}), 400, "Bad Request")
    assert "Parameter 'foo' is not allowed" in bad["detail"]
    bad = problem(create(server, {"name": "a4", "params": {"colour": "red"}}), 400, "Bad Request")
    assert "Parameter 'colour' is not allowed" in bad["detail"]
    bad = problem(create(server, {"name": "a4", "data": {"tables": ["mindsdb.nope"]}}), 400, "Bad Request")
    assert "'nope'" in bad["detail"]
    assert [a["name"] for a in requests.get(agents_url(server), timeout=10).json()] == ["a1"]


def test_default_model_and_legacy_fields(server, llm):
    default = create(server, {"name": "d"}).json()
    assert default["model"] == {"model_name": "fake-model", "provider": "openai"}
    legacy = create(server, {"name": "l", "model_name": "m1", "provider": "openai", "model": None,
                             "data": None, "prompt_template": None, "params": {}}).json()
    assert legacy["model"] == {"model_name": "m1", "provider": "openai"}
    assert "data" not in legacy and "prompt_template" not in legacy and "params" not in legacy
    llm.script(text("hello"))
    assert ask(server, "d", "hi").json()["message"]["content"] == "hello"
    assert llm.requests[0]["model"] == "fake-model"
    assert llm.headers[0]["authorization"] == "Bearer sk-test"


def test_put_merges_renames_and_never_creates(server):
    created = create(server, {"name": "a1", "prompt_template": "one",
                              "data": {"tables": ["mindsdb.sales"]}}).json()
    put = lambda name, agent: requests.put(agents_url(server, name), json={"agent": agent}, timeout=10)  # noqa: E731
    changed = put("a1", {"prompt_template": "hello again"})
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["prompt_template"] == "hello again" and body["data"] == {"tables": ["mindsdb.sales"]}
    assert body["created_at"] == created["created_at"] and body["updated_at"] >= created["updated_at"]
    dropped = put("a1", {"prompt_template": None, "params": {"timeout": 30}}).json()
    assert "prompt_template" not in dropped and dropped["params"] == {"timeout": 30}
    problem(put("nosuch", {"prompt_template": "x"}), 400, "Creation is not allowed",
            "Creation of an agent using the PUT method is not allowed.")
    no_agent = requests.put(agents_url(server, "a1"), json={"prompt_template": "x"}, timeout=10)
    problem(no_agent, 400, "Missing parameter")
    assert create(server, {"name": "b"}).status_code == 201
    problem(put("a1", {"name": "b"}), 409, "Agent already exists")
    renamed = put("a1", {"name": "c"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "c"
    assert renamed.json()["id"] == created["id"]
    problem(requests.get(agents_url(server, "a1"), timeout=10), 404, "Agent not found",
            "Agent with name a1 does not exist")


def test_delete_answers_204_with_no_body(server):
    assert create(server, {"name": "a1"}).status_code == 201
    deleted = requests.delete(agents_url(server, "a1"), timeout=10)
    assert deleted.status_code == 204 and deleted.content == b""
    assert "content-type" not in deleted.headers
    problem(requests.get(agents_url(server, "a1"), timeout=10), 404, "Agent not found")
    problem(requests.delete(agents_url(server, "a1"), timeout=10), 404, "Agent not found")
    wrong = requests.patch(agents_url(server, "a1"), json={}, timeout=10)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, PUT, DELETE"


def test_an_answer_that_needed_sql(server, llm):
    create(server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]},
                    "prompt_template": "You answer questions about sales."})
    llm.script(sql("SELECT sum(amount) AS total FROM mindsdb.sales"), text("The total is 60."))
    response = ask(server, "analyst", "What is the total?")
    assert response.status_code == 200, response.text
    message = response.json()["message"]
    assert message["content"] == "The total is 60." and message["role"] == "assistant"
    assert re.fullmatch(r"[0-9a-f]{32}", message["trace_id"])
    system = llm.requests[0]["messages"][0]["content"]
    assert system.startswith("You answer questions about sales.")
    assert "mindsdb.sales (region VARCHAR, amount INTEGER)" in system
    tool = llm.requests[1]["messages"][-1]
    assert tool["role"] == "tool"
    assert json.loads(tool["content"])["rows"] == [[60]]
    legacy = requests.post(agents_url(server, "analyst", "completions"),
                           json={"messages": [{"question": "again?", "answer": None}]}, timeout=30)
    assert legacy.json()["message"]["content"] == "unscripted"
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "again?"}


def test_tables_outside_the_agents_data_and_writes_are_refused(server, llm):
    create(server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    attempts = ["SELECT * FROM mindsdb.secrets", "SELECT * FROM information_schema.tables",
                "INSERT INTO mindsdb.sales VALUES ('east', 1)", "UPDATE mindsdb.sales SET amount = 0",
                "DELETE FROM mindsdb.sales", "DROP TABLE mindsdb.sales"]
    llm.script(*[sql(q) for q in attempts], text("Nothing doing."))
    assert ask(server, "analyst", "try everything").json()["message"]["content"] == "Nothing doing."
    for attempt, request in zip(attempts, llm.requests[1:]):
        content = request["messages"][-1]["content"]
        assert "refused" in content, (attempt, content)
    assert "TOPSECRET-42" not in json.dumps(llm.requests)
    rows = server.sql_ok("SELECT count(*) AS n, sum(amount) AS s FROM sales")["data"]
    assert rows == [[3, 60]]


def test_provider_down_slow_or_failing_is_a_502_within_the_timeout(server, llm):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    create(server, {"name": "down", "model": {"base_url": f"http://127.0.0.1:{closed_port}/v1"}})
    create(server, {"name": "slow"})
    body = problem(ask(server, "down", "hi"), 502, "Model provider error")
    assert "cannot be reached" in body["detail"] and str(closed_port) in body["detail"]
    llm.script(hang(PROVIDER_TIMEOUT + 5))
    started = time.monotonic()
    body = problem(ask(server, "slow", "hi"), 502, "Model provider error")
    assert time.monotonic() - started < PROVIDER_TIMEOUT + 3
    assert f"did not answer within {PROVIDER_TIMEOUT} s" in body["detail"]
    llm.script(fail(500, "The engine is overloaded"))
    body = problem(ask(server, "slow", "hi"), 502, "Model provider error")
    assert "The engine is overloaded" in body["detail"]
    problem(ask(server, "nosuch", "hi"), 404, "Agent not found")
    missing = requests.post(agents_url(server, "slow", "completions"), json={}, timeout=10)
    problem(missing, 400, "Missing parameter", 'Must provide "messages" parameter in POST body')


def sse_events(response: requests.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream"
    frames = response.content.decode().split("\n\n")
    assert frames[-1] == ""
    assert all(f.startswith("data: ") for f in frames[:-1]), frames
    return [json.loads(f[len("data: "):]) for f in frames[:-1]]


def test_the_stream_reports_steps_and_always_ends(server, llm):
    create(server, {"name": "analyst", "data": {"tables": ["mindsdb.sales"]}})
    llm.script(sql("SELECT region, sum(amount) AS total FROM sales GROUP BY region ORDER BY region"),
               text("North sold 40 and south 20."))
    url = agents_url(server, "analyst", "completions", "stream")
    body = {"messages": [{"role": "user", "content": "By region?"}]}
    response = requests.post(url, json=body, timeout=30)
    assert response.content.endswith(b'data: {"type": "end"}\n\n')
    events = sse_events(response)
    assert events[0] == {"type": "sql", "content": "SELECT region, sum(amount) AS total FROM sales GROUP BY region ORDER BY region"}
    assert events[1] == {"type": "data", "content": "| region | total |\n| --- | --- |\n| north | 40 |\n| south | 20 |\n"}
    assert "".join(e["text"] for e in events[2:-1]) == "North sold 40 and south 20."
    assert len(events) > 4 and events[-1] == {"type": "end"}
    assert llm.requests[0]["stream"] is True
    llm.script(fail(401, "Incorrect API key provided"))
    events = sse_events(requests.post(url, json=body, timeout=30))
    assert "Incorrect API key provided" in events[0]["error"]
    assert events[-1] == {"type": "end"}
    problem(requests.post(agents_url(server, "nosuch", "completions", "stream"), json=body, timeout=10),
            404, "Agent not found")


def test_agents_in_sql(server, llm):
    server.sql_ok(
        "CREATE AGENT mindsdb.bot USING model = {\"provider\": \"openai\", \"model_name\": \"m\", "
        f"\"base_url\": \"{llm.base_url}\", \"api_key\": \"sk-bot\"}}, "
        "data = {\"tables\": [\"mindsdb.sales\"]}, prompt_template = 'You count.'")
    server.sql_ok("CREATE AGENT flat USING provider = 'openai', model_name = 'm2'")
    shown = server.sql_ok("SHOW AGENTS")
    assert shown["column_names"] == ["NAME", "PROJECT", "MODEL", "PARAMS"]
    assert [r[:3] for r in shown["data"]] == [["bot", "mindsdb", "m"], ["flat", "mindsdb", "m2"]]
    assert "sk-bot" not in json.dumps(shown)
    info = server.sql_ok("SELECT NAME, MODEL FROM information_schema.agents ORDER BY name")
    assert info["data"] == [["bot", "m"], ["flat", "m2"]]
    llm.script(sql("SELECT count(*) AS n FROM sales"), text("There are 3 sales."))
    answer = server.sql_ok("SELECT answer FROM mindsdb.bot WHERE question = 'How many sales?'")
    assert answer["column_names"] == ["answer"] and answer["data"] == [["There are 3 sales."]]
    server.sql_ok("ALTER AGENT bot USING prompt_template = 'Count well.'")
    assert requests.get(agents_url(server, "bot"), timeout=10).json()["prompt_template"] == "Count well."
    llm.script(fail(503, "try later"))
    failed = server.sql("SELECT answer FROM flat WHERE question = 'x'").json()
    assert failed["type"] == "error" and "try later" in failed["error_message"]
    server.sql_ok("DROP AGENT bot")
    server.sql_ok("DROP AGENT IF EXISTS bot")
    assert server.sql("DROP AGENT bot").json()["type"] == "error"


def test_mindsdb_sdk_agents_api_unmodified(server, llm):
    con = mindsdb_sdk.connect(server.url)
    agent = con.agents.create(
        "sdk_agent", model={"provider": "openai", "model_name": "m", "base_url": llm.base_url},
        data={"tables": ["mindsdb.sales"]}, prompt_template="You answer about sales.")
    assert agent.name == "sdk_agent" and agent.prompt_template == "You answer about sales."
    assert [a.name for a in con.agents.list()] == ["sdk_agent"]
    fetched = con.agents.get("sdk_agent")
    assert fetched.data == {"tables": ["mindsdb.sales"]}
    fetched.prompt_template = "Be brief."
    updated = con.agents.update("sdk_agent", fetched)
    assert updated.prompt_template == "Be brief." and updated.data == {"tables": ["mindsdb.sales"]}
    assert updated.model["model_name"] == "m"
    llm.script(sql("SELECT max(amount) AS m FROM sales"), text("The largest sale is 30."))
    completion = fetched.completion([{"question": "Largest sale?", "answer": None}])
    assert completion.content == "The largest sale is 30."
    llm.script(text("Streaming works."))
    chunks = list(con.agents.completion_stream("sdk_agent", [{"role": "user", "content": "stream?"}]))
    assert "".join(c.get("text", "") for c in chunks) == "Streaming works."
    assert chunks[-1] == {"type": "end"}
    con.agents.drop("sdk_agent")
    assert con.agents.list() == []
    with pytest.raises(requests.HTTPError):
        con.agents.get("sdk_agent")
