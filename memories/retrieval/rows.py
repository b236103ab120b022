"""Reading the rows of a search's candidates, only those that can still reach its top."""

from __future__ import annotations

import heapq
import json
import uuid
from operator import itemgetter

from psycopg.types.datetime import TimestamptzLoader

from engram_site import tracing
from engram_site.replica import read_connection
from memories import ranking
from memories.filters import in_buckets
from memories.retrieval.fusion import QueryCues, boost_bounds
from tenants.models import Bucket

ROW_COLUMNS = (
    "id", "bucket_id", "content", "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id",
    "hint_root", "hint_tags", "metadata", "classified_scope", "classified_topic", "token_count", "context_text",
    "linked_memory_ids", "superseded_at", "superseded_by", "importance", "expires_at", "sequence_id",
)  # fmt: skip


_COLUMNS = ", ".join(ROW_COLUMNS)

# Django has psycopg hand JSONB back as text (its JSONField decodes it); raw rows decode here.
_JSON_COLUMNS = ("metadata", "linked_memory_ids")


def uuid_array(ids) -> str:
    """``ids`` as the text of a PostgreSQL array, for ``= ANY(%s)``: the driver adapts a list of
    UUIDs one element at a time (~2 µs each; a search sends a few hundred ids), this joins them."""
    return "{" + ",".join(i.hex if isinstance(i, uuid.UUID) else str(uuid.UUID(str(i))) for i in ids) + "}"


def best_ids(scores: dict, k: int) -> list:
    """The ids of the ``k`` highest ``scores``, best first, ties in the dict's order: what
    ``sorted(scores, key=lambda i: -scores[i])[:k]`` gives, without sorting every candidate, and
    over the (id, score) pairs, so no id is hashed again."""
    return [memory_id for memory_id, _score in heapq.nlargest(k, scores.items(), key=itemgetter(1))]


def _timestamps_in_c(cursor) -> None:
    """Have ``cursor`` (a Django cursor) read ``timestamptz`` columns with the driver's own
    loader (compiled, with psycopg[binary] or [c]: registering the Python class picks it)
    instead of the Python loader Django registers on every connection to set the connection's
    time zone: ~6 µs a value against ~0.5, some 0.6 ms of a search that reads ~120 rows. Both
    give the same datetimes: Django sets the session's ``TimeZone`` to its own, and the driver's
    loader reads that zone."""
    cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


def _important(bucket: Bucket | list[Bucket]) -> tuple[str, list]:
    """The bucket's memories that have an importance (idx_memories_important), as alias ``i``."""
    scope, params = in_buckets(bucket, "i")
    return " AND ".join([*scope, "i.importance IS NOT NULL"]), params


def fetch_rows(
    bucket: Bucket | list[Bucket],
    ids: list[uuid.UUID],
    important: list[uuid.UUID] | None = None,
    *,
    decode: bool = True,
) -> dict[uuid.UUID, dict]:
    """The rows of ``ids``, and of those of ``important`` that have an ``importance``.

    ``decode=False`` leaves the JSON columns as the text the database sent, for
    :func:`decode_json` to decode on the rows that are answered: the ranking reads none of
    them, and a search reads ~140 rows to answer 10 (two ``json.loads`` each, ~0.4 ms).

    ``important`` costs a second statement only in a bucket where some memory has an
    importance: the first one asks (an empty partial index, idx_memories_important, answers
    for the others). Sending a few hundred ids to ask about each would cost about a millisecond
    of every search."""
    if not ids and not important:
        return {}
    important_where, important_params = _important(bucket)
    scope, scope_params = in_buckets(bucket, None)
    probe = f", EXISTS (SELECT 1 FROM memories i WHERE {important_where}) AS probe" if important else ""
    params: list = important_params * bool(important) + [*scope_params, uuid_array(ids)]
    with read_connection().cursor() as cur:
        _timestamps_in_c(cur)
        cur.execute(f"SELECT {_COLUMNS}{probe} FROM memories WHERE {' AND '.join(scope)} AND id = ANY(%s)", params)
        found = cur.fetchall()
        # zip stops at the last column: the probe, when there is one, is left out.
        rows = {row[0]: dict(zip(ROW_COLUMNS, row, strict=False)) for row in found}
        if important and (not found or found[0][-1]):
            cur.execute(
                f"SELECT {_COLUMNS} FROM memories i WHERE {important_where} AND i.id = ANY(%s)",
                [*important_params, uuid_array(important)],
            )
            rows.update((row[0], dict(zip(ROW_COLUMNS, row, strict=False))) for row in cur.fetchall())
    if decode:
        for row in rows.values():
            decode_json(row)
    return rows


def decode_json(row: dict) -> dict:
    """Decode the row's JSON columns in place (those still text); returns the row."""
    for column in _JSON_COLUMNS:
        if isinstance(row[column], str):
            row[column] = json.loads(row[column])
    return row


@tracing.traced("engram.search.rows")
def fetch_contenders(
    bucket: Bucket | list[Bucket],
    fused: dict,
    config: ranking.RankingConfig,
    k: int | None,
    cues: QueryCues,
    discount: float = 1.0,
) -> dict[uuid.UUID, dict]:
    """The rows of the fused candidates that can still reach the top ``k`` once boosted.

    Boosts multiply the fused score by at least ``min_boost`` and at most ``max_boost``
    (their bounds under ``config`` for this query: :func:`fusion.boost_bounds`), so a
    candidate whose fused score is below the k-th one's x min_boost / max_boost cannot
    overtake it: its row is not read — unless it has an ``importance``, whose boost the bounds
    leave out (so the rows read, and the answer, are the same as before for a bucket that never
    sets importance). With a token budget (``k`` None) any candidate may fit, so all are read;
    if rows of the top k were deleted meanwhile, or a row read is a superseded memory whose
    successor is a candidate too (:func:`_capped`), the rest are read too.
    ``discount``: the least share of its score a hit keeps after the boosts (the diversity
    step's), which lowers the bar as much. The rows' JSON columns are left as text
    (:func:`decode_json` decodes those of the hits answered).
    """
    ids = list(fused)
    if k is None or len(ids) <= k:
        return fetch_rows(bucket, ids, decode=False)
    min_boost, max_boost = boost_bounds(config, cues)
    best = best_ids(fused, k)
    threshold = fused[best[-1]] * min_boost / max_boost * discount
    contenders, others = [], []
    for memory_id, score in fused.items():
        (contenders if score >= threshold else others).append(memory_id)
    rows = fetch_rows(bucket, contenders, others if config.importance_boost else [], decode=False)
    if sum(1 for memory_id in best if memory_id in rows) < k or _capped(rows, fused):
        rows.update(fetch_rows(bucket, [memory_id for memory_id in ids if memory_id not in rows], decode=False))
    return rows


def _capped(rows: dict[uuid.UUID, dict], fused: dict) -> bool:
    """Whether a row read may be capped below its successor (fusion.below_successors): a
    superseded memory whose successor is a candidate too. Its score can then fall further
    than the least boost the cut allows for, so the cut no longer bounds who reaches the top."""
    return any(row["superseded_at"] is not None and row["superseded_by"] in fused for row in rows.values())
