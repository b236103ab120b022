"""Long memories in the ``vector`` signal: a memory's passages nearest the question (found by
:func:`memories.retrieval.vector.nearest_passages`, or here for hits another signal found), and a
memory's similarity as the best of its own vector's and its passages'.

A memory's own vector is of its first ~1,000 characters (the model's window); its passages
(memories.passages) cover the rest. ``passages`` (a ranking knob) decides how they count:
``"off"``, the memory's own vector alone; ``"max"``, the best of its own vector
and its passages (a memory is as near as its nearest part), with ``passage_second`` > 0 drawing
that towards the second best (``(1 - w) x best + w x second``: a memory two of whose parts match
ranks above one with a single lucky window), and ``passage_discount`` is taken off a passage's
similarity (a long memory has many windows, so more chances to be near any question than a short
one). Memories found only through a passage join the list,
so a long memory is a candidate when any of its parts is near the question.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from engram_site.db import binding_cursor
from engram_site.replica import read_connection
from memories import ranking


@dataclass(frozen=True)
class PassageMatch:
    """A memory's passage nearest the question."""

    ordinal: int
    start: int
    end: int
    similarity: float

    def as_json(self) -> dict:
        return {"ordinal": self.ordinal, "start": self.start, "end": self.end}


def passages_of(memory_ids: list, query_vector, *, model: str) -> dict[uuid.UUID, list[PassageMatch]]:
    """The nearest passages of these memories (found by another signal), best first, at most two
    each: which part of a long memory a hit is about."""
    if not memory_ids:
        return {}
    vector = np.asarray(query_vector, dtype=np.float32)
    with binding_cursor(read_connection()) as cur:
        cur.execute(
            """
            SELECT p.memory_id, p.ordinal, p.char_start, p.char_end, 1 - (p.embedding <=> %s::vector)
            FROM memory_passages p
            JOIN memories m ON m.id = p.memory_id AND m.text_hash IS NOT DISTINCT FROM p.text_hash
            WHERE p.memory_id = ANY(%s::uuid[]) AND p.embedding IS NOT NULL AND p.embedding_model = %s
            """,
            [vector, [str(i) for i in memory_ids], model],
        )
        rows = sorted(cur.fetchall(), key=lambda r: r[4], reverse=True)
    return grouped(rows)


def grouped(rows) -> dict[uuid.UUID, list[PassageMatch]]:
    """Rows (memory, ordinal, start, end, similarity), best first, as each memory's two best."""
    found: dict[uuid.UUID, list[PassageMatch]] = {}
    for memory_id, ordinal, start, end, similarity in rows:
        matches = found.setdefault(memory_id, [])
        if len(matches) < 2:
            matches.append(PassageMatch(ordinal, start, end, float(similarity)))
    return found


def with_passages(
    ranked: list[tuple[uuid.UUID, float]],
    matches: dict[uuid.UUID, list[PassageMatch]],
    config: ranking.RankingConfig,
) -> list[tuple[uuid.UUID, float]]:
    """The ``vector`` list with each memory scored by the best of its own vector and its passages
    (``passage_second``: drawn towards the second best), memories found only by a passage
    included; best first, ``candidates`` long."""
    if config.passages == "off" or not matches:
        return ranked
    scores = dict(ranked)
    w = config.passage_second
    for memory_id, found in matches.items():
        own = scores.get(memory_id)
        sims = sorted(
            [m.similarity - config.passage_discount for m in found] + ([own] if own is not None else []), reverse=True
        )
        best = sims[0]
        second = sims[1] if len(sims) > 1 else best
        scores[memory_id] = (1.0 - w) * best + w * second
    merged = sorted(scores.items(), key=lambda r: (-r[1], str(r[0])))
    return merged[: config.candidates]
