"""Sources in a bucket merge (memories.services.buckets.bucket_merge, through sources/participants.py)."""

from __future__ import annotations

from sources.models import Source
from tenants.models import Bucket


def sources_merge_plan(*, source: Bucket, target: Bucket) -> dict:
    """How many documents and conversations ``source`` holds, and how many of them the target
    already has (same kind and content hash)."""
    mine = Source.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk)
    theirs = Source.objects.filter(tenant_id=target.tenant_id, bucket_id=target.pk)
    same = mine.filter(content_hash__in=theirs.values("content_hash")).values_list("kind", "content_hash")
    keys = set(theirs.values_list("kind", "content_hash"))
    return {"sources": mine.count(), "sources_to_dedup": sum(1 for key in same if key in keys)}


def sources_move_bucket(*, source: Bucket, target: Bucket) -> None:
    """Documents and conversations follow their memories; one identical to a source the
    target already has (same kind and content hash, unique per bucket) is dropped with its
    chunks (the memories it produced stay, in the target)."""
    theirs = Source.objects.filter(tenant_id=target.tenant_id, bucket_id=target.pk)
    keys = set(theirs.values_list("kind", "content_hash"))
    mine = Source.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk)
    dropped = [pk for pk, kind, digest in mine.values_list("pk", "kind", "content_hash") if (kind, digest) in keys]
    if dropped:
        # Chunks and their memory links go with it (ON DELETE CASCADE in the database).
        Source.objects.filter(pk__in=dropped).delete()
    mine.update(bucket_id=target.pk)
