"""The memories nearest to a stored memory inside its own bucket (pgvector kNN): its most similar
vectors (not retrieval's sequence neighbours).

The near-duplicate scan and the link pass ask, for one memory at a time, which
other memories of the same bucket are closest to it. Like retrieval, small
buckets are scanned exactly; larger ones walk the HNSW index with pgvector 0.8's
iterative scan, so the bucket filter cannot starve the result. The query vector
is read by a scalar subquery, so vectors never travel to Python and back.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import connection, transaction

from memories.models import half_precision_distance
from memories.retrieval import EXACT_SCAN_BELOW

EF_SEARCH = 100


@dataclass(frozen=True)
class Similar:
    id: uuid.UUID
    similarity: float


def embedded_count(*, tenant_id, bucket_id) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM memories WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL",
            [tenant_id, bucket_id],
        )
        return cur.fetchone()[0]


# Inside :func:`shared`: the neighbours already fetched, by (memory, exact), and how many were.
_shared: ContextVar[dict | None] = ContextVar("engram_nearest_shared", default=None)


@contextlib.contextmanager
def shared(k: int) -> Iterator[None]:
    """Within the block, each memory's neighbours are fetched once, ``k`` of them with no
    similarity floor, and every :func:`nearest` call on it asking for at most ``k`` is answered
    from them (its own floor and count applied): the near-duplicate, contradiction and link checks
    of a new memory ask for the same neighbours with different cut-offs (maintenance.services.
    comparisons). A cut of the most similar ``k`` is the same list the query with the smaller
    limit answers."""
    token = _shared.set({"k": k})
    try:
        yield
    finally:
        _shared.reset(token)


def _walk_settings(cur, k: int) -> None:
    """The HNSW walk's settings for the rest of the transaction: pgvector 0.8 iterative scans keep
    walking the graph until enough rows of this bucket are found (the index is shared by all
    buckets)."""
    cur.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        [str(max(EF_SEARCH, k))],
    )


def prefetch(*, tenant_id, bucket_id, memory_ids: list, exact: bool) -> None:
    """Inside :func:`shared`: fetch the neighbours of all ``memory_ids`` (of one bucket) in one
    statement, the same lists :func:`nearest` would fetch for each (its query per memory, as a
    LATERAL subquery of the list: same order, same limit; an exact scan reads the bucket's
    vectors once for all of them instead of once each). The compare stage's turn of 25 memories
    paid 25 statements, each reading (and detoasting) the whole bucket's vectors when it is small."""
    memo = _shared.get()
    if memo is None or not memory_ids:
        return
    wanted = [i for i in memory_ids if (i, exact) not in memo]
    if not wanted:
        return
    k = memo["k"]
    where = "m.tenant_id = %s AND m.bucket_id = %s AND m.embedding IS NOT NULL"
    # The vectors are stored out of line (TOAST, storage EXTERNAL): a CTE of the column holds
    # pointers, and every distance read both vectors from the TOAST table again (25 probes x a
    # 600-row bucket: 180k buffer reads, 130 ms). Cast through real[] (the same float4 values),
    # they are read once each (2k buffer reads, 13 ms; the same neighbours and similarities).
    probes = (
        "SELECT p.id, p.embedding::real[]::vector AS v FROM memories p"
        " WHERE p.id = ANY(%s::uuid[]) AND p.embedding IS NOT NULL"
    )
    if exact:
        sql = f"""
            WITH b AS MATERIALIZED (SELECT m.id, m.embedding::real[]::vector AS v FROM memories m WHERE {where}),
                 q AS MATERIALIZED ({probes})
            SELECT q.id, n.id, n.similarity FROM q CROSS JOIN LATERAL (
                SELECT b.id, 1 - (b.v <=> q.v) AS similarity FROM b WHERE b.id <> q.id ORDER BY b.v <=> q.v LIMIT %s
            ) n
        """
        params = [tenant_id, bucket_id, [str(i) for i in wanted], k]
    else:
        sql = f"""
            WITH q AS MATERIALIZED ({probes})
            SELECT q.id, n.id, n.similarity FROM q CROSS JOIN LATERAL (
                SELECT m.id, 1 - (m.embedding <=> q.v) AS similarity FROM memories m
                WHERE {where} AND m.id <> q.id ORDER BY {half_precision_distance("m.embedding", "q.v")} LIMIT %s
            ) n
        """
        params = [[str(i) for i in wanted], tenant_id, bucket_id, k]
    found: dict = {i: [] for i in wanted}
    with transaction.atomic(), connection.cursor() as cur:
        if not exact:
            _walk_settings(cur, k)
        cur.execute(sql, params)
        for probe, other, similarity in cur.fetchall():
            if similarity is not None:
                found.setdefault(probe, []).append(Similar(id=other, similarity=float(similarity)))
    for memory_id, neighbours in found.items():
        neighbours.sort(key=lambda n: n.similarity, reverse=True)  # as _nearest's (stable: same order)
        memo[(memory_id, exact)] = neighbours


def nearest(
    *, tenant_id, bucket_id, memory_id, k: int, min_similarity: float = -1.0, exact: bool | None = None
) -> list[Similar]:
    """Up to ``k`` memories of the bucket closest to ``memory_id`` (itself excluded),
    most similar first, with cosine similarity >= ``min_similarity``."""
    memo = _shared.get()
    if memo is not None and k <= memo["k"]:
        key = (memory_id, exact)
        if key not in memo:
            memo[key] = _nearest(
                tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=memo["k"], exact=exact
            )
        return [n for n in memo[key] if n.similarity >= min_similarity][:k]
    return _nearest(
        tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=k, min_similarity=min_similarity, exact=exact
    )


def _nearest(
    *, tenant_id, bucket_id, memory_id, k: int, min_similarity: float = -1.0, exact: bool | None = None
) -> list[Similar]:
    if exact is None:
        exact = embedded_count(tenant_id=tenant_id, bucket_id=bucket_id) < EXACT_SCAN_BELOW
    probe = "(SELECT embedding FROM memories WHERE id = %s)"
    where = "m.tenant_id = %s AND m.bucket_id = %s AND m.embedding IS NOT NULL AND m.id <> %s"
    if exact:
        sql = f"""
            WITH b AS MATERIALIZED (SELECT m.id, m.embedding AS v FROM memories m WHERE {where}),
                 q AS (SELECT {probe} AS v)
            SELECT b.id, 1 - (b.v <=> q.v) AS similarity FROM b, q
            WHERE q.v IS NOT NULL ORDER BY b.v <=> q.v LIMIT %s
        """
        params = [tenant_id, bucket_id, memory_id, memory_id, k]
    else:
        sql = f"""
            SELECT m.id, 1 - (m.embedding <=> {probe}) AS similarity FROM memories m
            WHERE {where} ORDER BY {half_precision_distance("m.embedding", probe)} LIMIT %s
        """
        params = [memory_id, tenant_id, bucket_id, memory_id, memory_id, k]
    with transaction.atomic(), connection.cursor() as cur:
        if not exact:
            _walk_settings(cur, k)
        cur.execute(sql, params)
        rows = cur.fetchall()
    found = [Similar(id=row[0], similarity=float(row[1])) for row in rows if row[1] is not None]
    found.sort(key=lambda n: n.similarity, reverse=True)
    return [n for n in found if n.similarity >= min_similarity]
