"""One webhook attempt: the body, its signature, the POST (docs/API.md, "Verifying a delivery").

The signature header is ``Engram-Signature: t=<unix seconds>,v1=<hex>``, where ``<hex>`` is
HMAC-SHA256, keyed with the subscription's secret, of ``f"{t}."`` followed by the exact bytes of
the body. A receiver recomputes it over the raw body it got, compares in constant time, and
refuses a ``t`` too far from its clock (a replayed request). :func:`verify` is that recipe.

Each attempt resolves the URL's host once, checks the addresses (webhooks/addresses.py), and
connects to one of those very addresses (:class:`Sender`): the HTTP client never looks the name
up again, so a name that answers a public address to the check and an internal one a moment
later (DNS rebinding) cannot send the worker inside. The request still names the URL's host in
its Host header and, over TLS, in SNI and the certificate check.

Of a failed answer an attempt keeps the status and the standard phrase for it, never the
receiver's words: a body, a reason phrase, or a line the HTTP parser quotes when it cannot
read the answer could echo whatever an internal service says, and the tenant reads attempts.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import ssl
import time
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from webhooks.addresses import InvalidUrl, Target, target_vetted

SIGNATURE_HEADER = "Engram-Signature"
USER_AGENT = "Engram-Webhooks/1"


@dataclass(frozen=True)
class Outcome:
    at: datetime
    ok: bool
    status_code: int | None = None
    error: str = ""
    duration_ms: int = 0
    final: bool = False  # no point retrying (the event is no longer in the feed)


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Engram-Signature`` header value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance: int = 300, now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``tolerance`` seconds of ``now``."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("v1", ""))


def body_of(event, subscription_id) -> bytes:
    document = {
        "id": event.id,
        "cursor": event.cursor,
        "kind": event.kind,
        "tenant_id": event.tenant_id,
        "bucket_id": event.bucket_id,
        "memory_id": event.memory_id,
        "block_id": event.block_id,
        "at": event.at,
        "data": event.payload,
        "subscription_id": subscription_id,
    }
    return json.dumps(document, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


class _PinnedBackend(httpcore.SyncBackend):
    """httpcore's sockets, connected to the addresses vetted for a host instead of its name."""

    def __init__(self) -> None:
        super().__init__()
        self.pins: dict[tuple[str, int], tuple[str, ...]] = {}

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = self.pins.get((host, port))
        if not addresses:
            # Every attempt pins its target before sending; a host without one was not checked.
            raise httpcore.ConnectError(f"no checked address for {host}:{port}")
        for address in addresses[:-1]:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                continue  # the next address the name answered, as a resolver's caller would
        return super().connect_tcp(addresses[-1], port, timeout, local_address, socket_options)


class _PinnedTransport(httpx.HTTPTransport):
    def __init__(self, backend: _PinnedBackend) -> None:
        super().__init__()
        # httpx 0.28 takes no network backend, so the pool it built is replaced by one that uses
        # ours, with httpx's default certificate checks. (The tests of webhooks/addresses.py fail
        # if this stops connecting to the pinned address.)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            network_backend=backend,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
        )


class Sender:
    """The worker's HTTP client for a run of attempts: no redirects (a receiver could otherwise
    send the worker to an address never checked), no proxy from the environment, and every
    connection made to an address :func:`post` vetted for that attempt's host."""

    def __init__(self) -> None:
        self._backend = _PinnedBackend()
        self.client = httpx.Client(
            transport=_PinnedTransport(self._backend),
            timeout=settings.ENGRAM_WEBHOOKS_TIMEOUT,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
        )

    def pin(self, target: Target) -> None:
        self._backend.pins[(target.host, target.port)] = target.addresses

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()


def post(sender: Sender, *, delivery, event) -> Outcome:
    """POST ``event`` for ``delivery``; never raises. The URL is checked again (a host name may
    resolve elsewhere since the subscription was saved), and the connection goes to an address
    that check vetted."""
    started = time.monotonic()
    at = timezone.now()
    if event is None:
        return Outcome(at=at, ok=False, error="the event is no longer in the change feed (retention)", final=True)
    subscription = delivery.subscription
    try:
        target = target_vetted(subscription.url)
    except InvalidUrl as exc:
        return Outcome(at=at, ok=False, error=f"refused: {exc.message}")
    sender.pin(target)
    body = body_of(event, subscription.pk)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(subscription.secret, body, int(time.time())),
        "Engram-Event-Id": str(event.id),
        "Engram-Delivery-Id": str(delivery.pk),
        "Engram-Delivery-Attempt": str(delivery.attempts + 1),
    }
    try:
        # Streamed and closed unread: nothing of the answer but its status is wanted.
        with sender.client.stream("POST", subscription.url, content=body, headers=headers) as response:
            status = response.status_code
    except Exception as exc:
        return Outcome(
            at=at, ok=False, error=_failure(exc, urlsplit(subscription.url).hostname), duration_ms=_ms(started)
        )
    ok = 200 <= status < 300
    return Outcome(at=at, ok=ok, status_code=status, error="" if ok else _status_text(status), duration_ms=_ms(started))


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _failure(exc: Exception, host: str | None) -> str:
    """The kind of a failed attempt, in words that cannot come from the receiver: the exception's
    type, and the errno or TLS reason code beneath it (its message may quote the answer)."""
    reason = type(exc).__name__
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError) and cause.reason:
            reason += f" {cause.reason}"
            break
        if isinstance(cause, OSError) and cause.errno in errno.errorcode:
            reason += f" {errno.errorcode[cause.errno]}"
            break
        cause = cause.__cause__ or cause.__context__
    return f"{reason} ({host})"


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
