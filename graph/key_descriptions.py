"""What the bucket's graph says an entity is, wherever it was said: its descriptions, which the
keys of every memory that mentions the entity carry (graph/keys.py; docs/RETRIEVAL.md, "Keys
that carry facts").

"I live in Amsterdam with my partner Sofie." gives Sofie the alias "user partner", and "Sofie is
a veterinarian." the edge ``Sofie is_a veterinarian``; the key of each memory that names Sofie
then says "Sofie: user partner, veterinarian", so that "What does my partner do?" finds the
memory that answers it though neither memory alone holds both words.

An entity's descriptions are its aliases other than its name ("user partner", "user cat",
"lena ortiz dog", a short form) and what its ``is_a`` and ``role`` edges say it is, the most
often said first; an entity mentioned by more than :data:`MAX_DESCRIBED_MENTIONS` memories has
none. Extraction compares them before and after a batch and marks stale the keys of
the memories that mention an entity whose descriptions changed (graph/services/extraction.py);
a deleted memory's ``is_a`` and ``role`` edges do the same once the delete commits, and an
erasure deletes those keys in its transaction (graph/participants.py, graph/services/erasure.py).
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from graph.models import Edge, Entity, Mention
from memories.services.keys import keys_forget, keys_mark_stale

# The predicates that say what their subject is ("Sofie is a veterinarian", "Marco Rossi, the CTO").
DESCRIBING = ("is_a", "role")
# Descriptions per entity at most, and the characters of each.
MAX_DESCRIPTIONS = 6
MAX_DESCRIPTION_CHARS = 80
# An entity mentioned by more memories than this has no descriptions: on that many keys they
# would no longer tell them apart (a hub, such as a transcript's other speaker).
MAX_DESCRIBED_MENTIONS = 50


@dataclass
class Description:
    """One entity's descriptions: its aliases, and what its edges say it is, each with the
    memories that said it (a memory's key leaves out what only it said: its relations have it)."""

    name: str
    aliases: list[str] = field(default_factory=list)
    said: dict[str, set[uuid.UUID]] = field(default_factory=dict)

    def texts(self, *, besides: uuid.UUID | None = None) -> list[str]:
        """The descriptions, at most :data:`MAX_DESCRIPTIONS`; ``besides``: leave out what only
        that memory said."""
        kept = list(self.aliases)
        kept += [text for text, memories in self.said.items() if memories - {besides}]
        seen, out = {self.name.casefold()}, []
        for text in kept:
            if text.casefold() not in seen:
                seen.add(text.casefold())
                out.append(text)
        return out[:MAX_DESCRIPTIONS]

    def signature(self) -> tuple:
        return tuple(self.texts())


def entity_descriptions(entity_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Description]:
    """The descriptions of ``entity_ids`` (an entity without any is left out); two statements."""
    ids = list(set(entity_ids))
    if not ids:
        return {}
    found: dict[uuid.UUID, Description] = {}
    names: dict[uuid.UUID, str] = {}
    tenants, buckets = set(), set()
    rows = Entity.objects.filter(pk__in=ids, mention_count__lte=MAX_DESCRIBED_MENTIONS).values_list(
        "pk", "name", "aliases", "tenant_id", "bucket_id"
    )
    for pk, name, aliases, tenant_id, bucket_id in rows:
        names[pk] = name
        tenants.add(tenant_id)
        buckets.add(bucket_id)
        kept = [" ".join(a.split())[:MAX_DESCRIPTION_CHARS] for a in aliases or []]
        kept = [a for a in kept if a and a.casefold() != name.casefold()]
        if kept:
            found[pk] = Description(name=name, aliases=kept)
    if not names:
        return found
    # By (tenant, bucket, subject) among the current edges: graph_edges_subject_current.
    edges = (
        Edge.objects.filter(tenant_id__in=tenants, bucket_id__in=buckets, subject_id__in=list(names))
        .filter(predicate__in=DESCRIBING, valid_to__isnull=True)
        .values_list("subject_id", "object_entity__name", "object_literal", "source_memory_id")
        .order_by("subject_id", "valid_from", "id")
    )
    said: dict[uuid.UUID, dict[str, set[uuid.UUID]]] = defaultdict(dict)
    for subject, obj, literal, memory in edges:
        text = " ".join((obj or literal or "").split())[:MAX_DESCRIPTION_CHARS]
        if text:
            said[subject].setdefault(text, set()).add(memory)
    for subject, texts in said.items():
        if subject not in names:
            continue
        # The most often said first (a person described a hundred times as a counselor and once
        # as a runner is a counselor first); ties in the order first said.
        counts = Counter({text: len(memories) for text, memories in texts.items()})
        order = sorted(texts, key=lambda t: -counts[t])
        found.setdefault(subject, Description(name=names[subject])).said = {t: texts[t] for t in order}
    return found


def description_signatures(entity_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple]:
    """Per entity, what its descriptions are now (for telling which changed)."""
    return {pk: d.signature() for pk, d in entity_descriptions(entity_ids).items()}


def mark_described_stale(
    before: dict[uuid.UUID, tuple], entity_ids: Iterable[uuid.UUID], *, forget: bool = False
) -> int:
    """Mark stale the keys of the memories that mention an entity of ``entity_ids`` whose
    descriptions are no longer ``before`` (:func:`description_signatures` taken earlier); the
    number of keys marked. ``forget``: delete those keys instead (an erasure: what an erased
    memory said must not stay searchable in another memory's key until it is built again)."""
    ids = set(entity_ids)
    now = description_signatures(ids)
    changed = [pk for pk in ids if before.get(pk, ()) != now.get(pk, ())]
    if not changed:
        return 0
    memories = set(Mention.objects.filter(entity_id__in=changed).values_list("memory_id", flat=True))
    return keys_forget(memory_ids=memories) if forget else keys_mark_stale(memory_ids=memories)
