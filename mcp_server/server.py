"""The MCP server behind ``/mcp``, and the client each of its tool calls uses.

The tools are the Python client's (``engram_client.mcp``); here each call gets an
``AsyncEngram`` that carries the bearer token of the ``/mcp`` request it serves and reaches the
REST API in-process. What a token may do over MCP is therefore what it may do over the API:
its scopes, its bucket restriction and its tenant are checked by the same views.

A connection may name its default bucket (an id or a name) in an ``X-Engram-Bucket`` header, or
in the URL as ``/mcp?bucket=…`` for a client that can set no header; a tool call that names no
bucket uses it.
"""

from __future__ import annotations

import os

from django.conf import settings
from engram_client import AsyncEngram
from engram_client.mcp import create_server
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings

from mcp_server.bridge import AsgiHost, Served
from mcp_server.inprocess import InProcessTransport


def client_for(ctx: Context) -> AsyncEngram:
    """The API client of one tool call: the token, host and client address of its ``/mcp`` request."""
    request = ctx.request_context.request  # the request as mcp_server.apis handed it over
    return AsyncEngram(
        # The request's own scheme and host: the in-process request passes ALLOWED_HOSTS and the
        # HTTPS settings exactly as the /mcp request did.
        str(request.base_url),
        request.headers["authorization"].split()[1],  # checked by the view: "Bearer <token>"
        # A refusal (429, 503) goes back to the agent at once rather than holding a web thread.
        retries=0,
        transport=InProcessTransport(remote_addr=request.client.host),
    )


def default_bucket_for(ctx: Context) -> str | None:
    """The default bucket the ``/mcp`` request names: its ``X-Engram-Bucket`` header, else its
    ``bucket`` query parameter (UTF-8 in the URL, for a name a header cannot carry)."""
    request = ctx.request_context.request
    return (request.headers.get("x-engram-bucket") or request.query_params.get("bucket") or "").strip() or None


def build() -> Served:
    server = create_server(client_for, default_bucket=default_bucket_for)
    server.streamable_http_app(
        # Stateless, JSON answers: every POST is one complete exchange, whichever web worker
        # takes it, and nothing needs to stream (mcp_server/bridge.py).
        stateless_http=True,
        json_response=True,
        # Host and origin are Django's to check (ALLOWED_HOSTS), and the endpoint takes no
        # cookie: a page that rebinds a name to this server has no token to send.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    )
    manager = server.session_manager
    return manager.handle_request, manager.run()


# As many threads for the tools' calls into Django as a web worker has for requests: each /mcp
# request holds one of those while its tool runs.
host = AsgiHost(build, threads=int(os.environ.get("ENGRAM_WEB_THREADS", "4")), name="mcp")
