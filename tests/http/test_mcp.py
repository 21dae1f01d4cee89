"""The MCP endpoint on the HTTP port (MindsDB's `/mcp/`), reached by the official `mcp` Python SDK
unchanged, over streamable HTTP (`/mcp/`) and over SSE (`/mcp/sse`): initialize, tools, resources,
the `sample_table` prompt and completions; sessions, protocol versions and JSON-RPC errors as
the specification has them (checked on the raw wire, and every result against the SDK's own
schema of each version); results cut at `mcp.max_result_kb` with a note; credentials, tenants
and the local edition's origin rules as on every other route."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import requests

from fake_llm import FakeLLM, text
from hosted import hosted_server
from mlserver import AUTH_CONFIG

SESSION = re.compile(r"^[0-9a-f]{64}$")
HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


def run(coroutine):
    return asyncio.run(coroutine)


def client_for(url: str, headers: dict | None = None, sse: bool = False):
    """The SDK's client over streamable HTTP (or SSE), with these headers on every request."""
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if sse:
        return Client(sse_client(url + "/mcp/sse", headers=headers))
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(url + "/mcp/", http_client=http))


def rpc(server, method: str, params: dict | None = None, *, session: str | None = None,
        id=1, headers: dict | None = None, path: str = "/mcp/") -> requests.Response:
    """One JSON-RPC request (a notification when `id` is None) POSTed on the raw wire."""
    message = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    sent = {"Accept": "application/json, text/event-stream", **(headers or {})}
    if session is not None:
        sent["Mcp-Session-Id"] = session
    return requests.post(server.url + path, json=message, headers=sent, timeout=30)


def initialize(server, version: str = "2025-11-25", headers: dict | None = None) -> tuple[str, dict]:
    answer = rpc(server, "initialize", {"protocolVersion": version, "capabilities": {},
                                        "clientInfo": {"name": "test", "version": "1"}},
                 headers=headers)
    assert answer.status_code == 200, answer.text
    session = answer.headers["mcp-session-id"]
    assert SESSION.match(session), session
    return session, answer.json()["result"]


def fill_fruit(server) -> None:
    server.sql_ok("CREATE TABLE mindsdb.fruit (id INT, name VARCHAR, price DOUBLE)")
    server.sql_ok("INSERT INTO mindsdb.fruit VALUES (1, 'apple', 1.5), (2, 'pear''s', NULL), (3, 'fig', 3)")


FRUIT = {"type": "table", "column_names": ["id", "name", "price"],
         "data": [[1, "apple", 1.5], [2, "pear's", None], [3, "fig", 3.0]]}


def test_the_sdk_over_streamable_http_queries_reads_and_prompts(server):
    from mcp.shared.exceptions import MCPError
    from mcp.types import PromptReference, ResourceTemplateReference

    fill_fruit(server)

    async def session():
        async with client_for(server.url) as client:
            assert client.protocol_version == "2025-11-25"
            assert client.server_info.name == "mindlite"
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"query", "search_knowledge_base", "ask_agent"}
            assert tools["query"].input_schema["required"] == ["query"]

            got = await client.call_tool("query", {"query": "SELECT * FROM fruit ORDER BY id",
                                                   "context": {"db": "mindsdb"}})
            assert not got.is_error
            assert got.structured_content == FRUIT
            assert json.loads(got.content[0].text) == FRUIT
            written = await client.call_tool("query", {"query": "INSERT INTO mindsdb.fruit VALUES (4, 'kiwi', 2)"})
            assert written.structured_content == {"type": "ok", "affected_rows": 1}
            failed = await client.call_tool("query", {"query": "SELECT * FROM mindsdb.nosuch"})
            assert failed.is_error
            assert "nosuch" in json.loads(failed.content[0].text)["error_message"]
            # Two statements: the HTTP API's rule, one per request.
            two = await client.call_tool("query", {"query": "SELECT 1; SELECT 2"})
            assert two.is_error
            wrong = await client.call_tool("query", {"query": 42})
            assert wrong.is_error and "'query' must be a string" in wrong.content[0].text
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("drop_everything", {})
            assert unknown.value.error.code == -32602

            listed = {str(r.uri) for r in (await client.list_resources()).resources}
            assert listed == {"schema://databases", "schema://knowledge_bases"}
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert templates == {"schema://databases/{database_name}/tables",
                                 "schema://databases/{database_name}/tables/{table_name}/columns"}
            databases = json.loads((await client.read_resource("schema://databases")).contents[0].text)
            assert {"name": "mindsdb", "type": "project", "engine": None} in databases
            assert all(db["name"] != "information_schema" for db in databases)
            tables = json.loads((await client.read_resource("schema://databases/mindsdb/tables")).contents[0].text)
            assert {"TABLE_NAME": "fruit", "TABLE_TYPE": "BASE TABLE", "TABLE_SCHEMA": "mindsdb"} in tables
            columns = json.loads((await client.read_resource(
                "schema://databases/mindsdb/tables/fruit/columns")).contents[0].text)
            assert [c["COLUMN_NAME"] for c in columns] == ["id", "name", "price"]
            assert columns[0]["MYSQL_DATA_TYPE"] in ("INT", "INTEGER"), columns
            for missing in ("schema://databases/nosuch/tables", "schema://databases/mindsdb/tables/nosuch/columns",
                            "schema://other"):
                with pytest.raises(MCPError) as absent:
                    await client.read_resource(missing)
                assert absent.value.error.code == -32002, missing

            prompts = (await client.list_prompts()).prompts
            assert [p.name for p in prompts] == ["sample_table"]
            prompt = await client.get_prompt("sample_table", {"database_name": "mindsdb", "table_name": "fruit"})
            assert "SELECT * FROM `mindsdb`.`fruit` LIMIT 5;" in prompt.messages[0].content.text
            done = await client.complete(PromptReference(name="sample_table"),
                                         {"name": "table_name", "value": "fr"}, {"database_name": "mindsdb"})
            assert done.completion.values == ["fruit"]
            dbs = await client.complete(ResourceTemplateReference(uri="schema://databases/{database_name}/tables"),
                                        {"name": "database_name", "value": "mind"})
            assert dbs.completion.values == ["mindsdb"]

    run(session())


def test_the_sdk_over_sse_gets_its_answers_on_the_stream(server):
    fill_fruit(server)

    async def session():
        async with client_for(server.url, sse=True) as client:
            assert client.protocol_version == "2025-11-25"
            got = await client.call_tool("query", {"query": "SELECT * FROM mindsdb.fruit ORDER BY id"})
            assert got.structured_content == FRUIT
            tables = json.loads((await client.read_resource("schema://databases/mindsdb/tables")).contents[0].text)
            assert any(t["TABLE_NAME"] == "fruit" for t in tables)
            prompt = await client.get_prompt("sample_table", {"database_name": "mindsdb", "table_name": "fruit"})
            assert "`fruit`" in prompt.messages[0].content.text
            # Several requests at once, each answered on the one stream.
            answers = await asyncio.gather(*[
                client.call_tool("query", {"query": f"SELECT {i} AS n"}) for i in range(8)])
            assert [a.structured_content["data"] for a in answers] == [[[i]] for i in range(8)]

    run(session())
    # The stream closed with its client: its session is gone.
    assert server.sql_ok("SELECT 1 AS x")["data"] == [[1]]


def test_sessions_versions_and_errors_on_the_wire(server):
    """Each version the SDK knows is agreed, and every answer validates against that version's
    schema in the SDK's own types; sessions must be named, belong to their user and end on DELETE;
    malformed messages, unknown methods and versions get the codes the specification gives."""
    from mcp_types.methods import validate_server_result

    fill_fruit(server)
    for version in HANDSHAKE_VERSIONS:
        session, result = initialize(server, version)
        validate_server_result("initialize", version, result)
        assert result["protocolVersion"] == version
        accepted = rpc(server, "notifications/initialized", session=session, id=None)
        assert accepted.status_code == 202 and accepted.content == b""
        calls = [("ping", {}), ("tools/list", {}), ("resources/list", {}), ("resources/templates/list", {}),
                 ("prompts/list", {}),
                 ("tools/call", {"name": "query", "arguments": {"query": "SELECT * FROM mindsdb.fruit"}}),
                 ("tools/call", {"name": "query", "arguments": {"query": "SELECT * FROM nosuch"}}),
                 ("resources/read", {"uri": "schema://databases"}),
                 ("prompts/get", {"name": "sample_table",
                                  "arguments": {"database_name": "mindsdb", "table_name": "fruit"}})]
        if version != "2024-11-05":
            calls.append(("completion/complete", {"ref": {"type": "ref/prompt", "name": "sample_table"},
                                                  "argument": {"name": "database_name", "value": "m"}}))
        for method, params in calls:
            answer = rpc(server, method, params, session=session,
                         headers={"MCP-Protocol-Version": version})
            assert answer.status_code == 200, (version, method, answer.text)
            body = answer.json()
            assert body["jsonrpc"] == "2.0" and body["id"] == 1 and "result" in body, (version, method, body)
            validate_server_result(method, version, body["result"])
        tools = rpc(server, "tools/list", session=session).json()["result"]["tools"]
        call = rpc(server, "tools/call", {"name": "query", "arguments": {"query": "SELECT 1 AS one"}},
                   session=session).json()["result"]
        if version < "2025-06-18":
            assert all("outputSchema" not in t for t in tools)
            assert "structuredContent" not in call
        else:
            assert all("outputSchema" in t for t in tools if t["name"] != "ask_agent")
            assert call["structuredContent"] == {"type": "table", "column_names": ["one"], "data": [[1]]}
        assert rpc(server, "tools/list", session=session, id="text-id").json()["id"] == "text-id"

    session, _ = initialize(server, "2099-01-01")  # not spoken: the newest offered instead
    assert rpc(server, "ping", session=session).json()["result"] == {}

    def error(answer, status, code):
        assert answer.status_code == status, answer.text
        body = answer.json()
        assert body["jsonrpc"] == "2.0" and body["error"]["code"] == code, body
        return body["error"]

    assert "Mcp-Session-Id" in error(rpc(server, "tools/list"), 400, -32600)["message"]
    error(rpc(server, "tools/list", session="0" * 64), 404, -32600)
    unsupported = error(rpc(server, "ping", session=session, headers={"MCP-Protocol-Version": "1999-01-01"}),
                        400, -32022)
    assert unsupported["data"]["supported"] == HANDSHAKE_VERSIONS
    error(rpc(server, "no/such/method", session=session), 200, -32601)
    error(rpc(server, "resources/read", {}, session=session), 200, -32602)
    error(rpc(server, "prompts/get", {"name": "sample_table", "arguments": {}}, session=session), 200, -32602)
    headers = {"Content-Type": "application/json", "Mcp-Session-Id": session}
    for body, code in [(b"{", -32700), (b"[]", -32600),
                       (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600),
                       (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600),
                       (b'{"id":1,"method":"ping"}', -32600)]:
        error(requests.post(server.url + "/mcp/", data=body, headers=headers, timeout=10), 400, code)
    too_big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "y" * (1 << 20)}})
    error(requests.post(server.url + "/mcp/", data=too_big, headers=headers, timeout=10), 413, -32600)

    error(rpc(server, "ping", session=session, id=10**30), 400, -32600)
    # The version a session agreed is the one its requests name.
    other, _ = initialize(server, "2025-06-18")
    error(rpc(server, "ping", session=other, headers={"MCP-Protocol-Version": "2025-11-25"}), 400, -32600)
    assert rpc(server, "ping", session=other, headers={"MCP-Protocol-Version": "2025-06-18"}).status_code == 200
    # A page's <img> cannot open an event stream: the stream is for who asks for one.
    assert requests.get(server.url + "/mcp/sse", headers={"Accept": "image/*,*/*"}, timeout=10).status_code == 406
    no_stream = requests.get(server.url + "/mcp/", headers={"Mcp-Session-Id": session}, timeout=10)
    assert no_stream.status_code == 405 and "POST" in no_stream.headers["allow"]
    assert requests.get(server.url + "/mcp/status", timeout=10).json() == {"status": "ok", "service": "mindlite-mcp"}
    ended = requests.delete(server.url + "/mcp/", headers={"Mcp-Session-Id": session}, timeout=10)
    assert ended.status_code == 200
    error(rpc(server, "ping", session=session), 404, -32600)
    error(requests.delete(server.url + "/mcp/", headers={"Mcp-Session-Id": session}, timeout=10), 404, -32600)
    # An SSE session's messages need its id, and a live one.
    error(requests.post(server.url + "/mcp/messages/", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        timeout=10), 400, -32600)
    error(requests.post(server.url + "/mcp/messages/?session_id=" + "1" * 64,
                        json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10), 404, -32600)
    server.assert_alive()


def test_a_large_result_is_cut_with_a_note_not_sent_whole(start_server):
    """10 MB of rows against the default mcp.max_result_kb (1 MiB): the answer holds the first
    rows that fit and says so; the rest is never read."""
    server = start_server()
    server.sql_ok("CREATE TABLE mindsdb.big AS SELECT value AS id, repeat('x', 1000) AS pad "
                  "FROM generate_series(1, 10000)")
    session, _ = initialize(server)
    answer = rpc(server, "tools/call", {"name": "query", "arguments": {"query": "SELECT * FROM mindsdb.big ORDER BY id"}},
                 session=session)
    assert answer.status_code == 200
    # The whole answer, rows twice (text and structured) and the note, within the 1 MiB.
    assert len(answer.content) <= (1 << 20) + 4096, len(answer.content)
    result = answer.json()["result"]
    structured = result["structuredContent"]
    assert structured["truncated"] is True
    shown = structured["row_count"]
    assert 250 < shown < 400, shown
    assert len(structured["data"]) == shown
    assert [row[0] for row in structured["data"]] == list(range(1, shown + 1))
    assert "mcp.max_result_kb" in structured["note"] and f"first {shown} rows" in structured["note"]
    assert not result["isError"]

    small = start_server("[mcp]\nmax_result_kb = 4\n")
    small.sql_ok("CREATE TABLE mindsdb.t AS SELECT value AS id FROM generate_series(1, 5000)")
    session, _ = initialize(small)
    tables = rpc(small, "resources/read", {"uri": "schema://databases/mindsdb/tables"}, session=session)
    assert tables.status_code == 200
    capped = rpc(small, "tools/call", {"name": "query", "arguments": {"query": "SELECT id FROM mindsdb.t"}},
                 session=session).json()["result"]["structuredContent"]
    assert capped["truncated"] and len(json.dumps(capped["data"], separators=(",", ":"))) <= 4096 // 3
    # Rows of quotes, which escaping doubles in the text copy: still within the cap.
    quotes = rpc(small, "tools/call", {"name": "query", "arguments": {
        "query": "SELECT repeat('\"', 100) AS q FROM generate_series(1, 1000)"}}, session=session)
    assert quotes.json()["result"]["structuredContent"]["truncated"]
    assert len(quotes.content) <= 4096 + 1024, len(quotes.content)


def test_credentials_tenants_and_origins_are_the_rest_of_the_apis(start_server):
    from mcp.shared.exceptions import MCPError

    server, keys = hosted_server(start_server, 'edition = "hosted"\n', "alice", "bob")
    refused = rpc(server, "initialize", {"protocolVersion": "2025-11-25"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    alice = {"Authorization": f"Bearer {keys['alice']}"}
    bob = {"Authorization": f"Bearer {keys['bob']}"}

    async def as_alice():
        async with client_for(server.url, alice) as client:
            made = await client.call_tool("query", {"query": "CREATE TABLE mindsdb.secret AS SELECT 42 AS x"})
            assert not made.is_error, made.content
            got = await client.call_tool("query", {"query": "SELECT x FROM mindsdb.secret"})
            assert got.structured_content["data"] == [[42]]

    async def as_bob():
        async with client_for(server.url, bob, sse=True) as client:
            got = await client.call_tool("query", {"query": "SELECT x FROM mindsdb.secret"})
            assert got.is_error
            tables = json.loads((await client.read_resource("schema://databases/mindsdb/tables")).contents[0].text)
            assert all(t["TABLE_NAME"] != "secret" for t in tables)
            with pytest.raises(MCPError):
                await client.read_resource("schema://databases/mindsdb/tables/secret/columns")

    run(as_alice())
    run(as_bob())
    # Alice's session is hers: Bob's key with its id finds nothing.
    session, _ = initialize(server, headers=alice)
    assert rpc(server, "ping", session=session, headers=alice).status_code == 200
    assert rpc(server, "ping", session=session, headers=bob).status_code == 404
    assert requests.delete(server.url + "/mcp/", headers={**bob, "Mcp-Session-Id": session},
                           timeout=10).status_code == 404
    assert rpc(server, "ping", session=session, headers=alice).status_code == 200

    local = start_server(AUTH_CONFIG)
    assert rpc(local, "initialize", {"protocolVersion": "2025-11-25"}).status_code == 401
    # A web page the user visits cannot drive the local server's MCP endpoint.
    from_page = rpc(start_server(), "initialize", {"protocolVersion": "2025-11-25"},
                    headers={"Origin": "https://evil.example"})
    assert from_page.status_code == 403
    off = start_server("[mcp]\nenabled = false\n")
    assert rpc(off, "initialize", {"protocolVersion": "2025-11-25"}).status_code == 404


@pytest.fixture
def llm():
    with FakeLLM() as fake:
        yield fake


def test_the_knowledge_base_and_agent_tools(start_server, llm):
    server = start_server(f"""\
[embedding]
model_name = "fake-embedder"
base_url = "{llm.base_url}"
api_key = "sk-embed"

[llm]
provider = "openai"
model_name = "fake-model"
base_url = "{llm.base_url}"
api_key = "sk-test"
""")
    server.sql_ok("CREATE KNOWLEDGE_BASE mindsdb.notes")
    server.sql_ok("INSERT INTO mindsdb.notes (id, content, topic) VALUES "
                  "(1, 'Cats purr when they are content and meow at people', 'pets'), "
                  "(2, 'Dogs bark at strangers and wag their tails', 'pets'), "
                  "(3, 'The stock market fell as interest rates rose', 'finance')")
    created = requests.post(server.url + "/api/projects/mindsdb/agents",
                            json={"agent": {"name": "helper", "prompt_template": "Answer briefly"}}, timeout=30)
    assert created.status_code == 201, created.text

    async def session():
        async with client_for(server.url) as client:
            found = await client.call_tool("search_knowledge_base",
                                           {"knowledge_base": "notes", "query": "cats purr and meow", "limit": 1})
            assert not found.is_error, found.content
            table = found.structured_content
            assert len(table["data"]) == 1
            row = dict(zip(table["column_names"], table["data"][0]))
            assert "Cats purr" in row["chunk_content"], row
            filtered = await client.call_tool("search_knowledge_base", {
                "knowledge_base": "notes", "query": "falling prices", "filters": {"topic": "finance"}})
            metadata = [json.dumps(dict(zip(filtered.structured_content["column_names"], r))["metadata"])
                        for r in filtered.structured_content["data"]]
            assert len(metadata) == 1 and "finance" in metadata[0], metadata
            bad = await client.call_tool("search_knowledge_base", {"knowledge_base": "notes", "query": "x",
                                                                   "filters": {"nosuch": 1}})
            assert bad.is_error and "nosuch" in bad.content[0].text
            kbs = json.loads((await client.read_resource("schema://knowledge_bases")).contents[0].text)
            assert kbs == [{"name": "notes", "project": "mindsdb", "content_columns": ["content"],
                            "metadata_columns": kbs[0]["metadata_columns"], "id_column": "id"}]

            llm.script(text("Cats purr."))
            answered = await client.call_tool("ask_agent", {"agent": "helper", "question": "What do cats do?"})
            assert not answered.is_error, answered.content
            assert answered.content[0].text == "Cats purr."
            asked = llm.requests[-1]["messages"]
            assert asked[-1]["content"] == "What do cats do?"
            missing = await client.call_tool("ask_agent", {"agent": "nobody", "question": "hi"})
            assert missing.is_error and "nobody" in missing.content[0].text

    run(session())
