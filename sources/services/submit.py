"""Submitting a document or a conversation: the source and its chunks stored, its processing queued."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site.exceptions import NotFound
from memories.services import constraint_name, hold_bucket
from memories.services.signalling import send_safely
from sources import signals
from sources.chunking import chunk_document
from sources.models import Source, SourceChunk, SourceKind, SourceStatus
from sources.services.inputs import held_options
from tenants.models import AgentRestriction, Bucket, Tenant

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MessageInput:
    role: str
    content: str
    timestamp: datetime | None = None
    agent_id: str | None = None
    run_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class SubmitResult:
    source: Source
    deduplicated: bool


def content_hash(kind: str, payload: dict) -> str:
    """SHA-256 of the canonical JSON of what shapes a source's memories."""
    canonical = json.dumps({"kind": kind, **payload}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# Declared by migration sources 0001 (ON DELETE CASCADE).
_BUCKET_FOREIGN_KEYS = {"sources_bucket_id_fk", "sources_tenant_id_fk"}


def announce_pending(source_id: uuid.UUID) -> None:
    """After the commit, ask for the source's processing (sources/receivers.py queues it)."""
    transaction.on_commit(lambda: send_safely(signals.source_pending, source_id=source_id))


def _submit(
    *,
    bucket: Bucket,
    kind: str,
    title: str,
    hashed: dict,
    metadata: dict | None,
    options: dict,
    chunks: Callable[[Source], list[SourceChunk]],
    text: str | None = None,
    messages: list | None = None,
    submitted_by: str = "",
    actor: Actor | None = None,
) -> SubmitResult:
    digest = content_hash(kind, hashed)
    with transaction.atomic():
        # The bucket's FOR KEY SHARE lock (the foreign key check's) first: a delete or a merge
        # of the bucket waits for this submission, or this submission finds the bucket gone
        # and answers 404 instead of failing the insert's foreign key check.
        hold_bucket(bucket)
        same = Source.objects.for_bucket(bucket).filter(kind=kind, content_hash=digest).defer("text", "messages")
        existing = same.first()
        if existing is None:
            source = Source(
                id=uuid.uuid4(), tenant_id=bucket.tenant_id, bucket=bucket, kind=kind, title=title,
                metadata=metadata or {}, content_hash=digest, status=SourceStatus.PENDING, text=text,
                messages=messages, options=options, submitted_by=submitted_by[:40], heartbeat_at=timezone.now(),
            )  # fmt: skip
            try:
                # The unique index sources_content_unique decides between concurrent identical submissions.
                with transaction.atomic():
                    source.save(force_insert=True)
            except IntegrityError as exc:
                if constraint_name(exc) in _BUCKET_FOREIGN_KEYS:  # the tenant went (it is not locked)
                    raise NotFound("Bucket not found.") from None
                existing = same.first()
                if existing is None:  # pragma: no cover - the winner was deleted in between
                    raise
        if existing is not None:
            if existing.status in (SourceStatus.FAILED, SourceStatus.PENDING):
                # Re-submitting is how a client resumes a failed (or stuck) source.
                Source.objects.filter(pk=existing.pk).update(
                    status=SourceStatus.PENDING, attempts=0, heartbeat_at=timezone.now()
                )
                existing.refresh_from_db(fields=["status", "attempts", "heartbeat_at"])
                announce_pending(existing.pk)
            logger.info("source %s re-submitted (deduplicated) by %s", existing.pk, submitted_by or "?")
            _audit_submit(actor, existing, kind=kind, deduplicated=True)
            return SubmitResult(existing, deduplicated=True)
        rows = chunks(source)
        SourceChunk.objects.bulk_create(rows, batch_size=1000)
        source.chunks_total = len(rows)
        if not rows:  # nothing to distil (cannot happen through the API: text is required)
            source.status, source.finished_at = SourceStatus.DONE, timezone.now()
        source.save(update_fields=["chunks_total", "status", "finished_at"])
        source.refresh_from_db(fields=["created_at"])
        if rows:
            announce_pending(source.pk)
        _audit_submit(actor, source, kind=kind, deduplicated=False)
    logger.info("source %s (%s, %d chunks) submitted by %s", source.pk, kind, len(rows), submitted_by or "?")
    return SubmitResult(source, deduplicated=False)


def _audit_submit(actor: Actor | None, source: Source, *, kind: str, deduplicated: bool) -> None:
    if actor is not None:
        audit_record(
            actor=actor, action="source.submit", tenant=Tenant(pk=source.tenant_id), object_type="source",
            object_ids=[source.pk],
            details={"bucket_id": str(source.bucket_id), "kind": kind, "deduplicated": deduplicated},
        )  # fmt: skip


def source_submit_document(
    *,
    bucket: Bucket,
    title: str,
    text: str,
    metadata: dict | None = None,
    created_at: datetime | None = None,
    attributed_to: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    source_actor_id: str | None = None,
    submitted_by: str = "",
    actor: Actor | None = None,
    held_to: AgentRestriction | None = None,
) -> SubmitResult:
    """Store a document (text or Markdown) and its chunks, and queue its distillation.

    An identical document (same title, text and options; metadata aside) already in the
    bucket is returned instead, with ``deduplicated=True``. ``held_to``: the agents of the
    submitting token, whose reads the distillation keeps to (:func:`~sources.services.inputs.submitter_agents`)."""
    options = {
        "created_at": created_at.isoformat() if created_at else None,
        "attributed_to": attributed_to,
        "agent_id": agent_id,
        "run_id": run_id,
        "source_actor_id": source_actor_id,
    }
    hashed = {"title": title, "text": text, **options}
    options |= held_options(held_to)
    base = created_at or timezone.now()

    def chunks(source: Source) -> list[SourceChunk]:
        # Chunks a millisecond apart, so their memories keep the document's order.
        return [
            SourceChunk(
                source=source, ordinal=i, text=c.text, heading=c.heading, timestamp=base + timedelta(milliseconds=i)
            )
            for i, c in enumerate(chunk_document(text))
        ]

    return _submit(
        bucket=bucket, kind=SourceKind.DOCUMENT, title=title, hashed=hashed,
        metadata=metadata, options=options, chunks=chunks, text=text, submitted_by=submitted_by, actor=actor,
    )  # fmt: skip


def source_submit_conversation(
    *,
    bucket: Bucket,
    messages: list[MessageInput],
    title: str = "",
    metadata: dict | None = None,
    speaker: str | None = None,
    resolve_first_person: bool = False,
    agent_id: str | None = None,
    run_id: str | None = None,
    source_actor_id: str | None = None,
    submitted_by: str = "",
    actor: Actor | None = None,
    held_to: AgentRestriction | None = None,
) -> SubmitResult:
    """Store a conversation, one chunk per message, and queue its distillation (``held_to``: as
    for a document).

    A message without a timestamp takes the previous message's time plus a millisecond
    (the first one: now). ``speaker`` names the user (the ``source_actor_id`` of their
    memories); with ``resolve_first_person`` their "I" and "my" become that name — off by
    default, because first person retrieves better for questions asked in the user's voice
    (docs/SOURCES.md has the numbers)."""
    options = {
        "speaker": speaker, "resolve_first_person": resolve_first_person, "agent_id": agent_id, "run_id": run_id,
        "source_actor_id": source_actor_id,
    }  # fmt: skip
    raw = [
        {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(m).items() if v is not None}
        for m in messages
    ]
    hashed = {"title": title, "messages": raw, **options}
    options |= held_options(held_to)
    now = timezone.now()

    def chunks(source: Source) -> list[SourceChunk]:
        rows, previous = [], None
        for i, m in enumerate(messages):
            when = m.timestamp or (previous + timedelta(milliseconds=1) if previous else now)
            previous = when
            rows.append(
                SourceChunk(
                    source=source,
                    ordinal=i,
                    text=m.content,
                    role=m.role,
                    name=m.name,
                    timestamp=when,
                    agent_id=m.agent_id,
                    run_id=m.run_id,
                )  # fmt: skip
            )
        return rows

    return _submit(
        bucket=bucket, kind=SourceKind.CONVERSATION, title=title, hashed=hashed,
        metadata=metadata, options=options, chunks=chunks, messages=raw, submitted_by=submitted_by, actor=actor,
    )  # fmt: skip
