"""HTTP servers of a test inside its own process, on a free loopback port: a receiver for
webhooks, a fake OpenAI-compatible chat-completions endpoint, a stub of Engram for the client."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """An HTTP server of a test on a free loopback port, serving ``handler`` (a
    ``BaseHTTPRequestHandler``) in a thread while used as a context manager. ``port``: a
    given one instead (a receiver that comes up where a client was told to send)."""

    def __init__(self, handler, port: int = 0):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        # A short poll: shutdown() waits for it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeLLM(LoopbackServer):
    """A chat-completions endpoint on a free loopback port, answering from ``reply(body)``
    (``(status, content)``); the requests it got are in ``requests``. Use it as a context
    manager."""

    def __init__(self, reply):
        self.reply = reply
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, content = fake.reply(body)
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"
