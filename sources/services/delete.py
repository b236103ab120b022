"""Deleting a source with the memories it alone created."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction

from audit.services import Actor, audit_record
from memories.models import Memory
from memories.services import memory_delete
from sources.models import Source, SourceChunkMemory
from sources.services.locks import bucket_lock
from tenants.models import Tenant

logger = logging.getLogger(__name__)


@dataclass
class DeleteReport:
    source_id: str
    deleted_memories: list[str] = field(default_factory=list)
    kept_memories: int = 0  # created by this source but also stated by another: kept, now theirs


@transaction.atomic
def source_delete(*, source: Source, actor: Actor | None = None) -> DeleteReport:
    """Delete a source, its chunks, its links, and the memories it created — in one transaction.

    Memories that existed before (the source's statements deduplicated onto them) stay. A
    memory this source created that another source also states stays too, and becomes that
    source's: deleting the other source later deletes it. Each memory goes through
    :func:`memories.services.memory_delete`, so the graph follows as for any delete.
    """
    bucket_lock(source.bucket_id, shared=False)
    Source.objects.select_for_update().filter(pk=source.pk).values_list("pk").first()  # waits for a batch in flight
    report = DeleteReport(source_id=str(source.pk))
    created = set(
        SourceChunkMemory.objects.filter(source_id=source.pk, created=True).values_list("memory_id", flat=True)
    )
    shared = set(
        SourceChunkMemory.objects.filter(memory_id__in=created)
        .exclude(source_id=source.pk)
        .values_list("memory_id", flat=True)
    )
    if shared:
        SourceChunkMemory.objects.filter(memory_id__in=shared).exclude(source_id=source.pk).update(created=True)
        report.kept_memories = len(shared)
    for memory in Memory.objects.filter(pk__in=created - shared).only("id", "bucket_id").order_by("created_at"):
        memory_delete(memory=memory)
        report.deleted_memories.append(str(memory.pk))
    Source.objects.filter(pk=source.pk).delete()  # chunks and links go with it (ON DELETE CASCADE)
    if actor is not None:
        audit_record(
            actor=actor, action="source.delete", tenant=Tenant(pk=source.tenant_id), object_type="source",
            object_ids=[source.pk],
            details={"bucket_id": str(source.bucket_id), "memories_deleted": report.deleted_memories[:100],
                     "memories_kept": report.kept_memories},
        )  # fmt: skip
    logger.info("source %s deleted with %d memories", source.pk, len(report.deleted_memories))
    return report
