"""Feedback in the ranking: what agents said of memories for questions like this one.

A rating (``search_feedback``: memories.services.feedback) counts for a new query by how alike
the two questions are and how recent it is: its *weight* is

    closeness x 0.5 ** (age_days / feedback_half_life_days),
    closeness = (similarity - feedback_similarity) / (1 - feedback_similarity), within [0, 1],

where similarity is the cosine of the two queries' vectors (the bucket's model). A memory's
*useful* weight is the largest of its useful ratings', its *irrelevant* weight the largest of
its irrelevant ratings'. A question unlike every rated one (similarity at most
``feedback_similarity``) is ranked exactly as without feedback.

- A memory rated useful gains ``feedback_weight`` x its useful weight x the best fused score of
  the search (added to its fused score, as the neighbour lift is), and joins the candidates if no
  signal found it: an answer rated useful comes back for a paraphrase whose words missed it.
- A memory rated irrelevant is multiplied by ``1 - feedback_demotion`` x its irrelevant weight:
  it stops winning the questions it was rated for, and only those.

Both are bounded: the lift by ``feedback_weight`` x the best fused score, the demotion by
``feedback_demotion``. What it costs a search is one statement (:func:`ratings_near`): the
bucket's ratings newer than the horizon, through ``idx_search_feedback_bucket``, joined to
their memories for the search's filters; a bucket without ratings answers it from an empty
index range. It needs the query's vector, so a keyword search (or one without a model) runs
without feedback.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from engram_site import tracing
from engram_site.db import binding_cursor
from engram_site.replica import read_connection
from memories import ranking
from memories.filters import MemoryFilters, in_buckets
from memories.models import FeedbackSignal
from tenants.models import Bucket

# Ratings older than this many half-lives weigh under 0.1% and are not read.
HORIZON_HALF_LIVES = 10
# The most ratings one search reads (the nearest questions first).
MAX_RATINGS = 200


@dataclass(frozen=True)
class FeedbackScore:
    """What a memory's ratings say for this query: each weight in [0, 1]."""

    useful: float = 0.0
    irrelevant: float = 0.0
    ratings: int = 0

    def lift(self, config: ranking.RankingConfig, top: float) -> float:
        return config.feedback_weight * self.useful * top

    def factor(self, config: ranking.RankingConfig) -> float:
        return 1.0 - config.feedback_demotion * self.irrelevant


def applies(config: ranking.RankingConfig) -> bool:
    return config.feedback_weight > 0 or config.feedback_demotion > 0


def rating_weight(similarity: float, age_days: float, config: ranking.RankingConfig) -> float:
    floor = config.feedback_similarity
    closeness = min(1.0, max(0.0, (similarity - floor) / (1.0 - floor)))
    return closeness * 0.5 ** (max(age_days, 0.0) / config.feedback_half_life_days)


@tracing.traced("engram.search.feedback")
def ratings_near(
    bucket: Bucket | list[Bucket],
    query_vector: np.ndarray,
    model: str,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    now: datetime,
) -> dict[uuid.UUID, FeedbackScore]:
    """The memories rated for questions like the query (similarity above ``feedback_similarity``),
    by the bucket's model, with what their ratings say: one statement. The memories pass the
    search's filters (a rated memory joins the candidates only if a signal could have found it);
    a token held to agents counts only the ratings its agents gave, or shared ones it may read."""
    where, params = filters.sql(bucket, "m")
    scope, scope_params = in_buckets(bucket, "f")
    clauses = [*scope, "f.embedding_model = %s", "f.created_at > %s", "f.query_embedding IS NOT NULL"]
    try:
        horizon = now - timedelta(days=config.feedback_half_life_days * HORIZON_HALF_LIVES)
    except OverflowError:  # a search "as of" the first centuries: every rating is younger than that
        horizon = datetime.min.replace(tzinfo=UTC)
    extra: list = [*scope_params, model, horizon]
    if filters.as_of is not None:
        clauses.append("f.created_at <= %s")
        extra.append(filters.as_of)
    if filters.agents is not None:
        clause, agent_params = filters.agents.sql("f.agent_id")
        clauses.append(clause)
        extra += agent_params
    # Bound apart from the statement, in binary (binding_cursor), as the vector walks bind it:
    # spelling 384 decimals into the SQL cost ~0.2 ms of Python per search, and their parsing.
    vector = np.asarray(query_vector, dtype=np.float32)
    # idx_search_feedback_bucket: (tenant_id, bucket_id, created_at) > horizon. Each rating's
    # distance is computed once (the CTE), then the near ones are joined to their memories by
    # primary key for the search's filters.
    sql = f"""
        WITH rated AS MATERIALIZED (
            SELECT f.memory_id, f.signal, f.created_at, 1 - (f.query_embedding <=> %s::vector) AS similarity
            FROM search_feedback f
            WHERE {" AND ".join(clauses)}
        )
        SELECT r.memory_id, r.signal, r.created_at, r.similarity
        FROM rated r JOIN memories m ON m.id = r.memory_id
        WHERE r.similarity > %s AND {where}
        ORDER BY r.similarity DESC
        LIMIT {MAX_RATINGS}
    """
    with binding_cursor(read_connection()) as cur:
        cur.execute(sql, [vector, *extra, config.feedback_similarity, *params])
        found = cur.fetchall()
    useful: dict[uuid.UUID, float] = {}
    irrelevant: dict[uuid.UUID, float] = {}
    counts: dict[uuid.UUID, int] = {}
    for memory_id, signal, created_at, similarity in found:
        weight = rating_weight(float(similarity), (now - created_at).total_seconds() / 86400, config)
        side = useful if signal == FeedbackSignal.USEFUL else irrelevant
        side[memory_id] = max(side.get(memory_id, 0.0), weight)
        counts[memory_id] = counts.get(memory_id, 0) + 1
    return {
        memory_id: FeedbackScore(useful.get(memory_id, 0.0), irrelevant.get(memory_id, 0.0), count)
        for memory_id, count in counts.items()
    }


def lift_rated(
    fused: dict, scores: dict[uuid.UUID, FeedbackScore], config: ranking.RankingConfig
) -> tuple[dict, dict[uuid.UUID, float]]:
    """Fused scores with each memory rated useful lifted (and joined to the candidates), and the
    lifts. The best fused score is taken before any lift, so one lift does not feed another."""
    if not scores or config.feedback_weight <= 0:
        return fused, {}
    top = max(fused.values(), default=0.0) or 1.0
    lifted = dict(fused)
    lifts: dict[uuid.UUID, float] = {}
    for memory_id, score in scores.items():
        lift = score.lift(config, top)
        if lift > 0:
            lifts[memory_id] = lift
            lifted[memory_id] = fused.get(memory_id, 0.0) + lift
    return lifted, lifts
