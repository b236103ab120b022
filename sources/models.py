"""Sources: documents and conversations, their chunks, and which memories each chunk produced.

A source keeps what was submitted (the text or the messages) for provenance and so that
processing can resume; its chunks are the units of work (one heading-bounded slice of a
document, or one message of a conversation) and of provenance. Retrieval never reads
these tables: memories are self-contained, and these rows only say where they came from.
"""

from __future__ import annotations

from django.contrib.postgres.functions import RandomUUID
from django.db import models
from django.db.models import Exists, OuterRef, Q

from engram_site.db import TransactionNow
from engram_site.querysets import BucketScopedQuerySet
from engram_site.scoping import scoped_manager
from memories.models import Memory
from tenants.models import Bucket, Tenant


class SourceKind(models.TextChoices):
    DOCUMENT = "document", "document"
    CONVERSATION = "conversation", "conversation"


class SourceStatus(models.TextChoices):
    PENDING = "pending", "pending"
    PROCESSING = "processing", "processing"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class ChunkStatus(models.TextChoices):
    PENDING = "pending", "pending"
    DONE = "done", "done"
    FAILED = "failed", "failed"


# Sources the sweep may have to pick up (lost hint, dead worker, retryable failure).
UNFINISHED = Q(status__in=[SourceStatus.PENDING, SourceStatus.PROCESSING, SourceStatus.FAILED])


class SourceQuerySet(BucketScopedQuerySet):
    pass


class Source(models.Model):
    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    # Tenant and bucket cascade in the database (migration 0001), like memories: deleting
    # a bucket removes its sources, chunks and links in the same statement.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=SourceKind.choices)
    title = models.TextField(blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    # SHA-256 of the canonical JSON of what shapes the memories (kind, title, text or
    # messages, speaker and ids; not metadata): an identical re-submission finds this row.
    content_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=SourceStatus.choices, default=SourceStatus.PENDING)
    chunks_total = models.IntegerField(default=0)
    chunks_done = models.IntegerField(default=0)
    memories_created = models.IntegerField(default=0)
    memories_deduplicated = models.IntegerField(default=0)
    # Sentences the distiller left out (greetings, thanks, filler, empty questions).
    dropped = models.IntegerField(default=0)
    error = models.TextField(blank=True, default="")
    # Failed processing attempts since the last success or re-submission (the sweep gives up at a limit).
    attempts = models.IntegerField(default=0)
    # What was submitted, kept for provenance and so processing can resume from the database alone.
    text = models.TextField(null=True, blank=True)  # document
    messages = models.JSONField(null=True, blank=True)  # conversation, as validated
    # Conversation-level options (speaker, agent_id, run_id, source_actor_id) and document options.
    options = models.JSONField(default=dict, blank=True)
    # Which distiller produced the memories ("rules-v1", "llm:<model>", or both when it fell back).
    distilled_by = models.TextField(blank=True, default="")
    # Audit: the token prefix that submitted the source.
    submitted_by = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written after every chunk: a processing source whose heartbeat stops is picked up by the sweep.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = SourceQuerySet.as_manager()

    class Meta:
        db_table = "sources"
        indexes = [
            # The cascade from buckets (DELETE ... WHERE bucket_id = ?); tenant deletes use the next one.
            models.Index(fields=["bucket"], name="sources_bucket"),
            # The list endpoint: WHERE tenant_id = ? AND bucket_id = ? ORDER BY created_at DESC, id DESC.
            models.Index(fields=["tenant", "bucket", "-created_at", "-id"], name="sources_bucket_created"),
            # The sweep: unfinished sources by last sign of life (a small partial index).
            models.Index(fields=["status", "heartbeat_at"], name="sources_unfinished", condition=UNFINISHED),
        ]
        constraints = [
            # Re-submitting an identical source returns the existing one: INSERT ... ON CONFLICT
            # relies on this index, so two concurrent identical submissions make one source.
            models.UniqueConstraint(fields=["tenant", "bucket", "kind", "content_hash"], name="sources_content_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.title or self.pk}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """An agent-limited token sees a source whose agent (``options.agent_id``, which its
        memories carry) it may read and none of whose messages names another agent."""
        own = Q(options__agent_id__in=list(agents.agent_ids))
        if agents.include_shared:
            own |= Q(options__agent_id=None) | Q(options__agent_id__isnull=True)
        foreign = SourceChunk.objects.filter(source_id=OuterRef("pk"), agent_id__isnull=False).exclude(
            agent_id__in=list(agents.agent_ids)
        )
        return own & ~Q(Exists(foreign))

    @property
    def progress(self) -> float:
        return 1.0 if not self.chunks_total else round(self.chunks_done / self.chunks_total, 4)


class SourceChunk(models.Model):
    """One unit of a source: a heading-bounded slice of a document, or one message."""

    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    # Reached only through its source (which is tenant-scoped), and deleted with it by the
    # database (ON DELETE CASCADE, migration 0001), as are the source's links.
    source = models.ForeignKey(
        Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="chunks"
    )
    ordinal = models.IntegerField()
    text = models.TextField()
    # Documents: the heading path ("Travel > Lisbon"); conversations: empty.
    heading = models.TextField(blank=True, default="")
    # Conversations: the message's role, speaker name, time and ids.
    role = models.CharField(max_length=20, null=True, blank=True)
    name = models.TextField(null=True, blank=True)
    # The time given to the memories of this chunk (the message's timestamp, or derived).
    timestamp = models.DateTimeField(null=True, blank=True)
    agent_id = models.TextField(null=True, blank=True)
    run_id = models.TextField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=ChunkStatus.choices, default=ChunkStatus.PENDING)
    error = models.TextField(blank=True, default="")
    statements = models.IntegerField(default=0)
    dropped = models.IntegerField(default=0)
    processed_at = models.DateTimeField(null=True, blank=True)

    objects = scoped_manager(tenant="source__tenant_id")

    class Meta:
        db_table = "source_chunks"
        constraints = [
            # Chunks in order, and "the first unfinished chunk of a source": WHERE source_id = ? ORDER BY ordinal.
            models.UniqueConstraint(fields=["source", "ordinal"], name="source_chunks_ordinal_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}#{self.ordinal}"


class SourceChunkMemory(models.Model):
    """A memory drawn from a chunk. ``created``: this source inserted the memory (False: the
    statement deduplicated onto a memory that already existed). Deleting a source deletes
    the memories it created and no other source still states."""

    source = models.ForeignKey(
        Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    chunk = models.ForeignKey(
        SourceChunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="links"
    )
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    created = models.BooleanField()
    # Order of the statement within its chunk.
    position = models.IntegerField(default=0)

    objects = scoped_manager(tenant="source__tenant_id")

    class Meta:
        db_table = "source_chunk_memories"
        constraints = [
            # A chunk states a memory once; also serves "memories of these chunks" (WHERE chunk_id = ANY(?)).
            models.UniqueConstraint(fields=["chunk", "memory"], name="source_chunk_memories_unique"),
        ]
        indexes = [
            # A source's memories (detail, delete): WHERE source_id = ?.
            models.Index(fields=["source", "memory"], name="source_chunk_memories_source"),
            # Provenance of a memory, the cascade from memories, and "does another source state it?".
            models.Index(fields=["memory"], name="source_chunk_memories_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.chunk_id} -> {self.memory_id}"


class TrashedChunkLink(models.Model):
    """A chunk's link to a memory that was deleted and sits in the trash (``memories_deleted``),
    kept so that restoring the memory gives it back its source and chunk. The link's row in
    ``source_chunk_memories`` goes with the memory's (ON DELETE CASCADE); this copy goes with
    the trash row (purge, erasure) or with its source or chunk (ON DELETE CASCADE each)."""

    source = models.ForeignKey(
        Source, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    chunk = models.ForeignKey(
        SourceChunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # The deleted memory's id (memories_deleted.id; the foreign key is declared in SQL).
    memory_id = models.UUIDField()
    created = models.BooleanField()
    position = models.IntegerField(default=0)

    objects = scoped_manager(tenant="source__tenant_id")

    class Meta:
        db_table = "source_chunk_links_trashed"
        constraints = [
            models.UniqueConstraint(fields=["chunk", "memory_id"], name="source_chunk_links_trashed_unique"),
        ]
        indexes = [models.Index(fields=["memory_id"], name="source_chunk_links_trashed_mem")]

    def __str__(self) -> str:
        return f"{self.chunk_id} -> {self.memory_id} (trashed)"
