"""The search statistics cache (memories.retrieval.bucket_stats), told what the write gateway
changed: rows written to a bucket, buckets whose rows moved or went."""

from __future__ import annotations

from collections.abc import Iterable

from memories.retrieval import bucket_stats


def note_writes(bucket_id, count: int) -> None:
    """Count rows written to a bucket (its BM25 statistics refresh after enough of them)."""
    bucket_stats.note_writes(bucket_id, count)


def forget_stats(bucket_ids: Iterable) -> None:
    """Drop the cached statistics of buckets whose rows moved or went."""
    for bucket_id in bucket_ids:
        bucket_stats.invalidate(bucket_id)
