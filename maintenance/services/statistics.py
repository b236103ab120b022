"""Fresh planner statistics after large writes: ``ANALYZE`` of the tables a search reads, when
enough of them changed since their last ANALYZE, right after the write.

Why (bench/results/burst-search-2026-11-28.md, docs/MAINTENANCE.md "Planner statistics"): every
statement of a search names its bucket (``tenant_id = … AND bucket_id = …``), and PostgreSQL
estimates how many rows that leaves from the column statistics of the last ANALYZE. A bucket
written since is in none of them: its value is missing from ``bucket_id``'s most-common-value
list, which covers every row the sample saw, so the planner takes it for a bucket of one row.
With that estimate, right after 3,000 memories went into a new bucket, the neighbour lift joined
each of its 20 sources to the whole bucket through ``idx_memories_bucket`` (20 x 3,000 rows read,
150 ms, where ``idx_memories_sequence`` reads 7 per source), the "HNSW walk" became a sort of
every vector of the bucket, and BM25's document frequencies a scan of the bucket per term instead
of the GIN index. Autovacuum analyzes a table only once 10% of it changed (plus 50 rows): soon
for a new installation's small table, not for a new bucket in a large one.

The writing process runs :func:`planner_statistics_refresh` in a thread of its own after writes of
at least ``ENGRAM_ANALYZE_MIN_ROWS`` rows to a bucket (maintenance/receivers.py): never in the
request, and without waiting behind the worker's queue.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Iterable

from django.conf import settings
from django.db import OperationalError, connection, transaction

from engram_site.locks import LockHeld, advisory_lock

logger = logging.getLogger(__name__)

# The tables a search reads, whatever app fills them (named, not imported: maintenance sits beside
# the graph app, and ANALYZE needs only the name).
SEARCH_TABLES = ("memories", "memory_keys", "graph_entities", "graph_mentions", "graph_edges")


def stale_tables(*, bucket_ids: Iterable[uuid.UUID] = ()) -> dict[str, str]:
    """The search tables whose statistics are out of date, each with the reason.

    A table is when the rows changed since its last ANALYZE (``n_mod_since_analyze``, which
    PostgreSQL's statistics collector may report a few seconds late) reach
    ``ENGRAM_ANALYZE_THRESHOLD`` of its estimated size and at least ``ENGRAM_ANALYZE_MIN_ROWS``.
    ``memories`` also is when one of ``bucket_ids`` holds at least ``ENGRAM_ANALYZE_MIN_ROWS``
    rows and twice what the planner estimates it holds (a new bucket: it estimates one row);
    counted exactly, up to that bound, so a write committed a moment ago is seen."""
    threshold = settings.ENGRAM_ANALYZE_THRESHOLD
    min_rows = max(1, settings.ENGRAM_ANALYZE_MIN_ROWS)
    stale: dict[str, str] = {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.relname, s.n_mod_since_analyze, greatest(c.reltuples, 0) FROM pg_stat_user_tables s
            JOIN pg_class c ON c.oid = s.relid
            WHERE s.relname = ANY(%s) AND s.schemaname = current_schema()
            """,
            [list(SEARCH_TABLES)],
        )
        for table, changed, rows in cur.fetchall():
            if changed >= max(min_rows, threshold * rows):
                stale[table] = f"{changed} rows changed since its last ANALYZE, of about {rows:.0f}"
        if "memories" in stale:
            return stale
        for bucket_id in dict.fromkeys(bucket_ids):
            cur.execute("SELECT tenant_id FROM buckets WHERE id = %s", [bucket_id])
            found = cur.fetchone()
            if found is None:
                continue
            where, params = "tenant_id = %s AND bucket_id = %s", [found[0], bucket_id]
            cur.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memories WHERE {where}", params)
            plan = cur.fetchone()[0]
            estimate = float((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"])
            bound = max(min_rows, math.ceil(2 * estimate))
            cur.execute(f"SELECT count(*) FROM (SELECT 1 FROM memories WHERE {where} LIMIT %s) b", [*params, bound])
            if cur.fetchone()[0] >= bound:
                stale["memories"] = (
                    f"bucket {bucket_id} holds at least {bound} rows, the planner estimates {estimate:.0f}"
                )
                break
    return stale


def planner_statistics_refresh(*, bucket_ids: Iterable[uuid.UUID] = ()) -> dict:
    """ANALYZE the search tables :func:`stale_tables` names (``ENGRAM_ANALYZE_THRESHOLD = 0``:
    none). Each under a try-lock: a table another process is analyzing now is skipped. A steady
    stream of writes analyzes a table about once per threshold's share of its rows."""
    if settings.ENGRAM_ANALYZE_THRESHOLD <= 0:
        return {"analyzed": {}, "skipped": ["off"]}
    analyzed: dict[str, float] = {}
    skipped: list[str] = []
    for table, reason in stale_tables(bucket_ids=bucket_ids).items():
        try:
            with advisory_lock(f"analyze:{table}"), transaction.atomic():
                started = time.perf_counter()
                with connection.cursor() as cur:
                    # ANALYZE waits for a lock that a REINDEX CONCURRENTLY (the nightly HNSW
                    # reindex), a VACUUM or another ANALYZE holds for minutes: not for long.
                    cur.execute("SET LOCAL lock_timeout = '2s'")
                    cur.execute(f"ANALYZE {connection.ops.quote_name(table)}")
                analyzed[table] = round(time.perf_counter() - started, 3)
                logger.info("ANALYZE %s in %.3f s: %s", table, analyzed[table], reason)
        except LockHeld:
            skipped.append(table)
        except OperationalError as exc:  # the lock timeout: autovacuum or the next write's check
            logger.info("ANALYZE %s skipped: %s", table, exc)
            skipped.append(table)
    return {"analyzed": analyzed, "skipped": skipped}
