"""A memory on its way into the table: what a caller gives, what it may carry, what it becomes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np


@dataclass
class MemoryInput:
    content: str
    attributed_to: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    source_actor_id: str | None = None
    hint_root: str | None = None
    hint_tags: list[str] | None = None
    metadata: dict | None = None
    created_at: datetime | None = None
    importance: float | None = None
    expires_at: datetime | None = None


@dataclass
class Carried:
    """Derived columns a memory brings along instead of having them computed: an import
    (memories.services.transfer) keeps the context, sequence place, classification and — when
    the export holds them for the same model — the vectors the exporting bucket had."""

    context_text: str | None = None
    sequence_id: uuid.UUID | None = None
    sequence_index: int | None = None
    classified_scope: str | None = None
    classified_topic: str | None = None
    embedding: np.ndarray | None = None
    context_embedding: np.ndarray | None = None


@dataclass(frozen=True)
class IngestResult:
    id: uuid.UUID
    deduplicated: bool


@dataclass
class Row:
    item: MemoryInput
    id: uuid.UUID
    text_hash: str
    created_at: datetime
    hashed_chars: int = 0  # the length of the text the hash is taken of (the insert order's first key)
    context_text: str | None = None
    text_lemmatized: str | None = None
    context_lemmatized: str | None = None
    token_count: int | None = None
    embedding: np.ndarray | None = None
    context_embedding: np.ndarray | None = None
    sequence_id: uuid.UUID | None = None
    sequence_index: int | None = None
    classified_scope: str | None = None
    classified_topic: str | None = None
    embed: bool = True  # False: the vectors it lacks are left to the enrichment sweep
    extra: dict = field(default_factory=dict)

    def carry(self, carried: Carried) -> None:
        for name in ("context_text", "sequence_id", "sequence_index", "classified_scope", "classified_topic",
                     "embedding", "context_embedding"):  # fmt: skip
            setattr(self, name, getattr(carried, name))

    def needs_vectors(self) -> bool:
        return self.embed and (
            self.embedding is None or (self.context_text is not None and self.context_embedding is None)
        )
