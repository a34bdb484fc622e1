"""A chat-completions server on 127.0.0.1 (a thread, port 0) that the LLM judge tests script."""

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# what the server does with a request: ("reply", text), ("status", code), ("status", (code, error message)),
# ("sleep", seconds), ("raw", body)
Action = tuple[str, object]


class ChatServer:
    """Answers POST /v1/chat/completions by ``respond(user message, request number)``; counts the requests.

    Attributes:
        url: the base URL to give the client (``http://127.0.0.1:<port>/v1``).
        calls: requests received.
        headers: the headers of every request.
    """

    def __init__(self):
        self.respond: Callable[[str, int], Action] = lambda text, n: ("reply", '{"verdict": "yes"}')
        self.calls = 0
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    n = server.calls
                    server.calls += 1
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                kind, value = server.respond(body["messages"][-1]["content"], n)
                if kind == "sleep":
                    time.sleep(value)
                    kind, value = "reply", '{"verdict": "yes"}'
                if kind == "status":
                    code, message = value if isinstance(value, tuple) else (value, "scripted failure")
                    self._send(code, json.dumps({"error": {"message": message}}).encode())
                elif kind == "raw":
                    self._send(200, value)
                else:
                    choice = {"index": 0, "message": {"role": "assistant", "content": value}, "finish_reason": "stop"}
                    payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"]}
                    self._send(200, json.dumps(payload | {"choices": [choice]}).encode())

            def _send(self, code, data):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("retry-after-ms", "20")  # the client's backoff honours it: fast retries
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat_server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = ChatServer()
    yield server
    server.close()
