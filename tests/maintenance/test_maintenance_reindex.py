"""reindex_hnsw: REINDEX CONCURRENTLY while searches and writes go on; never two at once."""

from __future__ import annotations

import io
import json
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections

from engram_site import locks
from engram_site.jobs import runner
from engram_site.models import JobRun, JobStatus
from engram_site.providers import embedding
from engram_site.scoping import in_this_context
from maintenance import tasks
from maintenance.services import reindex
from memories.models import Memory
from tests.factories import make_client
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 2100  # above retrieval's exact-scan cutoff, so searches walk the HNSW index


def fill_with_random_vectors(bucket, n: int) -> None:
    """Rows with random 384-d vectors, made in SQL (fast; the model is not the point here)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO memories (tenant_id, bucket_id, content, text_hash, text_lemmatized, embedding)
            SELECT %s, %s, 'filler ' || g, md5('filler ' || g), 'filler ' || g,
                   ('[' || array_to_string(ARRAY(SELECT random() - 0.5 FROM generate_series(1, 384)
                                                 WHERE g > 0), ',') || ']')::vector
            FROM generate_series(1, %s) AS g
            """,
            [bucket.tenant_id, bucket.pk, n],
        )


def index_state(name: str) -> tuple[bool, int]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT i.indisvalid, count(*) OVER () FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname LIKE %s",
            [name + "%"],
        )
        rows = cur.fetchall()
    return all(r[0] for r in rows), len(rows)


def test_reindex_runs_while_searches_and_writes_keep_working(bucket):
    fill_with_random_vectors(bucket, ROWS)
    embedding.warm_up()  # load the model before the clock matters
    stop = threading.Event()
    reindexing = threading.Event()
    errors: list[str] = []
    written: list[str] = []
    searches: list[int] = []
    searched_during: list[int] = []
    written_during: list[int] = []

    def searcher():
        client = make_client(bucket.tenant)
        try:
            while not stop.is_set():
                during = reindexing.is_set()
                response = client.post(
                    f"/api/v1/buckets/{bucket.pk}/search", {"query": "filler 42", "mode": "vector"}, format="json"
                )
                if response.status_code != 200 or not response.json()["results"]:
                    errors.append(f"search {response.status_code}: {response.content[:200]}")
                else:
                    searches.append(1)
                    if during and reindexing.is_set():
                        searched_during.append(1)
                stop.wait(0.02)  # a busy client's pace, within the per-token rate limit
        finally:
            connections.close_all()

    def writer(worker: int):
        api = make_client(bucket.tenant)
        try:
            i = 0
            while not stop.is_set():
                during = reindexing.is_set()
                content = f"written by writer {worker} during maintenance, number {i}"
                response = api.post(
                    f"/api/v1/buckets/{bucket.pk}/memories", {"memories": [{"content": content}]}, format="json"
                )
                if response.status_code != 201:
                    errors.append(f"write {response.status_code}: {response.content[:200]}")
                else:
                    written.append(content)
                    if during and reindexing.is_set():
                        written_during.append(1)
                i += 1
                stop.wait(0.02)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=in_this_context(searcher)) for _ in range(2)] + [
        threading.Thread(target=in_this_context(writer), args=(n,)) for n in range(2)
    ]
    for thread in threads:
        thread.start()
    try:
        # Every thread is up (the model is loaded) before the reindex starts.
        wait_for(lambda: (len(written) >= 2 and len(searches) >= 2) or errors, timeout=60, interval=0.05)
        reindexing.set()
        out = io.StringIO()
        call_command("reindex_hnsw", stdout=out, stderr=io.StringIO())
        reindexing.clear()
        # And they go on after it: a few more answers each way.
        after = len(written), len(searches)
        wait_for(lambda: (len(written) > after[0] and len(searches) > after[1]) or errors, timeout=60, interval=0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)

    assert errors == []
    assert searched_during and written_during  # both kept working while the index was rebuilt
    contents = set(
        Memory.objects.filter(bucket=bucket, content__startswith="written by").values_list("content", flat=True)
    )
    assert contents == set(written)  # every acknowledged write landed, once
    summary = json.loads(out.getvalue())
    run = JobRun.objects.get(pk=summary["run_id"])
    assert run.status == JobStatus.SUCCEEDED and run.trigger == "command"
    for name in reindex.HNSW_INDEXES:
        result = run.counts[name]
        assert result["size_before"] > 0 and result["size_after"] > 0 and result["seconds"] >= 0
        assert index_state(name) == (True, 1)  # valid, and no _ccnew/_ccold left behind
    assert run.counts["idx_memories_embedding_hnsw"]["size_before"] > 1_000_000  # 2,100 vectors of 384 16-bit floats


def test_never_two_reindexes_at_once(db):
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:  # another session is reindexing
            cur.execute("SELECT pg_advisory_lock(%s)", [locks.lock_key("reindex_hnsw")])
        with pytest.raises(CommandError, match="already running"):
            call_command("reindex_hnsw", stdout=io.StringIO(), stderr=io.StringIO())
        assert tasks.reindex_hnsw.apply().get()["status"] == "skipped"
        assert not JobRun.objects.filter(name="reindex_hnsw").exists()
        with other.cursor() as cur:  # the other session is done (closing alone releases
            # the lock only once the server notices the disconnect)
            cur.execute("SELECT pg_advisory_unlock(%s)", [locks.lock_key("reindex_hnsw")])
    finally:
        other.close()
    call_command("reindex_hnsw", "--index", "idx_memories_context_hnsw", stdout=io.StringIO(), stderr=io.StringIO())
    run = JobRun.objects.get(name="reindex_hnsw")
    assert list(run.counts) == ["idx_memories_context_hnsw"]


def test_a_leftover_from_an_interrupted_reindex_is_dropped(bucket):
    from django.db import DatabaseError

    fill_with_random_vectors(bucket, 2)
    # What an interrupted concurrent build leaves behind: an invalid index. (Made here by
    # a concurrent build that fails, which needs no superuser rights.)
    with pytest.raises(DatabaseError), connection.cursor() as cur:
        cur.execute("CREATE UNIQUE INDEX CONCURRENTLY idx_memories_embedding_hnsw_ccnew ON memories (bucket_id)")
    assert index_state("idx_memories_embedding_hnsw") == (False, 2)
    outcome = runner.run_job("reindex_hnsw", reindex.hnsw_reindex, lock=True, indexes=["idx_memories_embedding_hnsw"])
    assert outcome.counts["idx_memories_embedding_hnsw"]["dropped_leftovers"] == ["idx_memories_embedding_hnsw_ccnew"]
    assert index_state("idx_memories_embedding_hnsw") == (True, 1)


def test_the_reindex_covers_every_hnsw_index_in_the_schema(db):
    """The job's list is the catalogue's: an HNSW index left off it would never be rebuilt."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
            "WHERE am.amname = 'hnsw' AND c.relkind = 'i'"
        )
        in_schema = {row[0] for row in cur.fetchall()}
    assert in_schema == set(reindex.HNSW_INDEXES)
