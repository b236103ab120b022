"""Erasure: the graph rows of erased memories (memories.services.erasure, through graph/participants.py)."""

from __future__ import annotations

import uuid

from django.db.models import Q

from audit.services import audit_scrub
from graph.key_descriptions import description_signatures, mark_described_stale
from graph.models import Correction, CorrectionKind, Edge, Entity, Mention, Processed
from graph.services.entities import mention_counts_refresh
from graph.services.locks import bucket_lock
from graph.services.timelines import supersession_recompute, timeline_windows_recompute
from memories.models import Memory
from tenants.models import Bucket, Tenant

# The audit actions of the operator's corrections (graph/corrections.py records "graph.<kind>").
CORRECTION_ACTIONS = tuple(f"graph.{kind}" for kind in CorrectionKind.values)


def _display_names(payload, keys: set[str]) -> set[str]:
    """The display names a correction's payload gives the entities of ``keys`` (normalized names):
    ``{"key", "name"}`` targets, and an edge's ``subject_name`` / ``object_name``."""
    found: set[str] = set()
    if isinstance(payload, dict):
        if payload.get("key") in keys and isinstance(payload.get("name"), str):
            found.add(payload["name"])
        for end in ("subject", "object"):
            if payload.get(end) in keys and isinstance(payload.get(f"{end}_name"), str):
                found.add(payload[f"{end}_name"])
        for value in payload.values():
            found |= _display_names(value, keys)
    elif isinstance(payload, list):
        for value in payload:
            found |= _display_names(value, keys)
    return found


def graph_erase_memories(*, tenant: Tenant, memory_ids: list[uuid.UUID]) -> dict:
    """Delete the graph rows of erased memories, in the erasure's transaction, before the rows go.

    Their mentions and edges go, and every entity they named that nothing else names now — no
    mention left, no edge as subject or object — goes too: an entity's name may be the person
    being forgotten. The timelines their edges were on, and the supersession of the memories
    left on them (or superseded by an erased one), are recomputed, as after a delete. The
    operator's corrections naming a forgotten entity go, and the audit events of corrections
    lose its names (``audit_events_scrubbed``); so do the edge corrections made in an erased
    memory, and their events what the edge said (its object, before and after the fix).
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
    # What the graph says the entities are (graph/key_descriptions.py): another memory's key that
    # carries what an erased memory said of one is deleted below, to be built again without it.
    described = description_signatures(named)
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
    forgotten_rows = list(orphans.values_list("normalized_name", "name", "aliases"))
    forgotten = [key for key, _name, _aliases in forgotten_rows]
    doomed = Correction.objects.for_tenant(tenant).filter(names__overlap=forgotten) if forgotten else None
    # So do the names in the audit events of the operator's corrections (a rename's old and new
    # names, an alias): those events name the entity by what it was called, not by a memory.
    names = {text for key, name, aliases in forgotten_rows for text in (key, name, *aliases)}
    if doomed is not None:
        for payload in doomed.values_list("payload", flat=True):
            names |= _display_names(payload, names)
    counts["audit_events_scrubbed"] = audit_scrub(tenant=tenant, actions=CORRECTION_ACTIONS, texts=names)
    counts["graph_corrections"] = doomed.delete()[0] if doomed is not None else 0
    # An edge deleted or fixed in an erased memory: what it said goes, from the corrections and
    # from their audit events (who it was about stays, unless the entity is forgotten above).
    keyed = Correction.objects.for_tenant(tenant).filter(
        kind__in=[CorrectionKind.EDGE_DELETE, CorrectionKind.EDGE_FIX],
        payload__edge__memory_id__in=[str(i) for i in ids],
    )
    said: set[str] = set()
    correction_ids = []
    for correction_id, payload in keyed.values_list("id", "payload"):
        correction_ids.append(correction_id)
        edge, to = payload.get("edge") or {}, payload.get("to") or {}
        said |= {edge.get("literal"), edge.get("object"), edge.get("object_name"), to.get("literal")}
        said |= {(to.get("object") or {}).get("key"), (to.get("object") or {}).get("name")}
    if correction_ids:
        where = Q(details__correction_id__in=correction_ids)
        counts["audit_events_scrubbed"] += audit_scrub(tenant=tenant, where=where, texts=[t for t in said if t])
        counts["graph_corrections"] += keyed.delete()[0]
    counts["graph_entities"] = orphans.delete()[0]
    mark_described_stale(described, named, forget=True)
    erased = set(ids)
    for bucket in buckets:
        mention_counts_refresh(bucket=bucket, entity_ids=named)
        affected = timeline_windows_recompute(bucket, timelines.get(bucket.pk, set()))
        affected |= set(superseded.filter(bucket_id=bucket.pk).values_list("id", flat=True))
        supersession_recompute(bucket, affected - erased)
    return counts
