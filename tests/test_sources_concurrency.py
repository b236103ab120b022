"""Concurrent submissions and workers: one source, each chunk done once, nothing written twice."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from audit.services import Actor
from memories.models import Memory
from memories.services import buckets as memory_buckets
from sources import services
from sources.models import ChunkStatus, Source, SourceChunk, SourceChunkMemory
from sources.services import MessageInput
from tenants.models import Bucket

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

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    return results


def test_concurrent_identical_submissions_make_one_source(bucket):
    submit = lambda: services.source_submit_conversation(bucket=bucket, messages=MESSAGES)  # noqa: E731
    results = in_threads(submit, submit, submit, submit)
    assert len({r.source.pk for r in results}) == 1
    assert sorted(r.deduplicated for r in results) == [False, True, True, True]
    assert Source.objects.count() == 1 and SourceChunk.objects.count() == len(MESSAGES)


def test_two_workers_on_one_source_do_each_chunk_once(bucket, monkeypatch):
    monkeypatch.setattr(services, "BATCH_CHUNKS", 4)  # many small batches: the workers interleave
    source = services.source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    work = lambda: services.source_process(source_id=source.pk)  # noqa: E731
    reports = in_threads(work, work)
    assert {r.status for r in reports} <= {"done", "busy"} and "done" in {r.status for r in reports}

    source.refresh_from_db()
    assert source.status == "done" and source.chunks_done == len(MESSAGES)
    assert set(SourceChunk.objects.filter(source=source).values_list("status", flat=True)) == {ChunkStatus.DONE}
    assert sum(r.chunks for r in reports) == len(MESSAGES)  # each chunk committed by one of them
    assert Memory.objects.for_bucket(bucket).count() == len(MESSAGES)
    assert SourceChunkMemory.objects.filter(source_id=source.pk).count() == len(MESSAGES)
    assert source.memories_created == len(MESSAGES) and source.memories_deduplicated == 0


def test_deleting_while_a_worker_processes_leaves_nothing_behind(bucket):
    source = services.source_submit_conversation(bucket=bucket, messages=MESSAGES).source
    status, report = in_threads(
        lambda: services.source_process(source_id=source.pk).status,
        lambda: services.source_delete(source=Source.objects.get(pk=source.pk)),
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
    real = services.content_hash

    def hash_then_remove(kind, payload):
        remove()
        return real(kind, payload)

    monkeypatch.setattr(services, "content_hash", hash_then_remove)


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
