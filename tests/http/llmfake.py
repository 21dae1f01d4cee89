"""A fake OpenAI-compatible model provider on 127.0.0.1 for the agent tests: real HTTP, replies
taken from a script in order (plain text, `sql_query` tool calls, HTTP errors, silence), both as
one `chat.completion` and as streamed `chat.completion.chunk`s, and every request recorded."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def text(content: str) -> dict:
    return {"kind": "text", "content": content}


def sql(query: str) -> dict:
    return {"kind": "tool", "query": query}


def fail(status: int, message: str) -> dict:
    return {"kind": "fail", "status": status, "message": message}


def hang(seconds: float) -> dict:
    return {"kind": "hang", "seconds": seconds}


class FakeLLM:
    def __init__(self) -> None:
        self.replies: list[dict] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    reply = fake.replies.pop(0) if fake.replies else text("unscripted")
                fake.answer(self, body, reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def script(self, *replies: dict) -> None:
        with self.lock:
            self.replies.extend(replies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, body: dict, reply: dict) -> None:
        if reply["kind"] == "hang":
            time.sleep(reply["seconds"])
            return
        if reply["kind"] == "fail":
            error = {"error": {"message": reply["message"], "type": "server_error", "code": None}}
            self.send(handler, reply["status"], "application/json", json.dumps(error).encode())
            return
        if reply["kind"] == "tool":
            call = {"id": f"call_{len(self.requests)}", "type": "function",
                    "function": {"name": "sql_query", "arguments": json.dumps({"query": reply["query"]})}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": reply["content"]}
        if body.get("stream"):
            self.send(handler, 200, "text/event-stream", self.chunks(message))
        else:
            done = {"id": "c", "object": "chat.completion", "model": body.get("model"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            self.send(handler, 200, "application/json", json.dumps(done).encode())

    @staticmethod
    def chunks(message: dict) -> bytes:
        def frame(delta: dict, finish: str | None = None) -> str:
            chunk = {"id": "c", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(chunk)}\n\n"

        out = [frame({"role": "assistant", "content": ""})]
        if "tool_calls" in message:
            call = message["tool_calls"][0]
            arguments = call["function"]["arguments"]
            out.append(frame({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                              "function": {"name": "sql_query", "arguments": ""}}]}))
            for i in range(0, len(arguments), 7):
                out.append(frame({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i:i + 7]}}]}))
            out.append(frame({}, "tool_calls"))
        else:
            words = message["content"].split(" ")
            for i, word in enumerate(words):
                out.append(frame({"content": word + (" " if i < len(words) - 1 else "")}))
            out.append(frame({}, "stop"))
        out.append("data: [DONE]\n\n")
        return "".join(out).encode()

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
