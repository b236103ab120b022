"""Key documents kept in step with their memories: built after the graph, built again when what
they were made of changes, gone with the memory, moved with its bucket; the backfill resumes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.services import Actor
from graph.services.extraction import graph_extract_memories
from maintenance.services.enrichment import KEY_SWEEP_LIMIT  # noqa: F401  (the sweep's key pass exists)
from memories import keys
from memories.models import DeletedMemory, Memory, MemoryKey
from memories.services import memories_erase, memory_delete, memory_restore, memory_update
from memories.services.buckets import bucket_create, bucket_merge
from memories.services.keys import keys_pending_count, memory_keys_build
from tests.factories import write, write_extracted

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")
TUESDAY = datetime(2023, 5, 9, 15, 0, tzinfo=UTC)


def _key(memory_id) -> MemoryKey | None:
    return MemoryKey.objects.filter(memory_id=memory_id).first()


def test_a_key_waits_for_the_graph_then_is_built_with_its_facts(bucket):
    [memory] = write(bucket, "Alice Chen moved to Denver last year.", sequence=False)
    report = memory_keys_build(memory_ids=[memory])
    assert (report.scanned, report.waiting, report.built) == (1, 1, 0) and _key(memory) is None
    graph_extract_memories(memory_ids=[memory])
    assert memory_keys_build(memory_ids=[memory]).built == 1
    assert "Alice Chen lives in Denver" in _key(memory).text
    # Built: nothing left to do.
    assert memory_keys_build(memory_ids=[memory]).scanned == 0


def test_without_the_graph_nothing_waits(bucket, monkeypatch):
    from engram_site.providers import nlp

    monkeypatch.setattr(nlp, "available", lambda: False)
    [memory] = write(bucket, "The boiler is serviced in March.", sequence=False)
    assert memory_keys_build(memory_ids=[memory]).built == 1


def test_extracting_again_marks_the_key_stale_and_it_is_built_again(bucket):
    [memory] = write_extracted(bucket, "Alice Chen moved to Denver.")
    memory_keys_build(memory_ids=[memory])
    built_at = _key(memory).built_at
    graph_extract_memories(memory_ids=[memory])
    assert _key(memory).stale
    assert memory_keys_build(memory_ids=[memory]).built == 1
    key = _key(memory)
    assert not key.stale and key.built_at >= built_at


def test_an_edit_deletes_the_key_and_the_next_build_says_the_new_text(bucket):
    [memory] = write_extracted(bucket, {"content": "Last Tuesday I ran a 10k.", "created_at": TUESDAY})
    memory_keys_build(memory_ids=[memory])
    memory_update(memory=Memory.objects.get(pk=memory), content="Next month I run a marathon.")
    assert _key(memory) is None
    graph_extract_memories(memory_ids=[memory])
    memory_keys_build(memory_ids=[memory])
    text = _key(memory).text
    assert "marathon" in text and "June 2023" in text and "10k" not in text
    # A new writing time dates the same words anew.
    memory_update(memory=Memory.objects.get(pk=memory), created_at=datetime(2024, 1, 10, tzinfo=UTC))
    assert _key(memory) is None
    memory_keys_build(memory_ids=[memory])
    assert "February 2024" in _key(memory).text


def test_a_deleted_memory_takes_its_key_and_a_restored_one_is_built_again(bucket):
    [memory] = write_extracted(bucket, "Alice Chen moved to Denver.")
    memory_keys_build(memory_ids=[memory])
    memory_delete(memory=Memory.objects.get(pk=memory))
    assert not MemoryKey.objects.filter(memory_id=memory).exists()
    memory_restore(deleted=DeletedMemory.objects.get(pk=memory))
    assert keys_pending_count(bucket=bucket) == 1
    assert memory_keys_build(bucket=bucket).waiting == 1  # for the graph, which extracts it again
    graph_extract_memories(memory_ids=[memory])
    assert memory_keys_build(bucket=bucket).built == 1


def test_an_erasure_counts_and_deletes_the_keys(tenant, bucket):
    ids = write_extracted(bucket, "I prefer tea.", "My cat is called Miso.", agent_id="agent-zed")
    [kept] = write_extracted(bucket, "The office is in Leeds.", agent_id="agent-amy")
    memory_keys_build(bucket=bucket)
    report = memories_erase(tenant=tenant, fields={"agent_id": "agent-zed"}, actor=SYSTEM)
    assert report.keys == 2
    assert not MemoryKey.objects.filter(memory_id__in=ids).exists() and _key(kept) is not None


def test_a_bucket_merge_moves_the_keys_and_an_absorbed_memory_takes_its_own(tenant, bucket):
    second = bucket_create(tenant=tenant, name="second")
    [moved, twin] = write_extracted(bucket, "My cat is called Miso.", "I prefer tea.")
    [survivor] = write_extracted(second, "I prefer tea.")
    memory_keys_build(bucket=bucket)
    memory_keys_build(bucket=second)
    bucket_merge(source=bucket, target=second, remove_source=True, actor=SYSTEM)
    assert _key(moved).bucket_id == second.pk
    assert _key(twin) is None  # absorbed by the target's "I prefer tea."
    assert _key(survivor).stale  # it took what hung on the absorbed row
    assert memory_keys_build(bucket=second).built == 1


def test_the_backfill_resumes_and_a_new_recipe_builds_again(bucket, monkeypatch):
    ids = write_extracted(bucket, *[f"Fact number {i} about the garden." for i in range(5)])
    assert keys_pending_count(bucket=bucket) == 5
    assert memory_keys_build(bucket=bucket, limit=2, batch_size=1).built == 2
    assert keys_pending_count(bucket=bucket) == 3  # a stopped run leaves the rest for the next
    assert memory_keys_build(bucket=bucket).built == 3
    monkeypatch.setattr(keys, "KEY_VERSION", keys.KEY_VERSION + 1)
    assert keys_pending_count(bucket=bucket) == 5
    assert memory_keys_build(memory_ids=ids).built == 5
    assert set(MemoryKey.objects.for_bucket(bucket).values_list("version", flat=True)) == {keys.KEY_VERSION}


def test_a_key_of_another_embedding_model_is_built_again(bucket):
    [memory] = write_extracted(bucket, "Alice Chen moved to Denver.")
    memory_keys_build(memory_ids=[memory])
    MemoryKey.objects.filter(memory_id=memory).update(embedding_model="some-older-model")
    assert keys_pending_count(bucket=bucket) == 1
    memory_keys_build(memory_ids=[memory])
    assert _key(memory).embedding_model == bucket.embedding_model


def test_a_memory_without_a_key_goes_before_keys_due_again(bucket):
    """Under a steady ingest the graph marks older keys stale batch after batch (their entities'
    descriptions changed): those are searched meanwhile, a new memory's missing key is not."""
    older = write_extracted(bucket, *[f"Alice Chen planted tomato number {i}." for i in range(3)])
    memory_keys_build(memory_ids=older)
    MemoryKey.objects.filter(memory_id__in=older).update(stale=True)
    [newer] = write_extracted(bucket, "The greenhouse door sticks in the rain.")
    report = memory_keys_build(bucket=bucket, limit=1)
    assert report.built == 1 and _key(newer) is not None
    assert MemoryKey.objects.filter(memory_id__in=older, stale=True).count() == 3
    assert memory_keys_build(bucket=bucket).built == 3  # then the stale ones, oldest first
    assert keys_pending_count(bucket=bucket) == 0


def test_keys_due_again_are_reached_past_memories_that_wait_for_the_graph(bucket):
    [older] = write_extracted(bucket, "Alice Chen moved to Denver.")
    memory_keys_build(memory_ids=[older])
    MemoryKey.objects.filter(memory_id=older).update(stale=True)
    waiting = write(bucket, *[f"Bob Stone fixed bicycle number {i}." for i in range(4)], sequence=False)
    report = memory_keys_build(bucket=bucket, limit=4, batch_size=2)
    # The newest wait for the graph: the first batch of them ends that part, the stale key is built.
    assert (report.scanned, report.waiting, report.built) == (3, 2, 1)
    assert not _key(older).stale
    assert not MemoryKey.objects.filter(memory_id__in=waiting).exists()
