"""Planner statistics after a burst of writes (maintenance/services/statistics.py): the worker's
follow-up ANALYZEs what a burst made stale, a small write analyzes nothing, and a new bucket is
planned from its real size right after its burst."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from maintenance import receivers
from maintenance.services.statistics import planner_statistics_refresh
from memories import ranking
from memories.filters import MemoryFilters
from memories.retrieval.neighbours import lift_neighbours
from tenants.models import Bucket
from tests.factories import write

pytestmark = pytest.mark.django_db

BURST = 600


@pytest.fixture
def quick_writes(settings, monkeypatch):
    """Writes that cost little: no model, no graph, no enrichment chain (what is measured here is
    the rows, not their derived data). The statistics check after the commit runs at once in the
    writing thread (ENGRAM_STATS_BACKGROUND is off in the test settings)."""
    monkeypatch.setattr("memories.receivers.enqueue_enrichment", lambda **kwargs: None)
    settings.ENGRAM_EMBEDDINGS_ENABLED = False
    settings.ENGRAM_GRAPH_ENABLED = False
    settings.ENGRAM_KEYS_ENABLED = False
    settings.ENGRAM_ANALYZE_THRESHOLD = 0.05
    settings.ENGRAM_ANALYZE_MIN_ROWS = 200
    assert not settings.ENGRAM_STATS_BACKGROUND
    receivers._written.clear()
    # Statistics that know every row but the ones the test writes: as on a server in use.
    with connection.cursor() as cur:
        cur.execute("ANALYZE memories")
    return settings


def analyze_count(table: str = "memories") -> tuple[int, object]:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")  # counters as they are now, not as first read
        cur.execute("SELECT analyze_count, last_analyze FROM pg_stat_user_tables WHERE relname = %s", [table])
        return cur.fetchone()


def planned_rows(bucket: Bucket) -> float:
    with connection.cursor() as cur:
        cur.execute(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM memories WHERE tenant_id = %s AND bucket_id = %s",
            [bucket.tenant_id, bucket.pk],
        )
        plan = cur.fetchone()[0]
    return float((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]["Plan Rows"])


def rows_read_by_neighbour_lift(bucket: Bucket, ids: list) -> tuple[int, int]:
    """How many rows the plan of a search's neighbour lift (the sequence neighbours of 20
    candidates) reads in its scans when run as the planner plans it now (rows returned plus rows
    a filter removed, times loops), and how many sources it was asked about."""
    config = ranking.resolve(bucket.tenant.settings, None)
    sources = ids[:: len(ids) // 20]
    with CaptureQueriesContext(connection) as statements:
        lift_neighbours(bucket, {memory_id: 1.0 for memory_id in sources}, MemoryFilters(), config)
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statements.captured_queries[-1]["sql"])
        plan = cur.fetchone()[0]
    read, nodes = 0, [(json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        if "Scan" in node["Node Type"]:
            per_loop = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            read += per_loop * node.get("Actual Loops", 1)
        nodes += node.get("Plans", [])
    return read, len(sources)


def burst(bucket: Bucket, django_capture_on_commit_callbacks, rows: int = BURST) -> list:
    with django_capture_on_commit_callbacks(execute=True):
        return write(
            bucket, *(f"Burst memory {i}: the user mentioned item {i} of an imported history." for i in range(rows))
        )


def test_a_burst_into_a_new_bucket_is_analyzed_by_its_follow_up(
    quick_writes, tenant, django_capture_on_commit_callbacks
):
    new = Bucket.objects.create(tenant=tenant, name="imported history")
    count, last = analyze_count()
    burst(new, django_capture_on_commit_callbacks)
    after, analyzed_at = analyze_count()
    assert after == count + 1
    assert analyzed_at != last


def test_a_burst_leaves_the_writing_process_holding_the_buckets_search_statistics(
    quick_writes, tenant, django_capture_on_commit_callbacks, django_assert_num_queries
):
    from engram_site.scoping import scope
    from memories.retrieval import bucket_stats

    new = Bucket.objects.create(tenant=tenant, name="imported history")
    bucket_stats.clear()
    with scope(tenant=None):  # as in production: the follow-up's thread has no tenant scope
        burst(new, django_capture_on_commit_callbacks)
    # The follow-up counted the bucket: its first search here counts nothing, and finds every row.
    with django_assert_num_queries(0):
        size = bucket_stats.size(new)
    assert size["n"] == BURST
    bucket_stats.clear()
    receivers._written.clear()
    quick_writes.ENGRAM_ANALYZE_THRESHOLD = 0  # the follow-up off: nothing counted after the writes
    other = Bucket.objects.create(tenant=tenant, name="another import")
    burst(other, django_capture_on_commit_callbacks)
    with django_assert_num_queries(1):
        assert bucket_stats.size(other)["n"] == BURST


def test_a_small_write_analyzes_nothing(quick_writes, bucket, django_capture_on_commit_callbacks):
    count, last = analyze_count()
    with django_capture_on_commit_callbacks(execute=True):
        ids = write(bucket, "The user likes green tea.", "The user walks the dog at seven.")
    assert analyze_count() == (count, last)
    # Asked anyway (the follow-up of another process's writes), it finds nothing stale.
    assert planner_statistics_refresh(bucket_ids=[bucket.pk])["analyzed"] == {}
    assert analyze_count() == (count, last)
    assert len(ids) == 2


def test_a_new_bucket_is_planned_from_its_rows_right_after_its_burst(
    quick_writes, tenant, django_capture_on_commit_callbacks
):
    # Before the follow-up, the planner took a new bucket for one row (its id is in no statistics)
    # and read it whole for every neighbour source, term and vector walk.
    new = Bucket.objects.create(tenant=tenant, name="imported history")
    ids = burst(new, django_capture_on_commit_callbacks)
    assert planned_rows(new) >= BURST / 2
    # The neighbours of each source are not found by reading the bucket once per source (what a
    # plan from "one row" did: 20 sources x the whole bucket); the sequence index, or one read of
    # the bucket for all sources, is what a plan from its real size does (which of the two depends
    # on what else the table holds).
    read, sources = rows_read_by_neighbour_lift(new, ids)
    assert read < 3 * BURST, (read, sources)


def test_the_knob_at_zero_queues_and_analyzes_nothing(quick_writes, tenant, django_capture_on_commit_callbacks):
    quick_writes.ENGRAM_ANALYZE_THRESHOLD = 0
    new = Bucket.objects.create(tenant=tenant, name="imported history")
    count, last = analyze_count()
    ids = burst(new, django_capture_on_commit_callbacks)
    assert analyze_count() == (count, last)
    # What every search of it is planned from until autovacuum comes: a bucket of about one row.
    # (The neighbour lift's plan then is a near tie between reading the bucket for each source
    # and the sequence index; on the burst measured, it read the bucket: docs/MAINTENANCE.md.)
    assert planned_rows(new) < BURST / 10
    assert len(ids) == BURST
    assert planner_statistics_refresh(bucket_ids=[new.pk]) == {"analyzed": {}, "skipped": ["off"]}


@pytest.mark.django_db(transaction=True)
def test_a_table_locked_by_a_reindex_is_skipped_not_waited_for(settings, monkeypatch, tenant):
    # A REINDEX CONCURRENTLY (the nightly HNSW reindex) holds this lock for minutes.
    import psycopg

    monkeypatch.setattr("memories.receivers.enqueue_enrichment", lambda **kwargs: None)
    settings.ENGRAM_EMBEDDINGS_ENABLED = settings.ENGRAM_GRAPH_ENABLED = settings.ENGRAM_KEYS_ENABLED = False
    settings.ENGRAM_ANALYZE_THRESHOLD, settings.ENGRAM_ANALYZE_MIN_ROWS = 0, 200  # the burst checks nothing
    new = Bucket.objects.create(tenant=tenant, name="imported history")
    write(new, *(f"Imported memory {i}." for i in range(BURST)))
    settings.ENGRAM_ANALYZE_THRESHOLD = 0.05
    params = connection.get_connection_params()
    keep = {k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")}
    with psycopg.connect(**keep) as other:
        other.execute("LOCK TABLE memories IN SHARE UPDATE EXCLUSIVE MODE")
        report = planner_statistics_refresh(bucket_ids=[new.pk])
    assert report["skipped"] == ["memories"] and "memories" not in report["analyzed"]
    assert planner_statistics_refresh(bucket_ids=[new.pk])["analyzed"].keys() == {"memories"}
