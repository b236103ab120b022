"""Real Celery worker processes against real brokers: the embedded filesystem broker and,
when it is reachable, Redis on 127.0.0.1:6379.

The test process plays the web process: it writes through the write service with
embeddings switched off (ENGRAM_EMBEDDINGS=off), so every row it stores needs the
worker — a separate process, which has the model — to fill its embedding. Every
process started here is stopped (or killed) here, by its PID.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from engram_site.models import JobRun, JobStatus
from graph.models import Edge
from maintenance.models import DuplicateCandidate
from maintenance.schedules import ensure_default_schedules
from memories import hooks
from memories.models import PENDING_ENRICHMENT, Memory
from tests.factories import write
from tests.support import base_env, celery_worker, free_port, redis_reachable, test_database_url, use_broker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REDIS_URL = "redis://127.0.0.1:6379/15"


class Broker:
    """How the processes of one test reach the broker, and how to make it unreachable."""

    def __init__(self, kind: str, tmp_path):
        self.kind = kind
        self.queue = f"engram-test-{uuid.uuid4().hex[:12]}"
        self.dir = tmp_path / "broker"
        self.url = REDIS_URL if kind == "redis" else "filesystem://"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a worker process."""
        env = {
            "DATABASE_URL": test_database_url(),
            "ENGRAM_QUEUE": self.queue,
            "REDIS_URL": "",
            "ENGRAM_BROKER_DIR": str(self.dir),
            "CELERY_BROKER_URL": REDIS_URL if self.kind == "redis" else "",
        }
        return base_env(**{**env, **extra})

    def connect(self, *, down: bool = False):
        """Point this (web) process at the broker, or at an unreachable one."""
        if not down:
            return use_broker(self.url, broker_dir=self.dir, queue=self.queue)
        if self.kind == "redis":
            return use_broker(f"redis://127.0.0.1:{free_port()}/15", queue=self.queue)
        blocker = self.dir.parent / "not-a-folder"
        blocker.write_text("a file where the broker folder should be")
        return use_broker(self.url, broker_dir=blocker / "broker", queue=self.queue)

    def cleanup(self) -> None:
        if self.kind == "redis":
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            client.delete(self.queue, f"_kombu.binding.{self.queue}")
            # Messages of killed workers wait in "unacked" for a redelivery that must not
            # reach anybody else's queue.
            for tag, raw in client.hgetall("unacked").items():
                if self.queue.encode() in raw:
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)


@pytest.fixture(params=["filesystem", "redis"])
def broker(request, tmp_path):
    if request.param == "redis" and not redis_reachable(REDIS_URL):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")
    broker = Broker(request.param, tmp_path)
    yield broker
    broker.cleanup()


@pytest.fixture
def schedules(db):
    """The default beat schedules (the flush of other transactional tests removes them),
    with the enrichment sweep due every second instead of every minute."""
    ensure_default_schedules()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    sweep = PeriodicTask.objects.get(name="engram: enrichment sweep")
    sweep.interval = every_second
    sweep.save()
    return sweep


def write_as_web(broker: Broker, bucket, contents: list[str], settings, *, broker_down: bool = False) -> list[str]:
    """Write as the web process does, with the embedding model off; the hint goes to the
    broker after commit (or fails to, with ``broker_down``)."""
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    hooks.reset_backoff()
    try:
        with broker.connect(down=broker_down):
            ids = write(bucket, *contents, sequence=False)
    finally:
        settings.ENGRAM_EMBEDDINGS_ENABLED = True
        hooks.reset_backoff()
    return [str(i) for i in ids]


def pending(ids) -> int:
    return Memory.objects.filter(pk__in=ids).filter(PENDING_ENRICHMENT).count()


def test_a_write_enqueues_enrichment_that_a_worker_completes(broker, bucket, tmp_path, settings):
    contents = [
        "I prefer dark roast coffee in the morning.",
        "In the morning I prefer a dark roast coffee.",
        "My sister Anna works as a nurse in Boston.",
        "The quarterly report is due on the last Friday of June.",
    ]
    # No beat: only the hint the write queues can get this done.
    with celery_worker(broker.env(), log=tmp_path / "worker.log", queue=broker.queue) as worker:
        ids = write_as_web(broker, bucket, contents, settings)
        assert pending(ids) == len(ids)  # the writer had no model
        wait_for(lambda: pending(ids) == 0, timeout=60, proc=worker, what="enrichment")
        # The follow-up runs of the bucket: classification, the near-duplicate check, links.
        wait_for(
            lambda: (
                not Memory.objects.filter(pk__in=ids, classified_scope__isnull=True).exists()
                and DuplicateCandidate.objects.for_bucket(bucket).exists()
            ),
            timeout=30,
            proc=worker,
            what="follow-up work",
        )
        # The graph app asked for its own run after the same commit.
        wait_for(
            lambda: Edge.objects.for_bucket(bucket).filter(predicate="sibling_of").exists(),
            timeout=30,
            proc=worker,
            what="graph extraction",
        )
    assert "Task memories.enrich_bucket[" in worker.output()
    assert "Task graph.extract_bucket[" in worker.output()
    [pair] = DuplicateCandidate.objects.for_bucket(bucket)
    assert {str(pair.memory_a_id), str(pair.memory_b_id)} == {ids[0], ids[1]}


def test_killing_the_worker_mid_batch_loses_and_duplicates_nothing(broker, bucket, schedules, tmp_path, settings):
    contents = [f"Log entry {i}: the greenhouse sensor {i % 7} read {i * 3 % 40} degrees" for i in range(120)]
    # Small batches (one transaction each), so the kill lands between and inside them.
    env = broker.env(ENGRAM_ENRICH_BATCH_SIZE="4")
    with celery_worker(env, log=tmp_path / "worker-1.log", queue=broker.queue) as worker:
        ids = write_as_web(broker, bucket, contents, settings)
        wait_for(lambda: pending(ids) < len(ids), timeout=60, proc=worker, what="the first batches")
        worker.kill()  # SIGKILL: worker, pool process, no shutdown, no acknowledgement
    left = pending(ids)
    assert 0 < left < len(ids), "the kill was meant to land mid-way"
    done_before = dict(Memory.objects.filter(pk__in=ids, embedding__isnull=False).values_list("id", "embedding"))

    # Start again, with beat: the sweep finds what the lost message would have done.
    with celery_worker(env, log=tmp_path / "worker-2.log", queue=broker.queue, beat=True) as worker:
        wait_for(lambda: pending(ids) == 0, timeout=90, proc=worker, what="the sweep to catch up")
    rows = Memory.objects.filter(bucket=bucket)
    assert rows.count() == len(contents)
    assert sorted(rows.values_list("content", flat=True)) == sorted(contents)  # each exactly once
    assert rows.values("text_hash").distinct().count() == len(contents)
    # Rows finished before the kill were not redone (their committed vectors are untouched).
    after = dict(rows.filter(pk__in=list(done_before)).values_list("id", "embedding"))
    assert all(np.array_equal(after[pk], vector) for pk, vector in done_before.items())
    sweep = JobRun.objects.filter(name="enrichment_sweep", status=JobStatus.SUCCEEDED).first()
    assert sweep is not None and sweep.counts["embedded"] > 0


def test_with_the_broker_down_writes_succeed_and_the_sweep_catches_up(broker, bucket, schedules, tmp_path, settings):
    contents = ["The boiler was serviced in May.", "I prefer aisle seats on long flights.", "Our cat is called Miso."]
    # The web process cannot reach the broker: the write must still succeed.
    ids = write_as_web(broker, bucket, contents, settings, broker_down=True)
    assert Memory.objects.filter(pk__in=ids).count() == len(contents)
    assert pending(ids) == len(contents)

    # The broker is back (a worker with beat is running against it): nothing was queued
    # for these rows, yet the sweep fills them in, and their follow-up work runs.
    with celery_worker(broker.env(), log=tmp_path / "worker.log", queue=broker.queue, beat=True) as worker:
        wait_for(lambda: pending(ids) == 0, timeout=90, proc=worker, what="the sweep")
        wait_for(
            lambda: not Memory.objects.filter(pk__in=ids, classified_scope__isnull=True).exists(),
            timeout=30,
            proc=worker,
            what="classification after the sweep",
        )
    assert "Task maintenance.enrichment_sweep[" in worker.output()
    assert "Task memories.enrich_bucket[" not in worker.output()  # no hint ever reached the broker
