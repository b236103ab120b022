"""An ASGI application served from WSGI views: one event loop per process, in a thread.

The MCP SDK's streamable HTTP transport is an ASGI application, and its session manager must be
running (a task group held open for the process's life) before it answers. Engram is served by
gunicorn's threaded WSGI workers, so each worker process keeps one event loop in a daemon
thread, enters the session manager there once, and a request thread hands each request to that
loop and waits for the whole answer. That suits the stateless, JSON-answering mode the endpoint
runs in, where a POST is one exchange with one complete body; nothing here streams.

Blocking work the application hands off with ``loop.run_in_executor(None, ...)`` (the tools'
calls into Django) runs on a fixed number of threads of the loop's own, which live as long as
the process: each keeps its database connection between calls, so MCP adds at most that many
connections per process, reused, rather than one per short-lived thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message

# The ASGI application and the async context that must be entered before it answers (the
# session manager's task group).
Served = tuple[ASGIApp, contextlib.AbstractAsyncContextManager]


@dataclass
class Reply:
    status: int = 500
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


class AsgiHost:
    """Runs the application that ``build`` makes on an event loop in a thread of this process.

    The loop starts with the first request, not at import: gunicorn imports the application
    before it forks its workers only with ``--preload``, and a thread does not survive a fork,
    so a host that finds itself in a new process starts a loop of its own.
    """

    def __init__(self, build: Callable[[], Served], *, threads: int, name: str = "asgi-host"):
        self._build = build
        self._threads = threads
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: ASGIApp | None = None
        self._pid: int | None = None

    def call(self, scope: dict, body: bytes) -> Reply:
        """Send one request with its complete ``body`` and wait for the complete reply."""
        loop, app = self._started()
        return asyncio.run_coroutine_threadsafe(_exchange(app, scope, body), loop).result()

    def _started(self) -> tuple[asyncio.AbstractEventLoop, ASGIApp]:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                ready: concurrent.futures.Future[ASGIApp] = concurrent.futures.Future()
                loop = asyncio.new_event_loop()
                loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix=f"{self._name}-sync")
                )
                threading.Thread(target=self._run, args=(loop, ready), name=self._name, daemon=True).start()
                self._app = ready.result()  # raises what starting raised
                self._loop, self._pid = loop, os.getpid()
            assert self._app is not None
            return self._loop, self._app

    def _run(self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(self._serve(ready))

    async def _serve(self, ready: concurrent.futures.Future) -> None:
        try:
            app, running = self._build()
            async with running:
                ready.set_result(app)
                # Held open for the life of the process: the thread is a daemon and ends with it.
                await asyncio.Event().wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise


async def _exchange(app: ASGIApp, scope: dict, body: bytes) -> Reply:
    reply = Reply()
    answered = asyncio.Event()
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        # Asked again, the application is listening for the client to go away: it does not,
        # until the answer is complete.
        await answered.wait()
        return {"type": "http.disconnect"}

    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    try:
        await app(scope, receive, send)
    finally:
        answered.set()
    reply.body = b"".join(chunks)
    return reply
