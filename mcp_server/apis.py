"""``POST /mcp``: one MCP message (JSON-RPC) in, its answer out.

The request is authenticated and throttled here like any API request — a missing or bad token
is the API's 401, a busy token its 429 — and then handed, body and headers as they came, to
the MCP server (mcp_server/server.py), whose answer goes back as it is.
"""

from __future__ import annotations

import json

from django.http import HttpResponse, JsonResponse
from django.http.request import split_domain_port
from drf_spectacular.utils import extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from mcp_server.server import host
from tenants.auth import client_address
from tenants.models import ApiToken


class HoldsToken(BasePermission):
    """Any valid token may talk MCP: each tool's API call checks the scope it needs."""

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, ApiToken)


class JsonAnswers(BaseContentNegotiation):
    """The endpoint's own answers (errors) are JSON, whatever the Accept header: an MCP client
    accepts JSON and event streams, or event streams alone for a GET, and is owed a 401 or a 405
    rather than a 406."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class McpApi(APIView):
    permission_classes = [HoldsToken]
    # The tools' own API requests count against the tenant's rate quotas, not the envelope.
    quota_exempt = True
    # Nor is the envelope a write (engram_site/replica.py): each tool's own API request that
    # writes notes its tenant for read-your-writes; a search through MCP then waits only for those.
    replica_reads = True
    parser_classes: list = []  # the body goes to the MCP server as it came
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonAnswers

    @extend_schema(exclude=True)  # JSON-RPC, described in docs/API.md rather than the OpenAPI schema
    def post(self, request):
        refused = _id_refused(request.body)
        if refused is not None:
            return refused
        reply = host.call(_scope(request), request.body)
        response = HttpResponse(reply.body, status=reply.status)
        for name, value in reply.headers:
            if name.lower() not in ("content-length", "transfer-encoding"):
                response[name] = value
        return response


def _id_refused(body: bytes) -> HttpResponse | None:
    """The answer to a message whose ``id`` is neither a string nor an integer (MCP: "a string
    or integer", never null), or None. The SDK reads such a message (an object, a float, null or
    a boolean as its id) as a notification and answers 202 without a body, so the caller would
    wait for an answer that never comes; it is an invalid request."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None  # not JSON: the SDK answers the parse error
    if not isinstance(message, dict) or "id" not in message:
        return None
    request_id = message["id"]
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return None
    error = {"code": -32600, "message": "Invalid request: the id must be a string or an integer."}
    return JsonResponse({"jsonrpc": "2.0", "id": None, "error": error}, status=400)


def _scope(request) -> dict:
    """The ASGI request of a Django request (the body is sent separately)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()],
        # The address failures are counted by (behind a trusted proxy, the client it forwards).
        "client": (client_address(request), 0),
        "server": (split_domain_port(request.get_host())[0], int(request.get_port())),
    }
