"""Per-tenant quotas: the limits an operator sets in the console, and the request-rate check.

The limits live in ``Tenant.settings["quotas"]`` (tenants.models.TenantSettings); a missing
or empty one means no limit:

- ``max_memories``: live memories the tenant may hold (checked by memories/quotas.py);
- ``reads_per_minute`` / ``writes_per_minute``: API requests per minute, by the scope the
  request needs (a search is a read);
- ``max_batch``: memories in one write request;
- ``max_document_bytes``: UTF-8 size of one submitted document's text (or of a conversation's
  messages together).

Over a rate the API answers 429 with ``Retry-After``; over a size 403. Both are raised
before the view does anything, so nothing is written, and both are counted in the tenant's
usage (tenants/usage.py) so the console shows them.

Rates are counted in the ``shared`` cache (engram_site/throttle.py's sliding window): one
count for every process with Redis (``REDIS_URL``) or with the embedded default's file
cache, which every process of the machine shares.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

from engram_site.throttle import FailureCounter
from tenants import usage
from tenants.models import ApiToken, Scope, Tenant
from tenants.permissions import required_scope

LIMITS = {
    "max_memories": "live memories",
    "reads_per_minute": "read requests per minute",
    "writes_per_minute": "write requests per minute",
    "max_batch": "memories in one write request",
    "max_document_bytes": "bytes of text in one document or conversation",
}


def quota_limits(tenant: Tenant) -> dict[str, int]:
    """The tenant's limits that are set (positive integers), by name."""
    stored = tenant.setting("quotas") or {}
    return {name: int(stored[name]) for name in LIMITS if isinstance(stored.get(name), int) and stored[name] > 0}


def quota_limit(tenant: Tenant, name: str) -> int | None:
    return quota_limits(tenant).get(name)


def quotas_clean(values: dict) -> dict[str, int]:
    """Validated limits for ``Tenant.settings["quotas"]``: known names, positive integers;
    None or 0 drops the limit. Raises ValueError naming the bad one."""
    cleaned = {}
    for name, value in values.items():
        if name not in LIMITS:
            raise ValueError(f"Unknown quota {name!r} (known: {', '.join(LIMITS)}).")
        if value in (None, 0, ""):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"Quota {name} must be a positive whole number (or empty for no limit).")
        cleaned[name] = value
    return cleaned


class QuotaExceeded(exceptions.PermissionDenied):
    """A request larger than a limit of the tenant: 403, nothing written.

    (A DRF exception, not an engram_site DomainError: DRF loads this module's throttle while
    importing its views, which engram_site.exceptions itself imports.)"""

    def __init__(self, *, tenant: Tenant, name: str, limit: int, asked: int, refusal: str):
        usage.record_refusal(tenant_id=tenant.pk, kind=refusal)
        super().__init__(
            f"Over this tenant's quota: at most {limit} {LIMITS[name]} ({name}); this request needs {asked}.",
            code=f"quota_{name.removeprefix('max_')}",
        )


def quota_check_size(*, tenant: Tenant, name: str, asked: int, refusal: str) -> None:
    """Raise QuotaExceeded when ``asked`` is over the tenant's limit ``name`` (if set)."""
    limit = quota_limit(tenant, name)
    if limit is not None and asked > limit:
        raise QuotaExceeded(tenant=tenant, name=name, limit=limit, asked=asked, refusal=refusal)


class TenantQuotaThrottle(BaseThrottle):
    """Reads and writes per minute per tenant (its quotas), counted across processes.

    Runs after authentication and the scope check (DRF's order), for token requests only; a
    view with ``quota_exempt`` (the MCP envelope, whose tools make API requests of their own)
    is not counted.
    A refused request is not counted, so a client that waits ``Retry-After`` gets through.
    """

    def allow_request(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken) or getattr(view, "quota_exempt", False):
            return True
        kind = "writes" if required_scope(request, view) != Scope.READ else "reads"
        name = f"{kind}_per_minute"
        limit = quota_limit(token.tenant, name)
        if limit is None:
            return True
        counter = FailureCounter(f"quota-{kind}", f"{limit}/min")
        ident = str(token.tenant_id)
        wait = counter.blocked_for(ident)
        if wait:
            usage.record_refusal(tenant_id=token.tenant_id, kind=kind)
            raise exceptions.Throttled(
                wait=wait,
                detail=f"Over this tenant's quota of {limit} {LIMITS[name]} ({name}); retry in {wait} s.",
                code=f"quota_{name}",
            )
        counter.record(ident)
        return True
