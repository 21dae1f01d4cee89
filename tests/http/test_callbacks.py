"""Model-status callbacks (hosted edition) over HTTP: `/cloud/callback/model_status` to
register, list, read, change and delete them, with 400/403/404 where they belong; and their
deliveries to a receiver run by the test: the signed payload of a model that reached
`complete` or `error`, retries on a failing or hanging receiver, filters anchored at the start,
a URL's events in the order they happened, at-least-once across a restart, nothing after a
delete, and no redirects followed.

A receiver is a ThreadingHTTPServer on 127.0.0.1 answering from a script. Models reach
`complete` at once as LLM models (`engine = 'openai'`, nothing asked of the provider until a
prediction) and `error` by training on too few rows.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from hosted import TIMESTAMP, call, hosted_server, problem, sql_ok
from mlserver import Server, bearer, free_port

CALLBACKS = "/cloud/callback/model_status"
HTTP_DATE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d "
                       r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
                       r"\d\d:\d\d:\d\d GMT$")
WEBHOOK_ID = re.compile(r"^msg_(\d{12})_[0-9a-f]+$")
PAYLOAD_KEYS = {"name", "version", "active", "predictor_id", "project_name",
                "predictor_created_at", "old_status", "new_status", "changed_at"}
ATTEMPT_KEYS = {"event_id", "attempt", "at", "enqueued_at", "duration_ms", "status", "error",
                "delivered"}
# The receivers run on this machine, which the hosted egress policy refuses unless allowed.
HOSTED = 'edition = "hosted"\negress.allow = ["127.0.0.1"]\n'


# The receiver.

@dataclass
class Reply:
    """How the receiver answers one request: `status` after `delay` seconds, with `location`."""
    status: int = 200
    delay: float = 0.0
    location: str | None = None


@dataclass
class Received:
    at: float  # time.monotonic() when the request had been read
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self):
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


class Receiver:
    """A webhook receiver on 127.0.0.1 (`port`, or a free one) that records every request and
    answers them with the replies of `script` in turn, then with `fallback`."""

    def __init__(self, *replies: Reply, port: int = 0, fallback: Reply = Reply()):
        self.script = list(replies)
        self.fallback = fallback
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server convention)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    receiver.received.append(Received(
                        time.monotonic(), self.path,
                        {k.lower(): v for k, v in self.headers.items()}, body))
                    reply = receiver.script.pop(0) if receiver.script else receiver.fallback
                if reply.delay and receiver.closing.wait(reply.delay):
                    return
                try:
                    self.send_response(reply.status)
                    if reply.location:
                        self.send_header("Location", reply.location)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender gave up waiting, as a timeout should

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def posts(self, path: str | None = None) -> list[Received]:
        """What was received so far (at `path`), in order."""
        with self.lock:
            return [r for r in self.received if path is None or r.path == path]

    def wait_for(self, count: int, timeout: float, path: str | None = None) -> list[Received]:
        """The first `count` requests (to `path`), failing if they take longer than `timeout`."""
        wait_until(lambda: len(self.posts(path)) >= count, timeout,
                   lambda: f"{count} request(s) to {path or 'any path'}; got "
                           f"{[(r.path, r.headers.get('webhook-id')) for r in self.posts()]}")
        return self.posts(path)[:count]

    def close(self) -> None:
        self.closing.set()
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receivers():
    """`receivers(*replies, port=0, fallback=Reply())` starts a Receiver, closed at teardown."""
    started: list[Receiver] = []

    def start(*replies: Reply, **options) -> Receiver:
        started.append(Receiver(*replies, **options))
        return started[-1]

    yield start
    for receiver in started:
        receiver.close()


def wait_until(predicate, timeout: float, what) -> None:
    """Returns once `predicate()` holds; fails naming `what` (text, or a function giving it)
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"waited {timeout} s for {what() if callable(what) else what}", pytrace=False)


# The server and its users.

@pytest.fixture
def alice(start_server) -> tuple[Server, str]:
    """A hosted server and the API key of alice, on plan pro (callbacks included)."""
    server, keys = hosted_server(start_server, HOSTED, ("alice", "pro"))
    return server, keys["alice"]


def register(server: Server, key: str, url: str, **settings) -> dict:
    """Registers a callback for `url` (`filter`, `attempt` as given): `{"id", "secret"}`."""
    response = call(server, "POST", CALLBACKS, key, {"url": url, **settings})
    assert response.status_code == 200, response.text
    return response.json()


def deliveries(server: Server, key: str, callback_id: int) -> list[dict]:
    response = call(server, "GET", f"{CALLBACKS}/{callback_id}/deliveries", key)
    assert response.status_code == 200, response.text
    return response.json()


def wait_deliveries(server: Server, key: str, callback_id: int, count: int,
                    timeout: float) -> list[dict]:
    """The delivery log once it has `count` attempts (it must not go past `count`)."""
    wait_until(lambda: len(deliveries(server, key, callback_id)) >= count, timeout,
               lambda: f"{count} logged attempt(s): {deliveries(server, key, callback_id)}")
    return deliveries(server, key, callback_id)


# Models.

def status_of(server: Server, key: str, name: str, project: str = "mindsdb") -> str | None:
    rows = sql_ok(server, key, f"SELECT name, status FROM {project}.models")["data"]
    return next((status for model, status in rows if model == name), None)


def wait_status(server: Server, key: str, name: str, status: str,
                project: str = "mindsdb") -> None:
    wait_until(lambda: status_of(server, key, name, project) == status, 10,
               lambda: f"{project}.{name} to be {status}: "
                       f"it is {status_of(server, key, name, project)}")


def complete_model(server: Server, key: str, name: str, project: str = "mindsdb") -> None:
    """An LLM model, complete as soon as it is created (the provider is asked only to predict)."""
    sql_ok(server, key, f"CREATE MODEL {project}.{name} PREDICT answer "
                        "USING engine = 'openai', prompt_template = 'say {{q}}'")
    wait_status(server, key, name, "complete", project)


def failed_model(server: Server, key: str, name: str) -> None:
    """A model whose training fails: one row where at least 10 are needed."""
    sql_ok(server, key, f"CREATE MODEL mindsdb.{name} FROM mindsdb (SELECT 1 AS x, 2 AS y) "
                        "PREDICT y")
    wait_status(server, key, name, "error")


# Checks.

def http_date(text: str) -> datetime:
    """An HTTP-date (`Tue, 24 Nov 2026 19:41:25 GMT`) with a weekday that fits its date."""
    assert isinstance(text, str) and HTTP_DATE.match(text), text
    parsed = parsedate_to_datetime(text)
    assert format_datetime(parsed, usegmt=True) == text, f"{text}: wrong weekday or zone"
    return parsed


def recent(moment: datetime, seconds: float = 120) -> bool:
    return abs((datetime.now(timezone.utc) - moment).total_seconds()) <= seconds


def sequence(webhook_id: str) -> int:
    """The outbox sequence a webhook-id embeds."""
    match = WEBHOOK_ID.match(webhook_id)
    assert match, webhook_id
    return int(match.group(1))


def verify_signature(request: Received, secret: str) -> None:
    """Standard Webhooks: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`, keyed with the
    bytes the secret's base64 (after `whsec_`) stands for."""
    assert secret.startswith("whsec_"), secret
    key = base64.b64decode(secret[len("whsec_"):], validate=True)
    signed = (f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}."
              .encode() + request.body)
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = request.headers["webhook-signature"].split(" ")
    assert expected in offered, (offered, expected)


# Registration.

def test_register_list_get_update_delete_round_trip(start_server):
    """POST → {id, secret}; GET lists {id, created_at, url}; GET one shows the settings (the
    [callbacks] defaults for those left out) and never the secret; PUT changes the URL and
    keeps the rest; DELETE removes it, then it is 404 on every route."""
    config = HOSTED + "\n[callbacks]\ncount = 4\ninterval_secs = 7\nhttp_timeout_secs = 2\n"
    server, keys = hosted_server(start_server, config, ("alice", "pro"))
    key = keys["alice"]
    assert call(server, "GET", CALLBACKS, key).json() == []

    first = register(server, key, "http://127.0.0.1:9/first",
                     filter={"model_name": "sales.*", "project_name": "mindsdb"},
                     attempt={"count": 5, "interval": 2, "http_timeout": 3})
    assert set(first) == {"id", "secret"} and isinstance(first["id"], int), first
    assert first["secret"].startswith("whsec_"), first
    assert base64.b64decode(first["secret"][len("whsec_"):], validate=True), "a non-empty key"
    second = register(server, key, "https://hooks.example.com/second?via=test")
    assert second["id"] != first["id"] and second["secret"] != first["secret"]

    for path in (CALLBACKS, CALLBACKS + "/"):
        listed = call(server, "GET", path, key)
        assert listed.status_code == 200, listed.text
        assert [(c["id"], c["url"]) for c in listed.json()] == [
            (first["id"], "http://127.0.0.1:9/first"),
            (second["id"], "https://hooks.example.com/second?via=test")], listed.json()
        for entry in listed.json():
            assert set(entry) == {"id", "created_at", "url"}, entry
            assert recent(http_date(entry["created_at"])), entry

    shown = call(server, "GET", f"{CALLBACKS}/{first['id']}", key)
    assert shown.status_code == 200, shown.text
    settings = shown.json()
    assert first["secret"] not in shown.text and "secret" not in settings, settings
    assert settings["id"] == first["id"] and settings["url"] == "http://127.0.0.1:9/first"
    assert settings["filter"] == {"model_name": "sales.*", "project_name": "mindsdb"}, settings
    assert settings["attempt"] == {"count": 5, "interval": 2, "http_timeout": 3}, settings
    defaults = call(server, "GET", f"{CALLBACKS}/{second['id']}", key).json()
    assert defaults["filter"] == {"model_name": None, "project_name": None}, defaults
    assert defaults["attempt"] == {"count": 4, "interval": 7, "http_timeout": 2}, \
        "the [callbacks] defaults"

    moved = call(server, "PUT", f"{CALLBACKS}/{first['id']}", key,
                 {"url": "http://127.0.0.1:9/moved"})
    assert moved.status_code == 200, moved.text
    after = call(server, "GET", f"{CALLBACKS}/{first['id']}", key).json()
    assert after == {**settings, "url": "http://127.0.0.1:9/moved"}, after
    assert moved.json() == after, moved.text
    assert deliveries(server, key, first["id"]) == []

    removed = call(server, "DELETE", f"{CALLBACKS}/{first['id']}", key)
    assert removed.status_code == 200, removed.text
    for method, path, body in (("GET", f"{CALLBACKS}/{first['id']}", None),
                               ("PUT", f"{CALLBACKS}/{first['id']}", {"url": "http://a.b/"}),
                               ("DELETE", f"{CALLBACKS}/{first['id']}", None),
                               ("GET", f"{CALLBACKS}/{first['id']}/deliveries", None)):
        problem(call(server, method, path, key, body), 404)
    assert [c["id"] for c in call(server, "GET", CALLBACKS, key).json()] == [second["id"]]
    for method, path in (("DELETE", CALLBACKS), ("POST", f"{CALLBACKS}/{second['id']}"),
                         ("POST", f"{CALLBACKS}/{second['id']}/deliveries")):
        problem(call(server, method, path, key, {"url": "http://127.0.0.1:9/"}), 405)


@pytest.mark.parametrize("body, mentions", [
    ({}, ["url"]),
    ({"url": ""}, ["url"]),
    ({"url": 42}, ["url"]),
    ({"url": "not a url"}, ["url"]),
    ({"url": "ftp://127.0.0.1/hook"}, ["url", "ftp"]),
    ({"url": "file:///etc/passwd"}, ["url"]),
    ({"url": "http://"}, ["url"]),
    ({"url": "http://127.0.0.1/" + "a" * 2100}, ["url"]),
    ({"url": "http://127.0.0.1/", "filter": "sales"}, ["filter"]),
    ({"url": "http://127.0.0.1/", "filter": {"name": "sales"}}, ["filter.name"]),
    ({"url": "http://127.0.0.1/", "filter": {"model_name": 7}}, ["filter.model_name"]),
    ({"url": "http://127.0.0.1/", "filter": {"model_name": "("}}, ["filter.model_name"]),
    ({"url": "http://127.0.0.1/", "filter": {"project_name": "[a-"}}, ["filter.project_name"]),
    ({"url": "http://127.0.0.1/", "attempt": 5}, ["attempt"]),
    ({"url": "http://127.0.0.1/", "attempt": {"count": 0}}, ["attempt.count"]),
    ({"url": "http://127.0.0.1/", "attempt": {"count": 21}}, ["attempt.count", "20"]),
    ({"url": "http://127.0.0.1/", "attempt": {"count": -1}}, ["attempt.count"]),
    ({"url": "http://127.0.0.1/", "attempt": {"count": 1.5}}, ["attempt.count"]),
    ({"url": "http://127.0.0.1/", "attempt": {"count": "3"}}, ["attempt.count"]),
    ({"url": "http://127.0.0.1/", "attempt": {"interval": 0}}, ["attempt.interval"]),
    ({"url": "http://127.0.0.1/", "attempt": {"interval": 86401}}, ["attempt.interval", "86400"]),
    ({"url": "http://127.0.0.1/", "attempt": {"http_timeout": 0}}, ["attempt.http_timeout"]),
    ({"url": "http://127.0.0.1/", "attempt": {"http_timeout": 301}},
     ["attempt.http_timeout", "300"]),
])
def test_invalid_registrations_are_400_and_register_nothing(alice, body, mentions):
    server, key = alice
    problem(call(server, "POST", CALLBACKS, key, body), 400, *mentions)
    assert call(server, "GET", CALLBACKS, key).json() == []


def test_attempt_bounds_are_inclusive_and_a_bad_update_changes_nothing(alice):
    """count 20, interval 86400 and http_timeout 300 are allowed; a PUT with a bad URL is 400
    and leaves the callback as it was; a body that is not JSON is 400."""
    server, key = alice
    top = {"count": 20, "interval": 86400, "http_timeout": 300}
    made = register(server, key, "http://127.0.0.1:9/hook", attempt=top)
    before = call(server, "GET", f"{CALLBACKS}/{made['id']}", key).json()
    assert before["attempt"] == top, before
    low = register(server, key, "http://127.0.0.1:9/hook",
                   attempt={"count": 1, "interval": 1, "http_timeout": 1})
    assert call(server, "GET", f"{CALLBACKS}/{low['id']}", key).json()["attempt"] == \
        {"count": 1, "interval": 1, "http_timeout": 1}

    problem(call(server, "PUT", f"{CALLBACKS}/{made['id']}", key, {"url": "gopher://x/"}), 400,
            "url")
    problem(call(server, "PUT", f"{CALLBACKS}/{made['id']}", key, {"url": None}), 400, "url")
    garbled = requests.post(server.url + CALLBACKS, data=b"{not json", timeout=30,
                            headers={**bearer(key), "Content-Type": "application/json"})
    problem(garbled, 400)
    assert call(server, "GET", f"{CALLBACKS}/{made['id']}", key).json() == before
    assert len(call(server, "GET", CALLBACKS, key).json()) == 2


def test_unknown_ids_and_another_users_callbacks_are_404(start_server):
    """Bob (also on pro) cannot see, change, delete or read the log of alice's callback; it
    stays as it was; neither lists the other's."""
    server, keys = hosted_server(start_server, HOSTED, ("alice", "pro"), ("bob", "pro"))
    alice, bob = keys["alice"], keys["bob"]
    mine = register(server, alice, "http://127.0.0.1:9/alice")
    settings = call(server, "GET", f"{CALLBACKS}/{mine['id']}", alice).json()
    for who, ident in ((alice, "999"), (alice, "abc"), (alice, "-1"), (bob, str(mine["id"]))):
        for method, path, body in (("GET", f"{CALLBACKS}/{ident}", None),
                                   ("PUT", f"{CALLBACKS}/{ident}", {"url": "http://evil.test/"}),
                                   ("DELETE", f"{CALLBACKS}/{ident}", None),
                                   ("GET", f"{CALLBACKS}/{ident}/deliveries", None)):
            problem(call(server, method, path, who, body), 404)
    assert call(server, "GET", CALLBACKS, bob).json() == []
    assert call(server, "GET", f"{CALLBACKS}/{mine['id']}", alice).json() == settings
    theirs = register(server, bob, "http://127.0.0.1:9/bob")
    for who, made, url in ((alice, mine, "http://127.0.0.1:9/alice"),
                           (bob, theirs, "http://127.0.0.1:9/bob")):
        assert [c["url"] for c in call(server, "GET", CALLBACKS, who).json()] == [url]
        assert call(server, "GET", f"{CALLBACKS}/{made['id']}", who).json()["url"] == url


def test_callbacks_need_credentials_and_a_plan_that_includes_them(start_server):
    """No key: 401. Free (the default plan, callbacks = false): 403 on every route, the detail
    saying the plan does not include them. A configured plan with callbacks = true may."""
    plans = """
[hosted]
default_plan = "basic"

[hosted.plans.basic]
callbacks = false

[hosted.plans.team]
callbacks = true
"""
    server, keys = hosted_server(start_server, HOSTED + plans, ("carol", "basic"),
                                 ("dave", "team"))
    problem(call(server, "GET", CALLBACKS, None), 401)
    problem(call(server, "POST", CALLBACKS, None, {"url": "http://127.0.0.1:9/"}), 401)
    for method, path, body in (("POST", CALLBACKS, {"url": "http://127.0.0.1:9/"}),
                               ("GET", CALLBACKS, None), ("GET", f"{CALLBACKS}/1", None),
                               ("PUT", f"{CALLBACKS}/1", {"url": "http://127.0.0.1:9/"}),
                               ("DELETE", f"{CALLBACKS}/1", None),
                               ("GET", f"{CALLBACKS}/1/deliveries", None)):
        problem(call(server, method, path, keys["carol"], body), 403, "not included",
                "basic", "team")
    register(server, keys["dave"], "http://127.0.0.1:9/")

    default_plans, default_keys = hosted_server(start_server, HOSTED, ("erin", "free"),
                                                ("frank", "pro"))
    problem(call(default_plans, "POST", CALLBACKS, default_keys["erin"],
                 {"url": "http://127.0.0.1:9/"}), 403, "not included", "free")
    register(default_plans, default_keys["frank"], "http://127.0.0.1:9/")


@pytest.mark.parametrize("method, path", [
    ("GET", CALLBACKS), ("POST", CALLBACKS), ("GET", f"{CALLBACKS}/1"),
    ("PUT", f"{CALLBACKS}/1"), ("DELETE", f"{CALLBACKS}/1"), ("GET", f"{CALLBACKS}/1/deliveries")])
def test_the_local_edition_has_no_callbacks(server, method, path):
    problem(call(server, method, path, None, {"url": "http://127.0.0.1:9/"}), 404)


# Deliveries.

def test_complete_and_error_models_are_delivered_signed(alice, receivers):
    """A model reaching `complete`, then one reaching `error`: one POST each, a JSON payload
    with every field in its type (times as HTTP-dates), webhook-id/-timestamp headers and a
    signature that verifies with the secret; the log shows one delivered attempt each."""
    server, key = alice
    receiver = receivers()
    made = register(server, key, receiver.url())

    complete_model(server, key, "m1")
    [done] = receiver.wait_for(1, 10)
    assert done.path == "/hook"
    assert done.headers["content-type"] == "application/json", done.headers
    payload = done.json()
    assert set(payload) == PAYLOAD_KEYS, payload
    assert (payload["name"], payload["project_name"], payload["new_status"]) == \
        ("m1", "mindsdb", "complete"), payload
    assert payload["version"] == 1 and payload["active"] is True, payload
    assert type(payload["predictor_id"]) is int, payload
    assert payload["old_status"] == "training", payload
    assert recent(http_date(payload["predictor_created_at"])), payload
    assert recent(http_date(payload["changed_at"])), payload
    assert http_date(payload["changed_at"]) >= http_date(payload["predictor_created_at"])
    sequence(done.webhook_id)
    assert abs(int(done.headers["webhook-timestamp"]) - time.time()) < 60, done.headers
    verify_signature(done, made["secret"])

    failed_model(server, key, "bad")
    _, broken = receiver.wait_for(2, 10)
    failure = broken.json()
    assert set(failure) == PAYLOAD_KEYS, failure
    assert (failure["name"], failure["old_status"], failure["new_status"]) == \
        ("bad", "training", "error"), failure
    assert failure["predictor_id"] != payload["predictor_id"], (payload, failure)
    assert sequence(broken.webhook_id) > sequence(done.webhook_id)
    verify_signature(broken, made["secret"])

    log = wait_deliveries(server, key, made["id"], 2, 5)
    assert [(a["event_id"], a["attempt"], a["status"], a["error"], a["delivered"]) for a in log] \
        == [(done.webhook_id, 1, 200, None, True), (broken.webhook_id, 1, 200, None, True)], log
    for attempt in log:
        assert set(attempt) == ATTEMPT_KEYS, attempt
        assert TIMESTAMP.match(attempt["at"]), attempt
        assert isinstance(attempt["enqueued_at"], int), attempt
        assert abs(attempt["enqueued_at"] / 1000 - time.time()) < 120, attempt
        assert isinstance(attempt["duration_ms"], int) and attempt["duration_ms"] >= 0, attempt
    time.sleep(0.5)
    assert len(receiver.posts()) == 2, "one POST per event"


def test_a_failing_receiver_gets_retries_until_it_answers_2xx(alice, receivers):
    """500, 500, then 200, with count 5 and interval 1: exactly three POSTs about a second
    apart, one webhook-id; the log shows attempts 1–3 with 500, 500, 200."""
    server, key = alice
    receiver = receivers(Reply(500), Reply(500))
    made = register(server, key, receiver.url(), attempt={"count": 5, "interval": 1})
    complete_model(server, key, "m1")
    posts = receiver.wait_for(3, 8)
    gaps = [later.at - earlier.at for earlier, later in zip(posts, posts[1:])]
    assert all(0.9 <= gap < 3 for gap in gaps), gaps
    assert {p.webhook_id for p in posts} == {posts[0].webhook_id}
    assert {p.body for p in posts} == {posts[0].body}, "the payload is fixed when it happened"
    log = wait_deliveries(server, key, made["id"], 3, 5)
    assert [(a["attempt"], a["status"], a["delivered"]) for a in log] == \
        [(1, 500, False), (2, 500, False), (3, 200, True)], log
    assert {a["event_id"] for a in log} == {posts[0].webhook_id}
    assert "500" in log[0]["error"] and log[2]["error"] is None, log
    time.sleep(1.5)
    assert len(receiver.posts()) == 3, "nothing after the 2xx"
    assert len(deliveries(server, key, made["id"])) == 3


def test_a_hanging_receiver_times_out_each_attempt(alice, receivers):
    """A receiver that answers after 5 s, http_timeout 1, count 2, interval 1: two attempts,
    each given up after about a second and logged with a timeout error; no third."""
    server, key = alice
    receiver = receivers(fallback=Reply(200, delay=5))
    made = register(server, key, receiver.url(),
                    attempt={"count": 2, "interval": 1, "http_timeout": 1})
    complete_model(server, key, "m1")
    log = wait_deliveries(server, key, made["id"], 2, 8)
    assert [(a["attempt"], a["status"], a["delivered"]) for a in log] == \
        [(1, None, False), (2, None, False)], log
    for attempt in log:
        assert re.search(r"time(d)? ?out", attempt["error"], re.IGNORECASE), attempt
        assert 900 <= attempt["duration_ms"] < 2500, attempt
    posts = receiver.posts()
    assert len(posts) == 2 and posts[0].webhook_id == posts[1].webhook_id, posts
    assert 1.8 <= posts[1].at - posts[0].at < 4, "timeout (1 s) then interval (1 s)"
    time.sleep(1.5)
    assert len(receiver.posts()) == 2 and len(deliveries(server, key, made["id"])) == 2


def test_filters_match_model_and_project_names_from_the_start(alice, receivers):
    """model_name "sales" + project_name "mindsdb" gets mindsdb.sales_forecast only (not
    my_sales, not p2.sales_report); model_name "other" gets other_model only."""
    server, key = alice
    receiver = receivers()
    sales = register(server, key, receiver.url("/sales"),
                     filter={"model_name": "sales", "project_name": "mindsdb"})
    other = register(server, key, receiver.url("/other"), filter={"model_name": "other"})
    sql_ok(server, key, "CREATE PROJECT p2")
    complete_model(server, key, "my_sales")
    complete_model(server, key, "sales_report", project="p2")
    complete_model(server, key, "sales_forecast")
    complete_model(server, key, "other_model")
    # Each URL gets its events in order: had an earlier model matched, it would come first.
    [to_sales] = receiver.wait_for(1, 10, "/sales")
    [to_other] = receiver.wait_for(1, 10, "/other")
    assert (to_sales.json()["name"], to_sales.json()["project_name"]) == \
        ("sales_forecast", "mindsdb")
    verify_signature(to_sales, sales["secret"])
    assert (to_other.json()["name"], to_other.json()["project_name"]) == ("other_model", "mindsdb")
    verify_signature(to_other, other["secret"])
    time.sleep(0.5)
    assert sorted(r.path for r in receiver.posts()) == ["/other", "/sales"], \
        [(r.path, r.json()["name"]) for r in receiver.posts()]


def test_only_the_owners_models_are_delivered(start_server, receivers):
    """Alice's callback (no filter) hears of alice's model, never of bob's."""
    server, keys = hosted_server(start_server, HOSTED, ("alice", "pro"), ("bob", "pro"))
    receiver = receivers()
    register(server, keys["alice"], receiver.url())
    complete_model(server, keys["bob"], "bobs_model")
    complete_model(server, keys["alice"], "alices_model")
    [post] = receiver.wait_for(1, 10)
    assert post.json()["name"] == "alices_model", post.json()
    time.sleep(0.5)
    assert len(receiver.posts()) == 1, [r.json()["name"] for r in receiver.posts()]


def test_a_urls_events_arrive_in_the_order_models_completed(alice, receivers):
    """The receiver fails the first POST once (interval 1) while three more models complete:
    all four arrive in completion order, the retry first, each event's webhook-id above the
    last; no event overtakes the one being retried."""
    server, key = alice
    receiver = receivers(Reply(500))
    made = register(server, key, receiver.url(), attempt={"count": 5, "interval": 1})
    names = ["m1", "m2", "m3", "m4"]
    complete_model(server, key, names[0])
    receiver.wait_for(1, 5)
    for name in names[1:]:
        complete_model(server, key, name)
    posts = receiver.wait_for(5, 10)
    assert [p.json()["name"] for p in posts] == ["m1", *names], \
        [(p.json()["name"], p.webhook_id) for p in posts]
    assert posts[0].webhook_id == posts[1].webhook_id
    ids = [sequence(p.webhook_id) for p in posts[1:]]
    assert ids == sorted(ids) and len(set(ids)) == 4, [p.webhook_id for p in posts]
    changed = [http_date(p.json()["changed_at"]) for p in posts[1:]]
    assert changed == sorted(changed), changed
    log = wait_deliveries(server, key, made["id"], 5, 5)
    assert [a["status"] for a in log] == [500, 200, 200, 200, 200], log
    time.sleep(0.5)
    assert len(receiver.posts()) == 5


def test_an_undelivered_event_survives_a_restart(alice, receivers):
    """Nothing listens at the URL (count 10, interval 1); the server stops (SIGTERM, exit 0)
    with the event undelivered; once the receiver is up and the server started again, the
    event arrives, each copy (at least once) with the same webhook-id and body."""
    server, key = alice
    port = free_port()
    made = register(server, key, f"http://127.0.0.1:{port}/hook",
                    attempt={"count": 10, "interval": 1})
    complete_model(server, key, "m1")
    failed = wait_deliveries(server, key, made["id"], 1, 5)
    assert failed[0]["status"] is None and not failed[0]["delivered"], failed
    assert "127.0.0.1" in failed[0]["error"] or "connect" in failed[0]["error"].lower(), failed
    server.stop()
    receiver = receivers(port=port)
    assert receiver.posts() == []
    server.start()
    posts = receiver.wait_for(1, 5)
    assert posts[0].json()["name"] == "m1" and posts[0].webhook_id == failed[0]["event_id"]
    wait_until(lambda: any(a["delivered"] for a in deliveries(server, key, made["id"])), 5,
               "a delivered attempt in the log")
    log = deliveries(server, key, made["id"])
    assert len(log) <= 10 and log[-1]["delivered"] and log[-1]["status"] == 200, log
    assert {a["event_id"] for a in log} == {failed[0]["event_id"]}, log
    assert {(r.webhook_id, r.body) for r in receiver.posts()} == \
        {(posts[0].webhook_id, posts[0].body)}, "copies are the same event"


def test_a_delivery_in_flight_at_shutdown_is_sent_again(alice, receivers):
    """SIGTERM while the receiver is still answering: the server stops at once (exit 0)
    and, started again, sends the same event (same webhook-id and body) again."""
    server, key = alice
    receiver = receivers(Reply(200, delay=3))
    made = register(server, key, receiver.url(), attempt={"count": 3, "interval": 1})
    complete_model(server, key, "m1")
    [interrupted] = receiver.wait_for(1, 5)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 2.5, "the stop waited for the receiver"
    server.start()
    _, again = receiver.wait_for(2, 5)
    assert (again.webhook_id, again.body) == (interrupted.webhook_id, interrupted.body)
    log = wait_deliveries(server, key, made["id"], 1, 5)
    assert log[-1]["delivered"] and log[-1]["event_id"] == interrupted.webhook_id, log


def test_deleting_a_callback_drops_its_pending_deliveries(alice, receivers):
    """Two callbacks to a receiver that is down; one is deleted; when the receiver comes up
    the kept one's event arrives and the deleted one's never does."""
    server, key = alice
    port = free_port()
    doomed = register(server, key, f"http://127.0.0.1:{port}/doomed",
                      attempt={"count": 10, "interval": 1})
    kept = register(server, key, f"http://127.0.0.1:{port}/kept",
                    attempt={"count": 10, "interval": 1})
    complete_model(server, key, "m1")
    wait_deliveries(server, key, doomed["id"], 1, 5)
    assert call(server, "DELETE", f"{CALLBACKS}/{doomed['id']}", key).status_code == 200
    problem(call(server, "GET", f"{CALLBACKS}/{doomed['id']}/deliveries", key), 404)
    receiver = receivers(port=port)
    [arrived] = receiver.wait_for(1, 5, "/kept")
    verify_signature(arrived, kept["secret"])
    time.sleep(max(0.0, 3 - (time.monotonic() - receiver.posts()[0].at)))
    assert [r.path for r in receiver.posts()] == ["/kept"], \
        [(r.path, r.webhook_id) for r in receiver.posts()]


def test_redirects_are_not_followed(alice, receivers):
    """A 302 to another receiver: that one never hears of it; the attempt is logged with
    status 302, not delivered."""
    server, key = alice
    elsewhere = receivers()
    redirecting = receivers(Reply(302, location=elsewhere.url("/landed")))
    made = register(server, key, redirecting.url(), attempt={"count": 1, "interval": 1})
    complete_model(server, key, "m1")
    redirecting.wait_for(1, 5)
    [attempt] = wait_deliveries(server, key, made["id"], 1, 5)
    assert (attempt["status"], attempt["delivered"]) == (302, False), attempt
    assert "302" in attempt["error"], attempt
    time.sleep(1)
    assert elsewhere.posts() == [], "the redirect was followed"
    assert len(redirecting.posts()) == 1
