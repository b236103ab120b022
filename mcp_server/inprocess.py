"""An httpx transport that sends requests to this process's own Django application.

The MCP tools call the REST API through it: a request passes the same middleware,
authentication, scope checks, throttles and exception handling as one from the network, and
only the socket is skipped. Django is synchronous, so each request runs on the event loop's
default executor (mcp_server/bridge.py: a few threads that keep their database connections)
while the loop serves other tool calls.
"""

from __future__ import annotations

import asyncio
import functools

import httpx
from django.core.handlers.wsgi import WSGIHandler


@functools.cache
def _django() -> WSGIHandler:
    # Built on first use: loading the middleware needs the settings, which are ready by then.
    return WSGIHandler()


class InProcessTransport(httpx.AsyncBaseTransport):
    """Requests answered by Engram's WSGI application in this process.

    ``remote_addr`` is the address of the client the request is made for, so that what is
    counted per address (failed authentications) is counted against it, not against the
    server itself.
    """

    def __init__(self, *, remote_addr: str):
        self._wsgi = httpx.WSGITransport(app=_django(), remote_addr=remote_addr)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        status, headers, content = await asyncio.get_running_loop().run_in_executor(None, self._send, request)
        return httpx.Response(status, headers=headers, content=content, request=request)

    def _send(self, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        response = self._wsgi.handle_request(request)
        try:
            # Closing the response ends Django's request (request_finished: the thread's
            # database connection is returned or closed as after any request).
            return response.status_code, response.headers.raw, response.read()
        finally:
            response.close()
