"""/metrics: Prometheus text with Engram's instruments, refused without the token when one is
set, and added up across the web server's worker processes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.support import base_env, http_get, test_database_url, web_server


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_scrape_after_a_search_shows_the_search_histogram_for_its_mode(api, bucket):
    api.post(f"/api/v1/buckets/{bucket.id}/memories", {"content": "Alice lives in Oslo."}, format="json")
    before = scrape(api)
    answer = api.post(
        f"/api/v1/buckets/{bucket.id}/search", {"query": "where does Alice live", "mode": "keyword"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    after = scrape(api)

    count = "engram_search_duration_seconds_count"
    assert value(after, count, mode="keyword") == value(before, count, mode="keyword") + 1
    assert value(after, count, mode="hybrid") == value(before, count, mode="hybrid")
    signal = "engram_search_signal_duration_seconds_count"
    assert value(after, signal, signal="keyword") == value(before, signal, signal="keyword") + 1
    route = "api/v1/buckets/<str:bucket_id>/search"
    requests = "engram_http_request_duration_seconds_count"
    assert value(after, requests, route=route, method="POST", status="2xx") == 1 + value(
        before, requests, route=route, method="POST", status="2xx"
    )


def test_writes_embedding_batches_and_the_backlog_are_counted(api, bucket, django_capture_on_commit_callbacks):
    before = scrape(api)
    body = {"memories": [{"content": "Bob drinks green tea."}, {"content": "Bob drinks green tea."}]}
    # Writes are counted once committed.
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post(f"/api/v1/buckets/{bucket.id}/memories", body, format="json").status_code in (200, 201)
    after = scrape(api)

    written = "engram_memories_written_total"
    assert value(after, written, outcome="created") == value(before, written, outcome="created") + 1
    assert value(after, written, outcome="deduplicated") == value(before, written, outcome="deduplicated") + 1
    batches = "engram_embedding_batch_duration_seconds_count"
    assert value(after, batches) > value(before, batches)
    assert ("engram_enrichment_backlog", ()) in after
    assert any(name == "engram_db_connections" for name, _ in after)


@override_settings(ENGRAM_METRICS_TOKEN="scrape-secret")
def test_a_scrape_without_the_metrics_token_is_refused(client, db):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert b"engram_" not in client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").content
    assert scrape(client, HTTP_AUTHORIZATION="Bearer scrape-secret")


def test_a_job_run_is_counted_by_outcome(client, db):
    from engram_site.jobs.runner import run_job

    before = scrape(client)
    run_job("metrics-probe", lambda recorder: None)
    with pytest.raises(RuntimeError):
        run_job("metrics-probe", lambda recorder: (_ for _ in ()).throw(RuntimeError("boom")))
    after = scrape(client)
    runs = "engram_job_runs_total"
    assert value(after, runs, job="metrics-probe", status="succeeded") == 1 + value(
        before, runs, job="metrics-probe", status="succeeded"
    )
    assert value(after, runs, job="metrics-probe", status="failed") == 1 + value(
        before, runs, job="metrics-probe", status="failed"
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_requests_served_by_several_workers_add_up_on_one_page(tmp_path):
    env = base_env(DATABASE_URL=test_database_url(), PROMETHEUS_MULTIPROC_DIR=str(tmp_path), ENGRAM_EMBEDDINGS="off")
    with web_server(env, workers=2, log=tmp_path / "server.log") as base:
        status, body = http_get(base + "/metrics")
        assert status == 200
        before = value(samples(body.decode()), "engram_http_request_duration_seconds_count",
                       route="health", method="GET", status="2xx")  # fmt: skip
        # Concurrent connections, so that both workers take some of them.
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(lambda _: http_get(base + "/health")[0], range(40))) == {200}
        status, body = http_get(base + "/metrics")
        after = value(samples(body.decode()), "engram_http_request_duration_seconds_count",
                      route="health", method="GET", status="2xx")  # fmt: skip
    assert after == before + 40
