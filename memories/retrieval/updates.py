"""Facts that changed: of two memories at the top of a ranking where the later one states a change
to what the earlier one said, the later one answers a question about the present, the earlier one
a question about what was before.

A fact that changed is written twice: "Tom lives in Madrid." and, a year later, "Tom moved back
to London in the summer." Enrichment links the two (a supersession, ``fusion.below_successors``),
but it runs after the write; until then the older memory often holds more of the question's words
("Where does Tom live?") and ranks first, and a question about the earlier state ("Where did Tom
live before London?") finds the newer one first, since it names what the question names. Here,
at query time, among the best ``newer_fact_pool`` hits, a memory *updates* an older one when

- both are notes, not conversation turns (no ``attributed_to``, no transcript speaker), unless
  ``newer_fact_turns``: in a conversation "now", "new" and "since" are everyday words, and
  on the three evaluation sets (every memory a turn) the rule cost MRR;
- it states a change (:data:`_CHANGE`: "moved", "new", "now", "switched", "since", "no longer",
  "joined", "stopped", "promoted"…);
- it was written at least ``newer_fact_days`` after the older one (``created_at``);
- the older one is, of the pool's older memories, the one most like it, and the cosine of their
  own vectors is at least ``newer_fact_similarity`` (two memories about different things score
  about 0.0-0.3): "Dana got a new number" updates "Dana's phone number is …", not "Dana works at
  the city library", although both are about Dana.

A question about the present (neither about an earlier state nor in the past tense: "did", "was",
"when did", a year…) puts the newer memory of such a pair just above the older one when its
cosine to the question is at least ``newer_fact_ratio`` x the older one's; a question about the
earlier state ("before", "previous", "used to", "originally", "old"…) puts the older one just
above the newer one under the same condition, the other way round. A question in the past tense
alone moves nothing. Only the order inside the pool changes: the set of hits, and recall at any
cut below the pool, stay as they were. ``explain`` shows a move as the ``fact_update`` entry of
the hit moved: the memory it passed, which of the two it is (``newer`` / ``older``), their cosine
and the score it had.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping

import numpy as np

from memories import ranking
from memories.retrieval.hits import Hit
from memories.text import transcript_speaker

# A question about an earlier state of things: the older memory of a pair answers it.
_EARLIER = re.compile(
    r"\b(?:before|previous(?:ly)?|former(?:ly)?|originally|at first|used to|old|earlier|prior)\b", re.IGNORECASE
)
# A question in the past tense or about a time: neither memory of a pair is the obvious answer.
_PAST = re.compile(r"\b(?:did|was|were|had|ago|last (?:year|month|week|time)|(?:19|20)\d\d)\b", re.IGNORECASE)
# A memory that states a change to an earlier fact.
_CHANGE = re.compile(
    r"\b(?:now|new|newly|moved?|moving|switched|changed?|started|joined|quit|stopped|cancell?ed|no longer|"
    r"anymore|instead|since|promoted|became|replaced|upgraded|broke up|retired|nowadays|these days|currently)\b",
    re.IGNORECASE,
)


def wanted(query: str) -> str | None:
    """Which memory of an updated pair the question asks for: "newer", "older", or None."""
    if _EARLIER.search(query):
        return "older"
    if _PAST.search(query):
        return None
    return "newer"


def applies(query: str, config: ranking.RankingConfig) -> bool:
    return config.newer_fact_ratio > 0 and config.newer_fact_pool > 1 and wanted(query) is not None


def states_change(content: str) -> bool:
    return bool(_CHANGE.search(content))


def order_updates(
    hits: list[Hit],
    query: str,
    similarity: Mapping[uuid.UUID, float],
    vectors_of: Callable[[list[uuid.UUID]], dict[uuid.UUID, np.ndarray]],
    config: ranking.RankingConfig,
) -> list[Hit]:
    """``hits`` (best first) with the memory of each updated pair in the pool that the question
    asks for moved just above the other one.

    ``similarity``: each hit's cosine to the question (the vector signal's list; a hit it does
    not hold is never paired); ``vectors_of`` reads the unit vectors of the pool's memories (one
    statement, only when the pool holds a memory that states a change and an older one)."""
    if not applies(query, config):
        return hits
    want = wanted(query)
    pool = hits[: config.newer_fact_pool]
    dated = [
        h
        for h in pool
        if h.row.get("created_at") is not None and h.id in similarity and (config.newer_fact_turns or not _is_turn(h))
    ]
    gap = config.newer_fact_days * 86400
    changes = [h for h in dated if states_change(h.row["content"])]
    if not changes or not any(_older(h, n, gap) for n in changes for h in dated):
        return hits
    found = vectors_of([h.id for h in dated])
    pairs = []  # (newer, older, cosine)
    for newer in changes:
        earlier = [h for h in dated if _older(h, newer, gap) and h.id in found and newer.id in found]
        if earlier:
            cosines = {h.id: float(found[newer.id] @ found[h.id]) for h in earlier}
            older = max(earlier, key=lambda h: cosines[h.id])
            if cosines[older.id] >= config.newer_fact_similarity:
                pairs.append((newer, older, cosines[older.id]))
    order = list(pool)
    for newer, older, cosine in sorted(pairs, key=lambda p: p[0].row["created_at"]):
        first, second = (newer, older) if want == "newer" else (older, newer)
        if order.index(first) > order.index(second) and similarity[first.id] >= (
            config.newer_fact_ratio * similarity[second.id]
        ):
            order.remove(first)
            order.insert(order.index(second), first)
            _rescore(first, second, want, cosine)
    return order + hits[len(pool) :]


def _is_turn(hit: Hit) -> bool:
    """Said by someone in a conversation: an attribution, or a transcript line's speaker."""
    return hit.row.get("attributed_to") is not None or transcript_speaker(hit.row["content"]) is not None


def _older(hit: Hit, newer: Hit, gap: float) -> bool:
    return (newer.row["created_at"] - hit.row["created_at"]).total_seconds() >= gap


def _rescore(moved: Hit, passed: Hit, which: str, cosine: float) -> None:
    before = moved.score
    # Just above the memory it passes: the hits below keep their order and scores still fall.
    moved.score = max(moved.score, passed.score * (1.0 + 1e-6) + 1e-12)
    if moved.explain:
        moved.explain["fact_update"] = {
            "above": str(passed.id), "as": which, "similarity": round(cosine, 4), "score": round(before, 6),
        }  # fmt: skip
