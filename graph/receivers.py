"""How the graph follows the memories table."""

from __future__ import annotations

from django.dispatch import receiver

from graph.models import Edge
from memories import signals


@receiver(signals.memories_created)
def extract_new_memories(sender, *, bucket_id, memory_ids, **kwargs):
    from graph.tasks import enqueue_extraction

    enqueue_extraction(memory_ids)


@receiver(signals.memory_changed)
def reextract_changed_memory(sender, *, bucket_id, memory_id, **kwargs):
    from graph.tasks import enqueue_extraction

    enqueue_extraction([memory_id])


@receiver(signals.memory_deleting)
def remember_timelines(sender, *, bucket_id, memory_id, **kwargs):
    # The edges go with the memory (ON DELETE CASCADE); note which timelines they were on.
    return {
        "graph_timelines": set(
            Edge.objects.filter(source_memory_id=memory_id, functional_key__isnull=False).values_list(
                "subject_id", "functional_key"
            )
        )
    }


@receiver(signals.memory_deleted)
def reopen_closed_facts(sender, *, bucket_id, memory_id, states, **kwargs):
    from graph.services import graph_forget_memory
    from tenants.models import Bucket

    timelines = set().union(*(s.get("graph_timelines", set()) for s in states if isinstance(s, dict)))
    bucket = Bucket.objects.filter(pk=bucket_id).first()
    if bucket is not None:
        graph_forget_memory(bucket=bucket, memory_id=memory_id, timelines=timelines)


@receiver(signals.memories_absorbing)
def move_graph_to_survivors(sender, *, mapping, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    from graph.services import graph_absorb_memories

    graph_absorb_memories(mapping=mapping)
