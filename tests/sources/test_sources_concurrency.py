"""Concurrent submissions and workers: one source, each chunk done once, nothing written twice."""

from __future__ import annotations

import ast
import contextlib
import re
import threading
import uuid
from datetime import datetime

import pytest
from django.db import connection

from audit.services import Actor
from engram_site.scoping import in_this_context
from memories.models import Memory
from memories.services import buckets as memory_buckets
from sources import tasks
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory, SourceStatus
from sources.services import process as source_processing
from sources.services import submit as source_submission
from sources.services.delete import source_delete
from sources.services.process import source_process
from sources.services.submit import MessageInput, content_hash, source_submit_conversation
from tenants.models import Bucket
from tests.support import base_env, celery_worker, test_database_url, use_broker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [
    MessageInput(role="user" if i % 2 == 0 else "assistant", content=f"Item {i}: the spare key {i} is in drawer {i}.")
    for i in range(40)
]

SYSTEM = Actor.system("test")
SUBMISSIONS = {
    "documents": {"title": "Trip notes", "text": "We stayed in Alfama for six nights in May 2024."},
    "conversations": {"messages": [{"role": "user", "content": "My sister Ana moved to Porto in 2023."}]},
}


def in_threads(*fns) -> list:
    """Run each function in its own thread, started together; each thread has its own connection."""
    barrier = threading.Barrier(len(fns))
    results: list = [None] * len(fns)
    errors: list = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = fns[index]()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=in_this_context(run), args=(i,)) for i in range(len(fns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    return results


def test_concurrent_identical_submissions_make_one_source(bucket):
    submit = lambda: source_submit_conversation(bucket=bucket, messages=MESSAGES)  # noqa: E731
    results = in_threads(submit, submit, submit, submit)
    assert len({r.source.pk for r in results}) == 1
    assert sorted(r.deduplicated for r in results) == [False, True, True, True]
    assert Source.objects.count() == 1 and SourceChunk.objects.count() == len(MESSAGES)


def test_two_concurrent_runs_on_one_source_do_each_chunk_once(bucket, monkeypatch):
    # Two threads of this process; the test below runs the same race in two worker processes.
    monkeypatch.setattr(source_processing, "BATCH_CHUNKS", 4)  # many small batches: the runs interleave
    source = source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    work = lambda: source_process(source_id=source.pk)  # noqa: E731
    reports = in_threads(work, work)
    assert {r.status for r in reports} <= {"done", "busy"} and "done" in {r.status for r in reports}

    source.refresh_from_db()
    assert source.status == "done" and source.chunks_done == len(MESSAGES)
    assert set(SourceChunk.objects.filter(source=source).values_list("status", flat=True)) == {ChunkStatus.DONE}
    assert sum(r.chunks for r in reports) == len(MESSAGES)  # each chunk committed by one of them
    assert Memory.objects.for_bucket(bucket).count() == len(MESSAGES)
    assert SourceChunkMemory.objects.filter(source_id=source.pk).count() == len(MESSAGES)
    assert source.memories_created == len(MESSAGES) and source.memories_deduplicated == 0


# A worker's log record when a task it ran returns: "[2026-11-25 22:40:01,123: INFO/ForkPoolWorker-1]
# Task sources.process_source[<id>] succeeded in 1.2s: {'source_id': ..., 'chunks': 12, ...}" (the
# report runs over several lines when its error holds line breaks).
_RECORD = re.compile(r"^\[(\d{4}-[\d-]+ [\d:,]+): \w+/[\w-]+\] (.*?)(?=^\[\d{4}-|\Z)", re.M | re.S)
_STARTED = re.compile(r"Task sources\.process_source\[([\w-]+)\] received")
_DONE = re.compile(r"Task sources\.process_source\[([\w-]+)\] succeeded in [\d.e-]+s: (\{.*\})", re.S)


def _runs(log: str) -> dict[str, tuple[datetime, datetime, dict]]:
    """The process_source tasks a worker ran: task id -> (received, returned, its report)."""
    received, runs = {}, {}
    for stamp, message in _RECORD.findall(log):
        moment = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
        if started := _STARTED.match(message):
            received[started.group(1)] = moment
        elif done := _DONE.match(message):
            # Celery's saferepr leaves line breaks inside strings as they are.
            report = ast.literal_eval(done.group(2).replace("\n", "\\n"))
            runs[done.group(1)] = (received[done.group(1)], moment, report)
    return runs


WORKER_APP = "tests.scripts.sources_worker_app"  # engram_site's app, small batches, a slow distiller


class Broker:
    """The embedded filesystem broker, in a folder and on a queue of this test only."""

    def __init__(self, tmp_path):
        self.queue = f"engram-test-{uuid.uuid4().hex[:12]}"
        self.dir = tmp_path / "broker"

    def worker_env(self) -> dict[str, str]:
        return base_env(
            DATABASE_URL=test_database_url(),
            ENGRAM_QUEUE=self.queue,
            ENGRAM_BROKER_DIR=str(self.dir),
            CELERY_BROKER_URL="",
            REDIS_URL="",
            ENGRAM_TEST_BATCH_CHUNKS="4",  # see tests/scripts/sources_worker_app.py
            ENGRAM_TEST_DISTILL_DELAY="0.05",
        )

    def hint(self, source) -> str:
        """Queue a process_source hint, as a submission's commit or the sweep does; its task id."""
        with use_broker("filesystem://", broker_dir=self.dir, queue=self.queue):
            return tasks.process_source.delay(str(source.pk)).id


@pytest.mark.slow
def test_two_workers_on_one_source_do_each_chunk_once(bucket, tmp_path):
    """Two Celery worker processes (the embedded filesystem broker, in a folder of this test)
    are each handed the same source at once — a lost-looking hint queued again, the sweep
    racing the hint — and take turns on it batch by batch: every chunk is distilled into
    memories by exactly one of them, and the counters add up."""
    broker = Broker(tmp_path)
    # The submission's own hint goes to the session's broker, which no worker here reads.
    source = source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    with contextlib.ExitStack() as stack:
        # Prefetch is one message a worker (CELERY_WORKER_PREFETCH_MULTIPLIER, acks_late): the
        # first to poll takes one hint, the other worker the second.
        workers = [
            stack.enter_context(
                celery_worker(broker.worker_env(), log=tmp_path / f"worker-{i}.log", queue=broker.queue, app=WORKER_APP)
            )
            for i in range(2)
        ]
        hints = {broker.hint(source), broker.hint(source)}
        wait_for(lambda: sum(len(_runs(w.output())) for w in workers) >= 2, timeout=180, proc=workers,
                 what="both hints run")  # fmt: skip
    runs = [_runs(w.output()) for w in workers]

    # Each worker ran one of the two hints, and they ran at the same time.
    assert [len(r) for r in runs] == [1, 1] and {task for r in runs for task in r} == hints
    (start_0, end_0, report_0), (start_1, end_1, report_1) = (next(iter(r.values())) for r in runs)
    assert start_0 < end_1 and start_1 < end_0, "the workers did not overlap"
    reports = [report_0, report_1]
    assert {r["status"] for r in reports} <= {"done", "busy"} and "done" in {r["status"] for r in reports}
    assert not any(r["error"] for r in reports)
    # Each chunk was committed by one of them: their tallies add up to the source, no more.
    assert sum(r["chunks"] for r in reports) == len(MESSAGES)
    assert sum(r["created"] for r in reports) == len(MESSAGES)
    assert sum(r["deduplicated"] for r in reports) == 0

    source.refresh_from_db()
    assert source.status == SourceStatus.DONE and source.chunks_done == len(MESSAGES)
    assert source.memories_created == len(MESSAGES) and source.memories_deduplicated == 0
    assert set(SourceChunk.objects.filter(source=source).values_list("status", flat=True)) == {ChunkStatus.DONE}
    assert Memory.objects.for_bucket(bucket).count() == len(MESSAGES)
    links = SourceChunkMemory.objects.filter(source_id=source.pk)
    assert links.count() == len(MESSAGES)
    assert sorted(links.values_list("chunk__ordinal", flat=True)) == list(range(len(MESSAGES)))
    assert links.values("memory_id").distinct().count() == len(MESSAGES)


@pytest.mark.slow
def test_deleting_while_a_worker_processes_leaves_nothing_behind(bucket, tmp_path):
    """A worker process is midway through a source when it is deleted: the delete takes every
    memory the worker committed, and the worker commits nothing after it."""
    broker = Broker(tmp_path)
    source = source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    with celery_worker(broker.worker_env(), log=tmp_path / "worker.log", queue=broker.queue, app=WORKER_APP) as worker:
        hint = broker.hint(source)
        wait_for(lambda: Source.objects.filter(pk=source.pk, chunks_done__gt=0).exists(), timeout=120,
                 interval=0.02, proc=worker, what="the first chunks")  # fmt: skip
        report = source_delete(source=Source.objects.get(pk=source.pk))
        wait_for(lambda: hint in _runs(worker.output()), timeout=120, proc=worker, what="the hint's run")
    _received, _returned, run = _runs(worker.output())[hint]
    # Deleted midway: the worker had committed some chunks, not all, and stopped at the delete.
    assert 0 < run["chunks"] < len(MESSAGES), run
    assert run["status"] in {"done", "busy"} and not run["error"]
    assert not Source.objects.exists() and not SourceChunk.objects.exists() and not SourceChunkMemory.objects.exists()
    assert Memory.objects.for_bucket(bucket).count() == 0
    assert len(report.deleted_memories) == run["created"]  # all the worker wrote, and nothing after


def test_deleting_while_a_concurrent_run_processes_leaves_nothing_behind(bucket):
    # Two threads of this process; the test above runs the same race against a worker process.
    source = source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    status, report = in_threads(
        lambda: source_process(source_id=source.pk).status,
        lambda: source_delete(source=Source.objects.get(pk=source.pk)),
    )
    # The delete waited for the batch in flight and took its memories; the worker then found
    # the source gone (or never found it).
    assert status in {"done", "busy", "missing"}
    assert not Source.objects.exists() and not SourceChunk.objects.exists() and not SourceChunkMemory.objects.exists()
    assert Memory.objects.for_bucket(bucket).count() == 0
    assert len(report.deleted_memories) <= len(MESSAGES)


# A bucket deleted or merged away between the view's bucket lookup and the source's insert:
# the submission answers 404, like a memory write, not a 500 from the foreign key check.
# The patched content_hash runs after the lookup and before the transaction that inserts.


def _vanishing_bucket(monkeypatch, remove):
    real = content_hash

    def hash_then_remove(kind, payload):
        remove()
        return real(kind, payload)

    monkeypatch.setattr(source_submission, "content_hash", hash_then_remove)


@pytest.mark.parametrize("kind", ["documents", "conversations"])
def test_submission_to_a_bucket_deleted_meanwhile_is_not_found(bucket, api, monkeypatch, kind):
    _vanishing_bucket(monkeypatch, lambda: memory_buckets.bucket_delete(bucket=Bucket.objects.get(pk=bucket.pk)))
    response = api.post(f"/api/v1/buckets/{bucket.pk}/{kind}", SUBMISSIONS[kind], format="json")
    assert response.status_code == 404, response.content
    assert not Source.objects.exists() and not SourceChunk.objects.exists()


@pytest.mark.parametrize("kind", ["documents", "conversations"])
def test_submission_to_a_bucket_merged_away_meanwhile_is_not_found(bucket, tenant, api, monkeypatch, kind):
    target = Bucket.objects.create(tenant=tenant, name="target")
    _vanishing_bucket(
        monkeypatch,
        lambda: memory_buckets.bucket_merge(
            source=Bucket.objects.get(pk=bucket.pk), target=target, remove_source=True, actor=SYSTEM
        ),
    )
    response = api.post(f"/api/v1/buckets/{bucket.pk}/{kind}", SUBMISSIONS[kind], format="json")
    assert response.status_code == 404, response.content
    assert not Source.objects.exists() and not SourceChunk.objects.exists()
    assert not Bucket.objects.filter(pk=bucket.pk).exists()
