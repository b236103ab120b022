"""The work maintenance asks for on new memories (registered with memories.hooks in
MaintenanceConfig.ready), and the planner-statistics check after large writes, with the count of
the search statistics (a receiver of memories_created). What it does to its own rows when buckets and memories change
is in maintenance/participants.py."""

from __future__ import annotations

import logging
import threading

from celery import Signature
from django.conf import settings
from django.db import connection
from django.dispatch import receiver

from maintenance import tasks
from maintenance.services import comparisons, statistics
from memories import signals
from memories.retrieval import bucket_stats

logger = logging.getLogger(__name__)


def follow_up(*, bucket_id, memory_ids: list) -> None:
    """What new memories of a bucket need once they have their embedding (registered with
    memories.hooks): a run of the bucket's classification, and of its near-duplicate,
    contradiction and link checks, with the memories put on the list of those waiting for them
    (maintenance.services.comparisons). Per bucket, not per write (engram_site/jobs/coalesce.py)."""
    tasks.request_classification(bucket_id)
    try:
        comparisons.comparisons_note(memory_ids=memory_ids)
    except Exception:  # the write is committed; these checks are hints (the hourly scans remain)
        logger.exception("noting %d memories for their checks failed", len(memory_ids))
    tasks.request_comparisons(bucket_id)


def retry_classification(memory_ids: list[str]) -> list[Signature]:
    """What an operator's retry of the classification stage queues (memories.hooks.register_retry)."""
    return [tasks.classify_memories.si(memory_ids)]


# Rows this process has written per bucket since it last checked the planner statistics for it,
# and the buckets waiting for the check (one thread per process runs them, one after another).
_written: dict = {}
_waiting: set = set()
_lock = threading.Lock()
_running = False


@receiver(signals.memories_created)
def refresh_statistics_after_writes(sender, *, bucket_id, memory_ids, **kwargs):
    """Once this process has written ``ENGRAM_ANALYZE_MIN_ROWS`` rows to a bucket (one large
    batch, or many small ones), check the planner statistics of what a search of it reads, and
    ANALYZE what is stale (maintenance.services.statistics): after the commit, in a thread of
    this process, never in the request. Not a task for the worker: measured, its message waited
    minutes behind the graph extraction and classification the same burst queued, while every
    search of the bucket was planned from one row. The same thread first counts the bucket's
    search statistics for this process (memories.retrieval.stats: ``bucket_stats.warm``), which
    the searches right after a burst would otherwise count themselves. Never raises."""
    global _running
    try:
        if settings.ENGRAM_ANALYZE_THRESHOLD <= 0:
            return
        with _lock:
            count = _written.get(bucket_id, 0) + len(memory_ids)
            if count < settings.ENGRAM_ANALYZE_MIN_ROWS:
                _written[bucket_id] = count
                return
            _written.pop(bucket_id, None)
            _waiting.add(bucket_id)
            if _running:  # the running thread takes this bucket too, when it is done
                return
            _running = True
        if not settings.ENGRAM_STATS_BACKGROUND:  # the test settings: at once, in this thread
            _refresh_waiting(close=False)
            return
        threading.Thread(target=_refresh_waiting, name="engram-planner-statistics", daemon=True).start()
    except Exception:
        logger.exception("the statistics refresh of bucket %s failed", bucket_id)
        with _lock:
            _running = False


def _refresh_waiting(close: bool = True) -> None:
    global _running
    try:
        while True:
            with _lock:
                if not _waiting:
                    _running = False
                    return
                buckets = list(_waiting)
                _waiting.clear()
            try:
                # First the search statistics of this process (one statement a bucket): the
                # searches that follow a burst come at once, before the ANALYZE is done.
                bucket_stats.warm(buckets)
            except Exception:
                logger.warning("counting the search statistics failed", exc_info=True)
            try:
                statistics.planner_statistics_refresh(bucket_ids=buckets)
            except Exception:
                logger.warning("refreshing the planner statistics failed", exc_info=True)
    finally:
        with _lock:
            _running = False
        if close:
            connection.close()  # this thread's own connection
