"""What the synchronous and the asynchronous client share: configuration, how a call is
described (:class:`Call`), how an answer becomes a result or an exception, and when a failed
call is sent again (:class:`RetryPolicy`)."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Generic, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit

import anyio
import httpx

from engram_client import errors
from engram_client.models import Block, SearchResult, WriteResult

__version__ = "0.1.0"

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0
API_PREFIX = "/api/v1/"
NDJSON = "application/x-ndjson"

T = TypeVar("T")
Id = str | uuid.UUID
# What import_bucket reads: objects, text or bytes lines, a path, or a binary file. The async
# client also takes an async iterable (the sync client is generated with ``JsonLines``).
JsonLine = dict[str, Any] | str | bytes
JsonLines = Iterable[JsonLine] | str | os.PathLike[str] | IO[bytes]
AsyncJsonLines = AsyncIterable[JsonLine] | JsonLines


class _Unset:
    """The default of a ``PATCH`` field: not sent (``None`` is sent, as ``null``, and clears)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


def resolve_config(base_url: str | None, token: str | None) -> tuple[str, str]:
    """The API root (``…/api/v1/``) and the token, from the arguments or ``ENGRAM_URL`` /
    ``ENGRAM_TOKEN``. A URL given with or without ``/api/v1`` is the same server."""
    url = (base_url or os.environ.get("ENGRAM_URL") or DEFAULT_URL).strip().rstrip("/")
    url = url.removesuffix("/api/v1")
    token = token or os.environ.get("ENGRAM_TOKEN")
    if not token:
        raise errors.EngramError("No API token: pass token= or set ENGRAM_TOKEN.")
    return url + API_PREFIX, token


def default_headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "User-Agent": f"engram-client/{__version__} httpx/{httpx.__version__}",
    }


# --- describing a call ---------------------------------------------------------------------------


@dataclass
class Call(Generic[T]):
    """One API request and how to read its answer. ``idempotent``: sending it twice does
    what sending it once does, so a call that got no answer, or a 503, may be sent again."""

    method: str
    path: str
    params: dict[str, str] | None = None
    json: Any = None
    parse: Callable[[Any], T] = field(default=lambda body: body)  # type: ignore[assignment]
    idempotent: bool | None = None
    replayable: bool = True  # False: the body is a stream, read once; never sent again
    headers: dict[str, str] | None = None  # sent on top of the client's own (If-Match)

    def __post_init__(self) -> None:
        if self.idempotent is None:
            self.idempotent = self.method in ("GET", "HEAD", "PUT", "DELETE")


def path(*parts: Id) -> str:
    """A path under ``/api/v1/`` with each id quoted, so no id can reach another endpoint."""
    return "/".join(quote(str(part), safe="") for part in parts)


def query(**params: Any) -> dict[str, str]:
    """Query parameters as the API reads them: ``None`` left out, flags ``true``/``false``,
    lists comma-separated, datetimes in ISO 8601, objects (a metadata filter) as JSON."""
    out: dict[str, str] = {}
    for name, value in params.items():
        if value is None or value is UNSET:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, datetime):
            out[name] = value.isoformat()
        elif isinstance(value, (list, tuple, set)):
            out[name] = ",".join(str(v) for v in value)
        elif isinstance(value, dict):
            out[name] = json.dumps(jsonable(value), separators=(",", ":"))
        else:
            out[name] = str(value)
    return out


def body(*, drop_none: bool = True, **fields: Any) -> dict[str, Any]:
    """A JSON body from keyword arguments: ``UNSET`` left out, and ``None`` too unless
    ``drop_none`` is false (a ``PATCH``, where ``null`` clears a field)."""
    return {
        name: jsonable(value)
        for name, value in fields.items()
        if value is not UNSET and not (drop_none and value is None)
    }


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def next_params(page: dict[str, Any]) -> dict[str, str] | None:
    """The query of a page's ``next`` link (its cursor or offset), or ``None`` on the last
    page. Only the query is taken: the link's host is the server's view of itself, which
    behind a proxy is not the address this client uses."""
    link = page.get("next") if isinstance(page, dict) else None
    if not link:
        return None
    return dict(parse_qsl(urlsplit(link).query, keep_blank_values=True))


def ndjson_line(item: Any) -> bytes:
    """One line of an import body: a dict is written as JSON, text and bytes as they are."""
    if isinstance(item, bytes):
        line = item
    elif isinstance(item, str):
        line = item.encode("utf-8")
    else:
        line = json.dumps(jsonable(item), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return line if line.endswith(b"\n") else line + b"\n"


def ndjson_lines(items: Iterable[Any]) -> Iterator[bytes]:
    for item in items:
        yield ndjson_line(item)


async def andjson_lines(items: AsyncIterable[Any] | Iterable[Any]) -> AsyncIterator[bytes]:
    """:func:`ndjson_lines` for an asynchronous body, from an async or a plain iterable."""
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield ndjson_line(item)
    else:
        for item in items:
            yield ndjson_line(item)


def write_call(bucket_id: Id, payload: dict[str, Any], *, parse: Callable[[Any], T]) -> Call[T]:
    return Call("POST", path("buckets", bucket_id, "memories"), json=payload, parse=parse)


def write_results(answer: dict[str, Any]) -> list[WriteResult]:
    return [WriteResult.from_api(row) for row in answer["results"]]


def search_call(bucket_id: Id, fields: dict[str, Any]) -> Call[SearchResult]:
    # A search is a read sent as POST (its filters do not fit a query string): safe to repeat.
    return Call("POST", path("buckets", bucket_id, "search"), json=fields, parse=SearchResult.from_api,
                idempotent=True)  # fmt: skip


def block_call(
    method: str,
    bucket_id: Id,
    label: str,
    agent_id: str | None,
    *,
    json: Any = None,
    if_match: Any = None,
    create_only: bool = False,
) -> Call[Any]:
    """A request on one memory block. A conditional write is never sent twice: the second
    sending of a change that went through would find its own version and answer 412."""
    headers: dict[str, str] = {}
    if if_match is not None:
        headers["If-Match"] = if_match if isinstance(if_match, str) else str(if_match.etag)
    if create_only:
        headers["If-None-Match"] = "*"
    parse = (lambda body: None) if method == "DELETE" else Block.from_api
    return Call(method, path("buckets", bucket_id, "blocks", label), params=query(agent_id=agent_id) or None,
                json=json, parse=parse, headers=headers or None,
                idempotent=method == "GET")  # fmt: skip


def search_across_call(fields: dict[str, Any]) -> Call[SearchResult]:
    return Call("POST", "search", json=fields, parse=SearchResult.from_api, idempotent=True)


def file_chunks(handle: Any, size: int = 1 << 16) -> Iterator[bytes]:
    """A file's bytes in pieces, for a streamed body (a text file is encoded as UTF-8)."""
    while chunk := handle.read(size):
        yield chunk.encode("utf-8") if isinstance(chunk, str) else chunk


async def afile_chunks(handle: Any, size: int = 1 << 16) -> AsyncIterator[bytes]:
    """:func:`file_chunks` for an asynchronous body (the reads are short and local)."""
    for chunk in file_chunks(handle, size):
        yield chunk


# --- answers -------------------------------------------------------------------------------------


def decode(response: httpx.Response) -> Any:
    """The JSON body of an answer (``None`` for 204), or its text when it is not JSON."""
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def raise_for_status(response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise errors.error_for(response.status_code, decode(response), dict(response.headers))


def transport_error(exc: httpx.TransportError, method: str, url: str) -> errors.APIConnectionError:
    cls = errors.APITimeoutError if isinstance(exc, httpx.TimeoutException) else errors.APIConnectionError
    return cls(f"{method} {url}: {type(exc).__name__}: {exc}".rstrip(": "))


# --- retries -------------------------------------------------------------------------------------

# Failures after which the server did nothing: the request never left (connection refused),
# it was throttled before any work, or PostgreSQL rolled it back (409 "retry"). Sending
# such a call again is safe whatever its method.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Answers worth waiting out, for calls that may be repeated: the database is away for a
# moment (503), or a proxy in front of Engram could not reach it (502, 504).
_TRANSIENT_STATUSES = {502, 503, 504}


@dataclass
class RetryPolicy:
    """``retries`` further attempts after the first, ``backoff`` × 2ⁿ seconds apart with
    jitter (half to all of it), or what ``Retry-After`` says; a wait longer than
    ``max_backoff`` is not waited: the error is raised instead."""

    retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 30.0

    def delay(self, attempt: int, call: Call[Any], *, response: httpx.Response | None = None,
              exc: Exception | None = None) -> float | None:  # fmt: skip
        """Seconds to wait before attempt ``attempt + 1``, or ``None``: do not retry."""
        if attempt >= self.retries or not call.replayable:
            return None
        if exc is not None:
            if not (isinstance(exc, _NOT_SENT) or (call.idempotent and isinstance(exc, httpx.TransportError))):
                return None
            retry_after = None
        elif response is not None:
            status = response.status_code
            rolled_back = status == 409 and _code(response) == "retry"
            if not (status == 429 or rolled_back or (call.idempotent and status in _TRANSIENT_STATUSES)):
                return None
            retry_after = errors.parse_retry_after(response.headers.get("retry-after"))
        else:
            return None
        if retry_after is None:
            step = min(self.max_backoff, self.backoff * 2**attempt)
            return random.uniform(step / 2, step)
        return retry_after if retry_after <= self.max_backoff else None


def sleep(seconds: float) -> None:
    """The pause between two attempts of a call (:func:`asleep` in the async client)."""
    time.sleep(seconds)


async def asleep(seconds: float) -> None:
    await anyio.sleep(seconds)


def _code(response: httpx.Response) -> str | None:
    try:
        payload = response.json()
    except ValueError:
        return None
    return payload.get("code") if isinstance(payload, dict) else None
