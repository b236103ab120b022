"""Faults injected under a running system: the database restarted under load, the broker
restarted under load, the embedding model failing at run time.

Covered elsewhere, not repeated here:
* broker unreachable at write time, the sweep catching up afterwards (filesystem broker
  and Redis):
  tests/maintenance/test_maintenance_worker.py::test_with_the_broker_down_writes_succeed_and_the_sweep_catches_up
* worker SIGKILLed in the middle of a large enrichment batch: no row left unenriched or
  duplicated, finished rows untouched:
  tests/maintenance/test_maintenance_worker.py::test_killing_the_worker_mid_batch_loses_and_duplicates_nothing
* the model raising while a request is written: tests/retrieval/test_search.py::TestModelUnavailable

Every server, worker and database started here is stopped here, by its PID or data directory.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections import Counter

import numpy as np
import psycopg
import pytest

from engram_site.providers import embedding
from memories.models import EnrichmentFailure, Memory
from tests.factories import make_client, search, write
from tests.scripts.http_writer import call
from tests.support import (
    PrivatePostgres,
    PrivateRedis,
    base_env,
    celery_worker,
    manage,
    test_database_url,
    wait_for,
    web_server,
)
from tests.support.load import PROVISION, Client, page, run_clients, server_workers, unhandled_errors

# --- the database restarted under load ----------------------------------------------------------


@pytest.mark.slow
def test_database_restart_under_load_answers_503_then_recovers_without_losing_a_write(pg_home, tmp_path):
    home = pg_home
    pg = PrivatePostgres(home)
    try:
        env = base_env(
            DATABASE_URL=pg.url, ENGRAM_HOME=str(home), ENGRAM_EMBEDDINGS="off", ENGRAM_TOKEN_RATE="100000/min"
        )
        manage("migrate", "--noinput", env=env)
        ids = json.loads(manage("shell", "-c", PROVISION, env=env).stdout.strip().splitlines()[-1])
        bucket, token, cookie = ids["bucket"], ids["token"], ids["cookie"]
        memories = f"/api/v1/buckets/{bucket}/memories"
        log = tmp_path / "server.log"

        with web_server(env, workers=2, log=log) as base:
            stop = threading.Event()
            writers = [
                Client(
                    f"writer-{n}", base, token,
                    lambda k, n=n: ("POST", memories, {"memories": [
                        {"content": f"Writer {n} batch {k} item {i}: the valve {i} was closed"} for i in range(3)
                    ], "sequence": False}),
                    stop,
                )
                for n in range(3)
            ]  # fmt: skip
            searcher = Client(
                "searcher",
                base,
                token,
                lambda k: ("POST", f"/api/v1/buckets/{bucket}/search", {"query": "valve closed", "mode": "hybrid"}),
                stop,
            )
            reader = Client("reader", base, token, lambda k: ("GET", memories + "?page_size=5", None), stop)
            clients = [*writers, searcher, reader]
            finish = run_clients(clients, stop)
            try:
                wait_for(lambda: all(c.answered_ok_since(0) >= 3 for c in clients), timeout=90)
                workers_before = server_workers(base)

                console = [page(base + "/admin/", cookie)]

                down_at = time.monotonic()
                pg.stop()
                console.append(page(base + "/admin/", cookie))
                # Clients keep going against a dead database until each has been answered so.
                wait_for(lambda: all(c.answered_since(down_at, 503) for c in clients), timeout=90)
                pg.start()
                up_at = time.monotonic()
                # The same server process reconnects by itself: every client is answered again.
                wait_for(lambda: all(c.answered_ok_since(up_at) >= 3 for c in clients), timeout=90)
                console.append(page(base + "/admin/", cookie))
                workers_after = server_workers(base)
            finally:
                finish()

            # A 503 is safe to retry: the retry either writes the batch or finds it written.
            retried = {}
            for writer in writers:
                for c in writer.calls:
                    if c["status"] == 503:
                        status, payload, _ = call("POST", base + memories, token, c["body"])
                        assert status == 201, payload
                        retried[json.dumps(c["body"])] = payload["results"]

        assert unhandled_errors(log) == []
        calls = [c for client in clients for c in client.calls]
        assert Counter(c["status"] for c in calls).keys() <= {200, 201, 503}, Counter(c["status"] for c in calls)
        for client in clients:
            failed = [c for c in client.calls if c["status"] == 503]
            assert failed, f"{client.name} never saw the outage"
            for c in failed:
                # Only while the database was away, and as the documented, retryable answer.
                assert c["ended"] > down_at
                assert c["payload"]["code"] == "database_unavailable" and c["headers"].get("Retry-After") == "2"
        assert all(c["status"] in (200, 201) for c in calls if c["ended"] < down_at)
        assert workers_after == workers_before  # no worker was restarted to recover
        # The console, whose session lives in the database: the same retryable 503, not a 500.
        assert [status for status, _ in console] == [200, 503, 200]
        assert "Database unavailable" in console[1][1]

        with psycopg.connect(pg.url) as conn:
            stored = Counter(
                row[0] for row in conn.execute("SELECT content FROM memories WHERE bucket_id = %s", [bucket])
            )
        assert max(stored.values()) == 1
        acknowledged = [
            item["content"] for w in writers for c in w.calls if c["status"] == 201 for item in c["body"]["memories"]
        ]
        assert set(acknowledged) <= set(stored)  # every acknowledged write, once
        for body, results in retried.items():
            batch = [item["content"] for item in json.loads(body)["memories"]]
            assert all(content in stored for content in batch)
            # Not half-applied: the retry found all three items already written, or none.
            assert len({r["deduplicated"] for r in results}) == 1, results
        assert set(stored) == set(acknowledged) | {
            item["content"] for body in retried for item in json.loads(body)["memories"]
        }
    finally:
        pg.stop()


# --- the broker restarted under load ------------------------------------------------------------


@pytest.fixture
def sweep_every_second(db):
    """The default beat schedules, with the enrichment sweep due every second."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from maintenance.schedules import ensure_default_schedules

    ensure_default_schedules()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.filter(name="engram: enrichment sweep").update(interval=every_second)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_broker_restarted_under_load_loses_no_write_and_no_enrichment(tenant, bucket, tmp_path, sweep_every_second):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    broker = PrivateRedis(tmp_path)
    broker.start()
    try:
        shared = {
            "DATABASE_URL": test_database_url(), "CELERY_BROKER_URL": broker.url, "REDIS_URL": "",
            "ENGRAM_QUEUE": f"engram-faults-{uuid.uuid4().hex[:12]}", "ENGRAM_TOKEN_RATE": "100000/min",
        }  # fmt: skip
        token = make_client(tenant).secret
        path = f"/api/v1/buckets/{bucket.pk}/memories"
        pending = Memory.objects.filter(bucket=bucket, embedding__isnull=True)
        # The web process has no model: every row it stores needs the worker.
        with (
            celery_worker(
                base_env(**shared), log=tmp_path / "worker.log", queue=shared["ENGRAM_QUEUE"], beat=True
            ) as worker,
            web_server(base_env(**shared, ENGRAM_EMBEDDINGS="off"), log=tmp_path / "server.log") as base,
        ):
            stop = threading.Event()

            def reading(n: int):
                return lambda k: ("POST", path, {"content": f"Writer {n}, reading {k}: the tank holds {k * 7} litres"})

            writers = [Client(f"writer-{n}", base, token, reading(n), stop) for n in range(2)]
            finish = run_clients(writers, stop)
            try:
                wait_for(lambda: all(w.answered_ok_since(0) >= 3 for w in writers), timeout=90)
                down_at = time.monotonic()
                broker.stop()
                # Writes go on without a broker: each writer gets three more acknowledged first.
                wait_for(lambda: all(w.answered_ok_since(down_at) >= 3 for w in writers), timeout=90)
                broker.start()
                up_at = time.monotonic()
                wait_for(lambda: all(w.answered_ok_since(up_at) >= 3 for w in writers), timeout=60)
            finally:
                finish()
            # The worker reconnects by itself, and what the lost messages would have done
            # gets done: the sweep finds every row still without a vector.
            wait_for(lambda: not pending.exists(), timeout=180, interval=0.5)
            assert worker.alive()
            log = worker.output()
            assert "Connection to broker lost" in log and log.count("Connected to redis://") >= 2

        calls = [c for w in writers for c in w.calls]
        assert {c["status"] for c in calls} == {201}, Counter(c["status"] for c in calls)
        assert any(down_at < c["started"] and c["ended"] < up_at for c in calls)  # writes while it was down
        assert unhandled_errors(tmp_path / "server.log") == []
        stored = Counter(Memory.objects.filter(bucket=bucket).values_list("content", flat=True))
        assert stored == Counter(c["body"]["content"] for c in calls)  # each acknowledged write, once
        assert not Memory.objects.filter(bucket=bucket, text_lemmatized__isnull=True).exists()
    finally:
        broker.stop()


# --- the embedding model failing at run time ----------------------------------------------------

CORPUS = [
    "Our dog Biscuit is a golden retriever who loves the beach.",
    "I prefer dark roast coffee in the morning.",
    "My sister Anna works as a nurse in Boston.",
    "The quarterly report is due on the last Friday of June.",
    "My laptop is a ThinkPad X1 Carbon.",
]


def faulty_encode(fault: str, real):
    """A stand-in for ``SentenceTransformer.encode`` that fails the way a model can."""

    def encode(texts, **kwargs):
        if fault == "raises-mid-batch":
            real(texts[: len(texts) // 2 or 1], **kwargs)  # the first part goes through...
            raise RuntimeError("RuntimeError: CUDA error: an illegal memory access was encountered")
        vectors = real(texts, **kwargs)
        if fault == "nan":
            return np.full_like(vectors, np.nan)
        if fault == "zeros":
            return np.zeros_like(vectors)
        if fault == "wrong-dimensions":
            return vectors[:, :-1]
        if fault == "wrong-count":
            return vectors[:-1]
        if fault == "poisoned-text":  # NaN for one input only
            return np.array(
                [np.full_like(v, np.nan) if "poison" in t else v for t, v in zip(texts, vectors, strict=True)]
            )
        raise AssertionError(fault)

    return encode


@pytest.fixture
def model(monkeypatch):
    """The real model, whose ``encode`` a test may replace; query embeddings are not cached across tests."""
    loaded = embedding.get_model()
    embedding._embed_query_cached.cache_clear()
    yield loaded
    embedding._embed_query_cached.cache_clear()


@pytest.mark.django_db
@pytest.mark.parametrize("fault", ["raises-mid-batch", "nan", "zeros", "wrong-dimensions", "wrong-count"])
def test_a_model_failing_at_run_time_loses_no_write_search_says_keyword_and_the_sweep_fills_in(
    api, bucket, model, monkeypatch, fault
):
    from memories.services import memories_enrich_all_pending

    monkeypatch.setattr(model, "encode", faulty_encode(fault, model.encode))
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    rows = Memory.objects.filter(pk__in=ids)
    assert rows.count() == len(CORPUS)
    assert not rows.filter(embedding__isnull=False).exists()  # stored without a vector, not with garbage
    assert not rows.filter(text_lemmatized__isnull=True).exists()
    assert api.get(f"/api/v1/memories/{ids[4]}").json()["enrichment"]["embedding"] == "pending"
    for mode in ("hybrid", "vector"):
        body = search(api, bucket, "ThinkPad laptop", mode=mode)
        assert body["mode_used"] == "keyword" and "unavailable" in body["warnings"][0]
        assert body["results"][0]["id"] == ids[4]

    monkeypatch.undo()  # the model recovers
    report = memories_enrich_all_pending()
    assert report.embedded == len(CORPUS) and report.failed == 0
    vectors = np.array([np.asarray(v) for v in rows.values_list("embedding", flat=True)])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    body = search(api, bucket, "what kind of canine companion do I have", mode="vector")
    assert body["mode_used"] == "vector" and body["results"][0]["id"] == ids[0]


@pytest.mark.django_db
def test_one_text_the_model_cannot_embed_holds_back_no_other_row(api, bucket, model, monkeypatch):
    from memories.services import memories_enrich_all_pending

    monkeypatch.setattr(model, "encode", faulty_encode("poisoned-text", model.encode))
    ids = write(
        bucket, *CORPUS[:2], "This poison text makes the model return NaN.", *CORPUS[2:], api=api, sequence=False
    )
    rows = Memory.objects.filter(pk__in=ids)
    assert list(rows.filter(embedding__isnull=True).values_list("pk", flat=True)) == [uuid.UUID(ids[2])]
    # The sweep retries it, records the failure (its retry time backs off), and does not loop on it.
    report = memories_enrich_all_pending(batch_size=2)
    assert (report.embedded, report.failed, report.failures_recorded) == (0, 0, 1)
    recorded = EnrichmentFailure.objects.get(memory_id=ids[2], stage="embedding")
    assert "unusable vector" in recorded.last_error
    assert memories_enrich_all_pending().scanned == 0  # until its retry time
    monkeypatch.undo()
    EnrichmentFailure.objects.filter(pk=recorded.pk).update(next_retry_at=recorded.first_failed_at)  # time passes
    assert memories_enrich_all_pending().embedded == 1
    assert not rows.filter(embedding__isnull=True).exists()
    assert not EnrichmentFailure.objects.exists()


@pytest.mark.django_db
def test_a_model_failing_midway_through_a_sweep_leaves_the_rest_for_the_next_sweep(
    bucket, model, monkeypatch, settings
):
    from memories.services import MemoryInput, memories_enrich_all_pending, memories_ingest

    settings.ENGRAM_EMBEDDINGS_ENABLED = False  # written while the model was off
    contents = [f"Sensor {i} in the greenhouse read {20 + i} degrees at noon." for i in range(10)]
    ids = [
        r.id for r in memories_ingest(bucket=bucket, items=[MemoryInput(content=c) for c in contents], sequence=False)
    ]
    settings.ENGRAM_EMBEDDINGS_ENABLED = True
    real, calls = model.encode, []

    def fails_after_the_first_batch(texts, **kwargs):
        calls.append(len(texts))
        if len(calls) > 1:
            raise RuntimeError("the model process ran out of memory")
        return real(texts, **kwargs)

    monkeypatch.setattr(model, "encode", fails_after_the_first_batch)
    report = memories_enrich_all_pending(batch_size=4)
    # The first batch committed; the failing one stopped the run and changed nothing.
    assert (report.embedded, report.failed) == (4, 4)
    rows = Memory.objects.filter(pk__in=ids)
    first = set(rows.order_by("created_at").values_list("pk", flat=True)[:4])
    assert set(rows.filter(embedding__isnull=False).values_list("pk", flat=True)) == first
    before = dict(rows.filter(pk__in=first).values_list("pk", "embedding"))

    monkeypatch.undo()
    report = memories_enrich_all_pending(batch_size=4)
    assert (report.embedded, report.failed) == (6, 0)
    assert not rows.filter(embedding__isnull=True).exists()
    assert all(np.array_equal(v, before[pk]) for pk, v in rows.filter(pk__in=first).values_list("pk", "embedding"))
