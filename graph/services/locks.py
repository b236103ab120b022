"""The bucket's graph lock: one writer of a bucket's graph at a time (extraction, timelines,
corrections, erasure, merges)."""

from __future__ import annotations

from django.db import connection

from tenants.models import Bucket


def bucket_lock(bucket: Bucket) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('graph:' || %s))", [str(bucket.pk)])
