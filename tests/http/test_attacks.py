"""Every attack of issue 37's "Why" as its own regression test, each against a fresh server
under the memory limit (conftest's `start_limited_server`: an allocation past
mlserver.MEMORY_LIMIT_MB aborts the server, which the test reports with the abort message).

Each test asserts that
- the server is alive afterwards (it answers a ping; `Server.death()` explains a death),
- a second tenant (the `victim`, another account, connecting from 127.0.0.2) was answered
  during and after the attack: adversary.Watchdog sends `SELECT 1` and a one-row INSERT one
  after another, and each must succeed within VICTIM_BOUND (2 s: generous for the debug
  build on 2 cores; the issue's goal for a release build is a p99 of 50 and 100 ms),
- the attack got a clear 4xx or SQL error naming the limit that stopped it: the config key
  where one exists or the issue names it, else (`names_a_limit`) any `section.key` config
  name, since the key is not chosen yet,
- nothing of either tenant was lost or half-written: the victim's table holds exactly the
  rows it inserted, the attacker's own rows written before the attack are intact, and what
  the attack was refused does not exist.

Keys this file uses that the server does not have yet (written as the issue describes them):
`http.allowed_origins` (issue: "What to build" 6) and the plan key `max_storage_mb` with
`storage` in `GET /limits/` (issue: 8, whose name the issue leaves open).
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from adversary import (EXACT_BELOW, Watchdog, arena_config, parquet_strings, session_from,
                       sql_as)
from fake_llm import FakeLLM, echo, hang, text
from hosted import PROBLEM, call, hosted_server
from mlserver import RawConnection, Server, bearer, http_request

pytestmark = pytest.mark.timeout(180)

VICTIM_BOUND = 2.0
# A configuration key as errors name their limits: `section.key`, or a plan's key.
CONFIG_KEY = re.compile(r"\b(?:(?:query|http|llm|embedding|files|agents|hosted|egress|callbacks|"
                        r"datasources|knowledge_bases|storage)\.[a-z_.]+|max_[a-z_]+|"
                        r"[a-z_]+_per_window)\b")
REFUSED = "refused by the egress policy"
# Words that would tell which internal range a refused address is in.
ADDRESS_CLASSES = ["loopback", "private", "link-local", "carrier-grade", "unique-local",
                   "multicast", "reserved", "unspecified", "internal", "resolves to"]
# The attacker's rows written before each attack; they must survive it.
KEPT = [[1, "one"], [2, "two"], [3, "three"]]


# The arena of one test: a hosted server, the attacker `mallory` and the `victim`.

class Attack:
    def __init__(self, server: Server, keys: dict[str, str], llm: FakeLLM):
        self.server, self.keys, self.llm = server, keys, llm
        self.mallory = keys["mallory"]
        self.victim = Watchdog(server, keys["victim"], bound=VICTIM_BOUND)
        sql_as(server, keys["victim"], "CREATE TABLE mindsdb.watch (n INT)")
        sql_as(server, self.mallory, "CREATE TABLE mindsdb.kept (n INT, name VARCHAR)")
        sql_as(server, self.mallory, "INSERT INTO mindsdb.kept VALUES (1, 'one'), (2, 'two'), "
                                     "(3, 'three')")

    def sql(self, query: str, key: str | None = None, wait: float = 120, **fields) -> dict:
        """The SQL route's answer (`fields` join the body: `timeout`, `params`), waiting at
        most `wait` seconds; a server that died meanwhile fails the test saying how."""
        try:
            response = requests.post(self.server.url + "/api/sql/query",
                                     json={"query": query, **fields},
                                     headers=bearer(key or self.mallory), timeout=wait)
        except requests.ConnectionError:
            self.server.assert_alive()
            raise
        assert response.status_code == 200, (query[:200], response.status_code, response.text[:500])
        return response.json()

    def ok(self, query: str, key: str | None = None, **fields) -> dict:
        doc = self.sql(query, key, **fields)
        assert doc["type"] in ("ok", "table"), (query[:200], doc)
        return doc

    def column(self, query: str, key: str | None = None) -> list:
        return [row[0] for row in self.ok(query, key)["data"]]

    def limits(self, key: str | None = None) -> dict:
        response = call(self.server, "GET", "/limits/", key or self.mallory)
        assert response.status_code == 200, response.text
        return response.json()

    def survived(self) -> None:
        """The server lives; the victim was answered promptly throughout and once more now;
        both tenants' rows are exactly as written."""
        if self.server.death() is None:
            failures = self.victim.failures()
            assert not failures, ("the victim was not answered promptly: "
                                  + "; ".join(f"{f.what}: {f.problem}" for f in failures[:5])
                                  + f" ({self.victim.summary()})")
        self.server.assert_alive()
        self.victim.once()
        assert not self.victim.failures(), self.victim.failures()
        self.victim.check_rows()
        kept = self.ok("SELECT n, name FROM mindsdb.kept ORDER BY n")["data"]
        assert kept == KEPT, f"the attacker's own rows changed: {kept}"


def attack_server(factory, llm: FakeLLM, extra_config: str = "", statement_timeout: int = 10,
                  users=("mallory", "victim"), llm_timeout: int = 5) -> Attack:
    """A hosted server (adversary.arena_config: the hosted defaults, the fake provider,
    `statement_timeout`) with `users` (names, or (name, plan)), the victim's table and the
    attacker's KEPT rows."""
    llm.fallback(echo("echo: "))
    config = arena_config(llm, extra_config, statement_timeout, llm_timeout)
    server, keys = hosted_server(factory, config, *users)
    return Attack(server, keys, llm)


@pytest.fixture
def llm():
    with FakeLLM() as fake:
        yield fake


def names_a_limit(message: str, key: str | None = None) -> None:
    """`message` names `key`, or (no key chosen yet) says it is a limit and names a config
    key other than the statement deadline's (a size limit is asked for, not a time limit)."""
    assert isinstance(message, str) and message.strip(), message
    if key is not None:
        assert key in message, f"the error should name {key}: {message[:500]}"
    else:
        keys = set(CONFIG_KEY.findall(message)) - {"query.statement_timeout_secs"}
        assert keys and "limit" in message.lower(), \
            f"the error should name the limit and its config key: {message[:500]}"


def sql_error(doc: dict) -> str:
    assert doc.get("type") == "error", f"should have failed: {str(doc)[:500]}"
    return doc["error_message"]


def refused(response: requests.Response, key: str | None = None, statuses=range(400, 500)) -> str:
    """A problem+json refusal whose detail names the limit."""
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.headers.get("content-type") == PROBLEM, dict(response.headers)
    detail = response.json()["detail"]
    names_a_limit(detail, key)
    return detail


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def kb_chunks(attack: Attack, kb: str) -> int:
    return attack.ok(f"SELECT count(*) FROM mindsdb.{kb}")["data"][0][0]


def wait_model(attack: Attack, name: str, timeout: float = 60) -> list:
    """The model's [status, error] once it is complete or failed."""
    deadline = time.monotonic() + timeout
    while True:
        rows = attack.ok(f"SELECT status, error FROM mindsdb.models WHERE name = '{name}'")["data"]
        if rows and rows[0][0] in ("complete", "error"):
            return rows[0]
        assert time.monotonic() < deadline, f"model {name} still {rows} after {timeout} s"
        time.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# 1. One request aborts the process.

def test_a_kb_search_with_a_limit_of_ten_trillion_returns_at_most_the_kb(start_limited_server,
                                                                          llm):
    """A knowledge base of 60 chunks, over knowledge_bases.exact_below (20) so the search
    walks the HNSW graph, searched with LIMIT 10,000,000,000,000 (the heaps were sized from
    the LIMIT: "memory allocation of 160000000000000 bytes failed"): the LIMIT is clamped to
    what the KB holds, so the search answers with at most its 60 chunks, for an empty
    question ('x' embeds to zeros), a real one, and a hybrid one."""
    attack = attack_server(start_limited_server, llm)
    attack.ok("CREATE KNOWLEDGE_BASE mindsdb.kb")
    attack.ok("INSERT INTO mindsdb.kb (id, content) SELECT value, 'document ' || value || "
              "' about cats and markets' FROM generate_series(1, 60)")
    assert kb_chunks(attack, "kb") == 60 > EXACT_BELOW
    with attack.victim:
        for condition in ("content = 'x'", "content = 'cats markets'",
                          "content = 'cats' AND hybrid_search = true"):
            doc = attack.sql(f"SELECT id FROM mindsdb.kb WHERE {condition} "
                             "LIMIT 10000000000000")
            assert doc.get("type") == "table", f"{condition}: {str(doc)[:500]}"
            ids = [row[0] for row in doc["data"]]
            assert 1 <= len(ids) <= 60 and len(set(ids)) == len(ids), (condition, len(ids))
    attack.survived()
    assert kb_chunks(attack, "kb") == 60


def test_a_list_parameter_referenced_2000_times_is_refused_naming_its_limit(
        start_limited_server, llm):
    """`"params": {"a": [0 … 99,999]}` referenced 2,000 times as `IN :a` in a 22 KB query
    (copied into the syntax tree at each use: 200 million values, 30 GB) is refused with an
    error naming the limit on list parameters' expansion and its config key, at once."""
    attack = attack_server(start_limited_server, llm)
    query = "SELECT count(*) FROM mindsdb.kept WHERE " + " OR ".join(["n IN :a"] * 2000)
    with attack.victim:
        doc, seconds = timed(attack.sql, query, params={"a": list(range(100_000))})
        names_a_limit(sql_error(doc))
    assert seconds < 10, f"refused only after {seconds:.1f} s"
    attack.survived()


def test_create_model_over_rows_of_100_mb_strings_fails_naming_its_budget(
        start_limited_server, llm):
    """CREATE MODEL over 50 rows of repeat('x', 100000000) (training rows were counted, not
    sized, and held outside the memory pool: 5 GB) is refused, or its training fails, with
    an error naming the limit; the training slot (free plan: max_running_trainings = 1) is
    free again afterwards: a small model then trains."""
    attack = attack_server(start_limited_server, llm)
    with attack.victim:
        doc = attack.sql("CREATE MODEL mindsdb.huge FROM mindsdb (SELECT repeat('x', 100000000) "
                         "AS a, value AS y FROM generate_series(1, 50)) PREDICT y")
        if doc["type"] == "error":
            names_a_limit(doc["error_message"])
        else:
            status, error = wait_model(attack, "huge", timeout=60)
            assert status == "error", "a model over 5 GB of rows should not train"
            names_a_limit(error)
    attack.survived()
    attack.ok("CREATE MODEL mindsdb.small FROM mindsdb (SELECT value % 7 AS x, value AS y "
              "FROM generate_series(1, 200)) PREDICT y")
    assert wait_model(attack, "small")[0] == "complete"


def test_four_parquet_pages_that_each_decode_to_900_mib_are_refused_at_once(
        start_limited_server, llm):
    """A 35 KB Parquet file whose one zstd page decodes to 900 MiB (its footer honest, under
    files.max_decoded_mb; the page was decompressed whole), uploaded four times at once (which
    aborted the server: "memory allocation of 943722000 bytes failed"): each upload is
    refused with a 4xx naming the limit on decoded pages, and nothing is stored."""
    attack = attack_server(start_limited_server, llm)
    bomb = parquet_strings(1 << 20, 900)
    assert len(bomb) < 40_000
    headers = {"Content-Type": "application/vnd.apache.parquet", **bearer(attack.mallory)}

    def upload(i: int) -> requests.Response:
        return requests.put(f"{attack.server.url}/api/files/bomb{i}", data=bomb, headers=headers,
                            timeout=60)

    with attack.victim:
        with ThreadPoolExecutor(max_workers=4) as pool:
            try:
                answers = list(pool.map(upload, range(4)))
            except requests.ConnectionError:
                attack.server.assert_alive()
                raise
    for answer in answers:
        refused(answer)
    attack.survived()
    listed = call(attack.server, "GET", "/api/files", attack.mallory).json()
    assert not [f for f in listed if f["name"].startswith("bomb")], listed


def test_repeat_of_500_mb_from_two_tenants_at_once_fails_naming_the_memory_budget(
        start_limited_server, llm):
    """`SELECT length(s) FROM (SELECT repeat('x', 500000000) AS s FROM generate_series(1, 4))`
    twice at once from each of two tenants (expression results were outside
    query.memory_limit_mb; three such statements aborted the server): each fails with an
    error naming the statement's memory budget and its config key."""
    attack = attack_server(start_limited_server, llm, users=("mallory", "mallet", "victim"))
    query = "SELECT length(s) FROM (SELECT repeat('x', 500000000) AS s FROM generate_series(1, 4))"
    keys = [attack.mallory, attack.mallory, attack.keys["mallet"], attack.keys["mallet"]]
    with attack.victim:
        with ThreadPoolExecutor(max_workers=4) as pool:
            docs = list(pool.map(lambda key: attack.sql(query, key), keys))
    for doc in docs:
        names_a_limit(sql_error(doc))
    attack.survived()


def test_a_kb_with_chunk_size_1_and_a_20_mb_document_is_refused_naming_a_limit(
        start_limited_server, llm):
    """A knowledge base with chunk_size = 1 given one 20 MB document, by SQL and by REST (it
    built 20 million chunks and ids before anything was charged: 3.8 GB and still running
    after 60 s): each insert is refused within 10 s naming the limit on chunks, and the
    knowledge base stays empty."""
    attack = attack_server(start_limited_server, llm)
    attack.ok('CREATE KNOWLEDGE_BASE mindsdb.tiny USING preprocessing = {"text_chunking_config": '
              '{"chunk_size": 1, "chunk_overlap": 0}}')
    with attack.victim:
        doc, seconds = timed(attack.sql, "INSERT INTO mindsdb.tiny (id, content) "
                                         "VALUES (1, repeat('abcd ', 4000000))")
        names_a_limit(sql_error(doc))
        assert seconds < 10, f"refused only after {seconds:.1f} s"
        document = {"id": 2, "content": "abcd " * 4_000_000}
        answer, seconds = timed(call, attack.server, "PUT",
                                "/api/projects/mindsdb/knowledge_bases/tiny", attack.mallory,
                                {"knowledge_base": {"rows": [document]}})
        refused(answer)
        assert seconds < 10, f"refused only after {seconds:.1f} s"
    attack.survived()
    assert kb_chunks(attack, "tiny") == 0


# Found by the adversary (adversary.py), on top of the list.

DEEP = {
    # A UNION ALL of 80 SELECTs already overflowed the stack of the debug build.
    "union_of_1000_selects": " UNION ALL ".join(f"SELECT {i} AS n" for i in range(1000)),
    # 1,075 terms did.
    "sum_of_5000_terms": "SELECT " + " + ".join(["1"] * 5000),
    # 305 terms did.
    "or_of_2000_conditions": "SELECT count(*) FROM mindsdb.kept WHERE "
                             + " OR ".join(["n = 1"] * 2000),
}


@pytest.mark.parametrize("shape", list(DEEP))
def test_a_deeply_nested_statement_is_answered_or_refused_naming_a_limit(start_limited_server,
                                                                         llm, shape):
    """Statements of a few KB whose syntax trees are deep (planning recursed through them
    until "fatal runtime error: stack overflow" aborted the server): each is answered, or
    refused with an error naming the nesting limit and its config key."""
    attack = attack_server(start_limited_server, llm)
    with attack.victim:
        doc = attack.sql(DEEP[shape])
        if doc["type"] == "error":
            names_a_limit(doc["error_message"])
    attack.survived()


# 2. One tenant stalls all of them.

def inserts_while(attack: Attack, statement: str, **fields) -> tuple[dict, int]:
    """Runs the attacker's statement while the victim works; returns its answer and how many
    victim requests ran while it did."""
    with attack.victim:
        time.sleep(0.3)
        before = len(attack.victim.requests)
        doc = attack.sql(statement, wait=300, **fields)
        during = len(attack.victim.requests) - before
    return doc, during


def test_a_2m_row_insert_into_a_keyed_table_does_not_hold_up_another_tenants_insert(
        start_limited_server, llm):
    """INSERT of 2,000,000 rows into a table with a PRIMARY KEY (its index entries were built
    under the single writer lock: another tenant's one-row INSERT waited 5.5 s): the victim's
    inserts meanwhile each finish within VICTIM_BOUND; afterwards the table holds all 2M rows."""
    attack = attack_server(start_limited_server, llm, statement_timeout=240)
    attack.ok("CREATE TABLE mindsdb.keyed (id BIGINT PRIMARY KEY, v VARCHAR)")
    doc, during = inserts_while(attack, "INSERT INTO mindsdb.keyed SELECT value, 'v' || value "
                                        "FROM generate_series(1, 2000000)")
    assert doc["type"] == "ok" and doc["affected_rows"] == 2_000_000, doc
    attack.survived()
    assert during >= 3, f"the insert should outlast a few of the victim's requests: {during}"
    assert attack.ok("SELECT count(*), count(DISTINCT id) FROM mindsdb.keyed")["data"] == \
        [[2_000_000, 2_000_000]]
    # Dropping it leaves 2M entries and the chunks to remove: swept in steps after the DROP,
    # while the victim keeps being answered; the tenant's stored bytes go back down.
    def stored() -> int:
        limits = attack.limits()
        return (limits.get("storage") or limits["storage_bytes"])["used"]

    used = stored()
    with attack.victim:
        attack.ok("DROP TABLE mindsdb.keyed")
        deadline = time.monotonic() + 120
        while stored() > used // 100 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert stored() <= used // 100, (used, stored())
    attack.survived()


def test_create_index_on_a_big_table_does_not_hold_up_inserts_and_a_stopped_one_commits_nothing(
        start_limited_server, llm):
    """CREATE INDEX over 2,000,000 rows (built under the writer lock: another tenant's insert
    waited 3.9 s) leaves the victim's inserts within VICTIM_BOUND. The same CREATE INDEX with a
    request `timeout` of 1 s fails naming its time limit and commits nothing (one "stopped
    after 5 s" still committed): the index does not exist afterwards."""
    attack = attack_server(start_limited_server, llm, statement_timeout=240)
    attack.ok("CREATE TABLE mindsdb.big AS SELECT value AS id, 'row ' || (value % 100000) AS s "
              "FROM generate_series(1, 2000000)")
    doc, during = inserts_while(attack, "CREATE INDEX big_s ON mindsdb.big (s)")
    assert doc["type"] == "ok", doc
    attack.survived()
    assert during >= 3, f"the index build should outlast a few of the victim's requests: {during}"
    attack.ok("DROP INDEX big_s")

    stopped = attack.sql("CREATE INDEX big_s2 ON mindsdb.big (s)", timeout=1)
    names_a_limit(sql_error(stopped), "query.statement_timeout_secs")
    dropped = attack.sql("DROP INDEX big_s2")
    assert dropped["type"] == "error", "the index stopped by its time limit was committed"
    assert attack.ok("SELECT count(*) FROM mindsdb.big WHERE s = 'row 7'")["data"] == [[20]]


def test_callbacks_with_costly_filters_do_not_hold_the_writer_lock(start_limited_server, llm):
    """A tenant registers 300 callbacks whose two filters are costly to compile (they were
    compiled twice per callback inside each model-status change's write transaction: 100
    costly filters held the lock 2.2 s per completion on a release build; 100 of these, 1.8 to
    2.7 s on the debug build, too close to the bound to fail every time, hence 300), then makes
    three models that complete at once: the victim's inserts meanwhile each finish within
    VICTIM_BOUND."""
    plans = """
[hosted]
default_plan = "free"

[hosted.plans.free]

[hosted.plans.hooks]
callbacks = true
max_callbacks = 300
"""
    attack = attack_server(start_limited_server, llm, extra_config=plans,
                           users=(("mallory", "hooks"), "victim"))
    costly = r"\w{1,20}"  # near the 1 MiB compiled-size limit; never matches the names used
    # Under the configured provider's path: only that prefix of its host is reachable.
    hook = f"http://127.0.0.1:{llm.port}/v1/hook"
    for i in range(300):
        registered = call(attack.server, "POST", "/cloud/callback/model_status", attack.mallory,
                          {"url": hook, "filter": {"model_name": costly, "project_name": costly}})
        assert registered.status_code == 200, (i, registered.text)
    with attack.victim:
        time.sleep(0.3)
        for i in range(3):
            attack.ok(f"CREATE MODEL mindsdb.done{i} PREDICT answer USING engine = 'openai', "
                      "prompt_template = 'say {{q}}'")
            assert wait_model(attack, f"done{i}")[0] == "complete"
    attack.survived()


def test_four_selects_of_30000_columns_do_not_stall_other_tenants(start_limited_server, llm):
    """Four `SELECT 1, 1, …` of 30,000 columns at once (planned on the runtime's workers,
    with quadratic duplicate-name handling, beyond the statement deadline's reach: nobody was
    answered for about 200 s): the victim is answered within VICTIM_BOUND throughout, and
    each statement ends within its deadline (10 s, plus 10 s to spare): answered, or refused
    naming a limit."""
    attack = attack_server(start_limited_server, llm)
    query = "SELECT " + ", ".join(["1"] * 30_000)

    def wide() -> tuple[dict | str, float]:
        started = time.monotonic()
        try:
            doc = attack.sql(query, wait=20)
        except requests.Timeout:
            doc = "no answer within 20 s"
        return doc, time.monotonic() - started

    with attack.victim:
        time.sleep(0.3)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: wide(), range(4)))
    attack.survived()
    for doc, seconds in results:
        assert isinstance(doc, dict), f"{doc} (the deadline should have stopped it)"
        if doc["type"] == "error":
            names_a_limit(doc["error_message"])
        else:
            assert len(doc["column_names"]) == 30_000


def test_1030_idle_sockets_from_one_client_do_not_lock_out_another(start_limited_server, llm):
    """1,030 connections from 127.0.0.1 that send nothing (they held all of
    http.max_connections, 1,024, for idle_timeout_secs: everyone got 503): the victim,
    connecting from 127.0.0.2, is answered within VICTIM_BOUND while they are open, and the
    attacker keeps at most its share (http.max_connections_per_address, default a quarter of
    1,024): each connection past it takes the place of the attacker's own longest-idle one,
    which the server closes without an answer (closing an idle connection is what HTTP allows;
    a 429 naming the key is only for an address none of whose connections is idle). Any
    answer one of them did get is such a refusal."""
    share = 1024 // 4
    attack = attack_server(start_limited_server, llm)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    sockets = []
    try:
        for _ in range(1030):
            sockets.append(socket.create_connection(("127.0.0.1", attack.server.port), timeout=5))
        time.sleep(0.5)
        with attack.victim:
            time.sleep(3)
        died = attack.server.death()
        assert died is None, f"mindlite-server died: {died}"
        failures = attack.victim.failures()
        assert not failures, ("the victim was not answered while the sockets were open: "
                              + "; ".join(f"{f.what}: {f.problem}" for f in failures[:3]))
        answers, closed = [], 0
        poller = select.poll()
        by_fd = {sock.fileno(): sock for sock in sockets}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        for fd, _event in poller.poll(2000):
            try:
                answer = by_fd[fd].recv(65536)
            except OSError:
                answer = b""  # reset: closed too
            closed += 1
            if answer:
                answers.append(answer)
        assert 1030 - closed <= share, \
            f"the attacker holds {1030 - closed} connections, more than its share of {share}"
        for answer in answers:
            assert re.match(rb"HTTP/1.1 (429|503)", answer), answer[:500]
            assert re.search(rb"http\.[a-z_]+", answer), answer[:500]
    finally:
        for sock in sockets:
            sock.close()
    time.sleep(0.5)
    attack.survived()


# 3. The local server obeys any web page.

def local_tables(server: Server) -> list[str]:
    return [row[0] for row in server.sql_ok("SHOW TABLES FROM mindsdb")["data"]]


def test_a_web_page_style_post_is_refused_and_runs_nothing(start_limited_server):
    """The local edition: a POST of SQL with a content type a web page may send without a
    preflight (text/plain, form-urlencoded, multipart) is refused with a 4xx naming
    application/json, and its statement never runs; application/json still works."""
    server = start_limited_server()
    body = json.dumps({"query": "CREATE TABLE mindsdb.pwned (n INT)"}).encode()
    for content_type in ("text/plain", "text/plain;charset=UTF-8",
                         "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        with RawConnection(server.port) as conn:
            conn.send(http_request("POST", "/api/sql/query", body,
                                   {"Content-Type": content_type}, server.port))
            answer = conn.read_response()
        assert 400 <= answer.status < 500, (content_type, answer.status, answer.body[:300])
        assert "application/json" in answer.json()["detail"], answer.body[:300]
    assert "pwned" not in local_tables(server)
    assert server.sql_ok("SELECT 1 AS one")["data"] == [[1]]
    server.assert_alive()


def test_a_foreign_host_header_is_refused_and_runs_nothing(start_limited_server):
    """DNS rebinding: requests whose Host is not one of the server's names (default:
    localhost, 127.0.0.1, [::1] and the bind address) are refused with a 4xx naming the Host,
    whether they write (the statement never runs) or read; the server's own names work."""
    server = start_limited_server()
    create = json.dumps({"query": "CREATE TABLE mindsdb.rebound (n INT)"}).encode()
    for host in (f"evil.example:{server.port}", "evil.example", f"127.0.0.1.nip.io:{server.port}",
                 f"localhost.evil.example:{server.port}"):
        for method, path, body in (("POST", "/api/sql/query", create),
                                   ("GET", "/api/projects", None)):
            with RawConnection(server.port) as conn:
                head = http_request(method, path, body, {"Content-Type": "application/json"}
                                    if body else None, server.port)
                conn.send(head.replace(f"Host: 127.0.0.1:{server.port}".encode(),
                                       f"Host: {host}".encode(), 1))
                answer = conn.read_response()
            assert 400 <= answer.status < 500, (host, path, answer.status, answer.body[:300])
            assert "host" in answer.json()["detail"].lower(), answer.body[:300]
    assert "rebound" not in local_tables(server)
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}"):
        with RawConnection(server.port) as conn:
            conn.send(http_request("GET", "/api/projects", port=server.port).replace(
                f"Host: 127.0.0.1:{server.port}".encode(), f"Host: {host}".encode(), 1))
            assert conn.read_response().status == 200, host
    server.assert_alive()


def test_a_foreign_origin_is_refused_and_runs_nothing(start_limited_server):
    """A request carrying an Origin that http.allowed_origins does not list (another site,
    or `null` from a sandboxed frame) is refused 403 naming http.allowed_origins, and its
    statement never runs; a request without an Origin works."""
    server = start_limited_server()
    create = json.dumps({"query": "CREATE TABLE mindsdb.crossed (n INT)"}).encode()
    for origin in ("http://evil.example", "null", f"http://127.0.0.1.evil.example:{server.port}"):
        with RawConnection(server.port) as conn:
            conn.send(http_request("POST", "/api/sql/query", create,
                                   {"Content-Type": "application/json", "Origin": origin},
                                   server.port))
            answer = conn.read_response()
        assert answer.status == 403, (origin, answer.status, answer.body[:300])
        assert "http.allowed_origins" in answer.json()["detail"], answer.body[:300]
    assert "crossed" not in local_tables(server)
    server.assert_alive()


# 4. Metering and deadlines have side doors.

AGENTS = "/api/projects/mindsdb/agents"


def agent_with(name: str, base_url: str) -> dict:
    """The body creating an agent whose model is at `base_url`."""
    return {"agent": {"name": name, "model": {"provider": "openai", "model_name": "m",
                                              "api_key": "k", "base_url": base_url}}}


def make_agent(attack: Attack, name: str = "helper") -> None:
    made = call(attack.server, "POST", AGENTS, attack.mallory, {"agent": {"name": name}})
    assert made.status_code == 201, made.text


def test_a_question_whose_client_left_is_charged_once_the_provider_was_called(
        start_limited_server, llm):
    """Five questions to an agent whose provider takes 3 s, each client gone once the
    provider has the request (they were refunded: 5 questions, 10 provider calls, `used` 0):
    GET /limits/ counts all five."""
    attack = attack_server(start_limited_server, llm)
    make_agent(attack)
    used = attack.limits()["questions"]["used"]
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()
    with attack.victim:
        for _ in range(5):
            llm.fallback(hang(3, text("late")))
            asked = len(llm.requests)
            with RawConnection(attack.server.port) as conn:
                conn.send(http_request("POST", "/api/projects/mindsdb/agents/helper/completions",
                                       body, bearer(attack.mallory), attack.server.port))
                deadline = time.monotonic() + 10
                while len(llm.requests) == asked:
                    assert time.monotonic() < deadline, "the provider was never called"
                    time.sleep(0.02)
        time.sleep(4)
    after = attack.limits()["questions"]["used"]
    assert after == used + 5, f"{after - used} of 5 abandoned questions were charged"
    attack.survived()


def test_a_question_stopped_by_its_time_limit_is_charged_once_the_provider_was_called(
        start_limited_server, llm):
    """`SELECT answer FROM agent` with a request timeout of 1 s while the provider takes 3 s:
    the statement fails naming its time limit, and the question stays charged."""
    attack = attack_server(start_limited_server, llm)
    make_agent(attack)
    used = attack.limits()["questions"]["used"]
    llm.fallback(hang(3, text("late")))
    with attack.victim:
        doc = attack.sql("SELECT answer FROM mindsdb.helper WHERE question = 'hello'", timeout=1)
        names_a_limit(sql_error(doc), "query.statement_timeout_secs")
    assert len(llm.requests) >= 1
    time.sleep(1)  # a refund is written after the statement ends: let one land, if any
    assert attack.limits()["questions"]["used"] == used + 1
    attack.survived()


# Work for hours that needs little memory: 10^10 pairs compared (a count of the pairs alone
# would be computed from the two counts).
ENDLESS = ("SELECT count(*) AS c FROM generate_series(1, 100000) AS a "
           "CROSS JOIN generate_series(1, 100000) AS b WHERE a.value + b.value = 7")


def test_a_rest_kb_insert_with_a_query_stops_at_the_statement_deadline(start_limited_server,
                                                                        llm):
    """PUT /knowledge_bases/kb with a `query` that computes for hours (it ran without any
    statement deadline) stops at query.statement_timeout_secs (3 s) with an error naming it,
    and the knowledge base is unchanged."""
    attack = attack_server(start_limited_server, llm, statement_timeout=3)
    attack.ok("CREATE KNOWLEDGE_BASE mindsdb.kb")
    attack.ok("INSERT INTO mindsdb.kb (id, content) VALUES (1, 'cats purr')")
    with attack.victim:
        try:
            answer, seconds = timed(requests.put,
                                    attack.server.url + "/api/projects/mindsdb/knowledge_bases/kb",
                                    json={"knowledge_base": {"query": f"SELECT c AS id, 'text' AS "
                                                                      f"content FROM ({ENDLESS})"}},
                                    headers=bearer(attack.mallory), timeout=30)
        except requests.Timeout:
            pytest.fail("no answer within 30 s: the insert ran past its 3 s deadline")
    refused(answer, "query.statement_timeout_secs", statuses=[*range(400, 500), 503])
    assert seconds < 3 + 5, f"stopped after {seconds:.1f} s"
    attack.survived()
    assert kb_chunks(attack, "kb") == 1


def test_an_upload_stops_at_the_statement_deadline(start_limited_server, llm):
    """A 56 MB CSV (3.5 million rows of 8 columns; about 9 s to decode on the debug build)
    with query.statement_timeout_secs = 1: the upload stops at the deadline with an error
    naming it, and no file is stored."""
    attack = attack_server(start_limited_server, llm, statement_timeout=1)
    csv = b"a,b,c,d,e,f,g,h\n" + b"1,2,3,4,5,6,7,8\n" * 3_500_000
    with attack.victim:
        try:
            answer, seconds = timed(requests.put, attack.server.url + "/api/files/slow",
                                    data=csv, headers={"Content-Type": "text/csv",
                                                       **bearer(attack.mallory)}, timeout=60)
        except requests.Timeout:
            pytest.fail("no answer within 60 s")
    refused(answer, "query.statement_timeout_secs", statuses=[*range(400, 500), 503])
    assert seconds < 1 + 4, f"stopped after {seconds:.1f} s"
    attack.survived()
    listed = call(attack.server, "GET", "/api/files", attack.mallory).json()
    assert "slow" not in [f["name"] for f in listed], listed


def test_a_rest_prediction_stops_at_the_statement_deadline(start_limited_server, llm):
    """POST /models/m/predict for an LLM-backed model whose provider takes 30 s (the provider
    timeout is 40 s; REST predictions had no statement deadline), with
    query.statement_timeout_secs = 2: the answer comes at the deadline naming it."""
    attack = attack_server(start_limited_server, llm, statement_timeout=2, llm_timeout=40)
    attack.ok("CREATE MODEL mindsdb.m PREDICT answer USING engine = 'openai', "
              "prompt_template = 'say {{q}}'")
    assert wait_model(attack, "m")[0] == "complete"
    llm.fallback(hang(30, text("late")))
    with attack.victim:
        try:
            answer, seconds = timed(call, attack.server, "POST",
                                    "/api/projects/mindsdb/models/m/predict", attack.mallory,
                                    {"data": [{"q": "x"}]})
        except requests.Timeout:
            pytest.fail("no answer within 30 s: the prediction ran past its 2 s deadline")
    refused(answer, "query.statement_timeout_secs", statuses=[*range(400, 500), 503])
    assert seconds < 2 + 4, f"stopped after {seconds:.1f} s"
    llm.fallback(echo("echo: "))
    attack.survived()


@pytest.mark.xfail(strict=False, reason=(
    "the dropped training's query stops when DataFusion's nested-loop join ends its poll, "
    "which joins probe batches of 8,192 rows with all 100,000 buffered rows, seconds each in "
    "a debug build; when the drop lands early in one, the CPU check fails (docs/security.md, "
    "'not yet exact')"))
def test_drop_model_cancels_its_training_and_frees_the_slot_at_once(start_limited_server, llm):
    """A model training over a query that computes for hours holds the free plan's one
    training slot (a second CREATE MODEL is refused naming max_running_trainings); DROP MODEL
    stops the training (the server's CPU goes quiet within 2 s) and frees the slot at once:
    the next CREATE MODEL is accepted and trains."""
    attack = attack_server(start_limited_server, llm, statement_timeout=600)
    attack.ok("CREATE MODEL mindsdb.slow FROM mindsdb "
              f"(SELECT c % 7 AS x, c AS y FROM ({ENDLESS})) PREDICT y")
    time.sleep(1)
    held = attack.sql("CREATE MODEL mindsdb.second FROM mindsdb (SELECT value % 7 AS x, value AS y "
                      "FROM generate_series(1, 200)) PREDICT y")
    names_a_limit(sql_error(held), "max_running_trainings")
    with attack.victim:
        attack.ok("DROP MODEL mindsdb.slow")
        again = attack.sql("CREATE MODEL mindsdb.second FROM mindsdb (SELECT value % 7 AS x, "
                           "value AS y FROM generate_series(1, 200)) PREDICT y")
        assert again["type"] == "table", f"the slot was not freed by DROP MODEL: {again}"
        assert wait_model(attack, "second")[0] == "complete"
    time.sleep(2)
    settled = cpu_seconds(attack.server.pid)
    time.sleep(2)
    busy = cpu_seconds(attack.server.pid) - settled
    assert busy < 0.3, f"{busy:.2f} s of CPU in 2 s: the dropped model's training still runs"
    attack.survived()



# 500 one-hot features (ten text columns of 50 categories) over 16,000 rows: fitting takes
# tens of seconds (a forest whose every tree sorts every feature, then least squares over
# 500² products per row), where a training query's rows are read in a moment.
WIDE_TRAINING = ("SELECT " + ", ".join(f"CAST((value * {m} + {i}) % 50 AS VARCHAR) AS c{i}"
                                       for i, m in enumerate([7, 11, 13, 17, 19, 23, 29, 31,
                                                              37, 41]))
                 + ", value % 1000 AS y FROM generate_series(1, 16000)")


def test_drop_model_during_a_long_fit_stops_it_within_a_step(start_limited_server, llm):
    """DROP MODEL while the model is fitting (phase 3, "Fitting mixers"; smartcore's forest
    and ridge were one uninterruptible call each, so the fit ran on for tens of seconds after
    the drop, its CPU with it): the fit stops at its next step (a tree), the server's CPU goes
    quiet within 2 s, the slot is free at once and the next model trains."""
    attack = attack_server(start_limited_server, llm, statement_timeout=600)
    attack.ok(f"CREATE MODEL mindsdb.wide FROM mindsdb ({WIDE_TRAINING}) PREDICT y")
    deadline = time.monotonic() + 120
    while True:
        rows = attack.ok("SELECT status, current_training_phase, error FROM mindsdb.models "
                         "WHERE name = 'wide'")["data"]
        assert rows and rows[0][0] in ("generating", "training"), rows
        if rows[0][1] == 3:
            break
        assert time.monotonic() < deadline, f"the model never reached its fit: {rows}"
        time.sleep(0.1)
    time.sleep(1)
    fitting = cpu_seconds(attack.server.pid)
    time.sleep(1)
    assert cpu_seconds(attack.server.pid) - fitting > 0.5, "the fit was not running"
    attack.ok("DROP MODEL mindsdb.wide")
    time.sleep(2)
    settled = cpu_seconds(attack.server.pid)
    time.sleep(2)
    busy = cpu_seconds(attack.server.pid) - settled
    assert busy < 0.3, f"{busy:.2f} s of CPU in 2 s after DROP MODEL: the fit still runs"
    again = attack.sql("CREATE MODEL mindsdb.second FROM mindsdb (SELECT value % 7 AS x, "
                       "value AS y FROM generate_series(1, 200)) PREDICT y")
    assert again["type"] == "table", f"the slot was not freed by DROP MODEL: {again}"
    assert wait_model(attack, "second")[0] == "complete"
    attack.survived()

# 5. Smaller.

def test_egress_refusals_read_the_same_for_every_internal_address_class(start_limited_server,
                                                                        llm):
    """Agents' base_url, callback URLs and PostgreSQL hosts aimed at loopback, private,
    link-local, carrier-grade NAT, unique-local and multicast addresses, and at a name that
    resolves to loopback: every refusal says "refused by the egress policy" in one text
    (the host as written aside), naming no address class (it was an oracle over the operator's
    DNS)."""
    attack = attack_server(start_limited_server, llm, users=(("mallory", "pro"), "victim"))
    closed = 1
    targets = [f"127.0.0.1:{closed}", "10.0.0.1", "169.254.169.254", "100.64.0.1", "[fd00::1]",
               "224.0.0.1"]
    texts: dict[str, set[str]] = {"agent": set(), "callback": set(), "database": set()}

    def record(path: str, host: str, message: str) -> None:
        assert REFUSED in message, message
        for word in ADDRESS_CLASSES:
            assert word not in message.lower(), f"the refusal names '{word}': {message}"
        # Refusals name the host as written, without its port.
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        texts[path].add(message.replace(name, "<host>").replace(name.strip("[]"), "<host>"))

    with attack.victim:
        for i, host in enumerate(targets):
            made = call(attack.server, "POST", AGENTS, attack.mallory,
                        agent_with(f"a{i}", f"http://{host}/v1"))
            assert made.status_code == 403, made.text
            record("agent", host, made.json()["detail"])
            hook = call(attack.server, "POST", "/cloud/callback/model_status", attack.mallory,
                        {"url": f"http://{host}/hook"})
            assert hook.status_code == 403, hook.text
            record("callback", host, hook.json()["detail"])
            pg_host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host.strip("[]")
            doc = attack.sql(f"CREATE DATABASE d{i} WITH ENGINE = 'postgres', PARAMETERS = "
                             + json.dumps({"host": pg_host, "port": closed, "database": "d",
                                           "user": "u", "password": "p"}))
            record("database", pg_host, sql_error(doc))
        made = call(attack.server, "POST", AGENTS, attack.mallory,
                    agent_with("by_name", f"http://localhost:{closed}/v1"))
        assert made.status_code == 201, made.text
        asked = call(attack.server, "POST", "/api/projects/mindsdb/agents/by_name/completions",
                     attack.mallory, {"messages": [{"role": "user", "content": "hi"}]})
        assert asked.status_code == 403, asked.text
        record("agent", f"localhost:{closed}", asked.json()["detail"])
    for path, seen in texts.items():
        assert len(seen) == 1, f"{path} refusals differ by address class: {sorted(seen)}"
    attack.survived()


def test_api_status_with_wrong_credentials_is_throttled_like_a_failed_login(
        start_limited_server, llm):
    """GET /api/status with a bogus key from 127.0.0.2 (an unthrottled validity check) counts
    like a failed login: past http.unauthenticated_per_minute (30) it is answered 429 naming
    the limit; the victim from 127.0.0.1 is unaffected."""
    attack = attack_server(start_limited_server, llm,
                           extra_config="\n[http]\nunauthenticated_per_minute = 30\n")
    guesser = session_from("127.0.0.2")
    statuses = []
    for i in range(40):
        answer = guesser.get(attack.server.url + "/api/status",
                             headers=bearer(f"mlk_guess{i}"), timeout=10)
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            refused(answer, "http.unauthenticated_per_minute")
    assert 429 in statuses, f"40 guesses in a row were never throttled: {statuses}"
    assert statuses.index(429) <= 30, statuses
    # Its own table: attack.victim (from 127.0.0.2) numbers its rows in mindsdb.watch from 1
    # too, and its check would count this one's row as a duplicate of its own.
    sql_as(attack.server, attack.keys["victim"], "CREATE TABLE mindsdb.watch_local (n INT)")
    victim = Watchdog(attack.server, attack.keys["victim"], table="mindsdb.watch_local",
                      address="127.0.0.1", bound=VICTIM_BOUND)
    victim.once()
    assert not victim.failures(), victim.failures()
    victim.check_rows()
    attack.survived()


def test_a_kb_whose_embedding_or_reranking_url_is_an_internal_literal_is_refused_at_create(
        start_limited_server, llm):
    """CREATE KNOWLEDGE_BASE (SQL and REST) with an embedding or reranking base_url that is an
    internal IP literal (accepted, and refused only at use) is refused at once saying "refused
    by the egress policy", and no such knowledge base exists."""
    attack = attack_server(start_limited_server, llm)
    with attack.victim:
        for i, url in enumerate(("http://10.0.0.1/v1", "http://169.254.169.254/v1",
                                 "http://127.0.0.1:1/v1", "http://[::1]:1/v1")):
            for role in ("embedding_model", "reranking_model"):
                model = {"provider": "openai", "model_name": "e", "api_key": "k", "base_url": url}
                doc = attack.sql(f"CREATE KNOWLEDGE_BASE mindsdb.ssrf{i}_{role} USING "
                                 f"{role} = {json.dumps(model)}")
                assert REFUSED in sql_error(doc), doc
                answer = call(attack.server, "POST", "/api/projects/mindsdb/knowledge_bases",
                              attack.mallory, {"knowledge_base": {"name": f"rest{i}_{role}",
                                                                  role: model}})
                assert answer.status_code in (400, 403), (url, role, answer.text)
                assert REFUSED in answer.json()["detail"], answer.text
    listed = call(attack.server, "GET", "/api/projects/mindsdb/knowledge_bases", attack.mallory)
    assert listed.json() == [], listed.text
    attack.survived()


def test_the_configured_provider_is_reachable_only_under_its_path(start_limited_server, llm):
    """llm.base_url is the fake's http://127.0.0.1:PORT/v1; an agent whose base_url is the
    same host and port under another path (it was allowed by host:port alone) is refused
    "refused by the egress policy", and nothing reaches that path."""
    attack = attack_server(start_limited_server, llm)
    url = f"http://127.0.0.1:{llm.port}/elsewhere/v1"
    with attack.victim:
        made = call(attack.server, "POST", AGENTS, attack.mallory, agent_with("sideways", url))
        if made.status_code == 201:
            asked = call(attack.server, "POST", "/api/projects/mindsdb/agents/sideways/completions",
                         attack.mallory, {"messages": [{"role": "user", "content": "hi"}]})
            assert asked.status_code == 403, asked.text
            assert REFUSED in asked.json()["detail"], asked.text
        else:
            assert made.status_code == 403 and REFUSED in made.json()["detail"], made.text
    assert not [p for p in llm.paths if p.startswith("/elsewhere")], llm.paths
    attack.survived()


def test_a_tenant_cannot_store_past_its_storage_quota(start_limited_server, llm):
    """A plan with max_storage_mb = 5 (the issue's per-tenant storage quota; the key name is
    this test's guess): a 20 MB CREATE TABLE AS and a 20 MB upload are refused naming the
    quota, nothing of them is stored, GET /limits/ shows `storage`; the victim (on another
    plan) is unaffected."""
    plans = """
[hosted]
default_plan = "free"

[hosted.plans.free]
max_running_statements = 4

[hosted.plans.small]
max_running_statements = 4
max_storage_mb = 5
"""
    attack = attack_server(start_limited_server, llm, extra_config=plans,
                           users=(("mallory", "small"), "victim"))
    with attack.victim:
        # Text that does not compress (stored chunks are LZ4-compressed): 20 MB of digests.
        pad = " || ".join(f"md5(CAST(value * {k} AS VARCHAR))" for k in range(1, 33))
        doc = attack.sql(f"CREATE TABLE mindsdb.filler AS SELECT value, {pad} AS pad "
                         "FROM generate_series(1, 20000)")
        names_a_limit(sql_error(doc), "max_storage_mb")
        answer = requests.put(attack.server.url + "/api/files/filler",
                              data=b"pad\n" + b"".join(os.urandom(500).hex().encode() + b"\n"
                                                        for _ in range(20000)),
                              headers={"Content-Type": "text/csv", **bearer(attack.mallory)},
                              timeout=60)
        refused(answer, "max_storage_mb")
    assert "filler" not in attack.column("SHOW TABLES FROM mindsdb")
    limits = attack.limits()
    storage = limits.get("storage") or limits["storage_bytes"]
    assert storage["limit"] == 5 * 1024 * 1024 or storage["limit"] == 5, storage
    attack.survived()


def test_a_body_its_user_has_no_room_for_is_refused_before_it_is_read(start_limited_server, llm):
    """What a request holds outside its statements (its body, what the handler decodes from
    it) counts toward its user's plan; a body larger than the plan is refused on its head with
    a 400 naming max_memory_mb, before a byte of it is read (one larger than what is left now
    gets a 429: the engine's unit test), and the user's next request is served. The victim
    (on another plan) is unaffected."""
    plans = """
[hosted]
default_plan = "free"

[hosted.plans.free]

[hosted.plans.small]
max_memory_mb = 16
"""
    attack = attack_server(start_limited_server, llm, extra_config=plans,
                           users=(("mallory", "small"), "victim"))
    with attack.victim:
        with RawConnection(attack.server.port) as conn:
            head = (f"POST /api/sql/query HTTP/1.1\r\nHost: 127.0.0.1:{attack.server.port}\r\n"
                    f"Authorization: Bearer {attack.mallory}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 20000000\r\n\r\n")
            conn.send(head.encode())
            # Answered with no byte of the body sent, and the connection closed: the body's
            # bytes must not be read as a next request.
            answer = conn.read_response()
            assert conn.read_to_eof() == b""
        assert answer.status == 400, (answer.status, answer.body[:300])
        detail = answer.json()["detail"]
        names_a_limit(detail, "max_memory_mb")
        assert "body of 20 MiB" in detail and "refused unread" in detail, detail
        assert attack.column("SELECT count(*) FROM mindsdb.kept") == [3]
    attack.survived()
