"""Exceptions raised by the client.

Every error answered by the API becomes an :class:`EngramError` subclass chosen by its HTTP
status, carrying the API's ``code`` (``not_found``, ``duplicate_content``, ``invalid``, …),
its message (``detail``), the status and the whole response body. A request that got no
answer raises :class:`APIConnectionError` (:class:`APITimeoutError` when it timed out).
"""

from __future__ import annotations

from typing import Any


class EngramError(Exception):
    """Base class of every error the client raises."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.body = body
        self.headers = headers or {}

    @property
    def errors(self) -> dict[str, Any]:
        """Per-field messages of a validation error (``{"content": ["This field may not be blank."]}``)."""
        return self.body.get("errors") or {} if isinstance(self.body, dict) else {}

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"{self.message} ({self.code or 'error'}, HTTP {self.status})"


class ValidationError(EngramError):
    """400: a field is wrong (``errors`` says which), the body is not JSON, or a domain rule
    refused it (``same_bucket``, ``invalid_lines``, …)."""


class AuthenticationError(EngramError):
    """401: the token is missing, unknown, revoked or expired."""


class PermissionDenied(EngramError):
    """403: the token lacks the scope, or is restricted to another bucket."""


class NotFound(EngramError):
    """404: missing — or another tenant's, which the API does not tell apart."""


class Conflict(EngramError):
    """409: a name or content collision, or a concurrent change that was rolled back
    (``code == "retry"``)."""

    @property
    def existing_id(self) -> str | None:
        """The memory already holding this content (``code == "duplicate_content"``)."""
        return self.body.get("existing_id") if isinstance(self.body, dict) else None

    @property
    def candidates(self) -> list[dict[str, Any]]:
        """The entities an ambiguous name denotes (``code == "ambiguous_name"``, from
        ``get_profile(name=...)``): ``{"id", "name", "type", "aliases", "mention_count"}``."""
        return (self.body.get("candidates") or []) if isinstance(self.body, dict) else []


class RequestTooLarge(EngramError):
    """413: the body is over the server's limit."""


class RateLimited(EngramError):
    """429: too many requests for this token; ``retry_after`` says how long to wait (seconds)."""

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("retry-after"))


class ServerError(EngramError):
    """5xx: the server failed (500) or is unavailable for a moment (502, 503, 504)."""


class ServiceUnavailable(ServerError):
    """503: the database is unreachable for a moment; retried for reads."""

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("retry-after"))


class APIConnectionError(EngramError):
    """No answer: the server could not be reached, or the connection broke."""


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""


class PreconditionFailed(EngramError):
    """412: the If-Match (or If-None-Match) condition failed — the block changed since it was
    read (or exists already). ``version`` and ``etag`` name its current version: read it again
    and reapply the change. Nothing was changed."""

    @property
    def version(self) -> int | None:
        return self.body.get("version") if isinstance(self.body, dict) else None

    @property
    def etag(self) -> str | None:
        return self.body.get("etag") if isinstance(self.body, dict) else None


class PreconditionRequired(PreconditionFailed):
    """428: changing an existing block needs ``if_match`` (its ``etag``, or ``"*"``)."""


_BY_STATUS: dict[int, type[EngramError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    413: RequestTooLarge,
    428: PreconditionRequired,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(status: int, body: Any, headers: dict[str, str]) -> EngramError:
    """The exception for an error answer of the API (its JSON body, or the raw text)."""
    if isinstance(body, dict):
        message = str(body.get("detail") or f"HTTP {status}")
        code = body.get("code")
    else:
        message = (str(body or "").strip()[:500]) or f"HTTP {status}"
        code = None
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else EngramError)
    return cls(message, code=code, status=status, body=body, headers=headers)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (the API sends seconds; an HTTP date is ignored)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds)
