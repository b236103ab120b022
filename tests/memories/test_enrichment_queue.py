"""What a write queues after its commit: memories' own receiver of ``memories_created`` queues
one chain, the enrichment task first, then the key documents' build, then the follow-up work
the apps above registered; a restored memory, which comes back with its columns, queues none of
it."""

from __future__ import annotations

import pytest

from memories import hooks
from memories.models import DeletedMemory, Memory
from memories.services import MemoryInput, memories_ingest, memory_delete, memory_restore

pytestmark = pytest.mark.django_db

FOLLOW_UPS = [
    "maintenance.classify_memories",
    "maintenance.find_duplicates",
    "maintenance.find_conflicts",
    "maintenance.link_new_memories",
]


@pytest.fixture
def published(monkeypatch):
    """What reaches the broker, by ``what``: the signatures, not sent."""
    sent: dict[str, list] = {}

    def publish(signature_factory, *, what: str, count: int) -> bool:
        sent.setdefault(what, []).append(signature_factory())
        return True

    monkeypatch.setattr(hooks, "publish", publish)
    return sent


def test_a_write_queues_enrichment_then_the_follow_ups_after_its_commit(
    bucket, published, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
        assert published == {}  # nothing before the commit
    [chain] = published["enrichment"]
    assert [s.task for s in chain.tasks] == [
        "memories.enrich_memories", "memories.build_passages", "memories.build_keys", *FOLLOW_UPS,
    ]  # fmt: skip
    assert chain.tasks[0].args == ([str(result.id)],) and chain.tasks[0].immutable
    assert "graph extraction" in published  # the graph's receiver of the same signal


def test_without_keys_the_chain_builds_none(bucket, published, django_capture_on_commit_callbacks, settings):
    settings.ENGRAM_KEYS_ENABLED = False
    with django_capture_on_commit_callbacks(execute=True):
        memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    [chain] = published["enrichment"]
    assert [s.task for s in chain.tasks] == ["memories.enrich_memories", "memories.build_passages", *FOLLOW_UPS]


def test_a_duplicate_write_queues_nothing(bucket, published, django_capture_on_commit_callbacks):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    assert result.deduplicated and published == {}


def test_a_restored_memory_is_extracted_again_but_not_enriched(bucket, published, django_capture_on_commit_callbacks):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    memory_delete(memory=Memory.objects.get(pk=result.id))
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        memory_restore(deleted=DeletedMemory.objects.get(pk=result.id))
    assert "enrichment" not in published
    [extraction] = published["graph extraction"]
    assert extraction.task == "graph.extract_memories"
