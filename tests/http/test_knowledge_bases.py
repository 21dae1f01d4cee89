"""Knowledge bases over HTTP: MindsDB's REST routes and the real `mindsdb_sdk` knowledge-base
API (`server.knowledge_bases.create/list/get/drop`, `kb.insert`, `kb.find`), embedding through
the fake provider's `/v1/embeddings` (fake_llm.py's `word_vector`)."""

from __future__ import annotations

import mindsdb_sdk
import pytest
import requests

from fake_llm import FakeLLM, text

DOCS = [
    {"id": 1, "content": "Cats purr when they are content and meow at people", "topic": "pets"},
    {"id": 2, "content": "Dogs bark at strangers and wag their tails", "topic": "pets"},
    {"id": 3, "content": "The stock market fell as interest rates rose", "topic": "finance"},
]


@pytest.fixture
def embedder():
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def kb_server(start_server, embedder):
    return start_server(f"""\
[embedding]
model_name = "fake-embedder"
base_url = "{embedder.base_url}"
api_key = "sk-embed"

[llm]
base_url = "{embedder.base_url}"
""")


def test_the_sdk_creates_fills_searches_and_drops_a_knowledge_base(kb_server, embedder):
    con = mindsdb_sdk.connect(kb_server.url)
    kb = con.knowledge_bases.create("notes", metadata_columns=["topic"])
    assert kb.name == "notes"
    assert kb.metadata_columns == ["topic"]
    assert kb.content_columns == ["content"]
    kb.insert(DOCS)
    # Embedded with the configured model and key.
    assert embedder.embedding_requests[-1]["model"] == "fake-embedder"
    found = kb.find("why do cats purr", limit=2).fetch()
    assert list(found["id"])[0] == "1"
    assert len(found) == 2
    assert {"chunk_content", "metadata", "distance", "relevance", "topic"} <= set(found.columns)
    assert [k.name for k in con.knowledge_bases.list()] == ["notes"]
    assert con.knowledge_bases.get("notes").id_column == "id"
    # Re-inserting a document replaces it.
    kb.insert({"id": 3, "content": "Bond yields climbed", "topic": "finance"})
    rows = kb_server.sql_ok("SELECT chunk_content FROM mindsdb.notes WHERE id = '3'")["data"]
    assert rows == [["Bond yields climbed"]]
    con.knowledge_bases.drop("notes")
    assert con.knowledge_bases.list() == []


def test_rest_bodies_and_codes_are_mindsdb_s(kb_server):
    base = kb_server.url + "/api/projects/mindsdb/knowledge_bases"
    created = requests.post(base, json={"knowledge_base": {
        "name": "kb", "embedding_model": {"api_key": "sk-secret"},
        "params": {"preprocessing": {"text_chunking_config": {"chunk_size": 500, "chunk_overlap": 50}}},
    }}, timeout=30)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == "kb"
    assert body["embedding_model"]["api_key"] == "******"
    assert body["params"]["preprocessing"]["text_chunking_config"]["chunk_size"] == 500
    again = requests.post(base, json={"knowledge_base": {"name": "kb"}}, timeout=30)
    assert again.status_code == 409
    assert again.json()["title"] == "Knowledge Base already exists"
    missing = requests.get(base + "/nope", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["detail"] == "Knowledge Base with name nope does not exist"
    assert requests.get(kb_server.url + "/api/projects/nope/knowledge_bases",
                        timeout=30).status_code == 404
    assert requests.post(base, json={"knowledge_base": {}}, timeout=30).status_code == 400
    assert requests.post(base, json={}, timeout=30).status_code == 400
    bad = requests.post(base, json={"knowledge_base": {"name": "kb2", "colour": 1,
                                                       "params": {"id_column": 5}}}, timeout=30)
    assert bad.status_code == 400 and "id_column" in bad.json()["detail"]
    # Documents from a query, then a bad body.
    kb_server.sql_ok("CREATE TABLE mindsdb.docs (id INT, content TEXT)")
    kb_server.sql_ok("INSERT INTO mindsdb.docs VALUES (1, 'alpha beta'), (2, 'gamma delta')")
    put = requests.put(base + "/kb", json={"knowledge_base": {"query": "SELECT * FROM docs"}},
                       timeout=30)
    assert put.status_code == 200, put.text
    count = kb_server.sql_ok("SELECT count(*) FROM mindsdb.kb")["data"]
    assert count == [[2]]
    for body in ({"knowledge_base": {"rows": "x"}}, {"knowledge_base": {"query": "DROP TABLE docs"}},
                 {"knowledge_base": {"rows": [1, 2]}}):
        assert requests.put(base + "/kb", json=body, timeout=30).status_code == 400, body
    assert kb_server.sql_ok("SELECT count(*) FROM mindsdb.docs")["data"] == [[2]]
    assert requests.delete(base + "/kb", timeout=30).status_code == 204
    assert requests.delete(base + "/kb", timeout=30).status_code == 404


def test_put_params_add_a_reranker_and_sql_searches_hybrid(kb_server, embedder):
    base = kb_server.url + "/api/projects/mindsdb/knowledge_bases"
    assert requests.post(base, json={"knowledge_base": {"name": "notes"}},
                         timeout=30).status_code == 201
    put = requests.put(base + "/notes", json={"knowledge_base": {"rows": DOCS}}, timeout=30)
    assert put.status_code == 200, put.text
    # Keywords only: the one document holding the word, the question never embedded.
    embedded = len(embedder.embedding_requests)
    found = kb_server.sql_ok("SELECT id FROM mindsdb.notes WHERE content = 'market' "
                             "AND hybrid_search_alpha = 0")["data"]
    assert found == [["3"]]
    assert len(embedder.embedding_requests) == embedded
    # A reranker added by PUT params scores every found chunk through the chat wire.
    put = requests.put(base + "/notes", json={"knowledge_base": {
        "params": {"reranking_model": {"model_name": "judge", "api_key": "sk-judge"}}}}, timeout=30)
    assert put.status_code == 200, put.text
    shown = requests.get(base + "/notes", timeout=30).json()["reranking_model"]
    assert shown == {"model_name": "judge", "api_key": "******"}
    embedder.fallback(text("55"))
    asked = len(embedder.requests)
    scored = kb_server.sql_ok("SELECT id, relevance FROM mindsdb.notes "
                              "WHERE content = 'cats purr' LIMIT 3")["data"]
    assert [r[1] for r in scored] == [0.55, 0.55, 0.55]
    judged = embedder.requests[asked:]
    assert len(judged) == 3 and {r["model"] for r in judged} == {"judge"}
    plain = kb_server.sql_ok("SELECT relevance FROM mindsdb.notes "
                             "WHERE content = 'cats purr' AND reranking = false LIMIT 1")["data"]
    assert plain[0][0] != 0.55
    bad = requests.put(base + "/notes", json={"knowledge_base": {
        "params": {"embedding_model": {"model_name": "another"}}}}, timeout=30)
    assert bad.status_code == 400 and "model_name" in bad.json()["detail"], bad.text
