"""The memories a derived table (key documents, passages) has not caught up with: one query
shape for every backfill, sweep and count of them (memories/services/keys.py, passages.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime

from django.db import connection

from engram_site import activity
from memories.models import Memory
from tenants.models import Bucket


def out_of_date(
    *,
    joins: str,
    condition: str,
    condition_params: list,
    memory_ids: list | None,
    bucket: Bucket | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int | None,
    count: bool = False,
):
    """``(id, created_at)`` of memories ``m`` (bucket ``b``, with ``joins``) where ``condition``
    holds, oldest first from ``after`` (the cursor of a resumable walk), at most ``limit``; or
    their number with ``count``. Narrowed to ``memory_ids`` and to ``bucket`` when given."""
    where = [condition]
    params: list = list(condition_params)
    if memory_ids is not None:
        where.append("m.id = ANY(%s::uuid[])")
        params.append([str(i) for i in memory_ids])
    if bucket is not None:
        where.append("m.tenant_id = %s AND m.bucket_id = %s")
        params += [bucket.tenant_id, bucket.pk]
    if after is not None:
        where.append("(m.created_at, m.id) > (%s, %s)")
        params += list(after)
    select = "count(*)" if count else "m.id, m.created_at"
    tail = "" if count else "ORDER BY m.created_at, m.id LIMIT %s"
    sql = f"""
        SELECT {select} FROM memories m
        JOIN buckets b ON b.id = m.bucket_id
        {joins}
        WHERE {" AND ".join(where)} {tail}
    """
    with connection.cursor() as cur:
        cur.execute(sql, params if count else [*params, limit])
        return cur.fetchone()[0] if count else cur.fetchall()


def batches(
    pending: Callable[[tuple[datetime, uuid.UUID] | None, int], list],
    *,
    batch_size: int,
    limit: int | None,
    scanned: Callable[[], int],
) -> Iterator[list]:
    """The batches of a resumable walk, oldest first: ``pending(after, size)`` (:func:`out_of_date`
    rows after the cursor) until it returns none or ``scanned()`` reaches ``limit``. Each batch waits
    for a pause in the requests first (engram_site/activity.py)."""
    after = None
    while limit is None or scanned() < limit:
        activity.pause()
        size = batch_size if limit is None else min(batch_size, limit - scanned())
        rows = pending(after, size)
        if not rows:
            return
        after = (rows[-1][1], rows[-1][0])
        yield rows


def memories_of(ids: list) -> list[Memory]:
    """The memories of ``ids``, oldest first, without their vectors (what a derived table's
    builder reads of them)."""
    return list(Memory.objects.filter(pk__in=ids).defer("embedding", "context_embedding").order_by("created_at", "id"))
