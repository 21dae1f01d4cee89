"""A fake OpenAI-compatible model provider for the agent tests: a real HTTP server on 127.0.0.1
(a free port, a daemon thread) that answers `POST /v1/chat/completions` from a script, and `POST /v1/embeddings` with
`word_vector` of each text (deterministic: texts sharing words are near).

    with FakeLLM() as llm:
        llm.script(tool_call("sql_query", {"query": "SELECT 1"}), text("It is 1."))
        ...  # point the engine at llm.base_url
        llm.requests   # every JSON body received, in order
        llm.headers    # the headers of each, names lower-cased

Replies are consumed one per request; once the script is empty the fallback answers (by default
the text "no scripted reply"; `llm.fallback(reply)` changes it, e.g. to an error that must also
hit any retry). A reply is `text(...)`, `tool_call(...)` (or several with `tool_calls(...)`),
`error(status, message)`, `hang(seconds)`, or `echo(prefix, delay)` (the last user message
back, after `prefix`; for models that ask once per row); a hostile provider's replies are
`raw(status, content_type, body)` (bytes sent verbatim, or a list of pieces sent as chunks) and
`huge(n_bytes)` (a well-formed reply, plain or streamed, n bytes long, written piece by piece);
`llm.reset()` empties the script and restores the fallback, for a fake shared by several tests.
`llm.max_in_flight` is the most requests it was answering at once. Requests with
`"stream": true` are answered as OpenAI streams them: `text/event-stream`, chunked, one
`chat.completion.chunk` per `data:` line, the text split over several deltas, a tool call's
arguments split over several chunks, a last chunk with `finish_reason`, then `data: [DONE]`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_TEXT = "no scripted reply"

# OpenAI's error `type` (and `code`) per HTTP status, for `error()` without explicit ones.
ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def word_vector(text: str, dimensions: int = 64) -> list[float]:
    """The fake embedding of `text`: its words (over two letters) counted, each hashed
    (FNV-1a) to one of `dimensions` places, so texts sharing words are near."""
    vector = [0.0] * dimensions
    for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
        if len(word) <= 2:
            continue
        h = 0xcbf29ce484222325
        for b in word.encode():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        vector[h % dimensions] += 1.0
    return vector


def text(content: str) -> dict:
    """An assistant message with `content`; finish_reason "stop"."""
    return {"kind": "text", "content": content}


def tool_call(name: str, arguments: dict | str, id: str | None = None) -> dict:  # noqa: A002
    """An assistant message calling one tool; `arguments` is JSON-encoded unless already a
    string (so a test can send malformed arguments). `id` defaults to "call_<n>"."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"kind": "tools", "calls": [{"id": id, "name": name, "arguments": args}]}


def tool_calls(*calls: dict) -> dict:
    """One assistant message with several tool calls (OpenAI's parallel tool calls)."""
    return {"kind": "tools", "calls": [c for call in calls for c in call["calls"]]}


def error(status: int, message: str, type: str | None = None,  # noqa: A002
          code: str | None = None) -> dict:
    """An HTTP error with OpenAI's body `{"error": {"message", "type", "param", "code"}}`."""
    default_type, default_code = ERROR_TYPES.get(status, ("server_error", None))
    return {"kind": "error", "status": status, "message": message,
            "type": type or default_type, "code": code if code is not None else default_code}


def echo(prefix: str = "", delay: float = 0.0) -> dict:
    """The text `prefix` + the last user message's content, after `delay` seconds."""
    return {"kind": "echo", "prefix": prefix, "delay": delay}


def raw(status: int, content_type: str, body: bytes | list[bytes]) -> dict:
    """`body` as it is, whatever the request asked: bytes with a Content-Length, or a list of
    pieces each sent (and flushed) as one HTTP chunk. For replies no honest provider sends."""
    return {"kind": "raw", "status": status, "content_type": content_type, "body": body}


def huge(n_bytes: int) -> dict:
    """A reply of about `n_bytes`: a chat completion whose content is that long, or (for a
    streamed request) content deltas adding up to it, sent chunked in pieces so the fake never
    holds it whole. A client that stops reading simply ends it."""
    return {"kind": "huge", "n_bytes": n_bytes}


def hang(seconds: float, then: dict | None = None) -> dict:
    """Say nothing for `seconds` (then answer `then`, by default the default text)."""
    return {"kind": "hang", "seconds": seconds, "then": then}


class FakeLLM:
    """The fake provider. `start()`/`stop()` or use it as a context manager."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        # Bodies of `POST /v1/embeddings`, answered with `word_vector` of each input.
        self.embedding_requests: list[dict] = []
        self._script: list[dict] = []
        self._fallback: dict = text(DEFAULT_TEXT)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self._in_flight = 0
        self.max_in_flight = 0

    # Life cycle.

    def start(self) -> "FakeLLM":
        assert self._server is None, "the fake LLM is already running"
        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        # A short poll interval so that stop() returns at once.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes replies that hang
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> "FakeLLM":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self.port is not None, "the fake LLM is not running"
        return f"http://127.0.0.1:{self.port}/v1"

    # The script.

    def script(self, *replies: dict) -> None:
        """Queues replies, consumed one per chat completion request."""
        with self._lock:
            self._script.extend(replies)

    def fallback(self, reply: dict) -> None:
        """The reply once the script is empty (default: the text "no scripted reply")."""
        with self._lock:
            self._fallback = reply

    def reset(self) -> None:
        """Drops the replies not consumed yet and restores the default fallback (the record of
        requests is kept), for a fake shared by several tests."""
        with self._lock:
            self._script.clear()
            self._fallback = text(DEFAULT_TEXT)

    def forget(self) -> None:
        """Drops the record of requests received, for a long run that never reads it."""
        with self._lock:
            for record in (self.requests, self.headers, self.paths, self.embedding_requests):
                record.clear()

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._lock:
            return len(self._script)

    def _next_reply(self, body: dict, headers: dict[str, str], path: str) -> dict:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.paths.append(path)
            return self._script.pop(0) if self._script else self._fallback

    def _call_id(self) -> str:
        with self._lock:
            return f"call_{next(self._ids)}"

    # Answers.

    def _message(self, reply: dict) -> tuple[dict, str]:
        """The assistant message and finish_reason for a text or tools reply."""
        if reply["kind"] == "text":
            return {"role": "assistant", "content": reply["content"], "refusal": None}, "stop"
        calls = [{"id": call["id"] or self._call_id(), "type": "function",
                  "function": {"name": call["name"], "arguments": call["arguments"]}}
                 for call in reply["calls"]]
        return {"role": "assistant", "content": None, "tool_calls": calls,
                "refusal": None}, "tool_calls"

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict, reply: dict) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            self._answer_now(handler, body, reply)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _answer_now(self, handler: BaseHTTPRequestHandler, body: dict, reply: dict) -> None:
        if reply["kind"] == "echo":
            if self._stopping.wait(reply["delay"]):
                return
            users = [m.get("content") or "" for m in body.get("messages", [])
                     if m.get("role") == "user"]
            reply = text(reply["prefix"] + (users[-1] if users else ""))
        while reply["kind"] == "hang":
            if self._stopping.wait(reply["seconds"]):
                return
            reply = reply["then"] or text(DEFAULT_TEXT)
        if reply["kind"] == "error":
            err = {"error": {"message": reply["message"], "type": reply["type"], "param": None,
                             "code": reply["code"]}}
            _send(handler, reply["status"], "application/json", json.dumps(err).encode())
            return
        if reply["kind"] == "raw":
            if isinstance(reply["body"], (bytes, bytearray)):
                _send(handler, reply["status"], reply["content_type"], bytes(reply["body"]))
            else:
                _send_chunked(handler, reply["status"], reply["content_type"], reply["body"])
            return
        if reply["kind"] == "huge":
            _send_chunked(handler, 200, *_huge_pieces(reply["n_bytes"], bool(body.get("stream"))))
            return
        message, finish = self._message(reply)
        completion_id = f"chatcmpl-fake{len(self.requests)}"
        model = body.get("model", "fake")
        if body.get("stream"):
            _send_stream(handler, _chunks(completion_id, model, message, finish))
            return
        done = {"id": completion_id, "object": "chat.completion", "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                "system_fingerprint": "fp_fake"}
        _send(handler, 200, "application/json", json.dumps(done).encode())


def _pieces(value: str, size: int) -> list[str]:
    return [value[i:i + size] for i in range(0, len(value), size)] or [""]


def _chunks(completion_id: str, model: str, message: dict, finish: str) -> list[bytes]:
    """OpenAI's stream of a message: role first, content or tool-call pieces, finish, [DONE]."""
    created = int(time.time())

    def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
        doc = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
               "model": model, "system_fingerprint": "fp_fake",
               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish_reason}]}
        return f"data: {json.dumps(doc)}\n\n".encode()

    out = []
    if "tool_calls" in message:
        for index, call in enumerate(message["tool_calls"]):
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}
            delta = {"tool_calls": [head]}
            if index == 0:
                delta = {"role": "assistant", "content": None, **delta}
            out.append(chunk(delta))
            for piece in _pieces(call["function"]["arguments"], 9):
                out.append(chunk({"tool_calls": [{"index": index,
                                                  "function": {"arguments": piece}}]}))
    else:
        out.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        content = message["content"]
        # Several deltas of uneven length, as a tokenizer would cut them.
        size = max(1, len(content) // 4)
        for piece in _pieces(content, size):
            out.append(chunk({"content": piece}))
    out.append(chunk({}, finish))
    out.append(b"data: [DONE]\n\n")
    return out


def _send(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True  # the client went away (e.g. it timed out)


def _huge_pieces(n_bytes: int, stream: bool):
    """The content type and the pieces (a generator) of a `huge(n_bytes)` reply."""
    piece = 16 * 1024
    if stream:
        def frames():
            sent = 0
            while sent < n_bytes:
                delta = {"choices": [{"index": 0, "delta": {"content": "x" * piece},
                                      "finish_reason": None}]}
                frame = f"data: {json.dumps(delta)}\n\n".encode()
                sent += len(frame)
                yield frame
            yield b"data: [DONE]\n\n"
        return "text/event-stream; charset=utf-8", frames()

    def document():
        head = b'{"id":"chatcmpl-huge","object":"chat.completion","choices":[{"index":0,' \
               b'"message":{"role":"assistant","content":"'
        tail = b'"},"finish_reason":"stop"}]}'
        yield head
        left = max(0, n_bytes - len(head) - len(tail))
        while left > 0:
            size = min(piece, left)
            yield b"x" * size
            left -= size
        yield tail
    return "application/json", document()


def _send_chunked(handler: BaseHTTPRequestHandler, status: int, content_type: str,
                  pieces) -> None:
    """Each piece as its own HTTP chunk, flushed; a client that leaves ends the reply."""
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for piece in pieces:
            if piece:
                handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


def _send_stream(handler: BaseHTTPRequestHandler, frames: list[bytes]) -> None:
    """Each SSE frame as its own HTTP chunk, flushed, as OpenAI's API does."""
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        for frame in frames:
            handler.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


def _handler_for(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60  # an idle keep-alive connection is dropped after this

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            if path.rstrip("/") == "/v1/embeddings":
                body = json.loads(raw)
                fake.embedding_requests.append(body)
                data = [{"object": "embedding", "index": i, "embedding": word_vector(t)}
                        for i, t in enumerate(body["input"])]
                reply = {"object": "list", "data": data, "model": body.get("model")}
                _send(self, 200, "application/json", json.dumps(reply).encode())
                return
            if path.rstrip("/") != "/v1/chat/completions":
                err = {"error": {"message": f"Unknown request URL: POST {path}",
                                 "type": "invalid_request_error", "param": None,
                                 "code": "unknown_url"}}
                _send(self, 404, "application/json", json.dumps(err).encode())
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"unparsable body": raw.decode("utf-8", "replace")}
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = fake._next_reply(body, headers, path)
            if "unparsable body" in body:
                reply = error(400, "We could not parse the JSON body of your request.")
            fake._answer(self, body, reply)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.split("?", 1)[0].rstrip("/") == "/v1/models":
                models = {"object": "list", "data": [
                    {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]}
                _send(self, 200, "application/json", json.dumps(models).encode())
            else:
                _send(self, 404, "application/json",
                      json.dumps({"error": {"message": "not found", "type": "invalid_request_error",
                                            "param": None, "code": None}}).encode())

        def log_message(self, *args: object) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:
                pass  # a client that vanished mid-request is not the fake's problem

    return Handler
