"""Coverage over redundancy: the top of a ranking re-ordered so that it holds more distinct
evidence (maximal marginal relevance over the memories' own vectors).

A question that asks for several things ("which books has she read?", "how many rollbacks
did we have?", "compare the two quotes") is answered by several memories, often from
different conversations. Ranked by relevance alone, its top ten fills with near-copies of the
best match (the same fact said twice, a question and its echo), and the second and third
pieces of evidence fall below the cut. Here the best ``diversity_pool`` hits are picked
greedily: each next hit is the one whose score, discounted by how much it repeats the hits
already picked, is highest.

    adjusted = score x (1 - diversity x redundancy)
    redundancy = max over picked hits of (cosine - DIVERSITY_FLOOR) / (1 - DIVERSITY_FLOOR), at least 0

Two memories about different things have cosine similarities of about 0.0-0.3 under the
embedding model; below :data:`DIVERSITY_FLOOR` nothing is discounted. A hit without a vector
is never discounted. Hits below the pool keep their order after it (their score at most the
pool's last one), so scores still fall down the list.
"""

from __future__ import annotations

import re
import uuid

import numpy as np

from engram_site import tracing
from engram_site.replica import read_connection
from memories import ranking
from memories.filters import in_buckets
from memories.retrieval.hits import Hit
from tenants.models import Bucket

# Cosine similarity under which two memories count as saying different things.
DIVERSITY_FLOOR = 0.3

# Questions that ask for several things: a count, a list, a comparison, a change over time,
# or "which/what" followed by a plural ("what books…", "which tests…").
_SEVERAL = re.compile(
    r"\b(?:how many|how often|how much did|list|name (?:all|the|some)|all (?:the|of)|each|every|both|"
    r"compare|comparison|differ|difference|versus|vs|before|after|changed?|evolved?|over time|"
    r"so far|in total|altogether|what are|what were|which ones|what kinds?|"
    r"what types?|what sorts?|summari[sz]e|summary|walk me through|timeline|history)\b",
    re.IGNORECASE,
)
_WHICH = re.compile(r"\b(?:what|which)\s+([\w'’-]+)(?:\s+([\w'’-]+))?", re.IGNORECASE)
# Words that end a "what/which" phrase before any noun: "what does…", "which of…".
_VERBS = {
    "do", "does", "did", "is", "was", "has", "have", "had", "will", "would", "can", "could", "should", "of", "to",
    "in", "on", "at", "for", "kind", "sort", "type",
}  # fmt: skip
# Words after "what"/"which" that end in s but are no plural noun.
_NOT_PLURAL = {
    "does", "was", "has", "is", "this", "his", "its", "yours", "ours", "always", "perhaps", "thus", "various",
    "previous", "famous", "serious", "nervous", "obvious", "address", "business", "process", "status", "class",
    "bus", "gas", "yes", "less", "unless", "across", "towards", "afterwards", "besides", "us",
}  # fmt: skip


def asks_for_several(query: str) -> bool:
    """Whether the question asks for several things (see :data:`_SEVERAL`)."""
    if _SEVERAL.search(query):
        return True
    for match in _WHICH.finditer(query):
        for word in match.groups():
            if word is None or word.lower() in _VERBS:
                break
            if _plural(word.lower()):
                return True
    return False


def _plural(word: str) -> bool:
    return (
        len(word) > 3
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is", "'s", "’s"))
        and (word not in _NOT_PLURAL)
    )


def applies(query: str, config: ranking.RankingConfig) -> bool:
    if config.diversity <= 0:
        return False
    return config.diversity_questions == "all" or asks_for_several(query)


def spreads(query: str, config: ranking.RankingConfig) -> bool:
    """Whether :func:`spread_sessions` runs for ``query``: ``session_spread`` on, and the
    question one that diversity serves (``diversity_questions``)."""
    if config.session_spread <= 0:
        return False
    return config.diversity_questions == "all" or asks_for_several(query)


@tracing.traced("engram.search.spread")
def spread_sessions(hits: list[Hit], config: ranking.RankingConfig) -> list[Hit]:
    """``hits`` (best first) with the first ``diversity_pool`` re-ordered so that each hit of a
    sequence that already holds ``n`` better picked hits keeps ``1 - session_spread x min(1, n /
    2)`` of its score (``explain``: the ``session_spread`` boost); a hit without a sequence is
    never discounted. Picked greedily, as :func:`diversify`; the rest follow, their scores at
    most the last of the pool's."""
    pool, rest = hits[: config.diversity_pool], hits[config.diversity_pool :]
    if len(pool) < 2:
        return hits
    picked: list[Hit] = []
    held: dict = {}  # sequence -> hits of it picked so far
    open_ = list(pool)
    while open_:
        best, best_score = 0, -1.0
        for i, hit in enumerate(open_):
            sequence = hit.row.get("sequence_id")
            n = held.get(sequence, 0) if sequence is not None else 0
            adjusted = hit.score * (1.0 - config.session_spread * min(1.0, n / 2))
            if adjusted > best_score:  # the first of equals: ties keep their order
                best, best_score = i, adjusted
        hit = open_.pop(best)
        sequence = hit.row.get("sequence_id")
        if sequence is not None:
            held[sequence] = held.get(sequence, 0) + 1
        if best_score != hit.score and hit.explain and hit.score > 0:
            hit.explain["boosts"]["session_spread"] = round(best_score / hit.score, 4)
        hit.score = best_score
        picked.append(hit)
    return _then_the_rest(picked, rest, "session_spread")


def vectors(bucket: Bucket | list[Bucket], ids: list[uuid.UUID]) -> dict[uuid.UUID, np.ndarray]:
    """The memories' own vectors, unit length, in one statement (rows without one are left out)."""
    if not ids:
        return {}
    scope, params = in_buckets(bucket, None)
    with read_connection().cursor() as cur:
        cur.execute(
            f"SELECT id, embedding::text FROM memories WHERE {' AND '.join(scope)} AND id = ANY(%s)"
            " AND embedding IS NOT NULL",
            [*params, ids],
        )
        found = {}
        for memory_id, text in cur.fetchall():
            vector = np.fromstring(text[1:-1], sep=",", dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            if norm > 0:
                found[memory_id] = vector / norm
    return found


@tracing.traced("engram.search.diversity")
def diversify(hits: list[Hit], found: dict[uuid.UUID, np.ndarray], config: ranking.RankingConfig) -> list[Hit]:
    """``hits`` (best first) with the first ``diversity_pool`` re-ordered by marginal
    relevance, their scores discounted by their redundancy (``explain`` shows the factor as the
    ``diversity`` boost); the rest follow, their scores at most the last of the pool's.
    ``found``: the unit vectors of the hits that have one (:func:`vectors`)."""
    pool, rest = hits[: config.diversity_pool], hits[config.diversity_pool :]
    if len(pool) < 2:
        return hits
    dimensions = next(iter(found.values())).shape[0] if found else 1
    matrix = np.stack([found.get(h.id, np.zeros(dimensions, dtype=np.float32)) for h in pool])
    # redundancy[i, j]: how much hit i repeats hit j, 0 below the floor (and without a vector).
    redundancy = np.clip((matrix @ matrix.T - DIVERSITY_FLOOR) / (1.0 - DIVERSITY_FLOOR), 0.0, 1.0)
    scores = np.array([h.score for h in pool], dtype=np.float64)
    repeats = np.zeros(len(pool))  # each hit's greatest redundancy with the hits picked so far
    open_ = np.ones(len(pool), dtype=bool)
    picked: list[Hit] = []
    for _ in range(len(pool)):
        adjusted = np.where(open_, scores * (1.0 - config.diversity * repeats), -np.inf)
        best = int(np.argmax(adjusted))  # the first of equals: ties keep their order
        open_[best] = False
        repeats = np.maximum(repeats, redundancy[:, best])
        hit = pool[best]
        _rescore(hit, float(adjusted[best]), "diversity")
        picked.append(hit)
    return _then_the_rest(picked, rest, "diversity")


def _then_the_rest(picked: list[Hit], rest: list[Hit], step: str) -> list[Hit]:
    """``picked`` then ``rest``, each of the rest scored at most as the hit before it
    (``explain`` names the factor after the ``step`` that re-ordered the pool)."""
    last = picked[-1].score
    for hit in rest:
        if hit.score > last:
            _rescore(hit, last, step)
        last = hit.score
    return picked + rest


def _rescore(hit: Hit, score: float, step: str) -> None:
    if score != hit.score and hit.explain and hit.score > 0:
        hit.explain["boosts"][step] = round(score / hit.score, 4)
    hit.score = score
