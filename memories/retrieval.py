"""Hybrid retrieval: vector + BM25 (+ sequence context, + graph), fused, boosted, budgeted.

Every signal is one bounded SQL query over one bucket (``tenant_id`` and
``bucket_id`` lead every predicate). Fusion and boosts are in
:mod:`memories.ranking`. The selector returns hits best first; the caller
decides how to render them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import OperationalError, close_old_connections, connection
from django.utils import timezone

from engram_site.db import binding_cursor
from memories import access, embedding, lemmatizer, ranking
from memories.filters import MemoryFilters
from memories.models import half_precision_distance
from memories.text import rough_token_count, transcript_speaker
from tenants.models import Bucket

logger = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "keyword", "graph")
MAX_LIMIT = 100
BUDGET_DEFAULT_LIMIT = 100  # with a token budget and no explicit limit, the budget decides
# Terms in more than this share of the bucket do not generate BM25 candidates on their own
# (they still score the candidates the rarer terms find): "the", "like", "user" would
# otherwise make every query scan most of the bucket.
COMMON_TERM_SHARE = 0.25
# The rarest query terms fetch candidates while their document frequencies add up to this;
# pairs of the other terms (each in at most PAIR_TERM_SHARE of the bucket) fetch the
# documents holding both (see _candidate_query). With MAX_KEYWORD_MATCHES, the budget trades
# exactness for time at large buckets: at 100k memories (300 generated questions, top 10
# against an exhaustive BM25, ties as equals) 1500/3000 kept 0.990 of the memory side's top
# 10 and 0.973 of the context side's in 5.4 / 6.2 ms median; 1000/2000 0.984 / 0.957 in 4.2 /
# 5.0 ms, paid for both BM25 signals running by default (docs/RETRIEVAL.md).
CANDIDATE_BUDGET = 1000
PAIR_TERM_SHARE = 0.05
MAX_PAIR_TERMS = 8
# A document's length for BM25: its number of terms, counted from its space-separated
# lemmas (the text its tsvector is made of) without unnesting the tsvector; the bucket
# average is taken the same way.
_TERMS = "(length({0}) - length(replace({0}, ' ', '')) + 1)"
_DOC_LENGTH = {
    "lemmatized_tsv": _TERMS.format("coalesce(m.text_lemmatized, '')"),
    "context_tsv": _TERMS.format("coalesce(m.text_lemmatized, '') || ' ' || m.context_lemmatized"),
}
# At most this many matching documents are scored per signal.
MAX_KEYWORD_MATCHES = 2000
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


def scaled_ef_search(ef_search: int, graph_size: float) -> int:
    """The ef_search a walk uses in a graph of ``graph_size`` vectors."""
    if graph_size <= EF_GROWS_FROM:
        return ef_search
    return min(ranking.EF_SEARCH_MAX, math.ceil(ef_search * (graph_size / EF_GROWS_FROM) ** EF_GROWTH))


_STATS_TTL = 60.0
_STATS_STALE_MAX = 3600.0  # an older size is not served, even while a refresh runs
_DF_TTL = 600.0
MAX_CACHED_ESTIMATES = 1000  # filtered-row estimates kept per bucket


# The name callers have used for the filters (memories/apis.py, console, bench/).
SearchFilters = MemoryFilters


@dataclass
class Hit:
    id: uuid.UUID
    row: dict
    score: float
    explain: dict = field(default_factory=dict)


@dataclass
class SearchResult:
    mode_used: str
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)


# --- bucket statistics (for BM25 and the exact-scan choice) -----------------------------------


class _BucketStats:
    """Per-process cache of bucket size, average document lengths and term document
    frequencies. IDF tolerates being a little stale; counting on every query would not
    be affordable at 100k memories.

    Sizes are refreshed after ``_STATS_TTL`` seconds, document frequencies after
    ``_DF_TTL`` (a term's share of a large bucket moves slowly). Both are dropped at once
    when this process has written enough to the bucket to matter (any write to a small
    bucket, 5% of a large one). An expired size is served while a background thread
    counts again (``ENGRAM_STATS_BACKGROUND``), so no search waits for a full count of a
    large bucket; without a cached size the search counts itself.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[uuid.UUID, dict] = {}
        self._refreshing: set[uuid.UUID] = set()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def note_writes(self, bucket_id: uuid.UUID, count: int) -> None:
        with self._lock:
            entry = self._entries.get(bucket_id)
            if entry is None:
                return
            entry["writes"] += count
            n = entry["size"]["n"]
            if entry["writes"] > (0 if n < 1000 else 0.05 * n):
                del self._entries[bucket_id]

    def _entry(self, bucket: Bucket) -> dict | None:
        entry = self._entries.get(bucket.pk)
        if entry is None:
            return None
        age = time.monotonic() - entry["at"]
        if age < _STATS_TTL:
            return entry
        if age < _STATS_STALE_MAX and self._refresh_in_background(bucket):
            return entry
        return None

    def _refresh_in_background(self, bucket: Bucket) -> bool:
        if not getattr(settings, "ENGRAM_STATS_BACKGROUND", False):
            return False
        with self._lock:
            if bucket.pk in self._refreshing:
                return True
            self._refreshing.add(bucket.pk)

        def refresh():
            try:
                self._count(bucket)
            except Exception:  # the next search counts synchronously
                logger.warning("refreshing the statistics of bucket %s failed", bucket.pk, exc_info=True)
            finally:
                connection.close()  # this thread's own connection
                with self._lock:
                    self._refreshing.discard(bucket.pk)

        threading.Thread(target=refresh, name="engram-bucket-stats", daemon=True).start()
        return True

    def size(self, bucket: Bucket) -> dict:
        entry = self._entry(bucket)
        if entry:
            return entry["size"]
        return self._count(bucket)

    def _count(self, bucket: Bucket) -> dict:
        with connection.cursor() as cur:
            cur.execute(
                """
                SELECT count(*),
                       count(*) FILTER (WHERE context_lemmatized IS NOT NULL),
                       count(*) FILTER (WHERE embedding IS NOT NULL),
                       count(*) FILTER (WHERE context_embedding IS NOT NULL),
                       -- The table's row estimate (kept by ANALYZE and autovacuum; -1 before
                       -- the first) sizes the HNSW graphs for scaled_ef_search.
                       (SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass)
                FROM memories WHERE tenant_id = %s AND bucket_id = %s
                """,
                [bucket.tenant_id, bucket.pk],
            )
            total, with_context, embedded, context_embedded, table_rows = cur.fetchone()
            # Average lengths from a recent sample: exact enough for BM25, bounded in cost.
            cur.execute(
                f"""
                SELECT avg({_DOC_LENGTH["lemmatized_tsv"]}), avg({_DOC_LENGTH["context_tsv"]})
                FROM (SELECT text_lemmatized, context_lemmatized FROM memories
                      WHERE tenant_id = %s AND bucket_id = %s ORDER BY created_at DESC LIMIT 2000) m
                """,
                [bucket.tenant_id, bucket.pk],
            )
            avgdl, avgdl_context = cur.fetchone()
        stats = {
            "n": total,
            "n_context": with_context,
            "n_embedded": embedded,
            "n_context_embedded": context_embedded,
            "avgdl": float(avgdl or 1.0),
            "avgdl_context": float(avgdl_context or 1.0),
            "table_rows": max(0.0, float(table_rows)),
        }
        now = time.monotonic()
        with self._lock:
            previous = self._entries.get(bucket.pk)
            # Document frequencies outlive a size refresh (_DF_TTL), unless the bucket changed a lot.
            keep_df = previous is not None and now - previous["df_at"] < _DF_TTL
            self._entries[bucket.pk] = {
                "at": now,
                "size": stats,
                "df": previous["df"] if keep_df else {},
                "df_at": previous["df_at"] if keep_df else now,
                "writes": previous["writes"] if keep_df else 0,
                "estimates": {},
            }
        return stats

    def filtered_rows(self, bucket: Bucket, column: str, where: str, params: list, estimate) -> float:
        """``estimate()`` — the planner's count of the embedded rows passing a filter — kept
        with the bucket's size, so it is dropped with it (after ``_STATS_TTL``, or once this
        process has written enough to the bucket). Agents filter by the same agent, run or
        attribution search after search, and each estimate is a planning round trip."""
        key = (column, where, *(tuple(p) if isinstance(p, list) else p for p in params))
        entry = self._entry(bucket)
        estimates = entry["estimates"] if entry else None
        if estimates is not None and key in estimates:
            return estimates[key]
        rows = estimate()
        if estimates is not None:
            with self._lock:
                if len(estimates) < MAX_CACHED_ESTIMATES:
                    estimates[key] = rows
        return rows

    def document_frequencies(self, bucket: Bucket, column: str, lexemes: list[str]) -> dict[str, int]:
        entry = self._entry(bucket)
        if entry is None:
            self.size(bucket)
            entry = self._entries.get(bucket.pk)
        cache = entry["df"] if entry else {}
        result = {lx: cache[(column, lx)] for lx in lexemes if (column, lx) in cache}
        missing = [lx for lx in lexemes if lx not in result]
        if missing:
            extra = " AND context_lemmatized IS NOT NULL" if column == "context_tsv" else ""
            with connection.cursor() as cur:
                cur.execute(
                    f"""
                    SELECT t.lexeme, (SELECT count(*) FROM memories m
                                      WHERE m.tenant_id = %s AND m.bucket_id = %s{extra}
                                        AND m.{column} @@ quote_literal(t.lexeme)::tsquery)
                    FROM unnest(%s::text[]) AS t(lexeme)
                    """,
                    [bucket.tenant_id, bucket.pk, missing],
                )
                fetched = dict(cur.fetchall())
            with self._lock:
                if len(cache) < 50_000:
                    cache.update({(column, lx): df for lx, df in fetched.items()})
            result.update(fetched)
        return result

    def invalidate(self, bucket_id: uuid.UUID) -> None:
        with self._lock:
            self._entries.pop(bucket_id, None)


bucket_stats = _BucketStats()


# --- signals ------------------------------------------------------------------------------------


# Terms PostgreSQL's parser keeps whole and the 'simple' dictionary leaves as they are
# (an ASCII word in lower case, a run of digits): their lexeme is the term itself.
_PLAIN_TERM = re.compile(r"[a-z]{1,200}|[0-9]{1,200}")


def _query_lexemes(query_lemmas: str) -> list[str]:
    """The lexemes PostgreSQL's parser makes of the lemmatised query — exactly what
    documents were indexed as, whatever the text (CJK, numbers with dots, …). When every
    term is plain (most questions), that is the distinct terms in tsvector order, and the
    round trip to ask the parser is saved."""
    terms = query_lemmas.split()
    if not terms:
        return []
    if all(_PLAIN_TERM.fullmatch(term) for term in terms):
        return sorted(set(terms))
    with connection.cursor() as cur:
        cur.execute("SELECT lexeme FROM unnest(to_tsvector('simple', %s))", [query_lemmas])
        return [row[0] for row in cur.fetchall()]


def _tsquery(lexemes: list[str]) -> str:
    # Lexemes are quoted (quote_literal rules), so tsquery operators inside them are inert.
    return " | ".join("'" + lexeme.replace("'", "''").replace("\\", "\\\\") + "'" for lexeme in lexemes)


def _candidate_query(present: list[str], df: dict[str, int], n: int) -> tuple[str, bool]:
    """The tsquery that fetches BM25 candidates, and whether it may match more than
    :data:`MAX_KEYWORD_MATCHES` documents (then they are ordered before the cut).

    The rarest terms fetch every document holding them, while their document frequencies
    add up to at most :data:`CANDIDATE_BUDGET` (always at least the rarest one). Pairs of
    the remaining terms in at most :data:`PAIR_TERM_SHARE` of the bucket fetch the documents
    holding both (two of them together can outweigh one rare term), rarest pairs first,
    while the upper bound of the matches (the smaller frequency of each pair) stays within
    :data:`MAX_KEYWORD_MATCHES`. Other terms fetch nothing ("user", "like" would make every
    query read most of the bucket) but still score the candidates.
    """
    ordered = sorted(present, key=lambda lx: (df[lx], lx))
    rare: list[str] = []
    total = 0
    for lx in ordered:
        if rare and total + df[lx] > CANDIDATE_BUDGET:
            break
        rare.append(lx)
        total += df[lx]
    others = [lx for lx in ordered[len(rare) :] if df[lx] <= PAIR_TERM_SHARE * n][:MAX_PAIR_TERMS]
    pairs = sorted(
        ((a, b) for i, a in enumerate(others) for b in others[i + 1 :]), key=lambda p: (min(df[p[0]], df[p[1]]), p)
    )
    parts = [_tsquery([lx]) for lx in rare]
    for a, b in pairs:
        bound = min(df[a], df[b])
        if total + bound > MAX_KEYWORD_MATCHES:
            break
        parts.append(f"({_tsquery([a])} & {_tsquery([b])})")
        total += bound
    return " | ".join(parts), total > MAX_KEYWORD_MATCHES


def _bm25(
    bucket: Bucket, lexemes: list[str], filters: SearchFilters, config: ranking.RankingConfig, *, context: bool
) -> tuple[list[tuple[uuid.UUID, float]], float]:
    """BM25 over the lemmatised text (``context``: memory + sequence context), best first, and
    its *coverage*: the largest share of the query's IDF mass one of the ten best matches holds
    (every query term counts, those no memory of the bucket holds included). A paraphrase
    shares few words with its answer, so its best lexical matches cover little of the query.

    Candidates come from :func:`_candidate_query`, so the cost follows them, not the bucket.
    Each is scored exactly: term frequency from the lexeme's positions, saturating with
    ``k1``; document length (distinct lexemes, as the bucket average is counted) against
    the bucket's average, weighted by ``b``; Lucene's IDF within the bucket. Only the
    query's own lexemes are unnested: ``setweight`` marks them and ``ts_filter`` keeps them,
    both in C, so scoring a candidate costs about a microsecond.
    """
    if not lexemes:
        return [], 0.0
    stats = bucket_stats.size(bucket)
    column = "context_tsv" if context else "lemmatized_tsv"
    n = stats["n_context"] if context else stats["n"]
    if n == 0:
        return [], 0.0
    avgdl = stats["avgdl_context"] if context else stats["avgdl"]
    df = bucket_stats.document_frequencies(bucket, column, lexemes)
    present = [lx for lx in lexemes if df.get(lx, 0) > 0]
    if not present:
        return [], 0.0

    # Lucene's BM25 IDF (never negative).
    def inverse(lx: str) -> float:
        return math.log(1 + (n - df.get(lx, 0) + 0.5) / (df.get(lx, 0) + 0.5))

    idf = [inverse(lx) for lx in present]
    query_mass = sum(inverse(lx) for lx in lexemes)
    candidate_query, too_many = _candidate_query(present, df, n)
    where, params = filters.sql(bucket)
    context_guard = " AND m.context_lemmatized IS NOT NULL" if context else ""
    # Only when even the rarest term is too common to read in full (a query of common words
    # only) are the matches ordered, by ts_rank, before the cut.
    order = f"ORDER BY ts_rank(m.{column}, %s::tsquery) DESC" if too_many else ""
    order_params = [candidate_query] if order else []
    sql = f"""
        WITH q(lexeme, idf) AS (SELECT * FROM unnest(%s::text[], %s::float8[])),
        cand AS (
            SELECT m.id, {_DOC_LENGTH[column]} AS dl,
                   ts_filter(setweight(m.{column}, 'A', %s::text[]), '{{a}}') AS terms
            FROM memories m
            WHERE {where}{context_guard} AND m.{column} @@ %s::tsquery
            {order}
            LIMIT %s
        )
        SELECT c.id, sum(q.idf * u.tf * (%s + 1) / (u.tf + %s * (1 - %s + %s * c.dl / %s))) AS score,
               sum(q.idf) AS matched
        FROM cand c
        CROSS JOIN LATERAL (
            SELECT lexeme, coalesce(array_length(positions, 1), 1)::float8 AS tf FROM unnest(c.terms)
        ) u
        JOIN q ON q.lexeme = u.lexeme
        GROUP BY c.id
        ORDER BY score DESC, c.id
        LIMIT %s
    """
    k1, b = config.bm25_k1, config.bm25_b
    all_params = [
        present, idf, present, *params, candidate_query, *order_params, MAX_KEYWORD_MATCHES,
        k1, k1, b, b, avgdl, config.candidates,
    ]  # fmt: skip
    with connection.cursor() as cur:
        cur.execute(sql, all_params)
        rows = cur.fetchall()
    coverage = max((float(row[2]) for row in rows[:10]), default=0.0) / query_mass
    return [(row[0], float(row[1])) for row in rows], min(1.0, coverage)


# The HNSW settings each kept connection has at session level (see _hnsw_settings).
_session_ef_search: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _hnsw_settings(cur, ef_search: int) -> None:
    """Set ``hnsw.ef_search`` and ``hnsw.iterative_scan`` for the walk that follows.

    pgvector 0.8 iterative scans keep walking the graph until enough rows pass the filters
    (relaxed order: re-sorted by the caller), instead of silently returning fewer. Inside a
    transaction the settings are local to it. In autocommit (the executor threads) they are
    set on the session, once per connection and value: a connection used only for searches
    keeps them, and the round trip is saved.
    """
    in_transaction = connection.in_atomic_block
    raw = connection.connection
    if not in_transaction and _session_ef_search.get(raw) == ef_search:
        return
    cur.execute(
        "SELECT set_config('hnsw.ef_search', %s, %s), set_config('hnsw.iterative_scan', 'relaxed_order', %s)",
        [str(ef_search), in_transaction, in_transaction],
    )
    if not in_transaction:
        _session_ef_search[raw] = ef_search


def _estimated_rows(where: str, params: list, column: str) -> float:
    """The planner's estimate of the embedded rows passing ``where`` (from the column
    statistics ANALYZE keeps: a plan, not a count, so it costs the same for any filter)."""
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memories m WHERE {where} AND m.{column} IS NOT NULL", params)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


def _vector(
    bucket: Bucket, query_vector, filters: SearchFilters, config: ranking.RankingConfig, *, context: bool
) -> tuple[list[tuple[uuid.UUID, float]], str, set[uuid.UUID]]:
    """Nearest neighbours by cosine similarity, how they were found ("hnsw" or "exact"),
    and (memory side only) which of them have no context vector."""
    column = "context_embedding" if context else "embedding"
    bare = "false" if context else "m.context_embedding IS NULL"
    stats = bucket_stats.size(bucket)
    where, params = filters.sql(bucket)
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
    # (after _STATS_TTL, or once this process has written 5% of the bucket).
    population = stats["n_context_embedded"] if context else stats["n_embedded"]
    if population == 0 and stats["n"] >= EXACT_SCAN_BELOW:
        return [], "none", set()
    exact_sql = f"""
        WITH b AS MATERIALIZED (
            SELECT m.id, m.{column} AS v, {bare} AS bare FROM memories m WHERE {where} AND m.{column} IS NOT NULL
        )
        SELECT id, 1 - (v <=> %s::vector) AS similarity, bare FROM b ORDER BY v <=> %s::vector LIMIT %s
    """
    exact_params = [*params, vector, vector, limit]
    with binding_cursor(connection) as cur:
        if population < EXACT_SCAN_BELOW or (
            where != SearchFilters().sql(bucket)[0]
            and bucket_stats.filtered_rows(
                bucket, column, where, params, lambda: _estimated_rows(where, params, column)
            )
            < EXACT_SCAN_BELOW
        ):
            cur.execute(exact_sql, exact_params)
            return _neighbours(cur.fetchall(), "exact")
        # The graph's size, estimated as the table's rows times this bucket's share of rows
        # with a vector in the column (few have a context vector when most are written as
        # unrelated facts); never less than this bucket's own vectors.
        graph = max(population, stats["table_rows"] * population / max(1, stats["n"]))
        _hnsw_settings(cur, max(scaled_ef_search(config.ef_search, graph), limit))
        cur.execute(
            f"""
            SELECT m.id, 1 - (m.{column} <=> %s::vector) AS similarity, {bare} AS bare FROM memories m
            WHERE {where} AND m.{column} IS NOT NULL
            ORDER BY {half_precision_distance("m." + column, "%s::vector")} LIMIT %s
            """,
            [vector, *params, vector, limit],
        )
        rows = cur.fetchall()
        if len(rows) < min(limit, population):
            # Very selective filters can exhaust the index walk; the filtered set is then
            # small, and an exact scan over it is both cheap and complete.
            cur.execute(exact_sql, exact_params)
            return _neighbours(cur.fetchall(), "exact")
    # relaxed_order: the walk may hand rows back slightly out of order.
    return _neighbours(sorted(rows, key=lambda r: r[1], reverse=True), "hnsw")


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


# --- query analysis ------------------------------------------------------------------------------

_PREFERENCE_QUERY = re.compile(
    r"\b(like|likes|love|loves|prefer|prefers|preference|favou?rite|enjoy|enjoys|hate|hates|dislike|usually|"
    r"tend|always|never|habit|into)\b",
    re.IGNORECASE,
)
_SPECIFIC_QUERY = re.compile(
    r"\b(which|what|where|when|who|how many|how much|currently|current|now|own|have|has|bought|name|called)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?)\b")
_POSSESSIVE = re.compile(r"['\u2019]s$")
_NOT_NAMES = {m.capitalize() for m in lemmatizer.MONTHS + lemmatizer.WEEKDAYS} | {"I", "I'm", "I've", "I'd"}


# "When did…", "what year…", "how long ago…": the answer is a time.
_WHEN_QUERY = re.compile(
    r"^\W*(?:when\b|(?:in |on |during |by )?(?:what|which) (?:year|month|day|date|time|week|season)\b|how long ago\b)",
    re.IGNORECASE,
)
_TIME_WORDS = (
    "yesterday|today|tonight|tomorrow|ago|recently|lately|earlier|later|weekend|morning|afternoon|evening|"
    "week|weeks|month|months|year|years|summer|winter|spring|autumn|fall|christmas|birthday|anniversary|"
    + "|".join(lemmatizer.MONTHS + lemmatizer.WEEKDAYS)
)
_TIME_EXPRESSION = re.compile(rf"\b(?:{_TIME_WORDS}|(?:19|20)\d\d)\b", re.IGNORECASE)


def asks_when(query: str) -> bool:
    return bool(_WHEN_QUERY.search(query))


def has_time_expression(content: str) -> bool:
    return bool(_TIME_EXPRESSION.search(content))


def preferred_scope(query: str) -> str | None:
    if _PREFERENCE_QUERY.search(query):
        return "general"
    if _SPECIFIC_QUERY.search(query):
        return "specific"
    return None


def named_people(query: str) -> list[str]:
    """Capitalised words inside the question ("What does Alice like?" → Alice)."""
    names = [_POSSESSIVE.sub("", m.group(1)) for m in _NAME.finditer(query.strip())]
    return [n for n in dict.fromkeys(names) if n not in _NOT_NAMES]


# --- the selector ---------------------------------------------------------------------------------

_ROW_COLUMNS = (
    "id", "content", "created_at", "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root",
    "hint_tags", "metadata", "classified_scope", "classified_topic", "token_count", "context_text",
    "linked_memory_ids", "superseded_at", "superseded_by",
)  # fmt: skip

_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="engram-search")
# The context-vector walk, started by the vector signal once the query is embedded. A pool
# of its own: its tasks wait for nothing, so a full _executor (whose tasks wait for these)
# can never be waiting for itself.
_walk_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="engram-search-walk")


def _in_thread(function, *args, **kwargs):
    """Run one signal in an executor thread, on that thread's own database connection
    (kept between searches; closed first if it broke or outlived DB_CONN_MAX_AGE), in
    autocommit: signals only read.

    Django's per-use health check (a ``SELECT 1`` before the first query) is skipped, a
    round trip per signal; a kept connection found dead instead (the database restarted
    since) is replaced and the signal run once more."""
    close_old_connections()
    connection.health_check_done = True
    try:
        return function(*args, **kwargs)
    except OperationalError:
        if connection.connection is not None and connection.is_usable():
            raise
        connection.close()
        return function(*args, **kwargs)


def close_search_connections() -> None:
    """Close the database connections of the executor threads (each thread runs exactly one
    closing task: they wait for each other). Tests call it before the test database goes."""
    for pool in (_executor, _walk_executor):
        workers = pool._max_workers
        barrier = threading.Barrier(workers)

        def close(barrier=barrier):
            barrier.wait(timeout=30)
            connection.close()

        for future in [pool.submit(close) for _ in range(workers)]:
            future.result(timeout=60)


class _Done:
    """A signal computed in the calling thread, with the interface of a Future."""

    def __init__(self, function, *args, **kwargs):
        try:
            self._value, self._error = function(*args, **kwargs), None
        except Exception as exc:
            self._value, self._error = None, exc

    def result(self):
        if self._error is not None:
            raise self._error
        return self._value


def _start(function, *args, pool: ThreadPoolExecutor = _executor, **kwargs):
    """Start a signal: in an executor thread when ENGRAM_SEARCH_PARALLEL is on (the
    database answers it on another core while this thread runs the lexical signals),
    else right here."""
    if getattr(settings, "ENGRAM_SEARCH_PARALLEL", False):
        return pool.submit(_in_thread, function, *args, **kwargs)
    return _Done(function, *args, **kwargs)


def _keyword_signals(bucket: Bucket, query: str, filters: SearchFilters, config: ranking.RankingConfig, now):
    """BM25 over the memory and over memory + context (that one in another thread when
    ENGRAM_SEARCH_PARALLEL is on), for the lemmatised query, and the coverage of the memory
    side (of the context side when only that one runs). A signal weighted 0 is not run."""
    lexemes = _query_lexemes(" ".join(lemmatizer.query_terms(query, now)))
    context_side = (
        _start(_bm25, bucket, lexemes, filters, config, context=True) if config.weight("keyword_context") > 0 else None
    )
    memory_side, coverage = (
        _bm25(bucket, lexemes, filters, config, context=False) if config.weight("keyword") > 0 else ([], None)
    )
    context_side, context_coverage = context_side.result() if context_side else ([], None)
    return memory_side, context_side, coverage if coverage is not None else context_coverage


def _vector_signals(bucket: Bucket, query: str, filters: SearchFilters, config: ranking.RankingConfig):
    """Embed the query, then both nearest-neighbour lists (the context one in another
    thread when ENGRAM_SEARCH_PARALLEL is on). EmbeddingUnavailable when the model is."""
    query_vector = embedding.embed_query(query)  # checked for NaN / zeros there
    context_side = None
    if config.weight("vector_context") > 0:
        context_side = _start(_vector, bucket, query_vector, filters, config, context=True, pool=_walk_executor)
    nothing = ([], "", set())
    memory_ranked, memory_method, bare = (
        _vector(bucket, query_vector, filters, config, context=False) if config.weight("vector") > 0 else nothing
    )
    context_ranked, context_method, _ = context_side.result() if context_side else nothing
    # Only where the context list has anything: in a bucket (or filtered set) without context
    # vectors the stand-ins would merely repeat the memory list and double its weight.
    if config.context_stand_in and context_ranked and bare:
        context_ranked = _with_stand_ins(context_ranked, memory_ranked, bare, config.candidates)
    return (memory_ranked, memory_method), (context_ranked, context_method)


# Django has psycopg hand JSONB back as text (its JSONField decodes it); raw rows decode here.
_JSON_COLUMNS = ("metadata", "linked_memory_ids")


def _fetch_rows(bucket: Bucket, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict]:
    if not ids:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(_ROW_COLUMNS)} FROM memories WHERE tenant_id = %s AND bucket_id = %s AND id = ANY(%s)",
            [bucket.tenant_id, bucket.pk, ids],
        )
        rows = {row[0]: dict(zip(_ROW_COLUMNS, row, strict=True)) for row in cur.fetchall()}
    for row in rows.values():
        for column in _JSON_COLUMNS:
            if isinstance(row[column], str):
                row[column] = json.loads(row[column])
    return rows


def _fetch_contenders(
    bucket: Bucket, fused: dict, config: ranking.RankingConfig, k: int | None, wanted_scope, people, when: bool
) -> dict[uuid.UUID, dict]:
    """The rows of the fused candidates that can still reach the top ``k`` once boosted.

    Boosts multiply the fused score by at least ``min_boost`` and at most ``max_boost``
    (their bounds under ``config``), so a candidate whose fused score is below the k-th
    one's x min_boost / max_boost cannot overtake it: its row is not read. With a token
    budget (``k`` None) any candidate may fit, so all are read; if rows of the top k were
    deleted meanwhile, the rest are read too.
    """
    ids = list(fused)
    if k is None or len(ids) <= k:
        return _fetch_rows(bucket, ids)
    max_boost = (
        (1.0 + config.scope_match_boost if wanted_scope else 1.0)
        * (1.0 + config.person_boost if people else 1.0)
        * (1.0 + config.speaker_boost if people else 1.0)
        * (1.0 + config.date_cue_boost if when else 1.0)
        * (1.0 + config.trust_boost if config.trusted_actors else 1.0)
    )
    min_boost = (1.0 - config.recency_weight) * min(1.0, config.superseded_weight)
    best = sorted(ids, key=lambda memory_id: -fused[memory_id])
    threshold = fused[best[k - 1]] * min_boost / max_boost
    contenders = [memory_id for memory_id in ids if fused[memory_id] >= threshold]
    rows = _fetch_rows(bucket, contenders)
    if sum(1 for memory_id in best[:k] if memory_id in rows) < k:
        rows.update(_fetch_rows(bucket, [memory_id for memory_id in ids if memory_id not in rows]))
    return rows


# The best candidates whose sequence neighbours are brought in, and how far either way.
NEIGHBOUR_SOURCES = 20


def _lift_neighbours(
    bucket: Bucket, fused: dict, filters: SearchFilters, config: ranking.RankingConfig
) -> tuple[dict, dict]:
    """Fused scores with the neighbour lift (:func:`ranking.lift_neighbours`), and each lift.

    One statement reads the places of the best :data:`NEIGHBOUR_SOURCES` candidates and every
    memory up to ``neighbour_reach`` places before and after them in their sequences (through
    ``idx_memories_sequence``, under the search's filters). Those neighbours join the
    candidates even if no signal found them: the answer to a question is often the turn after
    it, and shares none of its words. Lifts flow from the best candidates and between the
    memories around them; weaker candidates neither give nor receive one.
    """
    best = sorted(fused, key=lambda memory_id: -fused[memory_id])[:NEIGHBOUR_SOURCES]
    where, params = filters.sql(bucket)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            WITH source AS (
                SELECT sequence_id, sequence_index FROM memories
                WHERE tenant_id = %s AND bucket_id = %s AND id = ANY(%s) AND sequence_id IS NOT NULL
            )
            SELECT DISTINCT m.id, m.sequence_id, m.sequence_index
            FROM source s
            JOIN memories m ON m.sequence_id = s.sequence_id
                AND m.sequence_index BETWEEN s.sequence_index - %s AND s.sequence_index + %s
            WHERE {where}
            """,
            [bucket.tenant_id, bucket.pk, best, config.neighbour_reach, config.neighbour_reach, *params],
        )
        position = {row[0]: (row[1], row[2]) for row in cur.fetchall()}
    at = {place: memory_id for memory_id, place in position.items()}
    return ranking.lift_neighbours(fused, position, at, config)


def _apply_budget(hits: list[Hit], limit: int, token_budget: int | None) -> list[Hit]:
    if token_budget is None:
        return hits[:limit]
    chosen, used = [], 0
    for hit in hits:
        cost = hit.row["token_count"] or rough_token_count(hit.row["content"])
        if used + cost <= token_budget:
            chosen.append(hit)
            used += cost
            if len(chosen) == limit:
                break
    return chosen


GraphSignal = Callable[..., tuple[list[tuple[uuid.UUID, float]], dict]]
_graph_signal: GraphSignal | None = None


def register_graph_signal(function: GraphSignal) -> None:
    """The graph app plugs its proximity signal in here (it depends on memories, not
    the other way round)."""
    global _graph_signal
    _graph_signal = function


def memories_search(
    *,
    bucket: Bucket,
    query: str,
    mode: str = "hybrid",
    limit: int | None = None,
    token_budget: int | None = None,
    filters: SearchFilters | None = None,
    explain: bool = False,
    ranking_overrides: dict | None = None,
    now: datetime | None = None,
    record_access: bool = True,
) -> SearchResult:
    """Search ``bucket`` for ``query``; hits best first.

    ``hybrid`` and ``vector`` degrade to ``keyword`` when the embedding model is
    unavailable, and say so in ``mode_used`` and ``warnings``.
    """
    filters = filters or SearchFilters()
    config = ranking.resolve(bucket.tenant.settings, ranking_overrides)
    if mode == "graph":
        # The graph's weight sets its share of the hybrid fusion; alone, it is the whole answer.
        config = ranking.with_weight(config, "graph", 1.0)
    # "As of" a past time, recency and relative dates are judged from that time too.
    now = now or filters.as_of or timezone.now()
    filters = dataclasses.replace(filters, reference_time=now)
    if limit is None:
        limit = BUDGET_DEFAULT_LIMIT if token_budget is not None else 10
    limit = max(1, min(limit, MAX_LIMIT))
    warnings: list[str] = []
    mode_used = mode

    # The vector side (embedding the query, then two index walks) and the graph side (parsing
    # the query, then the walk) start first, in other threads when ENGRAM_SEARCH_PARALLEL is
    # on, while this thread runs the lexical signals.
    # Signals weighted 0 add nothing to the fusion, so they are not run at all.
    vector_side = None
    if mode in ("hybrid", "vector") and (config.weight("vector") > 0 or config.weight("vector_context") > 0):
        vector_side = _start(_vector_signals, bucket, query, filters, config)
    graph_side = None
    if mode in ("hybrid", "graph") and _graph_signal is not None:
        if config.weight("graph") > 0:
            graph_side = _start(_graph_signal, bucket=bucket, query=query, filters=filters, config=config, now=now)
    elif mode == "graph":
        warnings.append("The graph signal is not available; no results.")

    lists: dict[str, list[tuple[uuid.UUID, float]]] = {}
    coverage: float | None = None
    methods: dict[str, str] = {}
    graph_paths: dict = {}
    if mode in ("hybrid", "keyword") and (config.weight("keyword") > 0 or config.weight("keyword_context") > 0):
        lists["keyword"], lists["keyword_context"], coverage = _keyword_signals(bucket, query, filters, config, now)
    if vector_side is not None:
        try:
            vector, vector_context = vector_side.result()
        except embedding.EmbeddingUnavailable as exc:
            warnings.append(f"Embedding model unavailable ({exc}); answered with keyword search.")
            mode_used = "keyword"
            if mode == "vector":
                lists["keyword"], lists["keyword_context"], coverage = _keyword_signals(
                    bucket, query, filters, config, now
                )
        else:
            for signal, (ranked, method) in (("vector", vector), ("vector_context", vector_context)):
                if method:
                    lists[signal], methods[signal] = ranked, method
    if graph_side is not None:
        lists["graph"], graph_paths = graph_side.result()

    fused = ranking.fuse(lists, ranking.with_keyword_coverage(config, coverage))
    wanted_scope = preferred_scope(query)
    people = [p.lower() for p in named_people(query)]
    when = config.date_cue_boost > 0 and asks_when(query)
    lifts: dict = {}
    if (config.neighbour_weight > 0 or config.session_weight > 0) and fused:
        fused, lifts = _lift_neighbours(bucket, fused, filters, config)
    rows = _fetch_contenders(bucket, fused, config, limit if token_budget is None else None, wanted_scope, people, when)

    ranks = {}  # per signal: memory id -> (rank, score), which only explain shows
    if explain:
        for signal, ranked in lists.items():
            scores = dict(ranked)
            ranks[signal] = {item: (rank, scores[item]) for item, rank in ranking.tied_ranks(ranked).items()}
    mentioned = _mention_pattern(people)
    hits: list[Hit] = []
    for memory_id, fused_score in fused.items():
        row = rows.get(memory_id)
        if row is None:  # deleted since the signal ran
            continue
        age_days = (now - row["created_at"]).total_seconds() / 86400 if row["created_at"] else 0.0
        boosts = {"recency": ranking.recency_factor(age_days, config)}
        if wanted_scope and row["classified_scope"] == wanted_scope:
            boosts["scope"] = 1.0 + config.scope_match_boost
        if people and _mentions(row, people, mentioned):
            boosts["person"] = 1.0 + config.person_boost
        if people and config.speaker_boost and _spoken_by(row, people):
            boosts["speaker"] = 1.0 + config.speaker_boost
        if when and has_time_expression(row["content"]):
            boosts["date_cue"] = 1.0 + config.date_cue_boost
        if config.trusted_actors and row["source_actor_id"] in config.trusted_actors:
            boosts["trust"] = 1.0 + config.trust_boost
        row["superseded"] = row["superseded_at"] is not None and row["superseded_at"] <= (filters.as_of or now)
        if row["superseded"]:
            boosts["superseded"] = config.superseded_weight
        score = fused_score
        for factor in boosts.values():
            score *= factor
        hit = Hit(id=memory_id, row=row, score=score)
        if explain:
            hit.explain = {
                "fused": round(fused_score, 6),
                "fusion": config.fusion,
                "signals": {
                    signal: {"rank": ranks[signal][memory_id][0], "score": round(ranks[signal][memory_id][1], 6)}
                    for signal in lists
                    if memory_id in ranks[signal]
                },
                "boosts": {name: round(value, 4) for name, value in boosts.items()},
                "keyword_coverage": None if coverage is None else round(coverage, 4),
                "context": row["context_text"],
            }
            if memory_id in lifts:
                hit.explain["neighbour_lift"] = round(lifts[memory_id], 6)
            if memory_id in graph_paths:
                hit.explain["graph_path"] = graph_paths[memory_id]
            if methods:
                hit.explain["vector_search"] = methods
        hits.append(hit)
    _below_successors(hits, config.superseded_weight)
    hits.sort(key=lambda h: (-h.score, str(h.id)))
    hits = _apply_budget(hits, limit, token_budget)
    if record_access and hits:
        access.record([h.id for h in hits])
    return SearchResult(mode_used=mode_used, hits=hits, warnings=warnings)


def _mention_pattern(people: list[str]) -> re.Pattern | None:
    """One pattern for every named person, compiled once per search (not once per row)."""
    if not people:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(p) for p in people) + r")\b")


def _mentions(row: dict, people: list[str], pattern: re.Pattern) -> bool:
    if pattern.search(row["content"].lower()):
        return True
    actors = {(row["source_actor_id"] or "").lower(), (row["agent_id"] or "").lower()}
    return any(p in actors for p in people)


def _spoken_by(row: dict, people: list[str]) -> bool:
    """A memory written without attribution whose text opens with a speaker the query names."""
    if row["attributed_to"] is not None:
        return False
    speaker = transcript_speaker(row["content"])
    return speaker is not None and speaker.split()[0].lower() in people


def _below_successors(hits: list[Hit], weight: float) -> None:
    """A superseded memory found together with the memory that superseded it scores at most
    ``weight`` x that one's score: the newer fact answers first, whatever the older one's
    lexical or vector lead (score fusion can give it a large one in a small bucket)."""
    scores = {hit.id: hit.score for hit in hits}
    for hit in hits:
        successor = hit.row["superseded_by"]
        if hit.row["superseded"] and successor in scores:
            capped = scores[successor] * weight
            if capped < hit.score:
                if hit.explain:
                    hit.explain["boosts"]["below_successor"] = round(capped / hit.score, 4)
                hit.score = capped
