"""What the write gateway tells others after a change: signals and the statistics cache."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.dispatch import Signal

from memories.models import Memory
from memories.retrieval import bucket_stats

logger = logging.getLogger(__name__)


def send_safely(signal: Signal, **kwargs) -> None:
    """Receivers run after commit; their failure must not turn a committed write into an error."""
    for receiver, result in signal.send_robust(Memory, **kwargs):
        if isinstance(result, Exception):
            logger.error("%s receiver %r failed: %s", signal, receiver, result)


def note_writes(bucket_id, count: int) -> None:
    """Count rows written to a bucket (its BM25 statistics refresh after enough of them)."""
    bucket_stats.note_writes(bucket_id, count)


def forget_stats(bucket_ids: Iterable) -> None:
    """Drop the cached statistics of buckets whose rows moved or went."""
    for bucket_id in bucket_ids:
        bucket_stats.invalidate(bucket_id)
