"""Writing the audit log. Every mutation by an operator or an API token calls
:func:`audit_record` once: API views right after their service call, console
actions inside the service's transaction (merges and deletes are audited in the
same transaction as the change, so one never commits without the other)."""

from __future__ import annotations

import ipaddress
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Q

from audit.models import ActorKind, AuditEvent

# An event keeps the first ids of a bulk change and the total count.
OBJECT_IDS_MAX = 100
# What an erased text becomes in the details that quoted it (audit_scrub).
ERASED = "[erased]"
# Details quote a text whole or cut to its first characters (an operator's memory delete keeps
# 200, a duplicate merge 2,000): a quote this long or longer that begins an erased text is one.
QUOTE_MIN = 32
REQUEST_ID_HEADERS = ("HTTP_X_REQUEST_ID", "HTTP_X_CORRELATION_ID")


@dataclass(frozen=True)
class Actor:
    """Who did it: an operator (Django user), an API token, or the system."""

    kind: str
    id: str = ""
    label: str = ""
    ip_address: str | None = None
    request_id: str = ""

    @classmethod
    def operator(cls, user, request=None) -> Actor:
        return cls(ActorKind.OPERATOR, str(user.pk), user.get_username(), *_request_meta(request))

    @classmethod
    def token(cls, token, request=None) -> Actor:
        """``token``: a ``tenants.models.ApiToken`` (audit sits below tenants and does not import it)."""
        return cls(ActorKind.TOKEN, str(token.pk), token.prefix, *_request_meta(request))

    @classmethod
    def system(cls, label: str = "system") -> Actor:
        return cls(ActorKind.SYSTEM, "", label)


def _request_meta(request) -> tuple[str | None, str]:
    if request is None:
        return None, ""
    meta = getattr(request, "META", {})
    address = meta.get("REMOTE_ADDR")
    try:
        address = str(ipaddress.ip_address(address)) if address else None
    except ValueError:
        address = None
    request_id = next((meta[h] for h in REQUEST_ID_HEADERS if meta.get(h)), "")
    return address, str(request_id)[:100]


def request_actor(request) -> Actor:
    """The actor behind a request: its API token, else its logged-in operator."""
    token = getattr(request, "auth", None)
    # The API's only authentication yields an ApiToken (tenants.auth); audit cannot import
    # that model (it sits below tenants), so it recognises one by the fields it records.
    if token is not None and hasattr(token, "prefix") and hasattr(token, "tenant_id"):
        return Actor.token(token, request)
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False) and getattr(user, "pk", None) is not None:
        return Actor.operator(user, request)
    return Actor.system("anonymous")


def audit_record(
    *,
    actor: Actor,
    action: str,
    tenant,
    object_type: str,
    object_ids: Iterable,
    details: dict | None = None,
) -> AuditEvent:
    """Store one audit event. ``object_ids`` may be long (a batch of 1,000): the
    first :data:`OBJECT_IDS_MAX` are kept, ``object_count`` has the total."""
    ids = [str(i) for i in object_ids]
    return AuditEvent.objects.create(
        actor_kind=actor.kind,
        actor_id=actor.id[:64],
        actor_label=actor.label[:200],
        tenant_id=tenant.pk if tenant is not None else None,
        action=action[:64],
        object_type=object_type[:64],
        object_ids=ids[:OBJECT_IDS_MAX],
        object_count=len(ids),
        details=details or {},
        request_id=actor.request_id,
        ip_address=actor.ip_address,
    )


def audit_record_per_tenant(
    *, actor: Actor, action: str, object_type: str, rows: Sequence, details: Callable[[list], dict]
) -> None:
    """One event per tenant for a change to several rows (an operator's selection may span
    tenants): each tenant's event lists its own rows' ids, with ``details(its rows)``. The rows
    are model instances with ``pk``, ``tenant_id`` and ``tenant``."""
    for tenant_id in dict.fromkeys(row.tenant_id for row in rows):
        mine = [row for row in rows if row.tenant_id == tenant_id]
        audit_record(
            actor=actor, action=action, tenant=mine[0].tenant, object_type=object_type,
            object_ids=[row.pk for row in mine], details=details(mine),
        )  # fmt: skip


def audit_scrub(
    *, tenant, texts: Iterable[str], object_ids: Iterable = (), actions: Iterable[str] = (), where: Q | None = None
) -> int:
    """Replace ``texts`` wherever the details of ``tenant``'s events about ``object_ids``, or of
    ``actions``, quote them — whole, or cut to their first :data:`QUOTE_MIN` or more characters —
    with :data:`ERASED`. The events stay (what was done, to which ids, by whom); what the erased
    rows said goes. ``actions`` reaches the events that name erased things by what they were
    called rather than by an erased row's id (a renamed entity or topic): their names are quoted
    whole; ``where`` reaches events by their details (an app's own record of what it did).
    Returns the number of events changed. For an erasure, inside its transaction."""
    ids = [str(i) for i in object_ids]
    actions = sorted(set(actions))
    quotes = sorted({t for t in texts if t})
    if not (ids or actions or where is not None) or not quotes:
        return 0
    changed = 0
    # No index serves object_ids: the tenant's events are read through audit_tenant_time (and
    # those of ``actions`` alone through audit_tenant_action_time).
    about = Q(object_ids__has_any_keys=ids) if ids else Q(pk__in=[])
    if where is not None:
        about |= where
    events = AuditEvent.objects.for_tenant(tenant).filter(about | Q(action__in=actions)).only("id", "details")
    for event in events.iterator(chunk_size=500):
        details = _scrubbed(event.details, quotes)
        if details != event.details:
            AuditEvent.objects.filter(pk=event.pk).update(details=details)
            changed += 1
    return changed


def _scrubbed(value, quotes: list[str]):
    if isinstance(value, str):
        return ERASED if _quotes(value, quotes) else value
    if isinstance(value, list):
        return [_scrubbed(v, quotes) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, quotes) for k, v in value.items()}
    return value


def _quotes(text: str, quotes: list[str]) -> bool:
    """Whether ``text`` is one of ``quotes`` (sorted), or the start of one and QUOTE_MIN long."""
    # Every quote that starts with ``text`` sorts at or right after where ``text`` would go.
    i = bisect_left(quotes, text)
    if i == len(quotes):
        return False
    return quotes[i] == text or (len(text) >= QUOTE_MIN and quotes[i].startswith(text))
