"""Processing a source: its chunks distilled, in order, into memories (see the package's docstring)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from engram_site import activity
from memories.services import memories_ingest
from sources.distill.configured import get_distiller
from sources.distill.units import Distiller, DistillResult, Unit
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory, SourceKind, SourceStatus
from sources.services.inputs import chunk_speaker, memory_input, submitter_agents
from sources.services.locks import bucket_lock

logger = logging.getLogger(__name__)

ERROR_LIMIT = 4_000
# While distilling a batch, the heartbeat is refreshed at least this often (seconds).
HEARTBEAT_SECONDS = 60.0
# Chunks committed per transaction (one memories_ingest call, embeddings in one batch).
BATCH_CHUNKS = 32
BATCH_STATEMENTS = 64


def clock() -> float:
    return time.monotonic()


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


def _unit(source: Source, chunk: SourceChunk, previous: SourceChunk | None) -> Unit:
    if source.kind == SourceKind.DOCUMENT:
        return Unit(kind=source.kind, text=chunk.text, title=source.title, heading=chunk.heading)
    speaker = chunk_speaker(source, chunk) if source.options.get("resolve_first_person") else None
    return Unit(
        kind=source.kind, text=chunk.text, title=source.title, role=chunk.role, speaker=speaker,
        previous_text=previous.text if previous else None, previous_role=previous.role if previous else None,
    )  # fmt: skip


@dataclass
class _Step:
    """One chunk, distilled, waiting to be committed."""

    chunk: SourceChunk
    previous: SourceChunk | None
    result: DistillResult


def _commit(source: Source, steps: list[_Step]) -> tuple[int, int, int]:
    """Commit consecutive chunks in one transaction: their memories (one memories_ingest call,
    so embeddings are computed in one batch), their links and their done marks. Returns
    (chunks committed, memories created, statements deduplicated)."""
    with transaction.atomic():
        bucket_lock(source.bucket_id, shared=True)
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
                items.append(memory_input(source, step.chunk, statement.text, position))
                owners.append((step, position, statement))
        held_to = submitter_agents(source)
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


def source_process(*, source_id, distiller: Distiller | None = None, deadline: float | None = None) -> ProcessReport:
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
    distiller = distiller or get_distiller()
    while True:
        activity.pause()  # a worker sharing the machine with a web server gives way to requests
        if deadline is not None and clock() > deadline:
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
        beat = clock()
        for chunk in chunks:
            try:
                result = distiller.distill(_unit(source, chunk, previous))
            except Exception as exc:
                failure = (chunk, exc)
                break
            if clock() - beat > HEARTBEAT_SECONDS:
                # A slow distiller (an LLM) between commits: still alive, the sweep must not step in.
                Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now())
                beat = clock()
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
