"""The bucket held while memories are written into it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection

from engram_site.exceptions import NotFound
from tenants.models import Bucket


def hold_bucket(bucket: Bucket) -> str:
    """Take the bucket's FOR KEY SHARE lock (the one the foreign key check takes) before
    the insert touches the unique index, not after it; returns the bucket's embedding
    model, which cannot change until this transaction ends (a switch's swap locks the
    bucket FOR UPDATE), so vectors written in it are of that model.

    A bucket merge locks both buckets FOR UPDATE and then moves rows into the target.
    Were the lock taken by the foreign key check at the end of the INSERT, a write
    into the target would already hold an index entry that the merge's move waits
    for while it waits for the merge's bucket lock: a deadlock, and one of the two
    fails. Taken first, a write waits for the merge (or the merge for the write) and
    both succeed. A bucket deleted (or merged away) meanwhile is "not found".
    """
    with connection.cursor() as cur:
        cur.execute(f"SELECT embedding_model FROM {Bucket._meta.db_table} WHERE id = %s FOR KEY SHARE", [bucket.pk])
        row = cur.fetchone()
        if row is None:
            raise NotFound("Bucket not found.")
    return row[0]


def bucket_models_held(bucket_ids: Iterable[uuid.UUID], *, skip_locked: bool = False) -> dict[uuid.UUID, str]:
    """The embedding model of each bucket, held FOR KEY SHARE (as :func:`hold_bucket`) until
    the transaction ends, in id order (two batches lock shared buckets in the same order).
    ``skip_locked``: a bucket locked FOR UPDATE (a merge, a switch's swap) is left out."""
    skip = " SKIP LOCKED" if skip_locked else ""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT id, embedding_model FROM {Bucket._meta.db_table} WHERE id = ANY(%s) "
            f"ORDER BY id FOR KEY SHARE{skip}",
            [sorted(bucket_ids)],
        )
        return dict(cur.fetchall())
