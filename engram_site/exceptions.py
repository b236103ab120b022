"""One place where domain errors become HTTP answers.

Every error body has the same shape: ``{"detail": str, "code": str}`` plus
``"errors": {field: [messages]}`` for validation failures.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.views import defaults
from psycopg import errors as pg_errors
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class DomainError(Exception):
    """Base class for errors raised by services and selectors."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, extra: dict | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.extra = extra or {}


class NotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


class Conflict(DomainError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class Forbidden(DomainError):
    status_code = status.HTTP_403_FORBIDDEN
    code = "forbidden"


class ServiceUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "unavailable"


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        super().__init__(f"The request body is larger than {limit} bytes (ENGRAM_MAX_BODY_BYTES).")


# SQLSTATE class 40 (psycopg maps deadlocks and serialization failures to their own classes).
ROLLED_BACK = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.TransactionRollback)


def rolled_back_by_concurrency(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled the transaction back to resolve a deadlock or a
    serialization failure: the request can be retried as it is."""
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, ROLLED_BACK)


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (restarting, failing over),
    as opposed to a query that is wrong or a transaction that lost a race."""
    if rolled_back_by_concurrency(exc):
        return False
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DatabaseError) and "connection" in str(exc).lower()
    )


def api_exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        # Django refuses to read a body over DATA_UPLOAD_MAX_MEMORY_SIZE; without this it would
        # answer its own HTML 400 page.
        exc = RequestTooLarge()
    if isinstance(exc, DomainError):
        return Response({"detail": exc.message, "code": exc.code, **exc.extra}, status=exc.status_code)
    if rolled_back_by_concurrency(exc):
        # A deadlock or serialization failure: nothing of the request was kept.
        return Response(
            {"detail": "The request collided with a concurrent change and was rolled back; retry it.", "code": "retry"},
            status=status.HTTP_409_CONFLICT,
        )
    if database_unavailable(exc):
        # The database is unreachable (restarting, failing over): a clear, retryable answer.
        response = Response(
            {"detail": "The database is temporarily unavailable; retry shortly.", "code": "database_unavailable"},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "2"
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = {"detail": _first_message(errors), "code": "invalid", "errors": errors}
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        code = getattr(detail, "code", None) or exc.default_code
        response.data = {"detail": str(detail), "code": code}
    return response


def _first_message(errors) -> str:
    """A human-readable summary of the first validation error, e.g. "content: This field is required."."""
    path = []
    node = errors
    while True:
        if isinstance(node, dict) and node:
            key, node = next(iter(node.items()))
            path.append(str(key))
        elif isinstance(node, list) and node:
            # Lists of per-item errors hold {} for valid items.
            nonempty = [(i, n) for i, n in enumerate(node) if n]
            if not nonempty:
                break
            index, node = nonempty[0]
            if isinstance(node, (dict, list)):
                path.append(str(index))
        else:
            break
    message = str(node) if node else "Invalid input."
    prefix = ".".join(p for p in path if p != "non_field_errors")
    return f"{prefix}: {message}" if prefix else message


# Django's own error pages, for requests that never reach a DRF view: a URL under /api/ that
# matches no route, or an exception outside DRF's handling. API clients get the same JSON
# shape as from every other error; the admin keeps Django's pages.


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "No such endpoint.", "code": "not_found"}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Internal server error.", "code": "server_error"}, status=500)
    return defaults.server_error(request)


def bad_request(request, exception=None):
    # Django answers this itself for a SuspiciousOperation raised outside a view (a body over
    # DATA_UPLOAD_MAX_MEMORY_SIZE read by middleware, a disallowed Host).
    if request.path.startswith("/api/"):
        if isinstance(exception, RequestDataTooBig):
            too_large = RequestTooLarge()
            return JsonResponse({"detail": str(too_large.detail), "code": "too_large"}, status=413)
        return JsonResponse({"detail": "Bad request.", "code": "bad_request"}, status=400)
    return defaults.bad_request(request, exception)
