"""Agents from Python: the typed helpers over the engine, against a small OpenAI-compatible
fake on 127.0.0.1 that answers with one tool call and then text."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import mindlite


class _Fake(BaseHTTPRequestHandler):
    replies: list = []
    seen: list = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        reply = type(self).replies.pop(0) if type(self).replies else {"content": "unscripted"}
        payload = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **reply}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def llm():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    _Fake.replies, _Fake.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_agents_are_created_asked_updated_and_dropped(llm):
    con = mindlite.connect(config={"llm": {"base_url": llm, "model_name": "fake", "timeout_secs": 5}})
    con.execute("CREATE TABLE sales (region VARCHAR, amount INT)")
    con.execute("INSERT INTO sales VALUES ('north', 10), ('south', 32)")
    agent = con.create_agent(
        "analyst", data={"tables": ["mindsdb.sales"]}, prompt_template="You answer about sales."
    )
    assert agent["name"] == "analyst"
    assert agent["model"] == {"provider": "openai", "model_name": "fake"}
    call = {"id": "c1", "type": "function",
            "function": {"name": "sql_query", "arguments": json.dumps({"query": "SELECT max(amount) AS m FROM sales"})}}
    _Fake.replies = [{"content": None, "tool_calls": [call]}, {"content": "The largest sale is 32."}]
    answer = con.ask_agent("analyst", "Largest sale?")
    assert answer["content"] == "The largest sale is 32."
    assert answer["role"] == "assistant" and len(answer["trace_id"]) == 32
    tool_message = _Fake.seen[1]["messages"][-1]
    assert json.loads(tool_message["content"])["rows"] == [[32]]
    assert [a["name"] for a in con.agents()] == ["analyst"]
    updated = con.update_agent("analyst", {"prompt_template": None, "params": {"timeout": 20}})
    assert "prompt_template" not in updated and updated["params"] == {"timeout": 20}
    assert con.agent("ANALYST")["params"] == {"timeout": 20}
    con.drop_agent("analyst")
    with pytest.raises(mindlite.ProgrammingError, match="Agent with name analyst does not exist"):
        con.agent("analyst")
    con.close()


def test_bad_agents_and_unreachable_providers_raise_clear_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    con = mindlite.connect(config={"llm": {"base_url": f"http://127.0.0.1:{port}/v1", "timeout_secs": 3}})
    with pytest.raises(mindlite.ProgrammingError, match="Parameter 'colour' is not allowed"):
        con.create_agent("a", params={"colour": "red"})
    with pytest.raises(mindlite.ProgrammingError, match="'nope'"):
        con.create_agent("a", data={"tables": ["mindsdb.nope"]})
    con.create_agent("a")
    with pytest.raises(mindlite.ProgrammingError, match="already exists"):
        con.create_agent("a")
    with pytest.raises(mindlite.OperationalError, match="cannot be reached"):
        con.ask_agent("a", "hello?")
    con.close()
