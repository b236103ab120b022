"""The ``reindex_hnsw`` job: REINDEX CONCURRENTLY of the HNSW indexes."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable

from django.db import connection

from engram_site.jobs.runner import JobRecorder

logger = logging.getLogger(__name__)

# Every HNSW index in the schema: the memories' own two, the key documents' and the passages'.
# A test holds this list to the catalogue, so an index added later cannot be left out.
HNSW_INDEXES = (
    "idx_memories_embedding_hnsw",
    "idx_memories_context_hnsw",
    "idx_memory_keys_hnsw",
    "idx_memory_passages_hnsw",
)


def _index_size(cur, name: str) -> int | None:
    cur.execute("SELECT pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = %s AND c.relkind = 'i'", [name])
    row = cur.fetchone()
    return row[0] if row else None


def _drop_leftovers(cur, name: str) -> list[str]:
    """A REINDEX CONCURRENTLY that was interrupted leaves an invalid ``<name>_ccnew``
    (or ``_ccold``) index behind, which every write keeps maintaining. Drop them."""
    cur.execute(
        """
        SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE NOT i.indisvalid AND (c.relname LIKE %s OR c.relname LIKE %s)
        """,
        [name + "_ccnew%", name + "_ccold%"],
    )
    dropped = [row[0] for row in cur.fetchall()]
    for leftover in dropped:
        cur.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{leftover}"')
    return dropped


def hnsw_reindex(*, recorder: JobRecorder, indexes: Iterable[str] = HNSW_INDEXES) -> dict:
    """``REINDEX INDEX CONCURRENTLY`` each HNSW index (seed 000: the graph degrades as
    the inserted distribution drifts from the one it was built on).

    CONCURRENTLY builds a new index next to the old one and swaps them, taking
    only locks that let reads and writes go on. It cannot run inside a
    transaction, so this must be called in autocommit mode; the caller holds the
    advisory lock that keeps two reindexes apart (``run_job(..., lock=True)``).
    Records each index's size before and after and how long it took.
    """
    if connection.in_atomic_block:
        raise RuntimeError("REINDEX CONCURRENTLY cannot run inside a transaction")
    indexes = list(indexes)
    recorder.set_total(len(indexes))
    results: dict = {}
    with connection.cursor() as cur:
        for name in indexes:
            if not re.fullmatch(r"[a-z0-9_]+", name):
                raise ValueError(f"not an index name: {name!r}")
            dropped = _drop_leftovers(cur, name)
            before = _index_size(cur, name)
            if before is None:
                results[name] = {"skipped": "no such index"}
                recorder.advance()
                continue
            started = time.monotonic()
            cur.execute(f'REINDEX INDEX CONCURRENTLY "{name}"')
            seconds = round(time.monotonic() - started, 3)
            after = _index_size(cur, name)
            results[name] = {"size_before": before, "size_after": after, "seconds": seconds}
            if dropped:
                results[name]["dropped_leftovers"] = dropped
            recorder.set(**{name: results[name]})
            recorder.advance()
            logger.info("reindexed %s in %.1fs: %d -> %d bytes", name, seconds, before, after)
    return results
