"""The per-process search statistics (memories.retrieval.stats): one count per bucket however
many threads ask at once, and the same figures as before in fewer statements."""

from __future__ import annotations

import contextlib
import threading
import time
import types

import pytest
from django.db import connection, connections

from engram_site.scoping import in_this_context
from memories.retrieval import stats
from memories.retrieval.stats import bucket_stats
from tests.factories import write
from tests.support.processes import wait_for


@pytest.fixture
def counted(monkeypatch):
    """The statements the statistics send, each held ``delay`` seconds first, so that threads
    asking together overlap (as a new bucket's first searches do)."""
    sent: list[str] = []
    lock = threading.Lock()
    delay = {"s": 0.2}

    @contextlib.contextmanager
    def cursor():
        with connection.cursor() as cur:  # this thread's connection
            real = cur.execute

            def execute(sql, params=None):
                with lock:
                    sent.append(sql)
                # sleep-ok: the statement is held so that the threads asking together overlap
                time.sleep(delay["s"])
                return real(sql, params)

            cur.execute = execute
            yield cur

    monkeypatch.setattr(stats, "read_connection", lambda: types.SimpleNamespace(cursor=cursor))
    bucket_stats.clear()
    yield types.SimpleNamespace(sent=sent, delay=delay)
    bucket_stats.clear()


def _together(work, threads: int) -> list:
    """``work()`` in ``threads`` threads started at once; their answers."""
    answers: list = [None] * threads
    failures: list = []
    ready = threading.Barrier(threads)

    def run(i):
        try:
            ready.wait(10)
            answers[i] = work()
        except Exception as exc:  # reported by the test
            failures.append(exc)
        finally:
            connections.close_all()  # this thread's own

    started = [threading.Thread(target=in_this_context(lambda i=i: run(i))) for i in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(30)
    assert not failures, failures
    return answers


def _size_statements(sent: list[str]) -> int:
    return sum("count(*) FILTER" in sql for sql in sent)


def test_threads_asking_the_size_of_an_uncounted_bucket_count_it_once(bucket, counted):
    sizes = _together(lambda: bucket_stats.size(bucket), 8)
    assert _size_statements(counted.sent) == 1
    assert all(size == sizes[0] for size in sizes) and sizes[0]["n"] == 0


def test_the_size_is_counted_again_by_who_asks_after_a_write_during_the_count(bucket, counted):
    # A write lands while the count runs: the count is answered to whoever was waiting for it,
    # but not kept, so the next search counts the bucket with the new rows.
    counting = threading.Thread(target=in_this_context(lambda: (bucket_stats.size(bucket), connection.close())))
    counting.start()
    wait_for(lambda: counted.sent, timeout=10, interval=0.01, what="the count's statement")  # held 0.2 s
    bucket_stats.note_writes(bucket.pk, 1)
    counting.join(30)
    bucket_stats.size(bucket)
    assert _size_statements(counted.sent) == 2


def test_a_failed_count_is_counted_by_the_threads_that_waited_for_it(bucket, counted, monkeypatch):
    real = bucket_stats._count
    calls: list[bool] = []

    def count(bucket, flight):
        calls.append(flight is not None)
        if len(calls) == 1:
            time.sleep(0.2)  # sleep-ok: the others are waiting by now
            raise RuntimeError("the first count failed")
        return real(bucket, flight)

    monkeypatch.setattr(bucket_stats, "_count", count)
    ready = threading.Barrier(4)
    results: list = []

    def ask():
        ready.wait(10)
        try:
            results.append(bucket_stats.size(bucket)["n"])
        except RuntimeError:
            results.append("failed")
        finally:
            connection.close()

    threads = [threading.Thread(target=in_this_context(ask)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(map(str, results)) == ["0", "0", "0", "failed"]


def test_the_size_and_average_lengths_are_one_statement(api, bucket, django_assert_num_queries):
    write(bucket, "The red kettle is in the cupboard", "Buy oat milk", api=api, sequence=False)
    bucket_stats.clear()
    with django_assert_num_queries(1):
        size = bucket_stats.size(bucket)
    assert size["n"] == 2
    # Lemmas of "the red kettle is in the cupboard" and "buy oat milk", stop words included.
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT avg({stats.DOC_LENGTH['lemmatized_tsv']}) FROM memories m WHERE bucket_id = %s", [bucket.pk]
        )
        assert size["avgdl"] == pytest.approx(float(cur.fetchone()[0]))
