"""How maintenance follows the memories table: it moves its bookkeeping when memories merge,
and queues its work on new memories after their enrichment (connected in MaintenanceConfig.ready)."""

from __future__ import annotations

from celery import Signature
from django.dispatch import receiver

from maintenance import tasks
from maintenance.conflicts import conflicts_erase, conflicts_repoint
from maintenance.models import ConflictCandidate, DuplicateCandidate
from maintenance.services.buckets import maintenance_bucket_merge
from maintenance.services.duplicates import duplicate_candidates_erase, duplicate_candidates_repoint
from memories import signals


@receiver(signals.memories_absorbing)
def move_candidates_to_survivors(sender, *, mapping, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    duplicate_candidates_repoint(mapping=mapping)
    conflicts_repoint(mapping=mapping)


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


@receiver(signals.bucket_merge_planning)
def plan_candidates_merge(sender, *, source, target, **kwargs) -> dict:
    return {
        "duplicate_candidates": DuplicateCandidate.objects.for_bucket(source).count(),
        "conflict_candidates": ConflictCandidate.objects.for_bucket(source).count(),
    }


@receiver(signals.bucket_merged)
def move_candidates_and_cursors(sender, *, source, target, oldest_moved, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    maintenance_bucket_merge(source=source, target=target, oldest_moved=oldest_moved)


@receiver(signals.memories_erasing)
def erase_candidates(sender, *, tenant, memory_ids, **kwargs) -> dict:
    # Inside the erasure's transaction: an error here rolls the erasure back.
    return {
        "duplicate_candidates": duplicate_candidates_erase(tenant=tenant, memory_ids=memory_ids),
        "conflict_candidates": conflicts_erase(tenant=tenant, memory_ids=memory_ids),
    }
