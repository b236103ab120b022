"""``last_accessed_at`` bookkeeping, off the response path.

Search results are recorded in memory and flushed by a background thread with
one batched ``UPDATE … WHERE id = ANY(…)`` (seed 000), at most every
``FLUSH_SECONDS`` or when ``FLUSH_SIZE`` ids are waiting. Access times are
advisory: a crash loses at most the last few seconds of them, never a memory.
"""

from __future__ import annotations

import atexit
import logging
import threading
import uuid

from django.conf import settings
from django.db import connection
from django.utils import timezone

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
FLUSH_SIZE = 500

_pending: dict[uuid.UUID, object] = {}
_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None


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
    """Write pending access times now; returns how many rows were touched."""
    with _lock:
        batch = dict(_pending)
        _pending.clear()
    if not batch:
        return 0
    ids = list(batch)
    touched = 0
    try:
        with connection.cursor() as cur:
            # One statement for the whole batch, whatever the mix of timestamps.
            cur.execute(
                """
                UPDATE memories m SET last_accessed_at = v.at
                FROM unnest(%s::uuid[], %s::timestamptz[]) AS v(id, at)
                WHERE m.id = v.id AND (m.last_accessed_at IS NULL OR m.last_accessed_at < v.at)
                """,
                [ids, [batch[i] for i in ids]],
            )
            touched = cur.rowcount
    except Exception:
        logger.warning("could not record access times for %d memories", len(batch), exc_info=True)
        connection.close()
    return touched


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
