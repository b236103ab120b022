"""What the graph does to its own rows when buckets and memories change (memories.participants;
registered in GraphConfig.ready). Every step runs inside the operation's transaction."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from graph.key_descriptions import DESCRIBING, description_signatures, mark_described_stale
from graph.models import Edge
from graph.services.erasure import graph_erase_memories
from graph.services.merges import graph_absorb_memories, graph_merge_buckets, graph_merge_preview
from graph.services.timelines import graph_forget_memory, graph_recompute, supersession_pass
from memories.participants import Participant
from tenants.models import Bucket

# The erasure report's graph counts (graph_erase_memories also counts the corrections it
# deletes, which the report, and so the API's answer, has no field for).
_ERASURE_COUNTS = ("graph_mentions", "graph_edges", "graph_entities", "audit_events_scrubbed")


class GraphParticipant(Participant):
    name = "graph"

    def merge_plan(self, *, source, target):
        return graph_merge_preview(source=source, target=target)

    def merge_before(self, *, source, target):
        # Entities merge before the memories move: mentions and edges follow their memories' bucket.
        return {"entities_merged": graph_merge_buckets(source=source, target=target)["entities_merged"]}

    def merge_after(self, *, source, target, oldest_moved, memory_ids):
        graph_recompute(bucket=target, memory_ids=memory_ids)

    def memories_absorb(self, *, mapping):
        graph_absorb_memories(mapping=mapping)

    def memory_delete(self, *, bucket_id, memory_id):
        # The edges go with the memory (ON DELETE CASCADE): note now which timelines they were
        # on, and reopen what the memory had closed once the delete has committed. A failure
        # then is logged, not raised: the delete stands (the next supersession pass repairs it).
        timelines = set(
            Edge.objects.filter(source_memory_id=memory_id, functional_key__isnull=False).values_list(
                "subject_id", "functional_key"
            )
        )
        transaction.on_commit(lambda: _reopen_closed_facts(bucket_id, memory_id, timelines), robust=True)
        # What it said an entity is leaves the keys of the other memories that mention it
        # (graph/key_descriptions.py): they are built again once the delete has committed.
        subjects = set(
            Edge.objects.filter(source_memory_id=memory_id, predicate__in=DESCRIBING).values_list(
                "subject_id", flat=True
            )
        )
        if subjects:
            described = description_signatures(subjects)
            transaction.on_commit(lambda: mark_described_stale(described, subjects), robust=True)

    def links_recorded(self, *, bucket):
        # Recompute which memories the graph's temporal facts mark superseded; nothing to say
        # when the graph is switched off (ENGRAM_GRAPH=off).
        if not settings.ENGRAM_GRAPH_ENABLED:
            return {}
        return {"superseded": int(supersession_pass(bucket=bucket).superseded or 0)}

    def erase(self, *, tenant, bucket_id, memory_ids, fields):
        counts = graph_erase_memories(tenant=tenant, memory_ids=memory_ids)
        return {name: counts[name] for name in _ERASURE_COUNTS}


def _reopen_closed_facts(bucket_id, memory_id, timelines: set) -> None:
    bucket = Bucket.objects.filter(pk=bucket_id).first()
    if bucket is not None:  # deleted with its bucket meanwhile: nothing left to reopen
        graph_forget_memory(bucket=bucket, memory_id=memory_id, timelines=timelines)
