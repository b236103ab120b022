"""The work maintenance queues on new memories after their enrichment (registered with
memories.hooks in MaintenanceConfig.ready). What it does to its own rows when buckets and
memories change is in maintenance/participants.py."""

from __future__ import annotations

import logging
import threading

from celery import Signature
from django.conf import settings
from django.dispatch import receiver

from maintenance import tasks
from memories import hooks, signals

logger = logging.getLogger(__name__)


def follow_up_work(memory_ids: list[str]) -> list[Signature]:
    """What new memories need once they have their embedding: classification, the
    near-duplicate scan, the contradiction check, links (queued by memories.hooks after enrichment)."""
    return [
        tasks.classify_memories.si(memory_ids),
        tasks.find_duplicates.si(memory_ids),
        tasks.find_conflicts.si(memory_ids),
        tasks.link_new_memories.si(memory_ids),
    ]


def retry_classification(memory_ids: list[str]) -> list[Signature]:
    """What an operator's retry of the classification stage queues (memories.hooks.register_retry)."""
    return [tasks.classify_memories.si(memory_ids)]


# Rows this process has written per bucket since it last queued a statistics refresh for it.
_written: dict = {}
_written_lock = threading.Lock()


@receiver(signals.memories_created)
def refresh_statistics_after_writes(sender, *, bucket_id, memory_ids, **kwargs):
    """Once this process has written ``ENGRAM_ANALYZE_MIN_ROWS`` rows to a bucket (one large
    batch, or many small ones), queue the worker's check of the planner statistics
    (maintenance.services.statistics). A message of its own, queued beside the enrichment chain,
    not at its end: behind classification, links and graph extraction of a burst it would come
    minutes late. Never raises."""
    try:
        if settings.ENGRAM_ANALYZE_THRESHOLD <= 0:
            return
        with _written_lock:
            count = _written.get(bucket_id, 0) + len(memory_ids)
            due = count >= settings.ENGRAM_ANALYZE_MIN_ROWS
            if due:
                _written.pop(bucket_id, None)
            else:
                _written[bucket_id] = count
        if due:
            hooks.publish(lambda: tasks.refresh_statistics.si(str(bucket_id)), what="statistics refresh", count=count)
    except Exception:
        logger.exception("queuing the statistics refresh of bucket %s failed", bucket_id)
