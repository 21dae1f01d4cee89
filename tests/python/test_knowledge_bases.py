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


def test_an_insert_reports_progress_and_stops_when_told(con):
    kb = con.create_knowledge_base("notes")
    seen = []
    rows = [{"id": i, "content": f"note number {i} about cats"} for i in range(5)]
    assert kb.insert(rows, progress=seen.append) == 5
    assert seen[-1]["status"] == "done"
    assert seen[-1]["documents"] == 5 and seen[-1]["indexed"] == 5
    assert all(set(p) >= {"embedded", "chunks", "started_at", "error"} for p in seen)
    # False stops it: nothing is written.
    with pytest.raises(mindlite.OperationalError, match="cancelled"):
        kb.insert([{"id": 9, "content": "never stored"}], progress=lambda p: False)
    assert con.execute("SELECT count(*) FROM notes").fetchone()[0] == 5

    # What the callback raises stops the insert and comes back to the caller.
    def fail(progress):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        kb.insert_query("SELECT 10 AS id, 'from a query' AS content", progress=fail)
    assert con.execute("SELECT count(*) FROM notes").fetchone()[0] == 5
    board = con.execute(
        "SELECT status FROM information_schema.knowledge_base_inserts").fetchall()
    assert [row[0] for row in board] == ["done", "failed", "failed"]


def test_a_notebook_embeds_offline_with_the_shipped_model():
    """all-MiniLM-L6-v2 run in process: no embedding server at all."""
    import os

    folder = os.environ.get("MINILM_TEST_DIR")
    if not folder:
        assert not os.environ.get("CI"), "MINILM_TEST_DIR is not set (scripts/test.sh sets it)"
        pytest.skip("MINILM_TEST_DIR is not set")
    con = mindlite.connect(config={"embedding": {
        "provider": "local", "model_name": folder, "base_url": "http://127.0.0.1:9/v1"}})
    kb = con.create_knowledge_base("faq")
    kb.insert([
        {"id": "pw", "content": "To reset your password, open Settings and choose Forgot password."},
        {"id": "hours", "content": "The office is open from nine to five on weekdays."},
    ])
    assert kb.search("I can't sign in to my account", limit=1).fetchall()[0][0] == "pw"
    assert kb.search("when do you open?", limit=1).fetchall()[0][0] == "hours"
    con.close()
