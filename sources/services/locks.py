"""The advisory lock that keeps a bucket's chunk processing and its source deletions apart."""

from __future__ import annotations

from django.db import connection

from engram_site.locks import lock_key


def bucket_lock(bucket_id, *, shared: bool) -> None:
    """Chunk processing (shared) and source deletion (exclusive) of one bucket exclude each other,
    so a delete never decides "no other source states this memory" while a chunk is linking it."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cur:
        cur.execute(f"SELECT {function}(%s)", [lock_key(f"sources:{bucket_id}")])
