"""The change feed's rows (``memory_events``): written here, by the gateway functions that make
each change, in the change's own transaction (docs/API.md, "Change feed").

What each kind records in ``payload`` (kept small: a reader fetches the memory for the rest):

- ``created``, ``restored``: ``content``;
- ``updated``: ``fields`` (the names that changed) and the memory's ``content`` after the change;
  a bucket merge records ``fields: ["bucket_id"]`` and ``from_bucket_id`` in the target;
- ``superseded``: ``superseded_at`` and ``superseded_by`` after the change (both null: nothing
  supersedes it any more);
- ``deleted``: ``reason`` (``deleted``, or ``merged`` with ``into``: the memory that absorbed it);
- ``expired``: ``expires_at`` (recorded by the periodic job, not at the moment it passes);
- ``erased``: nothing; the erasure also removes the content (and the agent id) from every
  earlier event of the memory and marks them ``erased: true``.

A memory block's events name the block (``block_id``; ``memory_id`` is null) and are held to the
block's agent as a memory's are to the memory's (:func:`events_record_block`):

- ``block_created``, ``block_updated``: ``label``, ``agent_id`` (null: the bucket's shared
  block), ``version``, ``content``, ``token_count``, ``max_tokens``, ``reason``, ``actor``
  (``kind``, ``id``, ``label``: who made the change); an update also ``fields`` (what changed:
  ``content``, ``max_tokens``; a bucket merge ``bucket_id`` with ``from_bucket_id``, and
  ``label`` when the block was renamed to fit beside the target's);
- ``block_deleted``: ``label``, ``agent_id``, ``version`` (the last), ``reason``, ``actor``; an
  agent's erasure records it with ``erased: true`` and neither agent nor reason, and takes the
  content, the reason and the agent id out of the block's earlier events (:func:`events_erase_blocks`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from audit.services import Actor
from memories.models import BLOCK_EVENT_KINDS, EventKind, MemoryBlock, VersionKind

# Memory columns a kind copies into its payload from the row as the change left it.
_ROW_COLUMNS = {
    EventKind.CREATED: ("content",),
    EventKind.UPDATED: ("content",),
    EventKind.RESTORED: ("content",),
    EventKind.SUPERSEDED: ("superseded_at", "superseded_by"),
}
# The memory_versions kinds and the feed kinds they are.
_FROM_VERSION = {
    VersionKind.EDITED: EventKind.UPDATED,
    VersionKind.RECLASSIFIED: EventKind.UPDATED,
    VersionKind.SUPERSEDED: EventKind.SUPERSEDED,
    VersionKind.MERGED: EventKind.DELETED,
    VersionKind.DELETED: EventKind.DELETED,
    VersionKind.RESTORED: EventKind.RESTORED,
}

# Rows the retention trim deletes per statement.
TRIM_BATCH = 5000


def _json(value: Mapping) -> str:
    return json.dumps(dict(value), cls=DjangoJSONEncoder)


def events_record(*, kind: EventKind | str, payloads: Mapping[uuid.UUID, Mapping]) -> int:
    """Record one ``kind`` event per memory of ``payloads`` (memory id -> payload), in the
    caller's transaction, with the columns the kind copies from the memory's row (which must
    be in ``memories``). Returns how many were recorded."""
    if not payloads:
        return 0
    kind = EventKind(str(kind))
    columns = _ROW_COLUMNS.get(kind, ())
    from_row = ", ".join(f"'{c}', m.{c}" for c in columns)
    payload_sql = f"p.payload || jsonb_build_object({from_row})" if columns else "p.payload"
    ids = list(payloads)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO memory_events (tenant_id, bucket_id, memory_id, agent_id, kind, payload)
            SELECT m.tenant_id, m.bucket_id, m.id, m.agent_id, %s, {payload_sql}
            FROM unnest(%s::uuid[], %s::jsonb[]) WITH ORDINALITY AS p(id, payload, n)
            JOIN memories m ON m.id = p.id
            ORDER BY p.n
            """,
            [kind.value, ids, [_json(payloads[i]) for i in ids]],
        )
        return cur.rowcount


def events_from_versions(*, kind: VersionKind | str, changes: Iterable) -> int:
    """The events of the versions :func:`memories.services.history.versions_record` records
    (``changes``: its Change rows), so a change that has a version has its event."""
    event_kind = _FROM_VERSION.get(VersionKind(str(kind)))
    if event_kind is None:
        return 0
    payloads: dict[uuid.UUID, dict] = {}
    for change in changes:
        payloads[change.memory_id] = _version_payload(kind, change)
    return events_record(kind=event_kind, payloads=payloads)


def _version_payload(kind, change) -> dict:
    details = change.details or {}
    if kind in (VersionKind.EDITED, VersionKind.RECLASSIFIED):
        return {"fields": sorted(change.previous)}
    if kind == VersionKind.MERGED:
        return {"reason": "merged", "into": str(details.get("into"))}
    if kind == VersionKind.DELETED:
        return {"reason": "deleted"}
    return {}


def events_bucket_moved(*, source_id: uuid.UUID, target_id: uuid.UUID, tenant_id: uuid.UUID,
                        memory_ids: Sequence[uuid.UUID]) -> None:  # fmt: skip
    """A bucket merge moved ``memory_ids`` (now in the target) from the source: the source's
    events go with them (a merge leaves no row in the source), and each moved memory is
    announced in the target's feed as ``updated`` (``fields: ["bucket_id"]``)."""
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE memory_events SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
            [target_id, tenant_id, source_id],
        )
        cur.execute("DELETE FROM memory_event_trims WHERE bucket_id = %s", [source_id])
    events_record(
        kind=EventKind.UPDATED,
        payloads={i: {"fields": ["bucket_id"], "from_bucket_id": str(source_id)} for i in memory_ids},
    )


# The agent of the events of an erased agent's memories: no token is held to an empty agent id
# (tenants.services.parse_agent_ids), and it is not null, which would make them shared; so
# only the tokens that read every agent's memories see them, as they saw the memories.
ERASED_AGENT = ""


def events_erase(
    *, tenant_id: uuid.UUID, erased: Sequence[tuple[uuid.UUID, uuid.UUID, str | None]], agent_erased: bool
) -> int:
    """For an erasure (``erased``: (memory id, bucket id, the memory's agent id) triples): take
    the content out of every earlier event of those memories, and record one ``erased`` event
    each, without content. The events stay held to the memory's agent, so that a token held to
    other agents sees them no more than it saw the memory; when the agent id is what is erased
    (``agent_erased``), an event that had an agent keeps :data:`ERASED_AGENT` instead of it.
    Returns how many earlier events were scrubbed."""
    if not erased:
        return 0
    ids = [memory_id for memory_id, _bucket, _agent in erased]
    agents = [
        (ERASED_AGENT if agent_erased else agent) if agent is not None else None for _memory, _bucket, agent in erased
    ]
    with connection.cursor() as cur:
        # idx_events_memory finds each memory's events.
        cur.execute(
            """
            UPDATE memory_events
            SET payload = (payload - 'content') || '{"erased": true}'::jsonb,
                agent_id = CASE WHEN agent_id IS NOT NULL AND %s THEN %s ELSE agent_id END
            WHERE memory_id = ANY(%s) AND tenant_id = %s
            """,
            [agent_erased, ERASED_AGENT, ids, tenant_id],
        )
        scrubbed = cur.rowcount
        cur.execute(
            """
            INSERT INTO memory_events (tenant_id, bucket_id, memory_id, agent_id, kind, payload)
            SELECT %s, e.bucket_id, e.id, e.agent_id, 'erased', '{}'::jsonb
            FROM unnest(%s::uuid[], %s::uuid[], %s::text[]) AS e(id, bucket_id, agent_id)
            """,
            [tenant_id, ids, [bucket for _memory, bucket, _agent in erased], agents],
        )
    return scrubbed


def events_record_block(
    *,
    kind: EventKind | str,
    block: MemoryBlock,
    actor: Actor,
    reason: str = "",
    fields: Sequence[str] | None = None,
    extra: Mapping | None = None,
) -> None:
    """Record one event of ``block``'s change (a kind of :data:`BLOCK_EVENT_KINDS`), as the
    change left it, in the caller's transaction; the payloads are listed in the module's docstring."""
    kind = EventKind(str(kind))
    if kind not in BLOCK_EVENT_KINDS:
        raise ValueError(f"not a block event: {kind}")
    payload: dict = {"label": block.label, "agent_id": block.agent_id, "version": block.version}
    if kind != EventKind.BLOCK_DELETED:
        payload |= {"content": block.content, "token_count": block.token_count, "max_tokens": block.max_tokens}
    if fields is not None:
        payload["fields"] = sorted(fields)
    payload |= {"reason": reason, "actor": {"kind": str(actor.kind), "id": actor.id, "label": actor.label}}
    payload |= dict(extra or {})
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO memory_events (tenant_id, bucket_id, block_id, agent_id, kind, payload)
            VALUES (%s, %s, %s, %s, %s, %s::jsonb)
            """,
            [block.tenant_id, block.bucket_id, block.pk, block.agent_id, kind.value, _json(payload)],
        )


def events_erase_blocks(*, tenant_id: uuid.UUID, block_ids: Sequence[uuid.UUID]) -> int:
    """For an agent's erasure, before its blocks are deleted: take the content, the reason and the
    agent id out of every earlier event of the blocks (marked ``erased: true``; held to
    :data:`ERASED_AGENT`, as an erased agent's memories' events are), and record one
    ``block_deleted`` event each (``erased: true``). Returns how many earlier events were scrubbed."""
    if not block_ids:
        return 0
    with connection.cursor() as cur:
        # idx_events_block finds each block's events.
        cur.execute(
            """
            UPDATE memory_events
            SET payload = (payload - 'content' - 'reason' - 'agent_id') || '{"erased": true}'::jsonb,
                agent_id = CASE WHEN agent_id IS NOT NULL THEN %s ELSE agent_id END
            WHERE block_id = ANY(%s) AND tenant_id = %s
            """,
            [ERASED_AGENT, list(block_ids), tenant_id],
        )
        scrubbed = cur.rowcount
        cur.execute(
            """
            INSERT INTO memory_events (tenant_id, bucket_id, block_id, agent_id, kind, payload)
            SELECT b.tenant_id, b.bucket_id, b.id, %s, %s,
                   jsonb_build_object('label', b.label, 'version', b.version, 'erased', true)
            FROM memory_blocks b WHERE b.id = ANY(%s) AND b.tenant_id = %s
            ORDER BY b.bucket_id, b.label
            """,
            [ERASED_AGENT, EventKind.BLOCK_DELETED.value, list(block_ids), tenant_id],
        )
    return scrubbed


def retention() -> timedelta:
    return timedelta(days=settings.ENGRAM_EVENTS_RETENTION_DAYS)


@transaction.atomic
def events_expire(*, now: datetime | None = None) -> int:
    """Record ``expired`` for every memory whose ``expires_at`` has passed and that has no
    ``expired`` event since (an expiry moved later and passed again gets another). Only
    expiries within the retention window are looked at: older ones' events are gone from the
    feed, and would otherwise be recorded again. Run by the periodic job (its interval is
    the latency); returns how many were recorded."""
    now = now or timezone.now()
    with connection.cursor() as cur:
        # idx_memories_expires finds the expiring rows; idx_events_memory answers NOT EXISTS.
        cur.execute(
            """
            INSERT INTO memory_events (tenant_id, bucket_id, memory_id, agent_id, kind, payload)
            SELECT m.tenant_id, m.bucket_id, m.id, m.agent_id, 'expired', jsonb_build_object('expires_at', m.expires_at)
            FROM memories m
            WHERE m.expires_at IS NOT NULL AND m.expires_at <= %s AND m.expires_at > %s
              AND NOT EXISTS (
                  SELECT 1 FROM memory_events e WHERE e.memory_id = m.id AND e.kind = 'expired' AND e.at >= m.expires_at
              )
            ORDER BY m.expires_at
            """,
            [now, now - retention()],
        )
        return cur.rowcount


def events_trim(*, now: datetime | None = None) -> int:
    """Delete events older than ``ENGRAM_EVENTS_RETENTION_DAYS``, a batch per transaction,
    noting per bucket the last one deleted (a cursor behind it answers 410). Returns how many."""
    cutoff = (now or timezone.now()) - retention()
    trimmed = 0
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            # idx_events_at finds the old rows.
            cur.execute(
                """
                WITH gone AS (
                    DELETE FROM memory_events WHERE id IN (
                        SELECT id FROM memory_events WHERE at < %s ORDER BY at LIMIT %s FOR UPDATE SKIP LOCKED
                    ) RETURNING bucket_id, xid, id
                ), last AS (
                    SELECT DISTINCT ON (bucket_id) bucket_id, xid, id FROM gone ORDER BY bucket_id, xid DESC, id DESC
                ), noted AS (
                    INSERT INTO memory_event_trims AS t (bucket_id, xid, event_id)
                    SELECT bucket_id, xid, id FROM last
                    ON CONFLICT (bucket_id) DO UPDATE SET xid = excluded.xid, event_id = excluded.event_id
                    WHERE (excluded.xid, excluded.event_id) > (t.xid, t.event_id)
                )
                SELECT count(*) FROM gone
                """,
                [cutoff, TRIM_BATCH],
            )
            count = cur.fetchone()[0]
        trimmed += count
        if count < TRIM_BATCH:
            return trimmed
