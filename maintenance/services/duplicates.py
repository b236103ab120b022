"""Near-duplicates: the scan and the per-write hint that store candidate pairs for review."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db import connection

from engram_site import activity
from engram_site.jobs.runner import JobRecorder
from maintenance import nearest
from maintenance.models import DuplicateStatus
from maintenance.services.scans import Row, incremental_scan
from memories.models import Memory
from tenants.models import Bucket

NEAR_DUPLICATE_K = 5


def _store_candidates(*, tenant_id, bucket_id, memory_id, found: list[nearest.Similar]) -> int:
    if not found:
        return 0
    params: list = []
    for n in found:
        a, b = sorted([memory_id, n.id])  # uuid order == PostgreSQL's uuid order
        params += [tenant_id, bucket_id, a, b, n.similarity, DuplicateStatus.PENDING]
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO duplicate_candidates (tenant_id, bucket_id, memory_a_id, memory_b_id, similarity, status) "
            "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(found)) +
            # One row per pair: dupcand_pair_unique.
            " ON CONFLICT (memory_a_id, memory_b_id) DO NOTHING",
            params,
        )  # fmt: skip
        return cur.rowcount


def _threshold(threshold: float | None) -> float:
    return settings.ENGRAM_NEAR_DUPLICATE_THRESHOLD if threshold is None else threshold


def near_duplicates_scan(
    *, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False, threshold: float | None = None
) -> dict:
    """Store pairs of memories of a bucket whose cosine similarity is at least
    ``threshold`` as pending :class:`DuplicateCandidate` rows for review.

    Exact duplicates never get here (the hash index makes them one row); these
    are paraphrases and near-copies. Each memory is compared once, by a kNN
    query, with the whole bucket; the bucket's cursor makes the hourly run look
    only at memories added since the last one.
    """
    minimum = _threshold(threshold)
    found = {"candidates": 0}

    def visit(row: Row, *, tenant_id, bucket_id, exact: bool) -> None:
        near = nearest.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, k=NEAR_DUPLICATE_K, min_similarity=minimum,
            exact=exact,
        )  # fmt: skip
        found["candidates"] += _store_candidates(tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, found=near)

    incremental_scan(job="near_duplicates", bucket=bucket, full=full, recorder=recorder, visit=visit)
    recorder.add(candidates=found["candidates"])
    recorder.set(threshold=minimum)
    return dict(recorder.counts)


def near_duplicates_find_for(
    *, memory_ids: Iterable, threshold: float | None = None, exact: bool | None = None
) -> dict:
    """The per-write hint: compare these (new) memories with their buckets (``exact``: scan the
    bucket rather than its index; decided per memory by the bucket's size when not given)."""
    minimum = _threshold(threshold)
    counts = {"scanned": 0, "candidates": 0}
    rows = Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False)
    for memory_id, tenant_id, bucket_id in rows.values_list("id", "tenant_id", "bucket_id"):
        activity.pause()
        near = nearest.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=NEAR_DUPLICATE_K, min_similarity=minimum,
            exact=exact,
        )  # fmt: skip
        counts["candidates"] += _store_candidates(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, found=near
        )
        counts["scanned"] += 1
    return counts
