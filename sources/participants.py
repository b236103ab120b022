"""What the sources app does to its own rows (documents, conversations, their chunks' links to
memories) when buckets and memories change (memories.participants; registered in
SourcesConfig.ready). Every step runs inside the operation's transaction."""

from __future__ import annotations

from django.db import connection

from memories.models import DeletedMemory
from memories.participants import Participant
from sources.models import SourceChunkMemory, TrashedChunkLink
from sources.services.buckets import sources_merge_plan, sources_move_bucket
from sources.services.erasure import sources_erase, sources_erasure_lock


class SourcesParticipant(Participant):
    name = "sources"

    def merge_plan(self, *, source, target):
        return sources_merge_plan(source=source, target=target)

    def merge_after(self, *, source, target, oldest_moved, memory_ids):
        sources_move_bucket(source=source, target=target)

    def memories_absorb(self, *, mapping):
        # The chunks that stated an absorbed memory now state its survivor (once: a chunk that
        # stated both keeps one link).
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

    def memory_delete(self, *, bucket_id, memory_id):
        # The memory's links go with its row (ON DELETE CASCADE). When it goes to the trash, a
        # copy is kept, so that a restore gives the memory its source and chunk back.
        links, trashed, trash = (
            SourceChunkMemory._meta.db_table, TrashedChunkLink._meta.db_table, DeletedMemory._meta.db_table
        )  # fmt: skip
        with connection.cursor() as cur:
            cur.execute(
                f"""
                INSERT INTO {trashed} (source_id, chunk_id, memory_id, created, position)
                SELECT l.source_id, l.chunk_id, l.memory_id, l.created, l.position FROM {links} l
                WHERE l.memory_id = %s AND EXISTS (SELECT 1 FROM {trash} d WHERE d.id = l.memory_id)
                ON CONFLICT DO NOTHING
                """,
                [memory_id],
            )

    def memory_restore(self, *, memory):
        links, trashed = SourceChunkMemory._meta.db_table, TrashedChunkLink._meta.db_table
        with connection.cursor() as cur:
            cur.execute(
                f"""
                WITH kept AS (DELETE FROM {trashed} WHERE memory_id = %s RETURNING *)
                INSERT INTO {links} (source_id, chunk_id, memory_id, created, position)
                SELECT source_id, chunk_id, memory_id, created, position FROM kept
                ON CONFLICT DO NOTHING
                """,
                [memory.pk],
            )

    def erasure_lock(self, *, tenant, bucket_id, bucket_ids, fields):
        sources_erasure_lock(tenant=tenant, bucket_id=bucket_id, bucket_ids=bucket_ids, fields=fields)

    def erase(self, *, tenant, bucket_id, memory_ids, fields):
        return sources_erase(tenant=tenant, bucket_id=bucket_id, memory_ids=memory_ids, fields=fields)
