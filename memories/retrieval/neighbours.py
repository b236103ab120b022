"""The neighbour lift: the sequence neighbours of the best candidates, read in one statement."""

from __future__ import annotations

from engram_site import tracing
from engram_site.replica import read_connection
from memories import ranking, text
from memories.filters import MemoryFilters, in_buckets
from memories.retrieval.rows import best_ids, uuid_array
from tenants.models import Bucket

# The best candidates whose sequence neighbours are brought in, and how far either way.
NEIGHBOUR_SOURCES = 20


@tracing.traced("engram.search.neighbours")
def lift_neighbours(
    bucket: Bucket | list[Bucket], fused: dict, filters: MemoryFilters, config: ranking.RankingConfig
) -> tuple[dict, dict]:
    """Fused scores with the neighbour lift (:func:`ranking.lift_neighbours`), and each lift.

    One statement reads the places of the best :data:`NEIGHBOUR_SOURCES` candidates and every
    memory up to ``neighbour_reach`` places before and after them in their sequences (through
    ``idx_memories_sequence``, under the search's filters). Those neighbours join the
    candidates even if no signal found them: the answer to a question is often the turn after
    it, and shares none of its words. Lifts flow from the best candidates and between the
    memories around them; weaker candidates neither give nor receive one. The same statement
    tells which of them are conversation turns (an ``attributed_to``, or a transcript line's
    speaker), for ``neighbour_turns_only``.
    """
    best = best_ids(fused, NEIGHBOUR_SOURCES)
    where, params = filters.sql(bucket)
    scope, scope_params = in_buckets(bucket, None)
    with read_connection().cursor() as cur:
        cur.execute(
            f"""
            WITH source AS (
                SELECT sequence_id, sequence_index FROM memories
                WHERE {" AND ".join(scope)} AND id = ANY(%s) AND sequence_id IS NOT NULL
            )
            SELECT DISTINCT m.id, m.sequence_id, m.sequence_index, m.attributed_to IS NOT NULL, left(m.content, 100)
            FROM source s
            JOIN memories m ON m.sequence_id = s.sequence_id
                AND m.sequence_index BETWEEN s.sequence_index - %s AND s.sequence_index + %s
            WHERE {where}
            """,
            [*scope_params, uuid_array(best), config.neighbour_reach, config.neighbour_reach, *params],
        )
        rows = cur.fetchall()
    # A place is (sequence, index) with the sequence as a small number: the lift looks places up
    # several times per memory, and a tuple holding a UUID hashes it in Python each time.
    sequences: dict = {}
    position = {row[0]: (sequences.setdefault(row[1], len(sequences)), row[2]) for row in rows}
    turns = {row[0] for row in rows if _is_turn(row[3], row[4])}
    at = {place: memory_id for memory_id, place in position.items()}
    return ranking.lift_neighbours(fused, position, at, config, turns)


def _is_turn(attributed: bool, opening: str) -> bool:
    """Said by someone: an attribution, or a transcript line's speaker ("Caroline: …")."""
    return attributed or text.transcript_speaker(opening) is not None
