"""How the graph follows the memories table (connected in GraphConfig.ready)."""

from __future__ import annotations

from django.conf import settings
from django.dispatch import receiver

from graph.models import Edge
from graph.services.erasure import graph_erase_memories
from graph.services.merges import graph_absorb_memories, graph_merge_buckets, graph_merge_preview
from graph.services.timelines import graph_forget_memory, graph_recompute, supersession_pass
from graph.tasks import enqueue_extraction
from memories import signals
from tenants.models import Bucket


@receiver(signals.memories_created)
def extract_new_memories(sender, *, bucket_id, memory_ids, **kwargs):
    enqueue_extraction(memory_ids)


@receiver(signals.memory_changed)
def reextract_changed_memory(sender, *, bucket_id, memory_id, **kwargs):
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
    timelines = set().union(*(s.get("graph_timelines", set()) for s in states if isinstance(s, dict)))
    bucket = Bucket.objects.filter(pk=bucket_id).first()
    if bucket is not None:
        graph_forget_memory(bucket=bucket, memory_id=memory_id, timelines=timelines)


@receiver(signals.memories_absorbing)
def move_graph_to_survivors(sender, *, mapping, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    graph_absorb_memories(mapping=mapping)


@receiver(signals.links_recorded)
def supersede_from_facts(sender, *, bucket, **kwargs) -> int | None:
    """The link pass recorded links in ``bucket``: recompute which memories the graph's
    temporal facts mark superseded. None when the graph is switched off (ENGRAM_GRAPH=off)."""
    if not settings.ENGRAM_GRAPH_ENABLED:
        return None
    return int(supersession_pass(bucket=bucket).superseded or 0)


@receiver(signals.bucket_merge_planning)
def plan_graph_merge(sender, *, source, target, **kwargs) -> dict:
    return graph_merge_preview(source=source, target=target)


@receiver(signals.bucket_merging)
def merge_graphs(sender, *, source, target, **kwargs) -> dict:
    # Inside the merge's transaction, before the memories move: an error rolls the merge back.
    return graph_merge_buckets(source=source, target=target)


@receiver(signals.bucket_merged)
def recompute_timelines(sender, *, target, memory_ids, **kwargs):
    graph_recompute(bucket=target, memory_ids=memory_ids)


@receiver(signals.memories_erasing)
def erase_graph_rows(sender, *, tenant, memory_ids, **kwargs) -> dict:
    # Inside the erasure's transaction: an error here rolls the erasure back.
    return graph_erase_memories(tenant=tenant, memory_ids=memory_ids)
