"""Session context: the memories of a strongly found memory's session join the candidates.

A question whose answer is spread over one conversation ("what did the first trial fail on,
and what did we do about each problem?") is often found by one of its memories; the others
said less in the question's words. Here the memories written in the same sequence (a run, or
one write request's batch: ``sequence_id``) as the ``session_sources`` best candidates, up to
:data:`SESSION_WINDOW` places either way, gain

    session_context x the source's fused score x the memory's own similarity to the question
                                                  / the best similarity of the vector list

found by a signal or not. The similarity is computed exactly over those rows only (one
statement through ``idx_memories_sequence``), so a session's memories are ranked by how much
they have to do with the question rather than lifted alike.
"""

from __future__ import annotations

import heapq
import uuid

import numpy as np

from engram_site import tracing
from engram_site.db import binding_cursor
from engram_site.replica import read_connection
from memories import ranking
from memories.filters import MemoryFilters, in_buckets
from tenants.models import Bucket

# How far from its source, either way in the sequence, a memory is read: a run can be
# thousands of memories long, a conversation's session is tens.
SESSION_WINDOW = 30


@tracing.traced("engram.search.sessions")
def session_rows(
    bucket: Bucket | list[Bucket],
    fused: dict,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    query_vector: np.ndarray,
    best_similarity: float,
) -> list[tuple]:
    """(memory id, source id, similarity to the question) of the memories near the
    ``session_sources`` best ``fused`` candidates (before any lift) in their sequences: one
    statement, which needs only what the fusion found, so the search runs it beside the
    neighbour lift (:func:`with_session_lifts` adds the lifts after theirs)."""
    if best_similarity <= 0 or not fused:
        return []
    # Best first, ties by id (a UUID orders as its text does); as sorted(…)[:n], without the sort.
    best = heapq.nsmallest(config.session_sources, fused.items(), key=lambda pair: (-pair[1], pair[0]))
    sources = [memory_id for memory_id, _score in best]
    where, params = filters.sql(bucket)
    scope, scope_params = in_buckets(bucket, None)
    with binding_cursor(read_connection()) as cur:
        cur.execute(
            f"""
            WITH source AS (
                SELECT id AS source_id, sequence_id, sequence_index FROM memories
                WHERE {" AND ".join(scope)} AND id = ANY(%s::uuid[]) AND sequence_id IS NOT NULL
            )
            SELECT m.id, s.source_id, 1 - (m.embedding <=> %s::vector)
            FROM source s
            JOIN memories m ON m.sequence_id = s.sequence_id
                AND m.sequence_index BETWEEN s.sequence_index - %s AND s.sequence_index + %s
            WHERE {where} AND m.id <> s.source_id AND m.embedding IS NOT NULL
            """,
            [*scope_params, list(sources), np.asarray(query_vector, dtype=np.float32),
             SESSION_WINDOW, SESSION_WINDOW, *params],
        )  # fmt: skip
        return cur.fetchall()


def with_session_lifts(
    rows: list[tuple], fused: dict, lifted: dict, config: ranking.RankingConfig, best_similarity: float
) -> tuple[dict, dict]:
    """``lifted`` plus the session lift of each memory of ``rows`` (:func:`session_rows`), and the lifts."""
    if not rows:
        return lifted, {}
    out = dict(lifted)
    lifts: dict[uuid.UUID, float] = {}
    for memory_id, source_id, similarity in rows:
        share = min(1.0, max(0.0, float(similarity)) / best_similarity)
        lift = config.session_context * fused[source_id] * share
        if lift > lifts.get(memory_id, 0.0):
            lifts[memory_id] = lift
    for memory_id, lift in lifts.items():
        out[memory_id] = out.get(memory_id, 0.0) + lift
    return out, lifts
