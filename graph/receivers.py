"""How the graph follows the memories table after a commit (connected in GraphConfig.ready).
What it does inside an operation on buckets and memories is in graph/participants.py."""

from __future__ import annotations

from django.dispatch import receiver

from graph.tasks import enqueue_extraction, request_extraction
from memories import signals


@receiver(signals.memories_created)
def extract_new_memories(sender, *, bucket_id, memory_ids, **kwargs):
    request_extraction(bucket_id)


@receiver(signals.memory_changed)
def reextract_changed_memory(sender, *, bucket_id, memory_id, **kwargs):
    enqueue_extraction([memory_id])
