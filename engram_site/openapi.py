"""OpenAPI schema helpers: the error responses every operation documents, page envelopes, and
an extension that lets the schema say what the strict serializers enforce.

The schema is a contract the API fuzz test (tests/system/test_api_fuzz.py) holds the code to: every
status an operation answers must be documented here, with its body's shape.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

from engram_site.fields import StrictSerializer


class Error(serializers.Serializer):
    """The one error body (engram_site/exceptions.py)."""

    detail = serializers.CharField(help_text="what went wrong, for people")
    code = serializers.CharField(help_text="what went wrong, for programs: invalid, parse_error, not_found, …")
    errors = serializers.DictField(
        required=False, help_text="validation failures: field → messages (nested by index for list items)"
    )


_ERRORS = {
    400: "Invalid input (`invalid`, `parse_error` or a domain code); nothing was written.",
    401: "Missing, unknown, revoked or expired token.",
    403: (
        "The token lacks the scope, or is restricted to another bucket; or (`agent_forbidden`) it is held to agents "
        "and may not write as that agent or change a shared memory."
    ),
    404: "Not found, or owned by another tenant (indistinguishable).",
    409: "A name or content collision; or (`retry`) a concurrent change rolled the request back: send it again.",
    410: "(`cursor_expired`) Events after the cursor were deleted by the retention window: the reader missed some.",
    412: (
        "(`precondition_failed`) The If-Match (or If-None-Match) condition does not hold: the object changed "
        "since it was read; the body names its current `version` and `etag`. Nothing was changed."
    ),
    413: "The request body is larger than ENGRAM_MAX_BODY_BYTES.",
    428: (
        "(`precondition_required`) A change of an existing object needs If-Match (its ETag, or *); the body names "
        "its current `version` and `etag`. Nothing was changed."
    ),
    414: f"The URL (path and query string) is longer than {settings.MAX_URL_BYTES:,} bytes (`uri_too_long`).",
    415: "The body is not JSON (Content-Type must be application/json).",
    429: "Rate limited; retry after Retry-After seconds.",
    503: "The database is unavailable; retry after Retry-After seconds.",
}
# Any authenticated operation can answer these (409 `retry`: rolled back by a deadlock; 414:
# engram_site.middleware.UrlLengthMiddleware, before anything else).
_ALWAYS = (401, 403, 409, 414, 429, 503)
# Any operation with a JSON body can answer these.
BODY = (400, 413, 415)


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses of an operation: the given statuses plus those every operation has."""
    return {status: OpenApiResponse(Error, description=_ERRORS[status]) for status in sorted({*statuses, *_ALWAYS})}


def limit_offset_page(name: str, item: serializers.Serializer) -> serializers.Serializer:
    """The envelope of a limit/offset list (engram_site.pagination.LimitOffsetPagination)."""
    return inline_serializer(
        name,
        {
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item,
        },
    )


def cursor_page(name: str, item: serializers.Serializer) -> serializers.Serializer:
    """The envelope of a cursor-paginated list (engram_site.pagination.CreatedCursorPagination)."""
    return inline_serializer(
        name,
        {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item,
        },
    )


class StrictSerializerExtension(OpenApiSerializerExtension):
    """A StrictSerializer refuses unknown fields: its request schema says so."""

    target_class = "engram_site.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if schema.get("description") == StrictSerializer.__doc__:
            del schema["description"]  # inherited by every subclass: not about this one
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
