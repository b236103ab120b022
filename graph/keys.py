"""The graph's part of memories' key documents (memories.keys; registered in GraphConfig.ready):
the entities a memory mentions, by their canonical names, and the relations it states, in words.

"Priya" in a memory of a bucket that knows Priya Natarajan is mentioned as the entity named
"Priya Natarajan"; "Marco Rossi, the CTO of Finlytics, hired Priya" states
``Marco Rossi hired Priya Natarajan`` (and his role and employer), written "Marco Rossi hired
Priya Natarajan"; "my mom lives in Ohio", her name unknown, ``User mom_lives_in Ohio``,
written "User mom lives in Ohio"; an owned thing with its kind when the edge knows it ("I
switched to a Pixel 8", ``User owns Pixel 8`` as the user's phone: "User owns phone Pixel 8").
Each entity it mentions comes with what the bucket's graph says it is, wherever that was said
(graph/key_descriptions.py): "Sofie is a veterinarian." in a bucket that also holds "I live in
Amsterdam with my partner Sofie." describes
``Sofie: user partner`` (unless Sofie is the line's speaker, or is mentioned by more than
:data:`graph.key_descriptions.MAX_DESCRIBED_MENTIONS` memories).
A memory the extractor has not seen yet (at its current version) waits for it: its key is built
once extraction is done (graph.tasks queues the build; the extraction marks the keys it
changes stale, graph/services/extraction.py). Without the spaCy pipeline nothing waits.
"""

from __future__ import annotations

import uuid

from engram_site.providers import nlp
from graph.extract import split_speaker
from graph.key_descriptions import entity_descriptions
from graph.models import Edge, Mention, Processed
from graph.services.extraction import EXTRACTOR_VERSION
from memories.keys import KeyFacts
from memories.models import EnrichmentFailure, EnrichmentStage, Memory


def _words(predicate: str) -> str:
    return predicate.replace("_", " ").strip()


def key_facts(memories: list[Memory]) -> dict[uuid.UUID, KeyFacts]:
    ids = [m.pk for m in memories]
    # A transcript line's speaker ("Caroline: ...") is mentioned by every line of theirs: what
    # they are is not what the line is about.
    speakers = {m.pk: split_speaker(m.content, attributed_to=m.attributed_to)[0].key for m in memories}
    facts: dict[uuid.UUID, KeyFacts] = {}
    mentions = (
        Mention.objects.filter(memory_id__in=ids)
        .exclude(entity__type="SPEAKER")
        .order_by("memory_id", "id")
        .values_list("memory_id", "entity_id", "entity__name", "entity__normalized_name")
    )
    described: list[tuple[uuid.UUID, uuid.UUID]] = []
    for memory_id, entity_id, name, key in mentions:
        facts.setdefault(memory_id, KeyFacts()).entities.append(name)
        if key != speakers.get(memory_id):
            described.append((memory_id, entity_id))
    descriptions = entity_descriptions(entity_id for _memory_id, entity_id in described)
    for memory_id, entity_id in described:
        description = descriptions.get(entity_id)
        texts = description.texts(besides=memory_id) if description is not None else []
        if texts:
            facts[memory_id].descriptions.append(f"{description.name}: {', '.join(texts)}")
    edges = (
        Edge.objects.filter(source_memory_id__in=ids)
        .order_by("source_memory_id", "valid_from", "id")
        .values_list(
            "source_memory_id", "subject__name", "predicate", "object_entity__name", "object_literal", "functional_key"
        )
    )
    for memory_id, subject, predicate, obj, literal, functional_key in edges:
        target = obj or literal
        if subject and target:
            facts.setdefault(memory_id, KeyFacts()).relations.append(
                f"{subject} {_words(predicate)} {_kind(functional_key, target)}{target}"
            )
    return facts


def _kind(functional_key: str | None, target: str) -> str:
    """What kind of thing the object is, when the edge's functional key says it and the name
    does not: "I switched to a Pixel 8" states ``User owns Pixel 8`` as the user's phone
    (``owns:phone``), written "User owns phone Pixel 8" — a question about the phone finds it."""
    kind = functional_key.partition(":")[2] if functional_key else ""
    if not kind or kind.casefold() in target.casefold():
        return ""
    return f"{kind} "


def waiting(memory_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The memories the extractor has not seen at its current version, unless it cannot run
    (no pipeline) or has failed on them (their failure record waits for its retry)."""
    if not nlp.available():
        return set()
    done = Processed.objects.filter(memory_id__in=memory_ids, extractor_version__gte=EXTRACTOR_VERSION)
    failed = EnrichmentFailure.objects.filter(memory_id__in=memory_ids, stage=EnrichmentStage.GRAPH)
    seen = set(done.values_list("memory_id", flat=True)) | set(failed.values_list("memory_id", flat=True))
    return {i for i in memory_ids if i not in seen}
