"""``last_accessed_at`` bookkeeping, off the response path and off the memories table.

Search results are recorded in memory and flushed by a background thread, at most every
``FLUSH_SECONDS`` or when ``FLUSH_SIZE`` ids are waiting, with one batched upsert into
``memory_access`` (a narrow table keyed by memory id). The access-times job
(:func:`memories.services.access.apply_pending`, every few minutes) copies them into ``memories.last_accessed_at``
in batches, rewriting a memory's row at most once per ``ENGRAM_ACCESS_RESOLUTION``
seconds: each rewrite of a memories row also rewrites its entries in every index,
two HNSW graphs included, which costs several milliseconds of database CPU per row —
far too much to pay inside every search. Readers see the newer of both
(:func:`with_pending`). Access times are advisory: a crash loses at most the last few
seconds of them, never a memory.
"""

from __future__ import annotations

import atexit
import logging
import threading
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Greatest
from django.utils import timezone

from memories.models import MemoryAccess

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
FLUSH_SIZE = 500

_pending: dict[uuid.UUID, object] = {}
_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None


def resolution() -> timedelta:
    return timedelta(seconds=getattr(settings, "ENGRAM_ACCESS_RESOLUTION", 3600))


def record(ids: list[uuid.UUID]) -> None:
    global _thread
    now = timezone.now()
    background = getattr(settings, "ENGRAM_ACCESS_BACKGROUND", True)
    with _lock:
        for memory_id in ids:
            _pending[memory_id] = now
        size = len(_pending)
        if background and (_thread is None or not _thread.is_alive()):
            _thread = threading.Thread(target=_run, name="engram-access-flush", daemon=True)
            _thread.start()
    if size >= FLUSH_SIZE:
        _wake.set()


def discard() -> None:
    """Forget pending access times (tests)."""
    with _lock:
        _pending.clear()


def flush() -> int:
    """Write pending access times to ``memory_access`` now; returns how many rows changed.

    Memories deleted meanwhile, and memories whose ``last_accessed_at`` is already within
    the resolution of the new time, are left out. Rows are written in id order, so two
    processes flushing overlapping results take their locks in the same order.
    """
    with _lock:
        batch = dict(_pending)
        _pending.clear()
    if not batch:
        return 0
    ids = sorted(batch)
    touched = 0
    try:
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
            touched = cur.rowcount
    except Exception:
        logger.warning("could not record access times for %d memories", len(batch), exc_info=True)
        connection.close()
    return touched


def with_pending(queryset):
    """Annotate memories with ``last_accessed_at`` including access times not applied yet."""
    pending = MemoryAccess.objects.filter(memory_id=OuterRef("pk")).values("accessed_at")[:1]
    # GREATEST ignores NULLs: either time alone, or the newer of both.
    return queryset.annotate(last_accessed_seen=Greatest(F("last_accessed_at"), Subquery(pending)))


def _run() -> None:
    while True:
        _wake.wait(FLUSH_SECONDS)
        _wake.clear()
        flush()
        # The thread owns its own database connection; close it when idle so it
        # does not pin a server slot.
        with _lock:
            idle = not _pending
        if idle:
            connection.close()


atexit.register(flush)
