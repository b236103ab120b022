"""One place where domain errors become HTTP answers.

Every error body has the same shape: ``{"detail": str, "code": str}`` plus
``"errors": {field: [messages]}`` for validation failures.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
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


def api_exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response({"detail": exc.message, "code": exc.code, **exc.extra}, status=exc.status_code)
    if isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DatabaseError) and "connection" in str(exc).lower()
    ):
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
