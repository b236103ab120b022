"""The memories a derived table (key documents, passages) has not caught up with: one query
shape for every backfill, sweep and count of them (memories/services/keys.py, passages.py)."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import connection

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
