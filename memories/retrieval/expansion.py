"""Pseudo-relevance feedback: a second vector query made of the question and its best hits.

A question that asks for several things ("what activities does Melanie partake in?") is
answered by memories that are each about one of them (a pottery class, a camping trip, a swim
with the kids), and each alone is only loosely like the question. The first search finds one
or two of them; what they share with the others (the person, the kind of thing, the way she
speaks of it) is in their vectors, not in the question's. Rocchio's feedback moves the query
towards them:

    q' = unit(q) + prf_beta x unit(mean of the prf_sources best fused candidates' unit vectors)

and walks the memories' vectors again with ``unit(q')`` (the same statement as the ``vector``
signal: an HNSW walk, or an exact read in a small bucket). The walk's list is fused with the
others under the weight ``prf`` (it shows as ``vector_prf`` in ``explain``).

The lexical side (``prf_keyword``, an RM3-like expansion): the words the best candidates share
that the question does not say — each term of their lemmatised text scored by its share of each
source's length, summed over the sources, times its IDF in the bucket; a term must be in at
least two sources (one source's words are its own topic, not the question's), in at most
:data:`EXPANSION_TERM_SHARE` of the bucket, and no date word — and the ``prf_terms`` best of
them are a BM25 query of their own over the memories (``keyword_prf`` in ``explain``).

Both cost statements after the first fusion (they need the best candidates): one walk, one read
of the sources' rows and one BM25 statement, side by side. So they run only for the questions
that ask for several things (``prf_questions``: "several", as the diversity step's, or "all").
"""

from __future__ import annotations

import math
import re
import uuid
from collections import defaultdict

import numpy as np

from engram_site import tracing
from engram_site.replica import read_connection
from memories import ranking, search_terms
from memories.filters import MemoryFilters, bucket_list, in_buckets
from memories.retrieval import diversity, keyword, vector
from memories.retrieval.stats import bucket_stats
from tenants.models import Bucket

SIGNAL = "vector_prf"
KEYWORD_SIGNAL = "keyword_prf"
# An expansion term in more of the bucket's memories than this share says nothing of the question.
EXPANSION_TERM_SHARE = 0.05
_TERM = re.compile(r"[a-z][a-z0-9]{2,}|[0-9]{2,}")
_DATE_WORDS = frozenset(search_terms.MONTHS + search_terms.WEEKDAYS)
_YEAR = re.compile(r"(?:19|20)[0-9]{2}")


def applies(query: str, config: ranking.RankingConfig) -> bool:
    if config.prf <= 0 and config.prf_keyword <= 0:
        return False
    return config.prf_questions == "all" or diversity.asks_for_several(query)


def feedback_query(query_vector, sources: list[np.ndarray], beta: float) -> np.ndarray | None:
    """Rocchio's query: the question's unit vector plus ``beta`` x the unit mean of the sources'
    unit vectors, made unit length. None without sources (or when they cancel out)."""
    if not sources:
        return None
    question = np.asarray(query_vector, dtype=np.float32)
    question = question / max(float(np.linalg.norm(question)), 1e-12)
    centroid = np.mean(np.stack(sources), axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm <= 1e-6:
        return None
    moved = question + beta * centroid / norm
    return (moved / float(np.linalg.norm(moved))).astype(np.float32)


@tracing.traced("engram.search.expansion")
def feedback_list(
    bucket: Bucket | list[Bucket],
    fused: dict,
    query_vector,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    model: str,
) -> list[tuple[uuid.UUID, float]]:
    """The ``vector_prf`` list: the memories nearest Rocchio's query made from the question and
    the ``prf_sources`` best of ``fused`` (ties by id), best first. Empty when none of those has
    a vector."""
    best = sorted(fused, key=lambda memory_id: (-fused[memory_id], str(memory_id)))[: config.prf_sources]
    found = diversity.vectors(bucket, best)
    sources = [found[memory_id] for memory_id in best if memory_id in found]
    moved = feedback_query(query_vector, sources, config.prf_beta)
    if moved is None:
        return []
    ranked, _method, _bare = vector.nearest(bucket, moved, filters, config, context=False, model=model)
    return ranked


def expansion_terms(
    bucket: Bucket | list[Bucket], fused: dict, query_lexemes: list[str], config: ranking.RankingConfig
) -> list[str]:
    """The ``prf_terms`` words the ``prf_sources`` best of ``fused`` share that the question does
    not say, best first (see the module)."""
    best = sorted(fused, key=lambda memory_id: (-fused[memory_id], str(memory_id)))[: config.prf_sources]
    scope, params = in_buckets(bucket, None)
    with read_connection().cursor() as cur:
        cur.execute(
            f"SELECT text_lemmatized FROM memories WHERE {' AND '.join(scope)} AND id = ANY(%s)"
            " AND text_lemmatized IS NOT NULL",
            [*params, best],
        )
        texts = [row[0] for row in cur.fetchall()]
    asked = set(query_lexemes)
    weight: dict[str, float] = defaultdict(float)
    support: dict[str, int] = defaultdict(int)
    for text in texts:
        terms = [t for t in text.lower().split() if _TERM.fullmatch(t)]
        if not terms:
            continue
        for term in set(terms):
            if term in asked or term in _DATE_WORDS or _YEAR.fullmatch(term):
                continue
            weight[term] += terms.count(term) / len(terms)
            support[term] += 1
    shared = [term for term in weight if support[term] >= 2]
    if not shared:
        return []
    buckets = bucket_list(bucket)
    n = bucket_stats.size_of(buckets)["n"]
    df = bucket_stats.frequencies_of(buckets, "lemmatized_tsv", shared)
    scored = [
        (weight[term] * math.log(1 + (n - df.get(term, 0) + 0.5) / (df.get(term, 0) + 0.5)), term)
        for term in shared
        if 0 < df.get(term, 0) <= EXPANSION_TERM_SHARE * n
    ]
    scored.sort(key=lambda pair: (-pair[0], pair[1]))
    return [term for _score, term in scored[: config.prf_terms]]


@tracing.traced("engram.search.expansion")
def keyword_feedback_list(
    bucket: Bucket | list[Bucket],
    fused: dict,
    query: str,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    now,
) -> list[tuple[uuid.UUID, float]]:
    """The ``keyword_prf`` list: BM25 over the memories for the expansion terms alone."""
    asked = keyword.query_lexemes(" ".join(search_terms.query_terms(query, now)))
    terms = expansion_terms(bucket, fused, asked, config)
    if not terms:
        return []
    return keyword.bm25(bucket, sorted(terms), filters, config, context=False)[0]
