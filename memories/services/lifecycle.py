"""Deleting, restoring and purging memories (docs/API.md, "A memory's life").

A delete moves the row into ``memories_deleted``: every stored column as JSON
(``to_jsonb`` of the row, less the generated search vectors), vectors included. Searches,
lists and the graph lose it at once — the row is gone from ``memories``, and what the graph
hung on it goes with it — without a "deleted" flag every query would have to test. Restoring
puts the same columns back under the same id, and the graph extracts it again like a new
memory. The purge job removes deleted memories once their bucket's ``retention_days`` have
passed, and memories that expired longer ago than that, with their history.

Writing the text of a deleted memory again makes a new memory (the deleted one no longer
holds the bucket's dedup slot); restoring the deleted one then answers 409
``duplicate_content`` naming the live memory.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site.exceptions import Conflict, NotFound
from memories import quotas as memory_quotas
from memories import signals
from memories.models import DeletedMemory, Memory, MemoryVersion, VersionKind
from memories.participants import Participant, run
from memories.services.history import version_record
from memories.services.ingest.locks import hold_bucket
from memories.services.signalling import send_safely
from memories.services.stats_cache import note_writes

logger = logging.getLogger(__name__)

# The columns a deleted memory keeps and gets back: every stored one (the generated search
# vectors are recomputed by the database).
RESTORED_COLUMNS = [
    f.column for f in Memory._meta.concrete_fields if not isinstance(f, models.GeneratedField)
]  # fmt: skip
SNAPSHOT_SQL = "to_jsonb(m) - 'lemmatized_tsv' - 'context_tsv'"

# Rows the purge job removes per statement.
PURGE_BATCH = 500


class DeleteReason:
    DELETED = "deleted"  # by a client or an operator
    MERGED = "merged"  # absorbed by another memory


def memories_trash(*, ids: Iterable[uuid.UUID], reason: str) -> None:
    """Copy the rows of ``ids`` into ``memories_deleted`` (in the caller's transaction, before
    the rows are deleted). The caller deletes the rows. A memory id is in ``memories`` or in
    ``memories_deleted``, never both: restoring deletes the copy."""
    ids = list(ids)
    if not ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO memories_deleted (id, tenant_id, bucket_id, deleted_at, reason, content, row)
            SELECT m.id, m.tenant_id, m.bucket_id, now(), %s, m.content, {SNAPSHOT_SQL}
            FROM memories m WHERE m.id = ANY(%s)
            """,
            [reason, ids],
        )


def memory_remove(*, memory_id: uuid.UUID, bucket_id: uuid.UUID) -> None:
    """Delete one memories row the way the apps above follow it: their participants'
    ``memory_delete`` first, while what hangs on the row exists (the graph notes which
    timelines its edges were on, and reopens them after the commit). The caller holds the
    row's lock."""
    run(Participant.memory_delete, bucket_id=bucket_id, memory_id=memory_id)
    Memory.objects.filter(pk=memory_id).delete()
    note_writes(bucket_id, 1)


@transaction.atomic
def memory_restore(*, deleted: DeletedMemory, actor: Actor | None = None) -> Memory:
    """Put a deleted memory back, under its id, with every column it had. A memory of the same
    text written since raises Conflict (``duplicate_content``, with its id). Audited as
    ``memory.restore``; the graph extracts it again after the commit."""
    deleted = DeletedMemory.objects.select_for_update().filter(pk=deleted.pk).select_related("bucket").first()
    if deleted is None:
        raise NotFound("No deleted memory with this id: never deleted, restored already, or purged.")
    hold_bucket(deleted.bucket)
    columns = ", ".join(RESTORED_COLUMNS)
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO memories ({columns}) SELECT {', '.join('r.' + c for c in RESTORED_COLUMNS)} "
                "FROM memories_deleted d, jsonb_populate_record(NULL::memories, d.row) r WHERE d.id = %s",
                [deleted.pk],
            )
    except IntegrityError:
        text_hash = (deleted.row or {}).get("text_hash")
        other = (
            Memory.objects.filter(tenant_id=deleted.tenant_id, bucket_id=deleted.bucket_id, text_hash=text_hash)
            .values_list("pk", flat=True)
            .first()
        )
        if other is None:
            raise
        raise Conflict(
            "A memory with this content was written since; restoring would duplicate it.",
            code="duplicate_content",
            extra={"existing_id": str(other)},
        ) from None
    memory_id, deleted_at, reason = deleted.pk, deleted.deleted_at, deleted.reason
    memory = Memory.objects.select_related("bucket").get(pk=memory_id)
    # While the trash row exists: what the apps above kept of the memory hangs on it.
    run(Participant.memory_restore, memory=memory)
    deleted.delete()
    version_record(
        memory=memory, kind=VersionKind.RESTORED, previous={}, actor=actor,
        details={"deleted_at": deleted_at, "reason": reason},
    )  # fmt: skip
    if actor is not None:
        audit_record(
            actor=actor, action="memory.restore", tenant=memory.bucket.tenant, object_type="memory",
            object_ids=[memory.pk], details={"bucket_id": str(memory.bucket_id)},
        )  # fmt: skip
    bucket_id, tenant_id = memory.bucket_id, memory.tenant_id
    note_writes(bucket_id, 1)
    # A live memory again: counted towards max_memories like a new one.
    transaction.on_commit(lambda: memory_quotas.note_written(tenant_id=tenant_id, count=1))
    transaction.on_commit(
        lambda: send_safely(signals.memories_created, bucket_id=bucket_id, memory_ids=[memory_id], restored=True)
    )
    return memory


@dataclass(frozen=True)
class PurgeReport:
    deleted: int = 0  # deleted memories past their bucket's retention window
    expired: int = 0  # memories expired longer ago than the window

    def as_dict(self) -> dict:
        return {"deleted": self.deleted, "expired": self.expired}


def _purge_deleted(now: datetime) -> int:
    """Remove deleted memories past their bucket's window, with their history, a batch at a time."""
    purged = 0
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                """
                DELETE FROM memories_deleted WHERE id IN (
                    SELECT d.id FROM memories_deleted d JOIN buckets b ON b.id = d.bucket_id
                    WHERE d.deleted_at < %s - make_interval(days => b.retention_days)
                    ORDER BY d.deleted_at LIMIT %s FOR UPDATE OF d SKIP LOCKED
                ) RETURNING id
                """,
                [now, PURGE_BATCH],
            )
            ids = [row[0] for row in cur.fetchall()]
            MemoryVersion.objects.filter(memory_id__in=ids).delete()
        purged += len(ids)
        if len(ids) < PURGE_BATCH:
            return purged


def _purge_expired(now: datetime) -> int:
    """Delete memories expired longer ago than their bucket's window, with their history. The
    graph forgets them as it does any deleted memory (memory_remove: the participants'
    ``memory_delete``)."""
    purged = 0
    while True:
        with connection.cursor() as cur:
            # idx_memories_expires finds the few expiring rows.
            cur.execute(
                """
                SELECT m.id, m.bucket_id FROM memories m JOIN buckets b ON b.id = m.bucket_id
                WHERE m.expires_at IS NOT NULL AND m.expires_at < %s - make_interval(days => b.retention_days)
                ORDER BY m.expires_at LIMIT %s
                """,
                [now, PURGE_BATCH],
            )
            batch = cur.fetchall()
        for memory_id, bucket_id in batch:
            purged += _purge_one(memory_id, bucket_id, now)
        if len(batch) < PURGE_BATCH:
            return purged


@transaction.atomic
def _purge_one(memory_id: uuid.UUID, bucket_id: uuid.UUID, now: datetime) -> int:
    # Locked and tested again: an edit may have moved its expiry since the batch was read.
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT 1 FROM memories m JOIN buckets b ON b.id = m.bucket_id
            WHERE m.id = %s AND m.expires_at < %s - make_interval(days => b.retention_days)
            FOR UPDATE OF m SKIP LOCKED
            """,
            [memory_id, now],
        )
        if cur.fetchone() is None:
            return 0
    memory_remove(memory_id=memory_id, bucket_id=bucket_id)
    MemoryVersion.objects.filter(memory_id=memory_id).delete()
    return 1


def memories_purge(*, now: datetime | None = None, recorder=None) -> PurgeReport:
    """The purge job: deleted memories and expired ones, once past their bucket's retention
    window, with their history. Batched, resumable, safe to run twice at once."""
    now = now or timezone.now()
    report = PurgeReport(deleted=_purge_deleted(now), expired=_purge_expired(now))
    if recorder is not None:
        recorder.add(**report.as_dict())
    if report.deleted or report.expired:
        logger.info("purged %d deleted and %d expired memories", report.deleted, report.expired)
    return report
