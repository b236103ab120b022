"""Writes of sources: submit, process (distil chunks into memories), sweep, delete.

Submitting stores the source and its chunks and answers at once; the distillation runs in
the background (a Celery hint queued after commit; the periodic sweep picks up whatever a
lost hint, a dead worker or a failure left behind). Chunks are committed in order, a few
at a time: their memories (through :func:`memories.services.memories_ingest`, so dedup,
lemmas, embeddings and sequence context apply), their provenance links and their ``done``
marks commit together — so a failure at chunk k leaves chunks 0..k-1 done and nothing of
chunk k, and the next attempt resumes at chunk k without duplicating anything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from celery import signature
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site import activity
from engram_site.exceptions import NotFound
from engram_site.locks import lock_key
from memories import hooks
from memories.models import Memory
from memories.services import MemoryInput, constraint_name, hold_bucket, memories_ingest, memory_delete
from sources import distill
from sources.chunking import chunk_document
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory, SourceKind, SourceStatus
from tenants.models import AgentRestriction, Bucket, Tenant
from tenants.selectors import parse_uuid

logger = logging.getLogger(__name__)

# The sweep: a pending source is left to its hint this long; a processing source whose
# heartbeat (written after every batch of chunks) is older than STALE_AFTER lost its worker; a failed
# source is retried after 2**attempts minutes, MAX_ATTEMPTS times (re-submitting it resets that).
PENDING_GRACE = timedelta(seconds=60)
STALE_AFTER = timedelta(minutes=10)
MAX_ATTEMPTS = 5
ERROR_LIMIT = 4_000
# While distilling a batch, the heartbeat is refreshed at least this often (seconds).
HEARTBEAT_SECONDS = 60.0
# Chunks committed per transaction (one memories_ingest call, embeddings in one batch).
BATCH_CHUNKS = 32
BATCH_STATEMENTS = 64


def _clock() -> float:
    return time.monotonic()


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


# --- submit ----------------------------------------------------------------------------------------


def content_hash(kind: str, payload: dict) -> str:
    """SHA-256 of the canonical JSON of what shapes a source's memories."""
    canonical = json.dumps({"kind": kind, **payload}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


PROCESS_TASK = "sources.process_source"

# Declared by migration sources 0001 (ON DELETE CASCADE).
_BUCKET_FOREIGN_KEYS = {"sources_bucket_id_fk", "sources_tenant_id_fk"}


def _enqueue(source_id: uuid.UUID) -> None:
    """Ask a worker to process the source. Never raises and never waits long on a broker that
    is down (memories.hooks backs off); the sweep picks the source up otherwise."""
    try:
        # Named, not imported: sources.tasks imports this module.
        task = signature(PROCESS_TASK, args=(str(source_id),), immutable=True)
        hooks.publish(lambda: task, what="source processing", count=1)
    except Exception:  # a signature bug must not fail a committed request either
        logger.exception("could not queue processing of source %s", source_id)


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
                transaction.on_commit(lambda: _enqueue(existing.pk))
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
            transaction.on_commit(lambda: _enqueue(source.pk))
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
    submitting token, whose reads the distillation keeps to (:func:`_held_to`)."""
    options = {
        "created_at": created_at.isoformat() if created_at else None,
        "attributed_to": attributed_to,
        "agent_id": agent_id,
        "run_id": run_id,
        "source_actor_id": source_actor_id,
    }
    hashed = {"title": title, "text": text, **options}
    options |= _held_options(held_to)
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
    options |= _held_options(held_to)
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


# --- process --------------------------------------------------------------------------------------


@dataclass
class ProcessReport:
    source_id: str
    status: str = ""
    chunks: int = 0
    created: int = 0
    deduplicated: int = 0
    dropped: int = 0
    error: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


class _Busy(Exception):
    """Another worker holds the source (or it was deleted): leave it to them."""


def _bucket_lock(bucket_id, *, shared: bool) -> None:
    """Chunk processing (shared) and source deletion (exclusive) of one bucket exclude each other,
    so a delete never decides "no other source states this memory" while a chunk is linking it."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cur:
        cur.execute(f"SELECT {function}(%s)", [lock_key(f"sources:{bucket_id}")])


def _speaker(source: Source, chunk: SourceChunk) -> str | None:
    """Who wrote the message: its ``name``, or for user messages the conversation's speaker."""
    if chunk.name:
        return chunk.name
    return source.options.get("speaker") if chunk.role == "user" else None


def _unit(source: Source, chunk: SourceChunk, previous: SourceChunk | None) -> distill.Unit:
    if source.kind == SourceKind.DOCUMENT:
        return distill.Unit(kind=source.kind, text=chunk.text, title=source.title, heading=chunk.heading)
    speaker = _speaker(source, chunk) if source.options.get("resolve_first_person") else None
    return distill.Unit(
        kind=source.kind, text=chunk.text, title=source.title, role=chunk.role, speaker=speaker,
        previous_text=previous.text if previous else None, previous_role=previous.role if previous else None,
    )  # fmt: skip


def _held_options(held_to: AgentRestriction | None) -> dict:
    """The options that remember a submitting token's agents (not part of the content hash)."""
    if held_to is None:
        return {}
    return {"held_to_agents": list(held_to.agent_ids), "held_include_shared": held_to.include_shared}


def _held_to(source: Source) -> AgentRestriction | None:
    """The agents of the token that submitted ``source``, when it was held to agents: the
    sequence context of its memories is then drawn only from memories those agents may read,
    as for the token's own writes."""
    options = source.options or {}
    if not options.get("held_to_agents"):
        return None
    return AgentRestriction(tuple(options["held_to_agents"]), bool(options.get("held_include_shared")))


def _memory_input(source: Source, chunk: SourceChunk, text: str, position: int) -> MemoryInput:
    options = source.options or {}
    if source.kind == SourceKind.DOCUMENT:
        attributed_to, actor = options.get("attributed_to"), options.get("source_actor_id")
    else:
        attributed_to = chunk.role
        actor = _speaker(source, chunk) or options.get("source_actor_id")
    return MemoryInput(
        content=text,
        attributed_to=attributed_to,
        agent_id=chunk.agent_id or options.get("agent_id"),
        # Without a run, a source's memories form one sequence of their own (sequence context).
        run_id=chunk.run_id or options.get("run_id") or str(source.pk),
        source_actor_id=actor,
        # A microsecond apart within the chunk: memories keep their order across chunks and attempts.
        created_at=chunk.timestamp + timedelta(microseconds=position) if chunk.timestamp else None,
    )


@dataclass
class _Step:
    """One chunk, distilled, waiting to be committed."""

    chunk: SourceChunk
    previous: SourceChunk | None
    result: distill.DistillResult


def _commit(source: Source, steps: list[_Step]) -> tuple[int, int, int]:
    """Commit consecutive chunks in one transaction: their memories (one memories_ingest call,
    so embeddings are computed in one batch), their links and their done marks. Returns
    (chunks committed, memories created, statements deduplicated)."""
    with transaction.atomic():
        _bucket_lock(source.bucket_id, shared=True)
        # The row lock keeps two workers of one source in step (they take turns per batch).
        if not Source.objects.select_for_update(skip_locked=True).filter(pk=source.pk).exists():
            raise _Busy
        open_ids = set(
            SourceChunk.objects.filter(pk__in=[s.chunk.pk for s in steps])
            .exclude(status=ChunkStatus.DONE)
            .values_list("pk", flat=True)
        )
        steps = [s for s in steps if s.chunk.pk in open_ids]  # another worker may have done some meanwhile
        if not steps:
            return 0, 0, 0
        items, owners = [], []
        for step in steps:
            for position, statement in enumerate(step.result.statements):
                items.append(_memory_input(source, step.chunk, statement.text, position))
                owners.append((step, position, statement))
        held_to = _held_to(source)
        results = memories_ingest(bucket=source.bucket, items=items, sequence=True, agents=held_to) if items else []
        links = []
        for (step, position, statement), ingested in zip(owners, results, strict=True):
            links.append(
                SourceChunkMemory(
                    source=source,
                    chunk=step.chunk,
                    memory_id=ingested.id,
                    created=not ingested.deduplicated,
                    position=position,
                )
            )
            if statement.cites_previous and step.previous is not None:
                links.append(
                    SourceChunkMemory(
                        source=source, chunk=step.previous, memory_id=ingested.id, created=False, position=position
                    )
                )
        SourceChunkMemory.objects.bulk_create(links, ignore_conflicts=True)
        now = timezone.now()
        for step in steps:
            step.chunk.status, step.chunk.processed_at, step.chunk.error = ChunkStatus.DONE, now, ""
            step.chunk.statements, step.chunk.dropped = len(step.result.statements), step.result.dropped
        SourceChunk.objects.bulk_update(
            [s.chunk for s in steps], ["status", "processed_at", "error", "statements", "dropped"]
        )
        created = sum(1 for r in results if not r.deduplicated)
        by = source.distilled_by.split(", ") if source.distilled_by else []
        for step in steps:
            if step.result.by not in by:
                by.append(step.result.by)
        Source.objects.filter(pk=source.pk).update(
            chunks_done=F("chunks_done") + len(steps), memories_created=F("memories_created") + created,
            memories_deduplicated=F("memories_deduplicated") + len(results) - created,
            dropped=F("dropped") + sum(s.result.dropped for s in steps), heartbeat_at=now, distilled_by=", ".join(by),
        )  # fmt: skip
        source.distilled_by = ", ".join(by)
        return len(steps), created, len(results) - created


def _fail(source: Source, chunk: SourceChunk, exc: BaseException) -> str:
    message = f"chunk {chunk.ordinal}: {type(exc).__name__}: {exc}"[:ERROR_LIMIT]
    with transaction.atomic():
        SourceChunk.objects.filter(pk=chunk.pk).exclude(status=ChunkStatus.DONE).update(
            status=ChunkStatus.FAILED, error=message
        )
        Source.objects.filter(pk=source.pk).update(
            status=SourceStatus.FAILED, error=message, attempts=F("attempts") + 1, heartbeat_at=timezone.now()
        )
    return message


def source_process(
    *, source_id, distiller: distill.Distiller | None = None, deadline: float | None = None
) -> ProcessReport:
    """Distil the source's unfinished chunks, in order, into memories.

    Idempotent and resumable: done chunks are skipped. Chunks are committed in batches
    (up to BATCH_CHUNKS chunks or BATCH_STATEMENTS statements per transaction, for
    batched embeddings); a batch that fails is retried chunk by chunk, so the chunks
    before the culprit commit and the source is marked ``failed`` at the culprit (with
    the error), leaving it and the rest for the next attempt. ``deadline``
    (``time.monotonic()``) pauses between batches, leaving the source ``pending``.
    """
    report = ProcessReport(source_id=str(source_id))
    source = Source.objects.select_related("bucket").defer("text", "messages").filter(pk=source_id).first()
    if source is None:
        report.status = "missing"
        return report
    if source.status == SourceStatus.DONE:
        report.status = source.status
        return report
    now = timezone.now()
    Source.objects.filter(pk=source.pk).exclude(status=SourceStatus.DONE).update(
        status=SourceStatus.PROCESSING, started_at=source.started_at or now, heartbeat_at=now, error=""
    )
    distiller = distiller or distill.get_distiller()
    while True:
        activity.pause()  # a worker sharing the machine with a web server gives way to requests
        if deadline is not None and _clock() > deadline:
            Source.objects.filter(pk=source.pk, status=SourceStatus.PROCESSING).update(status=SourceStatus.PENDING)
            report.status = SourceStatus.PENDING
            return report
        chunks = list(source.chunks.exclude(status=ChunkStatus.DONE).order_by("ordinal")[:BATCH_CHUNKS])
        if not chunks:
            break
        previous = None
        if source.kind == SourceKind.CONVERSATION and chunks[0].ordinal > 0:
            previous = source.chunks.filter(ordinal=chunks[0].ordinal - 1).first()
        steps: list[_Step] = []
        failure: tuple[SourceChunk, Exception] | None = None
        beat = _clock()
        for chunk in chunks:
            try:
                result = distiller.distill(_unit(source, chunk, previous))
            except Exception as exc:
                failure = (chunk, exc)
                break
            if _clock() - beat > HEARTBEAT_SECONDS:
                # A slow distiller (an LLM) between commits: still alive, the sweep must not step in.
                Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now())
                beat = _clock()
            steps.append(_Step(chunk, previous if source.kind == SourceKind.CONVERSATION else None, result))
            previous = chunk
            if sum(len(s.result.statements) for s in steps) >= BATCH_STATEMENTS:
                break
        try:
            if steps:
                try:
                    _tally(report, steps, _commit(source, steps))
                except _Busy:
                    raise
                except Exception as exc:
                    # Find the culprit: commit chunk by chunk up to it (the batch rolled back whole).
                    culprit = (steps[0].chunk, exc) if len(steps) == 1 else _commit_each(source, steps, report)
                    failure = culprit or failure
        except _Busy:
            report.status = "busy"
            return report
        if failure is not None:
            chunk, exc = failure
            logger.error("source %s failed at chunk %d: %s", source.pk, chunk.ordinal, exc, exc_info=exc)
            report.error = _fail(source, chunk, exc)
            report.status = SourceStatus.FAILED
            return report
    Source.objects.filter(pk=source.pk).exclude(status=SourceStatus.DONE).update(
        status=SourceStatus.DONE, finished_at=timezone.now(), heartbeat_at=timezone.now(), error="", attempts=0
    )
    report.status = SourceStatus.DONE
    return report


def _commit_each(source: Source, steps: list[_Step], report: ProcessReport) -> tuple[SourceChunk, Exception] | None:
    for step in steps:
        try:
            _tally(report, [step], _commit(source, [step]))
        except _Busy:
            raise
        except Exception as exc:
            return step.chunk, exc
    return None


def _tally(report: ProcessReport, steps: list[_Step], outcome: tuple[int, int, int]) -> None:
    chunks, created, deduplicated = outcome
    report.chunks += chunks
    report.created += created
    report.deduplicated += deduplicated
    report.dropped += sum(s.result.dropped for s in steps) if chunks else 0


# --- the sweep ---------------------------------------------------------------------------------------


def sources_due(*, now: datetime | None = None, grace: bool = True, limit: int = 100, exclude=()) -> list[uuid.UUID]:
    """Sources the sweep should process: pending past their hint's grace period, processing
    without a heartbeat for STALE_AFTER, failed and due for another attempt."""
    now = now or timezone.now()
    pending_before = now - PENDING_GRACE if grace else now
    candidates = (
        Source.objects.filter(
            Q(status=SourceStatus.PENDING, heartbeat_at__lte=pending_before)
            | Q(status=SourceStatus.PROCESSING, heartbeat_at__lt=now - STALE_AFTER)
            | Q(status=SourceStatus.FAILED, attempts__lt=MAX_ATTEMPTS)
        )
        .exclude(pk__in=list(exclude))
        .order_by("heartbeat_at")
        .values_list("id", "status", "attempts", "heartbeat_at")[: limit * 4]
    )
    due = []
    for source_id, status, attempts, heartbeat in candidates:
        if status == SourceStatus.FAILED and grace and heartbeat and heartbeat > now - timedelta(minutes=2**attempts):
            continue  # backing off
        due.append(source_id)
    return due[:limit]


def sources_sweep(*, recorder=None, budget_seconds: float = 240.0, grace: bool = True) -> dict:
    """Process what hints missed (see :func:`sources_due`), within a time budget; a source cut
    short by the budget goes back to pending and the next sweep continues it."""
    deadline = _clock() + budget_seconds
    counts = {"sources": 0, "done": 0, "failed": 0, "chunks": 0, "created": 0}
    seen: set = set()
    while _clock() < deadline:
        # Each source at most once per sweep: one that fails again waits for the next sweep.
        due = sources_due(grace=grace, limit=1, exclude=seen)
        if not due:
            break
        source_id = due[0]
        seen.add(source_id)
        report = source_process(source_id=source_id, deadline=deadline)
        counts["sources"] += 1
        counts["done"] += report.status == SourceStatus.DONE
        counts["failed"] += report.status == SourceStatus.FAILED
        counts["chunks"] += report.chunks
        counts["created"] += report.created
        if recorder is not None:
            recorder.add(sources=1, chunks=report.chunks, created=report.created)
            if report.status == SourceStatus.FAILED:
                recorder.add(failed=1)
                # Visible in the job runs; the source itself is retried with back-off.
                recorder.fail(f"source {source_id}: {report.error}")
    return counts


def sources_retry(*, source_ids: list) -> int:
    """Put unfinished sources back to pending (failure count reset) and queue them."""
    with transaction.atomic():
        count = (
            Source.objects.filter(pk__in=source_ids)
            .exclude(status=SourceStatus.DONE)
            .update(status=SourceStatus.PENDING, attempts=0, heartbeat_at=timezone.now())
        )
        for source_id in source_ids:
            transaction.on_commit(lambda source_id=source_id: _enqueue(source_id))
    return count


# --- delete ---------------------------------------------------------------------------------------


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
    _bucket_lock(source.bucket_id, shared=False)
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


# --- erasure (memories.services.erasure, through sources/participants.py) ----------------------------

# The fields of a chunk a source's memories take their identifiers from (_memory_input).
_CHUNK_FIELDS = ("source_id", "ordinal", "role", "name", "agent_id", "run_id", "timestamp")


def _submitted_with(*, tenant: Tenant, bucket_id, fields: dict[str, str]) -> list[Source]:
    """The tenant's sources (in one bucket, or all) with a chunk whose memories take all of
    ``fields`` — by the rule that gives them (:func:`_memory_input`), so a source matches exactly
    when distilling it does (or did) write memories the erasure matches, whatever it distilled."""
    sources = Source.objects.for_tenant(tenant).defer("text", "messages")
    if bucket_id is not None:
        sources = sources.filter(bucket_id=bucket_id)
    identifiers = [v for k, v in fields.items() if k != "attributed_to"]
    if identifiers:
        # A first cut in SQL: the value is one the submission named (an option, a message's ids or
        # name, or the source's own id — the run of a source submitted without one). No index serves
        # source_chunks by these columns: an erasure reads the tenant's chunks once.
        value = identifiers[0]
        named = Q(pk__in=SourceChunk.objects.filter(Q(agent_id=value) | Q(run_id=value) | Q(name=value)).values(
            "source_id"
        ))  # fmt: skip
        for option in ("agent_id", "run_id", "source_actor_id", "speaker"):
            named |= Q(**{f"options__{option}": value})
        if (own_id := parse_uuid(value)) is not None:
            named |= Q(pk=own_id)
        sources = sources.filter(named)
    found = []
    for source in sources.order_by("pk"):
        for chunk in SourceChunk.objects.filter(source_id=source.pk).only(*_CHUNK_FIELDS).order_by("ordinal"):
            item = _memory_input(source, chunk, "", 0)
            if all(getattr(item, name) == value for name, value in fields.items()):
                found.append(source)
                break
    return found


def sources_erasure_lock(*, tenant: Tenant, bucket_id, bucket_ids, fields: dict[str, str]) -> None:
    """Before an erasure chooses its memories: keep chunk processing out of the buckets that hold
    matching memories or sources submitted with the erased values until it commits, so no
    batch of a source being deleted commits memories the erasure would not see."""
    locked = {*bucket_ids, *(s.bucket_id for s in _submitted_with(tenant=tenant, bucket_id=bucket_id, fields=fields))}
    for locked_id in sorted(locked, key=str):  # in one order, so two erasures cannot deadlock
        _bucket_lock(locked_id, shared=False)


def sources_erase(*, tenant: Tenant, bucket_id, memory_ids: list, fields: dict[str, str]) -> dict:
    """Delete the documents and conversations an erasure reaches, with their chunks: those that
    stated an erased memory (their text holds it) and those submitted with the erased values.
    Their other memories stay, without provenance. Returns the counts."""
    linked = SourceChunkMemory.objects.filter(memory_id__in=list(memory_ids)).values("source_id")
    ids = set(Source.objects.for_tenant(tenant).filter(pk__in=linked).values_list("pk", flat=True))
    ids |= {s.pk for s in _submitted_with(tenant=tenant, bucket_id=bucket_id, fields=fields)}
    if not ids:
        return {"sources": 0, "source_chunks": 0}
    chunks = SourceChunk.objects.filter(source_id__in=ids).count()
    # Chunks and their memory links go with them (ON DELETE CASCADE).
    deleted = Source.objects.filter(pk__in=ids).delete()[0]
    logger.info("erasure deleted %d sources with %d chunks", deleted, chunks)
    return {"sources": deleted, "source_chunks": chunks}


# --- bucket merges (memories.services.buckets.bucket_merge, through sources/participants.py) ---------


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
