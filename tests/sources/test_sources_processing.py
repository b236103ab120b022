"""Background processing: failure midway leaves a resumable state; resume and the sweep complete it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from engram_site.models import JobRun
from memories.models import Memory
from sources import tasks
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory, SourceStatus
from sources.services import process as source_processing
from sources.services.delete import source_delete
from sources.services.process import ProcessReport, source_process
from sources.services.submit import MessageInput, source_submit_conversation, source_submit_document
from sources.services.sweep import MAX_ATTEMPTS, STALE_AFTER, sources_due, sources_sweep

pytestmark = pytest.mark.django_db

MESSAGES = [
    MessageInput(role="user" if i % 2 == 0 else "assistant", content=f"Fact number {i}: the locker code is {1000 + i}.")
    for i in range(6)
]


def submit(bucket):
    return source_submit_conversation(bucket=bucket, messages=MESSAGES, title="lockers").source


@pytest.fixture
def fail_at_chunk(monkeypatch):
    """Make the memory ingest of chunk k (any batch holding its statement) raise, until disarmed."""
    real = source_processing.memories_ingest
    state = {"ordinal": None}

    def ingest(*, bucket, items, **kwargs):
        if state["ordinal"] is not None and any(f"number {state['ordinal']}:" in i.content for i in items):
            raise RuntimeError("embedding server exploded")
        return real(bucket=bucket, items=items, **kwargs)

    monkeypatch.setattr(source_processing, "memories_ingest", ingest)

    def arm(ordinal: int | None) -> None:
        state["ordinal"] = ordinal

    return arm


def chunk_states(source):
    return list(SourceChunk.objects.filter(source=source).order_by("ordinal").values_list("status", flat=True))


def test_a_failure_midway_leaves_a_resumable_state_and_resuming_completes_without_duplicates(bucket, fail_at_chunk):
    source = submit(bucket)
    fail_at_chunk(3)
    report = source_process(source_id=source.pk)
    assert report.status == "failed" and report.chunks == 3
    assert "chunk 3" in report.error and "embedding server exploded" in report.error

    source.refresh_from_db()
    assert source.status == SourceStatus.FAILED and source.attempts == 1 and source.chunks_done == 3
    assert "embedding server exploded" in source.error
    assert chunk_states(source) == ["done"] * 3 + ["failed", "pending", "pending"]
    # Chunks 0-2 committed whole; nothing of chunk 3 was written.
    assert Memory.objects.for_bucket(bucket).count() == 3
    assert not SourceChunkMemory.objects.filter(chunk__ordinal__gte=3).exists()

    fail_at_chunk(None)  # the model is back
    report = source_process(source_id=source.pk)
    assert report.status == "done" and report.chunks == 3  # only chunks 3, 4 and 5
    source.refresh_from_db()
    assert source.status == SourceStatus.DONE and source.chunks_done == 6 and source.error == ""
    assert chunk_states(source) == ["done"] * 6
    contents = list(Memory.objects.for_bucket(bucket).order_by("created_at").values_list("content", flat=True))
    assert contents == [m.content for m in MESSAGES]  # each once, in order
    assert SourceChunkMemory.objects.filter(source_id=source.pk).count() == 6
    assert source.memories_created == 6 and source.memories_deduplicated == 0


def test_the_sweep_resumes_a_failed_source_after_its_back_off(bucket, fail_at_chunk):
    source = submit(bucket)
    fail_at_chunk(2)
    source_process(source_id=source.pk)
    fail_at_chunk(None)
    assert sources_due() == []  # backing off (2 minutes after the first failure)
    Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=3))
    assert sources_due() == [source.pk]
    counts = sources_sweep()
    assert counts["done"] == 1 and counts["chunks"] == 4
    source.refresh_from_db()
    assert source.status == SourceStatus.DONE and Memory.objects.for_bucket(bucket).count() == 6


def test_a_source_that_keeps_failing_is_given_up_by_the_sweep_but_resubmitting_resumes_it(bucket, fail_at_chunk):
    source = submit(bucket)
    fail_at_chunk(1)
    for _ in range(MAX_ATTEMPTS):
        source_process(source_id=source.pk)
    source.refresh_from_db()
    assert source.status == SourceStatus.FAILED and source.attempts == MAX_ATTEMPTS
    Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))
    assert sources_due() == []

    fail_at_chunk(None)
    again = source_submit_conversation(bucket=bucket, messages=MESSAGES, title="lockers")
    assert again.deduplicated and again.source.pk == source.pk
    assert again.source.status == SourceStatus.PENDING and again.source.attempts == 0
    assert source_process(source_id=source.pk).status == "done"
    assert Memory.objects.for_bucket(bucket).count() == 6


def test_the_sweep_picks_up_lost_hints_and_dead_workers_but_leaves_fresh_work_alone(bucket, tenant):
    from memories.services.buckets import bucket_create

    fresh = submit(bucket)
    lost = source_submit_document(bucket=bucket, title="lost", text="The boiler was serviced in 2024.").source
    dead = source_submit_document(
        bucket=bucket_create(tenant=tenant, name="b2"), title="dead", text="The roof was redone in 2019."
    ).source
    Source.objects.filter(pk=lost.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=2))
    # A worker died mid-way: processing, no heartbeat for longer than STALE_AFTER.
    Source.objects.filter(pk=dead.pk).update(
        status=SourceStatus.PROCESSING, heartbeat_at=timezone.now() - STALE_AFTER - timedelta(minutes=1)
    )
    assert set(sources_due()) == {lost.pk, dead.pk}
    assert sources_sweep()["done"] == 2
    assert Source.objects.get(pk=fresh.pk).status == SourceStatus.PENDING
    assert {s.status for s in Source.objects.exclude(pk=fresh.pk)} == {SourceStatus.DONE}


def test_the_sweep_task_records_a_job_run(bucket, celery_eager):
    source = submit(bucket)
    Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    outcome = tasks.sweep.delay().get()
    assert outcome["status"] == "succeeded"
    run = JobRun.objects.get(name="sources_sweep")
    assert run.counts["sources"] == 1 and run.counts["chunks"] == 6
    # Nothing left to do: an idle sweep leaves no run behind.
    tasks.sweep.delay()
    assert JobRun.objects.filter(name="sources_sweep").count() == 1


def test_a_sweep_that_meets_a_failure_is_recorded_as_failed(bucket, celery_eager, fail_at_chunk):
    source = submit(bucket)
    Source.objects.filter(pk=source.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    fail_at_chunk(0)
    assert tasks.sweep.delay().get()["status"] == "failed"
    run = JobRun.objects.get(name="sources_sweep")
    assert "embedding server exploded" in run.error and run.counts["failed"] == 1


def test_processing_is_idempotent(bucket):
    source = submit(bucket)
    assert tasks.process_source(str(source.pk))["status"] == "done"
    assert tasks.process_source(str(source.pk)) == {
        **ProcessReport(str(source.pk)).as_dict(),
        "status": "done",
    }
    assert Memory.objects.for_bucket(bucket).count() == 6
    assert tasks.process_source("00000000-0000-0000-0000-000000000000")["status"] == "missing"


def test_a_deadline_pauses_between_chunks_and_the_next_run_continues(bucket, monkeypatch):
    monkeypatch.setattr(source_processing, "BATCH_CHUNKS", 1)
    source = submit(bucket)
    # The clock passes the deadline once two chunks are done.
    done = SourceChunk.objects.filter(source=source, status=ChunkStatus.DONE)
    monkeypatch.setattr(source_processing, "clock", lambda: 10.0 if done.count() >= 2 else 0.0)
    report = source_process(source_id=source.pk, deadline=5.0)
    assert report.status == "pending" and report.chunks == 2
    assert Source.objects.get(pk=source.pk).status == SourceStatus.PENDING
    assert source_process(source_id=source.pk).status == "done"
    assert chunk_states(source) == [ChunkStatus.DONE] * 6


def test_a_source_deleted_while_pending_is_not_processed(bucket):
    source = submit(bucket)
    source_delete(source=source)
    assert source_process(source_id=source.pk).status == "missing"
    assert not Memory.objects.exists()


def test_process_sources_command(bucket):
    import io
    import json

    from django.core.management import call_command

    source = submit(bucket)
    out = io.StringIO()
    call_command("process_sources", "--no-progress", stdout=out, stderr=io.StringIO())
    assert json.loads(out.getvalue())["counts"]["chunks"] == 6
    assert Source.objects.get(pk=source.pk).status == SourceStatus.DONE
