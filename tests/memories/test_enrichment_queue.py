"""What a write queues after its commit: a run of each follow-up stage on its bucket — the
columns and passages, the key documents, classification, the near-duplicate/contradiction/link
checks, the graph — not a chain per write. However many writes a bucket gets, at most one message
per stage waits (engram_site/jobs/coalesce.py); a restored memory, which comes back with its
columns, asks for no enrichment. A lost message loses nothing: the sweeps find the rows."""

from __future__ import annotations

import pytest
from django.core.cache import caches

from engram_site.jobs import coalesce
from graph.models import Processed
from maintenance.models import PendingComparison
from memories import hooks
from memories.models import DeletedMemory, Memory, MemoryKey
from memories.services import MemoryInput, memories_ingest, memory_delete, memory_restore
from tests.factories import write

pytestmark = pytest.mark.django_db

STAGES = {"enrichment", "key documents", "classification", "comparisons", "graph extraction"}


@pytest.fixture
def published(monkeypatch):
    """What reaches the broker, by ``what``: the signatures, not sent."""
    sent: dict[str, list] = {}

    def publish(signature_factory, *, what: str, count: int) -> bool:
        sent.setdefault(what, []).append(signature_factory())
        return True

    monkeypatch.setattr(hooks, "publish", publish)
    return sent


def test_a_write_asks_for_each_stage_of_its_bucket_after_its_commit(
    bucket, published, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
        assert published == {}  # nothing before the commit
    assert set(published) == STAGES
    assert {s.task for sigs in published.values() for s in sigs} == {
        "memories.enrich_bucket", "memories.build_keys_bucket", "maintenance.classify_bucket",
        "maintenance.compare_bucket", "graph.extract_bucket",
    }  # fmt: skip
    assert all(sigs[0].args == (str(bucket.pk),) and sigs[0].immutable for sigs in published.values())
    # The per-write checks have their memory on their list (the queue of record).
    assert PendingComparison.objects.filter(memory_id=result.id).exists()


def test_many_writes_to_a_bucket_queue_one_message_per_stage(bucket, published, django_capture_on_commit_callbacks):
    for n in range(20):
        with django_capture_on_commit_callbacks(execute=True):
            write(bucket, f"Reading number {n} of the boiler's pressure gauge", f"Note {n} about the heating")
    assert Memory.objects.for_bucket(bucket).count() == 40
    assert {what: len(sigs) for what, sigs in published.items()} == dict.fromkeys(STAGES, 1)


def test_another_bucket_gets_its_own_runs(bucket, other_bucket, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        write(bucket, "The boiler is serviced in March")
    with django_capture_on_commit_callbacks(execute=True):
        write(other_bucket, "The boiler is serviced in March")
    assert {what: len(sigs) for what, sigs in published.items()} == dict.fromkeys(STAGES, 2)


def test_without_keys_no_key_stage_is_asked_for(bucket, published, django_capture_on_commit_callbacks, settings):
    settings.ENGRAM_KEYS_ENABLED = False
    with django_capture_on_commit_callbacks(execute=True):
        memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    assert set(published) == STAGES - {"key documents"}


def test_a_duplicate_write_queues_nothing(bucket, published, django_capture_on_commit_callbacks):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    published.clear()
    caches["shared"].clear()
    with django_capture_on_commit_callbacks(execute=True):
        [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    assert result.deduplicated and published == {}


def test_a_restored_memory_is_extracted_again_but_not_enriched(bucket, published, django_capture_on_commit_callbacks):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The boiler is serviced in March")])
    memory_delete(memory=Memory.objects.get(pk=result.id))
    published.clear()
    caches["shared"].clear()
    with django_capture_on_commit_callbacks(execute=True):
        memory_restore(deleted=DeletedMemory.objects.get(pk=result.id))
    assert set(published) == {"graph extraction"}


def test_a_run_queues_the_next_when_a_write_asked_during_it(bucket):
    sent = []

    def publish():
        sent.append("run")
        return True

    def step():
        # A write commits while the run works: its request sets the mark (the run cleared it).
        coalesce.request("test", bucket.pk, publish)
        return {"scanned": 1}, False

    assert coalesce.request("test", bucket.pk, publish) and sent == ["run"]
    assert not coalesce.request("test", bucket.pk, publish)  # queued already: no second message
    result = coalesce.run("test", bucket.pk, step=step, publish=publish)
    assert result["requeued"] == 1 and sent == ["run", "run", "run"]


def test_a_run_takes_batches_until_nothing_is_left_then_stops(bucket):
    sent, left = [], [3]

    def step():
        left[0] -= 1
        return {"scanned": 10}, left[0] > 0

    result = coalesce.run("test", bucket.pk, step=step, publish=lambda: sent.append("run") or True)
    assert result == {"stage": "test", "scanned": 30} and sent == []


def test_a_run_out_of_time_queues_itself_again(bucket):
    sent = []
    result = coalesce.run(
        "test", bucket.pk, step=lambda: ({"scanned": 10}, True), publish=lambda: sent.append("run") or True,
        budget_seconds=0,
    )  # fmt: skip
    assert result["scanned"] == 10 and result["requeued"] == 1 and sent == ["run"]


def test_classification_does_not_wait_for_the_graph_or_the_keys(bucket, settings):
    from maintenance.tasks import classify_bucket

    settings.ENGRAM_KEYS_ENABLED = True
    ids = write(bucket, "I prefer dark roast coffee in the morning.", "The team meets on Tuesdays at ten.")
    assert not Processed.objects.filter(memory_id__in=ids).exists()  # the graph has not run
    result = classify_bucket(str(bucket.pk))
    assert result["classified"] == 2
    assert not Memory.objects.filter(pk__in=ids, classified_scope__isnull=True).exists()
    assert not MemoryKey.objects.filter(memory_id__in=ids).exists()  # the keys still wait for the graph


def test_the_stages_of_a_bucket_fill_its_derived_data(bucket, celery_eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ids = write(bucket, "I prefer dark roast coffee in the morning.", "In the morning I prefer dark roast coffee.")
    rows = Memory.objects.filter(pk__in=ids)
    assert not rows.filter(classified_scope__isnull=True).exists()
    assert Processed.objects.filter(memory_id__in=ids).count() == 2
    assert MemoryKey.objects.filter(memory_id__in=ids).count() == 2  # built once the graph had them
    assert not PendingComparison.objects.filter(memory_id__in=ids).exists()


def test_lost_messages_lose_nothing_the_sweeps_fill_the_rows(bucket, monkeypatch, django_capture_on_commit_callbacks):
    """The broker took no message (down, or the worker died with them): the periodic sweeps,
    which read the database, not the queue, do every stage's work."""
    from graph.tasks import extract_pending
    from maintenance.tasks import classify, enrichment_sweep

    monkeypatch.setattr(hooks, "publish", lambda *args, **kwargs: False)  # every message lost
    with django_capture_on_commit_callbacks(execute=True):
        ids = write(bucket, "I prefer dark roast coffee in the morning.", "In the morning I prefer dark roast coffee.")
    rows = Memory.objects.filter(pk__in=ids)
    assert rows.filter(classified_scope__isnull=True).count() == 2
    assert PendingComparison.objects.filter(memory_id__in=ids).count() == 2
    monkeypatch.undo()
    ran = []
    monkeypatch.setattr(coalesce, "request", lambda stage, bucket_id, publish: ran.append((stage, bucket_id)))
    monkeypatch.setattr("maintenance.services.comparisons.STALE_SECONDS", 0)
    extract_pending()
    enrichment_sweep()  # its key pass builds the keys the graph was waiting for
    classify()
    assert not rows.filter(classified_scope__isnull=True).exists()
    assert Processed.objects.filter(memory_id__in=ids).count() == 2
    assert MemoryKey.objects.filter(memory_id__in=ids).count() == 2
    # The checks' list is handed to a new run of the bucket's stage.
    assert ("compare", bucket.pk) in ran


def test_the_checks_share_each_memorys_neighbours_and_find_what_each_finds_alone(bucket, monkeypatch):
    """The three checks of a batch ask for each memory's neighbours once (maintenance.nearest.shared):
    the same neighbours, cut to each check's count and floor, as separate queries give."""
    from maintenance import nearest

    ids = write(
        bucket,
        "I prefer dark roast coffee in the morning.",
        "In the morning I prefer dark roast coffee.",
        "Our cat Miso sleeps on the radiator.",
        "The boiler is serviced every March.",
        "I am a vegetarian and never eat meat.",
        "Dinner tonight was a steak with fries.",
        sequence=False,
    )
    alone = {
        (i, k, floor): nearest.nearest(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=i, k=k,
                                       min_similarity=floor, exact=True)
        for i in ids for k, floor in [(2, 0.5), (4, 0.1), (5, -1.0)]
    }  # fmt: skip
    queries = []
    original = nearest._nearest
    monkeypatch.setattr(nearest, "_nearest", lambda **kw: queries.append(kw["memory_id"]) or original(**kw))
    with nearest.shared(5):
        together = {
            (i, k, floor): nearest.nearest(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=i, k=k,
                                           min_similarity=floor, exact=True)
            for (i, k, floor) in alone
        }  # fmt: skip
    assert together == alone
    assert sorted(queries) == sorted(ids)  # one query per memory, not three
