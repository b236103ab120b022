"""Edits and deletes of single memories: the update path of the write gateway.

Each change is audited in its own transaction (``audit.services.audit_record``), so a
change never commits without its audit event, nor an event without its change.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from audit.services import Actor, audit_record, audit_record_per_tenant
from engram_site.exceptions import Conflict, NotFound
from memories import signals
from memories.links import RESERVED_PREFIX
from memories.models import Memory, VersionKind
from memories.services.enrichment_failures import failures_forget
from memories.services.history import version_record
from memories.services.ingest.derived import count_tokens, embed_rows, lemmatize_rows
from memories.services.ingest.locks import hold_bucket
from memories.services.ingest.rows import MemoryInput, Row
from memories.services.keys import keys_forget
from memories.services.lifecycle import DeleteReason, memories_trash, memory_remove
from memories.services.passages import passages_forget
from memories.services.signalling import send_safely
from memories.services.stats_cache import note_writes
from memories.text import text_hash

logger = logging.getLogger(__name__)

# An edit of only these is a reclassification in the memory's history.
RECLASSIFYING = {"classified_scope", "classified_topic"}

EDITABLE_FIELDS = (
    "content", "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags", "metadata",
    "created_at", "classified_scope", "classified_topic", "importance", "expires_at",
)  # fmt: skip


@transaction.atomic
def memory_update(*, memory: Memory, actor: Actor | None = None, **changes) -> Memory:
    """Change a memory. New content recomputes its hash, lemmas, token count and
    embeddings; content that collides with another memory of the bucket raises
    Conflict (409). The row is locked for the edit so concurrent edits serialise
    instead of overwriting each other's derived columns. With an ``actor`` the edit
    is audited (``memory.update``, the changed field names) in the same transaction."""
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    # A new content is embedded by the bucket's model, held (FOR KEY SHARE) until this edit
    # commits, so a switch's swap cannot slip between the embedding and the save. Taken
    # before the row's lock, in the order the swap takes them (bucket, then rows).
    model = hold_bucket(memory.bucket) if "content" in changes else None
    locked = Memory.objects.select_for_update().filter(pk=memory.pk).first()
    if locked is None:  # deleted (or absorbed by a merge) since the caller read it
        raise NotFound("Memory not found.")
    memory = locked
    if "metadata" in changes:
        # Keys Engram maintains (links) survive a client replacing its metadata.
        reserved = {k: v for k, v in (memory.metadata or {}).items() if k.startswith(RESERVED_PREFIX)}
        changes["metadata"] = {**(changes["metadata"] or {}), **reserved} if reserved else changes["metadata"]
    previous = {name: getattr(memory, name) for name, value in changes.items() if getattr(memory, name) != value}
    for name, value in changes.items():
        setattr(memory, name, value)
    update_fields = list(changes)
    if "content" in changes or "created_at" in changes:
        row = Row(
            item=MemoryInput(content=memory.content, attributed_to=memory.attributed_to),
            id=memory.pk,
            text_hash=text_hash(memory.content),
            created_at=memory.created_at,
            context_text=memory.context_text,
        )
        lemmatize_rows([row])
        memory.text_lemmatized = row.text_lemmatized
        memory.context_lemmatized = row.context_lemmatized if memory.context_text else None
        update_fields += ["text_lemmatized", "context_lemmatized"]
        if "content" in changes:
            count_tokens([row])
            embed_rows([row], model=model)
            memory.embedding_model = model
            memory.text_hash = row.text_hash
            memory.token_count = row.token_count
            memory.embedding = row.embedding
            memory.context_embedding = row.context_embedding
            update_fields += ["text_hash", "token_count", "embedding", "context_embedding", "embedding_model"]
    try:
        with transaction.atomic():
            memory.save(update_fields=sorted(set(update_fields)))
    except IntegrityError:
        other = (
            Memory.objects.for_tenant(memory.tenant)
            .filter(bucket_id=memory.bucket_id, text_hash=memory.text_hash)
            .exclude(pk=memory.pk)
            .values_list("pk", flat=True)
            .first()
        )
        raise Conflict(
            "Another memory in this bucket already has this content.",
            code="duplicate_content",
            extra={"existing_id": str(other) if other else None},
        ) from None
    memory.refresh_from_db()
    if "content" in changes:
        # The text a step failed on is gone: the steps start afresh (a new failure is recorded anew).
        failures_forget(memory_ids=[memory.pk])
        # Its passages are spans of the old text: built again (if it is still long) by the next pass.
        passages_forget(memory_ids=[memory.pk])
    if "content" in changes or "created_at" in changes:
        # Its key said what the old text said, dated from the old time: built again after the commit.
        keys_forget(memory_ids=[memory.pk])
    if previous:
        kind = VersionKind.RECLASSIFIED if set(previous) <= RECLASSIFYING else VersionKind.EDITED
        version_record(memory=memory, kind=kind, previous=previous, actor=actor)
    if actor is not None:
        audit_record(
            actor=actor, action="memory.update", tenant=memory.tenant, object_type="memory",
            object_ids=[memory.pk], details={"fields": sorted(changes)},
        )  # fmt: skip
    note_writes(memory.bucket_id, 1)
    if "content" in changes or "created_at" in changes:
        bucket_id, memory_id = memory.bucket_id, memory.pk
        transaction.on_commit(lambda: send_safely(signals.memory_changed, bucket_id=bucket_id, memory_id=memory_id))
    return memory


@transaction.atomic
def memory_delete(*, memory: Memory, actor: Actor | None = None) -> bool:
    """Delete a memory: it moves to ``memories_deleted``, restorable for its bucket's retention
    window (memories.services.lifecycle); what hangs off it in the database (graph edges,
    mentions) goes, and the graph reopens any fact it had closed. A ``deleted`` version is
    recorded; with an ``actor`` the delete is audited (``memory.delete``), all in one transaction.
    Returns False, changing nothing, when the memory is gone already."""
    if not _delete(memory, actor):
        return False
    if actor is not None:
        audit_record(
            actor=actor, action="memory.delete", tenant=memory.tenant, object_type="memory",
            object_ids=[memory.pk], details={"bucket_id": str(memory.bucket_id)},
        )  # fmt: skip
    return True


def _delete(memory: Memory, actor: Actor | None) -> bool:
    if not Memory.objects.select_for_update().filter(pk=memory.pk).exists():
        return False  # deleted meanwhile
    memories_trash(ids=[memory.pk], reason=DeleteReason.DELETED)
    version_record(memory=memory, kind=VersionKind.DELETED, previous={}, actor=actor)
    memory_remove(memory_id=memory.pk, bucket_id=memory.bucket_id)
    return True


@transaction.atomic
def memories_delete(*, memories: list[Memory], actor: Actor) -> None:
    """Delete several memories (an operator's selection), audited as one ``memory.delete`` event
    per tenant with the first contents, in the same transaction."""
    for memory in memories:
        _delete(memory, actor)
    audit_record_per_tenant(actor=actor, action="memory.delete", object_type="memory", rows=memories, details=_deleted)


def _deleted(memories: list[Memory]) -> dict:
    return {
        "bucket_ids": sorted({str(m.bucket_id) for m in memories}),
        "contents": [m.content[:200] for m in memories[:20]],
    }
