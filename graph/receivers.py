"""How the graph follows the memories table after a commit (connected in GraphConfig.ready).
What it does inside an operation on buckets and memories is in graph/participants.py."""

from __future__ import annotations

from django.conf import settings
from django.dispatch import receiver

from graph.services.timelines import supersession_pass
from graph.tasks import enqueue_extraction
from memories import signals


@receiver(signals.memories_created)
def extract_new_memories(sender, *, bucket_id, memory_ids, **kwargs):
    enqueue_extraction(memory_ids)


@receiver(signals.memory_changed)
def reextract_changed_memory(sender, *, bucket_id, memory_id, **kwargs):
    enqueue_extraction([memory_id])


@receiver(signals.links_recorded)
def supersede_from_facts(sender, *, bucket, **kwargs) -> int | None:
    """The link pass recorded links in ``bucket``: recompute which memories the graph's
    temporal facts mark superseded. None when the graph is switched off (ENGRAM_GRAPH=off)."""
    if not settings.ENGRAM_GRAPH_ENABLED:
        return None
    return int(supersession_pass(bucket=bucket).superseded or 0)
