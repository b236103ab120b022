"""Incremental bucket scans: visit each embedded memory once, after the bucket's cursor
(the near-duplicate, conflict and link jobs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from maintenance import nearest
from maintenance.models import ScanCursor
from tenants.models import Bucket

SCAN_BATCH = 500


@dataclass(frozen=True)
class Row:
    id: uuid.UUID
    created_at: datetime


def _buckets(bucket: Bucket | None) -> list[tuple[uuid.UUID, uuid.UUID]]:
    if bucket is not None:
        return [(bucket.tenant_id, bucket.pk)]
    return list(Bucket.objects.order_by("tenant_id", "id").values_list("tenant_id", "id"))


def _scan_rows(*, tenant_id, bucket_id, after: tuple | None) -> Iterator[list[Row]]:
    """Batches of embedded rows of a bucket after ``after`` = (created_at, id), in that order."""
    while True:
        with connection.cursor() as cur:
            position = "AND (created_at, id) > (%s, %s)" if after else ""
            cur.execute(
                f"""
                SELECT id, created_at FROM memories
                WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL {position}
                ORDER BY created_at, id LIMIT %s
                """,
                [tenant_id, bucket_id, *(after or ()), SCAN_BATCH],
            )
            rows = [Row(id=r[0], created_at=r[1]) for r in cur.fetchall()]
        if not rows:
            return
        yield rows
        after = (rows[-1].created_at, rows[-1].id)


def _first_unembedded(*, tenant_id, bucket_id, after: tuple | None) -> tuple | None:
    with connection.cursor() as cur:
        position = "AND (created_at, id) > (%s, %s)" if after else ""
        cur.execute(
            f"""
            SELECT created_at, id FROM memories
            WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NULL {position}
            ORDER BY created_at, id LIMIT 1
            """,
            [tenant_id, bucket_id, *(after or ())],
        )
        row = cur.fetchone()
    return tuple(row) if row else None


def _pending_scan_count(*, tenant_id, bucket_id, after: tuple | None) -> int:
    with connection.cursor() as cur:
        position = "AND (created_at, id) > (%s, %s)" if after else ""
        cur.execute(
            "SELECT count(*) FROM memories"
            f" WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL {position}",
            [tenant_id, bucket_id, *(after or ())],
        )
        return cur.fetchone()[0]


def incremental_scan(
    *, job: str, bucket: Bucket | None, full: bool, recorder: JobRecorder, visit, after_bucket=None
) -> None:
    """Visit every embedded memory once, bucket by bucket, after the bucket's cursor.

    The cursor advances in (created_at, id) order as batches complete, so a run
    that dies resumes where it stopped; it never passes a row that still has no
    embedding (that row is visited once the sweep has embedded it). ``full``
    starts from the beginning. Memories written later with an older
    ``created_at`` (imports) are visited by the per-write hint instead
    (``memories.tasks.enqueue_enrichment``), or by a ``--full`` run.
    """
    plan = []
    for tenant_id, bucket_id in _buckets(bucket):
        cursor, _ = ScanCursor.objects.get_or_create(tenant_id=tenant_id, bucket_id=bucket_id, job=job)
        after = None if full or cursor.position_at is None else (cursor.position_at, cursor.position_id)
        pending = _pending_scan_count(tenant_id=tenant_id, bucket_id=bucket_id, after=after)
        if pending:
            plan.append((cursor, after, pending))
    recorder.set_total(sum(p[2] for p in plan))
    recorder.add(buckets=len(plan), scanned=0)
    for cursor, after, _pending in plan:
        tenant_id, bucket_id = cursor.tenant_id, cursor.bucket_id
        stop = _first_unembedded(tenant_id=tenant_id, bucket_id=bucket_id, after=after)
        exact = nearest.embedded_count(tenant_id=tenant_id, bucket_id=bucket_id) < nearest.EXACT_SCAN_BELOW
        visited = 0
        for rows in _scan_rows(tenant_id=tenant_id, bucket_id=bucket_id, after=after):
            for row in rows:
                activity.pause()
                visit(row, tenant_id=tenant_id, bucket_id=bucket_id, exact=exact)
            visited += len(rows)
            # Advance to the last row visited, but never past a row still waiting for its
            # embedding (the rows after it are visited again next time: harmless, idempotent).
            done = [r for r in rows if stop is None or (r.created_at, r.id) < stop]
            if done:
                cursor.position_at, cursor.position_id = done[-1].created_at, done[-1].id
                cursor.save(update_fields=["position_at", "position_id", "updated_at"])
            recorder.advance(len(rows))
        recorder.add(scanned=visited)
        if after_bucket is not None and visited:
            after_bucket(tenant_id=tenant_id, bucket_id=bucket_id)
