"""Server-Timing: every API answer says where its time went (engram_site/stopwatch.py)."""

from __future__ import annotations

import re
import threading

import pytest
from django.test import override_settings

from engram_site import stopwatch
from memories.retrieval import concurrency
from tests.factories import write

pytestmark = pytest.mark.django_db


def timings(response) -> dict[str, tuple[float, str]]:
    """Server-Timing's metrics: name -> (milliseconds, description)."""
    found = {}
    for part in response["Server-Timing"].split(", "):
        match = re.fullmatch(r'([\w.-]+);dur=([\d.]+)(?:;desc="([^"]*)")?', part)
        assert match, part
        found[match[1]] = (float(match[2]), match[3] or "")
    return found


@pytest.fixture
def _close_thread_connections():
    from memories.retrieval import close_search_connections

    yield
    close_search_connections()


def _search_and_check_timing(api, bucket) -> None:
    write(bucket, "Maya moved from Lisbon to Porto in March 2025.", "Maya is allergic to peanuts.", api=api)
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "where does Maya live?"}, format="json")
    assert response.status_code == 200
    metrics = timings(response)
    # The signals (the vector one in an executor thread when parallel), the query's embedding,
    # the rows read for the contenders, the JSON rendering, and the statements sent.
    for stage in ("total", "cpu", "db", "search", "keyword", "vector", "embed", "search.rows", "render"):
        assert stage in metrics, (stage, response["Server-Timing"])
    statements = int(metrics["db"][1].split()[0])
    assert statements >= 3  # authentication, the keyword signal, the rows at least
    assert metrics["search"][0] <= metrics["total"][0]
    # Statements of parallel threads overlap in time, so their sum may pass the request's wall
    # time; it cannot pass it once for each thread that can run one (the caller and both pools).
    threads = 1 + concurrency.SEARCH_WORKERS + concurrency.WALK_WORKERS
    assert metrics["db"][0] <= metrics["total"][0] * threads


def test_a_search_answer_names_its_stages_its_cpu_and_its_sql(api, bucket):
    _search_and_check_timing(api, bucket)


@pytest.mark.django_db(transaction=True)
@override_settings(ENGRAM_SEARCH_PARALLEL=True)
def test_stages_run_in_the_searchs_threads_count_too(api, bucket, _close_thread_connections):
    _search_and_check_timing(api, bucket)


def test_answers_outside_the_api_carry_no_timing(client):
    assert "Server-Timing" not in client.get("/health")


def test_a_stage_outside_a_request_records_nothing_and_one_inside_sums_its_runs():
    with stopwatch.stage("free"):
        pass  # no stopwatch: nothing to record, no error
    with stopwatch.running() as watch:
        for _ in range(3):
            with stopwatch.stage("walk"):
                pass
        # A plain thread starts with an empty context: its stages are not this request's.
        thread = threading.Thread(target=lambda: stopwatch.stage("other").__enter__())
        thread.start()
        thread.join()
    assert list(watch.laps) == ["walk"] and watch.laps["walk"].count == 3
    assert "walk;dur=" in watch.header(total=0.01, cpu=0.005) and "in 3 runs" in watch.header(total=0.01, cpu=0.005)
