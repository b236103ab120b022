"""Key documents: what a memory says, spelled out so that a question finds it by more than its
own words (docs/RETRIEVAL.md, "Keys that carry facts").

A memory's key is its statements, with the dates of their relative expressions written out
(:mod:`.dates`), the entities it mentions by their canonical names and the relations it states,
and its key phrases (:mod:`.phrases`); :mod:`.document` puts them together. The statements, the
entities and the relations are known to apps above memories (the distiller is the sources
app's, the graph the graph app's): each registers a :class:`KeySource` here from its
``AppConfig.ready``, as the graph registers its search signal. This package reads; the key
rows are written by memories/services/keys.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memories.models import Memory

# The recipe's version: a key built by an older one is built again (memory_keys.version).
# 2: a list's introducing line said once (sources/keys.py). 3: a date that names its year in
# the American order ("June 15, 2021") is left alone, not read as "June" of the nearest year.
# 4: each entity mentioned comes with its descriptions from the whole bucket (graph/keys.py).
# 5: an owned thing's kind in its relation ("User owns phone Pixel 8"; graph/keys.py).
KEY_VERSION = 5


@dataclass
class KeyFacts:
    """What one source knows about one memory."""

    # Self-contained sentences saying what the memory says (first person resolved to the speaker).
    statements: list[str] = field(default_factory=list)
    # Entities it mentions, by their canonical names ("Priya Natarajan" for "Priya").
    entities: list[str] = field(default_factory=list)
    # Relations it states, in words ("Marco Rossi manager of Priya Natarajan").
    relations: list[str] = field(default_factory=list)
    # What an entity it mentions is, as said anywhere in the bucket ("Sofie: user partner,
    # veterinarian"): a question that describes the entity finds the memory that names it.
    descriptions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KeySource:
    """An app's part of key documents.

    ``facts(memories)`` returns :class:`KeyFacts` per memory id (a memory it has nothing about
    may be left out); ``waiting(memory_ids)`` the memories it has not worked on yet, whose keys
    wait for it (the graph has not extracted them): the app asks for their keys to be built
    once it has (:func:`memories.services.keys.keys_mark_stale` and the task it queues).
    """

    name: str
    facts: Callable[[list[Memory]], dict[uuid.UUID, KeyFacts]]
    waiting: Callable[[list[uuid.UUID]], set[uuid.UUID]] | None = None


_sources: dict[str, KeySource] = {}


def register_key_source(source: KeySource) -> None:
    """Add (or replace, by name) an app's part of key documents."""
    _sources[source.name] = source


def key_sources() -> list[KeySource]:
    """The registered sources, by name (the order their parts appear in a key)."""
    return [_sources[name] for name in sorted(_sources)]


def waiting_for(memory_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The memories some source has not worked on yet."""
    ids = list(memory_ids)
    waiting: set[uuid.UUID] = set()
    for source in key_sources():
        if source.waiting is not None and ids:
            waiting |= source.waiting(ids)
    return waiting
