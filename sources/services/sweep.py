"""The sweep: sources a lost hint, a dead worker or a failure left behind, processed again."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sources.models import Source, SourceStatus
from sources.services.process import clock, source_process
from sources.services.submit import announce_pending

# The sweep: a pending source is left to its hint this long; a processing source whose
# heartbeat (written after every batch of chunks) is older than STALE_AFTER lost its worker; a failed
# source is retried after 2**attempts minutes, MAX_ATTEMPTS times (re-submitting it resets that).
PENDING_GRACE = timedelta(seconds=60)
STALE_AFTER = timedelta(minutes=10)
MAX_ATTEMPTS = 5


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
    deadline = clock() + budget_seconds
    counts = {"sources": 0, "done": 0, "failed": 0, "chunks": 0, "created": 0}
    seen: set = set()
    while clock() < deadline:
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
            announce_pending(source_id)
    return count
