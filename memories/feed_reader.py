"""Reading the change feed: a bucket's events after a cursor (the API), a tenant's (webhooks).

Why not simply ``WHERE id > cursor ORDER BY id``: an identity value is taken when the row is
inserted, not when its transaction commits. Transaction A takes event 11, transaction B
event 12, B commits first; a reader then sees 12, moves its cursor past it, and never sees 11.
So every event carries its transaction's id (``xid``), and a reader is served only the events
of transactions older than the oldest one still running (``pg_snapshot_xmin`` of its
snapshot), in (``xid``, ``id``) order. No transaction can commit an event below that line
later, so a cursor at (``xid``, ``id``) never has an event appear behind it: no gaps, and
no event twice. The price is latency: an event waits until every transaction that started
writing before its own has ended (normally milliseconds; a long import or merge holds the
feed back until it ends).

A cursor is ``"<xid>.<id>"`` of the last event served; clients treat it as opaque.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from engram_site.exceptions import DomainError
from memories.models import MemoryEventTrim
from tenants.models import ApiToken, Bucket, Tenant
from tenants.selectors import bucket_get

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
# ASCII digits only: \d would take any script's digits, and one position many spellings.
_CURSOR = re.compile(r"([0-9]{1,19})\.([0-9]{1,19})")
START = (0, 0)

# What a reader may see of the feed: transactions older than every running one (see above),
# or the reader's own (a caller reading, inside one transaction, events it wrote there).
_SETTLED = """(e.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
              OR e.xid = pg_current_xact_id_if_assigned()::text::bigint)"""


class CursorGone(DomainError):
    """The events after this cursor have been trimmed (the reader missed some)."""

    status_code = 410
    code = "cursor_expired"


@dataclass(frozen=True)
class Event:
    id: int
    xid: int
    tenant_id: object
    bucket_id: object
    memory_id: object  # None for a block's event
    block_id: object  # None for a memory's event
    kind: str
    payload: dict
    at: datetime

    @property
    def cursor(self) -> str:
        return cursor_format((self.xid, self.id))


@dataclass(frozen=True)
class FeedPage:
    events: list[Event]
    next_cursor: str
    has_more: bool


def cursor_format(position: tuple[int, int]) -> str:
    return f"{position[0]}.{position[1]}"


def cursor_parse(value: str | None) -> tuple[int, int] | None:
    """The position of a cursor string, None for none; a malformed one is a 400 ``invalid_cursor``."""
    if value is None or value == "":
        return None
    match = _CURSOR.fullmatch(value)
    if not match or max(int(match[1]), int(match[2])) >= 2**63:
        raise DomainError("Not a cursor of this feed: pass back a next_cursor it gave.", code="invalid_cursor")
    return int(match[1]), int(match[2])


def _event(row) -> Event:
    *head, payload, at = row
    # Django reads jsonb as text through a cursor (its JSONField decodes it).
    return Event(*head, json.loads(payload) if isinstance(payload, str) else payload, at)


def _principal_filter(principal: ApiToken | None) -> tuple[str, list]:
    """Extra conditions on the events ``principal`` may read. A token limited to a bucket has
    been checked by the bucket lookup; a token held to agents reads the events of those agents'
    memories and blocks (and of shared ones when it may read them), by the agent the memory or
    block had when the event was written; every other token reads the whole bucket."""
    agents = getattr(principal, "agents", None)
    if agents is None:
        return "", []
    condition, params = agents.sql("e.agent_id")
    return f"AND {condition}", params


def _rows(where: str, params: list, limit: int) -> list[Event]:
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT e.id, e.xid, e.tenant_id, e.bucket_id, e.memory_id, e.block_id, e.kind, e.payload, e.at
            FROM memory_events e WHERE {where} AND {_SETTLED}
            ORDER BY e.xid, e.id LIMIT %s
            """,
            [*params, limit],
        )
        return [_event(row) for row in cur.fetchall()]


def _check_not_trimmed(bucket: Bucket, after: tuple[int, int]) -> None:
    trim = MemoryEventTrim.objects.filter(bucket_id=bucket.pk).values_list("xid", "event_id").first()
    if trim is not None and after < trim:
        raise CursorGone(
            "Events after this cursor are older than the feed keeps (ENGRAM_EVENTS_RETENTION_DAYS) and were "
            "deleted: the reader missed some. Start again without a cursor (and resynchronise from the memories).",
        )


def events_feed(
    *,
    tenant: Tenant,
    bucket_id,
    principal: ApiToken | None,
    after: str | None,
    limit: int = DEFAULT_LIMIT,
    kinds: list[str] | None = None,
) -> FeedPage:
    """The bucket's events after the cursor ``after`` (from the oldest kept, without one), at most
    ``limit``, for ``principal`` (the request's token); only those of ``kinds`` when given (the
    cursor then stands at the last event served, so a filtered read resumes without gaps).
    NotFound for a bucket outside the tenant or the token's restriction; 400 for a malformed
    cursor; 410 when events after it were trimmed."""
    bucket = bucket_get(tenant=tenant, bucket_id=bucket_id, token=principal)
    position = cursor_parse(after)
    if position is not None:
        _check_not_trimmed(bucket, position)
    start = position or START
    extra, extra_params = _principal_filter(principal)
    if kinds:
        extra, extra_params = f"{extra} AND e.kind = ANY(%s)", [*extra_params, list(kinds)]
    # idx_events_bucket_feed: WHERE tenant_id, bucket_id AND (xid, id) > cursor ORDER BY xid, id.
    events = _rows(
        f"e.tenant_id = %s AND e.bucket_id = %s AND (e.xid, e.id) > (%s, %s) {extra}",
        [tenant.pk, bucket.pk, *start, *extra_params],
        limit + 1,
    )
    has_more = len(events) > limit
    events = events[:limit]
    last = (events[-1].xid, events[-1].id) if events else start
    return FeedPage(events=events, next_cursor=cursor_format(last), has_more=has_more)


def events_after(*, tenant_id, after: tuple[int, int], kinds: list[str] | None = None, limit: int) -> list[Event]:
    """The tenant's events (every bucket) after the position ``after``, of ``kinds`` (all when
    empty): what a webhook subscription has not yet been sent."""
    kind_sql = "AND e.kind = ANY(%s)" if kinds else ""
    # idx_events_tenant_feed: WHERE tenant_id AND (xid, id) > cursor ORDER BY xid, id.
    return _rows(
        f"e.tenant_id = %s AND (e.xid, e.id) > (%s, %s) {kind_sql}",
        [tenant_id, *after, *([list(kinds)] if kinds else [])],
        limit,
    )


def events_get(*, event_ids: list[int]) -> dict[int, Event]:
    """Events by id (for a webhook delivery's body); those trimmed meanwhile are missing."""
    if not event_ids:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, xid, tenant_id, bucket_id, memory_id, block_id, kind, payload, at FROM memory_events "
            "WHERE id = ANY(%s)",
            [list(event_ids)],
        )
        return {row[0]: _event(row) for row in cur.fetchall()}


def feed_position() -> tuple[int, int]:
    """A position before every event not yet served to anyone: where a new subscription starts."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        xmin = cur.fetchone()[0]
    return (xmin - 1, 2**63 - 1)
