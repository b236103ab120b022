"""Nearest neighbours by cosine similarity, in SQL (an HNSW walk or an exact read): the vector
signals, over memories, memories with their context, and key documents."""

from __future__ import annotations

import json
import math
import uuid
import weakref

import numpy as np

from engram_site import metrics, tracing
from engram_site.db import binding_cursor
from engram_site.providers import embedding
from engram_site.replica import read_connection
from memories import ranking
from memories.filters import MemoryFilters, bucket_list, in_buckets
from memories.models import half_precision_distance
from memories.retrieval import passages
from memories.retrieval.concurrency import start_walk
from memories.retrieval.stats import bucket_stats
from tenants.models import Bucket

# Buckets this small are searched exactly: cheaper than an index walk, and exact. So are
# filters leaving fewer rows than this (the planner's estimate): to find enough rows that
# pass a filter, an index walk visits about 1 / selectivity times more of the graph, which
# costs more than reading the rows that pass (measured at 33k memories: bench/README.md).
EXACT_SCAN_BELOW = 2000

# A walk at a fixed ef_search finds less of the exact top 10 as its graph grows: at
# ef_search 100, recall@10 was 0.956-0.970 with 100k vectors in the graph, 0.916 with 250k,
# 0.892 with 500k and 0.864-0.893 with 1M; 0.95 took ~230, ~430 and 500-600 at those sizes
# (bench/README.md, "A million memories" and "Recall between 100k and 1M"). Past EF_GROWS_FROM
# vectors the configured ef_search is multiplied by (graph size / EF_GROWS_FROM) ** EF_GROWTH:
# x2.3 at 250k, x4.3 at 500k, x8 at 1M. The graphs are table-wide (every tenant's vectors are in them).
EF_GROWS_FROM = 100_000
EF_GROWTH = 0.9

# Passages read per candidate wanted (nearest_passages): a long memory has several near a question.
PASSAGES_PER_CANDIDATE = 3


def scaled_ef_search(ef_search: int, graph_size: float) -> int:
    """The ef_search a walk uses in a graph of ``graph_size`` vectors."""
    if graph_size <= EF_GROWS_FROM:
        return ef_search
    return min(ranking.EF_SEARCH_MAX, math.ceil(ef_search * (graph_size / EF_GROWS_FROM) ** EF_GROWTH))


# The HNSW settings each kept connection has at session level (see hnsw_settings).
_session_ef_search: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# A key or passage row is of its memory's current text. The exact reads test it in the join;
# the HNSW walks return it beside each row and drop the rows of an older text here: tested in the
# join, it made the planner take the join for one row (an equality of two columns it cannot
# estimate), so a walk of LIMIT rows looked no cheaper than reading, detoasting and sorting every
# key of the bucket — which it then did (~50 ms at 4,000 keys on 2 cores, ~9 ms walking).
_CURRENT = "m.text_hash IS NOT DISTINCT FROM {0}.text_hash"


def hnsw_settings(cur, ef_search: int) -> None:
    """Set ``hnsw.ef_search`` and ``hnsw.iterative_scan`` for the walk that follows.

    pgvector 0.8 iterative scans keep walking the graph until enough rows pass the filters
    (relaxed order: re-sorted by the caller), instead of silently returning fewer. Inside a
    transaction the settings are local to it. In autocommit (the executor threads) they are
    set on the session, once per connection and value: a connection used only for searches
    keeps them, and the round trip is saved.
    """
    db = read_connection()  # the replica's, in a search that reads it
    in_transaction = db.in_atomic_block
    raw = db.connection
    if not in_transaction and _session_ef_search.get(raw) == ef_search:
        return
    cur.execute(
        "SELECT set_config('hnsw.ef_search', %s, %s), set_config('hnsw.iterative_scan', 'relaxed_order', %s)",
        [str(ef_search), in_transaction, in_transaction],
    )
    if not in_transaction:
        _session_ef_search[raw] = ef_search


def estimated_rows(where: str, params: list, column: str) -> float:
    """The planner's estimate of the embedded rows passing ``where`` (from the column
    statistics ANALYZE keeps: a plan, not a count, so it costs the same for any filter)."""
    with read_connection().cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memories m WHERE {where} AND m.{column} IS NOT NULL", params)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


# Compares only while every bucket searched has the query vector's model: evaluated once per
# statement (an InitPlan, a one-time filter above the scan, which leaves the plan as it was),
# in the statement's snapshot, which sees either the vectors of before a switch's swap and the
# old model, or those of after it and the new one. Otherwise the statement returns nothing.
_SAME_MODEL = (
    "NOT EXISTS (SELECT 1 FROM buckets b WHERE b.id = ANY(%s::uuid[]) AND b.embedding_model IS DISTINCT FROM %s)"
)


def _reads_exactly(buckets: list, column: str, where: str, params: list, population: int) -> bool:
    """Whether a walk over ``column`` reads its rows exactly rather than through the HNSW index:
    a population below EXACT_SCAN_BELOW, or filters (beyond the buckets) that leave fewer rows
    than that (bucket_stats remembers the filtered count, estimated by the planner)."""
    return population < EXACT_SCAN_BELOW or (
        where != MemoryFilters().sql(buckets)[0]
        and bucket_stats.filtered_rows(buckets[0], column, where, params, lambda: estimated_rows(where, params, column))
        < EXACT_SCAN_BELOW
    )


def nearest(
    bucket: Bucket | list[Bucket],
    query_vector,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    *,
    context: bool,
    model: str | None = None,
) -> tuple[list[tuple[uuid.UUID, float]], str, set[uuid.UUID]]:
    """Nearest neighbours by cosine similarity, how they were found ("hnsw" or "exact"),
    and (memory side only) which of them have no context vector. ``query_vector`` is by
    ``model`` (the buckets', by default): none are found unless the buckets' vectors are of
    that model when the statement runs. A bucket's rows hold only its model's vectors
    (memories.services.embedding_switch).

    Several buckets of one model (a search across buckets) are one walk over them together:
    the nearest of their memories, whichever bucket holds them."""
    column = "context_embedding" if context else "embedding"
    bare = "false" if context else "m.context_embedding IS NULL"
    buckets = bucket_list(bucket)
    stats = bucket_stats.size_of(buckets)
    where, params = filters.sql(buckets)
    gate = [[b.pk for b in buckets], model or buckets[0].embedding_model]
    # Bound apart from the statement, in binary (binding_cursor), instead of 384 decimals
    # spelled into the SQL twice: ~0.17 ms less Python per walk alone, 0.15-0.2 ms less CPU
    # per search in-process at 20k (bench/README.md). The walk's ORDER BY must then cast the
    # placeholder to vector first: a bare placeholder would be typed halfvec and misread.
    vector = np.asarray(query_vector, dtype=np.float32)
    limit = config.candidates
    # From the per-process cache, which may lag: a small bucket that looks empty is still
    # searched (exactly, which costs nothing when it really is empty). A large one with no
    # vector at all in this column (no context vectors when written as unrelated facts) is
    # not: the exact read would visit every row to find none (~130 ms a search at 605k
    # memories, bench/README.md). A vector written since is found once the count is renewed
    # (after STATS_TTL, or once this process has written 5% of the bucket).
    population = stats["n_context_embedded"] if context else stats["n_embedded"]
    if population == 0 and stats["n"] >= EXACT_SCAN_BELOW:
        return [], "none", set()
    exact_sql = f"""
        WITH b AS MATERIALIZED (
            SELECT m.id, m.{column} AS v, {bare} AS bare FROM memories m
            WHERE {where} AND m.{column} IS NOT NULL AND {_SAME_MODEL}
        )
        SELECT id, 1 - (v <=> %s::vector) AS similarity, bare FROM b ORDER BY v <=> %s::vector LIMIT %s
    """
    exact_params = [*params, *gate, vector, vector, limit]
    with binding_cursor(read_connection()) as cur:
        if _reads_exactly(buckets, column, where, params, population):
            cur.execute(exact_sql, exact_params)
            return _neighbours(cur.fetchall(), "exact")
        # The graph's size, estimated as the table's rows times this bucket's share of rows
        # with a vector in the column (few have a context vector when most are written as
        # unrelated facts); never less than this bucket's own vectors.
        graph = max(population, stats["table_rows"] * population / max(1, stats["n"]))
        hnsw_settings(cur, max(scaled_ef_search(config.ef_search, graph), limit))
        cur.execute(
            f"""
            SELECT m.id, 1 - (m.{column} <=> %s::vector) AS similarity, {bare} AS bare FROM memories m
            WHERE {where} AND m.{column} IS NOT NULL AND {_SAME_MODEL}
            ORDER BY {half_precision_distance("m." + column, "%s::vector")} LIMIT %s
            """,
            [vector, *params, *gate, vector, limit],
        )
        rows = cur.fetchall()
        if len(rows) < min(limit, population):
            # Very selective filters can exhaust the index walk; the filtered set is then
            # small, and an exact scan over it is both cheap and complete.
            cur.execute(exact_sql, exact_params)
            return _neighbours(cur.fetchall(), "exact")
    # relaxed_order: the walk may hand rows back slightly out of order.
    return _neighbours(sorted(rows, key=lambda r: r[1], reverse=True), "hnsw")


def nearest_key(
    bucket: Bucket | list[Bucket],
    query_vector,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    *,
    model: str,
) -> tuple[list[tuple[uuid.UUID, float]], str]:
    """The memories whose key documents' vectors (``memory_keys``) are nearest the query, by
    cosine similarity, and how they were found: the ``vector_key`` signal. As :func:`nearest`:
    an exact read below :data:`EXACT_SCAN_BELOW` keys (or filters the planner says leave
    fewer), an HNSW walk (``idx_memory_keys_hnsw``) above. A key is read with its memory,
    whose columns the filters test, only while it is of the memory's current text and by
    ``model`` (a key made before the bucket switched models is built again, not compared).
    A bucket without key vectors costs no statement."""
    buckets = bucket_list(bucket)
    stats = bucket_stats.size_of(buckets)
    population = stats["n_key_embedded"]
    if population == 0:
        return [], "none"
    where, params = filters.sql(buckets)
    keys_in, keys_params = in_buckets(buckets, "k")
    joined = f"""
        memory_keys k JOIN memories m ON m.id = k.memory_id
        WHERE {" AND ".join(keys_in)} AND k.embedding IS NOT NULL AND k.embedding_model = %s AND {where}
    """
    source = joined + f" AND {_CURRENT.format('k')}"
    source_params = [*keys_params, model, *params]
    vector = np.asarray(query_vector, dtype=np.float32)
    limit = config.candidates
    exact_sql = f"""
        WITH b AS MATERIALIZED (SELECT k.memory_id AS id, k.embedding AS v FROM {source})
        SELECT id, 1 - (v <=> %s::vector) AS similarity FROM b ORDER BY v <=> %s::vector LIMIT %s
    """
    exact_params = [*source_params, vector, vector, limit]
    with binding_cursor(read_connection()) as cur:
        if _reads_exactly(buckets, "embedding", where, params, population):
            cur.execute(exact_sql, exact_params)
            return [(r[0], float(r[1])) for r in cur.fetchall()], "exact"
        graph = max(population, stats["table_rows"] * population / max(1, stats["n"]))
        hnsw_settings(cur, max(scaled_ef_search(config.ef_search, graph), limit))
        cur.execute(
            f"""
            SELECT k.memory_id, 1 - (k.embedding <=> %s::vector) AS similarity, {_CURRENT.format("k")} FROM {joined}
            ORDER BY {half_precision_distance("k.embedding", "%s::vector")} LIMIT %s
            """,
            [vector, *source_params, vector, limit],
        )
        rows = cur.fetchall()
        if len(rows) < min(limit, population):
            cur.execute(exact_sql, exact_params)
            return [(r[0], float(r[1])) for r in cur.fetchall()], "exact"
    current = ((r[0], float(r[1])) for r in rows if r[2])
    return sorted(current, key=lambda r: r[1], reverse=True), "hnsw"


def nearest_passages(
    bucket: Bucket | list[Bucket],
    query_vector,
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    *,
    model: str,
) -> tuple[dict[uuid.UUID, list[passages.PassageMatch]], str]:
    """The memories with passages nearest the query, each with its nearest passages (best first,
    at most two), and how they were found: an exact read below ``EXACT_SCAN_BELOW`` passages (or
    filters the planner says leave few memories), an HNSW walk (``idx_memory_passages_hnsw``)
    above. A passage is read with its memory, whose columns the filters test, only while it is
    of the memory's current text and by ``model``. A bucket without passages costs no statement."""
    buckets = bucket_list(bucket)
    stats = bucket_stats.size_of(buckets)
    population = stats.get("n_passage_embedded", 0)
    if population == 0:
        return {}, "none"
    where, params = filters.sql(buckets)
    passages_in, passages_params = in_buckets(buckets, "p")
    joined = f"""
        memory_passages p JOIN memories m ON m.id = p.memory_id
        WHERE {" AND ".join(passages_in)} AND p.embedding IS NOT NULL AND p.embedding_model = %s AND {where}
    """
    source = joined + f" AND {_CURRENT.format('p')}"
    source_params = [*passages_params, model, *params]
    vector = np.asarray(query_vector, dtype=np.float32)
    limit = config.candidates * PASSAGES_PER_CANDIDATE
    columns = "p.memory_id, p.ordinal, p.char_start, p.char_end"
    exact_sql = f"""
        WITH b AS MATERIALIZED (SELECT {columns}, p.embedding AS v FROM {source})
        SELECT memory_id, ordinal, char_start, char_end, 1 - (v <=> %s::vector) FROM b
        ORDER BY v <=> %s::vector LIMIT %s
    """
    exact_params = [*source_params, vector, vector, limit]
    with binding_cursor(read_connection()) as cur:
        if _reads_exactly(buckets, "embedding", where, params, population):
            cur.execute(exact_sql, exact_params)
            return passages.grouped(cur.fetchall()), "exact"
        graph = max(population, stats["table_rows"] * population / max(1, stats["n"]))
        hnsw_settings(cur, max(scaled_ef_search(config.ef_search, graph), limit))
        cur.execute(
            f"""
            SELECT {columns}, 1 - (p.embedding <=> %s::vector), {_CURRENT.format("p")} FROM {joined}
            ORDER BY {half_precision_distance("p.embedding", "%s::vector")} LIMIT %s
            """,
            [vector, *source_params, vector, limit],
        )
        rows = cur.fetchall()
        if len(rows) < min(limit, population):
            cur.execute(exact_sql, exact_params)
            return passages.grouped(cur.fetchall()), "exact"
    return passages.grouped([row[:-1] for row in rows if row[-1]]), "hnsw"


def _neighbours(rows, method: str) -> tuple[list[tuple[uuid.UUID, float]], str, set[uuid.UUID]]:
    return [(r[0], float(r[1])) for r in rows], method, {r[0] for r in rows if r[2]}


def _with_stand_ins(
    context_ranked: list[tuple[uuid.UUID, float]],
    memory_ranked: list[tuple[uuid.UUID, float]],
    bare: set[uuid.UUID],
    limit: int,
) -> list[tuple[uuid.UUID, float]]:
    """The context list with every memory of the memory list that has no context vector
    standing in its own similarity (its context is itself), best first, ``limit`` long."""
    merged = context_ranked + [(item, score) for item, score in memory_ranked if item in bare]
    merged.sort(key=lambda r: r[1], reverse=True)
    return merged[:limit]


@metrics.timed(metrics.SIGNAL_SECONDS, signal="vector")
@tracing.traced("engram.search.signal", signal="vector")
def vector_signals(bucket: Bucket | list[Bucket], query: str, filters: MemoryFilters, config: ranking.RankingConfig):
    """Embed the query by the buckets' model, then the nearest-neighbour lists (the context, key
    and passage ones in other threads when ENGRAM_SEARCH_PARALLEL is on), the passages that
    matched (memory -> its nearest passages, memories.retrieval.passages) with how they were
    found, and the model they are by. EmbeddingUnavailable when the model is.

    ``bucket`` may be several buckets: those of one model are one walk over them all with one
    query vector. Buckets of different models (one in the middle of a switch, say) are walked
    per model, each with its own query vector, never another model's, and the lists merged by
    similarity; the model returned then names them all, joined by "+"."""
    buckets = bucket_list(bucket)
    groups: dict[str, list[Bucket]] = {}
    for member in buckets:
        groups.setdefault(member.embedding_model, []).append(member)
    if len(groups) == 1:
        return _signals_of_one_model(bucket, query, filters, config)
    found = [_signals_of_one_model(members, query, filters, config) for members in groups.values()]
    limit = config.candidates

    def merged(side: int) -> tuple[list[tuple[uuid.UUID, float]], str]:
        ranked = sorted((item for f in found for item in f[side][0]), key=lambda r: r[1], reverse=True)[:limit]
        return ranked, "+".join(sorted({f[side][1] for f in found if f[side][1]}))

    matches = {memory_id: found_of for f in found for memory_id, found_of in f[3][0].items()}
    passage_methods = "+".join(sorted({f[3][1] for f in found if f[3][1]}))
    return merged(0), merged(1), merged(2), (matches, passage_methods), "+".join(sorted(f[4] for f in found))


def _signals_of_one_model(
    bucket: Bucket | list[Bucket], query: str, filters: MemoryFilters, config: ranking.RankingConfig
):
    buckets = bucket_list(bucket)
    model = buckets[0].embedding_model
    lists = _walks(bucket, query, filters, config, model)
    if not lists[0][0] and not lists[1][0] and not lists[2][0]:
        # Nothing found: perhaps a bucket switched models since it was read (the statements
        # then compare nothing). Asked again with the models they have now.
        current = set(Bucket.objects.filter(pk__in=[b.pk for b in buckets]).values_list("embedding_model", flat=True))
        if current and current != {model}:
            fresh = list(Bucket.objects.filter(pk__in=[b.pk for b in buckets]).select_related("tenant"))
            return vector_signals(fresh[0] if len(fresh) == 1 else fresh, query, filters, config)
    return (*lists, model)


def _walks(
    bucket: Bucket | list[Bucket], query: str, filters: MemoryFilters, config: ranking.RankingConfig, model: str
):
    query_vector = embedding.embed_query(query, model=model)  # checked for NaN / zeros there
    context_side = None
    if config.weight("vector_context") > 0:
        context_side = start_walk(nearest, bucket, query_vector, filters, config, context=True, model=model)
    key_side = None
    if config.weight("vector_key") > 0:
        key_side = start_walk(nearest_key, bucket, query_vector, filters, config, model=model)
    passage_side = None
    if config.passages != "off" and config.weight("vector") > 0:
        passage_side = start_walk(nearest_passages, bucket, query_vector, filters, config, model=model)
    nothing = ([], "", set())
    memory_ranked, memory_method, bare = (
        nearest(bucket, query_vector, filters, config, context=False, model=model)
        if config.weight("vector") > 0
        else nothing
    )
    context_ranked, context_method, _ = context_side.result() if context_side else nothing
    # Only where the context list has anything: in a bucket (or filtered set) without context
    # vectors the stand-ins would merely repeat the memory list and double its weight.
    if config.context_stand_in and context_ranked and bare:
        context_ranked = _with_stand_ins(context_ranked, memory_ranked, bare, config.candidates)
    key_ranked, key_method = key_side.result() if key_side else ([], "")
    # Long memories: the best of their own vector and their passages' (after the stand-ins,
    # which stand in a memory's own vector).
    matches, passage_method = passage_side.result() if passage_side else ({}, "")
    memory_ranked = passages.with_passages(memory_ranked, matches, config)
    return (
        (memory_ranked, memory_method),
        (context_ranked, context_method),
        (key_ranked, key_method),
        (matches, passage_method),
    )


def towards_own(
    keys: list[tuple[uuid.UUID, float]], own: list[tuple[uuid.UUID, float]], share: float
) -> list[tuple[uuid.UUID, float]]:
    """The key list (memory id, similarity; best first) with each memory whose own vector (in the
    memory list ``own``) is nearer the question than its key raised by ``share`` of the
    difference (``key_vector_own``), best first again. The list keeps its memories: none is added."""
    mine = dict(own)
    scored = [(item, score + share * max(0.0, mine.get(item, score) - score)) for item, score in keys]
    scored.sort(key=lambda pair: -pair[1])
    return scored
