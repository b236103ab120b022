"""``last_accessed_at`` bookkeeping, off the response path and off the memories table.

Search results are recorded in a write-behind buffer (``engram_site/buffers.py``), written by
the platform's buffer thread at most every ``FLUSH_SECONDS`` or when ``FLUSH_SIZE`` ids are
waiting, with one batched upsert into ``memory_access`` (a narrow table keyed by memory id).
The access-times job (:func:`memories.services.access.apply_pending`, every few minutes) copies
them into ``memories.last_accessed_at`` in batches, rewriting a memory's row at most once per
``ENGRAM_ACCESS_RESOLUTION`` seconds: each rewrite of a memories row also rewrites its entries
in every index, two HNSW graphs included, which costs several milliseconds of database CPU per
row — far too much to pay inside every search. Readers see the newer of both
(:func:`with_pending`). Access times are advisory: a crash loses at most the last few
seconds of them, never a memory.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Greatest
from django.utils import timezone

from engram_site.buffers import WriteBehindBuffer
from engram_site.scoping import scopes_disabled
from memories.models import MemoryAccess

FLUSH_SECONDS = 2.0
FLUSH_SIZE = 500


def resolution() -> timedelta:
    return timedelta(seconds=getattr(settings, "ENGRAM_ACCESS_RESOLUTION", 3600))


def record(ids: list[uuid.UUID], *, at: datetime | None = None) -> None:
    """Note that these memories were returned now (or ``at``); a later record of an id replaces its time."""
    moment = at or timezone.now()

    def change(pending: dict) -> int:
        added = sum(1 for memory_id in ids if memory_id not in pending)
        for memory_id in ids:
            pending[memory_id] = moment
        return added  # FLUSH_SIZE counts distinct memories

    BUFFER.record(change)


def _write(batch: dict[uuid.UUID, datetime]) -> int:
    """Upsert a batch into ``memory_access``; returns how many rows changed.

    Memories deleted meanwhile, and memories whose ``last_accessed_at`` is already within
    the resolution of the new time, are left out. Rows are written in id order, so two
    processes flushing overlapping results take their locks in the same order.
    """
    ids = sorted(batch)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO memory_access (memory_id, accessed_at)
            SELECT v.id, v.at
            FROM unnest(%s::uuid[], %s::timestamptz[]) AS v(id, at)
            JOIN memories m ON m.id = v.id
            WHERE m.last_accessed_at IS NULL OR m.last_accessed_at < v.at - %s
            ORDER BY v.id
            ON CONFLICT (memory_id) DO UPDATE
            SET accessed_at = greatest(memory_access.accessed_at, EXCLUDED.accessed_at)
            """,
            [ids, [batch[i] for i in ids], resolution()],
        )
        return cur.rowcount


BUFFER = WriteBehindBuffer(
    write=_write,
    flush_seconds=FLUSH_SECONDS,
    flush_size=FLUSH_SIZE,
    failure="could not record access times for %d memories",
)
# Write what is pending now (tests; the buffer thread and exit do it otherwise), or forget it (tests).
flush = BUFFER.flush
discard = BUFFER.discard


def with_pending(queryset):
    """Annotate memories with ``last_accessed_at`` including access times not applied yet."""
    # Unscoped: correlated to the outer (scoped) memory by its key, it reads that memory's row
    # only, and the scope's join through memories would cost a lookup per listed memory.
    with scopes_disabled():
        pending = MemoryAccess.objects.filter(memory_id=OuterRef("pk")).values("accessed_at")[:1]
    # GREATEST ignores NULLs: either time alone, or the newer of both.
    return queryset.annotate(last_accessed_seen=Greatest(F("last_accessed_at"), Subquery(pending)))
