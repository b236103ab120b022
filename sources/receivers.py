"""How the sources app follows the memories table (connected in SourcesConfig.ready)."""

from __future__ import annotations

from django.db import connection
from django.dispatch import receiver

from memories import signals
from sources.models import SourceChunkMemory
from sources.services import sources_erase, sources_erasure_lock, sources_merge_plan, sources_move_bucket


@receiver(signals.memories_absorbing)
def move_provenance_to_survivors(sender, *, mapping, **kwargs):
    """The chunks that stated an absorbed memory now state its survivor. Inside the merge's
    transaction: an error here rolls the merge back."""
    table = SourceChunkMemory._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f"""
            DELETE FROM {table} l USING unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE l.memory_id = v.absorbed
              AND EXISTS (SELECT 1 FROM {table} o WHERE o.chunk_id = l.chunk_id AND o.memory_id = v.survivor)
            """,
            [list(mapping), list(mapping.values())],
        )
        cur.execute(
            f"""
            UPDATE {table} l SET memory_id = v.survivor FROM unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE l.memory_id = v.absorbed
            """,
            [list(mapping), list(mapping.values())],
        )


@receiver(signals.bucket_merge_planning)
def plan_sources_merge(sender, *, source, target, **kwargs) -> dict:
    return sources_merge_plan(source=source, target=target)


@receiver(signals.bucket_merged)
def move_sources(sender, *, source, target, **kwargs):
    # Inside the merge's transaction: an error here rolls the merge back.
    sources_move_bucket(source=source, target=target)


@receiver(signals.erasure_locking)
def lock_sources_for_erasure(sender, *, tenant, bucket_id, bucket_ids, fields, **kwargs):
    sources_erasure_lock(tenant=tenant, bucket_id=bucket_id, bucket_ids=bucket_ids, fields=fields)


@receiver(signals.memories_erasing)
def erase_sources(sender, *, tenant, bucket_id, memory_ids, fields, **kwargs) -> dict:
    # Inside the erasure's transaction: an error here rolls the erasure back.
    return sources_erase(tenant=tenant, bucket_id=bucket_id, memory_ids=memory_ids, fields=fields)
