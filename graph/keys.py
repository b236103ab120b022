"""The graph's part of memories' key documents (memories.keys; registered in GraphConfig.ready):
the entities a memory mentions, by their canonical names, and the relations it states, in words.

"Priya" in a memory of a bucket that knows Priya Natarajan is mentioned as the entity named
"Priya Natarajan"; "Marco Rossi, the CTO of Finlytics, hired Priya" states
``Marco Rossi hired Priya Natarajan`` (and his role and employer), written "Marco Rossi hired
Priya Natarajan"; "my mom lives in Ohio", her name unknown, ``User mom_lives_in Ohio``,
written "User mom lives in Ohio".
A memory the extractor has not seen yet (at its current version) waits for it: its key is built
once extraction is done (graph.tasks queues the build; the extraction marks the keys it
changes stale, graph/services/extraction.py). Without the spaCy pipeline nothing waits.
"""

from __future__ import annotations

import uuid

from engram_site.providers import nlp
from graph.models import Edge, Mention, Processed
from graph.services.extraction import EXTRACTOR_VERSION
from memories.keys import KeyFacts
from memories.models import EnrichmentFailure, EnrichmentStage, Memory


def _words(predicate: str) -> str:
    return predicate.replace("_", " ").strip()


def key_facts(memories: list[Memory]) -> dict[uuid.UUID, KeyFacts]:
    ids = [m.pk for m in memories]
    facts: dict[uuid.UUID, KeyFacts] = {}
    mentions = (
        Mention.objects.filter(memory_id__in=ids)
        .exclude(entity__type="SPEAKER")
        .order_by("memory_id", "id")
        .values_list("memory_id", "entity__name")
    )
    for memory_id, name in mentions:
        facts.setdefault(memory_id, KeyFacts()).entities.append(name)
    edges = (
        Edge.objects.filter(source_memory_id__in=ids)
        .order_by("source_memory_id", "valid_from", "id")
        .values_list("source_memory_id", "subject__name", "predicate", "object_entity__name", "object_literal")
    )
    for memory_id, subject, predicate, obj, literal in edges:
        target = obj or literal
        if subject and target:
            facts.setdefault(memory_id, KeyFacts()).relations.append(f"{subject} {_words(predicate)} {target}")
    return facts


def waiting(memory_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The memories the extractor has not seen at its current version, unless it cannot run
    (no pipeline) or has failed on them (their failure record waits for its retry)."""
    if not nlp.available():
        return set()
    done = Processed.objects.filter(memory_id__in=memory_ids, extractor_version__gte=EXTRACTOR_VERSION)
    failed = EnrichmentFailure.objects.filter(memory_id__in=memory_ids, stage=EnrichmentStage.GRAPH)
    seen = set(done.values_list("memory_id", flat=True)) | set(failed.values_list("memory_id", flat=True))
    return {i for i in memory_ids if i not in seen}
