"""Entity profiles: what the memories say about one entity now, what they said before, what it
is related to, and a digest of it within a token budget, for an agent's system prompt.

A profile is read from rows already stored (the entity's edges and the memories behind them):
no model runs, only the tokenizer that counts a memory's ``token_count`` counts the digest.

It is what the memories a reader may see say. Edges whose memory the reader may not read (a
token held to other agents), that has expired, or (``as_of``) was written after that time are
left out, and the validity windows of functional timelines (``lives_in``, ``works_at`` …) are
recomputed from the edges that remain, as extraction computes them (graph/services/timelines.py):
each value holds until the next different value starts. Without such edges, the windows are
the stored ones.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Exists, F, Func, OuterRef, Q, TextField, Value
from django.db.models.functions import Lower
from django.utils import timezone

from engram_site.exceptions import Conflict, NotFound
from engram_site.providers import embedding
from graph.extract import first_name_variants, normalize_name
from graph.extract.vocabulary import SYMMETRIC
from graph.models import Edge, Entity
from graph.selectors import entities_by_short_form, with_mentions_seen
from memories.models import Memory
from tenants.models import AgentRestriction, Bucket
from tenants.selectors import parse_uuid

# The edges of one entity a profile reads at most (the newest): a bound on the cost of the
# user's profile in a bucket of years.
MAX_EDGES = 5_000
# Facts per list (current, history) by default, and at most.
DEFAULT_FACTS = 100
MAX_FACTS = 500
# Memories shown per fact (the newest); ``memory_count`` counts them all.
MEMORIES_PER_FACT = 5
# Candidates a 409 for an ambiguous name lists.
MAX_CANDIDATES = 20


@dataclass
class Fact:
    """One thing the memories say about the entity: a relation to a value over an interval,
    from one or more edges (every memory stating it)."""

    relation: str  # the edges' predicate
    direction: str  # "out": the entity is the subject; "in": the object (symmetric relations: "out")
    value: str  # the other end: an entity's name, or the text
    other: Entity | None  # the other end, when it is an entity
    valid_from: datetime
    valid_to: datetime | None
    current: bool
    functional: bool  # one value at a time (a timeline): a newer value closes it
    confidence: float
    edge_ids: list[uuid.UUID] = field(default_factory=list)
    memories: list[Memory] = field(default_factory=list)  # newest first

    @property
    def memory_count(self) -> int:
        return len(self.memories)

    @property
    def shown_memories(self) -> list[Memory]:
        return self.memories[:MEMORIES_PER_FACT]

    @property
    def latest(self) -> datetime:
        """When it was last stated."""
        return self.memories[0].created_at if self.memories else self.valid_from

    @property
    def importance(self) -> float:
        """The highest importance a client gave a memory stating it (unset: 0.5, neutral)."""
        return max((m.importance if m.importance is not None else 0.5 for m in self.memories), default=0.5)


@dataclass
class Related:
    entity: Entity
    relations: list[str]
    current: bool  # related by a fact valid now (or at ``as_of``)
    facts: int


@dataclass
class Profile:
    entity: Entity
    as_of: datetime | None
    current: list[Fact]
    history: list[Fact]
    related: list[Related]
    truncated: bool  # edges or facts were left out (MAX_EDGES, ``limit``)
    digest: str | None = None
    digest_tokens: int | None = None

    @property
    def aliases(self) -> list[str]:
        return list(self.entity.aliases)


# --- which entity ---------------------------------------------------------------------------------


def _entities(bucket: Bucket, agents: AgentRestriction | None):
    """The bucket's entities the reader sees: for a token held to agents, those a memory it reads
    mentions or states a fact about. (The speaker — the user — is never a mention, only the
    subject of the speaker's facts: "I live in Porto" is the user's.)"""
    entities = Entity.objects.for_bucket(bucket)
    if agents is not None:
        stated = Edge.objects.filter(tenant_id=bucket.tenant_id, bucket_id=bucket.pk).visible_to(agents)
        entities = entities.filter(
            Entity.agent_scope(agents)
            | Exists(stated.filter(subject_id=OuterRef("pk")))
            | Exists(stated.filter(object_entity_id=OuterRef("pk")))
        )
    return with_mentions_seen(entities, agents)


def profile_entity_get(*, bucket: Bucket, entity_id, agents: AgentRestriction | None = None) -> Entity:
    """The bucket's entity ``entity_id`` as the reader sees it, or NotFound (another bucket's,
    one only other agents' memories mention, a malformed id)."""
    pk = parse_uuid(entity_id)
    entity = _entities(bucket, agents).filter(pk=pk).first() if pk else None
    if entity is None:
        raise NotFound("Entity not found.")
    return entity


def profile_entity_named(
    *, bucket: Bucket, name: str, type: str | None = None, agents: AgentRestriction | None = None
) -> Entity:
    """The entity ``name`` denotes, resolved as extraction resolves a name (graph/services/
    entities.py): the entity of that normalized name, else the one known by that alias ("user
    sister"); a one-word name is also the bucket's one person of that first name (or nickname) or
    surname, which wins over a one-word person or thing of that name ("Priya" is Priya Natarajan)
    but not over a pet, place or company ("Max" the dog). Only entities the reader sees take part.
    Several of them (two Alexes, two people known as "user sister", a person and a place of one
    name) is a Conflict listing them (``candidates``); ``type`` narrows them."""
    key = normalize_name(name)
    entities = _entities(bucket, agents)
    if type:
        entities = entities.filter(type=type.upper())
    found = []
    if key:
        found = _at_most(entities.filter(normalized_name=key)) or _at_most(entities.filter(aliases__contains=[key]))
        if " " not in key:
            partial = _at_most(_by_partial_name(entities, key))
            if not partial:  # "Mel": the bucket's one Melanie (entities_by_short_form)
                short = entities_by_short_form(bucket=bucket, words=[key]).get(key, [])
                partial = _at_most(entities.filter(pk__in=short[:1])) if len(short) == 1 else []
            if partial and all(" " not in e.normalized_name and e.type in ("PERSON", "THING") for e in found):
                found = partial
    # The name is not repeated in the answers: an outsider's guess stays out of them.
    if not found:
        raise NotFound("No entity of this bucket has this name.")
    if len(found) > 1:
        several = f"more than {MAX_CANDIDATES}" if len(found) > MAX_CANDIDATES else str(len(found))
        raise Conflict(
            f"This name denotes {several} entities: ask for one by its id, or give its type.",
            code="ambiguous_name",
            extra={"candidates": [_candidate(e) for e in found[:MAX_CANDIDATES]]},
        )
    return found[0]


def _at_most(entities) -> list[Entity]:
    return list(entities.order_by("-mentions_seen", "name", "id")[: MAX_CANDIDATES + 1])


def _words(column, index: int):
    return Func(column, Value(" "), Value(index), function="split_part", output_field=TextField())


def _by_partial_name(entities, word: str):
    """People of two or more words whose first word is ``word`` or one of its nickname forms, or
    whose last word is ``word``, and whose name starts with its first word (not a description such
    as "sister of Bob"), as graph.selectors.entities_by_partial_name finds them (indexes
    graph_entities_first_word and graph_entities_last_word)."""
    return (
        entities.filter(type="PERSON", normalized_name__contains=" ")
        .annotate(
            first_word=_words(F("normalized_name"), 1),
            last_word=_words(F("normalized_name"), -1),
            name_first_word=_words(Lower("name"), 1),
        )  # fmt: skip
        .filter(Q(first_word__in=sorted(first_name_variants(word))) | Q(last_word=word))
        .filter(name_first_word=F("first_word"))
    )


def _candidate(entity: Entity) -> dict:
    return {
        "id": str(entity.pk), "name": entity.name, "type": entity.type, "aliases": list(entity.aliases),
        "mention_count": entity.mentions_seen,
    }  # fmt: skip


# --- the profile ----------------------------------------------------------------------------------


def entity_profile(
    *,
    entity: Entity,
    agents: AgentRestriction | None = None,
    as_of: datetime | None = None,
    budget: int | None = None,
    limit: int = DEFAULT_FACTS,
    now: datetime | None = None,
) -> Profile:
    """``entity``'s profile: its facts valid now (or at ``as_of``, from the memories written by
    then), newest first; its facts that a newer one ended; the entities those facts relate it to;
    and with ``budget`` a digest of at most that many tokens (:func:`profile_digest`)."""
    moment = as_of or now or timezone.now()
    in_bucket = Edge.objects.filter(tenant_id=entity.tenant_id, bucket_id=entity.bucket_id).visible_to(agents)
    touching = list(
        in_bucket.filter(Q(subject_id=entity.pk) | Q(object_entity_id=entity.pk))
        .select_related("subject", "object_entity")
        .order_by("-valid_from", "id")[: MAX_EDGES + 1]
    )
    truncated = len(touching) > MAX_EDGES
    touching = touching[:MAX_EDGES]
    # The whole timelines the entity's functional edges are on: a value closes when the next one
    # starts, and that one may not touch the entity (Tomas married to Maya, then to Ana).
    timelines = {(e.subject_id, e.functional_key) for e in touching if e.functional_key}
    on_timelines: list[Edge] = []
    if timelines:
        # graph_edges_timeline: (tenant, bucket, subject, functional_key).
        on_timelines = [
            e
            for e in in_bucket.filter(
                subject_id__in={s for s, _ in timelines}, functional_key__in={k for _, k in timelines}
            ).only(
                "id",
                "subject_id",
                "functional_key",
                "object_entity_id",
                "object_literal",
                "valid_from",
                "valid_to",
                "created_at",
                "source_memory_id",
            )  # fmt: skip
            if (e.subject_id, e.functional_key) in timelines
        ]
    memories = _memories(entity, {e.source_memory_id for e in [*touching, *on_timelines]}, agents, as_of)
    readable = {e.pk: e for e in [*on_timelines, *touching] if e.source_memory_id in memories}
    windows = _windows([e for e in readable.values() if e.functional_key])
    facts: dict[tuple, Fact] = {}
    for edge in touching:
        if edge.pk not in readable or edge.valid_from > moment:
            continue
        valid_to = windows.get(edge.pk, edge.valid_to) if edge.functional_key else edge.valid_to
        _add(facts, entity, edge, valid_to, memories[edge.source_memory_id], moment)
    for fact in facts.values():
        unique = {m.pk: m for m in fact.memories}.values()
        fact.memories = sorted(unique, key=lambda m: (m.created_at, str(m.pk)), reverse=True)
    newest_first = sorted(facts.values(), key=lambda f: (f.valid_from, f.latest, f.relation, f.value), reverse=True)
    current = [f for f in newest_first if f.current]
    history = [f for f in newest_first if not f.current]
    truncated |= len(current) > limit or len(history) > limit
    profile = Profile(
        entity=entity, as_of=as_of, current=current[:limit], history=history[:limit],
        related=_related(current + history), truncated=truncated,
    )  # fmt: skip
    if budget is not None:
        # The digest chooses from every fact, not only the ``limit`` listed.
        profile.digest, profile.digest_tokens = profile_digest(
            entity=entity, current=current, history=history, as_of=as_of, budget=budget
        )
    return profile


def _memories(entity: Entity, ids: set, agents: AgentRestriction | None, as_of: datetime | None) -> dict:
    """The memories among ``ids`` the reader may read, not expired, written by ``as_of``."""
    memories = (
        Memory.objects.filter(tenant_id=entity.tenant_id, bucket_id=entity.bucket_id, pk__in=ids)
        .visible_to(agents)
        .unexpired()
        .only("id", "content", "created_at", "agent_id", "importance", "tenant_id", "bucket_id")
    )
    if as_of is not None:
        memories = memories.filter(created_at__lte=as_of)
    return {m.pk: m for m in memories}


def _object_key(edge: Edge) -> str:
    return f"e:{edge.object_entity_id}" if edge.object_entity_id else f"l:{(edge.object_literal or '').casefold()}"


def _windows(edges: list[Edge]) -> dict[uuid.UUID, datetime | None]:
    """edge id -> valid_to along each functional timeline of ``edges``: consecutive edges of the
    same value are one stretch, which ends when the next value starts (as
    graph.services.timelines.timeline_windows_recompute sets it)."""
    by_timeline: dict[tuple, list[Edge]] = defaultdict(list)
    for edge in edges:
        by_timeline[(edge.subject_id, edge.functional_key)].append(edge)
    windows: dict[uuid.UUID, datetime | None] = {}
    for timeline in by_timeline.values():
        timeline.sort(key=lambda e: (e.valid_from, e.created_at, str(e.pk)))
        stretches: list[list[Edge]] = []
        for edge in timeline:
            if stretches and _object_key(stretches[-1][0]) == _object_key(edge):
                stretches[-1].append(edge)
            else:
                stretches.append([edge])
        for index, stretch in enumerate(stretches):
            ends = stretches[index + 1][0].valid_from if index + 1 < len(stretches) else None
            for edge in stretch:
                windows[edge.pk] = ends
    return windows


def _add(facts: dict, entity: Entity, edge: Edge, valid_to: datetime | None, memory: Memory, moment) -> None:
    outgoing = edge.subject_id == entity.pk or edge.predicate in SYMMETRIC
    if edge.subject_id == entity.pk:
        other, value = edge.object_entity, edge.object_entity.name if edge.object_entity else edge.object_literal
    else:
        other, value = edge.subject, edge.subject.name
    value = value or ""
    other_key = f"e:{other.pk}" if other is not None else f"l:{value.casefold()}"
    current = valid_to is None or valid_to > moment
    key = (edge.predicate, outgoing, other_key, valid_to)
    fact = facts.get(key)
    if fact is None:
        fact = facts[key] = Fact(
            relation=edge.predicate, direction="out" if outgoing else "in", value=value, other=other,
            valid_from=edge.valid_from, valid_to=valid_to, current=current,
            functional=bool(edge.functional_key), confidence=edge.confidence,
        )  # fmt: skip
    fact.valid_from = min(fact.valid_from, edge.valid_from)
    fact.confidence = max(fact.confidence, edge.confidence)
    fact.edge_ids.append(edge.pk)
    fact.memories.append(memory)


def _related(facts: list[Fact]) -> list[Related]:
    """The entities the facts relate the entity to: related by a current fact first, then by
    the most facts."""
    by_entity: dict[uuid.UUID, Related] = {}
    for fact in facts:
        if fact.other is None:
            continue
        related = by_entity.setdefault(fact.other.pk, Related(entity=fact.other, relations=[], current=False, facts=0))
        if fact.relation not in related.relations:
            related.relations.append(fact.relation)
        related.current |= fact.current
        related.facts += 1
    return sorted(by_entity.values(), key=lambda r: (not r.current, -r.facts, r.entity.name, str(r.entity.pk)))


# --- the digest -----------------------------------------------------------------------------------

# How a fact reads in a digest: "lives in Berlin", "role: designer", "is a chef".
_PHRASES = {"is_a": "is a", "role": "role:", "lives_in": "lives in", "works_at": "works at"}


def _phrase(relation: str) -> str:
    if relation in _PHRASES:
        return _PHRASES[relation]
    words = relation.replace("_", " ")
    return f"{words}:" if relation.startswith("favourite_") else words


def fact_text(entity: Entity, fact: Fact) -> str:
    """A fact as a line of the digest (without its dates)."""
    if fact.direction == "out":
        return f"{_phrase(fact.relation)} {fact.value}"
    if fact.relation.endswith("_of"):
        # "Priya manager_of Maya", on Maya's profile: her manager is Priya.
        return f"{fact.relation[:-3].replace('_', ' ')}: {fact.value}"
    return f"{fact.value} {_phrase(fact.relation)} {entity.name}"


def _day(moment: datetime) -> str:
    return moment.date().isoformat()


def _tier(fact: Fact) -> int:
    """Facts that say what the entity is now first: one value at a time (where it lives, works,
    its role), then its relations to people (``*_of``, marriage), then the rest (likes, visits)."""
    if fact.functional:
        return 0
    if fact.relation.endswith("_of") or fact.relation in SYMMETRIC or fact.relation in ("is_a", "dating"):
        return 1
    return 2


def digest_order(current: list[Fact], history: list[Fact]) -> list[Fact]:
    """The order facts enter a digest: the current ones by tier (:func:`_tier`), then by the
    importance clients gave their memories, then the most recent first (when the fact started,
    then when it was last stated), then the most often stated; then the ended ones, the most
    recently ended first."""
    now = sorted(current, key=lambda f: (_tier(f), -f.importance, -f.valid_from.timestamp(), -f.latest.timestamp(),
                                         -f.memory_count, f.relation, f.value))  # fmt: skip
    before = sorted(history, key=lambda f: (-f.valid_to.timestamp(), -f.valid_from.timestamp(), f.relation, f.value))
    return now + before


def profile_digest(
    *, entity: Entity, current: list[Fact], history: list[Fact], as_of: datetime | None, budget: int
) -> tuple[str, int]:
    """A compact text of the profile within ``budget`` tokens, counted as a memory's
    ``token_count`` is (engram_site.providers.embedding.count_tokens, the count a search's
    ``token_budget`` adds up): a line naming the entity, then a line per fact in
    :func:`digest_order`, each taken if it still fits, under "Now:" and "Before:". A line that
    does not fit is skipped and a shorter one after it may still be taken; a header that does
    not fit leaves the digest empty. Returns the text and its token count."""
    aliases = [a for a in entity.aliases if a != entity.normalized_name][:5]
    head = f"{entity.name} ({entity.type.lower()})"
    if aliases:
        head += f", also known as {', '.join(aliases)}"
    if as_of is not None:
        head += f", as of {_day(as_of)}"
    head += "."
    lines = []
    for fact in digest_order(current, history):
        if fact.current:
            lines.append((True, f"- {fact_text(entity, fact)} (since {_day(fact.valid_from)})"))
        else:
            lines.append((False, f"- {fact_text(entity, fact)} ({_day(fact.valid_from)} to {_day(fact.valid_to)})"))
    sections = {True: "Now:", False: "Before:"}
    costs = embedding.count_tokens([head, *sections.values(), *(text for _, text in lines)])
    head_cost, section_cost, line_costs = costs[0], dict(zip(sections, costs[1:3], strict=True)), costs[3:]
    if head_cost > budget:
        return "", 0
    chosen: dict[bool, list[str]] = {True: [], False: []}
    used = head_cost
    for (now, text), cost in zip(lines, line_costs, strict=True):
        cost += 0 if chosen[now] else section_cost[now]
        if used + cost <= budget:
            chosen[now].append(text)
            used += cost
    parts = [head]
    for now in (True, False):
        if chosen[now]:
            parts += [sections[now], *chosen[now]]
    text = "\n".join(parts)
    # WordPiece counts words one by one, so the whole counts what its parts did; counted again
    # all the same, and trimmed from the end if it ever did not.
    tokens = embedding.count_tokens([text])[0]
    while tokens > budget and len(parts) > 1:
        parts.pop()
        if parts[-1] in sections.values():
            parts.pop()
        text = "\n".join(parts)
        tokens = embedding.count_tokens([text])[0]
    return text, tokens
