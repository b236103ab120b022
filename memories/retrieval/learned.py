"""The ranking settings a bucket learned from its feedback (memories.services.ranking_learning),
as the search reads them: one statement by the bucket's unique index (``learned_rankings_bucket``),
only for a search of one bucket — a search across buckets ranks them together, and no one
bucket's lesson is theirs.

The answer is kept per process for :data:`CACHE_SECONDS`, so a bucket searched many times a
second reads it once in that time rather than with every search. A learning run or a reset
drops the entry in the process that made it at once (:func:`forget_cached`); other processes see
the change within ``CACHE_SECONDS``. Lessons are learned nightly, so that is no loss.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from engram_site import tracing
from memories.models import LearnedRanking
from tenants.models import Bucket


@dataclass(frozen=True)
class Learned:
    settings: dict
    learned_at: datetime
    held_before: float
    held_after: float

    def as_explain(self) -> dict:
        """What ``explain`` says of it: the settings and the held-back scores that adopted them.
        (Knobs an operator or the request set win over these: the hit's ranking used theirs.)"""
        return {
            "settings": self.settings,
            "learned_at": self.learned_at.isoformat(),
            "held_back_score": {"defaults": round(self.held_before, 4), "learned": round(self.held_after, 4)},
        }


CACHE_SECONDS = 30.0
_MAX_CACHED = 10_000  # buckets; past it the cache starts again empty
_cache: dict[uuid.UUID, tuple[float, Learned | None]] = {}
_lock = threading.Lock()


def learned_for(bucket: Bucket) -> Learned | None:
    """The bucket's adopted learned settings, or None (none learned, or none beat the defaults)."""
    now = time.monotonic()
    kept = _cache.get(bucket.pk)
    if kept is not None and kept[0] > now:
        return kept[1]
    value = _read(bucket)
    with _lock:
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        _cache[bucket.pk] = (now + CACHE_SECONDS, value)
    return value


def forget_cached(bucket_ids: Iterable[uuid.UUID] | None = None) -> None:
    """Drop these buckets' kept answers in this process (all of them without ``bucket_ids``)."""
    with _lock:
        if bucket_ids is None:
            _cache.clear()
        else:
            for bucket_id in bucket_ids:
                _cache.pop(bucket_id, None)


@tracing.traced("engram.search.learned")
def _read(bucket: Bucket) -> Learned | None:
    row = (
        LearnedRanking.objects.for_bucket(bucket)
        .filter(adopted=True)
        .values_list("settings", "learned_at", "held_before", "held_after")
        .first()
    )
    if row is None or not row[0]:
        return None
    return Learned(settings=row[0], learned_at=row[1], held_before=row[2], held_after=row[3])
