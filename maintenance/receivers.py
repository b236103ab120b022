"""The work maintenance queues on new memories after their enrichment (registered with
memories.hooks in MaintenanceConfig.ready). What it does to its own rows when buckets and
memories change is in maintenance/participants.py."""

from __future__ import annotations

from celery import Signature

from maintenance import tasks


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
