"""Knowledge bases from Python: create, insert (dicts, pandas, pyarrow), search with filters,
results as DataFrame and Arrow, against a fake `/v1/embeddings` server on 127.0.0.1 whose vector
of a text counts its words, each hashed to one of 32 places (so texts sharing words are near)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pyarrow as pa
import pytest

import mindlite


def _vector(text):
    vector = [0.0] * 32
    for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
        if len(word) > 2:
            vector[sum(word.encode()) * 31 % 32] += 1.0
    return vector


class _Embedder(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"index": i, "embedding": _vector(t)} for i, t in enumerate(body["input"])]
        reply = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def con():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Embedder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    connection = mindlite.connect(config={"embedding": {"base_url": url, "model_name": "fake"}})
    yield connection
    connection.close()
    server.shutdown()


def test_a_knowledge_base_is_filled_and_searched_from_python(con):
    kb = con.create_knowledge_base("notes", metadata_columns=["topic", "year"])
    assert repr(kb) == "KnowledgeBase(mindsdb.notes)"
    assert kb.insert({"id": 1, "content": "cats purr and meow softly", "topic": "pets",
                      "year": 2001}) == 1
    frame = pd.DataFrame({
        "id": [2, 3],
        "content": ["dogs bark and fetch sticks", "stock markets fell sharply"],
        "topic": ["pets", "finance"],
        "year": [1999, 2020],
    })
    assert kb.insert(frame) == 2
    table = pa.table({"id": [4], "content": ["cats and dogs sleep"], "topic": ["pets"],
                      "year": [2015]})
    assert kb.insert(table) == 1
    found = kb.search("cats purr and meow", limit=2).df()
    assert list(found["id"]) == ["1", "4"]
    assert {"chunk_content", "metadata", "distance", "relevance", "topic", "year"} <= set(found)
    # Filters apply before ranking: the best finance document, though cats are nearer.
    assert kb.search("cats purr", filters={"topic": "finance"}).fetchall()[0][0] == "3"
    assert kb.search("cats", filters={"topic": ["pets"], "year": 2015}).arrow().num_rows == 1
    # The search's settings are filters too: keywords only finds the one word.
    keyword = kb.search("markets", filters={"hybrid_search_alpha": 0}).fetchall()
    assert [row[0] for row in keyword] == ["3"]
    with pytest.raises(mindlite.ProgrammingError, match="no column 'colour'"):
        kb.search("cats", filters={"colour": "red"})
    assert [k.name for k in con.knowledge_bases()] == ["notes"]
    assert con.knowledge_base("notes").info["metadata_columns"] == ["topic", "year"]
    # Re-inserting replaces; SQL sees the same knowledge base.
    kb.insert({"id": 1, "content": "replaced", "topic": "pets", "year": 2001})
    assert con.sql("SELECT chunk_content FROM notes WHERE id = '1'").fetchall() == [("replaced",)]
    con.drop_knowledge_base("notes")
    assert con.knowledge_bases() == []
    with pytest.raises(mindlite.ProgrammingError):
        con.knowledge_base("notes")
