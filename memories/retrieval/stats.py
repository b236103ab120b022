"""Per-process bucket statistics for BM25 and the exact-scan choice, and their refresh thread."""

from __future__ import annotations

import logging
import threading
import time
import uuid

from django.conf import settings
from django.db import connections

from engram_site import stopwatch
from engram_site.replica import read_connection
from engram_site.scoping import in_this_context, scopes_disabled
from tenants.models import Bucket

logger = logging.getLogger(__name__)

# A document's length for BM25: its number of terms, counted from its space-separated
# lemmas (the text its tsvector is made of) without unnesting the tsvector; the bucket
# average is taken the same way.
_TERMS = "(length({0}) - length(replace({0}, ' ', '')) + 1)"
DOC_LENGTH = {
    "lemmatized_tsv": _TERMS.format("coalesce(m.text_lemmatized, '')"),
    "context_tsv": _TERMS.format("coalesce(m.text_lemmatized, '') || ' ' || m.context_lemmatized"),
    "key_tsv": _TERMS.format("k.lemmatized"),
}
# Where each BM25 document's term frequencies are counted: (table, tsvector column, condition).
_DOCUMENTS = {
    "lemmatized_tsv": ("memories", "lemmatized_tsv", ""),
    "context_tsv": ("memories", "context_tsv", " AND m.context_lemmatized IS NOT NULL"),
    "key_tsv": ("memory_keys", "tsv", ""),
}

STATS_TTL = 60.0
STATS_STALE_MAX = 3600.0  # an older size is not served, even while a refresh runs
DF_TTL = 600.0
MAX_CACHED_ESTIMATES = 1000  # filtered-row estimates kept per bucket
FLIGHT_WAIT = 30.0  # seconds a thread waits for another's count before counting itself


class _Flight:
    """A count under way in one thread: the threads asking for the same meanwhile wait for its
    result rather than counting too."""

    def __init__(self):
        self.done = threading.Event()
        self.result = None


class _BucketStats:
    """Per-process cache of bucket size, average document lengths and term document
    frequencies. IDF tolerates being a little stale; counting on every query would not
    be affordable at 100k memories.

    Sizes are refreshed after ``STATS_TTL`` seconds, document frequencies after
    ``DF_TTL`` (a term's share of a large bucket moves slowly). Both are dropped at once
    when this process has written enough to the bucket to matter (any write to a small
    bucket, 5% of a large one). An expired size is served while a background thread
    counts again (``ENGRAM_STATS_BACKGROUND``), so no search waits for a full count of a
    large bucket; without a cached size the search counts itself.

    A bucket is counted by one thread of the process at a time: the searches (and each search's
    signal threads) that find no size while a count is under way wait for its result. A new
    bucket's first searches come together (several clients, four signal threads each): counting
    it once per thread was most of their time.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict[uuid.UUID, dict] = {}
        self._refreshing: set[uuid.UUID] = set()
        self._counting: dict[uuid.UUID, _Flight] = {}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def note_writes(self, bucket_id: uuid.UUID, count: int) -> None:
        with self._lock:
            entry = self._entries.get(bucket_id)
            if entry is None:
                # A count under way may miss these rows: who asks from now on counts anew.
                self._counting.pop(bucket_id, None)
                return
            entry["writes"] += count
            n = entry["size"]["n"]
            if entry["writes"] > (0 if n < 1000 else 0.05 * n):
                del self._entries[bucket_id]
                self._counting.pop(bucket_id, None)

    def _entry(self, bucket: Bucket) -> dict | None:
        entry = self._entries.get(bucket.pk)
        if entry is None:
            return None
        age = time.monotonic() - entry["at"]
        if age < STATS_TTL:
            return entry
        if age < STATS_STALE_MAX and self._refresh_in_background(bucket):
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
                self._count_once(bucket)
            except Exception:  # the next search counts synchronously
                logger.warning("refreshing the statistics of bucket %s failed", bucket.pk, exc_info=True)
            finally:
                connections.close_all()  # this thread's own connections (the replica's too)
                with self._lock:
                    self._refreshing.discard(bucket.pk)

        # In the searching request's context: its tenant scope follows the count into the thread.
        threading.Thread(target=in_this_context(refresh), name="engram-bucket-stats", daemon=True).start()
        return True

    def size(self, bucket: Bucket) -> dict:
        entry = self._entry(bucket)
        if entry:
            return entry["size"]
        return self._count_once(bucket)

    def warm(self, bucket_ids) -> None:
        """Count the buckets of ``bucket_ids`` this process holds no size of: a large write's
        follow-up calls it, off the request's path, so the first searches after a burst find the
        size, or wait for this count rather than count themselves."""
        # The follow-up's thread runs in no tenant's scope; the buckets named are any tenant's.
        with scopes_disabled():
            buckets = list(Bucket.objects.filter(pk__in=list(bucket_ids)))
        for bucket in buckets:
            self.size(bucket)

    def _count_once(self, bucket: Bucket) -> dict:
        """The bucket's size, counted by this thread or by the one counting it already."""
        with self._lock:
            flight = self._counting.get(bucket.pk)
            mine = flight is None
            if mine:
                flight = self._counting[bucket.pk] = _Flight()
        if not mine:
            with stopwatch.stage("stats.wait"):
                finished = flight.done.wait(FLIGHT_WAIT)
            if finished and flight.result is not None:
                return flight.result
            return self._count(bucket, None)  # that count failed (or hangs): this thread counts
        try:
            flight.result = self._count(bucket, flight)
            return flight.result
        finally:
            with self._lock:
                if self._counting.get(bucket.pk) is flight:
                    del self._counting[bucket.pk]
            flight.done.set()

    def _count(self, bucket: Bucket, flight: _Flight | None) -> dict:
        # One statement: the bucket's counts, then the average lengths from a recent sample
        # (exact enough for BM25, bounded in cost; the key documents' from any 2,000 of them).
        with stopwatch.stage("stats.size"), read_connection().cursor() as cur:
            cur.execute(
                f"""
                SELECT * FROM (
                    SELECT count(*),
                           count(*) FILTER (WHERE context_lemmatized IS NOT NULL),
                           count(*) FILTER (WHERE embedding IS NOT NULL),
                           count(*) FILTER (WHERE context_embedding IS NOT NULL),
                           -- The table's row estimate (kept by ANALYZE and autovacuum; -1 before
                           -- the first) sizes the HNSW graphs for scaled_ef_search.
                           (SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass)
                    FROM memories WHERE tenant_id = %s AND bucket_id = %s
                ) counts CROSS JOIN (
                    SELECT avg({DOC_LENGTH["lemmatized_tsv"]}), avg({DOC_LENGTH["context_tsv"]}),
                           (SELECT avg({DOC_LENGTH["key_tsv"]}) FROM (
                                SELECT lemmatized FROM memory_keys WHERE tenant_id = %s AND bucket_id = %s LIMIT 2000
                            ) k),
                           (SELECT count(*) FROM memory_keys WHERE tenant_id = %s AND bucket_id = %s),
                           (SELECT count(*) FROM memory_keys
                            WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL),
                           (SELECT count(*) FROM memory_passages
                            WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL)
                    FROM (SELECT text_lemmatized, context_lemmatized FROM memories
                          WHERE tenant_id = %s AND bucket_id = %s ORDER BY created_at DESC LIMIT 2000) m
                ) lengths
                """,
                [bucket.tenant_id, bucket.pk] * 6,
            )
            (
                total, with_context, embedded, context_embedded, table_rows,
                avgdl, avgdl_context, avgdl_key, keyed, key_embedded, passage_embedded,
            ) = cur.fetchone()  # fmt: skip
        stats = {
            "n": total,
            "n_context": with_context,
            "n_embedded": embedded,
            "n_context_embedded": context_embedded,
            "n_key": keyed or 0,
            "n_key_embedded": key_embedded or 0,
            "n_passage_embedded": passage_embedded or 0,
            "avgdl": float(avgdl or 1.0),
            "avgdl_context": float(avgdl_context or 1.0),
            "avgdl_key": float(avgdl_key or 1.0),
            "table_rows": max(0.0, float(table_rows)),
        }
        now = time.monotonic()
        with self._lock:
            if flight is not None and self._counting.get(bucket.pk) is not flight:
                return stats  # the bucket changed while it was counted: its waiters take it, the cache not
            previous = self._entries.get(bucket.pk)
            # Document frequencies outlive a size refresh (DF_TTL), unless the bucket changed a lot.
            keep_df = previous is not None and now - previous["df_at"] < DF_TTL
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
        with the bucket's size, so it is dropped with it (after ``STATS_TTL``, or once this
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
            table, tsv, extra = _DOCUMENTS[column]
            with stopwatch.stage("stats.df"), read_connection().cursor() as cur:
                cur.execute(
                    f"""
                    SELECT t.lexeme, (SELECT count(*) FROM {table} m
                                      WHERE m.tenant_id = %s AND m.bucket_id = %s{extra}
                                        AND m.{tsv} @@ quote_literal(t.lexeme)::tsquery)
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

    # --- several buckets searched as one collection (a search across buckets) -------------

    def size_of(self, buckets: list[Bucket]) -> dict:
        """The statistics of ``buckets`` taken together, as if their memories were one bucket's:
        counts add up, average lengths are weighted by the rows they were taken over. One
        bucket's are its own, unchanged."""
        sizes = [self.size(bucket) for bucket in buckets]
        if len(sizes) == 1:
            return sizes[0]

        def weighted(value: str, weight: str) -> float:
            total = sum(s[weight] for s in sizes)
            return sum(s[value] * s[weight] for s in sizes) / total if total else 1.0

        counts = ("n", "n_context", "n_embedded", "n_context_embedded", "n_key", "n_key_embedded", "n_passage_embedded")
        combined = {key: sum(s.get(key, 0) for s in sizes) for key in counts}
        combined["avgdl"] = weighted("avgdl", "n")
        combined["avgdl_context"] = weighted("avgdl_context", "n_context")
        combined["avgdl_key"] = weighted("avgdl_key", "n_key")
        combined["table_rows"] = max(s["table_rows"] for s in sizes)
        return combined

    def frequencies_of(self, buckets: list[Bucket], column: str, lexemes: list[str]) -> dict[str, int]:
        """Document frequencies over ``buckets`` taken together: each bucket's, added up. Each
        bucket's are cached with it, as for a search of that bucket alone; those missing from
        any bucket's cache are counted for every bucket in one statement (per lexeme, grouped
        by bucket), not one statement per bucket."""
        if len(buckets) == 1:
            return self.document_frequencies(buckets[0], column, lexemes)
        caches = []
        for bucket in buckets:
            entry = self._entry(bucket)
            if entry is None:
                self.size(bucket)
                entry = self._entries.get(bucket.pk)
            caches.append(entry["df"] if entry else {})
        missing = sorted({lx for cache in caches for lx in lexemes if (column, lx) not in cache})
        counted: dict[tuple[str, uuid.UUID], int] = {}
        if missing:
            table, tsv, extra = _DOCUMENTS[column]
            with stopwatch.stage("stats.df"), read_connection().cursor() as cur:
                cur.execute(
                    f"""
                    SELECT t.lexeme, c.bucket_id, c.n FROM unnest(%s::text[]) AS t(lexeme)
                    CROSS JOIN LATERAL (
                        SELECT m.bucket_id, count(*) AS n FROM {table} m
                        WHERE m.tenant_id = %s AND m.bucket_id = ANY(%s::uuid[]){extra}
                          AND m.{tsv} @@ quote_literal(t.lexeme)::tsquery
                        GROUP BY m.bucket_id
                    ) c
                    """,
                    [missing, buckets[0].tenant_id, [bucket.pk for bucket in buckets]],
                )
                counted = {(lexeme, bucket_id): n for lexeme, bucket_id, n in cur.fetchall()}
        total = dict.fromkeys(lexemes, 0)
        with self._lock:
            for bucket, cache in zip(buckets, caches, strict=True):
                for lexeme in lexemes:
                    key = (column, lexeme)
                    if key not in cache:
                        df = counted.get((lexeme, bucket.pk), 0)
                        if len(cache) < 50_000:
                            cache[key] = df
                    else:
                        df = cache[key]
                    total[lexeme] += df
        return total

    def invalidate(self, bucket_id: uuid.UUID) -> None:
        with self._lock:
            self._entries.pop(bucket_id, None)
            self._counting.pop(bucket_id, None)


bucket_stats = _BucketStats()
