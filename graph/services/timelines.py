"""Temporal timelines and supersession: the validity windows of functional edges, and which
memory a newer fact superseded."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection, transaction

from graph.models import Edge
from graph.services.locks import bucket_lock
from graph.services.reports import GraphReport
from memories.models import Memory
from memories.services.supersession import memory_supersede
from tenants.models import Bucket


def _object_key(edge: Edge) -> str:
    return f"e:{edge.object_entity_id}" if edge.object_entity_id else f"l:{(edge.object_literal or '').casefold()}"


def timeline_windows_recompute(bucket: Bucket, timelines: set[tuple[uuid.UUID, str]]) -> set[uuid.UUID]:
    """Set ``valid_to`` along each functional timeline; returns the memories on them."""
    affected: set[uuid.UUID] = set()
    for subject_id, key in timelines:
        edges = list(
            Edge.objects.for_bucket(bucket)
            .filter(subject_id=subject_id, functional_key=key)
            .order_by("valid_from", "created_at", "id")
        )
        # Consecutive edges with the same value are one stretch of validity ("still in Boston").
        groups: list[list[Edge]] = []
        for edge in edges:
            if groups and _object_key(groups[-1][0]) == _object_key(edge):
                groups[-1].append(edge)
            else:
                groups.append([edge])
        changed = []
        for index, group in enumerate(groups):
            closes_at = groups[index + 1][0].valid_from if index + 1 < len(groups) else None
            for edge in group:
                if edge.valid_to != closes_at:
                    edge.valid_to = closes_at
                    changed.append(edge)
                affected.add(edge.source_memory_id)
        Edge.objects.bulk_update(changed, ["valid_to"])
    return affected


def supersession_recompute(bucket: Bucket, memory_ids: set[uuid.UUID]) -> int:
    """A memory is historical from the moment a newer fact closed one of its
    functional edges; the memory stating that newer fact supersedes it."""
    if not memory_ids:
        return 0
    closers: dict[uuid.UUID, tuple] = {}
    closed = (
        Edge.objects.for_bucket(bucket)
        .filter(source_memory_id__in=memory_ids, functional_key__isnull=False, valid_to__isnull=False)
        .order_by("valid_to")
    )
    for edge in closed:
        if edge.source_memory_id in closers:
            continue
        successor = (
            Edge.objects.for_bucket(bucket)
            .filter(subject_id=edge.subject_id, functional_key=edge.functional_key, valid_from=edge.valid_to)
            .exclude(source_memory_id=edge.source_memory_id)
            .order_by("created_at", "id")
            .first()
        )
        if successor is not None:
            closers[edge.source_memory_id] = (edge.valid_to, successor.source_memory_id)
    changed = 0
    memories = (
        Memory.objects.for_bucket(bucket)
        .filter(pk__in=memory_ids)
        .only("id", "superseded_at", "superseded_by", "tenant_id", "bucket_id")
    )
    for memory in memories:
        at, by = closers.get(memory.pk, (None, None))
        if (memory.superseded_at, memory.superseded_by) == (at, by):
            continue
        memory_supersede(memory_id=memory.pk, at=at, by=by, previous_by=memory.superseded_by)
        changed += 1
    return changed


def timelines_recompute(*, bucket: Bucket, timelines: set, memory_ids: set) -> int:
    """Recompute ``timelines`` and the supersession of the memories on them and of ``memory_ids``."""
    affected = timeline_windows_recompute(bucket, timelines) | set(memory_ids)
    return supersession_recompute(bucket, affected)


def supersession_pass(*, bucket: Bucket) -> GraphReport:
    """Recompute every functional timeline of a bucket and the supersession state of its memories."""
    report = GraphReport()
    with transaction.atomic():
        bucket_lock(bucket)
        timelines = set(
            Edge.objects.for_bucket(bucket)
            .filter(functional_key__isnull=False)
            .values_list("subject_id", "functional_key")
            .distinct()
        )
        affected = timeline_windows_recompute(bucket, timelines)
        report.superseded = supersession_recompute(bucket, affected)
    return report


def graph_forget_memory(*, bucket: Bucket, memory_id: uuid.UUID, timelines: set) -> None:
    """After a memory is deleted (its edges went with it): reopen what it had closed."""
    with transaction.atomic():
        bucket_lock(bucket)
        affected = timeline_windows_recompute(bucket, timelines)
        # Memories it superseded are current again unless something else closes them.
        affected |= set(Memory.objects.for_bucket(bucket).filter(superseded_by=memory_id).values_list("id", flat=True))
        supersession_recompute(bucket, affected)


RECOMPUTE_BATCH = 5000


def graph_recompute(*, bucket: Bucket, memory_ids: Iterable[uuid.UUID]) -> int:
    """Recompute the functional timelines the edges of ``memory_ids`` are on, and the
    supersession of every memory on them (after edges moved between memories or buckets)."""
    ids = list(memory_ids)
    changed = 0
    with transaction.atomic():
        bucket_lock(bucket)
        with connection.cursor() as cur:
            # graph_edges_source: edges by source memory (an array, not one parameter per id).
            cur.execute(
                """
                SELECT DISTINCT subject_id, functional_key FROM graph_edges
                WHERE source_memory_id = ANY(%s) AND tenant_id = %s AND bucket_id = %s AND functional_key IS NOT NULL
                """,
                [ids, bucket.tenant_id, bucket.pk],
            )
            timelines = set(cur.fetchall())
        affected = sorted(timeline_windows_recompute(bucket, timelines))
        # Each memory's state is computed on its own: batches keep the queries' parameter lists bounded.
        for start in range(0, len(affected), RECOMPUTE_BATCH):
            changed += supersession_recompute(bucket, set(affected[start : start + RECOMPUTE_BATCH]))
    return changed
