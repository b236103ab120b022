"""Concurrent writers of the same text end with exactly one row (the unique index decides)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from django.db import connection

from engram_site.scoping import in_this_context
from memories.models import Memory
from tests.support import ROOT, StartLine, base_env, test_database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_concurrent_processes_writing_overlapping_content_leave_one_row_each(bucket, tmp_path):
    texts = [f"Shared fact number {i}: the meeting is on Thursday" for i in range(30)]
    workers = 4
    # Models are irrelevant to the invariant; keep the processes light (the script turns the lemmatizer off).
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off")
    start_line = StartLine(tmp_path / "start")
    procs = []
    for seed in range(workers):
        order = texts[:]
        random.Random(seed).shuffle(order)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.scripts.ingest_worker", str(bucket.pk), str(start_line.folder), *order],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    start_line.go_when_ready(workers, procs=procs)
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        outputs.append([json.loads(line) for line in out.splitlines()])

    assert Memory.objects.filter(bucket=bucket).count() == len(texts)
    ids_by_text: dict[str, set[str]] = {}
    for lines in outputs:
        assert len(lines) == len(texts)
        for line in lines:
            ids_by_text.setdefault(line["content"], set()).add(line["id"])
    # Every writer was told the same id for the same text...
    assert all(len(ids) == 1 for ids in ids_by_text.values())
    # ...and exactly one writer per text created it.
    created = [line["content"] for lines in outputs for line in lines if not line["deduplicated"]]
    assert sorted(created) == sorted(texts)


def test_batches_sharing_texts_in_opposite_orders_wait_for_each_other_instead_of_deadlocking(bucket):
    """Batch rows are inserted in one order of texts (length, then hash), so two
    transactions holding texts of each other's batches queue on the unique index rather
    than deadlock (which PostgreSQL resolves by failing one of them)."""
    import threading

    from django.db import connections, transaction

    from memories.services import MemoryInput, memories_ingest
    from memories.text import hash_key

    first, second = sorted(["The boiler was serviced in May", "The roof was repaired in June"], key=hash_key)
    holding, go = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def holder():  # holds `first` uncommitted, then writes `second`
        try:
            with transaction.atomic():
                memories_ingest(bucket=bucket, items=[MemoryInput(content=first)])
                holding.set()
                go.wait(30)
                outcome["holder"] = memories_ingest(bucket=bucket, items=[MemoryInput(content=second)])
        except Exception as exc:
            outcome["holder"] = exc
        finally:
            connections.close_all()

    def batch():  # the same two texts, in the other order
        try:
            items = [MemoryInput(content=second), MemoryInput(content=first)]
            outcome["batch"] = memories_ingest(bucket=bucket, items=items)
        except Exception as exc:
            outcome["batch"] = exc
        finally:
            connections.close_all()

    def deadlocks() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            return cur.fetchone()[0]

    before = deadlocks()
    threads = [threading.Thread(target=in_this_context(holder)), threading.Thread(target=in_this_context(batch))]
    threads[0].start()
    assert holding.wait(60)
    threads[1].start()

    def batch_queued() -> bool:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return bool(cur.fetchone()[0])

    wait_for(batch_queued, timeout=30, interval=0.05)  # the batch queues behind the holder
    go.set()
    for thread in threads:
        thread.join(60)

    assert not isinstance(outcome["holder"], Exception), outcome["holder"]
    assert not isinstance(outcome["batch"], Exception), outcome["batch"]
    assert [r.deduplicated for r in outcome["batch"]] == [True, True]
    assert Memory.objects.filter(bucket=bucket).count() == 2
    assert deadlocks() == before  # not even one resolved by a retry


def test_a_transaction_rolled_back_by_a_deadlock_answers_409_retry_not_503():
    from django.db import OperationalError
    from psycopg.errors import DeadlockDetected

    from engram_site.exceptions import api_exception_handler

    try:
        try:
            raise DeadlockDetected("deadlock detected")
        except DeadlockDetected as cause:
            raise OperationalError("deadlock detected") from cause
    except OperationalError as exc:
        response = api_exception_handler(exc, {})
    assert response.status_code == 409 and response.data["code"] == "retry"
