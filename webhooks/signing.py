"""One webhook attempt: the body, its signature, the POST (docs/API.md, "Verifying a delivery").

The signature header is ``Engram-Signature: t=<unix seconds>,v1=<hex>``, where ``<hex>`` is
HMAC-SHA256, keyed with the subscription's secret, of ``f"{t}."`` followed by the exact bytes of
the body. A receiver recomputes it over the raw body it got, compares in constant time, and
refuses a ``t`` too far from its clock (a replayed request). :func:`verify` is that recipe.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from webhooks.addresses import InvalidUrl, url_check

SIGNATURE_HEADER = "Engram-Signature"
USER_AGENT = "Engram-Webhooks/1"
# How much of the receiver's answer an attempt keeps.
ANSWER_LIMIT = 300


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
        "at": event.at,
        "data": event.payload,
        "subscription_id": subscription_id,
    }
    return json.dumps(document, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


def http_client() -> httpx.Client:
    # No redirects: a receiver could otherwise send the worker to an address the URL check refused.
    return httpx.Client(
        timeout=settings.ENGRAM_WEBHOOKS_TIMEOUT, follow_redirects=False, headers={"User-Agent": USER_AGENT}
    )


def post(client: httpx.Client, *, delivery, event) -> Outcome:
    """POST ``event`` for ``delivery``; never raises. The URL is checked again (a host name may
    resolve elsewhere since the subscription was saved)."""
    started = time.monotonic()
    at = timezone.now()
    if event is None:
        return Outcome(at=at, ok=False, error="the event is no longer in the change feed (retention)", final=True)
    subscription = delivery.subscription
    try:
        url_check(subscription.url)
    except InvalidUrl as exc:
        return Outcome(at=at, ok=False, error=f"refused: {exc.message}")
    body = body_of(event, subscription.pk)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(subscription.secret, body, int(time.time())),
        "Engram-Event-Id": str(event.id),
        "Engram-Delivery-Id": str(delivery.pk),
        "Engram-Delivery-Attempt": str(delivery.attempts + 1),
    }
    try:
        response = client.post(subscription.url, content=body, headers=headers)
    except Exception as exc:
        host = urlsplit(subscription.url).hostname
        return Outcome(at=at, ok=False, error=f"{type(exc).__name__} ({host}): {exc}", duration_ms=_ms(started))
    ok = 200 <= response.status_code < 300
    answer = "" if ok else f"HTTP {response.status_code}: {response.text[:ANSWER_LIMIT]}"
    return Outcome(at=at, ok=ok, status_code=response.status_code, error=answer, duration_ms=_ms(started))


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
