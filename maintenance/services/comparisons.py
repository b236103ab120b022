"""The per-write checks of new memories — near-duplicates, contradictions, links — done a bucket
at a time from a list of the memories waiting for them (``maintenance_pending_comparisons``).

A write notes its memories in the list (:func:`comparisons_note`) and asks for the bucket's
``compare`` stage (maintenance.tasks.compare_bucket, one run per bucket at a time); a run takes
the bucket's waiting memories that have their embedding, a batch per step
(:func:`comparisons_step`), and deletes them from the list once checked. A memory still without
its embedding waits for it (its enrichment asks for the stage again). The list is the queue of
record: a lost message leaves the rows, which the every-minute enrichment sweep hands to a new
run (:func:`comparisons_waiting_buckets`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection, transaction

from engram_site import activity
from maintenance import nearest
from maintenance.services import conflicts, duplicates, links
from memories.retrieval import EXACT_SCAN_BELOW
from tenants.models import Bucket

# The neighbours fetched per memory for the three checks: as many as the most any of them asks for.
SHARED_K = max(duplicates.NEAR_DUPLICATE_K, conflicts.CONFLICT_K, links.LINK_K)
# A memory waiting this long is handed to a new run by the sweep (its message was lost).
STALE_SECONDS = 300


def comparisons_note(*, memory_ids: Iterable) -> int:
    """Put these (new) memories on the list of the per-write checks (those still in the table)."""
    ids = [str(i) for i in memory_ids]
    if not ids:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO maintenance_pending_comparisons (memory_id, created_at)
            SELECT id, now() FROM memories WHERE id = ANY(%s::uuid[])
            ON CONFLICT (memory_id) DO NOTHING
            """,
            [ids],
        )
        return cur.rowcount


def comparisons_step(*, bucket: Bucket, limit: int) -> tuple[dict, bool]:
    """Check up to ``limit`` of the bucket's waiting memories that have their embedding (the
    oldest first), then take them off the list; returns the counts and whether more may wait."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT p.memory_id FROM maintenance_pending_comparisons p JOIN memories m ON m.id = p.memory_id
            WHERE m.tenant_id = %s AND m.bucket_id = %s AND m.embedding IS NOT NULL
            ORDER BY m.created_at, m.id LIMIT %s
            """,
            [bucket.tenant_id, bucket.pk, limit],
        )
        ids: list[uuid.UUID] = [row[0] for row in cur.fetchall()]
    if not ids:
        return {"scanned": 0}, False
    # Whether to scan the bucket or walk its index: decided once for the batch (it was a count of
    # the bucket's rows before every nearest-neighbour query, three per memory).
    exact = nearest.embedded_count(tenant_id=bucket.tenant_id, bucket_id=bucket.pk) < EXACT_SCAN_BELOW
    counts = {"scanned": len(ids), "candidates": 0, "conflicts": 0, "cites": 0, "refines": 0}
    # A turn of memories at a time (a pause point for the requests between turns), each in one
    # transaction: the checks' own transactions become savepoints, not a commit each (three or
    # more per memory). Each memory's neighbours are fetched once for the three checks.
    for turn in activity.turns(ids):
        with transaction.atomic(), nearest.shared(SHARED_K):
            nearest.prefetch(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_ids=turn, exact=exact)
            found = duplicates.near_duplicates_find_for(memory_ids=turn, exact=exact)
            contradictions = conflicts.conflicts_find_for(memory_ids=turn, exact=exact)
            linked = links.links_find_for(memory_ids=turn, exact=exact)
            with connection.cursor() as cur:
                cur.execute("DELETE FROM maintenance_pending_comparisons WHERE memory_id = ANY(%s::uuid[])", [turn])
        counts["candidates"] += found["candidates"]
        counts["conflicts"] += contradictions["conflicts"]
        counts["cites"] += linked["cites"]
        counts["refines"] += linked["refines"]
    return counts, len(ids) == limit


def comparisons_waiting_buckets(*, older_than_seconds: int | None = None) -> list[uuid.UUID]:
    """Buckets with a memory on the list at least ``older_than_seconds`` (:data:`STALE_SECONDS`)
    that has its embedding (cross-tenant: the sweep's)."""
    older = STALE_SECONDS if older_than_seconds is None else older_than_seconds
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT m.bucket_id FROM maintenance_pending_comparisons p JOIN memories m ON m.id = p.memory_id
            WHERE p.created_at <= now() - make_interval(secs => %s) AND m.embedding IS NOT NULL
            """,
            [older],
        )
        return [row[0] for row in cur.fetchall()]
