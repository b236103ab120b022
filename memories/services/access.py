"""Applying recorded access times to ``memories.last_accessed_at`` (the access-times job).

Searches record access times in ``memory_access`` (memories/access.py); this job copies
them onto the memory rows.
"""

from __future__ import annotations

from django.db import connection, transaction

from memories.access import resolution


def apply_pending(*, recorder=None, batch_size: int = 1000) -> dict:
    """Copy pending access times into ``memories.last_accessed_at`` (the access-times job).

    One transaction per batch of ``memory_access`` rows, claimed with SKIP LOCKED (two runs
    share the work). A memory row another transaction holds (an edit, a merge) is left for
    the next run rather than waited for; rows are locked in id order. A memory is only
    rewritten when its stored time is older than the new one by more than the resolution.
    Idempotent and resumable: the table is the queue.
    """
    counts = {"applied": 0, "unchanged": 0, "left_locked": 0}
    if recorder is not None:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM memory_access")
            recorder.set_total(cur.fetchone()[0])
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                """
                WITH due AS (
                    SELECT memory_id, accessed_at FROM memory_access
                    ORDER BY memory_id LIMIT %s FOR UPDATE SKIP LOCKED
                ),
                target AS (
                    SELECT m.id, due.accessed_at, m.last_accessed_at FROM memories m
                    JOIN due ON due.memory_id = m.id
                    ORDER BY m.id FOR UPDATE OF m SKIP LOCKED
                ),
                applied AS (
                    UPDATE memories m SET last_accessed_at = target.accessed_at FROM target
                    WHERE m.id = target.id
                      AND (target.last_accessed_at IS NULL OR target.last_accessed_at < target.accessed_at - %s)
                    RETURNING m.id
                ),
                done AS (
                    DELETE FROM memory_access a USING target
                    WHERE a.memory_id = target.id
                    RETURNING a.memory_id
                )
                SELECT (SELECT count(*) FROM due), (SELECT count(*) FROM applied), (SELECT count(*) FROM done)
                """,
                [batch_size, resolution()],
            )
            claimed, applied, done = cur.fetchone()
        counts["applied"] += applied
        counts["unchanged"] += done - applied
        counts["left_locked"] += claimed - done
        if recorder is not None:
            recorder.advance(done)
        if claimed < batch_size or done == 0:
            break
    if recorder is not None:
        recorder.add(**counts)
    return counts
