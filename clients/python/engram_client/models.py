"""Typed results of the API.

Each is a frozen dataclass holding the fields this client knows: those of the server's output
serializers, which tests/clients/test_client_schema.py checks against the server's OpenAPI
schema (names, types, what may be null or missing). The whole answer stays in
``raw``, so a field added by a newer server is readable (``memory["new_field"]``,
``memory.extra``) before the client learns its name, and nothing breaks meanwhile. Fields a
token does not get (a write-only token's ``PATCH`` answers ``{"id"}``) are ``None``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

M = TypeVar("M", bound="Model")


@dataclass(frozen=True, kw_only=True)
class Model:
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls: type[M], data: dict[str, Any]) -> M:
        hints = _hints(cls)
        values = {
            f.name: _convert(hints[f.name], data[f.name])
            for f in dataclasses.fields(cls)
            if f.name != "raw" and f.name in data
        }
        return cls(**values, raw=data)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @property
    def extra(self) -> dict[str, Any]:
        """The answer's fields this client has no attribute for."""
        known = {f.name for f in dataclasses.fields(self)}
        return {k: v for k, v in self.raw.items() if k not in known}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(hint: Any, value: Any) -> Any:
    """``value`` from JSON as ``hint`` says: datetimes parsed, nested models built; anything
    unexpected is left as it came rather than refused."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(options[0], value) if len(options) == 1 else value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint) or (Any,)
        return [_convert(item, v) for v in value]
    if hint is datetime and isinstance(value, str):
        return parse_datetime(value)
    if isinstance(hint, type) and issubclass(hint, Model) and isinstance(value, dict):
        return hint.from_api(value)
    return value


def parse_datetime(value: str) -> datetime | str:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return value


# --- buckets ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Bucket(Model):
    id: str
    name: str | None = None
    description: str | None = None
    created_at: datetime | None = None
    retention_days: int | None = None
    memory_count: int | None = None  # GET /buckets/{id} only
    pending_enrichment: int | None = None  # GET /buckets/{id} only
    embedding_model: str | None = None  # GET /buckets/{id} only
    embedding_switch: dict | None = None  # GET /buckets/{id} only: {"model", "staged", "memories"} or None


@dataclass(frozen=True, kw_only=True)
class MergeResult(Model):
    dry_run: bool | None = None
    source_id: str | None = None
    target_id: str | None = None
    memories: int | None = None
    memories_to_move: int | None = None
    memories_to_dedup: int | None = None
    entities: int | None = None
    entities_to_merge: int | None = None
    duplicate_candidates: int | None = None
    tokens_to_repoint: int | None = None
    sources: int | None = None
    sources_to_dedup: int | None = None
    moved: int | None = None
    deduplicated: int | None = None
    entities_merged: int | None = None
    source_removed: bool | None = None


@dataclass(frozen=True, kw_only=True)
class LearnedRanking(Model):
    """What a bucket's ranking learned from its feedback (``get_learned_ranking``): ``status`` is
    ``none``, ``in_use`` (``settings`` are used by its searches), ``defaults_kept`` or ``reset``;
    ``held_back_score`` and ``training_score`` are ``{"defaults", "learned"}``."""

    bucket_id: str
    status: str
    settings: dict[str, Any] = field(default_factory=dict)
    learned_at: datetime | None = None
    reset_at: datetime | None = None
    ratings: int | None = None
    ratings_now: int | None = None
    min_ratings: int | None = None
    questions: dict[str, int] | None = None
    held_back_score: dict[str, float] | None = None
    training_score: dict[str, float] | None = None
    searches: int | None = None


# --- memories -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WriteResult(Model):
    """One written memory: its id, and whether the bucket already held the same text."""

    id: str
    deduplicated: bool = False


@dataclass(frozen=True, kw_only=True)
class Memory(Model):
    id: str
    bucket_id: str | None = None
    content: str | None = None
    created_at: datetime | None = None
    last_accessed_at: datetime | None = None
    attributed_to: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    source_actor_id: str | None = None
    hint_root: str | None = None
    hint_tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    classified_scope: str | None = None
    classified_topic: str | None = None
    token_count: int | None = None
    linked_memory_ids: list[str] | None = None
    links: list[dict[str, Any]] | None = None  # each link of linked_memory_ids with its kind: {"id", "kind"}
    superseded_at: datetime | None = None
    superseded_by: str | None = None
    importance: float | None = None
    expires_at: datetime | None = None
    context: str | None = None
    enrichment: dict[str, str] | None = None
    source: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class SearchHit(Model):
    id: str
    bucket_id: str | None = None  # from search_buckets
    content: str | None = None
    score: float | None = None
    created_at: datetime | None = None
    attributed_to: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    source_actor_id: str | None = None
    hint_root: str | None = None
    hint_tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    classified_scope: str | None = None
    classified_topic: str | None = None
    token_count: int | None = None
    superseded: bool | None = None
    superseded_by: str | None = None
    importance: float | None = None
    explain: dict[str, Any] | None = None  # with explain=True
    # A long memory's passage nearest the question: {"ordinal", "start", "end"}.
    passage: dict[str, Any] | None = None
    # Set when content is part of the memory (its passage with a little context): {"start", "end"}.
    excerpt: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Block(Model):
    """A memory block: a named text kept in every prompt; ``etag`` is what a change sends back
    in ``if_match``."""

    label: str
    id: str | None = None  # a change-feed event's block_id
    bucket_id: str | None = None
    agent_id: str | None = None  # None: the bucket's shared block
    content: str | None = None
    token_count: int | None = None
    max_tokens: int | None = None
    version: int | None = None
    etag: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class BlockVersion(Model):
    version: int
    change: str | None = None  # created or edited
    content: str | None = None
    token_count: int | None = None
    max_tokens: int | None = None
    reason: str | None = None
    actor: dict[str, Any] | None = None  # {"kind", "id", "label"}
    edited_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class SearchResult(Model):
    """A search's answer; iterating it iterates its hits."""

    results: list[SearchHit] = field(default_factory=list)
    mode_used: str | None = None
    warnings: list[str] = field(default_factory=list)
    total_tokens: int | None = None
    buckets: list[dict[str, Any]] = field(default_factory=list)  # from search_buckets: {"id", "name"}
    # With include_blocks: the memory blocks to put first (inside the token budget), and those left out.
    blocks: list[Block] = field(default_factory=list)
    blocks_left_out: list[dict[str, Any]] = field(
        default_factory=list
    )  # {"bucket_id", "label", "agent_id", "token_count"}
    explain: dict[str, Any] | None = None  # with explain and include_blocks: the budget's shares

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)


@dataclass(frozen=True, kw_only=True)
class Version(Model):
    version: int | None = None
    kind: str | None = None
    changed: list[str] | None = None
    previous: dict[str, Any] | None = None
    details: dict[str, Any] | None = None
    actor: dict[str, Any] | None = None
    at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class History(Model):
    memory_id: str
    state: str | None = None
    versions: list[Version] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Feedback(Model):
    """A rating of a memory for a query (``rate``)."""

    id: int
    memory_id: str | None = None
    bucket_id: str | None = None
    signal: str | None = None
    query: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    # False when the server's embedding model was down: kept, but it changes no ranking.
    embedded: bool | None = None


@dataclass(frozen=True, kw_only=True)
class DeletedMemory(Model):
    id: str
    bucket_id: str | None = None
    content: str | None = None
    reason: str | None = None
    deleted_at: datetime | None = None
    purge_after: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ImportResult(Model):
    lines: int = 0
    imported: int = 0
    deduplicated: int = 0
    embeddings_reused: int = 0
    rejected_count: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    pending_enrichment: int | None = None
    blocks_imported: int = 0
    blocks_unchanged: int = 0
    feedback_imported: int = 0
    feedback_unchanged: int = 0
    feedback_skipped: int = 0


@dataclass(frozen=True, kw_only=True)
class ErasureResult(Model):
    dry_run: bool | None = None
    bucket_id: str | None = None
    memories: int = 0
    deleted_memories: int = 0
    versions: int = 0
    access_times: int = 0
    enrichment_failures: int = 0
    keys: int = 0
    feedback: int = 0
    contexts_cleared: int = 0
    graph_mentions: int = 0
    graph_edges: int = 0
    graph_entities: int = 0
    sources: int = 0
    source_chunks: int = 0
    duplicate_candidates: int = 0
    conflict_candidates: int = 0
    blocks: int = 0
    block_versions: int = 0
    audit_events_scrubbed: int = 0


# --- documents and conversations ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SourceSubmitted(Model):
    id: str
    status: str | None = None
    deduplicated: bool | None = None
    chunks_total: int | None = None


@dataclass(frozen=True, kw_only=True)
class Source(Model):
    id: str
    bucket_id: str | None = None
    kind: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    status: str | None = None
    progress: dict[str, Any] | None = None
    memories_created: int | None = None
    memories_deduplicated: int | None = None
    dropped: int | None = None
    error: str | None = None
    attempts: int | None = None
    distilled_by: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    chunks: list[dict[str, Any]] | None = None  # get_source only
    chunk_offset: int | None = None
    chunk_limit: int | None = None


@dataclass(frozen=True, kw_only=True)
class SourceDeleted(Model):
    id: str
    memories_deleted: int = 0
    memories_kept: int = 0


# --- knowledge graph ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EntityRef(Model):
    id: str
    name: str | None = None
    type: str | None = None


@dataclass(frozen=True, kw_only=True)
class Edge(Model):
    id: str
    subject: EntityRef | None = None
    predicate: str | None = None
    object: EntityRef | None = None
    object_literal: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    current: bool | None = None
    confidence: float | None = None
    source_memory_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Entity(Model):
    id: str
    bucket_id: str | None = None
    name: str | None = None
    type: str | None = None
    aliases: list[str] | None = None
    mention_count: int | None = None
    current_edges: list[Edge] | None = None  # get_entity only
    historical_edges: list[Edge] | None = None  # get_entity only


@dataclass(frozen=True, kw_only=True)
class EdgeMemories(Model):
    edge: Edge | None = None
    results: list[Memory] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ProfileMemory(Model):
    id: str
    content: str | None = None
    created_at: datetime | None = None
    agent_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProfileFact(Model):
    """One thing the memories say about an entity: ``relation`` to ``value`` over
    ``valid_from``–``valid_to``, with the memories stating it (the newest few; ``memory_count``
    counts them all). ``direction`` is ``"in"`` when the entity is the relation's object
    ("Priya manager_of Maya", on Maya's profile)."""

    relation: str | None = None
    direction: str | None = None
    value: str | None = None
    entity: EntityRef | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    current: bool | None = None
    functional: bool | None = None
    confidence: float | None = None
    edge_ids: list[str] = field(default_factory=list)
    memory_count: int | None = None
    memories: list[ProfileMemory] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class RelatedEntity(Model):
    id: str
    name: str | None = None
    type: str | None = None
    relations: list[str] = field(default_factory=list)
    current: bool | None = None
    facts: int | None = None


@dataclass(frozen=True, kw_only=True)
class Profile(Model):
    """What is known about an entity: its ``current`` facts and their ``history``, newest
    first, the entities it is ``related`` to, and (with ``budget``) a ``digest`` for a prompt."""

    entity: Entity | None = None
    as_of: datetime | None = None
    current: list[ProfileFact] = field(default_factory=list)
    history: list[ProfileFact] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    related: list[RelatedEntity] = field(default_factory=list)
    truncated: bool | None = None
    digest: str | None = None  # with budget only
    digest_tokens: int | None = None  # with budget only
