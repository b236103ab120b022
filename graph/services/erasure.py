"""Erasure: the graph rows of erased memories (memories.services.erasure, through graph/participants.py)."""

from __future__ import annotations

import uuid

from graph.models import Correction, Edge, Entity, Mention, Processed
from graph.services.entities import mention_counts_refresh
from graph.services.locks import bucket_lock
from graph.services.timelines import supersession_recompute, timeline_windows_recompute
from memories.models import Memory
from tenants.models import Bucket, Tenant


def graph_erase_memories(*, tenant: Tenant, memory_ids: list[uuid.UUID]) -> dict:
    """Delete the graph rows of erased memories, in the erasure's transaction, before the rows go.

    Their mentions and edges go, and every entity they named that nothing else names now — no
    mention left, no edge as subject or object — goes too: an entity's name may be the person
    being forgotten. The timelines their edges were on, and the supersession of the memories
    left on them (or superseded by an erased one), are recomputed, as after a delete.
    """
    ids = list(memory_ids)
    edges = Edge.objects.filter(tenant_id=tenant.pk, source_memory_id__in=ids)
    mentions = Mention.objects.filter(tenant_id=tenant.pk, memory_id__in=ids)
    # No index serves superseded_by: an erasure reads the tenant's rows once (idx_memories_tenant).
    superseded = Memory.objects.for_tenant(tenant).filter(superseded_by__in=ids).exclude(pk__in=ids)
    bucket_ids = (
        set(edges.values_list("bucket_id", flat=True).distinct())
        | set(mentions.values_list("bucket_id", flat=True).distinct())
        | set(superseded.values_list("bucket_id", flat=True).distinct())
    )
    buckets = list(Bucket.objects.filter(tenant_id=tenant.pk, pk__in=bucket_ids).order_by("pk"))
    for bucket in buckets:  # in one order, so two erasures cannot deadlock
        bucket_lock(bucket)
    timelines: dict[uuid.UUID, set] = {}
    named = set(mentions.values_list("entity_id", flat=True))
    for bucket_id, subject_id, object_id, key in edges.values_list(
        "bucket_id", "subject_id", "object_entity_id", "functional_key"
    ):
        named |= {subject_id, object_id} - {None}
        if key is not None:
            timelines.setdefault(bucket_id, set()).add((subject_id, key))
    counts = {"graph_edges": edges.delete()[0], "graph_mentions": mentions.delete()[0]}
    Processed.objects.filter(memory_id__in=ids).delete()
    orphans = (
        Entity.objects.for_tenant(tenant)
        .filter(pk__in=named)
        .exclude(pk__in=Mention.objects.filter(entity_id__in=named).values("entity_id"))
        .exclude(pk__in=Edge.objects.filter(subject_id__in=named).values("subject_id"))
        .exclude(pk__in=Edge.objects.filter(object_entity_id__in=named).values("object_entity_id"))
    )
    # An operator's corrections naming a forgotten entity go with it: they quote its name.
    forgotten = list(orphans.values_list("normalized_name", flat=True))
    counts["graph_corrections"] = (
        Correction.objects.for_tenant(tenant).filter(names__overlap=forgotten).delete()[0] if forgotten else 0
    )
    counts["graph_entities"] = orphans.delete()[0]
    erased = set(ids)
    for bucket in buckets:
        mention_counts_refresh(bucket=bucket, entity_ids=named)
        affected = timeline_windows_recompute(bucket, timelines.get(bucket.pk, set()))
        affected |= set(superseded.filter(bucket_id=bucket.pk).values_list("id", flat=True))
        supersession_recompute(bucket, affected - erased)
    return counts
