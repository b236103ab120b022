"""The search: which signals run, in which threads, and how their lists become hits.

Every signal is one bounded SQL query over one bucket, or over the buckets a search across
buckets reads together (``tenant_id`` and ``bucket_id`` lead every predicate): BM25 in
:mod:`~memories.retrieval.keyword`, nearest neighbours in :mod:`~memories.retrieval.vector`,
graph proximity from the graph app (registered here, one walk per bucket).
Their lists are fused (:mod:`memories.ranking`), lifted by sequence neighbours
(:mod:`~memories.retrieval.neighbours`), boosted (:mod:`~memories.retrieval.fusion`) and cut
to the limit or the token budget (:mod:`~memories.retrieval.hits`). Hits come back best
first; the caller decides how to render them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from engram_site import metrics, replica, tracing
from engram_site.providers import embedding
from memories import access, ranking
from memories.filters import MemoryFilters, bucket_list
from memories.models import LONG_MEMORY_TOKENS
from memories.retrieval import (
    answers,
    current,
    diversity,
    expansion,
    feedback,
    fusion,
    hits,
    keyword,
    learned,
    neighbours,
    rows,
    sessions,
    updates,
    vector,
)
from memories.retrieval import passages as retrieval_passages
from memories.retrieval.concurrency import start
from memories.retrieval.hits import Hit, SearchResult
from tenants.models import Bucket

MODES = ("hybrid", "vector", "keyword", "graph")
MAX_LIMIT = 100
BUDGET_DEFAULT_LIMIT = 100  # with a token budget and no explicit limit, the budget decides

GraphSignal = Callable[..., tuple[list[tuple[uuid.UUID, float]], dict]]
_graph_signal: GraphSignal | None = None


def register_graph_signal(function: GraphSignal) -> None:
    """The graph app plugs its proximity signal in here (it depends on memories, not
    the other way round)."""
    global _graph_signal
    _graph_signal = function


def _merged(per_bucket: list[tuple[list, dict]], limit: int) -> tuple[list[tuple[uuid.UUID, float]], dict]:
    """The graph lists of several buckets as one: best first (ties by id, as each list is
    ordered), cut to ``limit``, with their paths. One bucket's list is returned as it is."""
    if len(per_bucket) == 1:
        return per_bucket[0]
    ranked = sorted((item for found, _paths in per_bucket for item in found), key=lambda r: (-r[1], str(r[0])))
    paths = {memory_id: path for _found, per in per_bucket for memory_id, path in per.items()}
    ranked = ranked[:limit]
    return ranked, {memory_id: paths[memory_id] for memory_id, _score in ranked if memory_id in paths}


def _which_passages(found: list[Hit], matches: dict, query: str, model: str, explain: bool) -> None:
    """Name, on each long memory among ``found``, the passage nearest the question: the vector
    signal's, or (a hit another signal found) read for it here in one statement."""
    missing = [h.id for h in found if h.id not in matches and (h.row["token_count"] or 0) > LONG_MEMORY_TOKENS]
    if missing:
        matches = {
            **matches,
            **retrieval_passages.passages_of(missing, embedding.embed_query(query, model=model), model=model),
        }
    for hit in found:
        best = matches.get(hit.id)
        if best:
            hit.passage = best[0]
            if explain:
                hit.explain["passage"] = {**best[0].as_json(), "similarity": round(best[0].similarity, 6)}


@metrics.timed_search
@tracing.traced("engram.search", keywords=("mode",))
def memories_search(
    *,
    bucket: Bucket | None = None,
    buckets: list[Bucket] | None = None,
    query: str,
    mode: str = "hybrid",
    limit: int | None = None,
    token_budget: int | None = None,
    filters: MemoryFilters | None = None,
    explain: bool = False,
    ranking_overrides: dict | None = None,
    now: datetime | None = None,
    record_access: bool = True,
    excerpt: str = "auto",
    using: str | None = None,
) -> SearchResult:
    """Search ``bucket`` — or ``buckets``, several of one tenant, as one collection — for
    ``query``; hits best first.

    Across buckets, every signal ranks their memories together (BM25 with the statistics of
    the buckets taken together, one nearest-neighbour walk over them all; the graph, whose
    entities are per bucket, walks each bucket's graph and its lists are merged by score), the
    lists are fused once, and one limit and one token budget cut the answer: the hits are
    those a single bucket holding all their memories would give. One bucket is searched
    exactly as before.

    ``hybrid`` and ``vector`` degrade to ``keyword`` when the embedding model is
    unavailable, and say so in ``mode_used`` and ``warnings``.

    A hit of a long memory names its passage nearest the question (``passage``), and may
    return that passage with a little context instead of the whole memory (``excerpt``:
    :data:`~memories.retrieval.hits.EXCERPT_MODES`, see :func:`~memories.retrieval.hits.apply_budget`).

    ``using``: the database alias the search reads (every signal, in every thread), a replica's
    included (:mod:`engram_site.replica`); by default the one the caller reads. The access
    times it records go to the primary all the same (a write-behind buffer).
    """
    with replica.reading(using) if using is not None else contextlib.nullcontext():
        return _search(
            bucket=bucket, buckets=buckets, query=query, mode=mode, limit=limit, token_budget=token_budget,
            filters=filters, explain=explain, ranking_overrides=ranking_overrides, now=now,
            record_access=record_access, excerpt=excerpt,
        )  # fmt: skip


def _search(
    *,
    bucket: Bucket | None,
    buckets: list[Bucket] | None,
    query: str,
    mode: str,
    limit: int | None,
    token_budget: int | None,
    filters: MemoryFilters | None,
    explain: bool,
    ranking_overrides: dict | None,
    now: datetime | None,
    record_access: bool,
    excerpt: str,
) -> SearchResult:
    if (bucket is None) == (buckets is None):
        raise TypeError("give bucket or buckets")
    scope = bucket_list(bucket if buckets is None else buckets)
    bucket = scope[0] if len(scope) == 1 else scope  # one bucket: the statements of a bucket search
    filters = filters or MemoryFilters()
    # What the bucket learned from its feedback comes under the operator's and the request's
    # settings (ranking.resolve); a search across buckets uses none.
    lesson = learned.learned_for(scope[0]) if len(scope) == 1 else None
    config = ranking.resolve(scope[0].tenant.settings, ranking_overrides, lesson.settings if lesson else None)
    if mode == "graph":
        # The graph's weight sets its share of the hybrid fusion; alone, it is the whole answer.
        config = dataclasses.replace(ranking.with_weight(config, "graph", 1.0), graph_candidates="walk")
    # "As of" a past time, recency and relative dates are judged from that time too.
    now = now or filters.as_of or timezone.now()
    filters = dataclasses.replace(filters, reference_time=now)
    if limit is None:
        limit = BUDGET_DEFAULT_LIMIT if token_budget is not None else 10
    limit = max(1, min(limit, MAX_LIMIT))
    warnings: list[str] = []
    mode_used = mode
    embedding_model = None

    # The vector side (embedding the query, then two index walks) and the graph side (parsing
    # the query, then the walk) start first, in other threads when ENGRAM_SEARCH_PARALLEL is
    # on, while this thread runs the lexical signals.
    # Signals weighted 0 add nothing to the fusion, so they are not run at all.
    vector_side = None
    if mode in ("hybrid", "vector") and any(config.weight(s) > 0 for s in ranking.VECTOR_SIGNALS):
        vector_side = start(vector.vector_signals, bucket, query, filters, config)
    graph_sides = []
    if mode in ("hybrid", "graph") and _graph_signal is not None:
        if config.weight("graph") > 0:
            # The graph's entities are each bucket's own: one walk per bucket.
            graph_sides = [
                start(_graph_signal, bucket=one, query=query, filters=filters, config=config, now=now) for one in scope
            ]
    elif mode == "graph":
        warnings.append("The graph signal is not available; no results.")

    lists: dict[str, list[tuple[uuid.UUID, float]]] = {}
    passage_matches: dict = {}  # long memories: memory id -> its passages nearest the query
    coverage: float | None = None
    masses: dict[str, float] = {}  # per keyword signal: the query's IDF mass (keyword.keyword_signals)
    methods: dict[str, str] = {}
    graph_paths: dict = {}
    if mode in ("hybrid", "keyword") and any(config.weight(s) > 0 for s in ranking.KEYWORD_SIGNALS):
        lists["keyword"], lists["keyword_context"], lists["keyword_key"], coverage, masses = keyword.keyword_signals(
            bucket, query, filters, config, now
        )
    if vector_side is not None:
        try:
            memory_vector, context_vector, key_vector, (passage_matches, passage_method), embedding_model = (
                vector_side.result()
            )
        except embedding.EmbeddingUnavailable as exc:
            warnings.append(f"Embedding model unavailable ({exc}); answered with keyword search.")
            mode_used = "keyword"
            if mode == "vector":
                lists["keyword"], lists["keyword_context"], lists["keyword_key"], coverage, masses = (
                    keyword.keyword_signals(bucket, query, filters, config, now)
                )
        else:
            vectors = (("vector", memory_vector), ("vector_context", context_vector), ("vector_key", key_vector))
            for signal, (ranked, method) in vectors:
                if method:
                    lists[signal], methods[signal] = ranked, method
            if config.key_vector_own and lists.get("vector_key") and lists.get("vector"):
                lists["vector_key"] = vector.towards_own(lists["vector_key"], lists["vector"], config.key_vector_own)
            if passage_method:
                methods["passages"] = passage_method
    if graph_sides:
        lists["graph"], graph_paths = _merged([side.result() for side in graph_sides], config.candidates)

    # What the bucket's ratings say for this query (retrieval.feedback: memory id -> score) needs
    # only the query's vector: its statement runs in another thread beside the fusion, the
    # neighbour lift and the session context, and is waited for before the rated lift.
    rated_side = None
    if embedding_model and "+" not in embedding_model and feedback.applies(config):
        query_vector = embedding.embed_query(query, model=embedding_model)  # cached by the vector side
        rated_side = start(feedback.ratings_near, bucket, query_vector, embedding_model, filters, config, now)
    fused = ranking.fuse(lists, ranking.with_keyword_coverage(config, coverage), ceilings=masses)
    walked = bool(lists.get("vector")) and embedding_model is not None and "+" not in embedding_model
    if fused and expansion.applies(query, config):
        # Pseudo-relevance feedback: a second walk towards the best candidates and a BM25 query of
        # the words they share, fused with the others.
        lexical_side = None
        if config.prf_keyword > 0 and mode in ("hybrid", "keyword"):
            lexical_side = start(expansion.keyword_feedback_list, bucket, fused, query, filters, config, now)
        if config.prf > 0 and walked:
            lists[expansion.SIGNAL] = expansion.feedback_list(
                bucket, fused, embedding.embed_query(query, model=embedding_model), filters, config, embedding_model
            )
        if lexical_side is not None:
            lists[expansion.KEYWORD_SIGNAL] = lexical_side.result()
        expanded = ranking.with_weight(ranking.with_keyword_coverage(config, coverage), expansion.SIGNAL, config.prf)
        fused = ranking.fuse(
            lists, ranking.with_weight(expanded, expansion.KEYWORD_SIGNAL, config.prf_keyword), ceilings=masses
        )
    lifts: dict = {}
    unlifted = fused
    # The session context reads the memories near the best fused candidates: its statement runs
    # in another thread while this one lifts the neighbours; its lifts are added after theirs.
    session_side = None
    if config.session_context > 0 and lists.get("vector") and embedding_model and "+" not in embedding_model:
        session_side = start(
            sessions.session_rows, bucket, unlifted, filters, config,
            embedding.embed_query(query, model=embedding_model), lists["vector"][0][1],
        )  # fmt: skip
    if (config.neighbour_weight > 0 or config.session_weight > 0) and fused:
        fused, lifts = neighbours.lift_neighbours(bucket, fused, filters, config)
    session_lifts: dict = {}
    if session_side is not None:
        fused, session_lifts = sessions.with_session_lifts(
            session_side.result(), unlifted, fused, config, lists["vector"][0][1]
        )
    rated: dict = rated_side.result() if rated_side is not None else {}
    cues = dataclasses.replace(fusion.query_cues(query, config), feedback=rated)
    fused, feedback_lifts = feedback.lift_rated(fused, rated, config)
    diverse = diversity.applies(query, config)
    spread = diversity.spreads(query, config)
    newest = current.applies(query, config)
    answer_kind = answers.wanted(query, config)
    read = rows.fetch_contenders(
        bucket, fused, config, limit if token_budget is None else None, cues,
        discount=(1.0 - config.diversity if diverse else 1.0) * (1.0 - config.session_spread if spread else 1.0)
        / (1.0 + config.current_boost if newest else 1.0) / (1.0 + config.answer_type_boost if answer_kind else 1.0),
    )  # fmt: skip

    ranks = {}  # per signal: memory id -> (rank, score), which only explain shows
    if explain:
        for signal, ranked in lists.items():
            scores = dict(ranked)
            ranks[signal] = {item: (rank, scores[item]) for item, rank in ranking.tied_ranks(ranked).items()}
    found: list[Hit] = []
    for memory_id, fused_score in fused.items():
        row = read.get(memory_id)
        if row is None:  # deleted since the signal ran
            continue
        boosts = fusion.row_boosts(row, cues, config, now=now, as_of=filters.as_of)
        hit = Hit(id=memory_id, row=row, score=fusion.boosted(fused_score, boosts))
        if explain:
            hit.explain = {
                "fused": round(fused_score, 6),
                "fusion": config.fusion,
                "signals": {
                    signal: {"rank": place[0], "score": round(place[1], 6)}
                    for signal in lists
                    if (place := ranks[signal].get(memory_id)) is not None
                },
                "boosts": {name: round(value, 4) for name, value in boosts.items()},
                "keyword_coverage": None if coverage is None else round(coverage, 4),
                "context": row["context_text"],
            }
            if memory_id in lifts:
                hit.explain["neighbour_lift"] = round(lifts[memory_id], 6)
            if memory_id in session_lifts:
                hit.explain["session_lift"] = round(session_lifts[memory_id], 6)
            if memory_id in rated:
                score = rated[memory_id]
                hit.explain["feedback"] = {
                    "useful": round(score.useful, 4),
                    "irrelevant": round(score.irrelevant, 4),
                    "ratings": score.ratings,
                    "lift": round(feedback_lifts.get(memory_id, 0.0), 6),
                }
            if memory_id in graph_paths:
                hit.explain["graph_path"] = graph_paths[memory_id]
            if lesson is not None:
                hit.explain["learned_ranking"] = lesson.as_explain()
            if methods:
                hit.explain["vector_search"] = methods
        found.append(hit)
    if config.successor_takes_place and updates.wanted(query) == "newer":
        fusion.successors_take_place(found, config.superseded_weight)
    fusion.below_successors(found, config.superseded_weight)
    found.sort(key=lambda h: (-h.score, h.id))  # ties by id: a UUID orders as its text does
    if answer_kind:
        found = answers.favour_values(found, answer_kind, config)
    if newest:
        found = current.favour_newest(found, config)
    if lists.get("vector"):
        found = updates.order_updates(
            found, query, dict(lists["vector"]), lambda ids: diversity.vectors(bucket, ids), config
        )
    if diverse:
        found = diversity.diversify(
            found, diversity.vectors(bucket, [h.id for h in found[: config.diversity_pool]]), config
        )
    if spread:
        found = diversity.spread_sessions(found, config)
    if embedding_model and "+" not in embedding_model:
        # Which part of each long hit matched (the budget may return that part alone), whether or
        # not passages counted in the ranking (the ``passages`` knob): one statement, only when a
        # hit is a long memory the vector walk did not already place.
        _which_passages(found if token_budget is not None else found[:limit], passage_matches, query,
                        embedding_model, explain)  # fmt: skip
    found = hits.apply_budget(found, limit, token_budget, excerpt)
    for hit in found:
        rows.decode_json(hit.row)
    if record_access and found:
        access.record([h.id for h in found])
    return SearchResult(mode_used=mode_used, hits=found, warnings=warnings, embedding_model=embedding_model)
